"""`crawlplug push | peek | dead requeue | dead drop | seeds | timer`, against the real test Redis.

Most cases run the click group in-process (CliRunner); a few run the real
console script (``.venv/bin/crawlplug``) as a subprocess, and the dead-letter
requeue ends with a real `scrapy crawl` fetching the requeued request.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
import scrapy
from click.testing import CliRunner

from crawlplug import starts
from crawlplug.cli import main
from crawlplug.crawl import Crawl, registry
from crawlplug.errors import DecodeError
from crawlplug.frontier.core import Frontier
from crawlplug.frontier.keys import CrawlKeys
from crawlplug.serializers import JsonSerializer, describe_payload
from crawlplug.starts.seeds import Seeds, make_seed

from .support.fingerprints import recorded

KEYS = CrawlKeys("feedtest")
CRAWLPLUG = str(Path(sys.executable).with_name("crawlplug"))
ROOT = Path(__file__).resolve().parents[1]


def run(*args: str, input: str | None = None):
    base = {"REDIS_URL": None, "CRAWLPLUG_CRAWL": None}
    return CliRunner().invoke(main, list(args), input=input, env=base)


def cli(redis_url: str, *args: str, input: str | None = None, crawl: str = KEYS.crawl):
    return run("--redis-url", redis_url, "--crawl", crawl, *args, input=input)


def real(redis_url: str, *args: str, input: str | None = None, crawl: str = KEYS.crawl):
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "CRAWLPLUG_CRAWL")}
    cmd = [CRAWLPLUG, "--redis-url", redis_url, "--crawl", crawl, *args]
    return subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=60, env=env, cwd="/", check=False)


def start_urls(client: redis.Redis, keys: CrawlKeys = KEYS) -> list[str]:
    return [x.decode() for x in client.lrange(keys.start_urls, 0, -1)]


def payload(url: str, **kwargs) -> bytes:
    return JsonSerializer().dumps(scrapy.Request(url, **kwargs), None)


# -- push -----------------------------------------------------------------------------------

FILE_LINES = [
    "# start URLs for the feed test",  # 1 comment
    "http://example.com/a",  # 2 valid
    "",  # 3 blank
    "example.com/no-scheme",  # 4 bad
    '{"url": "http://example.com/b", "priority": 5, "callback": "parse_item"}',  # 5 valid JSON
    "   ",  # 6 blank
    "ftp://example.com/file",  # 7 bad
    '{"url": "http://example.com/c", "priority": "high"}',  # 8 bad
    "   # indented comment",  # 9 comment
    '{"url": "http://example.com/d",',  # 10 bad JSON
    "https://example.com/e?x=1",  # 11 valid
    '{"url": "http://example.com/f", "callback": "__import__"}',  # 12 bad
]
BAD_LINES = {
    4: "no scheme",
    7: "scheme 'ftp' is not crawlable",
    8: "priority must be an integer",
    10: "not valid JSON",
    12: "callback must be a spider method name",
}
VALID = [
    "http://example.com/a",
    '{"url":"http://example.com/b","priority":5,"callback":"parse_item"}',
    "https://example.com/e?x=1",
]


def _check_file_push(client, err: str, out: str, path: Path) -> None:
    err_lines = [line for line in err.splitlines() if line.strip()]
    # a crawl with nothing in Redis yet: the push creates it and says so (a mistyped --crawl?)
    assert f"crawl {KEYS.crawl!r} is new: created it" in out and "is --crawl right?" in out, out
    assert len(err_lines) == len(BAD_LINES), err
    for (number, reason), line in zip(sorted(BAD_LINES.items()), err_lines):
        assert f"{path}:{number}: skipped:" in line, line
        assert reason in line, line
    assert "pushed 3 start entries" in out and "skipped 5 malformed" in out, out
    assert start_urls(client) == VALID
    for line in start_urls(client):
        starts.parse(line)  # what is stored is valid


def test_push_file_with_blank_comment_and_malformed_lines(redis_url, r, tmp_path):
    path = tmp_path / "starts.txt"
    path.write_text("\n".join(FILE_LINES) + "\n")
    res = cli(redis_url, "push", "--file", str(path))
    assert res.exit_code == 1, res.output
    _check_file_push(r, res.stderr, res.stdout, path)


@pytest.mark.integration  # starts processes of its own
def test_push_file_real_process(redis_url, r, tmp_path):
    path = tmp_path / "starts.txt"
    path.write_text("\r\n".join(FILE_LINES) + "\r\n")  # Windows line ends too
    res = real(redis_url, "push", "-f", str(path))
    assert res.returncode == 1, res.stderr
    _check_file_push(r, res.stderr, res.stdout, path)
    assert "Traceback" not in res.stderr


def test_push_all_valid_exits_0_and_appends(redis_url, r):
    r.rpush(KEYS.start_urls, "http://example.com/already")
    res = cli(redis_url, "push", "http://example.com/1", '{"url": "http://example.com/2", "meta": {"k": 1}}')
    assert res.exit_code == 0, res.output
    assert "pushed 2 start entries to crawl 'feedtest' (3 waiting)" in res.stdout
    assert start_urls(r) == [
        "http://example.com/already",
        "http://example.com/1",
        '{"url":"http://example.com/2","meta":{"k":1}}',
    ]


def test_push_bad_argument_names_it(redis_url, r):
    res = cli(redis_url, "push", "http://example.com/ok", "nonsense", "http://")
    assert res.exit_code == 1
    assert "argument 2: skipped: URL has no scheme" in res.stderr
    assert "argument 3: skipped: URL has no host" in res.stderr
    assert start_urls(r) == ["http://example.com/ok"]


def test_push_from_stdin(redis_url, r):
    text = "http://example.com/s1\n\n# comment\nexample.org/x\nhttp://example.com/s2\n"
    res = cli(redis_url, "push", "-", input=text)
    assert res.exit_code == 1, res.output
    assert "stdin:4: skipped:" in res.stderr and "no scheme" in res.stderr
    assert start_urls(r) == ["http://example.com/s1", "http://example.com/s2"]
    # --file - reads stdin too
    res = cli(redis_url, "push", "--file", "-", input="http://example.com/s3\n")
    assert res.exit_code == 0, res.output
    assert start_urls(r)[-1] == "http://example.com/s3"


@pytest.mark.integration  # starts processes of its own
def test_push_from_stdin_real_process(redis_url, r):
    res = real(redis_url, "push", "-", input="http://example.com/p1\nhttp://example.com/p2\n")
    assert res.returncode == 0, res.stderr
    assert "pushed 2 start entries" in res.stdout
    assert start_urls(r) == ["http://example.com/p1", "http://example.com/p2"]


@pytest.mark.integration  # starts processes of its own
def test_push_entry_with_a_lone_surrogate_does_not_crash(redis_url, r):
    """Valid JSON, but its escaped lone surrogate cannot be stored as UTF-8: the entry is
    reported and skipped like any malformed line; the others go in."""
    text = 'http://example.com/ok1\n{"url": "http://example.com/s", "meta": {"x": "\\ud800"}}\nhttp://example.com/ok2\n'
    res = real(redis_url, "push", "-", input=text)
    assert "Traceback" not in res.stderr, res.stderr
    assert res.returncode == 1, res.stderr
    assert "stdin:2: skipped:" in res.stderr
    assert start_urls(r) == ["http://example.com/ok1", "http://example.com/ok2"]


def test_push_nothing_is_an_error(redis_url, r):
    res = cli(redis_url, "push")
    assert res.exit_code == 1 and "nothing to push" in res.stderr
    assert not r.exists(KEYS.start_urls)


def test_push_only_malformed(redis_url, r):
    res = cli(redis_url, "push", "-", input="nope\nftp://x/\n")
    assert res.exit_code == 1
    assert "pushed 0 start entries" in res.stdout and "skipped 2 malformed" in res.stdout
    assert not r.exists(KEYS.start_urls)


# -- peek -----------------------------------------------------------------------------------


def test_peek_shows_queued_requests_and_start_entries(redis_url, r):
    frontier = Frontier(r, KEYS)
    frontier.admit(
        [
            (os.urandom(20), -5.0, payload("http://example.com/high", priority=5)),
            (os.urandom(20), 0.0, payload("http://example.com/low")),
            (os.urandom(20), -1.0, payload("http://example.com/post", method="POST")),
        ]
    )
    Crawl.of(frontier).push_starts(["http://example.com/start1", "http://example.com/start2"])
    res = cli(redis_url, "peek")
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[0] == "crawl 'feedtest': 3 queued, 2 start entries waiting"
    urls = [line.split()[1] for line in lines[1:4]]
    assert urls == ["http://example.com/high", "http://example.com/post", "http://example.com/low"]
    assert "priority=5" in lines[1] and "method=POST" in lines[2]
    assert lines[4] == "start entries:"
    assert [x.strip() for x in lines[5:]] == ["http://example.com/start1", "http://example.com/start2"]
    # -n limits; --json for scripts; peek changes nothing
    res = cli(redis_url, "peek", "-n", "1", "--json")
    assert res.exit_code == 0, res.output
    rows = [json.loads(x) for x in res.stdout.splitlines()]
    assert rows[0]["url"] == "http://example.com/high" and rows[0]["priority"] == 5
    assert rows[1] == {"start_entry": "http://example.com/start1"}
    assert len(rows) == 2
    assert Crawl.of(frontier).status()["queued"] == 3 and len(start_urls(r)) == 2


def test_peek_empty_crawl(redis_url, r):
    registry.register(r, KEYS)  # a crawl that exists (a node or `push` started it) with nothing queued
    res = cli(redis_url, "peek")
    assert res.exit_code == 0
    assert res.stdout.strip() == "crawl 'feedtest': 0 queued, 0 start entries waiting"


def test_a_command_naming_an_unknown_crawl_says_so_and_lists_the_known_ones(redis_url, r):
    registry.register(r, CrawlKeys("shop"))
    Crawl(r, CrawlKeys("books")).push_starts(["http://example.com/"])  # from before the registry
    res = cli(redis_url, "peek")
    assert res.exit_code == 1
    assert "no crawl 'feedtest' on this Redis; known crawls: 'books', 'shop'" in res.output
    for args in (["dead", "list"], ["pause"], ["purge", "--yes"], ["dead", "requeue", "--all"]):
        res = cli(redis_url, *args)
        assert res.exit_code == 1 and "no crawl 'feedtest'" in res.output, (args, res.output)
    assert r.llen(KEYS.start_urls) == 0 and not r.exists(KEYS.control), "nothing was written"
    # every read of it too: the status, its runs, its report, its items, its alert rules
    for args in (
        ["status"],
        ["status", "--json"],
        ["crawls", "show"],
        ["report"],
        ["items", "count"],
        ["alerts", "list"],
        ["stop"],
        ["limits"],
    ):
        res = cli(redis_url, *args)
        assert res.exit_code == 1, (args, res.output)
        assert "no crawl 'feedtest' on this Redis; known crawls: 'books', 'shop'" in res.output, (args, res.output)
    # an alert rule on it is refused (it would never fire), unless the crawl is to be created
    res = cli(redis_url, "alerts", "add", "--when", "silent_nodes > 0")
    assert res.exit_code == 1 and "known crawls: 'books', 'shop'" in res.output and "give --create" in res.output
    assert registry.known_crawls(r) == ["books", "shop"], "a refused command creates nothing"
    res = cli(redis_url, "alerts", "add", "--when", "silent_nodes > 0", "--create", "--crawl", "early")
    assert res.exit_code == 0 and "crawl 'early' is new: created it" in res.output, res.output
    assert registry.known_crawls(r) == ["books", "early", "shop"]
    assert cli(redis_url, "items", "count", "--key", "myspider:items").output.strip() == "0", "--key: no crawl"
    # a command that writes into a crawl that does not exist creates it, and says so
    res = cli(redis_url, "push", "http://example.com/x")
    assert res.exit_code == 0, res.output
    assert "crawl 'feedtest' is new: created it" in res.stdout
    assert "feedtest" in registry.known_crawls(r)
    res = cli(redis_url, "push", "http://example.com/y")
    assert "is new" not in res.stdout, "said once"


# -- dead letters ------------------------------------------------------------------------


def _dead_letters(client, keys: CrawlKeys, urls: list[str]) -> Frontier:
    """Admit ``urls``, lease them, and move each to the dead letters (in order)."""
    frontier = Frontier(client, keys, node_id="test-node")
    frontier.admit([(os.urandom(20), float(i), payload(u)) for i, u in enumerate(urls)])
    leased = frontier.pop(len(urls))
    assert len(leased) == len(urls)
    for lease in sorted(leased, key=lambda x: x.id):
        assert frontier.dead_letter(lease.id, f"test reason {lease.id}")
    assert client.llen(keys.dead) == len(urls)
    return frontier


def _dead_urls(client, keys: CrawlKeys = KEYS) -> list[str]:
    return [describe_payload(x.payload)["url"] for x in Crawl.of(Frontier(client, keys)).dead_letters()]


def test_dead_drop_removes_exactly_the_chosen_indexes(redis_url, r):
    urls = [f"http://example.com/d{i}" for i in range(6)]
    _dead_letters(r, KEYS, urls)
    res = cli(redis_url, "dead", "drop", "1", "3", "4", "--yes")
    assert res.exit_code == 0, res.output
    assert "dropped 3 dead letters" in res.stdout
    assert _dead_urls(r) == [urls[0], urls[2], urls[5]]
    # without --yes it asks; "n" keeps everything
    res = cli(redis_url, "dead", "drop", "0", input="n\n")
    assert res.exit_code == 1 and "Nothing deleted" in res.stderr
    assert _dead_urls(r) == [urls[0], urls[2], urls[5]]
    res = cli(redis_url, "dead", "drop", "0", input="y\n")
    assert res.exit_code == 0 and _dead_urls(r) == [urls[2], urls[5]]
    # an index out of range removes nothing
    res = cli(redis_url, "dead", "drop", "0", "7", "--yes")
    assert res.exit_code == 1 and "no dead letter at index 7" in res.stderr
    assert _dead_urls(r) == [urls[2], urls[5]]
    # neither indexes nor --all
    assert cli(redis_url, "dead", "drop", "--yes").exit_code == 1
    res = cli(redis_url, "dead", "drop", "--all", "--yes")
    assert res.exit_code == 0 and r.llen(KEYS.dead) == 0


def test_dead_drop_keeps_letters_appended_meanwhile(redis_url, r):
    """Dropping by index removes those entries and nothing else, even if equal letters exist."""
    _dead_letters(r, KEYS, ["http://example.com/x", "http://example.com/y"])
    r.rpush(KEYS.dead, r.lindex(KEYS.dead, 0))  # a byte-identical copy of letter 0 at index 2
    res = cli(redis_url, "dead", "drop", "0", "--yes")
    assert res.exit_code == 0
    assert _dead_urls(r) == ["http://example.com/y", "http://example.com/x"]


def test_dead_requeue_then_a_crawl_fetches_it(redis_url, r, make_shop, crawl):
    shop = make_shop(items=10)
    keys = CrawlKeys("redisshop")
    wanted = shop.url + "/item/3/?dead=1"
    other = shop.url + "/item/4/?dead=2"
    _dead_letters(r, keys, [wanted, other])
    # an invalid start entry in the dead letters too: requeue keeps it dead
    frontier = Frontier(r, keys, node_id="test-node")
    Crawl.of(frontier).push_starts(["http://example.com/bad-entry"])
    [(lease_id, _)] = frontier.take_starts(1)
    frontier.dead_letter(lease_id, "invalid start entry: test")
    res = cli(redis_url, "dead", "requeue", "0", "2", crawl="redisshop")
    assert res.exit_code == 0, res.output
    assert "requeued 1 dead letters" in res.stdout
    assert "[2] kept:" in res.stderr and "start entry" in res.stderr
    assert _dead_urls_or_raw(r, keys) == [other, "http://example.com/bad-entry"]
    assert Crawl.of(Frontier(r, keys)).status()["queued"] == 1
    # a RedisSpider node, no start entry: it crawls the requeued request and closes when done
    node = crawl(
        "redisshop",
        settings={
            "REDIS_URL": redis_url,
            "CRAWLPLUG_IDLE_CLOSE": 2,
            "CRAWLPLUG_HEARTBEAT": 0.5,
            "CRAWLPLUG_LEASE_TIMEOUT": 5,
        },
    )
    assert node.wait(40) == 0, node.text()[-3000:]
    assert shop.hits["/item/3/?dead=1"] == 1, dict(shop.hits)
    assert "/item/4/?dead=2" not in shop.hits, "a letter not requeued stays dead"
    assert r.llen(keys.dead) == 2


def _dead_urls_or_raw(client, keys: CrawlKeys) -> list[str]:
    out = []
    for letter in Crawl.of(Frontier(client, keys)).dead_letters():
        try:
            out.append(describe_payload(letter.payload)["url"])
        except (ValueError, TypeError):
            out.append(letter.payload.decode())
    return out


def test_dead_requeue_all_bypasses_dedup_and_resets_deliveries(redis_url, r):
    urls = [f"http://example.com/r{i}" for i in range(3)]
    _dead_letters(r, KEYS, urls)
    seen = len(recorded(r, KEYS))
    res = cli(redis_url, "dead", "requeue", "--all")
    assert res.exit_code == 0, res.output
    assert "requeued 3 dead letters" in res.stdout
    assert r.llen(KEYS.dead) == 0
    assert len(recorded(r, KEYS)) == seen, "requeue does not touch dedup"
    leased = Frontier(r, KEYS).pop(10)
    assert sorted(describe_payload(x.payload)["url"] for x in leased) == urls
    assert all(x.deliveries == 1 for x in leased)


# -- seeds and timer ----------------------------------------------------------------------


def test_seeds_add_list_remove(redis_url, r):
    res = cli(
        redis_url,
        "seeds",
        "add",
        "http://example.com/daily",
        '{"url": "http://example.com/api", "method": "POST", "q": "x"}',
        "--every",
        "1d",
    )
    assert res.exit_code == 0, res.output
    assert res.stdout.count("(every 86400s), first run now") == 2, res.stdout
    res = cli(redis_url, "seeds", "add", "http://example.com/night", "--cron", "10 1 * * *", "--later")
    assert res.exit_code == 0, res.output
    assert "cron '10 1 * * *' UTC" in res.stdout and "01:10:00 UTC" in res.stdout, res.stdout

    res = cli(redis_url, "seeds", "list")
    assert res.exit_code == 0, res.output
    assert res.stdout.splitlines()[0] == "3 seeds in crawl 'feedtest'"
    assert "http://example.com/daily  every 86400s  last never" in res.stdout
    night = next(line for line in res.stdout.splitlines() if "night" in line)
    assert "01:10:00 UTC" in night.split("next")[1]
    rows = json.loads(cli(redis_url, "seeds", "list", "--json").stdout)
    by_url = {row["url"]: row for row in rows}
    assert set(by_url) == {"http://example.com/daily", "http://example.com/api", "http://example.com/night"}
    assert by_url["http://example.com/night"]["cron"] == "10 1 * * *"
    assert json.loads(by_url["http://example.com/api"]["entry"])["formdata"] == {"q": "x"}

    res = cli(redis_url, "seeds", "remove", by_url["http://example.com/api"]["id"], "http://example.com/night")
    assert res.exit_code == 0, res.output
    assert "removed 2 seeds" in res.stdout
    assert [s.entry for s in Seeds(r, KEYS).all().values()] == ["http://example.com/daily"]
    res = cli(redis_url, "seeds", "remove", "http://example.com/nope")
    assert res.exit_code == 1 and "no seed http://example.com/nope" in res.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["http://example.com/"], "exactly one of --every"),
        (["http://example.com/", "--every", "1d", "--cron", "10 1 * * *"], "exactly one of --every"),
        (["http://example.com/", "--every", "soon"], "--every 'soon'"),
        (["http://example.com/", "--cron", "every night"], "not a valid cron"),
        (["example.com", "--every", "1d"], "no scheme"),
        (["http://example.com/", "--cron", "10 1 * * *", "--tz", "Nowhere/City"], "unknown time zone"),
    ],
)
def test_seeds_add_refuses(redis_url, r, args, message):
    res = cli(redis_url, "seeds", "add", *args)
    assert res.exit_code != 0
    assert message in res.output, res.output
    assert "Traceback" not in res.output
    assert not r.exists(KEYS.seeds)


@pytest.mark.integration  # starts processes of its own
def test_timer_once_fires_a_due_seed(redis_url, r):
    book = Seeds(r, KEYS)
    sec, _ = r.time()
    now = sec * 1000
    book.add(make_seed("http://example.com/due", every="1h"), first_run_ms=now - 5000)
    book.add(make_seed("http://example.com/later", every="1h"), first_run_ms=now + 3_600_000)
    res = cli(redis_url, "timer", "--once")
    assert res.exit_code == 0, res.output
    assert "fired 1 seeds of crawl 'feedtest'" in res.stdout
    assert start_urls(r) == ["http://example.com/due"]
    # not again: the next run is an hour later
    res = real(redis_url, "timer", "--once")
    assert res.returncode == 0, res.stderr
    assert res.stdout == ""
    assert start_urls(r) == ["http://example.com/due"]


@pytest.mark.integration  # starts processes of its own
def test_seeds_add_and_timer_real_processes(redis_url, r):
    res = real(redis_url, "seeds", "add", "http://example.com/real", "--every", "90s")
    assert res.returncode == 0, res.stderr
    assert "every 90s" in res.stdout
    [added] = json.loads(real(redis_url, "seeds", "list", "--json").stdout)
    res = real(redis_url, "timer", "--once")
    assert res.returncode == 0, res.stderr
    assert "fired 1 seeds" in res.stdout
    assert start_urls(r) == ["http://example.com/real"]
    res = real(redis_url, "seeds", "list", "--json")
    [row] = json.loads(res.stdout)
    # fired (a moment after it was due), and due again one period after it was due: the grid
    assert row["last_run_ms"] >= added["next_run_ms"]
    assert row["next_run_ms"] == added["next_run_ms"] + 90_000


@pytest.mark.integration  # starts processes of its own
def test_timer_loop_keeps_firing(redis_url, r):
    """`crawlplug timer` (no --once) fires a 1 s seed again and again until stopped."""
    Seeds(r, KEYS).add(make_seed("http://example.com/tick", every="1s"))
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "CRAWLPLUG_CRAWL")}
    proc = subprocess.Popen(
        [CRAWLPLUG, "--redis-url", redis_url, "--crawl", KEYS.crawl, "timer", "--interval", "0.2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd="/",
    )
    try:
        deadline = time.monotonic() + 15
        while r.llen(KEYS.start_urls) < 3:
            assert proc.poll() is None, proc.stderr.read()
            assert time.monotonic() < deadline, "the timer did not fire three times in 15 s"
            time.sleep(0.05)
    finally:
        proc.terminate()
        proc.wait(10)


# -- issue 18: a misspelt key of a JSON entry is refused, not made a form field --------------------


@pytest.mark.integration  # starts processes of its own
def test_push_refuses_a_near_miss_key_with_its_line_and_the_key_meant(redis_url, r, tmp_path):
    """`crawlplug push -f`, as a user runs it: "callbak" would have become ?callbak=... on the
    URL with the default callback; it is refused, naming the line and the key meant, and a
    real form field (scrapy-redis's format) still goes in as one."""
    entries = tmp_path / "entries.jsonl"
    lines = [
        '{"url": "http://shop.test/item/1/", "callbak": "parse_item"}',
        '{"url": "http://shop.test/item/2/", "prority": 5}',
        '{"url": "http://shop.test/search/", "q": "lamp", "page": 2}',
        '{"url": "http://shop.test/item/3/", "dont_filtr": true}',
    ]
    entries.write_text("".join(f"{line}\n" for line in lines))
    r.hset(KEYS.stats, "enqueued", 0)  # the crawl exists: no "nothing else on this Redis" note
    res = real(redis_url, "push", "-f", str(entries))
    assert res.returncode == 1, res.stderr
    why = "(an entry's other keys are form fields, scrapy-redis's format; put a field of that name under \"formdata\")"
    assert res.stderr.splitlines() == [
        f"crawlplug: {entries}:{n}: skipped: unknown key {key!r}: did you mean {meant!r}? {why}"
        for n, key, meant in ((1, "callbak", "callback"), (2, "prority", "priority"), (4, "dont_filtr", "dont_filter"))
    ]
    assert "pushed 1 start entries" in res.stdout and "skipped 3 malformed" in res.stdout
    [stored] = start_urls(r)
    assert json.loads(stored)["formdata"] == {"q": "lamp", "page": 2}

    # --strict: every key that is not a request attribute is refused, the form field too
    r.delete(KEYS.start_urls)
    res = real(
        redis_url,
        "push",
        "--strict",
        '{"url": "http://shop.test/search/", "q": "lamp"}',
        '{"url": "http://shop.test/search/", "formdata": {"q": "lamp"}}',
    )
    assert res.returncode == 1
    assert "argument 1: skipped: unknown key 'q' (strict: only body, callback" in res.stderr
    assert "argument 2" not in res.stderr
    assert [json.loads(x)["formdata"] for x in start_urls(r)] == [{"q": "lamp"}]


@pytest.mark.parametrize("key", ["callbak", "prority", "dont_filtr", "cb_kwarg", "header", "Callback", "errbak"])
def test_near_misses_of_known_keys_are_refused(key):
    with pytest.raises(DecodeError, match=f"unknown key '{key}': did you mean '"):
        starts.parse(json.dumps({"url": "http://e.com/", key: "x"}))


@pytest.mark.parametrize(
    "key",
    [
        "q",
        "page",
        "query",
        "name",
        "email",
        "format",
        "filter",
        "user",
        "password",
        "token",
        "search",
        "lang",
        "sort",
        "order",
        "limit",
        "offset",
        "id",
        "data",
    ],
)
def test_common_form_field_names_stay_form_fields(key):
    assert starts.parse(json.dumps({"url": "http://e.com/", key: "x"})).formdata == {key: "x"}


@pytest.mark.integration  # starts processes of its own
def test_pushing_to_a_crawl_that_does_not_exist_says_so(redis_url, r):
    """A mistyped --crawl: the push succeeds (a node of that crawl may start later) but says
    that nothing else of that crawl is on this Redis; a known crawl gets no such note."""
    res = real(redis_url, "push", "http://shop.test/", crawl="shpo")
    assert res.returncode == 0 and "pushed 1 start entries to crawl 'shpo'" in res.stdout
    assert (
        "crawl 'shpo' is new: created it (nodes of a spider named 'shpo', or with CRAWLPLUG_CRAWL_ID=shpo, "
        "crawl it; is --crawl right?)"
    ) in res.stdout, res.stdout
    again = real(redis_url, "push", "http://shop.test/2", crawl="shpo")
    assert again.returncode == 0 and "is new" not in again.stdout, "it exists now"
    paused = real(redis_url, "pause", crawl="nosuch")
    assert paused.returncode == 1 and "no crawl 'nosuch' on this Redis; known crawls: 'shpo'" in paused.stderr
