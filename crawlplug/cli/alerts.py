"""``crawlplug alerts``: alert rules of a crawl, evaluated by ``crawlplug control`` (and
the dashboard), notified through Apprise.

    crawlplug alerts add CRAWL --when "error_rate > 0.2 for 2m" --notify URL [--name N] [--create]
    crawlplug alerts list [CRAWL] [--json]
    crawlplug alerts delete CRAWL NAME

Thin commands over :mod:`crawlplug.alerts.rules` and :mod:`crawlplug.alerts.store`.
"""

from __future__ import annotations

import json
from typing import Any

import click

from .. import defaults
from ..access import audit
from ..alerts import rules as alerts
from ..alerts import store as stored
from ..controlprocess import utc
from ..crawl import registry
from ..errors import ConfigError
from ..frontier.keys import CrawlKeys
from .common import Cli, Target, create_if_new, fail, main, pass_cli


@main.group("alerts")
def alerts_group() -> None:
    """Alert rules: a condition on a crawl's metrics and where to say when it holds.

    The leading `crawlplug control` process (or a dashboard of the crawl) evaluates
    them every second; an alert is sent once when it fires and once when it clears.
    Metrics: error_rate, dead_letters_growth, no_progress_minutes, silent_nodes,
    null_rate(SITE.FIELD), limit_reached, redis_memory_percent (docs/alerts.md).
    """


def _free_name(have: dict[str, Any]) -> str:
    n = 1
    while f"rule{n}" in have:
        n += 1
    return f"rule{n}"


@alerts_group.command("add")
@pass_cli(crawl_argument="CRAWL")
@click.option(
    "--when",
    "when",
    required=True,
    help="The condition: METRIC[(ARG)] [OP NUMBER] [for DURATION], e.g. "
    "'error_rate > 0.2 for 2m', 'no_progress_minutes >= 10', 'null_rate(shop.price) > 0.1'.",
)
@click.option(
    "--notify",
    "notify",
    multiple=True,
    metavar="URL",
    help="Where to send it: an Apprise URL (json://host:port/path or jsons:// posts JSON to a webhook; "
    "mailto://, slack://, tgram://...). Repeatable; none: recorded and shown only.",
)
@click.option("--name", "rule_name", default=None, help="The rule's name (the same name replaces it; default rule<N>).")
@click.option(
    "--cooldown",
    type=click.FloatRange(min=0),
    default=defaults.SETTINGS["CRAWLPLUG_ALERT_COOLDOWN"][0],
    show_default=True,
    help="Seconds after a notification during which a new episode is not sent.",
)
@click.option(
    "--then",
    "then",
    type=click.Choice(list(alerts.ACTIONS)),
    default=None,
    help="What the rule does when it fires, besides notifying: pause, drain or stop the running run, "
    "or pause-schedules (the crawl's schedules wait until `crawlplug schedule resume`; the one "
    "action of a rule checked 'at end').",
)
@click.option(
    "--create",
    is_flag=True,
    help="CRAWL does not exist yet (its first node has not started): create it. "
    "Without it a crawl unknown to this Redis is refused: a rule on a misspelt crawl never fires.",
)
def alerts_add(
    keys: CrawlKeys,
    target: Target,
    when: str,
    notify: tuple[str, ...],
    rule_name: str | None,
    cooldown: float,
    then: str | None,
    create: bool,
) -> None:
    """Add an alert rule to CRAWL."""
    if not create and not registry.exists(target.client, keys):
        fail(
            f"{registry.unknown_crawl_message(target.client, keys)}; to watch a crawl before its first node "
            "starts, give --create"
        )
    have = stored.rules(target.client, keys)
    rule = alerts.make_rule(rule_name or _free_name(have), when, list(notify), cooldown, then)
    if create_if_new(target, keys):
        click.echo(f"crawl {keys.crawl!r} is new: created it")
    new = stored.put(target.client, keys, rule)
    audit.record(
        target.client,
        audit.cli_user(),
        "alerts.add",
        keys.crawl,
        {"rule": rule["id"], "when": rule["when"], "notify": len(notify), "then": then},
    )
    where = f"notifying {len(notify)} URL{'s' if len(notify) != 1 else ''}" if notify else "recorded only (no --notify)"
    click.echo(
        f"{'added' if new else 'replaced'} alert rule {rule['id']!r} of crawl {keys.crawl!r}: {rule['when']}; {where}"
        + (f"; then {then}" if then else "")
    )
    click.echo("  it is evaluated by `crawlplug control` (or the crawl's dashboard) while one runs")


@alerts_group.command("list")
@pass_cli(crawl_argument="[CRAWL]")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def alerts_list(cli: Cli, as_json: bool) -> None:
    """The alert rules of CRAWL, or of every crawl: condition, state, recent events."""
    target = cli.target
    crawls = [cli.crawl] if cli.crawl else stored.alerting_crawls(target.client)
    from ..alerts import outbox  # noqa: PLC0415

    found = {
        c: {
            **alerts.view(target.client, CrawlKeys(c)),
            "pending": outbox.pending(target.client, CrawlKeys(c)),
            "failed": outbox.failed(target.client, CrawlKeys(c)),
        }
        for c in crawls
    }
    if as_json:
        click.echo(json.dumps(found, indent=2))
        return
    total = sum(len(v["rules"]) for v in found.values())
    click.echo(f"{total} alert rule{'s' if total != 1 else ''} on {target.safe_url}")
    for crawl_name, got in found.items():
        for rule in got["rules"]:
            if "unreadable" in rule:
                click.echo(f"  {crawl_name}/{rule['id']}: unreadable ({rule['unreadable']!r}): delete it")
                continue
            value = f", value {rule['value']:g}" if isinstance(rule.get("value"), (int, float)) else ""
            if rule.get("why"):  # its metric cannot be evaluated now
                value = f" ({rule['why']})"
            then = f", then {rule['then']}" if rule.get("then") else ""
            click.echo(
                f"  {crawl_name}/{rule['id']}  {rule['when']}  {rule['state']}{value}  "
                f"notify {len(rule.get('notify') or [])} URL(s), cooldown {rule.get('cooldown', 0):g} s{then}"
            )
            action = rule.get("action")
            if isinstance(action, dict):
                click.echo(f"    {utc(action.get('at'))}: did {action.get('then')} ({action.get('outcome')})")
        for event in got["events"][:5]:
            click.echo(
                f"    {utc(event.get('at'))}: {event.get('rule')} {event.get('event')} "
                f"(value {event.get('value')}){'' if event.get('sent') else ', not sent'}"
            )
        for note in got.get("pending", []):
            click.echo(
                f"    notification of {note['rule']} waiting: attempt {note['attempts'] + 1} at {utc(note['due'])}"
                + (f" (last: {note['last_error']})" if note.get("last_error") else "")
            )
        for note in got.get("failed", [])[:5]:
            click.echo(
                f"    notification of {note['rule']} NOT DELIVERED after {note['attempts']} attempts "
                f"(last {utc(note.get('last_attempt'))}: {note.get('last_error')})"
            )


@alerts_group.command("test")
@pass_cli(crawl_argument="CRAWL", required=True)
@click.argument("rule_name", metavar="RULE")
def alerts_test(keys: CrawlKeys, target: Target, rule_name: str) -> None:
    """Send one test notification of RULE of CRAWL to its URLs now, and say whether it went through."""
    from ..alerts import outbox  # noqa: PLC0415

    who = audit.cli_user()
    try:
        sent = outbox.send_test(target.client, keys, rule_name, who.name)
    except ConfigError as exc:
        audit.record(target.client, who, "alerts.test", keys.crawl, {"rule": rule_name}, f"refused: {exc}")
        fail(str(exc))
    audit.record(target.client, who, "alerts.test", keys.crawl, {"rule": rule_name}, "ok" if sent else "not sent")
    if not sent:
        fail(f"the test notification of rule {rule_name!r} was not sent (its URLs refused it or could not be reached)")
    click.echo(f"sent a test notification of alert rule {rule_name!r} of crawl {keys.crawl!r}")


@alerts_group.command("delete")
@pass_cli(crawl_argument="CRAWL", required=True)
@click.argument("rule_name", metavar="NAME")
def alerts_delete(keys: CrawlKeys, target: Target, rule_name: str) -> None:
    """Delete alert rule NAME of CRAWL."""
    deleted = stored.delete(target.client, keys, rule_name)
    audit.record(
        target.client,
        audit.cli_user(),
        "alerts.delete",
        keys.crawl,
        {"rule": rule_name},
        "ok" if deleted else "no such rule",
    )
    if not deleted:
        have = ", ".join(stored.rules(target.client, keys)) or "none"
        fail(f"crawl {keys.crawl!r} has no alert rule {rule_name!r} (it has: {have})")
    click.echo(f"deleted alert rule {rule_name!r} of crawl {keys.crawl!r}")
