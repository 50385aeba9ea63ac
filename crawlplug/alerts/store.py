"""Alert rules in Redis: each crawl's rules, their state, and the log of what fired.

A rule (``crawlplug alerts add``) is a JSON object in the crawl's ``alerts`` hash
under its id: ``when`` (the condition's text, parsed by crawlplug.alerts.rules),
``notify`` (Apprise URLs), ``cooldown`` (s). The crawls that have rules are named in
``<prefix>:alerting`` (a set), so an evaluator finds them without scanning the Redis.

One process at a time evaluates a crawl's rules: the leader of its ``alerts`` duty
(:class:`crawlplug.crawl.leadership.Leadership` with ``duty="alerts"``: a lease
with a fencing token, ``lua/leader.lua``). It records each rule's state in
``alertstate`` and each change (fired, cleared) on ``alertlog`` through
``lua/alert.lua``, which refuses the write unless it still leads with that token.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import redis

from ..crawl.leadership import Leadership
from ..frontier.keys import CrawlKeys
from ..frontier.store import json_record, multi, text

__all__ = ["LOG_KEEP", "alerting_crawls", "delete", "events", "index_key", "put", "record", "rules", "states"]

#: Events the crawl's alert log keeps.
LOG_KEEP = 200


def index_key(prefix: str = "crawlplug") -> str:
    """The set naming every crawl that has alert rules on this Redis."""
    return f"{prefix}:alerting"


def _dumps(value: Mapping[str, object]) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def put(client: redis.Redis, keys: CrawlKeys, rule: Mapping[str, object]) -> bool:
    """Store rule ``rule["id"]`` (replacing one of that id: True if it is new); its state starts over."""
    pipe = multi(client)  # the crawl's keys and the Redis-wide index: two slots on a cluster
    rule_id = str(rule["id"])
    pipe.hset(keys.alerts, rule_id, _dumps(rule))
    pipe.hdel(keys.alertstate, rule_id)
    pipe.sadd(index_key(keys.prefix), keys.crawl)
    return bool(pipe.execute()[0])


def delete(client: redis.Redis, keys: CrawlKeys, rule_id: str) -> bool:
    """Delete one rule and its state; False if the crawl has no rule of that id."""
    pipe = client.pipeline(transaction=True)
    pipe.hdel(keys.alerts, rule_id)
    pipe.hdel(keys.alertstate, rule_id)
    removed = bool(pipe.execute()[0])
    if not client.exists(keys.alerts):
        client.srem(index_key(keys.prefix), keys.crawl)
    return removed


def rules(client: redis.Redis, keys: CrawlKeys) -> dict[str, dict[str, object]]:
    """Rule id -> rule; an unreadable one is given as {"id": ..., "unreadable": raw text}."""
    out: dict[str, dict[str, Any]] = {}
    for raw_id, raw in client.hgetall(keys.alerts).items():
        rule_id = text(raw_id)
        rule = json_record(raw)
        out[rule_id] = (
            rule if rule is not None and "raw" not in rule else {"id": rule_id, "unreadable": text(raw)[:200]}
        )
    return dict(sorted(out.items()))


def states(client: redis.Redis, keys: CrawlKeys) -> dict[str, dict[str, object]]:
    """Rule id -> its recorded state (rules never evaluated have none)."""
    out = {}
    for raw_id, raw in client.hgetall(keys.alertstate).items():
        state = json_record(raw)
        if state is not None and "raw" not in state:
            out[text(raw_id)] = state
    return out


def events(client: redis.Redis, keys: CrawlKeys, n: int = 50) -> list[dict[str, object]]:
    """The crawl's last alert events (fired, cleared), newest first."""
    found = (json_record(x) for x in client.lrange(keys.alertlog, 0, n - 1))
    return [e for e in found if e is not None and "raw" not in e]


def alerting_crawls(client: redis.Redis, prefix: str = "crawlplug") -> list[str]:
    """The crawls with alert rules (the index); a crawl whose rules are gone is dropped from it."""
    out = []
    for crawl in sorted(text(x) for x in client.smembers(index_key(prefix))):
        if client.exists(CrawlKeys(crawl, prefix).alerts):
            out.append(crawl)
        else:
            client.srem(index_key(prefix), crawl)
    return out


def record(lead: Leadership, rule_id: str, state: Mapping[str, object], event: Mapping[str, object] | None) -> str:
    """Record ``rule_id``'s new state (and ``event`` on the log) as leader ``lead``:
    "done", "deposed" (another leads now: nothing written) or "gone" (the rule was deleted)."""
    keys = lead.keys
    raw = lead.scripts.alert(
        keys=[keys.alertleader, keys.alerts, keys.alertstate, keys.alertlog],
        args=[lead.owner, lead.fence, rule_id, _dumps(state), _dumps(event) if event else "", LOG_KEEP],
    )
    return text(raw[0])
