"""Smoke tests of the VM: the cgroup v2 set-up the limit tests build on, and pyjail running
in it as root and as an unprivileged user."""

import pytest

USERS = ["root", "nobody"]


@pytest.mark.vm("cat /sys/fs/cgroup/cgroup.controllers; mount | grep ' /sys/fs/cgroup '")
def test_cgroup2_is_mounted_with_the_controllers(vm_run):
    assert vm_run.exit_code == 0, vm_run.describe()
    controllers, mount = vm_run.output.splitlines()
    assert {"cpu", "memory", "pids"} <= set(controllers.split())
    assert "type cgroup2" in mount and "nsdelegate" in mount


@pytest.mark.vm("""
cat /sys/fs/cgroup/cgroup.subtree_control
cat "$USER_CGROUP/cgroup.subtree_control"
as_nobody sh -c '
    echo "ids $(id -u) $(id -g) $(id -G)"
    cat /proc/self/cgroup
    # Delegated: the user makes and removes cgroups in its subtree, and moves itself.
    mkdir "$USER_CGROUP/probe" && echo $$ > "$USER_CGROUP/probe/cgroup.procs" &&
        echo "moved: $(cat /proc/self/cgroup)" &&
        echo $$ > "$SESSION_CGROUP/cgroup.procs" && rmdir "$USER_CGROUP/probe" && echo removed
    # ... and nothing outside it.
    mkdir /sys/fs/cgroup/not-mine 2>/dev/null && echo "made not-mine" || echo "outside: refused"
'
""")
def test_unprivileged_user_has_a_delegated_subtree(vm_run):
    assert vm_run.exit_code == 0, vm_run.describe()
    root_control, user_control, ids, cgroup, moved, removed, outside = \
        vm_run.output.splitlines()
    for control in (root_control, user_control):
        assert {"cpu", "memory", "pids"} <= set(control.split()), vm_run.describe()
    assert ids == "ids 65534 65534 65534"
    assert cgroup == "0::/user-65534/session"
    assert moved == "moved: 0::/user-65534/probe"
    assert removed == "removed"
    assert outside == "outside: refused"


@pytest.mark.parametrize("user", USERS)
@pytest.mark.vm("""as_user "$user" "$PYJAIL" -- python3 -c 'print(6*7)'""")
def test_pyjail_runs_python(vm_run, user):
    assert vm_run.exit_code == 0, vm_run.describe()
    assert vm_run.output == "42\n"


@pytest.mark.parametrize("user", USERS)
@pytest.mark.vm("""as_user "$user" "$PYJAIL" --wall-time 1 -- python3 -c 'while True: pass'""")
def test_wall_time_ends_a_busy_loop_with_124(vm_run, user):
    assert vm_run.exit_code == 124, vm_run.describe()
    assert vm_run.seconds < 20, vm_run.describe()
