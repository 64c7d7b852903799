"""The host's processes, as the driver sees them in the host's /proc: what a
Session needs to kill, from the host, what its cells started (see
Session._kill_interpreter_descendants). Host side only; /proc/PID/stat is read
by _wire.proc_stat, which the in-jail server uses too."""

from __future__ import annotations

import functools
import os
import signal
from typing import Dict, Iterable, List, Optional, Set, Tuple

from . import _wire


def parent_of(pid: int) -> Optional[int]:
    """The parent pid of host process `pid`; None if it is gone."""
    fields = _wire.proc_stat(pid)
    if fields is None:
        return None
    try:
        return int(fields[1])
    except (ValueError, IndexError):
        return None


def process_parents() -> Dict[int, int]:
    """pid -> parent pid of every process on the host (none if /proc cannot be read)."""
    return {pid: parent for pid, _state, parent, _start in _wire.processes()}


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


def signal_if_child_of(pid: int, parent: int, sig: int) -> bool:
    """Sends `sig` to `pid` if it still is `parent`'s child: through a pidfd, so that a pid
    that was freed and reused by another process since the listing is never signalled."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return False
    try:
        if parent_of(pid) != parent:
            return False
        signal.pidfd_send_signal(fd, sig)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def jail_init_of(supervisor: int) -> Optional[int]:
    """The host pid of the jail's pid 1 that pyjail process ``supervisor`` watches,
    or None: the process of a pidfd it holds whose innermost pid is 1. A fresh
    jail's pid 1 is pyjail's own child; a run's from a template is the template's,
    watched through the pidfd the server handed to pyjail."""
    try:
        fds = os.listdir("/proc/%d/fd" % supervisor)
    except OSError:
        return None
    for fd in fds:
        try:
            if "pidfd" not in os.readlink("/proc/%d/fd/%s" % (supervisor, fd)):
                continue
            with open("/proc/%d/fdinfo/%s" % (supervisor, fd)) as f:
                for line in f:
                    if line.startswith("NSpid:"):
                        ids = line.split()[1:]
                        # (-1 or 0 for a process that has ended; one level: not a jail's)
                        if len(ids) > 1 and ids[-1] == "1" and int(ids[0]) > 0:
                            return int(ids[0])
        except (OSError, ValueError):
            continue
    return None


def _children_files() -> bool:
    """Whether this kernel lists a thread's children (/proc/PID/task/TID/children)."""
    return os.path.exists("/proc/%d/task/%d/children" % (os.getpid(), os.getpid()))


_HAS_CHILDREN_FILES = _children_files()


def _children(pid: int) -> List[int]:
    """The children of host process ``pid``, any of its threads' ([] if it is gone)."""
    out: List[int] = []
    try:
        tasks = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return out
    for tid in tasks:
        try:
            with open("/proc/%d/task/%s/children" % (pid, tid), "rb") as f:
                out.extend(int(c) for c in f.read().split())
        except (OSError, ValueError):
            continue
    return out


def tree_cpu_seconds(root: int) -> Optional[float]:
    """The CPU seconds (user and system) of host process ``root`` and every process
    under it, those that ended included (in the counts of the process that reaped
    them), read from the host's /proc, which nothing in a jail can write. None if
    ``root`` is gone. An estimate while processes end: one reaped between the read
    of its reaper and its own is missed."""
    if _HAS_CHILDREN_FILES:
        pids = [root]
        todo = _children(root)
        while todo:
            pid = todo.pop()
            pids.append(pid)
            todo.extend(_children(pid))
    else:
        pids = [root] + sorted(descendants(process_parents(), [root]))
    ticks = 0
    for pid in pids:
        fields = _wire.proc_stat(pid)
        if fields is None:
            if pid == root:
                return None
            continue
        try:
            # utime, stime, cutime, cstime: fields 14-17 of stat(5), 11-14 after the name
            ticks += sum(int(x) for x in fields[11:15])
        except ValueError:
            continue
    return ticks / os.sysconf("SC_CLK_TCK")


# The name pyjail gives each jail's cgroup leaf (jail/host/cgroup.cpp, kRunPrefix).
_JAIL_LEAF_PREFIX = "pyjail-run-"


@functools.lru_cache(maxsize=1)
def _cgroup2_mount() -> Optional[Tuple[str, str]]:
    """(the cgroup2 root this process's mount shows, where it is mounted), or None: the
    first cgroup2 mount in /proc/self/mountinfo."""
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                head, sep, tail = line.partition(" - ")
                fields = head.split()
                if sep and tail.split()[:1] == ["cgroup2"] and len(fields) >= 5:
                    return fields[3], fields[4]
    except OSError:
        pass
    return None


def _cgroup_of(pid: int) -> str:
    """Host process ``pid``'s cgroup v2 path ("" if unknown)."""
    try:
        with open("/proc/%d/cgroup" % pid) as f:
            return next((line[3:].rstrip("\n") for line in f if line.startswith("0::")), "")
    except OSError:
        return ""


def leaf_cpu_seconds(pid: int) -> Optional[float]:
    """The CPU seconds of everything in the cgroup v2 leaf of host process ``pid`` (a
    jail's pid 1), when that leaf is this jail's alone (``pyjail-run-*``, and its parent's
    cgroup another); else None. The kernel's count (cpu.stat's usage_usec, kept for every
    cgroup v2 directory), which misses nothing: a process the kernel reaps itself (its
    parent ignores SIGCHLD) is in no process's times in /proc, and so not in
    tree_cpu_seconds."""
    mount = _cgroup2_mount()
    if mount is None:
        return None
    path = _cgroup_of(pid)
    root, where = mount
    if not path or not os.path.basename(path).startswith(_JAIL_LEAF_PREFIX) or \
            not (root == "/" or path.startswith(root.rstrip("/") + "/")):
        return None
    # A run from a template without limits of its own has no leaf of its own: its pid 1 is
    # in the template's, with every other such run, whose CPU is not this jail's to charge.
    parent = parent_of(pid)
    if parent is None or _cgroup_of(parent) == path:
        return None
    rel = path[len(root.rstrip("/")):] if root != "/" else path
    try:
        with open(where + rel + "/cpu.stat") as f:
            for line in f:
                key, _, value = line.partition(" ")
                if key == "usage_usec":
                    return int(value) / 1e6
    except (OSError, ValueError):
        pass
    return None
