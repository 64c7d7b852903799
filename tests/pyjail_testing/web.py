"""Small web servers on the host's loopback, for the tests of controlled egress.

hello_server answers every GET with "hello HOST", HOST being the request's own Host header, so
a test sees which name the jail's request carried:

    with hello_server() as port:
        pyjail.run(..., allow_hosts=[f"web.test:{port}"],
                   options={"net_resolve": {"web.test": "127.0.0.1"}})

package_index serves a PEP 503 simple index of wheels the test builds itself (make_wheel: a
module with one constant, no code from anywhere else), for pip in a jail:

    with package_index([make_wheel(tmp, "pj-tiny-widget", "tinywidget")]) as index:
        pyjail.run(..., net="allow", allow_hosts=[index.host],
                   options={"net_resolve": index.resolve}, env=index.pip_env)
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import html
import http.server
import re
import threading
import zipfile
from pathlib import Path
from typing import Iterator, Sequence


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


# --------------------------------------------------------------------------------------------
# A package index


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def make_wheel(directory: Path, dist: str, module: str, version: str = "1.0",
               source: str = "VALUE = 42\n") -> Path:
    """A pure-Python wheel of distribution `dist` holding module `module` (its __init__.py
    is `source`), written into `directory`; returns its path."""
    stem = f"{re.sub(r'[-.]+', '_', dist)}-{version}"
    info = f"{stem}.dist-info"
    files = {
        f"{module}/__init__.py": source.encode(),
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: pyjail-tests\nRoot-Is-Purelib: true\n"
                         b"Tag: py3-none-any\n",
        f"{info}/top_level.txt": f"{module}\n".encode(),
    }

    def digest(data: bytes) -> str:
        return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()

    record = "".join(f"{name},sha256={digest(data)},{len(data)}\n" for name, data in files.items())
    files[f"{info}/RECORD"] = (record + f"{info}/RECORD,,\n").encode()
    path = Path(directory) / f"{stem}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            z.writestr(name, data)
    path.chmod(0o644)
    return path


class PackageIndex:
    """What package_index yields: where the index is, and what was asked of it."""

    NAME = "index.test"

    def __init__(self, port: int):
        self.port = port
        self.requests: list[str] = []   # the paths asked, in order

    @property
    def host(self) -> str:
        """The --allow-host entry of the index."""
        return f"{self.NAME}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.NAME}:{self.port}/simple/"

    @property
    def resolve(self) -> dict[str, str]:
        """options={"net_resolve": ...} of the index's name (--net-resolve index.test:127.0.0.1)."""
        return {self.NAME: "127.0.0.1"}

    @property
    def pip_env(self) -> dict[str, str]:
        """The variables that point pip in the jail at the index (plain HTTP, so trusted by
        name), with nothing cached."""
        return {"PIP_INDEX_URL": self.url, "PIP_TRUSTED_HOST": self.NAME,
                "PIP_NO_CACHE_DIR": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


@contextlib.contextmanager
def package_index(wheels: Sequence[Path]) -> Iterator[PackageIndex]:
    """Serves a PEP 503 simple index of `wheels` on 127.0.0.1 for the `with` block: /simple/,
    /simple/NAME/ (links with their sha256) and the files."""
    by_project: dict[str, list[Path]] = {}
    for wheel in wheels:
        by_project.setdefault(_canonical(wheel.name.split("-")[0]), []).append(wheel)
    files = {w.name: w.read_bytes() for w in wheels}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (the stdlib's name)
            index.requests.append(self.path)
            path = self.path.split("?")[0]
            body, kind = None, "text/html"
            if path == "/simple/":
                body = "".join(f'<a href="/simple/{p}/">{p}</a>\n' for p in by_project)
            elif path.startswith("/simple/") and _canonical(path[8:].strip("/")) in by_project:
                body = "".join(
                    f'<a href="/files/{html.escape(w.name)}#sha256='
                    f'{hashlib.sha256(files[w.name]).hexdigest()}">{html.escape(w.name)}</a>\n'
                    for w in by_project[_canonical(path[8:].strip("/"))])
            elif path.startswith("/files/") and path[7:] in files:
                body, kind = files[path[7:]], "application/octet-stream"
            if body is None:
                self.send_error(404)
                return
            data = body.encode() if isinstance(body, str) else body
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    index = PackageIndex(server.server_address[1])
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield index
    finally:
        server.shutdown()
        server.server_close()
