"""What a session's cells are charged under cgroup v2 (pyjail-server's CPU quota reads
Session._jail_cpu_seconds): the jail's cgroup's count. Attack: a cell whose processes ignore
SIGCHLD has its children reaped by the kernel itself, and their CPU time is in no process's
times in /proc, where the charge was read from: a tenant burned CPU uncharged. The host's
Python is the rootfs's interpreter, driving the package from outside the jail (/vm/py)."""

import pytest

USERS = ["root", "nobody"]

SCRIPT = r'''
as_user "$user" /vm/py - <<'EOF'
import pyjail
s = pyjail.Session()
s.run("import os, signal, time")

def charged(code):
    before = s._jail_cpu_seconds()
    r = s.run(code, timeout=120)
    assert r.ok, r
    return s._jail_cpu_seconds() - before

BURN = "t = time.process_time()\nwhile time.process_time() - t < 1: pass\n"
print("own %.2f" % charged(BURN))
# Two children that burn a second each and are reaped by the kernel: nothing waits for them.
print("reaped %.2f" % charged(
    "signal.signal(signal.SIGCHLD, signal.SIG_IGN)\n"
    "r, w = os.pipe()\n"
    "for _ in range(2):\n"
    "    if os.fork() == 0:\n"
    "        " + BURN.replace("\n", "\n        ") + "os.write(w, b'x')\n"
    "        os._exit(0)\n"
    "os.read(r, 1); os.read(r, 1); time.sleep(0.5)\n"))
print("idle %.2f" % charged("time.sleep(1)"))
s.close()
# Sessions forked from a template, without limits of their own: no leaf of their own, the
# template's shared. One is not charged what the other burns.
with pyjail.Pool(options={"memory": "", "pids": "", "cpus": ""}) as pool:
    a, b = pool.session(), pool.session()
    b.run("import time")
    before = b._jail_cpu_seconds()
    a.run("import time\n" + BURN)
    b.run("time.sleep(0.2)")
    print("neighbour %.2f" % (b._jail_cpu_seconds() - before))
    a.close(); b.close()
EOF
'''


@pytest.mark.parametrize("user", USERS)
@pytest.mark.vm(SCRIPT, timeout=180)
def test_a_cell_is_charged_what_the_kernel_reaped_too(vm_run, user):
    assert vm_run.exit_code == 0, vm_run.describe()
    names = {"own", "reaped", "idle", "neighbour"}
    got = dict(line.split() for line in vm_run.output.splitlines()
               if line.split()[:1] and line.split()[0] in names)
    assert set(got) == names, vm_run.describe()
    # A second of the cell's own CPU; two of its children's, the kernel's to reap; and
    # a cell that only sleeps, charged next to nothing.
    assert 0.9 <= float(got["own"]) < 1.6, vm_run.describe()
    assert 1.9 <= float(got["reaped"]) < 3.0, vm_run.describe()
    assert float(got["idle"]) < 0.3, vm_run.describe()
    assert float(got["neighbour"]) < 0.3, vm_run.describe()
