"""How a test counts and recognises crawlplug's script calls on the wire, whichever way
they go out (crawlplug.frontier.scripts): FCALL of the Functions library on one Redis 7 or
later, EVALSHA of the scripts elsewhere (Redis 6, a cluster, a user refused FCALL)."""

from __future__ import annotations

import redis

from crawlplug.frontier.scripts import Scripts

#: the commands a script call goes out as (INFO commandstats names)
CALLS = ("evalsha", "fcall", "evalsha_ro", "fcall_ro", "eval", "eval_ro")
#: the same, as sent (a command's first word)
SENT = {name.upper() for name in CALLS}


def script_calls(r: redis.Redis) -> int:
    """How many script calls ``r``'s server has run since its stats were reset."""
    stats = r.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in CALLS)


def marker(r: redis.Redis, name: str) -> bytes:
    """What a call of script ``name`` carries on the wire against ``r``'s server: the
    library's function name (FCALL) or the script's SHA (EVALSHA)."""
    scripts = Scripts(r)
    if scripts.functions is not None:
        return scripts.functions.functions[name].encode()
    return scripts._scripts[name].sha.encode()
