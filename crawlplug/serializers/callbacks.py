"""Which spider methods a stored request may name as its callback or errback.

A queue payload or a start entry names its callbacks; anyone who can write to
the crawl's Redis can write that name, so a node looks a name up only if it is
something a callback can be:

1. a public method (no leading ``_``) of the user's spider class that none of
   the framework's spider classes (Scrapy's, scrapy-redis's, crawlplug's own
   generic spiders) defines: ``parse_item`` is one, ``start_requests``,
   ``make_request_from_data`` or ``from_crawler`` are not, even where the
   user's class overrides them; ``closed`` (Scrapy's close hook, which Scrapy
   finds by name) is not either;
2. the callbacks the generic spiders put on requests themselves
   (:data:`GENERIC_CALLBACKS`): ``parse``, Scrapy's default callback;
   CrawlSpider's ``_callback`` and ``_errback`` (every rule's request);
   SitemapSpider's ``_parse_sitemap``; crawlplug's SiteSpider's
   ``parse_page`` and ``page_failed``;
3. the names the spider lists in its ``crawlplug_callbacks`` attribute
   (a tuple of method names, private ones included): an explicit opt-in.

Everything else is refused with the reason, naming the callback:
:func:`resolve` raises :class:`~crawlplug.errors.DecodeError` (the scheduler
moves the payload to the dead letters), and the serializers refuse to *store*
a request whose callback no node would accept back (:func:`refusal`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from scrapy import Spider

from ..errors import DecodeError

#: Spider attribute: names accepted as callbacks besides the ones the rule allows.
OPT_IN_ATTRIBUTE = "crawlplug_callbacks"

#: Top-level packages whose spider classes are framework, not the user's.
FRAMEWORK_PACKAGES = frozenset({"scrapy", "scrapy_redis"})
#: crawlplug's modules of generic spider classes (framework too).
FRAMEWORK_MODULES = frozenset({"crawlplug.spiders", "crawlplug.sites.spider"})

#: The request callbacks each generic spider class puts on requests itself
#: ("module.QualName" -> names), accepted on any spider of that class.
GENERIC_CALLBACKS: dict[str, frozenset[str]] = {
    "scrapy.spiders.Spider": frozenset({"parse"}),  # the default callback, which users define
    "scrapy.spiders.crawl.CrawlSpider": frozenset({"_callback", "_errback"}),
    "scrapy.spiders.sitemap.SitemapSpider": frozenset({"_parse_sitemap"}),
    "crawlplug.sites.spider.SiteSpider": frozenset({"parse_page", "page_failed"}),
}

#: Hooks Scrapy calls on a spider by name without defining them on a base class.
HOOKS: dict[str, str] = {
    "closed": "the spider's close hook, which Scrapy calls when the crawl ends",
    "start_requests": "the start hook of Scrapy before 2.13 (start() since)",
    "make_requests_from_url": "scrapy-redis's start hook",
}


def _path(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _display(cls: type) -> str:
    return "scrapy.Spider" if cls is Spider else _path(cls)


def is_framework(cls: type) -> bool:
    """Whether ``cls`` is one of Scrapy's, scrapy-redis's or crawlplug's generic spider classes."""
    module = cls.__module__ or ""
    return module.split(".", 1)[0] in FRAMEWORK_PACKAGES or module in FRAMEWORK_MODULES


def opted_in(spider: Any) -> frozenset[str]:
    """The names ``spider`` (an instance or a class) lists in ``crawlplug_callbacks``."""
    names = getattr(spider, OPT_IN_ATTRIBUTE, None)
    if not names:
        return frozenset()
    if isinstance(names, str):  # crawlplug_callbacks = "_cb": one name, not its letters
        return frozenset({names})
    try:
        return frozenset(n for n in names if isinstance(n, str))
    except TypeError:
        return frozenset()


def _syntax(name: Any, what: str) -> str | None:
    if not isinstance(name, str) or not name.isidentifier() or name.startswith("__"):
        return f"{what} {name!r:.100} is not a method name"
    return None


@functools.lru_cache(maxsize=4096)
def _class_refusal(spidercls: type, name: str, what: str) -> str | None:
    """The rule's verdict on ``name`` for ``spidercls`` without its opt-ins (None: a callback).

    Cached per class and name (this runs for every request stored): a method
    added to a class after it was judged is judged as it was.
    """
    mro = spidercls.__mro__
    owner = next((klass for klass in mro if name in vars(klass)), None)
    label = getattr(spidercls, "name", None) or spidercls.__name__
    if owner is None:
        return f"spider {label!r} has no method {name!r} ({what})"
    if any(name in GENERIC_CALLBACKS.get(_path(klass), ()) for klass in mro):
        return None
    value = vars(owner)[name]
    if not callable(value) and not isinstance(value, (classmethod, property)):
        return f"spider {label!r} has no method {name!r} ({what})"  # an attribute
    hint = f"; list it in {spidercls.__name__}.{OPT_IN_ATTRIBUTE} if it is one"
    framework = next((klass for klass in mro if is_framework(klass) and name in vars(klass)), None)
    if framework is not None:
        return f"{what} {name!r} is a method of {_display(framework)} itself, not a request callback{hint}"
    if name in HOOKS:
        return f"{what} {name!r} is {HOOKS[name]}, not a request callback{hint}"
    if name.startswith("_"):
        return f"{what} {name!r} is a private method of {_display(owner)}, not a request callback{hint}"
    return None


def refusal(spider: Any, name: Any, what: str = "callback") -> str | None:
    """Why ``name`` is not a callback of ``spider`` (an instance or a class); None if it is one.

    Judges the class (and the spider's opt-ins) only: :func:`resolve` also
    checks that the name is a method bound to the spider instance.
    """
    reason = _syntax(name, what)
    if reason is not None:
        return reason
    if name in opted_in(spider):
        return None
    spidercls = spider if isinstance(spider, type) else type(spider)
    return _class_refusal(spidercls, name, what)


def refusal_for_any_spider(name: Any, what: str = "callback") -> str | None:
    """Why ``name`` is a callback of no spider at all (None: some spider may accept it).

    For payloads read without their spider class (a migration whose project is
    not at hand): refuses what is not a method name and Scrapy's own Spider
    machinery; the nodes of the crawl judge the rest when they read it.
    """
    reason = _syntax(name, what)
    if reason is not None:
        return reason
    if name != "parse" and hasattr(Spider, name):
        return f"{what} {name!r} is a method of scrapy.Spider itself, not a request callback"
    if name in HOOKS:
        return f"{what} {name!r} is {HOOKS[name]}, not a request callback"
    return None


def resolve(spider: Spider | None, name: Any, what: str = "callback") -> Callable[..., Any]:
    """The method of ``spider`` a stored ``callback``/``errback`` name stands for.

    Raises :class:`DecodeError` naming the callback and the reason when the
    name is not a callback of this spider (see the module's rule).
    """
    reason = _syntax(name, what)
    if reason is not None:
        raise DecodeError(reason)
    if spider is None:
        raise DecodeError(f"{what} {name!r} needs a spider to resolve")
    reason = refusal(spider, name, what)
    if reason is not None:
        raise DecodeError(reason)
    method = getattr(spider, name, None)
    if method is None or not callable(method) or getattr(method, "__self__", None) is not spider:
        raise DecodeError(f"spider {spider.name!r} has no method {name!r} ({what})")
    return method
