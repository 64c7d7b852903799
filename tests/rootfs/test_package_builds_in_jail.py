"""No package code and no pip resolution runs on the host: `pyjail rootfs build` runs pip in a
jail, and keeps what pip built from source only with --allow-build.

`--only-binary :all:` alone does not stop pip from building: it builds (a) a requirement that is
a local directory, (b) a direct reference `NAME @ URL` to a source archive, (c) anything a
requirements file lets it build with its own `--no-binary :all:` line, and (d) a URL dependency
of a wheel that came from --find-links or a private index. Each case's build code writes a
marker file at a host path (a directory made here, writable by every user); run on the host, as
the builder once did, it would be there. Now the marker never appears, and the build is refused
without --allow-build. The sdists are served from a --find-links directory and, for the direct
references, by an HTTP server on the host's loopback.

Environment: as test_rootfs_command.py (PYJAIL_BIN, PYJAIL_MUST_WORK).
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import shutil
import sys
import threading
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_rootfs_command import (  # noqa: E402,F401  (fixtures are used by name)
    UNPRIVILEGED, as_user, binary, describe, users, world_dir)
from test_rootfs_rebuild import one_error, run  # noqa: E402
from tiny_packages import make_project, make_sdist, make_wheel  # noqa: E402


@pytest.fixture
def marker_dir():
    """Where build code that runs on the host would leave its marker: a directory every user
    may write to, as /tmp is (so the unprivileged builds could write there too)."""
    d = world_dir("pyjail-marker-")
    os.chmod(d, 0o1777)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def server():
    """An HTTP server on the host's loopback, serving a directory of sdists."""
    d = world_dir("pyjail-served-")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(d))
    handler.log_message = lambda *a: None
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield d, "http://127.0.0.1:%d" % httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()
    shutil.rmtree(d, ignore_errors=True)


def readable(d):
    for p in Path(d).rglob("*"):
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    return d


def build(binary, user, links, *args):
    """A build by `user` (root, or the unprivileged user) into a directory of theirs."""
    top = world_dir()
    if user.name != "root":
        os.chown(top, UNPRIVILEGED, UNPRIVILEGED)
    try:
        r = run(binary, user, "rootfs", "build", "--out", top / "r", "--no-index",
                "--find-links", links, *map(str, args), "--quiet")
        left = sorted(p.name for p in top.iterdir())
        lock = None
        if r.returncode == 0:
            lock = json.loads((top / "r/etc/pyjail-rootfs.lock.json").read_text())
        return r, left, lock
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_a_local_directory_is_not_built_on_the_host(binary, as_user, marker_dir):
    links = world_dir()
    try:
        make_wheel(links, "tinydep", "1.0")
        project = make_project(links, "localproj", "1.0", marker=marker_dir / "built")
        readable(links)
        r, left, _ = build(binary, as_user, links, "--pip", project)
        assert not (marker_dir / "built").exists(), "build code ran on the host"
        assert r.returncode == 125 and left == [], describe(r)
    finally:
        shutil.rmtree(links, ignore_errors=True)


def test_a_direct_reference_is_not_built_on_the_host(binary, as_user, marker_dir, server):
    served, url = server
    make_sdist(served, "directref", "1.0", marker=marker_dir / "built")
    readable(served)
    links = world_dir()
    try:
        make_wheel(links, "tinydep", "1.0")
        readable(links)
        r, left, _ = build(binary, as_user, links, "--pip",
                           "directref @ %s/directref-1.0.tar.gz" % url)
        assert not (marker_dir / "built").exists(), "build code ran on the host"
        assert r.returncode == 125 and left == [], describe(r)
    finally:
        shutil.rmtree(links, ignore_errors=True)


def test_no_binary_in_a_requirements_file_is_not_built_on_the_host(binary, as_user, marker_dir):
    links = world_dir()
    try:
        make_sdist(links, "nobinary", "1.0", code="VALUE = 'built'\n", marker=marker_dir / "built")
        req = links / "requirements.txt"
        req.write_text("--no-binary :all:\nnobinary\n")
        readable(links)
        r, left, _ = build(binary, as_user, links, "--requirements", req)
        assert not (marker_dir / "built").exists(), "build code ran on the host"
        one_error(r, r"requirement nobinary: pip built it from nobinary-1\.0\.tar\.gz, a source "
                     r"distribution \(in the jail\), and built packages are kept only with "
                     r"--allow-build \(")
        assert left == []
        # Allowed, it is built in the jail: still nothing on the host, and the lock says so.
        r, left, lock = build(binary, as_user, links, "--requirements", req, "--allow-build")
        assert not (marker_dir / "built").exists(), "build code ran on the host"
        assert r.returncode == 0, describe(r)
        entry = next(p for p in lock["packages"] if p["name"] == "nobinary")
        assert entry["built"] is True and entry["wheel"] is None
        assert entry["built_from"] == {"file": "nobinary-1.0.tar.gz", "in": "jail",
                                       "sha256": entry["built_from"]["sha256"]}
        assert len(entry["built_from"]["sha256"]) == 64
    finally:
        shutil.rmtree(links, ignore_errors=True)


def test_a_url_dependency_of_a_wheel_is_not_built_on_the_host(binary, as_user, marker_dir, server):
    served, url = server
    make_sdist(served, "urldep", "1.0", marker=marker_dir / "built")
    readable(served)
    links = world_dir()
    try:
        make_wheel(links, "wantsurl", "1.0", requires=["urldep @ %s/urldep-1.0.tar.gz" % url])
        readable(links)
        r, left, _ = build(binary, as_user, links, "--pip", "wantsurl")
        assert not (marker_dir / "built").exists(), "build code ran on the host"
        assert r.returncode == 125 and left == [], describe(r)
    finally:
        shutil.rmtree(links, ignore_errors=True)
