"""Talking to Scrapyd daemons: its JSON API (https://scrapyd.readthedocs.io/en/stable/api.html).

Only what crawlplug uses: ``daemonstatus.json`` (is it there), ``listprojects.json``
and ``listspiders.json`` (can it run this spider), ``schedule.json`` (start a node),
``listjobs.json`` (what became of it), ``cancel.json`` (stop it), and a job's log file
(``logs/<project>/<spider>/<job>.log``, its last bytes). Plain ``urllib``
with a timeout: Scrapyd answers small JSON documents. A daemon URL may carry
Scrapyd's ``username:password`` (``http://user:pass@host:6800``); it is sent as HTTP
basic authentication and never shown (:attr:`Daemon.label`).
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from ..errors import ScrapydError
from ..server.clients import mask_url
from .addresses import is_loopback_host  # noqa: F401 - where launch.py and older callers find it

#: Seconds a call to a daemon may take (schedule.json and listspiders.json start a Python
#: process on the daemon to list its spiders: a few seconds).
TIMEOUT = 30.0


def normalize(url: str) -> str:
    """A daemon's base URL: ``http://`` added when no scheme is given, no trailing slash;
    :class:`ScrapydError` for what is no HTTP URL."""
    raw = url.strip()
    if "://" not in raw:
        raw = f"http://{raw}"
    parts = urllib.parse.urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ScrapydError(f"{url!r} is not a Scrapyd URL (http://host:6800)")
    try:
        parts.port  # noqa: B018 - raises on a port that is no number
    except ValueError:
        raise ScrapydError(f"{url!r} is not a Scrapyd URL: bad port") from None
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))


@dataclass(frozen=True)
class Daemon:
    """One Scrapyd daemon, by its base URL."""

    url: str
    timeout: float = TIMEOUT

    @classmethod
    def of(cls, url: str, timeout: float = TIMEOUT) -> Daemon:
        return cls(normalize(url), timeout)

    @property
    def label(self) -> str:
        """The URL as shown and recorded (a password masked)."""
        return mask_url(self.url)

    @property
    def host(self) -> str:
        return urllib.parse.urlsplit(self.url).hostname or ""

    def _request(self, endpoint: str, *, params: list[tuple[str, str]] | None = None, post: bool = False) -> Any:
        body = self._fetch(endpoint, params=params, post=post)
        try:
            answer = json.loads(body)
        except ValueError:
            raise ScrapydError(f"Scrapyd {self.label} answered {endpoint} with no JSON: {body[:120]!r}") from None
        if not isinstance(answer, dict) or answer.get("status") != "ok":
            message = answer.get("message") if isinstance(answer, dict) else answer
            raise ScrapydError(f"Scrapyd {self.label} refused {endpoint}: {message}")
        return answer

    def _fetch(
        self,
        endpoint: str,
        *,
        params: list[tuple[str, str]] | None = None,
        post: bool = False,
        headers: dict[str, str] | None = None,
        method: str | None = None,
        length: bool = False,
    ) -> bytes:
        """The body of the daemon's answer (``length``: its Content-Length instead, as text)."""
        parts = urllib.parse.urlsplit(self.url)
        netloc = parts.hostname or ""
        if ":" in netloc:
            netloc = f"[{netloc}]"
        if parts.port:
            netloc += f":{parts.port}"
        base = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))
        query = urllib.parse.urlencode(params or [])
        url = f"{base}/{endpoint}"
        data = None
        if post:
            data = query.encode()
        elif query:
            url += f"?{query}"
        request = urllib.request.Request(
            url, data=data, method=method or ("POST" if post else "GET"), headers=headers or {}
        )
        if parts.username is not None:
            user = urllib.parse.unquote(parts.username)
            password = urllib.parse.unquote(parts.password or "")
            token = base64.b64encode(f"{user}:{password}".encode()).decode()
            request.add_header("Authorization", f"Basic {token}")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:  # http(s) only: normalize()
                if length:
                    return str(response.headers.get("Content-Length") or 0).encode()
                return bytes(response.read())
        except urllib.error.HTTPError as exc:
            why = "wrong username or password (Scrapyd's username/password)" if exc.code == 401 else f"HTTP {exc.code}"
            raise ScrapydError(f"Scrapyd {self.label} answered {endpoint} with {why}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ScrapydError(f"cannot reach Scrapyd {self.label}: {reason}") from None

    def status(self) -> dict[str, Any]:
        """``daemonstatus.json``: pending, running, finished, node_name."""
        return self._request("daemonstatus.json")

    def projects(self) -> list[str]:
        return list(self._request("listprojects.json").get("projects", []))

    def versions(self, project: str) -> list[str]:
        """``listversions.json``: the project's versions deployed, the newest last."""
        return [str(v) for v in self._request("listversions.json", params=[("project", project)]).get("versions", [])]

    def spiders(self, project: str) -> list[str]:
        return list(self._request("listspiders.json", params=[("project", project)]).get("spiders", []))

    def schedule(self, project: str, spider: str, *, job: str, settings: dict[str, str], args: dict[str, str]) -> str:
        """``schedule.json``: queue one ``scrapy crawl`` of ``spider``; returns the job id."""
        params = [("project", project), ("spider", spider), ("jobid", job)]
        params += [("setting", f"{k}={v}") for k, v in settings.items()]
        params += list(args.items())
        return str(self._request("schedule.json", params=params, post=True).get("jobid", job))

    def jobs(self, project: str) -> dict[str, dict[str, Any]]:
        """``listjobs.json``: job id -> {"state": pending/running/finished, "pid", "start_time", ...}."""
        answer = self._request("listjobs.json", params=[("project", project)])
        out: dict[str, dict[str, Any]] = {}
        for state in ("pending", "running", "finished"):
            for job in answer.get(state, []):
                out[str(job.get("id"))] = {**job, "state": state}
        return out

    def log(self, project: str, spider: str, job: str, *, last_bytes: int = 1_000_000) -> str:
        """The last ``last_bytes`` of job ``job``'s log file, as the daemon's web server serves
        it (a Range request: a long job's log is not read whole). The first line is dropped
        when the file is longer (it would be cut). :class:`ScrapydError` if the daemon has
        none (its ``logs_dir`` off, or the job long gone: ``jobs_to_keep``)."""
        path = "/".join(urllib.parse.quote(x, safe="") for x in (project, spider, f"{job}.log"))
        try:
            # its size first: Twisted's file server fails a suffix range longer than the file
            size = int(self._fetch(f"logs/{path}", method="HEAD", length=True) or 0)
            tail = {"Range": f"bytes={size - last_bytes}-"} if size > last_bytes else None
            body = self._fetch(f"logs/{path}", headers=tail)
        except ScrapydError as exc:
            if "HTTP 404" in str(exc):
                raise ScrapydError(
                    f"Scrapyd {self.label} has no log of job {job} (its logs_dir is off, or it kept "
                    "only newer jobs' logs: jobs_to_keep)"
                ) from None
            raise
        out = body.decode("utf-8", errors="replace")
        if len(body) >= last_bytes and "\n" in out:
            out = out.split("\n", 1)[1]
        return out

    def cancel(self, project: str, job: str, signal: str = "TERM") -> str | None:
        """``cancel.json``: remove a pending job, or send ``signal`` to a running one; returns
        the job's state before ("pending", "running"), None if the daemon had no such live job."""
        answer = self._request(
            "cancel.json", params=[("project", project), ("job", job), ("signal", signal)], post=True
        )
        prev = answer.get("prevstate")
        return str(prev) if prev else None
