"""A real webhook receiver on loopback: an HTTP server in a thread that keeps every
JSON body POSTed to it (what Apprise's json:// sends), for the alert tests."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class WebhookReceiver:
    """``url`` takes POSTs; ``received`` holds (path, decoded JSON body) in arrival order.

    ``fail_first``: the first N POSTs are answered 500 (a receiver that is down), and not
    kept in ``received``; ``attempts`` has every POST as (arrival ms, status answered)."""

    def __init__(self, fail_first: int = 0) -> None:
        self.received: list[tuple[str, Any]] = []
        self.attempts: list[tuple[int, int]] = []
        self.fail_first = fail_first
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body: Any = json.loads(raw)
                except ValueError:
                    body = raw.decode(errors="replace")
                with receiver._lock:
                    failing = len(receiver.attempts) < receiver.fail_first
                    receiver.attempts.append((int(time.time() * 1000), 500 if failing else 200))
                    if not failing:
                        receiver.received.append((self.path, body))
                self.send_response(500 if failing else 200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    def apprise_url(self, path: str = "hook") -> str:
        """The Apprise URL that posts JSON here (json://)."""
        return f"json://127.0.0.1:{self.port}/{path}"

    def bodies(self) -> list[Any]:
        with self._lock:
            return [body for _, body in self.received]

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
