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
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))

MUST_WORK = os.environ.get("PYJAIL_MUST_WORK") == "1"


def need(condition, why):
    """Skip when a prerequisite is missing; fail instead under PYJAIL_MUST_WORK=1."""
    if condition:
        return
    if MUST_WORK:
        pytest.fail("PYJAIL_MUST_WORK=1 and " + why, pytrace=False)
    pytest.skip(why)


def import_or_skip(name):
    try:
        return __import__(name)
    except ImportError as e:
        need(False, "%s is not installed (%s): pip install 'python/[test]'" % (name, e))


def _find_bin():
    path = os.environ.get("PYJAIL_BIN") or shutil.which("pyjail")
    return path if path and os.access(path, os.X_OK) else None


@pytest.fixture(scope="session")
def pyjail_bin():
    path = _find_bin()
    need(path is not None, "no pyjail binary ($PYJAIL_BIN or pyjail on PATH)")
    return path


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


def host_processes(marker):
    """Host processes whose command line contains marker (a unique string)."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                cmd = f.read().replace(b"\0", b" ")
        except OSError:
            continue
        if marker.encode() in cmd:
            out.append(int(pid))
    return out


def wait_until(predicate, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def pyjail_children():
    """pyjail processes that are children of this test process."""
    me = str(os.getpid())
    kids = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % pid, "rb") as f:
                stat = f.read()
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                cmd = f.read().split(b"\0")[0]
        except OSError:
            continue
        fields = stat.rsplit(b")", 1)[1].split()
        if fields[1].decode() == me and cmd.endswith(b"pyjail") and fields[0] != b"Z":
            kids.append(int(pid))
    return kids


def run_python(code, env=None, timeout=120):
    """Run code in a host interpreter (this one) with the package importable."""
    e = dict(os.environ)
    e["PYTHONPATH"] = str(REPO / "python") + os.pathsep + e.get("PYTHONPATH", "")
    e.update(env or {})
    return subprocess.run([sys.executable, "-c", code], env=e, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, timeout=timeout)


def pytest_configure(config):
    config.addinivalue_line("markers", "no_binary: the test runs without $PYJAIL_BIN")
