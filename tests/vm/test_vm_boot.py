"""vm.py's boot, on the host, with a stand-in for qemu: an emulated boot that never reaches
the script is given up after TCG_START_LIMIT and booted once more, not waited on for the
whole timeout (in CI, a stuck boot once held a vCPU spinning for 51 minutes)."""

from __future__ import annotations

import sys
import textwrap
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import vm  # noqa: E402

# Each start of the stand-in takes the next line of its plan: "stuck" (prints a kernel line
# and hangs), "setup-failed", or "ok" (runs a script that prints "hello").
FAKE_QEMU = textwrap.dedent("""\
    import sys, time
    plan, count = sys.argv[1], sys.argv[2]
    with open(count, "a+") as f:
        f.seek(0)
        n = len(f.read())
        f.write("x")
    what = open(plan).read().split()[n]
    print("[    0.000000] Linux version 6.1.0 (a stand-in)", flush=True)
    if what == "stuck":
        time.sleep(600)
    elif what == "setup-failed":
        print("@@PYJAIL-VM-SETUP-FAILED@@ mount cgroup2", flush=True)
        time.sleep(600)
    else:
        print("@@PYJAIL-VM-START@@ uptime=1.00")
        print("hello")
        print()  # as the guest's /init: ends the output's last line
        print("@@PYJAIL-VM-END@@ rc=0 uptime=1.25", flush=True)
    """)


@pytest.fixture
def fake_vm(tmp_path, monkeypatch):
    """Sets the stand-in's plan (a list of what each start does); returns the number of
    starts so far."""
    fake = tmp_path / "qemu.py"
    fake.write_text(FAKE_QEMU)
    plan, count = tmp_path / "plan", tmp_path / "count"
    count.write_text("")
    base = tmp_path / "initramfs.cpio"
    base.write_bytes(b"")
    (tmp_path / "cache").mkdir()
    monkeypatch.setenv("PYJAIL_VM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(vm, "find_kernel", lambda explicit=None: tmp_path / "vmlinuz")
    monkeypatch.setattr(vm, "direct_kernel", lambda kernel, log=None: kernel)
    monkeypatch.setattr(vm, "find_qemu", lambda: sys.executable)
    monkeypatch.setattr(vm, "choose_accel", lambda accel=None: ("tcg", "no KVM here"))
    monkeypatch.setattr(vm, "build_initramfs", lambda *a, **k: base)
    monkeypatch.setattr(vm, "qemu_command",
                        lambda *a, **k: [sys.executable, str(fake), str(plan), str(count)])
    monkeypatch.setattr(vm, "TCG_START_LIMIT", 2.0)

    def set_plan(*what):
        plan.write_text(" ".join(what))
        return lambda: len(count.read_text())
    return set_plan, tmp_path


def test_a_stuck_boot_is_booted_again_and_its_console_kept(fake_vm):
    set_plan, tmp = fake_vm
    starts = set_plan("stuck", "ok")
    log = tmp / "console-1.log"
    notes = []
    t0 = time.monotonic()
    r = vm.run("echo hello", tmp, timeout=300, log_path=log, log=notes.append)
    assert time.monotonic() - t0 < 60, "waited past the start limit"
    assert starts() == 2
    assert r.exit_code == 0 and r.output == "hello\n", r.console
    first = tmp / "console-1.first.log"
    assert "Linux version" in first.read_text(), "the stuck boot's console was not kept"
    assert "@@PYJAIL-VM-START@@" in log.read_text()
    assert "no start in 2 s" in r.earlier and str(first) in r.earlier
    assert r.earlier in r.timing()
    assert any("booting it once more" in n for n in notes), notes


def test_two_stuck_boots_fail_naming_both_consoles(fake_vm):
    set_plan, tmp = fake_vm
    starts = set_plan("stuck", "stuck", "ok")
    log = tmp / "console-2.log"
    with pytest.raises(vm.VMBootError) as e:
        vm.run("echo hello", tmp, timeout=300, log_path=log)
    assert starts() == 2, "booted more than twice"
    text = str(e.value)
    assert "no start in 2 s" in text
    assert str(log) in text and str(tmp / "console-2.first.log") in text
    assert "Linux version" in text, "the console's last lines are not in the error"


def test_a_setup_failure_is_not_booted_again(fake_vm):
    set_plan, tmp = fake_vm
    starts = set_plan("setup-failed", "ok")
    with pytest.raises(vm.VMBootError) as e:
        vm.run("echo hello", tmp, timeout=4, log_path=tmp / "console-3.log")
    assert starts() == 1
    assert "mount cgroup2" in str(e.value)


def test_a_boot_that_starts_is_not_cut_short(fake_vm):
    set_plan, tmp = fake_vm
    starts = set_plan("ok", "ok")
    r = vm.run("echo hello", tmp, timeout=300, log_path=tmp / "console-4.log")
    assert starts() == 1 and r.exit_code == 0 and not r.earlier
