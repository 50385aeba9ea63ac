"""The dashboard's Sites page: the definitions stored in Redis, and trying one on a live page.

A trial runs ``python -m crawlplug.sites.fetch`` in a process of its own (Scrapy's
reactor cannot run inside the dashboard's event loop, and starts once per process),
in the dashboard's working directory, so it fetches with the settings of the Scrapy
project the dashboard was started in, as ``crawlplug sites try`` does. Trying fetches
a URL the operator names from the dashboard's machine: an action, it needs the token.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import redis

from ..errors import ConfigError
from ..sites.definition import parse_text
from ..sites.store import SiteStore

#: Seconds a trial may take, fetch included, before it is stopped.
TRIAL_TIMEOUT = 60.0


def stored_sites(client: redis.Redis) -> list[dict[str, Any]]:
    """The stored definitions: name, version, source, steps, fields (required ones marked)."""
    out = []
    for stored in SiteStore(client).all():
        doc = stored.doc
        fields = doc.get("fields") if isinstance(doc.get("fields"), dict) else {}
        out.append(
            {
                "name": stored.name,
                "version": stored.version,
                "source": stored.source,
                "stored_at": stored.stored_at,
                "n": stored.n,
                "by": stored.by,
                "steps": [s.get("name") for s in doc.get("steps", []) if isinstance(s, dict)],
                "fields": [
                    {"name": n, "required": bool(isinstance(f, dict) and f.get("required"))} for n, f in fields.items()
                ],
                "base_url": doc.get("base_url"),
            }
        )
    return out


def trial_request(client: redis.Redis, body: Any) -> dict[str, Any]:
    """What ``python -m crawlplug.sites.fetch`` reads, from a POST body: {"site": a stored
    name} or {"definition": YAML/JSON text}, "url", and optional "step", "base_url"."""
    if not isinstance(body, dict):
        raise ConfigError('send a JSON object: {"site" or "definition", "url", "step", "base_url"}')
    url = body.get("url")
    if not isinstance(url, str) or not url.strip():
        raise ConfigError("which page? give its url")
    if body.get("definition"):
        if not isinstance(body["definition"], str):
            raise ConfigError("definition: the text of a site definition (YAML or JSON)")
        doc, origin = parse_text(body["definition"], "the definition given"), "the definition given"
    elif body.get("site"):
        stored = SiteStore(client).get(str(body["site"]))
        if stored is None:
            known = ", ".join(SiteStore(client).names()) or "none"
            raise ConfigError(f"no site {body['site']!r} stored in Redis (stored: {known})")
        doc, origin = stored.doc, f"Redis (version {stored.version})"
    else:
        raise ConfigError("which definition? give a stored site's name, or the text of one")
    step = body.get("step") or None
    base_url = body.get("base_url") or None
    for name, value in (("step", step), ("base_url", base_url)):
        if value is not None and not isinstance(value, str):
            raise ConfigError(f"{name} must be text")
    return {"definition": doc, "origin": origin, "url": url.strip(), "step": step, "base_url": base_url}


async def run_trial(request: dict[str, Any], timeout: float = TRIAL_TIMEOUT) -> tuple[int, dict[str, Any]]:
    """(HTTP status, body) of a trial run in its own process: 200 with the trial, 400 with
    the error it met (an invalid definition, a page that did not come), 504 if too slow."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "crawlplug.sites.fetch",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(json.dumps(request).encode()), timeout)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()
        return 504, {"error": f"the trial took more than {timeout:.0f}s and was stopped"}
    try:
        result = json.loads(out or b"null")
    except ValueError:
        result = None
    if not isinstance(result, dict):
        tail = err.decode(errors="replace").strip().splitlines()[-3:]
        return 500, {"error": "the trial process failed: " + (" | ".join(tail) or f"exit code {proc.returncode}")}
    return (200 if proc.returncode == 0 else 400), result
