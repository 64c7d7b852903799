"""cgroup v2 limits for real, in a VM whose cgroup2 hierarchy has the memory, pids and cpu
controllers: as root, and as an unprivileged user from a cgroup delegated to it (the way a
systemd user session is), with no setuid bit and no daemon."""

import json
import re

import pytest

USERS = ["root", "nobody"]

# Runs pyjail with a report on fd 3, then prints the exit status, the report, and whether the
# run's cgroup is still there afterwards.
REPORTED = r'''
report() {
    rm -f /tmp/report.json
    as_user "$user" "$PYJAIL" --report-fd 3 "$@" 3>/tmp/report.json
    echo "@@RC@@ $?"
    echo "@@REPORT@@"; cat /tmp/report.json; echo "@@END@@"
    cg=$(sed -n 's/^  "cgroup": "\(.*\)",$/\1/p' /tmp/report.json)
    if [ -n "$cg" ] && [ -d "/sys/fs/cgroup$cg" ]; then echo "@@LEFTOVER@@ $cg"; fi
}
'''


def parse(vm_run):
    out = vm_run.output
    rc = int(re.search(r"^@@RC@@ (\d+)$", out, re.M).group(1))
    report = json.loads(out.split("@@REPORT@@\n", 1)[1].split("@@END@@", 1)[0])
    program = out.split("@@RC@@", 1)[0]
    return rc, report, program


def assert_cgroup_run(vm_run, report):
    assert report["cgroup"] is not None, vm_run.describe()
    assert "@@LEFTOVER@@" not in vm_run.output, "the run's cgroup was not removed"
    assert "no cgroup v2 for the limits" not in vm_run.output


@pytest.mark.parametrize("user", USERS)
@pytest.mark.vm(REPORTED + """
report --memory 64M -- python3 -c 'x = bytearray(24 << 20); print("survived", len(x) >> 20)'
""", timeout=90)
def test_memory_under_the_limit_is_there_to_use(vm_run, user):
    # The positive control of the bomb below: the same limit, a third of it touched (bytearray
    # zero-fills every page), and the program ends normally.
    rc, report, program = parse(vm_run)
    assert_cgroup_run(vm_run, report)
    assert rc == 0 and program == "survived 24\n", vm_run.describe()
    assert report["status"] == "ok" and report["oom_kills"] == 0
    assert report["limits"]["memory"]["mechanism"] == "cgroup-v2"
    assert 24 << 20 < report["memory_peak_bytes"] <= 64 << 20


@pytest.mark.parametrize("user", USERS)
@pytest.mark.vm(REPORTED + """
report --memory 64M -- python3 -c 'x = bytearray(200 << 20); print("survived")'
""", timeout=90)
def test_a_memory_bomb_is_oom_killed_as_a_whole(vm_run, user):
    rc, report, program = parse(vm_run)
    assert_cgroup_run(vm_run, report)
    assert "survived" not in program
    assert rc == 137, vm_run.describe()
    assert report["status"] == "oom"
    assert report["oom_kills"] >= 1
    assert report["limits"]["memory"] == {"value": str(64 << 20), "amount": 64 << 20, "unit": "bytes",
                                          "mechanism": "cgroup-v2",
                                          "detail": "memory.max, memory.swap.max=0"}
    assert report["memory_peak_source"] == "memory.peak"
    assert 1 << 20 < report["memory_peak_bytes"] <= (64 << 20) + (1 << 20)


@pytest.mark.parametrize("user", USERS)
@pytest.mark.vm(REPORTED + """
report --pids 20 -- python3 -c '
import os, time
children = []
for i in range(8):
    pid = os.fork()
    if pid == 0:
        time.sleep(2)
        os._exit(0)
    children.append(pid)
print("forked", len(children), "exited", sum(os.waitpid(c, 0)[1] == 0 for c in children))
'
""", timeout=90)
def test_processes_under_the_pids_limit_run(vm_run, user):
    # The positive control of the fork bomb below: the same limit, eight children at once.
    rc, report, program = parse(vm_run)
    assert_cgroup_run(vm_run, report)
    assert rc == 0 and program == "forked 8 exited 8\n", vm_run.describe()
    assert report["status"] == "ok" and report["pids_limit_hits"] == 0


@pytest.mark.parametrize("user", USERS)
@pytest.mark.vm(REPORTED + """
report --pids 20 -- python3 -c '
import os, time
forked = 0
try:
    for i in range(100):
        if os.fork() == 0:
            time.sleep(5)
            os._exit(0)
        forked += 1
finally:
    print("forked", forked, flush=True)
'
""", timeout=90)
def test_a_fork_bomb_hits_the_pids_limit(vm_run, user):
    rc, report, program = parse(vm_run)
    assert_cgroup_run(vm_run, report)
    assert rc == 1, vm_run.describe()
    assert "BlockingIOError" in program  # fork() failed with EAGAIN
    # Stopped near the limit, not at the first fork: 20 tasks, less the jail's pid 1 and the
    # program itself (a fork that always failed would have passed the lines above).
    forked = int(re.search(r"forked (\d+)", program).group(1))
    assert 12 <= forked <= 18, program
    assert report["status"] == "pids-limit"
    assert report["pids_limit_hits"] >= 1
    assert report["limits"]["pids"]["mechanism"] == "cgroup-v2"


@pytest.mark.parametrize("user", USERS)
@pytest.mark.vm(REPORTED + """
report --cpus 0.5 --wall-time 3 -- python3 -c 'while True: pass'
""", timeout=90)
def test_cpus_caps_the_bandwidth(vm_run, user):
    rc, report, _ = parse(vm_run)
    assert_cgroup_run(vm_run, report)
    assert rc == 124 and report["status"] == "wall-timeout"
    used = report["cpu_user_s"] + report["cpu_system_s"]
    # Half a CPU over ~3 s of wall time (a busy loop alone would take all of one).
    assert 0.35 * report["wall_time_s"] < used < 0.5 * report["wall_time_s"] + 0.3, report
    assert report["limits"]["cpus"]["mechanism"] == "cgroup-v2"


@pytest.mark.parametrize("user", USERS)
@pytest.mark.vm(REPORTED + """
report --cpu-time 1 --wall-time 60 -- python3 -c '
import os
os.fork()
while True: pass
'
""", timeout=90)
def test_cpu_time_counts_the_whole_tree(vm_run, user):
    rc, report, _ = parse(vm_run)
    assert_cgroup_run(vm_run, report)
    assert rc == 124, vm_run.describe()
    assert report["status"] == "cpu-timeout"
    used = report["cpu_user_s"] + report["cpu_system_s"]
    assert 1.0 <= used < 2.5, report
    # Two busy processes on two CPUs: the limit is reached in well under its length in
    # wall time only if both are counted.
    assert report["wall_time_s"] < 10


@pytest.mark.parametrize("user", USERS)
@pytest.mark.vm(REPORTED + """
report -- python3 -c 'print("hello")'
""", timeout=60)
def test_a_plain_run_uses_a_cgroup_and_removes_it(vm_run, user):
    rc, report, program = parse(vm_run)
    assert rc == 0 and program == "hello\n", vm_run.describe()
    assert_cgroup_run(vm_run, report)
    assert report["status"] == "ok"
    assert re.fullmatch(r"/.*/pyjail-run-\d+-\d+", report["cgroup"])
    assert {report["limits"][k]["mechanism"] for k in ("memory", "pids", "cpus", "cpu-time")} \
        == {"cgroup-v2"}


@pytest.mark.parametrize("user", USERS)
@pytest.mark.vm("""
cgroups() { find /sys/fs/cgroup -name 'pyjail-run-*' -type d | sort; }
as_user "$user" "$PYJAIL" -- python3 -c 'import time; time.sleep(60)' &
sleep 3
echo "running: $(cgroups | wc -l)"
# SIGKILL the supervisor (and the jail's pid 1, a copy of it): nothing cleans up the cgroup.
for p in /proc/[0-9]*; do
    [ "$(cat $p/comm 2>/dev/null)" = pyjail ] && kill -9 "${p#/proc/}"
done
sleep 1
echo "after SIGKILL: $(cgroups | wc -l)"
as_user "$user" "$PYJAIL" -- python3 -c 'print("next run")'
echo "after the next run: $(cgroups | wc -l)"
""", timeout=90)
def test_a_cgroup_left_by_a_killed_pyjail_is_removed_by_the_next_run(vm_run, user):
    assert vm_run.exit_code == 0, vm_run.describe()
    lines = vm_run.output.splitlines()
    assert "running: 1" in lines, vm_run.describe()
    assert "after SIGKILL: 1" in lines, vm_run.describe()
    assert "next run" in lines
    assert "after the next run: 0" in lines, vm_run.describe()


@pytest.mark.vm("""
mkdir -p /sys/fs/cgroup/not-delegated
sh -c 'echo $$ > /sys/fs/cgroup/not-delegated/cgroup.procs &&
    exec /usr/bin/setpriv --reuid=65534 --regid=65534 --clear-groups -- "$PYJAIL" --cgroup require -- python3 -c "print(1)"'
echo "require: $?"
sh -c 'echo $$ > /sys/fs/cgroup/not-delegated/cgroup.procs &&
    exec /usr/bin/setpriv --reuid=65534 --regid=65534 --clear-groups -- "$PYJAIL" -- python3 -c "print(2)"'
echo "auto: $?"
""", timeout=60)
def test_without_delegation_require_refuses_and_auto_falls_back_saying_so(vm_run):
    out = vm_run.output
    assert "require: 125" in out, vm_run.describe()
    assert ("pyjail: cgroup: cgroup v2 is required (--cgroup require), but cgroup "
            "/sys/fs/cgroup/not-delegated is not delegated to uid 65534; run pyjail in a "
            "delegated cgroup, e.g. `systemd-run --user --scope -p Delegate=yes pyjail ...`") in out
    assert "auto: 0" in out and "\n2\n" in out
    assert "pyjail: no cgroup v2 for the limits (cgroup /sys/fs/cgroup/not-delegated is not " \
           "delegated to uid 65534" in out


@pytest.mark.vm("""
mkdir -p "$USER_CGROUP/jobs" && chown 65534:65534 "$USER_CGROUP/jobs" "$USER_CGROUP/jobs/cgroup.procs" "$USER_CGROUP/jobs/cgroup.subtree_control"
echo "+cpu +memory +pids" > "$USER_CGROUP/cgroup.subtree_control" 2>/dev/null
as_nobody "$PYJAIL" --cgroup require --cgroup-parent "$USER_CGROUP/jobs" --verbose -- python3 -c 'print(open("/proc/self/cgroup").read().strip())'
echo "rc: $?"
ls "$USER_CGROUP/jobs" | grep -c pyjail-run || true
""", timeout=60)
def test_cgroup_parent_names_the_delegated_cgroup(vm_run):
    out = vm_run.output
    assert "rc: 0" in out, vm_run.describe()
    # Inside, the jail sees its own cgroup namespace: its cgroup is its root.
    assert "0::/\n" in out, vm_run.describe()
    assert "pyjail: cgroup /sys/fs/cgroup/user-65534/jobs/pyjail-run-" in out
    assert out.rstrip().endswith("0")  # removed after the run


@pytest.mark.parametrize("user", USERS)
@pytest.mark.vm(r"""
i=0
while [ $i -lt 20 ]; do
    as_user "$user" "$PYJAIL" --report-fd 3 -- python3 -c 'import time; time.sleep(1)' 3>/tmp/c$i.json &
    i=$((i + 1))
done
wait
for f in /tmp/c*.json; do sed -n 's/^  "\(status\|cgroup\)": "\(.*\)",$/\1 \2/p' $f; done
echo "left: $(find /sys/fs/cgroup -name 'pyjail-run-*' -type d | wc -l)"
""", timeout=120)
def test_twenty_concurrent_runs_each_get_their_own_cgroup(vm_run, user):
    assert vm_run.exit_code == 0, vm_run.describe()
    lines = vm_run.output.splitlines()
    statuses = [l.split()[1] for l in lines if l.startswith("status ")]
    cgroups = [l.split()[1] for l in lines if l.startswith("cgroup ")]
    assert statuses == ["ok"] * 20, vm_run.describe()
    assert len(set(cgroups)) == 20, vm_run.describe()
    assert "left: 0" in lines


@pytest.mark.parametrize("user", USERS)
@pytest.mark.vm(r"""
as_user "$user" "$PYJAIL" -- python3 -c '
import subprocess
# A daemon that would outlive its parent anywhere else: a new session, then a double fork.
subprocess.Popen(["python3", "-c", "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(60)"], start_new_session=True)
print("started")
'
sleep 1
echo "jailed python left: $(for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep -c 'time.slee[p](60)')"
echo "cgroups left: $(find /sys/fs/cgroup -name 'pyjail-run-*' -type d | wc -l)"
""", timeout=60)
def test_background_children_are_gone_after_the_run(vm_run, user):
    assert vm_run.exit_code == 0, vm_run.describe()
    lines = vm_run.output.splitlines()
    assert "started" in lines
    assert "jailed python left: 0" in lines, vm_run.describe()
    assert "cgroups left: 0" in lines


@pytest.mark.parametrize("user", USERS)
@pytest.mark.vm("""as_user "$user" "$PYJAIL" doctor""", timeout=60)
def test_doctor_finds_the_delegated_cgroup(vm_run, user):
    assert vm_run.exit_code == 0, vm_run.describe()
    out = vm_run.output
    assert "ok    cgroup v2        delegated: /sys/fs/cgroup/" in out, out
    assert "ok    cgroup.kill      present" in out
    assert "ok    memory.peak      present" in out
    assert "FAIL" not in out
    # The one warning there may be: the VM's nobody has no /etc/subuid range, so its jails
    # share its per-uid budgets (root's take ids of their own from root's range).
    warnings = [l for l in out.splitlines() if l.startswith("warn")]
    assert all("host ids" in l for l in warnings), out
    assert bool(warnings) == (user == "nobody"), out


@pytest.mark.vm("""
mkdir -p /sys/fs/cgroup/demo.scope
sh -c 'echo $$ > /sys/fs/cgroup/demo.scope/cgroup.procs && exec "$PYJAIL" --cgroup require -- python3 -c "print(1)"'
echo "rc: $?"
ls /sys/fs/cgroup/demo.scope
""", timeout=60)
def test_root_leaves_a_systemd_unit_that_was_not_delegated_alone(vm_run):
    # Root may write to every cgroup; a .scope without systemd's delegate mark is not its.
    out = vm_run.output
    assert "rc: 125" in out, vm_run.describe()
    assert "cgroup /sys/fs/cgroup/demo.scope belongs to systemd and was not delegated" in out
    assert "pyjail-supervisor" not in out  # nothing was moved or made there
