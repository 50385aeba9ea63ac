"""The ``crawlplug`` operator command (rq's style: one click group, a module per group
of commands, each command a thin wrapper over library functions).

    crawlplug crawls [show NAME]             # every crawl on the Redis, and the runs of one
    crawlplug status --crawl shop [--watch] [--json] [--since 6h]
    crawlplug report shop [--run R] [--json | --csv]   # per node and domain, site, field
    crawlplug push --crawl shop [--key start_urls:high] URL... | --file F | -
    crawlplug forget --crawl shop URL... | --pattern GLOB --from-dead | --roll
    crawlplug purge --crawl shop [--yes]
    crawlplug dedup-info --crawl shop [--json]   # the exact store's buckets: fill, past the compact limit
    crawlplug dead list|requeue|drop --crawl shop
    crawlplug domains list|set|reset        # DomainQueue: per-domain limits at runtime
    crawlplug seeds add|list|remove, timer, pause, resume
    crawlplug stop CRAWL [--drain], continue CRAWL, new-run CRAWL, limits CRAWL   # run control
    crawlplug export / import, migrate from-scrapy-redis | seen-to-hash, items, sites, dashboard
    crawlplug embedded start|stop|url
    crawlplug functions list|prune           # crawlplug's Functions libraries (Redis 7)
    crawlplug console [--port 8643]          # the HTTP API over every crawl (/api/v1), for users
    crawlplug users add NAME --role ROLE     # the console's users; list, revoke
    crawlplug start CRAWL --scrapyd URL ...   # nodes started through Scrapyd; scrapyd cancel ends them
    crawlplug schedule CRAWL --cron EXPR ...  # runs at cron times, fired by `crawlplug control`
    crawlplug alerts add CRAWL --when "error_rate > 0.2 for 2m" --notify URL   # list, delete

``--redis-url`` (or ``REDIS_URL``) picks the Redis; without it a command uses the
embedded Redis of the Scrapy project it is run in (the directory holding
``scrapy.cfg``, here or above), starting it if needed. ``--crawl`` (or
``CRAWLPLUG_CRAWL``) names the crawl: the spider name unless the project sets
``CRAWLPLUG_CRAWL_ID``. Both options may be given before or after the command name.
Passwords in URLs are always shown masked.

:mod:`.common` holds the group and what the commands share (:func:`~.common.pass_cli`: the
shared options and the connected target, handed to each command); importing this package
registers every command module on it.
"""

from __future__ import annotations

from . import (
    alerts,
    crawls,
    dead,
    domains,
    embedded,
    feed,
    forget,
    functions,
    items,
    launch,
    logs,
    migrate,
    report,
    runctl,
    schedule,
    sites,
    status,
    transfer,
    users,
    web,
)
from .common import main

__all__ = ["main"]
# the command modules register themselves on `main` when imported
_COMMANDS = (
    alerts,
    crawls,
    dead,
    domains,
    embedded,
    feed,
    forget,
    functions,
    items,
    launch,
    logs,
    migrate,
    report,
    runctl,
    schedule,
    sites,
    status,
    transfer,
    users,
    web,
)
