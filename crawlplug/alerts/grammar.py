"""The grammar of an alert rule's condition, read by an LALR parser (lark) that never backtracks.

A condition is text a user types and Redis hands back: every evaluation reads it again,
on the thread of ``crawlplug control`` that also fires the schedules. So it is read in
time linear in its length (lark's LALR(1) parser over a contextual lexer whose terminals
are single character classes, none with a nested or adjacent quantifier), and a condition
longer than :data:`MAX_LENGTH` characters is refused before it is read at all::

    condition  := metric [OP right] ["for" DURATION] ["at" "end"]
    metric     := NAME ["(" ARG ("," ARG)* ")"]          error_rate, null_rate(shop.price, 10m)
    right      := NUMBER | NUMBER "*" baseline | baseline   0.2, 0.5 * last_run.error_rate
    baseline   := "last_run" "." NAME
    OP         := > | >= | < | <= | == | !=

A bare metric means ``> 0``; ``for 2m`` (s, m, h, d, w, combined: ``1h30m``) makes the
condition hold that long before it fires. Which metrics exist, and which arguments each
takes, is :mod:`crawlplug.alerts.rules`'s to say.

``NUMBER * last_run.METRIC`` (or ``last_run.METRIC``) on the right makes the threshold
relative to the last run's value of a run metric; ``at end`` checks the condition once,
when a run ends. ``null_rate(SITE.FIELD, 10m)`` is the null rate over a window (the site's
minutes, crawlplug.sites.minutes). Every form that parses is evaluated today; a form added to
the grammar before its evaluator says so by :attr:`Condition.not_evaluated` (``crawlplug
alerts add`` refuses it, and an evaluator skips a stored one with one log line).

``run_end(STATE)`` parses and is evaluated (1 while the crawl's last run ended in
STATE).
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from lark import Lark, Token, Tree
from lark.exceptions import LarkError, UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from ..errors import ConfigError
from ..history.series import parse_duration

__all__ = ["MAX_LENGTH", "Condition", "read", "span"]

#: The longest condition read; a longer one is refused before it is parsed.
MAX_LENGTH = 500

_GRAMMAR = r"""
start: metric comparison? held? at_end?
metric: NAME ("(" ARG ("," ARG)* ")")?
comparison: COMPARE right
right: NUMBER                -> number
     | NUMBER "*" baseline   -> scaled
     | baseline              -> relative
baseline: "last_run" "." NAME
held: "for" DURATION
at_end: "at" "end"

COMPARE: ">=" | "<=" | "==" | "!=" | ">" | "<"
NAME: /[a-z_][a-z0-9_]*/
ARG: /[A-Za-z0-9_][A-Za-z0-9_.\-]*/
NUMBER: /[0-9]+(\.[0-9]+)?/
DURATION: /[0-9][0-9a-z]*/
WS: /[ \t\r\n\f]+/
%ignore WS
"""

#: How a rule is written, said with every error.
USAGE = "write METRIC[(ARG)] [OP NUMBER] [for DURATION], e.g. 'error_rate > 0.2 for 2m' (OP one of > >= < <= == !=)"


@functools.cache
def _parser() -> Lark:
    return Lark(_GRAMMAR, parser="lalr", lexer="contextual", maybe_placeholders=False)


@dataclass(frozen=True)
class Condition:
    """A parsed condition (module docstring): ``metric(arg[, window]) op threshold[ * last_run.baseline]
    [for for_ms] [at end]``."""

    metric: str
    arg: str | None
    op: str
    threshold: float
    for_ms: int
    #: null_rate(SITE.FIELD, WINDOW): the window in ms (0: the whole run)
    window_ms: int = 0
    #: NUMBER * last_run.METRIC: the metric of the last run the threshold scales
    baseline: str | None = None
    #: "at end": checked once, when a run ends
    at_end: bool = False

    @property
    def args(self) -> tuple[str, ...]:
        """The metric's arguments as written back."""
        if self.arg is None:
            return ()
        return (self.arg, span(self.window_ms)) if self.window_ms else (self.arg,)

    @property
    def not_evaluated(self) -> str | None:
        """Which part of this condition no evaluator computes yet (None: all of it is; every
        form the grammar reads today is evaluated)."""
        return None

    def holds(self, value: float, baseline: float | None = None) -> bool:
        """Whether ``value`` meets the condition (``baseline``: the last run's value of
        ``last_run.METRIC``, which the threshold scales)."""
        threshold = self.threshold if self.baseline is None else self.threshold * float(baseline or 0.0)
        return _OPS[self.op](value, threshold)

    def __str__(self) -> str:
        args = f"({', '.join(self.args)})" if self.args else ""
        right = _number(self.threshold) + (f" * last_run.{self.baseline}" if self.baseline is not None else "")
        held = f" for {span(self.for_ms)}" if self.for_ms else ""
        return f"{self.metric}{args} {self.op} {right}{held}{' at end' if self.at_end else ''}"


_OPS: dict[str, Callable[[float, float], bool]] = {
    ">": operator.gt,
    ">=": operator.ge,
    "<": operator.lt,
    "<=": operator.le,
    "==": operator.eq,
    "!=": operator.ne,
}


def span(ms: int) -> str:
    """ms as the grammar writes it: 2m, 90s, 1h (parse_duration reads it back)."""
    for unit, size in (("w", 604_800_000), ("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{max(1, round(ms / 1000))}s"


def _number(value: float) -> str:
    """``value`` as NUMBER reads it back exactly: no exponent, no needless ``.0``."""
    text = format(Decimal(repr(float(value))), "f")
    return text.removesuffix(".0")


def _where(exc: UnexpectedInput) -> str:
    """Where and what a syntax error is, in words."""
    if isinstance(exc, UnexpectedEOF) or (isinstance(exc, UnexpectedToken) and exc.token.type == "$END"):
        return "it ends too soon"
    column = getattr(exc, "column", None)
    if isinstance(exc, UnexpectedCharacters):
        return f"unexpected {exc.char!r} at column {column}"
    token = getattr(exc, "token", None)
    return f"unexpected {str(token)[:40]!r} at column {column}"


def read(text: Any, *, max_length: int | None = MAX_LENGTH) -> Condition:
    """``text`` as a :class:`Condition`, its syntax checked (not which metrics exist):
    ConfigError saying what is wrong. ``max_length``: longer text is refused unread."""
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(f"cannot read the condition {text!r:.80}: {USAGE}")
    if max_length is not None and len(text) > max_length:
        raise ConfigError(f"a condition is at most {max_length} characters; this one has {len(text)}")
    try:
        tree = _parser().parse(text)
    except UnexpectedInput as exc:
        raise ConfigError(f"cannot read the condition {text[:120]!r}: {_where(exc)}; {USAGE}") from None
    except LarkError as exc:  # pragma: no cover - every syntax error is an UnexpectedInput
        raise ConfigError(f"cannot read the condition {text[:120]!r}: {exc}") from None
    return _condition(tree, text)


def _condition(tree: Tree, text: str) -> Condition:
    parts = {child.data: child for child in tree.children if isinstance(child, Tree)}
    metric = parts["metric"].children
    name, args = str(metric[0]), [str(a) for a in metric[1:]]
    if len(args) > 2:
        raise ConfigError(
            f"cannot read the condition {text[:120]!r}: {name} takes at most two arguments, given {len(args)}"
        )
    window_ms = _duration(args[1], f"the window of {name}", text) if len(args) == 2 else 0
    op, threshold, baseline = ">", 0.0, None
    if "comparison" in parts:
        compare, right = parts["comparison"].children
        op = str(compare)
        numbers = [t for t in right.children if isinstance(t, Token)]
        threshold = _finite(str(numbers[0])) if numbers else 1.0
        ref = next((c for c in right.children if isinstance(c, Tree)), None)
        baseline = str(ref.children[0]) if ref is not None else None
    for_ms = _duration(str(parts["held"].children[0]), "the time after 'for'", text) if "held" in parts else 0
    return Condition(name, args[0] if args else None, op, threshold, for_ms, window_ms, baseline, "at_end" in parts)


def _duration(value: str, what: str, text: str) -> int:
    try:
        return parse_duration(value)
    except ConfigError as exc:
        raise ConfigError(f"cannot read the condition {text[:120]!r}: {what}: {exc}") from None


def _finite(value: str) -> float:
    number = float(value)
    if not math.isfinite(number):
        raise ConfigError(f"the number {value[:20]}... is too large")
    return number
