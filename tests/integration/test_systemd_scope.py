"""Asking systemd for a delegated scope (--cgroup-manager), against a real dbus-daemon.

systemd itself runs in the VM tests (tests/vm/test_vm_systemd.py); here the other side is a
stand-in (fake_systemd_manager.py) on a private dbus-daemon, so that what pyjail sends, how it
waits for the job and what it does with each answer are checked on any host. The stand-in
delegates a real cgroup2 directory, as systemd would, so a run really happens in it.

pyjail asks only when systemd is the init and its own cgroup is not delegated: each run is
started in a mount namespace where /run/systemd/system exists, from a cgroup named like a
login session's scope ("….scope", which not even root may use without systemd's delegation).
Only --cpu-time is asked for (a copy of the strict profile without its memory, pids and cpus
limits): the cgroup2 hierarchy of a host whose controllers are bound to
cgroup v1 has no memory/pids/cpu controllers, and a scope could not give them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest
from pyjail_testing import REPO, skip_or_fail
from pyjail_testing.runs import describe

HERE = Path(__file__).resolve().parent
PYTHON = "/usr/bin/python3"  # the system's, with python3-dbus and python3-gi


def _cgroup2_mount() -> Path | None:
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        before, _, after = line.partition(" - ")
        if after.split()[0] == "cgroup2":
            return Path(before.split()[4])
    return None


@pytest.fixture(scope="module")
def bus():
    """A private dbus-daemon any user may connect to, with the stand-in manager on it."""
    if os.geteuid() != 0:
        skip_or_fail("the stand-in systemd must delegate cgroups: the tests must run as root")
    for tool in ("dbus-daemon", "unshare"):
        if shutil.which(tool) is None:
            skip_or_fail(f"{tool} is missing (Debian: dbus-daemon, util-linux)")
    probe = subprocess.run([PYTHON, "-c", "import dbus, gi"], capture_output=True)
    if probe.returncode != 0:
        skip_or_fail("python3-dbus and python3-gi are missing")
    mount = _cgroup2_mount()
    if mount is None:
        skip_or_fail("no cgroup2 hierarchy is mounted")
    # Where any user reaches the bus's socket, and the profile.
    d = Path(tempfile.mkdtemp(prefix="pyjail-it-bus-", dir="/tmp"))
    os.chmod(d, 0o755)
    # The strict profile without its memory, pids and cpus limits (see the docstring).
    strict = (REPO / "profiles" / "strict.toml").read_text()
    profile = d / "no-controllers.toml"
    # (Unset: a profile starts from strict, so leaving them out would keep them.)
    profile.write_text("".join(re.sub(r"^(memory|pids|cpus) *=.*", r'\1 = ""', line)
                               for line in strict.splitlines(keepends=True)))
    os.chmod(profile, 0o644)
    config = d / "bus.conf"
    config.write_text(f"""<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:path={d}/bus</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
    <allow own="*"/>
  </policy>
</busconfig>
""")
    daemon = subprocess.Popen(["dbus-daemon", f"--config-file={config}", "--nofork",
                               "--print-address"], stdout=subprocess.PIPE, text=True)
    address = daemon.stdout.readline().strip()
    tag = uuid.uuid4().hex[:8]
    # A login session's scope (not delegated) and the slice the stand-in puts scopes in.
    session = mount / f"pyjail-test-{tag}-session.scope"
    slice_dir = mount / f"pyjail-test-{tag}.slice"
    manager = None
    try:
        session.mkdir()
        slice_dir.mkdir()
        mode, log = d / "mode", d / "calls.jsonl"
        mode.write_text("delegate\n")
        log.write_text("")
        manager = subprocess.Popen([PYTHON, str(HERE / "fake_systemd_manager.py"), address,
                                    str(slice_dir), str(mode), str(log)],
                                   stdout=subprocess.PIPE, text=True)
        assert manager.stdout.readline().strip() == "ready"
        yield {"address": address, "mode": mode, "log": log, "slice": slice_dir,
               "session": session, "mount": mount, "profile": profile}
    finally:
        for process in (manager, daemon):
            if process is not None:
                process.kill()
                process.wait()
        # What systemd does when a scope is empty: its cgroup goes, with what pyjail made
        # below.
        for top in (slice_dir, session):
            if top.is_dir():
                for sub in sorted(top.rglob("*"), key=lambda p: len(p.parts), reverse=True):
                    if sub.is_dir():
                        sub.rmdir()
                top.rmdir()
        shutil.rmtree(d)


@pytest.fixture
def calls(bus):
    """The stand-in's calls made during the test, and its mode set to `delegate`."""
    bus["mode"].write_text("delegate\n")
    start = len(bus["log"].read_text().splitlines())

    def made():
        return [json.loads(line) for line in bus["log"].read_text().splitlines()[start:]]

    return made


def run_in_session(bus, pyjail_command, user, args, *, address=None, booted=True, timeout=60):
    """pyjail ARGS as `user`, from the fake login session, seeing systemd as the init."""
    script = f"""
set -e
echo $$ > {bus['session']}/cgroup.procs
mount -t tmpfs -o mode=755 pyjail-test /run
{'mkdir -p /run/systemd/system' if booted else ''}
exec "$@"
"""
    address = address or bus["address"]
    env = dict(os.environ, DBUS_SESSION_BUS_ADDRESS=address, DBUS_SYSTEM_BUS_ADDRESS=address)
    env.pop("XDG_RUNTIME_DIR", None)
    cmd = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh",
           *pyjail_command(user), "--profile", str(bus["profile"]), *map(str, args)]
    return subprocess.run(cmd, env=env, text=True, capture_output=True, timeout=timeout, cwd="/")


def scope_dirs(bus) -> list[Path]:
    return sorted(p for p in bus["slice"].iterdir() if p.is_dir())


def test_a_run_gets_a_delegated_scope_and_runs_in_it(bus, calls, as_user, pyjail_command, world_tmp):
    report = world_tmp.dir(0o777) / "report.json"
    before = scope_dirs(bus)
    r = run_in_session(bus, pyjail_command, as_user,
                       ["--verbose", "--cpu-time", "30", "--report", report, "--",
                        "python", "-c", "print('in the scope')"])
    assert r.returncode == 0, describe(r)
    assert r.stdout == "in the scope\n"
    (call,) = calls()
    assert re.fullmatch(r"pyjail-[0-9a-f]{16}\.scope", call["name"]), call
    assert call["mode"] == "fail"
    assert call["Delegate"] is True
    assert call["CollectMode"] == "inactive-or-failed"
    assert call["uid"] == as_user.invoker_uid
    assert call["aux"] == 0
    assert len(call["PIDs"]) == 1
    manager = "system" if as_user.is_root else "user"
    assert re.search(rf"pyjail: the {manager} manager delegated {call['name']} in [0-9.]+ ms\n",
                     r.stderr), describe(r)
    # The jail ran in a leaf of that scope, with the CPU time counted by its cgroup.
    facts = json.loads(report.read_text())
    relative = "/" + str((bus["slice"] / call["name"]).relative_to(bus["mount"]))
    assert facts["cgroup"].startswith(relative + "/pyjail-run-"), facts["cgroup"]
    assert facts["limits"]["cpu-time"]["mechanism"] == "cgroup-v2"
    assert "no cgroup v2" not in r.stderr
    # Left: the scope, empty, for systemd to collect (with CollectMode=inactive-or-failed,
    # even if it failed); no jail's leaf in it.
    (scope,) = [p for p in scope_dirs(bus) if p not in before]
    assert [p.name for p in scope.rglob("pyjail-run-*")] == []
    assert all((c / "cgroup.procs").read_text() == "" for c in [scope, *scope.rglob("*")]
               if c.is_dir())


def test_auto_falls_back_when_systemd_fails_and_says_why(bus, calls, as_user, pyjail_command):
    bus["mode"].write_text("failed\n")
    r = run_in_session(bus, pyjail_command, as_user,
                       ["--cpu-time", "30", "--", "python", "-c", "print('ran')"])
    assert r.returncode == 0, describe(r)
    assert r.stdout == "ran\n"
    (call,) = calls()
    manager = "system" if as_user.is_root else "user"
    assert (f"; systemd: cannot get a delegated scope from the {manager} manager over "
            f"{bus['address'][len('unix:path='):].split(',')[0]}") in r.stderr, describe(r)
    assert f"systemd's job for {call['name']} ended 'failed'" in r.stderr
    assert re.search(r"\); falling back: .*cpu-time by RLIMIT_CPU", r.stderr), describe(r)


@pytest.mark.parametrize("mode,why", [
    ("failed", "systemd's job for pyjail-{hex}.scope ended 'failed'"),
    ("refuse", "org.freedesktop.systemd1.UnitExists: Unit pyjail-{hex}.scope already exists."),
])
def test_explicit_systemd_fails_with_one_line(bus, calls, as_user, pyjail_command, mode, why):
    bus["mode"].write_text(mode + "\n")
    r = run_in_session(bus, pyjail_command, as_user,
                       ["--cgroup-manager", "systemd", "--cpu-time", "30", "--",
                        "python", "-c", "print('ran')"])
    assert r.returncode == 125, describe(r)
    assert r.stdout == ""
    (call,) = calls()
    manager = "system" if as_user.is_root else "user"
    origin = "$DBUS_SYSTEM_BUS_ADDRESS" if as_user.is_root else "$DBUS_SESSION_BUS_ADDRESS"
    socket = bus["address"][len("unix:path="):].split(",")[0]
    assert r.stderr == (
        f"pyjail: systemd: cannot get a delegated scope from the {manager} manager over {socket} "
        f"({origin}): {why.format(hex=call['name'][7:23])} (systemd-run --user --scope -p "
        f"Delegate=yes pyjail ... does the same by hand; --cgroup-manager none stops asking)\n")


def test_no_bus_is_todays_fallback(bus, calls, as_user, pyjail_command, world_tmp):
    """With no bus to ask, auto prints exactly what --cgroup-manager none does."""
    missing = f"unix:path={world_tmp.dir()}/no-bus"
    # The fallback notice on every run (not once a day), so that both runs say it.
    args = ["--cgroup-notice", "always", "--cpu-time", "30", "--", "python", "-c", "print('ran')"]
    auto = run_in_session(bus, pyjail_command, as_user, args, address=missing)
    none = run_in_session(bus, pyjail_command, as_user, ["--cgroup-manager", "none", *args],
                          address=missing)
    assert auto.returncode == none.returncode == 0, describe(auto)
    assert auto.stdout == none.stdout == "ran\n"
    assert auto.stderr == none.stderr
    explicit = run_in_session(bus, pyjail_command, as_user,
                              ["--cgroup-manager", "systemd", *args], address=missing)
    assert explicit.returncode == 125, describe(explicit)
    assert explicit.stderr.startswith("pyjail: systemd: cannot get a delegated scope from the ")
    assert ": connect: No such file or directory (systemd-run" in explicit.stderr
    assert explicit.stderr.count("\n") == 1
    assert calls() == []


@pytest.mark.parametrize("args", [
    ["--cgroup-manager", "none"],        # switched off
    ["--cgroup", "off"],                 # rlimits by choice
    ["--cgroup-parent", "{slice}"],      # a cgroup named: delegated, no scope needed
    [],                                  # no limit wants a cgroup (no --cpu-time below)
])
def test_no_connection_when_no_scope_is_needed(bus, calls, current_user, pyjail_command, args):
    args = [a.format(slice=bus["slice"]) for a in args]
    limits = ["--cpu-time", "30"] if args else ["--cpu-time", "0"]
    r = run_in_session(bus, pyjail_command, current_user,
                       [*args, *limits, "--", "python", "-c", "print('ran')"])
    assert r.returncode == 0, describe(r)
    assert calls() == []


def test_explicit_systemd_where_systemd_is_not_the_init(bus, calls, as_user, pyjail_command):
    r = run_in_session(bus, pyjail_command, as_user,
                       ["--cgroup-manager", "systemd", "--cpu-time", "30", "--",
                        "python", "-c", "print('ran')"], booted=False)
    assert r.returncode == 125, describe(r)
    assert r.stderr == ("pyjail: cgroup: --cgroup-manager systemd: systemd is not the init here "
                        "(/run/systemd/system does not exist) (or use --cgroup-manager auto)\n")
    assert calls() == []


def test_explain_says_a_scope_will_be_asked_for(bus, calls, as_user, pyjail_command):
    r = run_in_session(bus, pyjail_command, as_user,
                       ["--explain", "--cpu-time", "30", "--", "python", "-c", "pass"])
    assert r.returncode == 0, describe(r)
    manager = "system" if as_user.is_root else "user"
    origin = "$DBUS_SYSTEM_BUS_ADDRESS" if as_user.is_root else "$DBUS_SESSION_BUS_ADDRESS"
    assert (f"# cgroup:    a delegated scope from systemd's {manager} manager (asked over "
            f"{origin} when the jail runs), as ") in r.stdout, r.stdout
    assert calls() == []  # --explain runs nothing


def test_bad_cgroup_manager_value(run_jail, current_user):
    r = run_jail(["--cgroup-manager", "maybe", "--", "python", "-c", "pass"], user=current_user)
    assert r.returncode == 125
    assert r.stderr == ("pyjail: --cgroup-manager: 'maybe' is not a cgroup manager "
                        "(use auto, systemd or none)\n")
