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


class _Bomb:
    """A fork bomb as stop_then_kill sees it, one step per listing: each running
    process forks while there is room under the pid limit; a SIGSTOP takes effect
    a step later, and one of every two processes signalled was in the middle of
    fork() and still makes its child; the listing reads the pids before the step
    and the states after it, as /proc's listdir and then stat do."""

    def __init__(self, limit=40, forks_in_flight=lambda pid: pid % 2 == 0):
        self.limit, self.next_pid, self.forks_in_flight = limit, 100, forks_in_flight
        self.state = {}             # pid -> "R", "stopping", "T" or "Z"
        self.kills_while_running = 0
        self._spawn()

    def _spawn(self):
        self.state[self.next_pid] = "R"
        self.next_pid += 1

    def _step(self):
        for pid, st in list(self.state.items()):
            forks = st == "R" or (st == "stopping" and self.forks_in_flight(pid))
            if forks and len(self.state) < self.limit:
                self._spawn()
            if st == "stopping":
                self.state[pid] = "T"

    def listing(self):
        pids = list(self.state)
        self._step()
        return [(pid, "T" if self.state[pid] == "T" else self.state[pid][0].upper())
                for pid in pids if pid in self.state]

    def suspects(self):
        return list(self.state)

    def send(self, pid, sig):
        import signal
        if pid not in self.state:
            return False
        if sig == signal.SIGSTOP and self.state[pid] == "R":
            self.state[pid] = "stopping"
        elif sig == signal.SIGKILL:
            if any(st in ("R", "stopping") for st in self.state.values()):
                self.kills_while_running += 1
            self.state[pid] = "Z"
        return True

    def reap(self):
        self.state = {pid: st for pid, st in self.state.items() if st != "Z"}


def test_a_fork_bomb_is_stopped_whole_before_any_of_it_is_killed():
    bomb = _Bomb()

    def listing():
        rows = bomb.listing()
        bomb.reap()
        return rows

    killed = _wire.stop_then_kill(listing, bomb.send, bomb.suspects)
    assert not bomb.state, "processes left: %r" % bomb.state
    # Never a kill while one still ran: no place freed by a kill went to the bomb,
    # so it never outgrew its limit however slow the killer.
    assert bomb.kills_while_running == 0
    assert len(killed) <= bomb.limit and bomb.next_pid - 100 <= bomb.limit


def test_a_child_forked_between_the_pids_and_their_states_is_not_missed():
    # The one process is signalled in the middle of fork(): the listing that shows
    # it stopped was read after its child was made, and does not hold the child.
    # Killing it then would free a place for the child's next fork.
    bomb = _Bomb(limit=2, forks_in_flight=lambda pid: pid == 100)

    def listing():
        rows = bomb.listing()
        bomb.reap()
        return rows

    _wire.stop_then_kill(listing, bomb.send, bomb.suspects)
    assert not bomb.state and bomb.next_pid == 102 and bomb.kills_while_running == 0


def test_a_bomb_that_outruns_the_passes_is_stopped_all_at_once():
    # No limit, and each one signalled forks once more: one by one, never all stopped.
    bomb = _Bomb(limit=10 ** 6, forks_in_flight=lambda pid: True)
    calls = []

    def stop_everyone():
        calls.append(len(bomb.state))
        for pid, st in bomb.state.items():
            if st == "R":
                bomb.state[pid] = "T"

    def listing():
        rows = bomb.listing()
        bomb.reap()
        return rows

    _wire.stop_then_kill(listing, bomb.send, bomb.suspects, stop_everyone)
    assert len(calls) == 1 and not bomb.state and bomb.kills_while_running == 0
