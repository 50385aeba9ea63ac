"""A copy of the demo project for trials of site definitions (`crawlplug sites try`): its
settings point crawlplug at the test's Redis (so a trial that touched a crawl would show
there) and add a downloader middleware of the project's own, which marks every page it
lets through, so a test sees that the page was fetched with the project's settings."""

from __future__ import annotations

from pathlib import Path

#: What the project's middleware appends to every page's h1 text.
MARK = " [via the project's middleware]"

_MIDDLEWARE = f'''"""A downloader middleware of the project: marks the h1 of every page it lets through."""


class MarkPages:
    def process_response(self, request, response, spider=None):
        body = response.body.replace(b"</h1>", {MARK.encode()!r} + b"</h1>", 1)
        return response.replace(body=body)
'''


def trial_project(project: Path, redis_url: str) -> Path:
    """Turn the demo project copy ``project`` into the trial project; returns it."""
    (project / "spiders" / "trialmark.py").write_text(_MIDDLEWARE)
    with open(project / "settings" / "__init__.py", "a") as fh:
        fh.write(
            f"\nREDIS_URL = {redis_url!r}\n"
            "STATS_CLASS = 'crawlplug.stats.RedisStatsCollector'\n"
            "DOWNLOADER_MIDDLEWARES = {'spiders.trialmark.MarkPages': 500}\n"
        )
    return project
