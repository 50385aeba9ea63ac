"""Forgetting URLs' fingerprints, so that they are crawled again when met again: what
``crawlplug forget`` and the console's forget do, with one set of rules.

A fingerprint is computed as the crawl's nodes compute it, with the Scrapy project's
REQUEST_FINGERPRINTER_CLASS, and routed to its shard with the project's queue class (run
it in the project). The Redis side is crawlplug.frontier.forgetting's.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import redis
from scrapy import Request

from .. import starts
from ..config import setting
from ..config.project import scrapy_project
from ..crawl import Crawl
from ..errors import ConfigError, DecodeError
from ..frontier import forgetting
from ..frontier.keys import CrawlKeys
from ..queues import load_queue_class, route
from ..serializers import JsonSerializer, metakeys

__all__ = ["LOCAL_CACHE_NOTE", "Forgot", "dead_requests", "forget_requests", "given_requests", "roll"]

#: What running nodes still do after a forget (said after every change).
LOCAL_CACHE_NOTE = (
    "running nodes still filter the URLs they saw recently (their CRAWLPLUG_FP_CACHE) until "
    "they restart; a start entry (`crawlplug push`) is crawled even if seen"
)


@dataclass
class Forgot:
    """What a forget did (or, ``dry_run``, would do)."""

    chosen: list[Request]  #: the requests whose fingerprints were (would be) forgotten
    flags: str = ""  #: per chosen request: "1" forgotten, "0" it was not recorded
    removed: int = 0
    dry_run: bool = False
    notes: list[str] = field(default_factory=list)


def given_requests(entries: Iterable[tuple[str, str]]) -> list[tuple[str, Request]]:
    """(where, request) of each URL or JSON entry (``(where, text)`` pairs), callbacks left
    out (they do not change a fingerprint); a malformed one is a ConfigError naming where."""
    out = []
    for where, line in entries:
        try:
            entry = starts.parse(line)
            # meta keys naming code do not change a fingerprint, and no spider here allows them
            entry = dataclasses.replace(entry, callback=None, errback=None, meta=metakeys.strip(entry.meta))
            out.append((where, starts.build(entry, None)))
        except DecodeError as exc:
            raise ConfigError(f"{where}: {exc}") from None
    return out


def dead_requests(crawl: Crawl) -> tuple[list[tuple[str, Request]], int]:
    """(where, request) of each dead letter whose payload is a JSON request, and how many are not."""
    reader = JsonSerializer(max_payload_bytes=0)
    out, unreadable = [], 0
    for i, letter in enumerate(crawl.dead_letters()):
        try:
            out.append((f"dead letter {i}", reader.loads_unbound(letter.payload)))
        except DecodeError:
            unreadable += 1
    return out, unreadable


def forget_requests(
    client: redis.Redis,
    keys: CrawlKeys,
    given: Sequence[tuple[str, Request]],
    *,
    from_dead: bool = False,
    patterns: Sequence[str] = (),
    dry_run: bool = False,
) -> Forgot:
    """Forget the fingerprints of ``given`` (and, ``from_dead``, of the crawl's dead letters),
    those whose URL matches one of ``patterns`` if any. ConfigError, nothing changed, for a
    Bloom filter (it cannot forget one URL) and for nothing to forget."""
    if not given and not from_dead:
        raise ConfigError("nothing to forget: give URLs, the dead letters (with patterns), or roll everything")
    kind = forgetting.bloom_kind(client, keys)
    if kind:
        raise ConfigError(forgetting.BLOOM_CANNOT_FORGET.format(crawl=keys.crawl, kind=kind))
    project = scrapy_project(keys.crawl)
    notes = list(project.notes)
    candidates = list(given)
    if from_dead:
        dead, unreadable = dead_requests(Crawl(client, keys))
        candidates += dead
        if unreadable:
            notes.append(f"{unreadable} dead letters are not JSON requests: left out")
    chosen = [r for _, r in candidates if not patterns or any(fnmatch.fnmatchcase(r.url, p) for p in patterns)]
    if not chosen:
        raise ConfigError(
            f"no URL to forget ({len(candidates)} given or read, none matching {' or '.join(patterns)})"
            if patterns
            else "no URL to forget"
        )
    if dry_run:
        return Forgot(chosen, dry_run=True, notes=notes)
    settings = project.settings
    queue = load_queue_class(setting(settings, "CRAWLPLUG_QUEUE_CLASS")).from_settings(settings)
    fingerprint = project.crawler.request_fingerprinter.fingerprint
    done = forgetting.forget(client, keys, [(fingerprint(r), route(r, queue.domain(r))) for r in chosen])
    if done.bloom:
        raise ConfigError(forgetting.BLOOM_CANNOT_FORGET.format(crawl=keys.crawl, kind=done.bloom))
    return Forgot(chosen, done.flags, done.removed, notes=notes)


def roll(client: redis.Redis, keys: CrawlKeys) -> int:
    """Forget every fingerprint of the crawl, any dedup: the dedup keys deleted (a new generation)."""
    return forgetting.roll(client, keys)
