"""Recurring seeds: start entries injected again on a schedule, bypassing dedup.

A seed is a start entry (see :mod:`crawlplug.starts.entry`) with a schedule:
``every`` N seconds or a ``cron`` expression (UTC unless a time zone is
given). When it is due, the timer appends the entry to the crawl's
``start_urls`` with ``dont_filter`` set, so the site is crawled again even
though its URLs were seen; the crawl's nodes (or ``crawlplug timer`` when no
node runs) take it from there.

The timer runs inside every crawl node, but fires under a Redis lock with an
expiry (redis-py's :class:`~redis.lock.Lock`), so one node at a time does it
and a node that dies while holding the lock does not stop the timer for long.
Times are Redis's clock, not the nodes'. A seed whose runs were missed
(everything was down) fires once and is then scheduled for its next time
after now: missed runs are caught up once, not N times.

Redis: ``seeds`` hash (id -> JSON spec), ``seeds_due`` sorted set (id -> next
run, ms), ``seedlock`` (the lock).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from typing import Any

import redis

from ..errors import ConfigError
from ..frontier.keys import CrawlKeys
from ..frontier.store import is_cluster, redis_ms
from .entry import parse, to_line

logger = logging.getLogger(__name__)

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
LOCK_TIMEOUT = 30.0


def parse_every(text: str) -> int:
    """ "90s", "15m", "6h", "1d", "2w", "1h30m" or plain seconds -> seconds."""
    text = text.strip().lower()
    if text.isdigit():
        seconds = int(text)
    else:
        parts = re.findall(r"(\d+)\s*([smhdw])", text)
        if not parts or re.sub(r"\d+\s*[smhdw]", "", text).strip():
            raise ConfigError(f"--every {text!r}: use a number with a unit, like 90s, 15m, 6h, 1d, 1h30m")
        seconds = sum(int(n) * _UNITS[u] for n, u in parts)
    if seconds < 1:
        raise ConfigError("--every must be at least one second")
    return seconds


def _cron(expr: str, tz: str) -> Any:
    try:
        from croniter import croniter  # noqa: PLC0415
    except ImportError:  # pragma: no cover - a dependency
        raise ConfigError("cron schedules need the croniter package (pip install croniter)") from None
    if not croniter.is_valid(expr):
        raise ConfigError(f"--cron {expr!r} is not a valid cron expression (5 fields: min hour day month weekday)")
    return croniter


def zone(tz: str) -> Any:
    """The time zone named ``tz`` (an IANA name, or UTC) that cron times are read in."""
    if tz.upper() == "UTC":
        return timezone.utc
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError  # noqa: PLC0415

    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: a name too long for a file name
        raise ConfigError(f"unknown time zone {tz[:80]!r} (an IANA name such as Europe/Paris, or UTC)") from None


@dataclass
class Seed:
    entry: str  # the start entry, canonical one-line form
    every: int | None = None  # seconds
    cron: str | None = None
    tz: str = "UTC"
    added: int = 0  # ms
    last: int | None = None  # ms of the last run

    def __post_init__(self) -> None:
        if (self.every is None) == (self.cron is None):
            raise ConfigError("a seed needs exactly one schedule: --every or --cron")
        if self.cron is not None:
            _cron(self.cron, self.tz)
        zone(self.tz)

    @property
    def id(self) -> str:
        return hashlib.sha1(self.entry.encode()).hexdigest()[:12]

    def schedule(self) -> str:
        return f"every {self.every}s" if self.every is not None else f"cron '{self.cron}' {self.tz}"

    def next_after(self, now_ms: int, due_ms: int | None = None) -> int:
        """The first run strictly after ``now_ms``; for ``every``, on the grid of ``due_ms``."""
        if self.every is not None:
            step = self.every * 1000
            base = due_ms if due_ms is not None else now_ms
            if base > now_ms:
                return base
            return base + step * (math.floor((now_ms - base) / step) + 1)
        croniter = _cron(self.cron, self.tz)  # type: ignore[arg-type]
        start = datetime.fromtimestamp(now_ms / 1000, zone(self.tz))
        nxt = croniter(self.cron, start).get_next(datetime)
        return int(nxt.timestamp() * 1000)

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, raw: bytes | str) -> Seed:
        data = json.loads(raw)
        return cls(**{k: data[k] for k in ("entry", "every", "cron", "tz", "added", "last") if k in data})


def make_seed(line: str, *, every: str | None = None, cron: str | None = None, tz: str = "UTC") -> Seed:
    """A seed for one start entry (URL or JSON line), validated; always bypasses dedup."""
    try:
        entry = parse(line)
    except Exception as exc:  # noqa: BLE001 - whatever the entry's validation raises is the reason
        raise ConfigError(str(exc)) from None
    entry.dont_filter = True
    return Seed(entry=to_line(entry), every=parse_every(every) if every else None, cron=cron, tz=tz)


class Seeds:
    """The recurring seeds of one crawl."""

    def __init__(self, client: redis.Redis, keys: CrawlKeys) -> None:
        self.client = client
        self.keys = keys

    def add(self, seed: Seed, *, first_run_ms: int | None = None) -> Seed:
        """Store (or replace) a seed; its first run is now unless ``first_run_ms`` says otherwise."""
        now = redis_ms(self.client)
        seed.added = now
        first = first_run_ms if first_run_ms is not None else now
        pipe = self.client.pipeline(transaction=True)
        pipe.hset(self.keys.seeds, seed.id, seed.to_json())
        pipe.zadd(self.keys.seeds_due, {seed.id: first})
        pipe.execute()
        return seed

    def remove(self, ident: str) -> bool:
        """Remove by id or by URL/entry."""
        ids = (
            [ident]
            if self.client.hexists(self.keys.seeds, ident)
            else [sid for sid, seed in self.all().items() if seed.entry == ident or _url(seed.entry) == ident]
        )
        if not ids:
            return False
        pipe = self.client.pipeline(transaction=True)
        pipe.hdel(self.keys.seeds, *ids)
        pipe.zrem(self.keys.seeds_due, *ids)
        pipe.execute()
        return True

    def all(self) -> dict[str, Seed]:
        out = {}
        for sid, raw in self.client.hgetall(self.keys.seeds).items():
            try:
                out[sid.decode()] = Seed.from_json(raw)
            except (ValueError, TypeError, ConfigError) as exc:
                logger.warning("crawlplug: seed %s is unreadable (%s); skipped", sid, exc)
        return out

    def due_times(self) -> dict[str, int]:
        return {k.decode(): int(v) for k, v in self.client.zrange(self.keys.seeds_due, 0, -1, withscores=True)}

    def next_due(self) -> int | None:
        first = self.client.zrange(self.keys.seeds_due, 0, 0, withscores=True)
        return int(first[0][1]) if first else None

    def fire_due(self, now_ms: int | None = None, *, owner: str = "timer") -> int:
        """Inject every due seed once (under the timer lock); returns how many fired.

        ``now_ms`` defaults to Redis's clock (tests pass a fake one).
        """
        if now_ms is None and is_cluster(self.client):
            # a cluster pipeline refuses TIME: two round trips (the clock of the cluster's default node)
            now, first = redis_ms(self.client), self.next_due()
        elif now_ms is None:
            # one round trip: every node asks on every heartbeat, each one blocking its reactor
            pipe = self.client.pipeline(transaction=False)
            pipe.time()
            pipe.zrange(self.keys.seeds_due, 0, 0, withscores=True)
            (sec, usec), head = pipe.execute()
            now, first = sec * 1000 + usec // 1000, int(head[0][1]) if head else None
        else:
            now, first = now_ms, self.next_due()
        if first is None or first > now:
            return 0  # the common case: one read, no lock
        lock = self.client.lock(self.keys.seedlock, timeout=LOCK_TIMEOUT, blocking=False)
        if not lock.acquire():
            return 0  # another node is firing
        fired = 0
        try:
            seeds = self.all()
            for sid, due in self.due_times().items():
                if due > now:
                    break
                seed = seeds.get(sid)
                if seed is None:  # removed meanwhile, or unreadable
                    self.client.zrem(self.keys.seeds_due, sid)
                    continue
                seed.last = now
                nxt = seed.next_after(now, due)
                pipe = self.client.pipeline(transaction=True)
                pipe.rpush(self.keys.start_urls, seed.entry)
                pipe.hset(self.keys.seeds, sid, seed.to_json())
                pipe.zadd(self.keys.seeds_due, {sid: nxt})
                pipe.hincrby(self.keys.stats, "seeds_fired", 1)
                pipe.execute()
                fired += 1
                missed = (now - due) / (seed.every * 1000) if seed.every else 0
                logger.info(
                    "crawlplug: seed %s fired (%s)%s; next run %s",
                    _url(seed.entry),
                    seed.schedule(),
                    f", {int(missed)} missed runs caught up once" if missed >= 1 else "",
                    datetime.fromtimestamp(nxt / 1000, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
                )
        finally:
            try:
                lock.release()
            except redis.exceptions.LockError:
                pass  # expired while we worked: someone else may take over
        return fired


def _url(entry: str) -> str:
    if entry.startswith("{"):
        try:
            return str(json.loads(entry).get("url"))
        except ValueError:
            return entry
    return entry
