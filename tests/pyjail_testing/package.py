"""Helpers of the Python package's tests (tests/python), imported by name."""

import os
import subprocess
import sys
import time

from pyjail_testing import REPO, skip_or_fail


def need(condition, why):
    """Skip when a prerequisite is missing; fail instead under PYJAIL_MUST_WORK=1."""
    if not condition:
        skip_or_fail(why)


def import_or_skip(name):
    try:
        return __import__(name)
    except ImportError as e:
        need(False, "%s is not installed (%s): pip install 'python/[test]'" % (name, e))


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
