"""A small web server on the host's loopback, for the tests of controlled egress: it answers
every GET with "hello HOST", HOST being the request's own Host header, so a test sees which
name the jail's request carried.

    with hello_server() as port:
        pyjail.run(..., allow_hosts=[f"web.test:{port}"], options={"net_resolve": "web.test:127.0.0.1"})
"""

from __future__ import annotations

import contextlib
import http.server
import threading
from typing import Iterator


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (the stdlib's name)
        body = b"hello " + self.headers["Host"].encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@contextlib.contextmanager
def hello_server() -> Iterator[int]:
    """Serves on 127.0.0.1 for the `with` block; yields the port."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
