"""Runs from a template (`pyjail serve`, `pyjail --via`) under cgroup v2: each run gets its own
cgroup leaf with its own limits, made by the server and removed after the run, as root and
as an unprivileged user from a delegated cgroup."""

import pytest

USERS = ["root", "nobody"]

SCRIPT = r'''
via() {  # via NAME ARGS...: a run through the template, its status and report's fields
    name=$1; shift
    as_user "$user" "$PYJAIL" --quiet --report-fd 3 --via /tmp/t.sock "$@" 3>/tmp/$name.json >/tmp/$name.out 2>&1
    echo "$name rc $?"
    sed -n 's/^  "\(status\|cgroup\|memory_peak_source\)": "\(.*\)",$/'"$name"' \1 \2/p' /tmp/$name.json
}
as_user "$user" "$PYJAIL" serve --quiet --socket /tmp/t.sock >/tmp/serve.out 2>/tmp/serve.err &
server=$!
for i in $(seq 300); do grep -q ready /tmp/serve.out 2>/dev/null && break; sleep 0.2; done
cat /tmp/serve.out
# A neighbour that must finish untouched while the others break their limits.
via neighbour -- python3 -c 'import time; time.sleep(8); print("neighbour ok")' &
neighbour=$!
via oom --memory 64M -- python3 -c 'x = bytearray(200 << 20); print("survived")'
via forks --pids 20 -- python3 -c '
import os, time
for i in range(100):
    if os.fork() == 0:
        time.sleep(5)
        os._exit(0)
'
via plain --memory 96M -- python3 -c 'print("plain ok")'
wait $neighbour
cat /tmp/neighbour.out /tmp/plain.out
# A run's leaf goes once its pid 1 is gone, which can be just after its client returned.
leaves() { find /sys/fs/cgroup -name 'pyjail-run-*' -type d | wc -l; }
for i in $(seq 50); do [ "$(leaves)" -le 1 ] && break; sleep 0.1; done
echo "runs' leaves during the server: $(leaves)"
# The server itself (not the shell that started it): SIGTERM ends it cleanly.
for p in /proc/[0-9]*; do
    case "$(tr '\0' ' ' 2>/dev/null < $p/cmdline)" in *" serve --quiet --socket /tmp/t.sock"*) kill -TERM "${p#/proc/}";; esac
done
wait $server
for i in $(seq 50); do [ -e /tmp/t.sock ] || break; sleep 0.2; done
cat /tmp/serve.err
echo "leaves after: $(find /sys/fs/cgroup -name 'pyjail-run-*' -type d | wc -l)"
echo "socket after: $(ls /tmp/t.sock 2>/dev/null | wc -l)"
'''


@pytest.mark.parametrize("user", USERS)
@pytest.mark.vm(SCRIPT, timeout=240)
def test_each_run_from_a_template_has_its_own_cgroup_limits(vm_run, user):
    assert vm_run.exit_code == 0, vm_run.describe()
    lines = vm_run.output.splitlines()
    out = vm_run.describe()
    assert any(l.startswith("pyjail serve: ready") for l in lines), out
    assert "oom rc 137" in lines and "oom status oom" in lines, out
    assert "forks rc 1" in lines and "forks status pids-limit" in lines, out
    assert "plain rc 0" in lines and "plain ok" in lines, out
    assert "neighbour rc 0" in lines and "neighbour ok" in lines, out
    cgroups = [l.split()[2] for l in lines if " cgroup /" in l]
    assert len(cgroups) == 4 and len(set(cgroups)) == 4, out
    assert "plain memory_peak_source memory.peak" in lines, out
    # Only the template's own leaf remains while the server runs; nothing once it stopped.
    during = [int(l.rsplit(" ", 1)[1]) for l in lines if l.startswith("runs' leaves during the server: ")]
    assert during and during[0] <= 1, out
    assert "pyjail serve: stopping" in lines, out
    assert "leaves after: 0" in lines and "socket after: 0" in lines, out
