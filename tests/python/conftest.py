"""Tests of the Python package (python/pyjail) against a real pyjail binary.

The binary is $PYJAIL_BIN (tests/run.sh points it at a staged installation),
else `pyjail` on PATH. The package is imported from this checkout's python/.
With PYJAIL_MUST_WORK=1, a test that would be skipped for a missing binary or
library fails instead.
"""

import os
import shutil
import subprocess
import sys

import pytest

from pyjail_testing import REPO
from pyjail_testing.package import need

sys.path.insert(0, str(REPO / "python"))


def _find_bin():
    path = os.environ.get("PYJAIL_BIN") or shutil.which("pyjail")
    return path if path and os.access(path, os.X_OK) else None


@pytest.fixture(scope="session")
def pyjail_bin():
    path = _find_bin()
    need(path is not None, "no pyjail binary ($PYJAIL_BIN or pyjail on PATH)")
    return path


@pytest.fixture(scope="session")
def data_rootfs(pyjail_bin):
    """The name of the installed `data` rootfs (numpy, pandas, ...), which tests/run.sh
    builds (cmake --build build --target rootfs-data)."""
    r = subprocess.run([pyjail_bin, "rootfs", "info", "data"], stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True, timeout=60)
    need(r.returncode == 0, "no data rootfs installed (cmake --build build --target "
                            "rootfs-data, then install): %s" % r.stderr.strip())
    return "data"


@pytest.fixture(autouse=True)
def _binary_env(request, monkeypatch):
    """Every test sees the binary through $PYJAIL_BIN, as a user would set it."""
    if "no_binary" in request.keywords:
        return
    path = _find_bin()
    if path is None:
        need(False, "no pyjail binary ($PYJAIL_BIN or pyjail on PATH)")
    monkeypatch.setenv("PYJAIL_BIN", path)


@pytest.fixture
def session():
    import pyjail
    s = pyjail.Session()
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def host_port():
    """A TCP port on the host's 127.0.0.1 with a listener behind it: what a jail must not reach."""
    import socket
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    try:
        yield server.getsockname()[1]
    finally:
        server.close()


def pytest_configure(config):
    config.addinivalue_line("markers", "no_binary: the test runs without $PYJAIL_BIN")
