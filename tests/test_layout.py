"""The folders of jail/ (jail/README.md): nothing in a lower folder includes a header of a
higher one, and the pure folders make no syscalls. The build enforces the includes too (each
folder's library sees only the folders below it); this check also covers the sources that
other targets compile again (the template's extension module, pyjail-reaper) and says which
rule a change broke. Reads the sources only: no build, no jail."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

JAIL = Path(__file__).resolve().parent.parent / "jail"

# Each folder, and the folders below it, whose headers it may include (its own are allowed).
BELOW = {
    "pure": set(),
    "sys": {"pure"},
    "plan": {"pure", "sys"},
    "pid1": {"pure", "sys", "plan"},
    "host": {"pure", "sys", "plan"},
    "supervisor": {"pure", "sys", "plan", "pid1", "host"},
    "template": {"pure", "sys", "plan", "pid1", "host", "supervisor"},
    "cli": {"pure", "sys", "plan", "pid1", "host", "supervisor", "template"},
}

# Folders of pure code: decisions and formats, unit-tested, no syscalls. (They may include
# sys/sys.hpp for its types, UniqueFd, but call none of its functions.)
PURE = {"pure", "plan"}

# System headers that declare syscalls, in a pure folder only for their constants and types.
SYSCALL_HEADER = re.compile(r"#\s*include\s*<((?:sys/\w+|unistd|fcntl|poll|signal|sched|dirent|termios)\.h)>")
CONSTANTS_ONLY = {
    ("plan/exitstatus.cpp", "sys/wait.h"): "WIFEXITED and the other wait-status macros",
    ("plan/limits.cpp", "sys/resource.h"): "the RLIMIT_ numbers",
    ("plan/run_request.cpp", "sys/resource.h"): "the RLIMIT_ numbers",
    ("plan/mountplan.cpp", "sys/mount.h"): "the MS_ flags",
    ("plan/mountplan.cpp", "sys/statvfs.h"): "the ST_ flags of a rootfs's mount",
    ("plan/seccomp.cpp", "sys/mman.h"): "PROT_ flags in rules; memfd_create for the export (below)",
    ("plan/seccomp.cpp", "fcntl.h"): "O_ flags in rules",
    ("plan/seccomp.cpp", "sys/personality.h"): "personality values in rules",
    ("plan/seccomp.cpp", "sys/socket.h"): "address families in rules",
    ("plan/seccomp.cpp", "sys/stat.h"): "mode bits in rules",
    ("plan/seccomp.cpp", "unistd.h"): "the read, lseek and close of the export (below)",
}

# pyjail calls libc at global scope (::name). In a pure folder, only these, which make no
# syscall; and seccomp.cpp's export: libseccomp writes a compiled filter only into a file
# descriptor, here a memfd of pyjail's own (no host file is named).
PURE_LIBC = {"gmtime_r", "explicit_bzero", "strerror", "memcpy", "memset", "strlen"}
SYSCALL_EXCEPTIONS = {"plan/seccomp.cpp": {"memfd_create", "lseek", "read", "close"}}

INCLUDE = re.compile(r'#\s*include\s*"(?:\.\./)*([^"]+)"')
GLOBAL_CALL = re.compile(r"(?<![\w:>)\]])::\s*([A-Za-z_]\w*)\s*\(")


def sources():
    return sorted(p for p in JAIL.rglob("*") if p.suffix in (".cpp", ".hpp"))


def code_only(text: str) -> str:
    """The text without comments and string or character literals (which name syscalls)."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r'"(?:\\.|[^"\\\n])*"', '""', text)
    text = re.sub(r"'(?:\\.|[^'\\\n])*'", "''", text)
    return re.sub(r"//[^\n]*", "", text)


def sys_wrappers() -> set[str]:
    """The functions jail/sys/sys.hpp declares outside its classes: the syscall layer."""
    text = code_only((JAIL / "sys" / "sys.hpp").read_text())
    text = re.sub(r"\b(?:class|struct)\s+\w+\s*\{.*?\n\};", "", text, flags=re.S)
    names = set(re.findall(r"\b([a-z_]\w*)\s*\([^;{}]*\)\s*(?:const\s*)?(?:noexcept\s*)?;", text))
    assert {"sys_clone3", "read_file", "write_file"} <= names, names
    return names


def folder_of(path: Path) -> str:
    return path.relative_to(JAIL).parts[0]


def test_every_source_is_in_a_known_folder():
    stray = [str(p.relative_to(JAIL)) for p in sources()
             if len(p.relative_to(JAIL).parts) != 2 or folder_of(p) not in BELOW]
    assert not stray, (f"jail/ sources outside the folders of tests/test_layout.py's BELOW: {stray}; "
                       "put each in the folder of the process that runs it (jail/README.md), or "
                       "add a new folder to BELOW with the folders under it")


def test_no_folder_includes_a_higher_one():
    where: dict[str, str] = {}
    for p in sources():
        if p.suffix == ".hpp":
            assert p.name not in where, f"two headers named {p.name}: includes would be ambiguous"
            where[p.name] = folder_of(p)
    wrong = []
    for p in sources():
        mine = folder_of(p)
        for header in INCLUDE.findall(p.read_text()):
            theirs = where.get(Path(header).name)
            if theirs is None:
                wrong.append(f"{p.relative_to(JAIL)}: \"{header}\" is no header of jail/")
            elif theirs != mine and theirs not in BELOW[mine]:
                wrong.append(f"{p.relative_to(JAIL)} ({mine}) includes {theirs}/{header}")
    assert not wrong, ("a lower folder includes a higher one (jail/README.md, \"Which process runs "
                       "what\"): move the code down, or the shared part of it:\n  " + "\n  ".join(wrong))


@pytest.mark.parametrize("folder", sorted(PURE))
def test_pure_folders_make_no_syscalls(folder):
    wrappers = sys_wrappers()
    wrong = []
    for p in sorted((JAIL / folder).glob("*.[ch]pp")):
        rel = str(p.relative_to(JAIL))
        raw = p.read_text()
        for header in SYSCALL_HEADER.findall(raw):
            if header != "sys/types.h" and (rel, header) not in CONSTANTS_ONLY:
                wrong.append(f"{rel} includes <{header}>")
        code = code_only(raw)
        for name in GLOBAL_CALL.findall(code):
            if name not in PURE_LIBC and name not in SYSCALL_EXCEPTIONS.get(rel, ()):
                wrong.append(f"{rel} calls ::{name}")
        for name in sorted(wrappers):
            if re.search(rf"(?<![\w.>:]){name}\s*\(", code):
                wrong.append(f"{rel} calls {name} (jail/sys)")
    assert not wrong, (f"jail/{folder} is pure (no syscalls; jail/{folder}/README.md): do the "
                       "syscall in the process's own folder and pass the fact in:\n  "
                       + "\n  ".join(wrong))
