"""What every ``crawlplug`` command shares: the click group, the ``--redis-url`` and
``--crawl`` options, reaching the Redis (or the project's embedded one), naming the
crawl, one-line errors, and :func:`pass_cli`, the one decorator that gives a command all
of them. Command modules import from here and register on :data:`main`; nothing here
imports a command module (crawlplug.cli does, to register them all)."""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click
import redis

from .. import __version__
from ..config.project import Project, project_root
from ..config.project import scrapy_project as _scrapy_project
from ..crawl import registry
from ..errors import ConfigError, CrawlplugError
from ..frontier.keys import CrawlKeys
from ..server import clients, embedded

F = TypeVar("F", bound=Callable[..., Any])


_REDIS_HELP = (
    "Redis of the crawl: redis://, rediss://, unix://, redis+cluster://h:p[,h:p] or "
    "redis+sentinel://h:p[,h:p]/service. "
    "Default: the embedded Redis of the Scrapy project in this directory (started if needed)."
)


META_URL = "crawlplug.safe_url"


#: Environment variable naming the crawl (not a Scrapy setting).
CRAWL_ENVVAR = "CRAWLPLUG_CRAWL"


_CRAWL_HELP = "Name of the crawl (the spider's name unless CRAWLPLUG_CRAWL_ID is set)."


@dataclass
class Options:
    redis_url: str | None = None
    crawl: str | None = None


class Fail(click.ClickException):
    """One line on stderr, exit code 1, no traceback."""

    def show(self, file: Any = None) -> None:
        click.echo(f"crawlplug: error: {self.format_message()}", err=True)


def fail(message: str) -> NoReturn:
    raise Fail(message)


def echo_counts(levels: dict[str, int], loggers: dict[str, int]) -> None:
    """A log's records counted by level and by logger, a line each (`logs`, `scrapyd log`)."""
    click.echo("by level: " + (", ".join(f"{k} {v}" for k, v in levels.items()) or "none"))
    click.echo("by logger: " + (", ".join(f"{k} {v}" for k, v in loggers.items()) or "none"))


def shared_options(*, envvar: bool) -> Callable[[F], F]:
    """``--redis-url`` and ``--crawl``; on the group they read the environment,
    on a command they override the group's values."""

    def decorate(func: F) -> F:
        func = click.option(
            "--crawl",
            "crawl",
            metavar="NAME",
            default=None,
            envvar=CRAWL_ENVVAR if envvar else None,
            show_envvar=envvar,
            help=_CRAWL_HELP,
        )(func)
        func = click.option(
            "--redis-url",
            metavar="URL",
            default=None,
            envvar="REDIS_URL" if envvar else None,
            show_envvar=envvar,
            help=_REDIS_HELP,
        )(func)
        return func

    return decorate


def friendly_errors(func: F) -> F:
    """Turn Redis and configuration errors met while a command runs into one line."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except (Fail, click.exceptions.Exit, click.Abort):
            raise
        except CrawlplugError as exc:
            fail(str(exc))
        except redis.RedisError as exc:
            url = click.get_current_context().meta.get(META_URL, "Redis")
            fail(f"Redis error on {url}: {exc}")

    return wrapper  # type: ignore[return-value]


def embedded_dir() -> Path:
    if project_root() is None:
        fail(
            "no --redis-url given (nor REDIS_URL) and no Scrapy project here "
            "(no scrapy.cfg in this directory or above) whose embedded Redis could be used"
        )
    from scrapy.utils.project import get_project_settings  # noqa: PLC0415

    # the project's own CRAWLPLUG_EMBEDDED_DIR, if it sets one
    return clients.embedded_dir(get_project_settings())


def scrapy_project(spider: str) -> Project:
    """:func:`crawlplug.config.project.scrapy_project`, its ConfigError one line (:func:`fail`)."""
    try:
        return _scrapy_project(spider)
    except ConfigError as exc:
        fail(str(exc))


#: What a command talks to: a client that answered PING, its URL, whether it is embedded.
Target = clients.Connection


#: Commands that may name a crawl with no state on this Redis. Those that write into it create
#: it, only once their own checks passed (a refused command creates nothing), and say so: the
#: commands that create a crawl, with a node that joins it (docs/operations.md). Every other
#: command that names an unknown crawl, to read it or change it, fails naming the known crawls.
CRAWL_MAY_BE_NEW = frozenset(
    {
        # feed a crawl before (or while) its nodes run: they create it
        "push",
        "seeds add",
        "domains set",
        "import",
        "migrate from-scrapy-redis",
        # start a crawl's nodes through Scrapyd, or schedule them: the first start creates the crawl
        "start",
        "schedule add",
        # an alert rule may watch a crawl before its first node starts, with --create only (a
        # rule on a misspelt crawl would never fire): the command checks it itself
        "alerts add",
        # a dashboard started before the crawl's first node: it says the crawl does not exist yet
        "dashboard",
        # name no crawl
        "crawls",
        "embedded start",
        "embedded stop",
        "embedded url",
    }
)


def _command_name() -> str:
    """The running command's path without the program name ("seeds add")."""
    path = click.get_current_context().command_path.split()
    return " ".join(path[1:])


def connect(opts: Options) -> Target:
    """A client that answered PING, or a :class:`Fail`; one naming a crawl that does not
    exist on it, unless the command may (CRAWL_MAY_BE_NEW)."""
    if opts.redis_url:
        url, is_embedded = opts.redis_url, False
    else:
        directory = embedded_dir()
        was_running = embedded.running(directory)
        try:
            url = embedded.ensure(directory)
        except OSError as exc:
            fail(f"could not start the embedded Redis in {directory}: {exc}")
        if not was_running:  # not silently: it goes on running after this command
            click.echo(
                f"crawlplug: started the embedded Redis of {directory}; it keeps running "
                "(`crawlplug embedded stop` stops it)",
                err=True,
            )
        is_embedded = True
    target = clients.Connection(clients.client_from_url(url), url, is_embedded)
    clients.check(target)  # RedisUnavailable: "cannot reach Redis at <masked url>: ..."
    click.get_current_context().meta[META_URL] = target.safe_url  # for friendly_errors
    if opts.crawl and _command_name() not in CRAWL_MAY_BE_NEW:
        try:
            keys = CrawlKeys(opts.crawl)
        except ValueError as exc:
            fail(str(exc))
        if not registry.exists(target.client, keys):
            fail(registry.unknown_crawl_message(target.client, keys))
    return target


@dataclass
class Cli:
    """What a command of :func:`pass_cli` was given: the shared options, its own over the
    group's, and what they name, each made when first read and then kept. A command that
    checks its own arguments first takes this and reads ``keys`` and ``target`` after its
    checks, so that a refused command neither starts the embedded Redis nor connects."""

    redis_url: str | None = None
    crawl: str | None = None

    @property
    def opts(self) -> Options:
        return Options(self.redis_url, self.crawl)

    @functools.cached_property
    def keys(self) -> CrawlKeys:
        """The crawl's keys, or a :class:`Fail`: no crawl named, or a name no key can hold."""
        return crawl_keys(self.opts)

    @functools.cached_property
    def target(self) -> Target:
        """The Redis, connected (:func:`connect`: PING answered, the crawl named known there
        unless the command may create it)."""
        return connect(self.opts)

    @functools.cached_property
    def server(self) -> Target:
        """The Redis, connected, whatever crawl is named: for a command over every crawl or
        over a key of its own."""
        return connect(Options(self.redis_url, None))


#: the parameter a command's CRAWL argument fills (pass_cli(crawl_argument=...))
_CRAWL_ARGUMENT = "crawl_argument"
#: what a command of pass_cli takes first, by the names of its first parameters
_PASSED = {("keys", "target"): "crawl", ("target",): "server", ("cli",): "cli"}


def pass_cli(
    *,
    crawl_argument: str | None = None,
    required: bool = False,
    crawl_option: bool = True,
    redis_help: str = _REDIS_HELP,
) -> Callable[[F], F]:
    """The one decorator of a command that reaches Redis, put right under the command's
    ``@group.command()``: it attaches ``--redis-url`` and ``--crawl`` (over the group's,
    which read REDIS_URL and CRAWLPLUG_CRAWL; ``crawl_option=False``: the Redis only), and
    with ``crawl_argument`` (its metavar: ``"CRAWL"``, ``"[CRAWL]"``) a CRAWL argument in
    front of the command's own, which names the crawl as --crawl does (both, differing:
    refused); it turns Redis and configuration errors met while the command runs,
    connecting included, into one line (:func:`friendly_errors`); and it passes the command,
    by the names of its first parameters:

    * ``keys, target``: the crawl's keys, then the Redis connected (the crawl known there
      unless the command may create it, :data:`CRAWL_MAY_BE_NEW`), before the command runs;
    * ``target``: the Redis connected, whatever crawl is named (a command over every crawl);
    * ``cli``: the :class:`Cli`, for a command that checks its own arguments before
      reaching Redis or names its crawl in a way of its own.
    """

    def decorate(func: F) -> F:
        names = tuple(inspect.signature(func).parameters)
        mode = next((m for first, m in _PASSED.items() if names[: len(first)] == first), None)
        if mode is None:
            raise TypeError(
                f"{func.__qualname__}: a command of pass_cli takes (keys, target, ...), "
                f"(target, ...) or (cli, ...), not {names[:2]}"
            )

        @functools.wraps(func)
        def command(*args: Any, redis_url: str | None, crawl: str | None = None, **kwargs: Any) -> Any:
            named = kwargs.pop(_CRAWL_ARGUMENT, None)
            if named and crawl and named != crawl:
                fail(f"two crawls named: {named!r} and --crawl {crawl!r}")
            parent = click.get_current_context().find_object(Options) or Options()
            cli = Cli(redis_url or parent.redis_url, (named or crawl or parent.crawl) if crawl_option else None)
            if mode == "crawl":
                keys = cli.keys  # "which crawl?" before the embedded Redis is started or a server asked
                return func(keys, cli.target, *args, **kwargs)
            if mode == "server":
                return func(cli.server, *args, **kwargs)
            return func(cli, *args, **kwargs)

        wrapped: Any = friendly_errors(command)
        wrapped.crawlplug_passes = mode  # what it hands the command (a test finds a command without one)
        if crawl_argument:
            wrapped = click.argument(_CRAWL_ARGUMENT, metavar=crawl_argument, required=required)(wrapped)
        if crawl_option:
            return shared_options(envvar=False)(wrapped)
        return click.option("--redis-url", metavar="URL", default=None, help=redis_help)(wrapped)

    return decorate


def create_if_new(target: Target, keys: CrawlKeys) -> bool:
    """A command that writes into a crawl that does not exist creates it (True), and says so."""
    if registry.exists(target.client, keys):
        return False
    registry.register(target.client, keys)
    return True


def created_note(keys: CrawlKeys) -> str:
    return (
        f"crawl {keys.crawl!r} is new: created it (nodes of a spider named {keys.crawl!r}, or with "
        f"CRAWLPLUG_CRAWL_ID={keys.crawl}, crawl it; is --crawl right?)"
    )


def crawl_keys(opts: Options) -> CrawlKeys:
    if not opts.crawl:
        fail("which crawl? give --crawl NAME (or set CRAWLPLUG_CRAWL); it is the spider's name by default")
    try:
        return CrawlKeys(opts.crawl)
    except ValueError as exc:
        fail(str(exc))


def text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def table(rows: list[tuple[str, Any]], indent: str = "  ") -> list[str]:
    width = max((len(label) for label, _ in rows), default=0)
    return [f"{indent}{label.ljust(width)}  {value}" for label, value in rows]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", "-V", prog_name="crawlplug", message="%(prog)s %(version)s")
@shared_options(envvar=True)
@click.pass_context
def main(ctx: click.Context, redis_url: str | None, crawl: str | None) -> None:
    """Operate crawlplug crawls: status, purge, dead letters, the embedded Redis.

    \b
    A run of a crawl:
      pause / resume        hold every node of the run, then let it go on
      stop CRAWL [--drain]  end the run (sticky: nodes started later exit)
      continue CRAWL        a stopped run, or one that hit a limit, goes on
      new-run CRAWL         after a stopped run: the next node begins a new one
      limits CRAWL          the run's crawl-wide limits (CLOSESPIDER_*)
    """
    ctx.obj = Options(redis_url, crawl)


def when(ms: Any) -> str:
    if not isinstance(ms, (int, float)) or isinstance(ms, bool):
        return "?"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000))
