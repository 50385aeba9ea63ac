"""scrapy-playwright's ``PageMethod`` in JSON payloads, and what a stored one may make a browser do.

A request of scrapy-playwright carries ``meta["playwright_page_methods"]``: a list
(or dict) of ``PageMethod(name, *args, **kwargs)`` that the node downloading it calls
on the browser page. Stored in a shared Redis, such a list chooses what a browser
does on whichever node reads it, so this codec (registered in
:mod:`.metacodecs` when scrapy-playwright is installed) stores and reads back only:

* methods in :data:`ALLOWED`: waiting, clicking, typing, pressing keys (``press``
  of ``"End"`` or ``"PageDown"`` scrolls), hovering, screenshots and PDFs kept in
  memory;
* with arguments JSON holds (strings, numbers, lists, dicts), and no ``path``
  argument (a file written on the node);
* a method given as a callable only if it is a method of the spider, stored by name.

Everything else is refused: ``evaluate`` and the other methods that run JavaScript
given as text (``wait_for_function``, ``add_script_tag``, ...), navigation
(``goto``), files (``set_input_files``, ``screenshot(path=...)``, ``pdf(path=...)``),
callables, and any method not listed. A spider opts in by name to what it needs,
with the spider attribute ``crawlplug_page_methods = ["evaluate", "scroll_down"]``
or the setting ``CRAWLPLUG_PAGE_METHODS`` (a list): a name listed there is allowed
with any JSON arguments, ``path`` included, and a spider method of that name may be
the callable of a PageMethod. Both ends check: a node refuses to store what it may
not read back (SerializationError), and refuses to read what its own spider did not
allow (DecodeError: the request goes to the dead letters), whoever wrote it in Redis.
"""

from __future__ import annotations

from typing import Any

from scrapy import Spider

from ..config import setting
from ..errors import DecodeError, SerializationError
from . import metacodecs

try:
    from scrapy_playwright.page import PageMethod
except ImportError:  # scrapy-playwright is optional (the `playwright` extra)
    PageMethod = None  # type: ignore[assignment,misc]

#: Page methods a stored PageMethod may name without an opt-in (Playwright's Page API).
ALLOWED = frozenset(
    {
        # waiting
        "wait_for_selector",
        "wait_for_load_state",
        "wait_for_timeout",
        "wait_for_url",
        # acting on the page as a person would: clicks, keys (press "End" scrolls), text
        "click",
        "dblclick",
        "tap",
        "hover",
        "focus",
        "press",
        "type",
        "fill",
        "check",
        "uncheck",
        "select_option",
        "drag_and_drop",
        "dispatch_event",
        "set_viewport_size",
        "bring_to_front",
        # reading the page (results stay in memory: a path argument is refused)
        "screenshot",
        "pdf",
        "content",
        "title",
        "inner_text",
        "inner_html",
        "text_content",
        "get_attribute",
        "is_visible",
        "is_hidden",
        "is_checked",
        "is_enabled",
        "is_disabled",
        "query_selector",
        "query_selector_all",
    }
)
#: Argument names refused without an opt-in: they name a file written or read on the node.
PATH_ARGUMENTS = frozenset({"path"})
#: Argument names of ``PageMethod.__init__`` itself: a stored kwargs naming one cannot build it.
OWN_ARGUMENTS = frozenset({"method", "self"})
#: The spider attribute naming the page methods (and spider methods) a spider allows besides ALLOWED.
SPIDER_ATTRIBUTE = "crawlplug_page_methods"


def allowed_names(spider: Spider | None) -> frozenset[str]:
    """What ``spider`` opted in to: its ``crawlplug_page_methods`` and CRAWLPLUG_PAGE_METHODS."""
    names: set[str] = set()
    own = getattr(spider, SPIDER_ATTRIBUTE, None) if spider is not None else None
    if own:
        names.update([own] if isinstance(own, str) else own)
    settings = getattr(spider, "settings", None)
    if settings is not None:
        names.update(setting(settings, "CRAWLPLUG_PAGE_METHODS", "getlist") or ())
    return frozenset(str(n) for n in names)


#: How a refusal ends: what a spider does to allow it.
_OPT_IN = (
    f"list it in the spider's {SPIDER_ATTRIBUTE} attribute or the CRAWLPLUG_PAGE_METHODS setting to "
    "allow it (docs/playwright.md)"
)


def _refusal(name: str, kwargs: dict[str, Any], opted: frozenset[str]) -> str | None:
    """Why a page method ``name`` with ``kwargs`` may not be stored or read, or None."""
    if name in opted:
        return None
    if name not in ALLOWED:
        return f"page method {name!r} is not one a stored request may run; {_OPT_IN}"
    paths = PATH_ARGUMENTS & set(kwargs)
    if paths:
        return f"page method {name!r} with a {min(paths)!r} argument writes a file on the node; {_OPT_IN}"
    return None


class PageMethodCodec:
    """scrapy-playwright's PageMethod as {"method", "args", "kwargs"} (or {"spider_method", ...})."""

    name = "playwright.PageMethod"

    def __init__(self, page_method: type) -> None:
        self.type = page_method

    def encode(self, value: Any, spider: Spider | None) -> Any:
        opted = allowed_names(spider)
        method = value.method
        if callable(method):
            name = getattr(getattr(method, "__func__", None), "__name__", None)
            if spider is None or getattr(method, "__self__", None) is not spider or name is None:
                raise SerializationError(
                    f"PageMethod({method!r}) is a callable that is not a method of the spider: "
                    "it cannot be stored (a spider method can, by name, when opted in)"
                )
            if name not in opted:
                raise SerializationError(f"PageMethod of the spider method {name!r} is not allowed; {_OPT_IN}")
            head: dict[str, Any] = {"spider_method": name}
        elif isinstance(method, str):
            reason = _refusal(method, value.kwargs, opted)
            if reason is not None:
                raise SerializationError(reason)
            head = {"method": method}
        else:
            raise SerializationError(
                f"PageMethod method must be a name or a spider method, got {type(method).__name__}"
            )
        where = f"PageMethod({head.get('method') or head['spider_method']!r})"
        args = metacodecs.encode(list(value.args), spider, f"{where} arguments")
        kwargs = metacodecs.encode(dict(value.kwargs), spider, f"{where} arguments")
        return {**head, **({"args": args} if args else {}), **({"kwargs": kwargs} if kwargs else {})}

    def decode(self, data: Any, spider: Spider | None) -> Any:
        if not isinstance(data, dict) or not set(data) <= {"method", "spider_method", "args", "kwargs"}:
            raise DecodeError("a stored PageMethod is not an object of method, args, kwargs")
        args, kwargs = data.get("args", []), data.get("kwargs", {})
        if not isinstance(args, list) or not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs):
            raise DecodeError("a stored PageMethod's args must be a list and its kwargs an object")
        own = OWN_ARGUMENTS & set(kwargs)
        if own:  # PageMethod(method, *args, **kwargs) would raise TypeError building it
            raise DecodeError(f"a stored PageMethod's kwargs name {min(own)!r}, which is PageMethod's own argument")
        args = metacodecs.decode(args, spider, "PageMethod arguments")
        kwargs = metacodecs.decode(kwargs, spider, "PageMethod arguments")
        opted = allowed_names(spider)
        if ("method" in data) == ("spider_method" in data):
            raise DecodeError("a stored PageMethod names one of method or spider_method")
        if "spider_method" in data:
            name = data["spider_method"]
            if not isinstance(name, str) or name not in opted:
                raise DecodeError(
                    f"a stored PageMethod names the spider method {name!r:.80}, which this "
                    f"node's spider does not allow; {_OPT_IN}"
                )
            method = getattr(spider, name, None)
            if not callable(method) or getattr(method, "__self__", None) is not spider:
                raise DecodeError(f"a stored PageMethod names the spider method {name!r}, which the spider lacks")
            return self._built(method, args, kwargs)
        name = data["method"]
        if not isinstance(name, str):
            raise DecodeError("a stored PageMethod's method is not a name")
        reason = _refusal(name, kwargs, opted)
        if reason is not None:
            raise DecodeError(f"a stored request asks: {reason}")
        return self._built(name, args, kwargs)

    def _built(self, method: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
        try:
            return self.type(method, *args, **kwargs)
        except (TypeError, ValueError) as exc:  # a later PageMethod with arguments of its own
            raise DecodeError(f"a stored PageMethod cannot be built: {exc}") from None


if PageMethod is not None:
    metacodecs.register(PageMethodCodec(PageMethod))
