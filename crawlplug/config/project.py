"""The Scrapy project a command or the console runs in: its root, and its settings with a
crawler that is never started (its request fingerprinter, its spider class), what a tool
needs to compute fingerprints and check callbacks as the crawl's nodes do (``crawlplug
forget``, ``crawlplug migrate``, the console's forget)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError

if TYPE_CHECKING:
    from scrapy import Spider
    from scrapy.settings import Settings

__all__ = ["Project", "project_root", "scrapy_project"]


def project_root() -> Path | None:
    """The directory holding the closest ``scrapy.cfg`` (here or above); None outside a project."""
    from scrapy.utils.conf import closest_scrapy_cfg  # noqa: PLC0415 - keep commands' --help fast

    cfg = closest_scrapy_cfg()
    return Path(cfg).parent if cfg else None


@dataclass
class Project:
    crawler: Any  # scrapy.crawler.Crawler, never started: settings, request_fingerprinter
    spidercls: type[Spider] | None
    notes: list[str] = field(default_factory=list)

    @property
    def settings(self) -> Settings:
        return self.crawler.settings


def scrapy_project(spider: str) -> Project:
    """The Scrapy project's settings (with the spider's own and the add-ons' applied),
    its request fingerprinter, and the spider class when the project has it. Outside a
    project: Scrapy's defaults, said in ``notes``. ConfigError if the project's own settings
    module fails."""
    # Scrapy's crawler machinery, for these callers only (every crawlplug command would pay its import)
    from scrapy import Spider  # noqa: PLC0415
    from scrapy.crawler import Crawler  # noqa: PLC0415
    from scrapy.settings import Settings  # noqa: PLC0415
    from scrapy.utils.conf import closest_scrapy_cfg  # noqa: PLC0415
    from scrapy.utils.misc import build_from_crawler, load_object  # noqa: PLC0415
    from scrapy.utils.project import get_project_settings  # noqa: PLC0415

    notes = []
    spidercls: type[Spider] | None = None
    if closest_scrapy_cfg():
        try:
            settings = get_project_settings()
        except Exception as exc:  # noqa: BLE001 - the project's own settings module failed
            raise ConfigError(f"cannot read the Scrapy project's settings ({closest_scrapy_cfg()}): {exc}") from None
        try:
            from scrapy.spiderloader import get_spider_loader  # noqa: PLC0415 - likewise

            spidercls = get_spider_loader(settings).load(spider)
        except Exception as exc:  # noqa: BLE001 - KeyError, or an import error of the project
            notes.append(f"spider {spider!r} not loaded from this project ({exc}): callbacks are not checked")
    else:
        settings = Settings()
        notes.append("no Scrapy project here (no scrapy.cfg): Scrapy's default settings, callbacks not checked")
    crawler = Crawler(spidercls or type("ProjectSpider", (Spider,), {"name": spider}), settings)
    try:
        crawler.addons.load_settings(crawler.settings)  # e.g. crawlplug.Addon's DUPEFILTER_CLASS
    except Exception as exc:  # noqa: BLE001
        notes.append(f"the project's add-ons could not be applied: {exc}")
    fingerprinter_cls = load_object(crawler.settings["REQUEST_FINGERPRINTER_CLASS"])
    crawler.request_fingerprinter = build_from_crawler(fingerprinter_cls, crawler)
    return Project(crawler, spidercls, notes)
