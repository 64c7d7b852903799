"""/proc/PID/stat is read in one place (_wire.proc_stat), which the in-jail server (as
pyjail_wire) and the driver's host-side process killing (_hostprocs) both use."""

import os
import shutil
import subprocess

import pytest

from pyjail_testing import REPO
from pyjail import _hostprocs, _wire

pytestmark = pytest.mark.no_binary


def test_a_command_name_with_parentheses_and_spaces(tmp_path):
    # The command name is the one free-form field: ") S 1 (" in it must not shift the others.
    prog = tmp_path / "a) S 1 (b"
    shutil.copy("/bin/sleep", prog)
    p = subprocess.Popen([str(prog), "60"])
    try:
        fields = _wire.proc_stat(p.pid)
        assert fields is not None and int(fields[1]) == os.getpid()
        found = [row for row in _wire.processes() if row[0] == p.pid]
        assert len(found) == 1 and found[0][1] in "RSD" and found[0][2] == os.getpid()
        assert _hostprocs.parent_of(p.pid) == os.getpid()
        assert _hostprocs.process_parents()[p.pid] == os.getpid()
    finally:
        p.kill()
        p.wait()
    assert _wire.proc_stat(p.pid) is None and _hostprocs.parent_of(p.pid) is None


def test_one_reader_of_proc_stat():
    package = REPO / "python" / "pyjail"
    readers = [f.name for f in sorted(package.glob("*.py")) if "/stat\"" in f.read_text()]
    assert readers == ["_wire.py"]
