"""The host's processes, as the driver sees them in the host's /proc: what a
Session needs to kill, from the host, what its cells started (see
Session._kill_interpreter_descendants). Host side only."""

from __future__ import annotations

import os
import signal
from typing import Dict, Iterable, List, Optional, Set


def _stat_fields(pid: int) -> Optional[List[bytes]]:
    """The fields of /proc/PID/stat after the command name (state, parent pid, ...),
    as bytes; None if the process is gone or the file cannot be read."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
            return f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None


def parent_of(pid: int) -> Optional[int]:
    """The parent pid of host process `pid`; None if it is gone."""
    fields = _stat_fields(pid)
    if fields is None:
        return None
    try:
        return int(fields[1])
    except (ValueError, IndexError):
        return None


def process_parents() -> Dict[int, int]:
    """pid -> parent pid of every process on the host (none if /proc cannot be read)."""
    out: Dict[int, int] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return out
    for entry in entries:
        if not entry.isdigit():
            continue
        fields = _stat_fields(int(entry))
        if fields is None:
            continue
        try:
            out[int(entry)] = int(fields[1])
        except (IndexError, ValueError):
            continue
    return out


def is_jail_pid(pid: int, jail_pid: int) -> bool:
    """Whether host process `pid` is `jail_pid` in its own (innermost) pid namespace."""
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("NSpid:"):
                    return line.split()[-1] == str(jail_pid)
    except OSError:
        pass
    return False


def descendants(parents: Dict[int, int], roots: Iterable[int]) -> Set[int]:
    """Every pid below ``roots`` in the tree ``parents`` (pid -> parent pid)."""
    children: Dict[int, List[int]] = {}
    for pid, pp in parents.items():
        children.setdefault(pp, []).append(pid)
    found: Set[int] = set()
    todo = [c for r in roots for c in children.get(r, [])]
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, []))
    return found


def kill_if_child_of(pid: int, parent: int) -> bool:
    """SIGKILL `pid` if it still is `parent`'s child: through a pidfd, so that a pid that
    was freed and reused by another process since the listing is never signalled."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return False
    try:
        if parent_of(pid) != parent:
            return False
        signal.pidfd_send_signal(fd, signal.SIGKILL)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
