#!/usr/bin/python3
"""Runs a shell script as root in a small throw-away VM that has a pure cgroup v2 hierarchy.

The VM is qemu (KVM when /dev/kvm can be opened, TCG otherwise) booting the host's Debian
kernel straight into an initramfs. The initramfs holds busybox, setpriv, a staged pyjail
installation with the shared libraries it needs, and an /init that mounts cgroup2 at
/sys/fs/cgroup, enables the cpu, memory and pids controllers, delegates
/sys/fs/cgroup/user-65534 to nobody (65534) the way systemd delegates a user's subtree, runs
the script and powers off. There is no disk and no network.

    tests/vm/vm.py --prefix STAGE/usr/local [--kernel /boot/vmlinuz-X] [--timeout 300] SCRIPT

`--flavour systemd` boots systemd instead (see GUEST_SYSTEMD_INIT below): the host's
systemd and D-Bus, logind, and a lingering user manager for nobody.

prints what the script printed (stdout and stderr) and exits with its exit status (124 when
the time ran out, 125 when the VM could not be built or booted). The script runs with
/vm/lib.sh sourced (see GUEST_LIB below: `as_nobody`, `$PYJAIL`, the cgroup paths), from
a leaf cgroup of its own. run_scenarios() runs many scripts in one boot.

The initramfs minus the script is cached under $PYJAIL_VM_CACHE (default
/tmp/pyjail-vm-cache/initramfs/), in a directory named by the hash of all that goes in it.

Speed: the bzImage's payload (an ELF vmlinux with a PVH entry point) is decompressed once
and cached, and qemu boots that directly; a kernel decompressing itself costs seconds
under TCG. The initramfs is stored uncompressed, which boots faster than gzip.

Environment:
  PYJAIL_VM_ACCEL=kvm|tcg     force the accelerator (default: KVM when /dev/kvm works,
                              else TCG; a KVM boot that fails falls back to TCG)
  PYJAIL_VM_CACHE=DIR         the cache (default: /tmp/pyjail-vm-cache, -UID when not root)
  PYJAIL_VM_COMPRESS=none|gzip  how the cached initramfs is stored (default: none)
  PYJAIL_VM_KERNEL=PATH       the kernel (default: the newest /boot/vmlinuz-*)
  PYJAIL_VM_PVH=0             boot the bzImage as it is
"""

from __future__ import annotations

import argparse
import bz2
import dataclasses
import fcntl
import gzip
import hashlib
import io
import lzma
import os
import re
import shlex
import shutil
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from pathlib import Path

# Bump when the layout of the initramfs changes in a way the hashed inputs do not show.
FORMAT_VERSION = "3"

# pyjail's Python package, in this checkout.
PACKAGE = Path(__file__).resolve().parents[2] / "python" / "pyjail"

UNPRIVILEGED_ID = 65534
USER_CGROUP = f"/sys/fs/cgroup/user-{UNPRIVILEGED_ID}"
SESSION_CGROUP = f"{USER_CGROUP}/session"
ROOT_SESSION_CGROUP = "/sys/fs/cgroup/root-session"
CONTROLLERS = "+cpu +memory +pids"

START_MARK = "@@PYJAIL-VM-START@@"
END_MARK = "@@PYJAIL-VM-END@@"
SETUP_FAILED_MARK = "@@PYJAIL-VM-SETUP-FAILED@@"
SCENARIO_BEGIN = "@@PYJAIL-VM-SCENARIO-BEGIN@@"
SCENARIO_END = "@@PYJAIL-VM-SCENARIO-END@@"

GUEST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

KERNEL_PACKAGE = "linux-image-amd64"
QEMU_PACKAGE = "qemu-system-x86"
BUSYBOX_PACKAGE = "busybox-static"
SETPRIV_PACKAGE = "util-linux"

# --------------------------------------------------------------------------------------------
# What runs in the guest

# /init. Stage 1 runs on the kernel's initial rootfs, which pivot_root(2) refuses to leave
# ("not attached": it has no parent mount), so a jail could never be built on it. It stacks
# a bind mount of / on top of / and re-executes itself chrooted into that, which pivot_root
# accepts. Stage 2 mounts the API file systems, sets up cgroup v2, and runs the script (or,
# when there are any, the scenarios).
GUEST_INIT = r"""#!/bin/sh
export PATH=@PATH@
if [ "${PYJAIL_VM_STAGE:-1}" = 1 ]; then
    mkdir -p /.root
    mount -o bind / /.root && cd /.root && mount -o move . / &&
        exec env PYJAIL_VM_STAGE=2 chroot . /init
    echo "@SETUP_FAILED@ cannot stack a bind mount on the initial rootfs"
    poweroff -f
fi
unset PYJAIL_VM_STAGE
umask 022
. /vm/harness.sh

fail() {
    echo "@SETUP_FAILED@ $*"
    poweroff -f
    exit 1
}

mount -t proc -o nosuid,nodev,noexec proc /proc || fail "mount /proc"
mount -t sysfs -o nosuid,nodev,noexec sysfs /sys || fail "mount /sys"
mount -t devtmpfs -o nosuid,mode=755 devtmpfs /dev || fail "mount /dev"
mkdir -p /dev/pts /dev/shm
mount -t devpts -o nosuid,noexec,gid=5,mode=620,ptmxmode=666 devpts /dev/pts || fail "mount /dev/pts"
mount -t tmpfs -o nosuid,nodev,mode=1777 tmpfs /dev/shm || fail "mount /dev/shm"
mount -t tmpfs -o nosuid,nodev,mode=1777 tmpfs /tmp || fail "mount /tmp"
mount -t tmpfs -o nosuid,nodev,mode=755 tmpfs /run || fail "mount /run"
hostname pyjail-vm
ip link set lo up 2>/dev/null

# cgroup v2 as a systemd host has it: the root's controllers enabled for its children, this
# shell in a leaf (a cgroup with children holds no processes), and a subtree delegated to
# the unprivileged user (its owner, with the files systemd hands over), controllers enabled.
cg=/sys/fs/cgroup
mount -t cgroup2 -o nosuid,nodev,noexec,nsdelegate cgroup2 $cg || fail "mount cgroup2"
mkdir $cg/init && echo $$ > $cg/init/cgroup.procs || fail "move init into $cg/init"
echo "@CONTROLLERS@" > $cg/cgroup.subtree_control || fail "enable @CONTROLLERS@ at $cg"
mkdir @USER_CGROUP@ || fail "mkdir @USER_CGROUP@"
echo "@CONTROLLERS@" > @USER_CGROUP@/cgroup.subtree_control ||
    fail "enable @CONTROLLERS@ in @USER_CGROUP@"
chown @UID@:@UID@ @USER_CGROUP@ @USER_CGROUP@/cgroup.procs @USER_CGROUP@/cgroup.subtree_control \
    @USER_CGROUP@/cgroup.threads || fail "delegate @USER_CGROUP@"
new_sessions || fail "make the session cgroups"

cd /tmp
echo "@START@ uptime=$(cut -d' ' -f1 /proc/uptime)"
if [ -n "$(ls /vm/scenarios)" ]; then
    run_scenarios
else
    run_in_session /vm/script.sh 0
fi
rc=$?
echo
echo "@END@ rc=$rc uptime=$(cut -d' ' -f1 /proc/uptime)"
poweroff -f
"""

# Sourced by /init: the sessions the script (or each scenario) runs in, and the runner.
GUEST_HARNESS = r"""# Functions of /init.
ROOT_SESSION=@ROOT_SESSION_CGROUP@
USER_CGROUP=@USER_CGROUP@
SESSION=@SESSION_CGROUP@

# new_sessions: fresh leaf cgroups for root's session and the user's, as at a login.
new_sessions() {
    mkdir -p $ROOT_SESSION $SESSION &&
        chown @UID@:@UID@ $SESSION $SESSION/cgroup.procs $SESSION/cgroup.subtree_control \
            $SESSION/cgroup.threads
}

# end_sessions: as at a logout, kills what root's session and the user left running, and
# removes every cgroup under them (pyjail's included), so that the next starts afresh.
end_sessions() {
    for c in $ROOT_SESSION $USER_CGROUP; do echo 1 > $c/cgroup.kill; done
    i=0
    while grep -q 'populated 1' $ROOT_SESSION/cgroup.events $USER_CGROUP/cgroup.events &&
            [ $i -lt 250 ]; do
        usleep 20000; i=$((i + 1))
    done
    find $ROOT_SESSION $USER_CGROUP -depth -mindepth 1 -type d -exec rmdir {} +
    rmdir $ROOT_SESSION
}

# run_in_session FILE TIMEOUT: runs FILE with sh as root from root's session cgroup, with
# /vm/lib.sh sourced and stdin from /dev/null, killed after TIMEOUT seconds (0: never).
run_in_session() {
    set -- "$1" "$2" '. /vm/lib.sh && echo $$ > "$ROOT_SESSION_CGROUP/cgroup.procs" && . "$0"'
    if [ "$2" -gt 0 ]; then
        timeout -s KILL "$2" sh -c "$3" "$1" </dev/null 2>&1
    else
        sh -c "$3" "$1" </dev/null 2>&1
    fi
}

# run_scenarios: each /vm/scenarios/*.sh in turn, its output framed by markers, its time
# measured on the guest's clock. A scenario's first line may be "# timeout=SECONDS".
run_scenarios() {
    for f in /vm/scenarios/*.sh; do
        name=${f##*/}; name=${name%.sh}
        limit=$(sed -n '1s/^# timeout=//p' "$f")
        t0=$(cut -d' ' -f1 /proc/uptime)
        echo "@BEGIN@ $name"
        run_in_session "$f" "${limit:-120}"
        rc=$?
        t1=$(cut -d' ' -f1 /proc/uptime)
        echo
        echo "@SEND@ $name rc=$rc t0=$t0 t1=$t1"
        end_sessions
        new_sessions
    done
}
"""

# /vm/py ARGS...: Python with pyjail's package importable, outside any jail, as a program on
# the host runs it: the default rootfs's interpreter, through the rootfs's own dynamic loader
# and libraries. PYJAIL_BIN is the staged pyjail.
GUEST_PY = r"""#!/bin/sh
r=@PREFIX@/lib/pyjail/rootfs
export PYTHONHOME=$r/usr PYTHONPATH=/vm/python PYJAIL_BIN=@PREFIX@/bin/pyjail
exec "$r/lib64/ld-linux-x86-64.so.2" \
    --library-path "$r/lib/x86_64-linux-gnu:$r/usr/lib/x86_64-linux-gnu" \
    "$r/usr/bin/python3" "$@"
"""

# Sourced by the script, and by every scenario.
GUEST_LIB = r"""# Sourced before the script. Beware: busybox's sh runs its own applets before anything on
# PATH, so a command that busybox also has (setpriv, for one) needs its full path.
export PATH=@PATH@ HOME=/root
export PYJAIL_PREFIX=@PREFIX@
export PYJAIL=@PREFIX@/bin/pyjail
export NOBODY=@UID@
export USER_CGROUP=@USER_CGROUP@ SESSION_CGROUP=@SESSION_CGROUP@
export ROOT_SESSION_CGROUP=@ROOT_SESSION_CGROUP@

# as_nobody CMD [ARGS...]: runs CMD as uid/gid 65534 with no supplementary groups, from the
# leaf $SESSION_CGROUP of the user's delegated cgroup, as a user's login session would. Once
# a pyjail has run there, the session's processes live in its pyjail-supervisor leaf (the
# session itself may hold none), and so does this one.
as_nobody() {
    sh -c 'leaf="$SESSION_CGROUP"
        [ -d "$leaf/pyjail-supervisor" ] && leaf="$leaf/pyjail-supervisor"
        echo $$ > "$leaf/cgroup.procs" &&
        exec /usr/bin/setpriv --reuid=@UID@ --regid=@UID@ --clear-groups -- "$@"' as_nobody "$@"
}

# as_user root|nobody CMD [ARGS...]: runs CMD as root (from $ROOT_SESSION_CGROUP, where the
# script runs) or as_nobody.
as_user() {
    case "$1" in
        root) shift; "$@" ;;
        nobody|unprivileged) shift; as_nobody "$@" ;;
        *) echo "as_user: unknown user $1" >&2; return 2 ;;
    esac
}
"""


# --------------------------------------------------------------------------------------------
# The systemd flavour: the same initramfs plus the host's systemd and D-Bus, with systemd as
# pid 1. It starts D-Bus, logind (which starts a user manager for nobody, who lingers) and
# vm-tests.service, which runs the script or the scenarios as root from a system service
# of its own -- the cgroup a cron job's shell would have -- and powers off. Nothing is
# delegated by hand: what is delegated, systemd delegates.

# Packages whose files go in (man pages, docs, translations and shell completions left out).
SYSTEMD_PACKAGES = ("systemd", "libsystemd-shared", "libsystemd0", "dbus", "dbus-bin",
                    "dbus-daemon", "dbus-system-bus-common", "dbus-session-bus-common",
                    "dbus-user-session", "libdbus-1-3")
_SYSTEMD_SKIP = ("/usr/share/doc", "/usr/share/man", "/usr/share/locale", "/usr/share/zsh",
                 "/usr/share/bash-completion", "/usr/share/lintian", "/usr/share/bug")

GUEST_SYSTEMD_INIT = r"""#!/bin/sh
# Stage 1 as in the plain flavour (pivot_root cannot leave the initial rootfs), then systemd.
export PATH=@PATH@
mkdir -p /.root
mount -o bind / /.root && cd /.root && mount -o move . / && exec chroot . /lib/systemd/systemd
echo "@SETUP_FAILED@ cannot stack a bind mount on the initial rootfs, or start systemd"
poweroff -f
"""

GUEST_SYSTEMD_UNITS = {
    "/etc/systemd/system/vm-tests.target": """[Unit]
Description=pyjail VM tests
Wants=dbus.socket systemd-logind.service vm-tests.service
""",
    "/etc/systemd/system/vm-tests.service": """[Unit]
Description=pyjail VM tests: the script or scenarios
After=basic.target dbus.service systemd-logind.service

[Service]
Type=exec
ExecStart=/bin/sh /vm/runner.sh
StandardInput=null
StandardOutput=tty
StandardError=inherit
TTYPath=/dev/ttyS0
TTYReset=no
TTYVHangup=no
""",
    # No PAM in the guest: the user manager starts without a PAM session.
    # No PAM in the guest: the user manager starts without a PAM session, so without what
    # pam_systemd would set.
    "/etc/systemd/system/user@.service.d/no-pam.conf":
        "[Service]\nPAMName=\nEnvironment=XDG_RUNTIME_DIR=/run/user/%i\n",
}

# Run by vm-tests.service.
GUEST_SYSTEMD_RUNNER = r"""export PATH=@PATH@
# The lingering user's manager, and its bus, before anything runs.
i=0
until [ "$(systemctl is-active user@@UID@.service)" = active ] && [ -S /run/user/@UID@/bus ]; do
    i=$((i + 1))
    if [ $i -ge 1200 ] || [ "$(systemctl is-failed user@@UID@.service)" = failed ]; then
        echo "@SETUP_FAILED@ no user manager for @UID@: $(systemctl is-active user@@UID@.service)"
        systemctl --no-pager --failed
        journalctl -b --no-pager -o cat -u user@@UID@.service | tail -20
        poweroff -f
    fi
    usleep 100000
done
# Scenarios: as in the plain flavour, each in its own shell, framed, timed; systemd (not the
# harness) collects what a scenario's units leave.
run_one() {
    timeout -s KILL "$2" sh -c '. /vm/lib.sh && . "$0"' "$1" </dev/null 2>&1
}
echo "@START@ uptime=$(cut -d' ' -f1 /proc/uptime)"
if [ -n "$(ls /vm/scenarios)" ]; then
    for f in /vm/scenarios/*.sh; do
        name=${f##*/}; name=${name%.sh}
        limit=$(sed -n '1s/^# timeout=//p' "$f")
        t0=$(cut -d' ' -f1 /proc/uptime)
        echo "@BEGIN@ $name"
        run_one "$f" "${limit:-120}"
        rc=$?
        t1=$(cut -d' ' -f1 /proc/uptime)
        echo
        echo "@SEND@ $name rc=$rc t0=$t0 t1=$t1"
    done
    rc=0
else
    run_one /vm/script.sh 100000
    rc=$?
fi
echo
echo "@END@ rc=$rc uptime=$(cut -d' ' -f1 /proc/uptime)"
poweroff -f
"""

GUEST_SYSTEMD_LIB = r"""# Sourced before the script (systemd flavour). busybox's sh runs its own applets first.
export PATH=@PATH@ HOME=/root
export PYJAIL_PREFIX=@PREFIX@
export PYJAIL=@PREFIX@/bin/pyjail
export NOBODY=@UID@

# in_context CONTEXT CMD [ARGS...]: runs CMD where people start pyjail, none delegated:
#   user-session  nobody in a login-like session: a scope of the system manager in
#                 user-@UID@.slice (as logind makes session-N.scope), with the session's
#                 XDG_RUNTIME_DIR
#   user-cron     nobody in a system service of its own, with no session variables (a
#                 user's cron job, in cron.service)
#   root-session  root in a scope in user-0.slice
#   root-service  root in a system service (a root cron job)
# stdin is not passed on; stdout and stderr are.
in_context() {
    ctx=$1; shift
    case "$ctx" in
        user-session) systemd-run --quiet --scope --slice=user-@UID@.slice --uid=@UID@ \
                          --gid=@UID@ -- /bin/env -i PATH="$PATH" \
                          XDG_RUNTIME_DIR=/run/user/@UID@ "$@" ;;
        user-cron) systemd-run --quiet --wait --pipe -p User=@UID@ -p Group=@UID@ -- "$@" ;;
        root-session) systemd-run --quiet --scope --slice=user-0.slice -- "$@" ;;
        root-service) systemd-run --quiet --wait --pipe -- "$@" ;;
        *) echo "in_context: unknown context $ctx" >&2; return 2 ;;
    esac
}

# as_nobody CMD [ARGS...]: CMD as nobody, from where the script runs (no session).
as_nobody() {
    /usr/bin/setpriv --reuid=@UID@ --regid=@UID@ --clear-groups -- "$@"
}

# leftovers: waits (5 s at most) until neither manager lists a pyjail-* unit and no pyjail-*
# cgroup exists; prints "@@LEFTOVER@@ ..." naming what stayed.
leftovers() {
    i=0
    while :; do
        units="$(systemctl list-units --all --plain --no-legend 'pyjail-*')"
        units="$units$(as_nobody /bin/env XDG_RUNTIME_DIR=/run/user/@UID@ \
                       systemctl --user list-units --all --plain --no-legend 'pyjail-*')"
        dirs="$(find /sys/fs/cgroup -name 'pyjail-*' -type d)"
        [ -z "$units$dirs" ] && return 0
        i=$((i + 1))
        if [ $i -ge 25 ]; then
            echo "@@LEFTOVER@@ units: $units cgroups: $dirs"
            return 1
        fi
        usleep 200000
    done
}
"""


def _fill(template: str, prefix: str) -> str:
    values = {
        "@PATH@": GUEST_PATH, "@PREFIX@": prefix, "@UID@": str(UNPRIVILEGED_ID),
        "@USER_CGROUP@": USER_CGROUP, "@SESSION_CGROUP@": SESSION_CGROUP,
        "@CONTROLLERS@": CONTROLLERS, "@START@": START_MARK, "@END@": END_MARK,
        "@SETUP_FAILED@": SETUP_FAILED_MARK, "@BEGIN@": SCENARIO_BEGIN, "@SEND@": SCENARIO_END,
        "@ROOT_SESSION_CGROUP@": ROOT_SESSION_CGROUP,
    }
    return re.sub("|".join(map(re.escape, values)), lambda m: values[m.group(0)], template)


# --------------------------------------------------------------------------------------------
# Finding what the VM needs on the host


class VMUnavailable(Exception):
    """Something the VM needs is missing on this host (the message says what, and how to get it)."""


class VMBootError(Exception):
    """The VM was started but did not get as far as running the script."""


def find_qemu() -> str:
    path = shutil.which("qemu-system-x86_64")
    if path is None:
        raise VMUnavailable(f"qemu-system-x86_64 is missing: apt-get install {QEMU_PACKAGE}")
    return path


def find_kernel(explicit: str | os.PathLike | None = None) -> Path:
    explicit = explicit or os.environ.get("PYJAIL_VM_KERNEL")
    if explicit:
        path = Path(explicit)
        if not path.is_file():
            raise VMUnavailable(f"no kernel at {path}")
        if not os.access(path, os.R_OK):
            raise VMUnavailable(f"kernel {path} is not readable")
        return path
    kernels = [p for p in Path("/boot").glob("vmlinuz-*") if p.is_file()]
    if not kernels:
        raise VMUnavailable(f"no kernel in /boot: apt-get install {KERNEL_PACKAGE}")
    newest = max(kernels, key=lambda p: _version_key(p.name[len("vmlinuz-"):]))
    if not os.access(newest, os.R_OK):
        raise VMUnavailable(f"kernel {newest} is not readable (run as root, or set PYJAIL_VM_KERNEL)")
    return newest


def _version_key(version: str) -> list:
    return [(0, int(part), "") if part.isdigit() else (1, 0, part)
            for part in re.split(r"[.\-+~]", version)]


def find_busybox() -> Path:
    for candidate in ("/bin/busybox", "/usr/bin/busybox"):
        if os.access(candidate, os.X_OK):
            return Path(candidate)
    raise VMUnavailable(f"busybox is missing: apt-get install {BUSYBOX_PACKAGE}")


def find_setpriv() -> Path:
    # busybox's setpriv cannot change uids or groups: util-linux's is needed.
    for candidate in ("/usr/bin/setpriv", "/bin/setpriv"):
        if os.access(candidate, os.X_OK):
            return Path(candidate)
    raise VMUnavailable(f"setpriv is missing: apt-get install {SETPRIV_PACKAGE}")


def check_prefix(prefix: Path) -> None:
    """A staged installation: bin/pyjail, and the data it finds relative to itself."""
    for rel in ("bin/pyjail", "lib/pyjail/rootfs", "share/pyjail/profiles"):
        if not (prefix / rel).exists():
            raise VMUnavailable(f"{prefix} is not a pyjail installation prefix: no {rel}")


_KVM_GET_API_VERSION = 0xAE00


def kvm_usable() -> tuple[bool, str]:
    """Whether /dev/kvm can be opened, answers, and can run a stock kernel; else why not."""
    try:
        fd = os.open("/dev/kvm", os.O_RDWR | os.O_CLOEXEC)
    except OSError as e:
        return False, f"/dev/kvm: {e.strerror}"
    try:
        version = fcntl.ioctl(fd, _KVM_GET_API_VERSION)
    except OSError as e:
        return False, f"/dev/kvm does not answer: {e.strerror}"
    finally:
        os.close(fd)
    if version != 12:
        return False, f"/dev/kvm speaks KVM API {version}, not 12"
    # PVM (kvm_pvm, KVM without hardware virtualization, found in some nested cloud VMs)
    # opens and answers like KVM, but runs only kernels built as PVM guests: a stock kernel
    # crawls for half a minute and dies on an "emulation failure".
    modules = Path("/sys/module")
    if (modules / "kvm_pvm").exists() and not any(
            (modules / m).exists() for m in ("kvm_intel", "kvm_amd")):
        return False, "/dev/kvm is PVM (kvm_pvm), which cannot run a stock kernel"
    return True, ""


def choose_accel(requested: str | None = None) -> tuple[str, str]:
    """("kvm" or "tcg", why not kvm when it is tcg)."""
    requested = requested or os.environ.get("PYJAIL_VM_ACCEL") or "auto"
    if requested not in ("auto", "kvm", "tcg"):
        raise ValueError(f"accelerator {requested!r}: use kvm, tcg or auto")
    if requested == "tcg":
        return "tcg", "TCG was asked for"
    ok, why = kvm_usable()
    if requested == "kvm" and not ok:
        raise VMUnavailable(f"KVM was asked for, but {why}")
    return ("kvm", "") if ok else ("tcg", why)


def shared_libraries(binary: Path) -> list[Path]:
    """The shared objects `binary` loads (as ldd resolves them), the dynamic loader included;
    [] for a static binary."""
    r = subprocess.run(["ldd", str(binary)], capture_output=True, text=True,
                       env={"LC_ALL": "C", "PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    if r.returncode != 0:
        if "not a dynamic executable" in r.stdout + r.stderr:
            return []
        raise VMUnavailable(f"ldd {binary} failed: {(r.stdout + r.stderr).strip()}")
    libs = []
    for line in r.stdout.splitlines():
        line = line.strip()
        if "=> not found" in line:
            raise VMUnavailable(f"{binary} needs a library that is missing: {line}")
        m = re.match(r"(?:\S+ => )?(/\S+) \(0x", line)
        if m:
            libs.append(Path(m.group(1)))
    return libs


# --------------------------------------------------------------------------------------------
# The initramfs: a newc cpio archive, written here so that files land at any path with root
# ownership, device nodes included, without staging a tree or being root.


@dataclasses.dataclass(frozen=True)
class Entry:
    kind: str  # "dir", "file", "symlink", "chardev"
    mode: int = 0o755  # permission bits
    source: Path | None = None  # file: copy from here
    data: bytes | None = None  # file: or these bytes; symlink: the target
    rdev: tuple[int, int] = (0, 0)


class Tree:
    """Guest path -> Entry; parent directories appear by themselves."""

    def __init__(self):
        self.entries: dict[str, Entry] = {}

    def _parents(self, path: str) -> None:
        parent = os.path.dirname(path)
        while parent not in ("/", ""):
            self.entries.setdefault(parent, Entry("dir", 0o755))
            parent = os.path.dirname(parent)

    def add(self, path: str, entry: Entry) -> None:
        path = os.path.normpath("/" + path.lstrip("/"))
        self._parents(path)
        self.entries[path] = entry

    def dir(self, path: str, mode: int = 0o755) -> None:
        self.add(path, Entry("dir", mode))

    def file(self, path: str, data: bytes | str, mode: int = 0o644) -> None:
        self.add(path, Entry("file", mode, data=data.encode() if isinstance(data, str) else data))

    def copy(self, path: str, source: Path, mode: int | None = None) -> None:
        """A host file, symlinks followed."""
        real = Path(os.path.realpath(source))
        self.add(path, Entry("file", stat.S_IMODE(real.stat().st_mode) if mode is None else mode,
                             source=real))

    def symlink(self, path: str, target: str) -> None:
        self.add(path, Entry("symlink", 0o777, data=target.encode()))

    def chardev(self, path: str, major: int, minor: int, mode: int = 0o600) -> None:
        self.add(path, Entry("chardev", mode, rdev=(major, minor)))

    def copy_tree(self, guest_dir: str, host_dir: Path, skip: tuple[str, ...] = ()) -> None:
        """A host directory tree as it is: files, directories, symlinks (not followed); the
        directories `skip` names (relative to host_dir) are left out."""
        self.dir(guest_dir, stat.S_IMODE(host_dir.stat().st_mode))
        for root, dirs, files in os.walk(host_dir):
            rel_root = os.path.relpath(root, host_dir)
            dirs[:] = sorted(d for d in dirs
                             if os.path.normpath(os.path.join(rel_root, d)) not in skip)
            for name in sorted(dirs) + sorted(files):
                host = os.path.join(root, name)
                guest = os.path.normpath(os.path.join(guest_dir, rel_root, name))
                st = os.lstat(host)
                mode = stat.S_IMODE(st.st_mode)
                if stat.S_ISLNK(st.st_mode):
                    self.symlink(guest, os.readlink(host))
                elif stat.S_ISDIR(st.st_mode):
                    self.dir(guest, mode)
                elif stat.S_ISREG(st.st_mode):
                    self.add(guest, Entry("file", mode, source=Path(host)))
                else:
                    raise VMUnavailable(f"{host}: cannot put this kind of file in the initramfs")

    def digest(self) -> str:
        """A hash of everything the archive will hold."""
        h = hashlib.sha256(FORMAT_VERSION.encode())
        for path in sorted(self.entries):
            e = self.entries[path]
            h.update(f"\0{path}\0{e.kind}\0{e.mode:o}\0{e.rdev}\0".encode())
            if e.data is not None:
                h.update(hashlib.sha256(e.data).digest())
            if e.source is not None:
                with open(e.source, "rb") as f:
                    h.update(hashlib.file_digest(f, "sha256").digest()
                             if hasattr(hashlib, "file_digest") else _sha256_file(f))
        return h.hexdigest()

    def write_cpio(self, out) -> None:
        ino = 1
        for path in sorted(self.entries):
            e = self.entries[path]
            kind = {"dir": stat.S_IFDIR, "file": stat.S_IFREG, "symlink": stat.S_IFLNK,
                    "chardev": stat.S_IFCHR}[e.kind]
            if e.kind == "file" and e.source is not None:
                with open(e.source, "rb") as f:
                    body = f.read()
            else:
                body = e.data or b""
            _cpio_member(out, path.lstrip("/"), kind | e.mode, body, ino,
                         nlink=2 if e.kind == "dir" else 1, rdev=e.rdev)
            ino += 1
        _cpio_member(out, "TRAILER!!!", 0, b"", 0, nlink=1)


def _sha256_file(f) -> bytes:
    h = hashlib.sha256()
    for chunk in iter(lambda: f.read(1 << 20), b""):
        h.update(chunk)
    return h.digest()


def _cpio_member(out, name: str, mode: int, body: bytes, ino: int, *, nlink: int,
                 rdev: tuple[int, int] = (0, 0)) -> None:
    encoded = name.encode() + b"\0"
    fields = [ino, mode, 0, 0, nlink, 0, len(body), 0, 0, rdev[0], rdev[1], len(encoded), 0]
    header = b"070701" + b"".join(b"%08X" % v for v in fields)
    out.write(header + encoded + b"\0" * (-(len(header) + len(encoded)) % 4))
    out.write(body + b"\0" * (-len(body) % 4))


def base_tree(prefix: Path, guest_prefix: str, flavour: str = "plain") -> Tree:
    """Everything but the script."""
    if flavour not in ("plain", "systemd"):
        raise ValueError(f"flavour {flavour!r}: use plain or systemd")
    check_prefix(prefix)
    busybox = find_busybox()
    setpriv = find_setpriv()
    pyjail = prefix / "bin" / "pyjail"
    t = Tree()
    for d in ("/proc", "/sys", "/dev", "/run", "/root", "/etc", "/vm", "/vm/scenarios",
              "/.root"):
        t.dir(d, 0o700 if d == "/root" else 0o755)
    t.dir("/tmp", 0o1777)
    t.chardev("/dev/console", 5, 1)
    t.chardev("/dev/null", 1, 3, 0o666)

    t.copy("/bin/busybox", busybox, 0o755)
    real_binaries = {"setpriv"}
    applets = subprocess.run([str(busybox), "--list"], capture_output=True, text=True,
                             check=True).stdout.split()
    for applet in applets:
        if applet not in real_binaries and applet != "busybox":
            t.symlink(f"/bin/{applet}", "busybox")
    t.copy("/usr/bin/setpriv", setpriv, 0o755)

    for binary in (busybox, setpriv, pyjail):
        for lib in shared_libraries(binary):
            t.copy(str(lib), lib)

    # The named rootfses (the data rootfs is some 600 MiB) would not fit in the VM's memory;
    # the tests run on the default rootfs.
    t.copy_tree(guest_prefix, prefix, skip=("lib/pyjail/rootfs.d",))

    t.file("/etc/passwd", "root:x:0:0:root:/root:/bin/sh\n"
           f"nobody:x:{UNPRIVILEGED_ID}:{UNPRIVILEGED_ID}:nobody:/nonexistent:/bin/false\n")
    t.file("/etc/group", f"root:x:0:\ntty:x:5:\nnogroup:x:{UNPRIVILEGED_ID}:\n")
    t.file("/etc/hosts", "127.0.0.1\tlocalhost pyjail-vm\n::1\tlocalhost ip6-localhost\n")
    t.file("/etc/nsswitch.conf", "passwd: files\ngroup: files\nhosts: files\n")
    # pyjail's Python package, and the rootfs's interpreter to drive it with from outside a
    # jail (there is no Python of the guest's own): /vm/py.
    t.copy_tree("/vm/python/pyjail", PACKAGE, skip=("__pycache__",))
    t.file("/vm/py", _fill(GUEST_PY, guest_prefix), 0o755)
    t.file("/init", _fill(GUEST_INIT, guest_prefix), 0o755)
    t.file("/vm/lib.sh", _fill(GUEST_LIB, guest_prefix))
    t.file("/vm/harness.sh", _fill(GUEST_HARNESS, guest_prefix))
    if flavour == "systemd":
        add_systemd(t, guest_prefix)
    return t


def _package_files(packages) -> list[str]:
    r = subprocess.run(["dpkg", "-L", *packages], capture_output=True, text=True)
    if r.returncode != 0:
        missing = [p for p in packages
                   if subprocess.run(["dpkg", "-s", p], capture_output=True).returncode != 0]
        raise VMUnavailable(f"the systemd VM needs these packages: apt-get install "
                            f"{' '.join(missing or packages)}")
    return sorted(set(r.stdout.split("\n")) - {""})


def add_systemd(t: Tree, guest_prefix: str) -> None:
    """The systemd flavour (see GUEST_SYSTEMD_INIT): the packages' files as they are on the host
    (symlinks kept: a unit's alias is a link, and a copy would be a second unit), the shared
    libraries their programs need, and the configuration of the test boot."""
    elves = []
    for path in _package_files(SYSTEMD_PACKAGES):
        if path.startswith(_SYSTEMD_SKIP) or path.startswith("/etc/systemd/system/"):
            continue
        if not os.path.lexists(path):
            continue  # excluded by dpkg's path-exclude, say
        if os.path.islink(path):
            # Not a merged-/usr link of the host's (/bin -> usr/bin): dpkg lists /bin too.
            if not os.path.isdir(path):
                t.symlink(path, os.readlink(path))
        elif os.path.isfile(path):
            t.add(path, Entry("file", stat.S_IMODE(os.stat(path).st_mode), source=Path(path)))
            with open(path, "rb") as f:
                if f.read(4) == b"\x7fELF":
                    elves.append(path)
    # One ldd for all of them: its output names each file, then what it loads.
    r = subprocess.run(["ldd", *elves], capture_output=True, text=True,
                       env={"LC_ALL": "C", "PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    # A library of the packages themselves (libsystemd-shared, found through a RUNPATH that
    # ldd does not apply to every plugin) is there already.
    own = {os.path.basename(p) for p in t.entries}
    for line in r.stdout.splitlines():
        if "=> not found" in line and line.split()[0] not in own:
            raise VMUnavailable(f"a program of the systemd packages needs a missing library: {line}")
        m = re.match(r"\s*(?:\S+ => )?(/\S+) \(0x", line)
        if m and m.group(1) not in t.entries:
            t.copy(m.group(1), Path(m.group(1)))
    t.file("/init", _fill(GUEST_SYSTEMD_INIT, guest_prefix), 0o755)
    t.file("/vm/lib.sh", _fill(GUEST_SYSTEMD_LIB, guest_prefix))
    t.file("/vm/runner.sh", _fill(GUEST_SYSTEMD_RUNNER, guest_prefix))
    for path, text in GUEST_SYSTEMD_UNITS.items():
        t.file(path, text)
    t.symlink("/etc/systemd/system/default.target", "vm-tests.target")
    t.file("/etc/machine-id", "")  # systemd makes up one for the boot
    t.file("/etc/os-release", 'NAME="pyjail VM"\nID=pyjail-vm\n')
    # nobody lingers: logind starts its manager at boot, with nobody logged in.
    t.file("/var/lib/systemd/linger/nobody", "")
    t.dir("/var/tmp", 0o1777)
    t.file("/etc/passwd", "root:x:0:0:root:/root:/bin/sh\n"
           "messagebus:x:100:101::/nonexistent:/usr/sbin/nologin\n"
           f"nobody:x:{UNPRIVILEGED_ID}:{UNPRIVILEGED_ID}:nobody:/nonexistent:/bin/false\n")
    t.file("/etc/group", "root:x:0:\ntty:x:5:\nmessagebus:x:101:\nsystemd-journal:x:102:\n"
           f"nogroup:x:{UNPRIVILEGED_ID}:\n")


def cache_root() -> Path:
    if os.environ.get("PYJAIL_VM_CACHE"):
        return Path(os.environ["PYJAIL_VM_CACHE"])
    uid = os.geteuid()
    return Path("/tmp/pyjail-vm-cache" if uid == 0 else f"/tmp/pyjail-vm-cache-{uid}")


def build_initramfs(prefix: Path, guest_prefix: str = "/usr/local", *,
                    compress: str | None = None, keep: int = 3, log=None,
                    flavour: str = "plain") -> Path:
    """The cached initramfs (without a script) for this prefix; built when not cached."""
    compress = compress or os.environ.get("PYJAIL_VM_COMPRESS") or "none"
    if compress not in ("none", "gzip"):
        raise ValueError(f"compression {compress!r}: use none or gzip")
    t0 = time.monotonic()
    tree = base_tree(Path(prefix), guest_prefix, flavour)
    key = hashlib.sha256(f"{tree.digest()}\0{compress}".encode()).hexdigest()[:24]
    root = cache_root() / "initramfs"
    out_dir = root / key
    image = out_dir / ("initramfs.cpio.gz" if compress == "gzip" else "initramfs.cpio")
    if image.is_file():
        os.utime(out_dir)  # most recently used: pruned last
        return image
    out_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".initramfs.", dir=out_dir)
    try:
        with os.fdopen(fd, "wb") as raw:
            if compress == "gzip":
                with gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6, mtime=0) as gz:
                    tree.write_cpio(gz)
            else:
                tree.write_cpio(raw)
        os.chmod(tmp, 0o644)
        os.replace(tmp, image)
    except BaseException:
        os.unlink(tmp)
        raise
    if log:
        log(f"built {image} ({image.stat().st_size >> 20} MiB) in {time.monotonic() - t0:.1f} s")
    _prune(root, keep)
    return image


def _prune(root: Path, keep: int) -> None:
    """Removes all but the `keep` most recently used entries of `root`."""
    entries = [e for e in root.iterdir() if not e.name.startswith(".")]
    for e in sorted(entries, key=lambda e: e.stat().st_mtime, reverse=True)[keep:]:
        if e.is_dir():
            shutil.rmtree(e, ignore_errors=True)
        else:
            e.unlink(missing_ok=True)


def script_archive(script: str, files: dict[str, bytes | str] | None = None) -> bytes:
    """The small cpio appended to the cached one: /vm/script.sh and any other files."""
    t = Tree()
    t.file("/vm/script.sh", script)
    for path, data in (files or {}).items():
        t.file(path, data)
    buf = io.BytesIO()
    t.write_cpio(buf)
    # The entries replace nothing but add files; the directories they need already exist in
    # the base archive, and re-creating one with the same mode is harmless.
    return buf.getvalue()


# --------------------------------------------------------------------------------------------
# The kernel, decompressed ahead of time
#
# A bzImage decompresses itself in the guest, which under TCG takes seconds (Debian's is
# xz). Its payload is an ELF vmlinux with a PVH entry point (CONFIG_PVH), which qemu boots
# directly: decompressed once here and cached, it starts in a fraction of a second.

_PVH_NOTE = 18  # XEN_ELFNOTE_PHYS32_ENTRY


def direct_kernel(kernel: Path, *, log=None) -> Path:
    """The uncompressed PVH vmlinux inside `kernel` (cached), or `kernel` itself when it has
    none that this can extract (or PYJAIL_VM_PVH=0)."""
    if os.environ.get("PYJAIL_VM_PVH") == "0":
        return kernel
    data = kernel.read_bytes()
    out = cache_root() / "kernels" / (hashlib.sha256(data).hexdigest()[:24] + ".vmlinux")
    if out.is_file():
        os.utime(out)
        return out
    why = ""
    try:
        vmlinux = _extract_vmlinux(data)
    except (ValueError, lzma.LZMAError, OSError, EOFError, zlib.error, struct.error) as e:
        vmlinux, why = None, str(e)
    if vmlinux is not None and not _has_pvh_note(vmlinux):
        vmlinux, why = None, "its vmlinux has no PVH entry point"
    if vmlinux is None:
        if log:
            log(f"booting {kernel} as it is ({why or 'compressed in a way Python cannot undo'})")
        return kernel
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".vmlinux.", dir=out.parent)
    with os.fdopen(fd, "wb") as f:
        f.write(vmlinux)
    os.chmod(tmp, 0o644)
    os.replace(tmp, out)
    _prune(out.parent, 2)
    return out


def _extract_vmlinux(data: bytes) -> bytes | None:
    """The payload of a bzImage, decompressed; None for a compression Python lacks."""
    if len(data) < 0x250 or data[0x202:0x206] != b"HdrS":
        raise ValueError("not a bzImage")
    setup_sects = data[0x1F1] or 4
    start = (setup_sects + 1) * 512
    offset, length = struct.unpack_from("<II", data, 0x248)  # payload_offset, payload_length
    payload = data[start + offset:start + offset + length]
    if payload.startswith(b"\xfd7zXZ\x00"):
        return lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(payload)
    if payload.startswith(b"\x1f\x8b"):
        return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(payload)
    if payload.startswith(b"BZh"):
        return bz2.BZ2Decompressor().decompress(payload)
    if payload.startswith(b"\x5d\x00\x00"):
        return lzma.LZMADecompressor(format=lzma.FORMAT_ALONE).decompress(payload)
    return None  # zstd, lz4, lzo


def _has_pvh_note(elf: bytes) -> bool:
    if elf[:4] != b"\x7fELF" or elf[4] != 2 or elf[5] != 1:  # 64-bit, little-endian
        return False
    phoff, = struct.unpack_from("<Q", elf, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", elf, 0x36)
    for i in range(phnum):
        p_type, _, p_offset, _, _, p_filesz = struct.unpack_from("<IIQQQQ", elf, phoff + i * phentsize)
        if p_type != 4:  # PT_NOTE
            continue
        pos, end = p_offset, p_offset + p_filesz
        while pos + 12 <= end:
            namesz, descsz, ntype = struct.unpack_from("<III", elf, pos)
            if elf[pos + 12:pos + 12 + namesz].rstrip(b"\0") == b"Xen" and ntype == _PVH_NOTE:
                return True
            pos += 12 + (namesz + 3) // 4 * 4 + (descsz + 3) // 4 * 4
    return False


# --------------------------------------------------------------------------------------------
# Running the VM


@dataclasses.dataclass
class VMResult:
    exit_code: int | None  # the script's; None when it did not finish
    output: str  # what it printed (stdout and stderr), between the markers
    console: str  # the whole serial console
    accel: str  # "kvm" or "tcg"
    accel_note: str  # why not kvm, when tcg
    timed_out: bool
    boot_seconds: float | None  # qemu's start to the start marker, on the host's clock
    guest_boot_seconds: float | None  # the guest's uptime at the start marker
    script_seconds: float | None  # the start marker to the end marker (guest's clock)
    total_seconds: float  # qemu's start to its end
    log_path: Path | None
    failure: str = ""  # why the script did not run, when it did not
    earlier: str = ""  # a boot before this one that was given up, and why

    def timing(self) -> str:
        text = f"{self.accel}"
        if self.boot_seconds is not None:
            text += f": boot {self.boot_seconds:.2f} s (guest {self.guest_boot_seconds:.2f} s)"
        if self.script_seconds is not None:
            text += f", script {self.script_seconds:.2f} s"
        text += f", qemu in all {self.total_seconds:.2f} s"
        return text + (f" ({self.earlier})" if self.earlier else "")


def kernel_command_line(extra: str = "") -> str:
    # loglevel=3 keeps KERN_ERR and below (an OOM kill's "Killed process") off the console,
    # where they would mix with the script's output; panics still show.
    args = ["console=ttyS0", "panic=-1", "rdinit=/init", "quiet", "loglevel=3",
            "8250.nr_uarts=1", "tsc=reliable", "no_timer_check", "random.trust_cpu=on"]
    return " ".join(args + ([extra] if extra else []))


def qemu_command(kernel: Path, initrd: Path, accel: str, *, memory: int = 1024, cpus: int = 2,
                 append: str = "") -> list[str]:
    cmd = [find_qemu(), "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
           "-serial", "stdio", "-m", str(memory), "-smp", str(cpus),
           "-kernel", str(kernel), "-initrd", str(initrd), "-append", kernel_command_line(append)]
    if accel == "kvm":
        cmd += ["-machine", "pc,accel=kvm", "-cpu", "host"]
    else:
        cmd += ["-machine", "pc,accel=tcg", "-cpu", "max"]
    return cmd


# A KVM boot that has not reached the script by then is taken for one KVM cannot run (real
# KVM boots in about a second): it is stopped, and the VM is emulated instead.
KVM_START_LIMIT = 30.0
# An emulated boot reaches the script in 4-15 s on a 2-CPU machine, 45 s in its slowest
# phases under the other test lanes' load: one that has not by then is taken for stuck.
TCG_START_LIMIT = 240.0
_KVM_FAILURES = ("KVM internal error", "emulation failure", "failed to initialize kvm",
                 "failed to initialize KVM", "Could not access KVM kernel module")


def run(script: str, prefix: str | os.PathLike, *, kernel: str | os.PathLike | None = None,
        timeout: float = 300, accel: str | None = None, guest_prefix: str = "/usr/local",
        files: dict[str, bytes | str] | None = None, log_path: str | os.PathLike | None = None,
        memory: int = 1024, cpus: int = 2, append: str = "", echo=None,
        log=None, flavour: str = "plain") -> VMResult:
    """Boots the VM, runs `script` (sh, as root, /vm/lib.sh sourced) and powers off.

    `files` are more files for the guest (path -> content). The console is streamed to
    `log_path` and, line by line, to `echo` (a callable) when given; `log` gets progress
    notes. `timeout` counts from qemu's start. Returns the result also when the script did
    not finish in time (exit_code None, timed_out). Raises VMUnavailable when something is
    missing, VMBootError when the VM did not get as far as the script.
    """
    kernel_path = direct_kernel(find_kernel(kernel), log=log)
    find_qemu()
    forced = accel or os.environ.get("PYJAIL_VM_ACCEL")
    acc, note = choose_accel(accel)
    if note and log and not forced:
        log(f"no KVM ({note}): emulating with TCG, which is slower")
    base = build_initramfs(Path(prefix), guest_prefix, log=log, flavour=flavour)
    if flavour == "systemd":
        # systemd's own status and logs stay off the console, where the output is read.
        append = " ".join(filter(None, ["systemd.show_status=0 systemd.log_level=err "
                                        "systemd.log_target=kmsg", append]))
    work = Path(tempfile.mkdtemp(prefix=".run.", dir=cache_root()))
    try:
        initrd = work / "initrd"
        with open(initrd, "wb") as out, open(base, "rb") as src:
            shutil.copyfileobj(src, out, 1 << 22)
            out.write(script_archive(script, files))
        boot = dict(timeout=timeout, log_path=log_path, memory=memory, cpus=cpus, append=append,
                    echo=echo)
        # A forced KVM gets no start limit: there is nothing to fall back to.
        limit = TCG_START_LIMIT if acc == "tcg" else None if forced else KVM_START_LIMIT
        result = _boot(kernel_path, initrd, acc, note, start_limit=limit, **boot)
        if acc == "kvm" and not forced and _never_started(result):
            note = f"KVM did not boot the kernel ({result.failure})"
            if log:
                log(f"{note}: emulating with TCG, which is slower")
            acc = "tcg"
            result = _boot(kernel_path, initrd, acc, note, start_limit=TCG_START_LIMIT, **boot)
        if acc == "tcg" and _stuck_before_start(result):
            # Seen once in CI: an emulated boot that never reached the script, its vCPU
            # spinning until the whole timeout was spent. A second boot is cheap beside that;
            # the first one's console is kept for finding out why.
            first = _keep_console(result)
            if log:
                log(f"the VM (tcg) {result.failure}: booting it once more "
                    f"(first console: {first})")
            earlier = f"a first boot stopped: {result.failure} (console log: {first})"
            result = _boot(kernel_path, initrd, acc, note, start_limit=TCG_START_LIMIT, **boot)
            result.earlier = earlier
            if result.boot_seconds is None:
                result.failure += f"; {earlier}"
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if result.boot_seconds is None:
        tail = "\n".join(result.console.splitlines()[-25:])
        where = f" (console log: {result.log_path})" if result.log_path else ""
        raise VMBootError(f"the VM ({result.accel}) did not get to the script: "
                          f"{result.failure}{where}\n{tail}")
    return result


def _never_started(result: VMResult) -> bool:
    """Whether the VM never got to the script, with no setup failure to explain it: the
    kernel or the emulator's fault, not the scenario's (what another boot may get past)."""
    return result.boot_seconds is None and SETUP_FAILED_MARK not in result.console


def _stuck_before_start(result: VMResult) -> bool:
    """Whether the VM never started and was stopped for not reaching the script in time."""
    return _never_started(result) and result.failure.startswith("no start in")


def _keep_console(result: VMResult) -> Path | None:
    """Moves a failed boot's console log aside, where the next boot's does not overwrite it."""
    if result.log_path is None or not result.log_path.exists():
        return None
    kept = result.log_path.with_name(result.log_path.stem + ".first" + result.log_path.suffix)
    result.log_path.replace(kept)
    return kept


def _boot(kernel: Path, initrd: Path, accel: str, accel_note: str, *, timeout: float,
          start_limit: float | None, log_path, memory: int, cpus: int, append: str,
          echo) -> VMResult:
    cmd = qemu_command(kernel, initrd, accel, memory=memory, cpus=cpus, append=append)
    log_file = open(log_path, "w", encoding="utf-8", errors="replace") if log_path else None
    if log_file:
        log_file.write("# " + shlex.join(cmd) + "\n")
        log_file.flush()
    lines: list[str] = []
    state: dict = {"start": None, "end": None, "failure": ""}
    started = threading.Event()  # the start marker came, or the VM cannot start
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)

    def reader():
        for raw in proc.stdout:
            line = raw.decode("utf-8", errors="replace").rstrip("\r\n").replace("\r", "")
            lines.append(line)
            if log_file:
                log_file.write(line + "\n")
                log_file.flush()
            if echo:
                echo(line)
            if state["start"] is None:
                if line.startswith(START_MARK):
                    state["start"] = (time.monotonic() - t0, len(lines), _uptime(line))
                    started.set()
                elif line.startswith(SETUP_FAILED_MARK):
                    state["failure"] = line[len(SETUP_FAILED_MARK):].strip()
                elif accel == "kvm" and any(f in line for f in _KVM_FAILURES):
                    # qemu stops the guest and waits: nothing more will come.
                    state["failure"] = line.strip()
                    proc.kill()
            elif line.startswith(END_MARK) and state["end"] is None:
                state["end"] = (len(lines), line)
        started.set()

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    timed_out = False
    try:
        if start_limit is not None:
            started.wait(min(start_limit, timeout))
            if state["start"] is None and proc.poll() is None:
                state["failure"] = state["failure"] or \
                    f"no start in {min(start_limit, timeout):g} s"
                timed_out = start_limit >= timeout
                proc.kill()
        proc.wait(timeout=max(0.0, timeout - (time.monotonic() - t0)))
    except subprocess.TimeoutExpired:
        timed_out = True
        proc.kill()
        proc.wait()
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    finally:
        thread.join(timeout=5)
        total = time.monotonic() - t0
        if log_file:
            if timed_out:
                log_file.write(f"\n# killed qemu after {timeout:g} s\n")
            log_file.close()
    if state["start"] is None and not state["failure"]:
        state["failure"] = f"no start in {timeout:g} s" if timed_out else \
            f"qemu exited with status {proc.returncode} before the start"

    exit_code = script_seconds = None
    output = ""
    start = state["start"]
    if start is not None:
        first = start[1]
        last = state["end"][0] - 1 if state["end"] else len(lines)
        body = lines[first:last]
        if state["end"]:
            m = re.search(r"rc=(\d+)", state["end"][1])
            exit_code = int(m.group(1)) if m else None
            end_uptime = _uptime(state["end"][1])
            if end_uptime is not None and start[2] is not None:
                script_seconds = end_uptime - start[2]
        # The init prints a newline after the script's output, which ends its last line, if
        # it had no newline, or makes an empty line: either way, joining gives the output.
        output = "\n".join(body) + ("" if state["end"] or not body else "\n")
    return VMResult(exit_code=exit_code, output=output, console="\n".join(lines) + "\n",
                    accel=accel, accel_note=accel_note, timed_out=timed_out,
                    boot_seconds=start[0] if start else None,
                    guest_boot_seconds=start[2] if start else None,
                    script_seconds=script_seconds, total_seconds=total,
                    log_path=Path(log_path) if log_path else None, failure=state["failure"])


def _uptime(marker_line: str) -> float | None:
    m = re.search(r"uptime=([0-9.]+)", marker_line)
    return float(m.group(1)) if m else None


# --------------------------------------------------------------------------------------------
# Scenarios: many shell snippets, one boot


@dataclasses.dataclass
class ScenarioResult:
    name: str
    exit_code: int | None  # None: the scenario did not finish (the VM stopped or timed out)
    output: str  # stdout and stderr, interleaved
    seconds: float | None  # on the guest's clock (10 ms resolution)

    def describe(self) -> str:
        return f"scenario {self.name}: exit {self.exit_code}\n--- output:\n{self.output}"


@dataclasses.dataclass
class Scenario:
    name: str  # [A-Za-z0-9_.-]+
    script: str  # sh, run as root with /vm/lib.sh sourced
    env: dict[str, str] = dataclasses.field(default_factory=dict)  # set before the script
    timeout: int = 120  # seconds, inside the VM


def run_scenarios(scenarios: list[Scenario], prefix, **kwargs) -> tuple[VMResult, dict[str, ScenarioResult]]:
    """Runs all `scenarios` in one boot, each in its own shell, in order; returns the VM's
    result and each scenario's. Same keyword arguments as run()."""
    files = {}
    names = set()
    for i, s in enumerate(scenarios):
        if not re.fullmatch(r"[A-Za-z0-9_.\-]+", s.name) or s.name in names:
            raise ValueError(f"bad or repeated scenario name {s.name!r}")
        names.add(s.name)
        head = f"# timeout={int(s.timeout)}\n"
        head += "".join(f"{k}={shlex.quote(str(v))}; export {k}\n" for k, v in s.env.items())
        files[f"/vm/scenarios/{i:04d}-{s.name}.sh"] = head + s.script.rstrip("\n") + "\n"
    vm_result = run("", prefix, files=files, **kwargs)
    return vm_result, parse_scenarios(vm_result.output, [s.name for s in scenarios])


# The guest's console is a terminal and the scenarios' shell exports the harness's variables
# ($NOBODY, $PYJAIL, ...), so pyjail says once that the jail does not get them: a notice for a
# person at a terminal, not part of any scenario's output.
ENV_NOTICE = "pyjail: the jail does not get your environment"


def parse_scenarios(output: str, names: list[str]) -> dict[str, ScenarioResult]:
    results = {n: ScenarioResult(n, None, "", None) for n in names}
    current = None
    body: list[str] = []
    for line in output.splitlines():
        if line.startswith(SCENARIO_BEGIN):
            current = line[len(SCENARIO_BEGIN):].strip().split("-", 1)[1]
            body = []
        elif line.startswith(SCENARIO_END) and current is not None:
            fields = dict(f.split("=", 1) for f in line.split()[2:] if "=" in f)
            seconds = None
            if "t0" in fields and "t1" in fields:
                seconds = float(fields["t1"]) - float(fields["t0"])
            # The driver's newline after the output (see _boot): joining gives the output.
            results[current] = ScenarioResult(current, int(fields["rc"]), "\n".join(body), seconds)
            current = None
        elif current is not None and not line.startswith(ENV_NOTICE):
            body.append(line)
    if current is not None:  # cut off
        results[current] = ScenarioResult(current, None, "\n".join(body) + "\n", None)
    return results


# --------------------------------------------------------------------------------------------
# Command line


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description="Run a shell script as root in a small VM with a pure cgroup v2 hierarchy.",
        epilog="The script runs with /vm/lib.sh sourced: $PYJAIL, as_nobody CMD..., "
               "as_user root|nobody CMD..., $USER_CGROUP, $SESSION_CGROUP, "
               "$ROOT_SESSION_CGROUP.")
    p.add_argument("--prefix", required=True,
                   help="a staged pyjail installation prefix (STAGE/usr/local)")
    p.add_argument("--guest-prefix", default="/usr/local",
                   help="where it is put in the VM (default: /usr/local)")
    p.add_argument("--kernel", help="the kernel (default: the newest /boot/vmlinuz-*)")
    p.add_argument("--timeout", type=float, default=300, help="seconds (default: 300)")
    p.add_argument("--accel", choices=["kvm", "tcg"], help="default: kvm when usable")
    p.add_argument("--log", help="write the serial console here as it comes")
    p.add_argument("--memory", type=int, default=1024, help="MiB (default: 1024)")
    p.add_argument("--cpus", type=int, default=2)
    p.add_argument("--append", default="", help="more kernel command line")
    p.add_argument("--flavour", choices=["plain", "systemd"], default="plain",
                   help="plain: a shell as init; systemd: the host's systemd as init")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="stream the whole console to stderr")
    p.add_argument("script", help="the shell script to run ('-': standard input)")
    a = p.parse_args(argv)

    script = sys.stdin.read() if a.script == "-" else Path(a.script).read_text()

    def note(msg):
        print(f"vm.py: {msg}", file=sys.stderr, flush=True)

    stream = _ScriptStream(sys.stdout)

    def echo(line):
        if a.verbose:
            print(line, file=sys.stderr, flush=True)
        stream.feed(line)

    try:
        r = run(script, a.prefix, kernel=a.kernel, timeout=a.timeout, accel=a.accel,
                guest_prefix=a.guest_prefix, log_path=a.log, memory=a.memory, cpus=a.cpus,
                flavour=a.flavour,
                append=a.append, echo=echo, log=note)
    except (VMUnavailable, VMBootError) as e:
        note(str(e))
        return 125
    note(r.timing())
    if r.exit_code is None:
        note("the script did not finish" + (f" within {a.timeout:g} s" if r.timed_out else ""))
        return 124
    return r.exit_code


class _ScriptStream:
    """Writes the script's output as the console brings it (the line after the start
    marker to the one before the end marker, less the newline the init adds)."""

    def __init__(self, out):
        self.out = out
        self.inside = False
        self.blank = 0  # blank lines held back: the last one is the init's

    def feed(self, line: str) -> None:
        if not self.inside:
            self.inside = line.startswith(START_MARK)
            return
        if line.startswith(END_MARK):
            self.out.write("\n" * max(0, self.blank - 1))
            self.out.flush()
            self.inside = False
        elif line == "":
            self.blank += 1
        else:
            self.out.write("\n" * self.blank + line + "\n")
            self.out.flush()
            self.blank = 0


if __name__ == "__main__":
    sys.exit(main())
