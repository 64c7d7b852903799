"""Limits out of the box on a systemd host: in a VM whose init is systemd (vm.py's systemd
flavour), pyjail is started where people start it -- a user's login-like session scope, a
user's cron-like service, root's session, root's service -- none of them delegated, with no
wrapper. Each time pyjail asks the right manager for a delegated scope over D-Bus, and
--memory, --pids and --cpus are enforced by cgroup v2. Afterwards neither manager lists a
pyjail unit and no pyjail cgroup is left."""

import json
import re

import pytest

CONTEXTS = ["user-session", "user-cron", "root-session", "root-service"]

# Runs pyjail in $ctx with a report, then prints its exit status, the report, and what was
# left behind.
REPORTED = r'''
report() {
    rm -f /tmp/report.json
    in_context "$ctx" "$PYJAIL" --verbose --report /tmp/report.json "$@"
    echo "@@RC@@ $?"
    echo "@@REPORT@@"; cat /tmp/report.json; echo "@@END@@"
    leftovers
}
'''


def parse(vm_run):
    out = vm_run.output
    m = re.search(r"^@@RC@@ (\d+)$", out, re.M)
    assert m, vm_run.describe()
    report = json.loads(out.split("@@REPORT@@\n", 1)[1].split("@@END@@", 1)[0])
    program = out.split("@@RC@@", 1)[0]
    return int(m.group(1)), report, program


def assert_in_a_delegated_scope(vm_run, report, ctx):
    out = vm_run.output
    manager = "system" if ctx.startswith("root") else "user"
    m = re.search(rf"pyjail: the {manager} manager delegated (pyjail-[0-9a-f]{{16}}\.scope) "
                  r"in ([0-9.]+) ms", out)
    assert m, vm_run.describe()
    assert f"/{m.group(1)}/pyjail-run-" in report["cgroup"], report["cgroup"]
    assert "no cgroup v2 for the limits" not in out
    assert "@@LEFTOVER@@" not in out, vm_run.describe()


@pytest.mark.parametrize("ctx", CONTEXTS)
@pytest.mark.vm(REPORTED + """
report --memory 64M --pids 20 --cpus 1 -- python3 -c 'x = bytearray(200 << 20); print("survived")'
""", timeout=60, flavour="systemd")
def test_memory(vm_run, ctx):
    rc, report, program = parse(vm_run)
    assert_in_a_delegated_scope(vm_run, report, ctx)
    assert "survived" not in program
    assert rc == 137, vm_run.describe()
    assert report["status"] == "oom"
    assert {report["limits"][k]["mechanism"] for k in ("memory", "pids", "cpus")} == {"cgroup-v2"}
    assert report["limits"]["memory"]["detail"] == "memory.max, memory.swap.max=0"


@pytest.mark.parametrize("ctx", CONTEXTS)
@pytest.mark.vm(REPORTED + """
report --pids 20 -- python3 -c '
import os, time
for i in range(100):
    if os.fork() == 0:
        time.sleep(5)
        os._exit(0)
'
""", timeout=60, flavour="systemd")
def test_pids(vm_run, ctx):
    rc, report, program = parse(vm_run)
    assert_in_a_delegated_scope(vm_run, report, ctx)
    assert rc == 1, vm_run.describe()
    assert "BlockingIOError" in program  # fork() failed with EAGAIN
    assert report["status"] == "pids-limit"
    assert report["limits"]["pids"]["mechanism"] == "cgroup-v2"


@pytest.mark.parametrize("ctx", CONTEXTS)
@pytest.mark.vm(REPORTED + """
report --cpus 0.5 --wall-time 3 -- python3 -c 'while True: pass'
""", timeout=60, flavour="systemd")
def test_cpus(vm_run, ctx):
    rc, report, _ = parse(vm_run)
    assert_in_a_delegated_scope(vm_run, report, ctx)
    assert rc == 124 and report["status"] == "wall-timeout", vm_run.describe()
    used = report["cpu_user_s"] + report["cpu_system_s"]
    # Half a CPU over ~3 s of wall time (a busy loop alone would take all of one).
    assert 0.35 * report["wall_time_s"] < used < 0.5 * report["wall_time_s"] + 0.3, report
    assert report["limits"]["cpus"]["mechanism"] == "cgroup-v2"


@pytest.mark.vm("""
in_context user-session "$PYJAIL" doctor
echo "@@RC@@ $?"
leftovers
""", timeout=90, flavour="systemd")
def test_doctor_says_a_scope_is_asked_for(vm_run):
    out = vm_run.output
    assert re.search(r"ok +cgroup manager +systemd: each run asks the user manager over "
                     r"\$XDG_RUNTIME_DIR/bus for a delegated scope, as cgroup "
                     r"/sys/fs/cgroup/user.slice/user-65534.slice/run-\S+\.scope is not "
                     r"delegated to uid 65534 \(got pyjail-[0-9a-f]{16}\.scope in [0-9.]+ ms\)",
                     out), vm_run.describe()
    assert re.search(r"ok +cgroup v2 +delegated: \S+/pyjail-[0-9a-f]{16}\.scope", out), vm_run.describe()
    assert "@@RC@@ 0" in out, vm_run.describe()
    assert "@@LEFTOVER@@" not in out


@pytest.mark.vm("""
in_context user-session "$PYJAIL" --cgroup-manager none --memory 64M -- python3 -c 'print("ran")'
echo "@@RC@@ $?"
leftovers
""", timeout=60, flavour="systemd")
def test_cgroup_manager_none_falls_back_as_before(vm_run):
    out = vm_run.output
    assert "ran\n" in out and "@@RC@@ 0" in out, vm_run.describe()
    assert "pyjail: no cgroup v2 for the limits (" in out
    assert "delegated pyjail-" not in out


@pytest.mark.vm("""
in_context user-session "$PYJAIL" --memory 64M -- python3 -c 'import time; time.sleep(120)' &
# Once the jail has its leaf, pyjail is the process in its scope's supervisor leaf.
i=0
until leaf=$(find /sys/fs/cgroup -name 'pyjail-run-*' -type d) && [ -n "$leaf" ]; do
    i=$((i + 1)); [ $i -ge 300 ] && { echo "@@NEVER-IN-A-SCOPE@@"; break; }
    usleep 100000
done
pid=$(cat "${leaf%/*}/pyjail-supervisor/cgroup.procs")
echo "@@IN@@ $leaf"
echo "@@PYJAIL@@ $(cat /proc/$pid/cgroup) $(cat /proc/$pid/comm)"
kill -9 $pid
wait
leftovers
""", timeout=90, flavour="systemd")
def test_a_sigkilled_pyjail_leaves_no_scope_behind(vm_run):
    out = vm_run.output
    assert "@@NEVER-IN-A-SCOPE@@" not in out, vm_run.describe()
    assert re.search(r"^@@IN@@ /sys/fs/cgroup/\S+/pyjail-[0-9a-f]{16}\.scope/pyjail-run-\S+$",
                     out, re.M), vm_run.describe()
    assert re.search(r"^@@PYJAIL@@ 0::/\S+/pyjail-[0-9a-f]{16}\.scope/pyjail-supervisor pyjail$",
                     out, re.M), vm_run.describe()
    # The jail died with its supervisor, the scope emptied, and systemd collected it -- the
    # jail's leaf with it.
    assert "@@LEFTOVER@@" not in out, vm_run.describe()
    assert vm_run.exit_code == 0, vm_run.describe()
