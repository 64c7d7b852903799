"""pip in a jail with controlled egress: the data rootfs has `python -m pip`, and a run or a
session whose allowlist holds the package index installs a wheel from it into a writable
directory and imports it; an index that is not allowed is never reached.

The index is the tests' own (pyjail_testing.web.package_index: a PEP 503 simple index on the
host's 127.0.0.1, holding a wheel the test builds), its name pinned with --net-resolve.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from pyjail_testing import REPO, skip_or_fail
from pyjail_testing.runs import describe
from pyjail_testing.web import make_wheel, package_index

DIST, MODULE = "pj-tiny-widget", "tinywidget"
TIMEOUT = 180   # pip's imports on a loaded 2-CPU machine


@pytest.fixture(scope="module")
def wheel():
    from conftest import WorldTmp

    tmp = WorldTmp()
    yield make_wheel(tmp.dir(), DIST, MODULE)
    tmp.cleanup()


@pytest.fixture
def data_rootfs(run_jail, current_user):
    r = run_jail(["--rootfs", "data", "--explain"], user=current_user)
    if r.returncode != 0:
        skip_or_fail("no data rootfs (cmake --build build --target rootfs-data): " + r.stderr.strip())


def index_opts(index, allowed=True):
    """--net allow with the index's name pinned, pip pointed at it; `allowed`: the index
    itself in the allowlist, else another host only."""
    opts = ["--rootfs", "data", "--net", "allow", "--net-resolve", f"{index.NAME}:127.0.0.1",
            "--allow-host", index.host if allowed else "elsewhere.test:9"]
    for k, v in index.pip_env.items():
        opts += ["--env", f"{k}={v}"]
    return opts


PIP = """\
import subprocess, sys
def pip(*args):
    p = subprocess.run([sys.executable, "-m", "pip", "install", *args], stdin=subprocess.DEVNULL,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return p.returncode, p.stdout[-1500:]
"""


def test_a_run_pip_installs_from_the_allowed_index_with_target_or_user(
        data_rootfs, run_py, world_tmp, wheel, as_user):
    report = world_tmp.dir(0o777) / "report.json"
    with package_index([wheel]) as index:
        r = run_py(f"""\
            target = pip("--target", "/tmp/t", "{DIST}")
            user = pip("--user", "{DIST}")   # HOME is /tmp: ~/.local, on a new interpreter's path
            sys.path.insert(0, "/tmp/t")
            import {MODULE}
            fresh = subprocess.run([sys.executable, "-c", "import {MODULE}; print({MODULE}.__file__)"],
                                   stdout=subprocess.PIPE, text=True).stdout.strip()
            emit({{"target": target, "user": user, "value": {MODULE}.VALUE, "fresh": fresh}})
            """, user=as_user, setup=PIP, timeout=TIMEOUT,
            opts=[*index_opts(index), "--report", str(report)])
        asked = list(index.requests)
    got = r.result
    assert got["target"][0] == 0 and got["user"][0] == 0, describe(r)
    assert got["value"] == 42
    assert got["fresh"].startswith("/tmp/.local/lib/python3"), got
    assert asked.count(f"/simple/{DIST}/") == 2, asked
    decisions = json.loads(report.read_text())["egress"]["decisions"]
    assert {(d["host"], d["port"], d["verdict"]) for d in decisions} >= {
        (index.NAME, index.port, "allowed")}, decisions


def test_pip_cannot_reach_an_index_that_is_not_allowed(data_rootfs, run_py, world_tmp, wheel,
                                                       as_user):
    report = world_tmp.dir(0o777) / "report.json"
    with package_index([wheel]) as index:
        r = run_py(f"""\
            code, out = pip("--retries", "0", "--timeout", "5", "--target", "/tmp/t", "{DIST}")
            emit({{"code": code, "out": out}})
            """, user=as_user, setup=PIP, timeout=TIMEOUT,
            opts=[*index_opts(index, allowed=False), "--report", str(report)])
        asked = list(index.requests)
    got = r.result
    assert got["code"] != 0, got
    assert "No matching distribution" in got["out"] or "Could not find" in got["out"], got
    assert asked == [], asked        # the index (on the host's loopback) saw nothing
    egress = json.loads(report.read_text())["egress"]
    assert egress["dns_refused"] >= 1 and not [
        d for d in egress["decisions"] if d["host"] == index.NAME and d["verdict"] == "allowed"], egress


# A host program driving a Session through the package of this checkout, as the test's user.
SESSION_DRIVER = """\
import json, sys
sys.path.insert(0, sys.argv[1])
import pyjail
opts = json.loads(sys.argv[2])
with pyjail.Session(rootfs="data", net="allow", allow_hosts=[opts["host"]],
                    options={"net_resolve": opts["resolve"]}, env=opts["env"]) as s:
    install = s.run("import subprocess, sys\\n"
                    "p = subprocess.run([sys.executable, '-m', 'pip', 'install', '--target', "
                    "'/tmp/site', %r], capture_output=True, text=True)\\n"
                    "sys.path.append('/tmp/site')\\n"
                    "p.returncode" % opts["dist"], timeout=120, want_data=True)
    used = s.run("import %s\\n%s.VALUE" % (opts["module"], opts["module"]), timeout=30,
                 want_data=True)
    print(json.dumps({"install": install.data, "value": used.data,
                      "errors": [str(install.error), str(used.error)]}))
"""


def test_a_session_pip_installs_from_the_allowed_index_and_imports_it(
        data_rootfs, pyjail_bin, world_tmp, wheel, as_user):
    with package_index([wheel]) as index:
        arg = json.dumps({"host": index.host, "resolve": index.resolve, "env": index.pip_env,
                          "dist": DIST, "module": MODULE})
        driver = world_tmp.file("driver.py", SESSION_DRIVER)
        r = subprocess.run([*as_user.prefix, "/usr/bin/python3", str(driver), str(REPO / "python"), arg],
                           env={**os.environ, "PYJAIL_BIN": str(pyjail_bin)}, cwd="/",
                           capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 0, describe(r)
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert (got["install"], got["value"]) == (0, 42), got
