"""Alert rules declared in a project's settings (``CRAWLPLUG_ALERTS``), stored by its nodes.

A Scrapy extension (the add-on lists it; it stays off while the setting is empty): when
a node opens it stores each rule in Redis as ``crawlplug alerts add`` would, replacing a
rule of the same name only when it differs (so that every node starting does not reset
a firing rule's state). A rule that does not read (a bad condition, a URL Apprise
cannot use) is logged as an error with the reason and left out; the node goes on.
Rules are only added or replaced here, never deleted: ``crawlplug alerts delete``.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from scrapy import Spider, signals
from scrapy.crawler import Crawler
from scrapy.exceptions import NotConfigured

from ..config import setting
from ..errors import REDIS_ERRORS, ConfigError, RedisUnavailable
from ..frontier.keys import crawl_keys
from ..server import clients
from . import store as stored

logger = logging.getLogger(__name__)


def declared(value: Any) -> list[Any]:
    """CRAWLPLUG_ALERTS as a list: a list, or its JSON text (``-s CRAWLPLUG_ALERTS='[...]'``)."""
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else []
        except ValueError as exc:
            raise ConfigError(f"CRAWLPLUG_ALERTS is not JSON: {exc}") from None
    if not isinstance(value, (list, tuple)):
        raise ConfigError(f"CRAWLPLUG_ALERTS must be a list of rules, not {type(value).__name__}")
    return list(value)


def rule_from(entry: Any, default_cooldown: float) -> dict[str, Any]:
    """One entry of CRAWLPLUG_ALERTS ({"name", "when", "notify", "cooldown"}) as a rule to store."""
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not isinstance(entry.get("when"), str):
        raise ConfigError(f"an entry of CRAWLPLUG_ALERTS needs a 'name' and a 'when' (text), not {entry!r:.100}")
    notify = entry.get("notify") or []
    notify = [notify] if isinstance(notify, str) else notify
    if not isinstance(notify, list) or not all(isinstance(u, str) for u in notify):
        raise ConfigError(f"'notify' of alert rule {entry['name']!r} must be a URL or a list of URLs")
    cooldown = entry.get("cooldown", default_cooldown)
    if isinstance(cooldown, bool) or not isinstance(cooldown, (int, float)):
        raise ConfigError(f"'cooldown' of alert rule {entry['name']!r} must be a number of seconds")
    # imported here: the rule grammar (lark) costs a node ~70 ms of start-up, and most nodes declare no rule
    from . import rules as alerts  # noqa: PLC0415

    return alerts.make_rule(entry["name"], entry["when"], notify, float(cooldown))


class SettingsRules:
    """Stores the rules of CRAWLPLUG_ALERTS when the node opens (module docstring)."""

    def __init__(self, crawler: Crawler, entries: list[Any]) -> None:
        self.crawler = crawler
        self.entries = entries

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> SettingsRules:
        entries = declared(crawler.settings.get("CRAWLPLUG_ALERTS") or [])
        if not entries:
            raise NotConfigured  # no message: Scrapy would log a WARNING for a feature not asked for
        ext = cls(crawler, entries)
        crawler.signals.connect(ext.spider_opened, signal=signals.spider_opened)
        return ext

    def spider_opened(self, spider: Spider) -> None:
        cooldown = float(setting(self.crawler.settings, "CRAWLPLUG_ALERT_COOLDOWN"))
        rules = []
        for entry in self.entries:
            try:
                rules.append(rule_from(entry, cooldown))
            except ConfigError as exc:
                logger.error("crawlplug: alert rule left out (CRAWLPLUG_ALERTS): %s", exc)
                if self.crawler.stats is not None:
                    self.crawler.stats.inc_value("crawlplug/alert_rules_invalid")
        if not rules:
            return
        try:
            client = clients.from_settings(self.crawler.settings).client
            keys = crawl_keys(self.crawler.settings, spider.name)
            have = stored.rules(client, keys)
            changed = [rule for rule in rules if have.get(rule["id"]) != rule]
            for rule in changed:
                stored.put(client, keys, rule)
        except (*REDIS_ERRORS, RedisUnavailable, ConfigError) as exc:
            logger.warning("crawlplug: could not store the alert rules of CRAWLPLUG_ALERTS: %s", exc)
            return
        logger.info(
            "crawlplug: %d alert rules of CRAWLPLUG_ALERTS in crawl %r (%d new or changed)",
            len(rules),
            keys.crawl,
            len(changed),
        )
