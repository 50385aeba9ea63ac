"""A demo shop whose item pages change their markup when told: the price moves from
``<span class="price">`` to ``<span class="cost">`` (a site redesign, as the site studio's
tests meet one mid-crawl), and whose item pages can be held back so a test acts while the
crawl waits."""

from __future__ import annotations

import threading
import time

from crawlplug.demo.shop import DemoShop


class RedesignedShop(DemoShop):
    """Item pages say ``<span class="cost">`` for their price once :attr:`redesigned` is set.
    The n-th item page asked for is answered only once n <= :attr:`held_after` (None: at
    once), at most a minute later; :meth:`release` raises the bar. A page asked for again
    (a trial fetching a page the crawl had) is answered at once and not counted."""

    def __init__(self, *args, held_after: int | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.redesigned = threading.Event()
        self.held_after = held_after
        self.item_pages = 0
        self._answered: set[str] = set()
        self._bar = threading.Condition()

    def release(self, upto: int | None) -> None:
        """Answer item pages up to the ``upto``-th (None: every one)."""
        with self._bar:
            self.held_after = upto
            self._bar.notify_all()

    def render(self, path: str) -> tuple[int, bytes]:
        status, body = super().render(path)
        if not path.startswith("/item/"):
            return status, body
        deadline = time.monotonic() + 60
        with self._bar:
            if path not in self._answered:
                self.item_pages += 1
                n = self.item_pages
                while self.held_after is not None and n > self.held_after and time.monotonic() < deadline:
                    self._bar.wait(0.5)
                self._answered.add(path)
        if self.redesigned.is_set():
            body = body.replace(b'<span class="price">', b'<span class="cost">')
        return status, body
