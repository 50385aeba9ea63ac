"""Where ``crawlplug start`` lets nodes on other machines be handed a Redis: an address of
this machine only is refused in every spelling (the short and numeric forms every resolver
reads, unspecified addresses, IPv4 mapped into IPv6, *.localhost), through the command and
the check itself; a host name that resolves to loopback only here is a warning. No daemon
is contacted but on loopback; nothing outside loopback is a target.
"""

from __future__ import annotations

import socket

import pytest
from click.testing import CliRunner

from crawlplug.cli import main
from crawlplug.errors import ConfigError
from crawlplug.frontier.keys import CrawlKeys
from crawlplug.scrapyd import store as jobs
from crawlplug.scrapyd.addresses import local_address, resolves_here_to_loopback
from crawlplug.scrapyd.launch import check_reach

from .support.servers import free_port

KEYS = CrawlKeys("shop")


def cli(redis_url: str, *args: str):
    return CliRunner().invoke(main, ["--redis-url", redis_url, *args], env={"REDIS_URL": None, "CRAWLPLUG_CRAWL": None})


#: Every spelling of an address that, on each daemon's machine, means that machine itself.
LOCAL_SPELLINGS = {
    "127.1": "127.0.0.1 (loopback)",
    "2130706433": "127.0.0.1 (loopback)",
    "0x7f000001": "127.0.0.1 (loopback)",
    "0177.0.0.1": "127.0.0.1 (loopback)",
    "127.0.1.1": "127.0.1.1 (loopback)",
    "0.0.0.0": "0.0.0.0 (unspecified)",
    "[::ffff:127.0.0.1]": "127.0.0.1 (loopback)",
    "[::]": ":: (unspecified)",
    "[::1]": "::1 (loopback)",
    "[::ffff:0.0.0.0]": "0.0.0.0 (unspecified)",
    "LocalHost": "localhost",
    "db.localhost": "localhost",
}


@pytest.mark.parametrize("host", sorted(LOCAL_SPELLINGS))
def test_every_spelling_of_an_address_of_this_machine_only_is_refused_by_start(redis_url, r, host):
    # the node URL names the address; --redis-url is the suite's Redis this command reaches
    res = cli(
        redis_url,
        "start",
        "shop",
        "--scrapyd",
        "http://worker-1.invalid:6800",
        "--node-redis-url",
        f"redis://{host}:6379/0",
    )
    assert res.exit_code == 1, res.output
    assert f"an address of this machine only ({LOCAL_SPELLINGS[host]})" in res.output, res.output
    assert jobs.all_jobs(r, KEYS) == []
    with pytest.raises(ConfigError, match="an address of this machine only"):
        check_reach(f"redis://{host}:6379/0", ["http://10.1.2.3:6800"], embedded=False)


def test_a_daemon_at_a_numeric_spelling_of_loopback_is_this_machine_too():
    # one machine: a loopback Redis with daemons at 127.1 and [::ffff:127.0.0.1] is no mistake
    assert (
        check_reach("redis://127.0.0.1:6379/0", ["http://127.1:6800", "http://[::ffff:127.0.0.1]:6801"], embedded=False)
        == []
    )


def test_a_host_name_that_resolves_to_loopback_only_here_warns_and_is_not_refused(redis_url, r):
    name = socket.gethostname()
    here = resolves_here_to_loopback(name)
    if not here:
        pytest.skip(f"this machine's name {name!r} does not resolve to loopback here (/etc/hosts)")
    warnings = check_reach(f"redis://{name}:6379/0", ["http://10.1.2.3:6800"], embedded=False)
    assert warnings == [
        f"the Redis host {name!r} resolves to {', '.join(here)} (this machine only) here; the nodes "
        "on 10.1.2.3 resolve it themselves: make sure it names this machine's network address "
        "there"
    ]
    # `crawlplug start` says so and goes on to its next check: the daemon (by that name too, so
    # another machine to the check; here, nothing listens on its port) starts nothing
    res = cli(
        redis_url,
        "start",
        "shop",
        "--scrapyd",
        f"http://{name}:{free_port()}",
        "--node-redis-url",
        f"redis://{name}:6379/0",
    )
    assert res.exit_code == 1 and "an address of this machine only" not in res.output, res.output
    assert f"crawlplug: warning: the Redis host {name!r} resolves to" in res.output, res.output
    assert "nothing was started" in res.output and jobs.all_jobs(r, KEYS) == []


@pytest.mark.parametrize(
    "host",
    [
        "10.0.0.5",
        "[2001:db8::1]",
        "[::ffff:10.0.0.1]",
        "1.2.3",
        "redis.internal",
        "127.0.0.1.example.org",
        "localhost.example.org",
    ],
)
def test_addresses_and_names_of_other_machines_are_not_taken_for_this_one(host):
    assert local_address(host) is None
