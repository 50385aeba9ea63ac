"""The shape of the package holds: the import contracts (setup.cfg, run by lint-imports),
a place in them for every room, one frontier interface, and the dotted paths users put in
their settings."""

from __future__ import annotations

import ast
import configparser
import inspect
import pkgutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from scrapy.utils.misc import load_object

import crawlplug
import crawlplug.frontier.core
from crawlplug.frontier import CrawlFrontier, Frontier
from crawlplug.frontier.keys import CrawlKeys

ROOT = Path(__file__).resolve().parent.parent

#: what users write in settings.py (docs/settings.md, docs/migrating.md): API, kept working
SETTINGS_PATHS = [
    "crawlplug.Addon",
    "crawlplug.addon.Addon",
    "crawlplug.scheduler.Scheduler",
    "crawlplug.dupefilters.RedisSetDupeFilter",
    "crawlplug.dupefilters.RedisBloomDupeFilter",
    "crawlplug.dupefilters.ExpiringDupeFilter",
    "crawlplug.queues.PriorityQueue",
    "crawlplug.queues.FifoQueue",
    "crawlplug.queues.LifoQueue",
    "crawlplug.queues.DomainQueue",
    "crawlplug.spiders.RedisSpider",
    "crawlplug.spiders.RedisCrawlSpider",
    "crawlplug.pipelines.RedisItemPipeline",
    "crawlplug.stats.RedisStatsCollector",
    "crawlplug.legacy.ScrapyRedisDupeFilter",
    "crawlplug.probes.errorsamples.ErrorSamplesMiddleware",
    "crawlplug.probes.domainstats.DomainStatsMiddleware",
    "crawlplug.scrapyd.node.ScrapydJob",
    "crawlplug.errorsamples.ErrorSamplesMiddleware",
    "crawlplug.domainstats.DomainStatsMiddleware",
    "crawlplug.scrapydjob.ScrapydJob",
    "crawlplug.serializers.JsonSerializer",
    "crawlplug.serializers.PickleSerializer",
]


#: a module's old path -> where it lives now (issue 38): the old one, one re-export per name, is
#: kept for what projects write in their settings and scripts (bench/ among them) import
MOVED = {
    "crawlplug.domainstats.DomainStatsMiddleware": "crawlplug.probes.domainstats.DomainStatsMiddleware",
    "crawlplug.errorsamples.ErrorSamplesMiddleware": "crawlplug.probes.errorsamples.ErrorSamplesMiddleware",
    "crawlplug.scrapydjob.ScrapydJob": "crawlplug.scrapyd.node.ScrapydJob",
    "crawlplug.connection.client_from_url": "crawlplug.server.clients.client_from_url",
    "crawlplug.connection.from_settings": "crawlplug.server.clients.from_settings",
    "crawlplug.embedded.find_redis_server": "crawlplug.server.embedded.find_redis_server",
    "crawlplug.embedded.stop": "crawlplug.server.embedded.stop",
    "crawlplug.starts.parse": "crawlplug.starts.entry.parse",
    "crawlplug.starts.build": "crawlplug.starts.entry.build",
}


def _contracts() -> configparser.ConfigParser:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    return cfg


@pytest.mark.parametrize("path", SETTINGS_PATHS)
def test_a_dotted_path_of_the_settings_loads(path):
    obj = load_object(path)
    assert inspect.isclass(obj), f"{path} is {obj!r}"
    assert obj.__name__ == path.rsplit(".", 1)[1]


@pytest.mark.parametrize(("old", "new"), sorted(MOVED.items()))
def test_an_old_path_loads_what_the_new_one_does(old, new):
    """A project's settings (or a script) that name a moved module's old path get the very object
    the new path names, with no warning: Scrapy's load_object, as for DOWNLOADER_MIDDLEWARES."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load_object(old) is load_object(new)


def test_every_room_has_a_layer():
    layers = _contracts()["importlinter:contract:layers"]["layers"]
    placed = {name.strip() for line in layers.splitlines() for name in line.split("|") if name.strip()}
    rooms = {f"crawlplug.{m.name}" for m in pkgutil.iter_modules(crawlplug.__path__)}
    # the modules of these sit on different layers: compat's names table under the settings
    # reader; the history's store under the Scheduler that samples it, its reading beside the
    # status snapshot it joins
    for split in ("compat", "history", "reports"):
        rooms.discard(f"crawlplug.{split}")
        rooms |= {f"crawlplug.{split}.{m.name}" for m in pkgutil.iter_modules([str(ROOT / "crawlplug" / split)])}
    unplaced = sorted(r for r in rooms if r not in placed and not r.startswith("crawlplug.web.static"))
    assert not unplaced, f"rooms with no layer in setup.cfg's [importlinter:contract:layers]: {unplaced}"
    assert not sorted(placed - rooms), "layers name rooms that do not exist"


def test_the_architecture_page_draws_the_layers_the_contract_holds():
    """docs/architecture.md's layer diagram is the contract's, line for line (a room added to
    setup.cfg and not to the page, or the other way round, fails here)."""
    layers = _contracts()["importlinter:contract:layers"]["layers"]
    contract = [line.strip().replace("crawlplug.", "") for line in layers.splitlines() if line.strip()]
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    drawn = page.split("## Layers", 1)[1].split("```", 2)[1].strip().splitlines()
    assert [" | ".join(x.strip() for x in line.split("|")) for line in drawn] == contract


def test_no_contract_ignores_an_import():
    cfg = _contracts()
    contracts = [s for s in cfg.sections() if s.startswith("importlinter:contract:")]
    assert len(contracts) >= 5
    assert not [s for s in contracts if cfg[s].get("ignore_imports")]


@pytest.mark.integration  # starts processes of its own
def test_the_import_contracts_are_kept():
    linter = Path(sys.executable).with_name("lint-imports")
    if not linter.exists():
        pytest.skip("import-linter is not installed (pip install -e '.[test]')")
    out = subprocess.run([str(linter), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "0 broken" in out.stdout


#: what a frontier once left on itself for the node to read after a call: now in the calls' results
_LEFT_STATE = ("next_ready_ms", "queued_seen", "start_entries", "paused", "run_state", "data_lost", "start_urls_kind")


def test_one_frontier_class_implements_the_protocol_over_any_number_of_parts(r):
    """One implementation: the frontier of an unsharded crawl and of a sharded one are the
    same class (no second class to keep in step with it), and both are the Protocol."""
    classes = [
        obj
        for name, obj in inspect.getmembers(crawlplug.frontier.core, inspect.isclass)
        if obj.__module__ == "crawlplug.frontier.core" and not name.startswith("_")
    ]
    assert [c.__name__ for c in classes] == ["Frontier"]
    one, four = Frontier(r, CrawlKeys("shape-one")), Frontier(r, CrawlKeys("shape-four"), shards=4)
    assert isinstance(one, CrawlFrontier) and isinstance(four, CrawlFrontier)
    assert type(one) is type(four)
    assert [len(one.parts()), len(four.parts())] == [1, 5]


def test_the_hot_path_protocol_is_small_and_answers_in_results():
    """A node's frontier is at most 15 members (Scrapy's queue protocol is 4, dramatiq's
    Broker and Consumer split the same way), and what a call found comes back in its
    result (crawlplug.frontier.results), not as state left on the frontier."""
    members = [n for n in dir(CrawlFrontier) if not n.startswith("_")]
    fields = set(CrawlFrontier.__annotations__)
    assert len(set(members) | fields) <= 15, sorted(set(members) | fields)
    assert not fields & set(_LEFT_STATE), sorted(fields & set(_LEFT_STATE))
    hints = {
        name: inspect.signature(getattr(CrawlFrontier, name)).return_annotation
        for name in ("admit_and_pop", "heartbeat_and_reap", "idle_state")
    }
    assert hints == {
        "admit_and_pop": "tuple[AdmitResult | None, Leases]",
        "heartbeat_and_reap": "Beat",
        "idle_state": "Idle",
    }, hints


def test_a_long_module_says_why_it_is_long():
    """A module of more than about 400 lines carries a reason ("Its size: ...") in its docstring."""
    long = []
    for path in sorted((ROOT / "crawlplug").rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        if source.count("\n") > 420:
            doc = ast.get_docstring(ast.parse(source)) or ""
            if "Its size:" not in doc:
                long.append(f"{path.relative_to(ROOT)} ({source.count(chr(10))} lines)")
    assert not long, f"long modules that do not say why: {long}"


#: the Scheduler's parts, as the others hold them (crawlplug.scheduler.core builds them)
SCHEDULER_PARTS = {"batch", "liveness", "entries", "outage", "control", "politeness", "termination", "report"}


def _writes_to_parts(source: str) -> list[tuple[int, str]]:
    """(line, "part.attribute") of each assignment to another part's attribute in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        else:
            continue
        for target in targets:
            for item in target.elts if isinstance(target, ast.Tuple) else [target]:
                if not isinstance(item, ast.Attribute):
                    continue
                owner = item.value
                if isinstance(owner, ast.Attribute) and isinstance(owner.value, ast.Name) and owner.value.id == "self":
                    name = owner.attr  # self.batch.x = ...
                elif isinstance(owner, ast.Name) and owner.id != "self":
                    name = owner.id  # batch.x = ... (a local holding a part)
                else:
                    continue
                if name in SCHEDULER_PARTS:
                    found.append((node.lineno, f"{name}.{item.attr}"))
    return found


def test_no_scheduler_part_writes_another_parts_state():
    """Each part of the Scheduler owns its state: the others read it and change it through
    the owner's methods (Batch.pause, drain, close_run, new_run, saw_queued, wake; ...)."""
    writes = [
        f"{path.relative_to(ROOT)}:{line} {what}"
        for path in sorted((ROOT / "crawlplug" / "scheduler").glob("*.py"))
        for line, what in _writes_to_parts(path.read_text(encoding="utf-8"))
    ]
    assert not writes, f"a part writes another's state: {writes}"
    # the check sees what it must
    assert _writes_to_parts("def f(self, batch):\n    self.batch.paused = True\n    batch.queued_seen += 1\n") == [
        (2, "batch.paused"),
        (3, "batch.queued_seen"),
    ]
