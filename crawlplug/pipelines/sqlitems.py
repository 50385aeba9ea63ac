"""Items stored once per key in a SQL database, each row marked with the runs that saw it:
``SQLItemPipeline``.

A crawl run again brings the same items again; this pipeline updates rather than
inserts. Turn it on with::

    ITEM_PIPELINES = {"crawlplug.pipelines.SQLItemPipeline": 300}
    CRAWLPLUG_ITEMS_SQL_URL = "postgresql+psycopg://user:pw@db:5432/crawls"   # or "sqlite:///items.db"
    CRAWLPLUG_ITEM_KEY = ["sku"]            # the fields that say which item it is (default: ["url"])

The table (``CRAWLPLUG_ITEMS_TABLE``, ``crawlplug_items``; made if missing) holds one row per
crawl, site and key: the key's values (``item_key``, their JSON: sites may key their
items differently), the item as JSON (new fields simply appear in it; a field that
appears, disappears or changes makes the item *changed*), a digest of it, and the
markers the change report counts from: ``first_run`` (the run that first saw it),
``last_run`` (the last run that saw it), ``changed_run`` (the last run that saw it
different from before; null: never) with ``changed_fields`` (which fields differed),
and the times of each. A site definition may name its own key (``item_key``).

Every write is one transaction: the row is read, compared and written with
``INSERT ... ON CONFLICT DO UPDATE`` (SQLAlchemy Core; PostgreSQL and SQLite both
have it), so the same item stored twice in a run (a page fetched again after its
node was killed) changes nothing: its markers already say so. PostgreSQL by URL
serves crawls on many machines; SQLite (WAL, a busy timeout) one machine's nodes.

What changed in a run (:func:`change_report`) is counted from the markers, never from
counting writes. The run this node works for is the one it joined (the stat
``crawlplug/run``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import redis

from ..config import setting, warn_misspelt_settings
from ..crawl import runs
from ..crawl.runs import RUN_STAT
from ..errors import REDIS_ERRORS, ConfigError, ItemError, optional_module
from ..frontier.keys import CrawlKeys, crawl_keys
from ..server import clients
from .itemjson import item_json

if TYPE_CHECKING:
    from scrapy import Spider
    from scrapy.crawler import Crawler
    from sqlalchemy import Table
    from sqlalchemy.engine import Engine

__all__ = ["SQLItemPipeline", "change_report", "kept_report", "make_engine", "open_table", "report_for"]

logger = logging.getLogger(__name__)


def _sqlalchemy() -> Any:
    return optional_module("sqlalchemy", "sql", "SQLItemPipeline")


def make_engine(url: str) -> Engine:
    """An engine for ``url``: SQLite in WAL mode with a busy timeout (several nodes of one
    machine write it), anything else as given."""
    sa = _sqlalchemy()
    try:
        parsed = sa.engine.make_url(url)
    except Exception as exc:  # noqa: BLE001 - sqlalchemy's ArgumentError and friends
        raise ConfigError(f"CRAWLPLUG_ITEMS_SQL_URL {url!r} is not a database URL SQLAlchemy reads: {exc}") from None
    if parsed.get_backend_name() == "sqlite":
        engine = sa.create_engine(url, connect_args={"timeout": 30})

        @sa.event.listens_for(engine, "connect")
        def _wal(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.close()

        return engine
    try:
        return sa.create_engine(url, pool_pre_ping=True)
    except Exception as exc:  # noqa: BLE001 - a driver that is not installed, a bad option
        raise ConfigError(f"CRAWLPLUG_ITEMS_SQL_URL {parsed!r}: {exc}") from None


def open_table(engine: Engine, name: str = "crawlplug_items") -> Table:
    """The items table (made if missing)."""
    sa = _sqlalchemy()
    meta = sa.MetaData()
    table = sa.Table(
        name,
        meta,
        sa.Column("crawl", sa.String(200), primary_key=True),
        sa.Column("site", sa.String(200), primary_key=True),
        sa.Column("item_key", sa.String(1000), primary_key=True),
        sa.Column("item", sa.JSON, nullable=False),
        sa.Column("digest", sa.String(40), nullable=False),
        sa.Column("first_run", sa.Integer, nullable=False),
        sa.Column("last_run", sa.Integer, nullable=False, index=True),
        sa.Column("changed_run", sa.Integer, nullable=True),
        sa.Column("changed_fields", sa.JSON(none_as_null=True), nullable=True),
        sa.Column("first_seen", sa.Float, nullable=False),
        sa.Column("last_seen", sa.Float, nullable=False),
        sa.Column("last_changed", sa.Float, nullable=True),
    )
    meta.create_all(engine, checkfirst=True)
    return table


def _insert(engine: Engine, table: Table) -> Any:
    if engine.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert  # noqa: PLC0415
    elif engine.dialect.name == "sqlite":
        from sqlalchemy.dialects.sqlite import insert  # noqa: PLC0415
    else:
        raise ConfigError(f"SQLItemPipeline upserts into PostgreSQL or SQLite, not {engine.dialect.name}")
    return insert(table)


def _said(total: dict[str, Any]) -> str:
    fields = ", ".join(f"{name} {n}" for name, n in sorted(total["fields"].items()))
    return (
        f"{total['new']} new, {total['changed']} changed"
        + (f" ({fields})" if fields else "")
        + f", {total['unchanged']} unchanged, {total['gone']} gone"
    )


def _changed_fields(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    return sorted(k for k in set(old) | set(new) if old.get(k, _MISSING) != new.get(k, _MISSING))


_MISSING = object()


class SQLItemPipeline:
    """Upsert every item by its key into a SQL table, marking the run that saw it."""

    def __init__(self, crawler: Crawler, *, url: str, key: Sequence[str], table: str) -> None:
        if not url:
            raise ConfigError(
                "SQLItemPipeline needs CRAWLPLUG_ITEMS_SQL_URL (postgresql+psycopg://user:pw@host/db, sqlite:///items.db)"
            )
        if not key or not all(isinstance(k, str) and k for k in key):
            raise ConfigError(f"CRAWLPLUG_ITEM_KEY must name at least one field, not {key!r}")
        self.crawler = crawler
        self.url = url
        self.key = list(key)
        self.table_name = table
        self.engine: Engine | None = None
        self.table: Table | None = None
        self.crawl = ""
        self.keys: CrawlKeys | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> SQLItemPipeline:
        s = crawler.settings
        warn_misspelt_settings(s)
        return cls(
            crawler,
            url=str(setting(s, "CRAWLPLUG_ITEMS_SQL_URL") or ""),
            key=setting(s, "CRAWLPLUG_ITEM_KEY", "getlist"),
            table=str(setting(s, "CRAWLPLUG_ITEMS_TABLE")),
        )

    def open_spider(self, spider: Spider | None = None) -> None:
        spider = spider or self.crawler.spider
        name = spider.name if spider is not None else self.crawler.spidercls.name
        self.keys = crawl_keys(self.crawler.settings, name)
        self.crawl = self.keys.crawl
        self.engine = make_engine(self.url)
        self.table = open_table(self.engine, self.table_name)
        logger.info(
            "crawlplug: items upserted by %s into table %s of %s",
            "+".join(self.key),
            self.table_name,
            self.engine.url.render_as_string(hide_password=True),
        )

    def close_spider(self, spider: Spider | None = None) -> None:
        """When the run this node worked for finished, count what changed in it and keep the
        report in Redis (each node that closes with it writes the same)."""
        if self.engine is None or self.table is None or self.keys is None:
            return
        try:
            run = int(self.crawler.stats.get_value(RUN_STAT) or 0) if self.crawler.stats is not None else 0
            if run:
                conn = clients.from_settings(self.crawler.settings)
                try:
                    if runs.view(conn.client, self.keys).state in ("finished", "limit", "stopped"):
                        rep = report_for(conn.client, self.keys, self.engine, self.table, run)
                        keep_report(conn.client, self.keys, rep)
                        logger.info("crawlplug: items of run %s: %s", run, _said(rep["total"]))
                finally:
                    conn.client.close()
        except (*REDIS_ERRORS, ConfigError) as exc:
            logger.warning("crawlplug: the change report of the run was not kept (%s)", exc)
        finally:
            self.engine.dispose()

    def key_of(self, item: Any, spider: Spider | None) -> tuple[str, list[str]]:
        """(site, the key fields) for ``item``: a site definition's item_key, else CRAWLPLUG_ITEM_KEY."""
        site = str(getattr(item, "site", "") or "")
        own = getattr(spider, "site_item_key", None)
        fields = own(site) if site and callable(own) else None
        return site, list(fields or self.key)

    def process_item(self, item: Any, spider: Spider | None = None) -> Any:
        spider = spider or getattr(self.crawler, "spider", None)
        data = json.loads(item_json(item))  # the JSON form RedisItemPipeline stores, as a dict
        site, fields = self.key_of(item, spider)
        missing = [f for f in fields if data.get(f) in (None, "")]
        if missing:
            raise ItemError(f"cannot store the item by its key {fields}: it has no {', '.join(missing)}")
        key = json.dumps([data[f] for f in fields], ensure_ascii=False, separators=(",", ":"), default=str)
        run = int(self.crawler.stats.get_value(RUN_STAT) or 0) if self.crawler.stats is not None else 0
        self.upsert(site, key, data, run)
        self.crawler.stats.inc_value("crawlplug/items_upserted")
        return item

    def upsert(self, site: str, key: str, data: dict[str, Any], run: int, now: float | None = None) -> str:
        """Store one item seen in ``run``; what it was: "new", "changed", "unchanged" or "stale"
        (a run older than the row's last: left as it is)."""
        assert self.engine is not None and self.table is not None, "the pipeline is not open"
        sa = _sqlalchemy()
        t = self.table
        now = time.time() if now is None else now
        digest = hashlib.sha1(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()
        where = sa.and_(t.c.crawl == self.crawl, t.c.site == site, t.c.item_key == key)
        with self.engine.begin() as conn:
            row = conn.execute(sa.select(t).where(where)).mappings().first()
            if row is None:
                values = {
                    "crawl": self.crawl,
                    "site": site,
                    "item_key": key,
                    "item": data,
                    "digest": digest,
                    "first_run": run,
                    "last_run": run,
                    "changed_run": None,
                    "changed_fields": None,
                    "first_seen": now,
                    "last_seen": now,
                    "last_changed": None,
                }
                stmt = _insert(self.engine, t).values(**values)
                # another node inserted it meanwhile (the same page twice): seen, nothing more
                stmt = stmt.on_conflict_do_update(
                    index_elements=[t.c.crawl, t.c.site, t.c.item_key],
                    set_={
                        "last_run": sa.func.max(t.c.last_run, run)
                        if self.engine.dialect.name == "sqlite"
                        else sa.func.greatest(t.c.last_run, run),
                        "last_seen": now,
                    },
                )
                conn.execute(stmt)
                return "new"
            if run < row["last_run"]:
                return "stale"
            updates: dict[str, Any] = {"last_run": run, "last_seen": now}
            what = "unchanged"
            if row["digest"] != digest:
                fields = _changed_fields(dict(row["item"] or {}), data)
                if row["changed_run"] == run:  # changed again within the run: both changes count
                    fields = sorted(set(fields) | set(row["changed_fields"] or []))
                if row["first_run"] == run:  # new in this run, whatever it looked like first
                    updates.update(item=data, digest=digest)
                    what = "new"
                else:
                    updates.update(item=data, digest=digest, changed_run=run, changed_fields=fields, last_changed=now)
                    what = "changed"
            elif row["changed_run"] == run:
                what = "changed"
            elif row["first_run"] == run:
                what = "new"
            conn.execute(sa.update(t).where(where).values(**updates))
            return what


def change_report(
    engine: Engine, table: Table, crawl: str, run: int, *, full_previous: int | None, checked: bool
) -> dict[str, Any]:
    """What changed in ``run`` of ``crawl``, per site and in all, counted from the rows' markers:
    new, changed (with how many items each field changed in), unchanged, and gone (seen in
    ``full_previous``, the last earlier run that finished and was not incremental, and not
    in this one) when ``checked`` (this run finished and was not incremental), else "not checked".
    """
    sa = _sqlalchemy()
    t = table
    mine = sa.and_(t.c.crawl == crawl)
    sites: dict[str, dict[str, Any]] = {}

    def site_row(site: str) -> dict[str, Any]:
        return sites.setdefault(
            site, {"new": 0, "changed": 0, "unchanged": 0, "gone": 0 if checked else "not checked", "fields": {}}
        )

    with engine.connect() as conn:
        seen = conn.execute(
            sa.select(t.c.site, t.c.first_run, t.c.changed_run, t.c.changed_fields).where(mine, t.c.last_run == run)
        )
        for site, first, changed, fields in seen:
            out = site_row(site)
            if first == run:
                out["new"] += 1
            elif changed == run:
                out["changed"] += 1
                for name in fields or []:
                    out["fields"][name] = out["fields"].get(name, 0) + 1
            else:
                out["unchanged"] += 1
        if checked and full_previous is not None:
            gone = conn.execute(
                sa.select(t.c.site, sa.func.count())
                .where(mine, t.c.last_run >= full_previous, t.c.last_run < run, t.c.first_run <= full_previous)
                .group_by(t.c.site)
            )
            for site, n in gone:
                site_row(site)["gone"] = int(n)
    total: dict[str, Any] = {
        "new": 0,
        "changed": 0,
        "unchanged": 0,
        "gone": 0 if checked else "not checked",
        "fields": {},
    }
    for out in sites.values():
        for k in ("new", "changed", "unchanged"):
            total[k] += out[k]
        if checked:
            total["gone"] += out["gone"]
        for name, n in out["fields"].items():
            total["fields"][name] = total["fields"].get(name, 0) + n
    return {
        "crawl": crawl,
        "run": run,
        "gone_checked_against": full_previous if checked else None,
        "total": total,
        "sites": dict(sorted(sites.items())),
    }


# -- a run's report, kept in Redis for the alert rules and `crawlplug report --changes` -------


def previous_full_run(client: redis.Redis, keys: CrawlKeys, run: int) -> int | None:
    """The last run before ``run`` that finished and was not incremental."""
    earlier = [s for s in runs.history(client, keys) if (s.get("id") or 0) < run and s.get("state") == "finished"]
    full = [int(s["id"]) for s in earlier if not s.get("incremental")]
    return max(full) if full else None


def report_for(client: redis.Redis, keys: CrawlKeys, engine: Engine, table: Table, run: int) -> dict[str, Any]:
    """:func:`change_report` of ``run``, with gone checked only when it finished and was not incremental."""
    summary = next((s for s in runs.history(client, keys) if s.get("id") == run), None)
    state = (summary or {}).get("state")
    checked = state == "finished" and not (summary or {}).get("incremental")
    rep = change_report(
        engine, table, keys.crawl, run, full_previous=previous_full_run(client, keys, run), checked=checked
    )
    rep["state"] = state
    rep["incremental"] = bool((summary or {}).get("incremental"))
    return rep


def keep_report(client: redis.Redis, keys: CrawlKeys, rep: dict[str, Any]) -> None:
    """Keep a run's report (the same from every node that writes it)."""
    client.hset(keys.changes, str(rep["run"]), json.dumps(rep, separators=(",", ":"), sort_keys=True))


def kept_report(client: redis.Redis, keys: CrawlKeys, run: int) -> dict[str, Any] | None:
    raw = client.hget(keys.changes, str(run))
    if raw is None:
        return None
    try:
        found = json.loads(raw)
    except ValueError:
        return None
    return found if isinstance(found, dict) else None
