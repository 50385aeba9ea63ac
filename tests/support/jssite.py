"""A small site whose content only a browser sees: each page's quotes and its link to the
next page are written into the page by JavaScript, a moment after it loads.

    /page/<n>/      n = 1 .. pages: an empty <div id="quotes"> and a script that, after
                    ``delay_ms``, adds <div class="quote">Quote <n>.<i></div> (i = 1..per_page)
                    and, but on the last page, <li class="next"><a href="/page/<n+1>/">
    /               the same as /page/1/

The raw HTML holds no ``div.quote`` element and no link to the next page (the script
builds both from numbers), so a crawler that does not run the script finds nothing.
Every answered path is counted in :attr:`JsSite.hits`.
"""

from __future__ import annotations

import re
import shutil
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

PAGE = """<!doctype html>
<html><head><title>quotes {n}</title></head>
<body><div id="quotes"></div><ul id="pager"></ul>
<script>
setTimeout(function () {{
  var box = document.getElementById("quotes");
  for (var i = 1; i <= {per_page}; i++) {{
    var q = document.createElement("div");
    q.className = ["qu", "ote"].join("");
    q.textContent = ["Quote", " ", {n}, ".", i].join("");
    box.appendChild(q);
  }}
  if ({n} < {pages}) {{
    var li = document.createElement("li");
    li.className = "next";
    var a = document.createElement("a");
    a.href = ["/page/", {n} + 1, "/"].join("");
    a.textContent = "Next";
    li.appendChild(a);
    document.getElementById("pager").appendChild(li);
  }}
}}, {delay_ms});
</script></body></html>
"""

_PATH = re.compile(r"^/(?:page/([1-9][0-9]*)/)?$")


def chromium() -> str | None:
    """Debian's chromium binary (the wrapper script /usr/bin/chromium runs it), or None."""
    for path in ("/usr/lib/chromium/chromium", shutil.which("chromium"), shutil.which("chromium-browser")):
        if path and shutil.which(path):
            return path
    return None


class JsSite:
    """The site on 127.0.0.1 (a free port), in a thread, as a context manager."""

    def __init__(self, pages: int = 3, per_page: int = 2, delay_ms: int = 300) -> None:
        self.pages, self.per_page, self.delay_ms = pages, per_page, delay_ms
        self.hits: Counter[str] = Counter()
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                site.hits[path] += 1
                match = _PATH.match(path)
                n = int(match.group(1) or 1) if match else 0
                if not 1 <= n <= site.pages:
                    self.send_error(404)
                    return
                body = PAGE.format(n=n, pages=site.pages, per_page=site.per_page, delay_ms=site.delay_ms).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def quotes(self) -> set[str]:
        """Every quote the site's pages show in a browser."""
        return {f"Quote {n}.{i}" for n in range(1, self.pages + 1) for i in range(1, self.per_page + 1)}

    def __enter__(self) -> JsSite:
        self.thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.server.shutdown()
        self.server.server_close()
