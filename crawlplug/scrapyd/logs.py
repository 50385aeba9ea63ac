"""A Scrapyd job's log, read from its daemon (:meth:`~crawlplug.scrapyd.daemon.Daemon.log`):
its last lines, those holding a text, and a summary by level and by logger, as ScrapydWeb's
log analysis gives. Lines are Scrapy's ``LOG_FORMAT`` (``<date> <time> [<logger>] <LEVEL>:
<message>``); a line of another shape (a traceback, a stats dump) belongs to the record
above it."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

import redis

from ..errors import ScrapydError
from ..frontier.keys import CrawlKeys
from . import store
from .daemon import Daemon

__all__ = ["analyse", "job_log"]

_RECORD = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) \[([^\]]+)\] (DEBUG|INFO|WARNING|ERROR|CRITICAL): ")


def analyse(text: str, *, tail: int = 200, search: str | None = None) -> dict[str, Any]:
    """``{"lines": the last ``tail`` lines (those of records holding ``search``, any case),
    "levels": {level: records}, "loggers": {logger: records}, "records": how many}`` over the
    whole text given."""
    levels: Counter[str] = Counter()
    loggers: Counter[str] = Counter()
    records: list[list[str]] = []
    for line in text.splitlines():
        m = _RECORD.match(line)
        if m:
            levels[m.group(3)] += 1
            loggers[m.group(2)] += 1
            records.append([line])
        elif records:
            records[-1].append(line)
        else:
            records.append([line])  # before the first record (a cut file's head)
    needle = search.lower() if search else None
    kept = [r for r in records if needle is None or needle in "\n".join(r).lower()]
    lines = [line for r in kept for line in r]
    return {
        "lines": lines[-tail:] if tail > 0 else lines,
        "levels": dict(levels.most_common()),
        "loggers": dict(loggers.most_common()),
        "records": sum(levels.values()),
    }


def job_log(
    client: redis.Redis, keys: CrawlKeys, job_id: str, *, tail: int = 200, search: str | None = None
) -> dict[str, Any]:
    """Job ``job_id`` of the crawl, its log read from its daemon and analysed; ScrapydError
    for a job the crawl has no record of (naming its latest) or a daemon that cannot say."""
    job = store.get(client, keys, job_id)
    if job is None:
        known = [str(j["id"]) for j in store.all_jobs(client, keys)][-5:]
        raise ScrapydError(
            f"crawl {keys.crawl!r} has no Scrapyd job {job_id!r} (its latest: {', '.join(known) or 'none'})"
        )
    daemon = Daemon.of(str(job.get("daemon", "")))
    text = daemon.log(str(job.get("project", "default")), str(job.get("spider", keys.crawl)), job_id)
    return {"job": job_id, "daemon": daemon.label, **analyse(text, tail=tail, search=search)}
