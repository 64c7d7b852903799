"""Third-party packages for a rootfs: from wheels with pip, or from an existing virtualenv,
and the lock that records what went in.

No package code and no pip resolution runs on the host: pip runs in a jail (pip_jail_command),
as the rootfs's own interpreter in the tree being built, so it picks wheels for exactly that
interpreter and platform. --only-binary :all: does not stop every build (a local directory, a
direct reference to an sdist, a requirements file's own --no-binary, a URL dependency of a
wheel from --find-links or a private index are still built), so what pip's --report says did
not come from a wheel archive is refused unless --allow-build was given (check_report). What
the jail wrote -- the report, the installed files -- is hostile: bounded, checked, and read
without following symlinks. A requirement that pip cannot satisfy is explained from pip's own
log (-vv lists every file it skipped and why): no such project, no wheel for this interpreter,
only a source distribution.

Only the standard library of any python3 >= 3.9 is used.
"""

import collections
import errno
import functools
import hashlib
import json
import os
import re
import signal
import stat
import subprocess
import time
import urllib.parse

LOCK = "etc/pyjail-rootfs.lock.json"
LOCK_VERSION = 1

# A virtualenv's own tools: they install packages, which a read-only jail cannot do.
VENV_TOOLS = ("pip", "setuptools", "_distutils_hack", "wheel", "pkg_resources")


class BuildError(Exception):
    """A failure reported as `PROG: WHAT: WHY (FIX)`."""

    def __init__(self, what, why, fix):
        super().__init__(what)
        self.what, self.why, self.fix = what, why, fix

    def line(self, prog="build-rootfs"):
        return printable("%s: %s: %s (%s)" % (prog, self.what, self.why, self.fix))


def printable(text):
    """`text` with each control character (C0, DEL, C1) as "?". Attack: a package's error
    text (pip's output of package code) with terminal escape sequences, printed raw to the
    user's terminal: a changed title, a cleared line, worse on some terminals."""
    return "".join("?" if ord(c) < 32 or 127 <= ord(c) < 160 else c for c in str(text))


def one_line(text, limit=300):
    text = printable(" ".join(str(text).split()))
    return text if len(text) <= limit else text[:limit - 3] + "..."


def canonical(name):
    return re.sub(r"[-_.]+", "-", name).lower()


# ------------------------------------------------------------------------------------ pip


# Where the pip jail sees what it is given (pip_jail_command). The tree being built is the
# jail's rootfs, read-only; the staging directory (/work) is its only writable host directory.
JAIL_PIP = "/pyjail/pip"                  # the host's pip package, read-only, at JAIL_PIP/pip
JAIL_LINKS = "/pyjail/links"              # --find-links DIR number N at JAIL_LINKS/N
JAIL_REQUIREMENTS = "/pyjail/requirements"  # --requirements FILE number N at .../N.txt
JAIL_STAGE = "/work"
JAIL_SITE = JAIL_STAGE + "/site"          # pip --target
JAIL_REPORT = JAIL_STAGE + "/report.json"  # pip --report
JAIL_DOWNLOAD = JAIL_STAGE + "/download"  # pip download --dest (--wheel-cache)
JAIL_TMP = JAIL_STAGE + "/tmp"            # TMPDIR: builds need more room than the jail's tmpfs

# Runs pip from JAIL_PIP as `python -m pip` would, with the interpreter in isolated mode (-I:
# no PYTHON* variables, no user site, no current directory on sys.path).
RUN_PIP = ("import runpy, sys; sys.path.insert(0, %r); sys.argv[0] = 'pip'; "
           "runpy.run_module('pip', run_name='__main__', alter_sys=True)" % JAIL_PIP)

# With an index: a forwarder of ours, in the jail, from 127.0.0.1 to the relay's Unix socket
# (rootfs_relay.py, on the host), which pip uses as its proxy; then pip, as RUN_PIP. The pip
# subprocesses of builds find the proxy in the environment.
JAIL_RELAY = "/pyjail/relay.sock"
JAIL_CA = "/pyjail/ca.pem"
RUN_PIP_RELAYED = r"""
import os, runpy, socket, sys, threading

def pipe(a, b):
    try:
        while True:
            data = a.recv(65536)
            if not data:
                break
            b.sendall(data)
    except OSError:
        pass
    for s, how in ((b, socket.SHUT_WR), (a, socket.SHUT_RD)):
        try:
            s.shutdown(how)
        except OSError:
            pass

def forward(listener):
    while True:
        client, _ = listener.accept()
        relay = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            relay.connect(%(relay)r)
        except OSError:
            client.close()
            continue
        for a, b in ((client, relay), (relay, client)):
            threading.Thread(target=pipe, args=(a, b), daemon=True).start()

listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen(64)
threading.Thread(target=forward, args=(listener,), daemon=True).start()
proxy = "http://127.0.0.1:%%d" %% listener.getsockname()[1]
os.environ["HTTPS_PROXY"] = os.environ["https_proxy"] = proxy
sys.argv[1:2] = [sys.argv[1], "--proxy", proxy]
sys.path.insert(0, %(pip)r)
sys.argv[0] = "pip"
runpy.run_module("pip", run_name="__main__", alter_sys=True)
""" % {"relay": JAIL_RELAY, "pip": JAIL_PIP}

# The pip jail's limits: a resolver or a build that loops, floods or fills the disk is stopped.
# Its output (pip's -vv log, which is read into the builder's memory) is capped too. --fsize
# caps each file; what all of them add to the host's disk is watched by the builder
# (DiskWatch), which stops the jail with SIGTERM: --kill-grace 0 makes that end the whole jail
# at once, since nothing of a stopped run is kept. Attack: build code that ignores SIGTERM
# and goes on writing for the default grace (5 s, gigabytes on a fast disk).
PIP_JAIL_LIMITS = ("--wall-time", "3600", "--cpu-time", "0", "--memory", "4G",
                   "--pids", "512", "--fsize", "2G", "--tmpfs-size", "256M",
                   "--output-limit", "64M", "--nofile", "4096", "--kill-grace", "0")

# pip's --report, written in the jail: hostile. Bounded before it is parsed.
REPORT_LIMIT = 16 << 20
MAX_INSTALLS = 10000
NAME_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,198}[A-Za-z0-9])?$")
VERSION_RE = re.compile(r"^[A-Za-z0-9.+!_-]{1,100}$")
FILE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+!~%-]{0,254}$")
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
WHEEL_FILE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+!]{0,200}-[A-Za-z0-9._+!-]{1,200}\.whl$")


def jail_bind_path(path, what):
    """A host path given to the pip jail as SRC of --ro-bind SRC:DST: no ':' in it."""
    if ":" in path or "\n" in path:
        raise BuildError(what, "a path with ':' or a newline cannot be bound into the jail that "
                         "runs pip", "move or rename it")
    return path


# Before pip, in a jail where no package code may run (the download that fills the wheel
# cache, and an install without --allow-build): a seccomp filter of the jail's own on top of
# pyjail's, which refuses execve and execveat (EPERM) to pip and everything it starts. pip
# runs every build backend and setup.py in a new interpreter, so none can start, while pip
# itself (one process and its threads) downloads and unpacks wheels as before. (pyjail's own
# filter cannot refuse execve: the program's exec comes after it.) Attack: a package's build
# code, run by pip where nothing should be built (an sdist's metadata, a direct reference, a
# wheel's URL dependency), writing files named as wheels into the download directory (which
# the builder then takes into the wheel cache for every later build), or forging pip's
# report and leaving files of its own in the site. Fails closed: without the filter, or if
# an exec is not refused after it, pip does not run.
NO_EXEC = r"""
import sys

def _refuse_exec():
    import ctypes, errno, os
    arch, calls = {"x86_64": (0xC000003E, (59, 322)),
                   "aarch64": (0xC00000B7, (221, 281))}[os.uname().machine]
    class Insn(ctypes.Structure):
        _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte),
                    ("k", ctypes.c_uint)]
    class Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Insn))]
    ld, jeq, ret = 0x20, 0x15, 0x06
    refuse, allow = 0x00050000 | errno.EPERM, 0x7FFF0000
    insns = (Insn * 7)(Insn(ld, 0, 0, 4), Insn(jeq, 0, 4, arch), Insn(ld, 0, 0, 0),
                       Insn(jeq, 2, 0, calls[0]), Insn(jeq, 1, 0, calls[1]),
                       Insn(ret, 0, 0, allow), Insn(ret, 0, 0, refuse))
    prog = Prog(7, insns)
    libc = ctypes.CDLL(None, use_errno=True)
    # PR_SET_NO_NEW_PRIVS (pyjail's is set already), PR_SET_SECCOMP, SECCOMP_MODE_FILTER
    if libc.prctl(38, 1, 0, 0, 0) != 0 or libc.prctl(22, 2, ctypes.byref(prog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "cannot install the filter")
    try:
        os.execv("/nonexistent", ["x"])
    except OSError as e:
        if e.errno != errno.EPERM:
            raise OSError(e.errno, "an exec is not refused")

try:
    _refuse_exec()
except (OSError, KeyError, AttributeError, ImportError) as e:
    sys.exit("pyjail rootfs build: cannot refuse execve to pip (%s): pip does not run" % e)
del _refuse_exec
"""


def pip_jail_command(pyjail, rootfs, python, pip_dir, stage, requirements, specs, find_links,
                     no_index, allow_build, extra=(), host_user=None, epoch=None, relay=None,
                     index_urls=(), ca_file=None, download=False):
    """The pyjail command line that runs pip in a jail (pure: no syscalls).

    pip resolves, downloads and (with `allow_build`) builds for the rootfs's own interpreter,
    `python` (its path in the tree), with the tree `rootfs` as the jail's root, read-only. The
    jail sees, read-only, the host's pip package (`pip_dir`), each --find-links directory and
    each requirements file; it writes only to `stage` (/work) and its own tmpfs. Its network is
    its own loopback: with `relay` (the host path of the builder's relay socket, which lets
    through only the index's hosts: rootfs_relay.py), pip reaches the index through it, and
    checks its certificates against `ca_file`; without, --no-index is the only way pip finds
    anything. `host_user`: when root builds, the host user the jail runs as (it owns
    `stage`). `download`: instead of installing, download the wheels into `stage`'s
    download/. Where nothing may be built (a download, or an install without `allow_build`),
    pip runs after NO_EXEC."""
    cmd = [pyjail, "--profile", "strict", "--rootfs", rootfs, "--quiet",
           "--cgroup-notice", "off", "--workdir", stage,
           "--net", "loopback" if relay else "none"] + list(PIP_JAIL_LIMITS)
    if host_user is not None:
        cmd += ["--host-user", host_user]
    cmd += ["--ro-bind", "%s:%s/pip" % (jail_bind_path(pip_dir, "pip %s" % pip_dir), JAIL_PIP)]
    sources = ["--no-index"] if no_index else []
    if relay:
        cmd += ["--ro-bind", "%s:%s" % (jail_bind_path(relay, "relay %s" % relay), JAIL_RELAY)]
        for i, url in enumerate(index_urls):
            sources += ["--index-url" if i == 0 else "--extra-index-url", url]
        if ca_file:
            cmd += ["--ro-bind", "%s:%s" % (jail_bind_path(ca_file, "CA file %s" % ca_file),
                                           JAIL_CA)]
            sources += ["--cert", JAIL_CA]
    for i, d in enumerate(find_links):
        if "://" in d:
            sources += ["--find-links", d]
            continue
        cmd += ["--ro-bind", "%s:%s/%d" % (jail_bind_path(d, "--find-links %s" % d),
                                          JAIL_LINKS, i)]
        sources += ["--find-links", "%s/%d" % (JAIL_LINKS, i)]
    for i, r in enumerate(requirements):
        cmd += ["--ro-bind", "%s:%s/%d.txt" % (jail_bind_path(r, "--requirements %s" % r),
                                              JAIL_REQUIREMENTS, i)]
        sources += ["--requirement", "%s/%d.txt" % (JAIL_REQUIREMENTS, i)]
    env = {"HOME": "/tmp", "TMPDIR": JAIL_TMP, "LC_ALL": "C.UTF-8",
           "PIP_NO_CACHE_DIR": "1", "PIP_CONFIG_FILE": "/dev/null"}
    if epoch is not None:
        env["SOURCE_DATE_EPOCH"] = str(epoch)   # reproducible builds, where they honour it
    for k in sorted(env):
        cmd += ["--env", "%s=%s" % (k, env[k])]
    if download:
        # --wheel-cache: download the wheels into the staging directory (the builder moves the
        # new ones into the cache); the install that follows reads them in a jail of its own.
        pip = ["download", "-vv", "--disable-pip-version-check", "--no-input",
               "--no-cache-dir", "--dest", JAIL_DOWNLOAD, "--only-binary", ":all:"]
        script = NO_EXEC + (RUN_PIP_RELAYED if relay else RUN_PIP)
        return cmd + ["--", python, "-I", "-c", script] + pip + sources + list(extra) + \
            list(specs)
    pip = ["install", "-vv", "--disable-pip-version-check", "--no-input",
           "--root-user-action=ignore", "--no-cache-dir",
           # A fresh, flat directory: nothing installed anywhere counts as satisfied.
           "--target", JAIL_SITE, "--ignore-installed",
           # The builder compiles the bytecode itself, reproducibly (unchecked-hash).
           "--no-compile", "--report", JAIL_REPORT]
    if not allow_build:
        # Wheels only where pip honours it; what it would still build (a local directory, a
        # direct reference, a requirements file's own --no-binary, a URL dependency of a
        # wheel) cannot start in this jail (no execve: NO_EXEC), and a report that says
        # otherwise is refused (check_report).
        pip += ["--only-binary", ":all:"]
    script = ("" if allow_build else NO_EXEC) + (RUN_PIP_RELAYED if relay else RUN_PIP)
    return cmd + ["--", python, "-I", "-c", script] + pip + sources + list(extra) + list(specs)


def explain_pip_failure(log, python_desc):
    """(what, why, fix) for a failed `pip install`, from its -vv log."""
    lines = log.splitlines()
    errors = [l[len("ERROR: "):] for l in lines if l.startswith("ERROR: ")]
    m = next((re.search(r"No matching distribution found for (\S+)", e) for e in errors
              if "No matching distribution found" in e), None)
    if m:
        req = m.group(1)
        project = canonical(re.split(r"[<>=!~;\[ ]", req)[0])
        # A dependency, not what was asked for: say whose.
        parent = re.search(r"^ERROR: Could not find a version that satisfies the requirement "
                           r"%s \(from (?!versions:)([^,)]+)" % re.escape(req), log, re.M)
        what = "requirement %s" % req + (" (needed by %s)" % parent.group(1) if parent else "")
        skipped = []
        for l in lines:
            link = re.search(r"Skipping link: (.*?): (\S+?)(?:#\S*)?(?: \(from .*\))?$", l)
            if link:
                fname = link.group(2).rsplit("/", 1)[-1]
                stem = re.match(r"(.+?)-[0-9]", fname)
                if stem and canonical(stem.group(1)) == project:
                    skipped.append((link.group(1), fname))
        sdists = [f for why, f in skipped if "No sources permitted" in why or
                  "No binaries permitted" in why]
        wheels = [why for why, f in skipped if "none of the wheel's tags" in why or
                  "requires a different Python" in why]
        versions = next((re.search(r"\(from versions: ([^)]*)\)", e) for e in errors
                         if "from versions:" in e), None)
        versions = versions.group(1) if versions else "none"
        if versions != "none":
            shown = versions.split(", ")
            return (what,
                    "no version of it that matches has a wheel for %s (versions with one: %s)"
                    % (python_desc, ", ".join(shown[-5:])),
                    "change the version it asks for")
        if wheels:
            tags = sorted({t for l in wheels for t in re.findall(r"tags \(([^)]*)\)", l)})
            shown = ", ".join(tags[-4:]) + (", ..." if len(tags) > 4 else "")
            return (what,
                    "no wheel of it for %s (its wheels are for: %s)"
                    % (python_desc, shown or "other Python versions"),
                    "pick a package or version that has a wheel for this interpreter, or build "
                    "the rootfs from an interpreter its wheels support (--python)")
        if sdists:
            return (what,
                    "it has only source distributions (%s), and building one runs its code "
                    "(in a jail) only with --allow-build" % sdists[-1],
                    "use a version that has a wheel, or build the wheel yourself (pip wheel) "
                    "and pass its directory with --find-links DIR, or pass --allow-build to "
                    "let pip build it in the jail")
        return (what,
                "no such project on the index%s" % (
                    " or in the --find-links directories" if "Looking in links" in log else ""),
                "check the name (pip index versions NAME), or add --find-links DIR with its "
                "wheel")
    conflict = next((e for e in errors if "ResolutionImpossible" in e or "conflict" in e), None)
    if conflict:
        return ("requirements", one_line(conflict),
                "loosen the conflicting version pins")
    why = errors[-1] if errors else (lines[-1] if lines else "pip failed")
    if why.strip() == "Exception:":
        # pip's own crash: "ERROR: Exception:", its traceback, and what was raised last.
        at = max((i for i, l in enumerate(lines) if l.strip() == "ERROR: Exception:"),
                 default=len(lines))
        raised = [l for l in lines[at + 1:]
                  if l.strip() and not l[0].isspace() and not l.startswith("Traceback")]
        why = "pip failed: %s" % (raised[-1] if raised else "an exception")
    if "no such option: --report" in log or "no such option: --root-user-action" in log:
        return ("pip", "the pip of %s is older than 22.2" % python_desc,
                "upgrade it for that interpreter (python3 -m pip install --upgrade pip)")
    if "No module named pip" in log:
        return ("pip", "%s has no pip" % python_desc,
                "install pip for it (Debian: apt-get install python3-pip)")
    return ("pip install", one_line(why), "see pip's message; pip runs in a jail that sees "
            "only the --find-links directories and the requirements files, not other local "
            "paths; build a wheel of a local project and pass its directory with --find-links")


# ------------------------------------------------------------------------ the staging disk

# The pip jail writes to the host's disk only in the staging directory (its /work), beside the
# output. --fsize caps each file and --download-limit what the index sends, but not what the
# jail makes of it: a small wheel that unpacks to many gigabytes (a zip bomb: pip unpacks it),
# or, with --allow-build, build code that writes without end, would fill the disk. So while
# the jail runs the builder samples that filesystem (statvfs, every WATCH_INTERVAL seconds) and
# stops the jail when its use grew by more than --install-limit since the jail started, or
# when its free space or free inodes fall below a floor.
#
# statvfs, not a walk of the staging tree: it costs the same for any tree (a walk of what a
# hostile jail made, millions of entries or directories it closed, four times a second, would
# not), and it also sees what a walk cannot: files unlinked but held open, a tree's metadata.
# It also counts the other writers on that filesystem, so another process's writes can stop a
# build that stays within its limit: that errs toward stopping, and the limit's default is far
# above what builds need, so it takes tens of GiB written by others during one pip run.
#
# INSTALL_LIMIT: what --download-limit's default (8 GiB) of ordinary wheels needs while pip
# installs them: the downloads themselves (in pip's temporary directory, which is in the
# staging directory) and their contents, which wheels compress about threefold. torch with its
# CUDA libraries (3.5 GiB of wheels) needs about 10 GiB, the data rootfs under 1 GiB. Builds
# that need more are rare enough to ask for it (the error says how).
INSTALL_LIMIT = 32 << 30
# The floor of free space: 5% of the filesystem, at least 1 GiB, at most 4 GiB (as journald's
# SystemKeepFree: a share, capped, so that a large disk nearly full still takes a small build).
# At least 1 GiB: room for the host's own writers (logs, other users), and for what the jail
# can write between two samples and while it is killed (0.25 s at 2 GB/s is 0.5 GB). The
# floor is on the space left to users (f_bavail): the jail never runs as the host's root, and
# root's reserve (ext4's 5%) is the host's, not the build's.
FREE_FLOOR_SHARE, FREE_FLOOR_MIN, FREE_FLOOR_MAX = 20, 1 << 30, 4 << 30
# The floor of free inodes, where the filesystem has a fixed number of them (ext4; btrfs says
# 0): 5%. Attack: millions of empty files, a few hundred MB of directories, which use up the
# inodes of the whole disk (no file can be made) long before any limit of bytes.
INODE_FLOOR_SHARE = 20
WATCH_INTERVAL = 0.25
STOP_GRACE = 10     # seconds pyjail has to end after SIGTERM, before SIGKILL

DiskSample = collections.namedtuple("DiskSample", "used avail size inodes_avail inodes")


def disk_sample(path):
    """The filesystem of `path` now (statvfs): bytes used, bytes left to users, its size,
    inodes left to users, its inodes (0 where it has no fixed number)."""
    st = os.statvfs(path)
    return DiskSample((st.f_blocks - st.f_bfree) * st.f_frsize, st.f_bavail * st.f_frsize,
                      st.f_blocks * st.f_frsize, st.f_favail, st.f_files)


def free_floor(size):
    """The free space the builder keeps on a filesystem of `size` bytes while pip runs."""
    return min(max(size // FREE_FLOOR_SHARE, FREE_FLOOR_MIN), FREE_FLOOR_MAX)


def disk_verdict(start, now, limit):
    """Whether the pip jail may go on, from two samples of its staging directory's filesystem
    (DiskSample: when the jail started, now); pure. None, or why it must stop: "limit" (the
    filesystem's use grew by more than `limit` bytes since the start), "space" (its free space
    is below free_floor), "inodes" (its free inodes are below the inode floor)."""
    if now.used - start.used > limit:
        return "limit"
    if now.avail < free_floor(now.size):
        return "space"
    if now.inodes and now.inodes_avail < now.inodes // INODE_FLOOR_SHARE:
        return "inodes"
    return None


def human_size(n):
    """A size for a message: "3.2 GiB", "512 KiB"."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return ("%.1f %s" % (n / (1 << shift), unit)).replace(".0 ", " ")
    return "%d bytes" % n


class DiskLimitError(BuildError):
    """The builder stopped the pip jail, or did not start it, for what it wrote or would write
    to the host's disk (disk_verdict). Never a warning: what pip wrote may be cut short."""

    # What the builder did, by when it looked: before the jail, while it ran, after it ended.
    DID = {"before": "so pip did not start", "running": "and the builder stopped it",
           "after": "and the builder keeps nothing of what it made"}

    def __init__(self, verdict, now, limit, what, where, when="running", rebuild=False):
        import rootfs_relay     # format_size; here: its socket modules take 10 ms to import
        size = rootfs_relay.format_size
        stopped = self.DID[when]
        if verdict == "limit":
            raise_it = "--install-limit %s" % size(2 * limit)
            why = ("the space used on the disk that holds %s grew by more than --install-limit "
                   "%s while pip ran in its jail (what pip downloads, unpacks and builds there, "
                   "and any other program's writes), %s" % (where, size(limit), stopped))
            fix = ("if the packages need that much, raise it: %s" % raise_it if not rebuild
                   else "a rebuild keeps its build's limit; if the packages need that much, "
                   "build it again with %s" % raise_it)
        elif verdict == "space":
            why = ("the disk that holds %s has %s free, less than the %s the builder keeps free "
                   "while pip runs (5%% of the disk, from 1 GiB to 4 GiB), %s"
                   % (where, human_size(now.avail), human_size(free_floor(now.size)), stopped))
            fix = "free space there, or build the rootfs on another disk"
        else:
            why = ("the disk that holds %s has %d inodes free, less than the %d (5%% of its "
                   "inodes) the builder keeps free while pip runs, %s"
                   % (where, now.inodes_avail, now.inodes // INODE_FLOOR_SHARE, stopped))
            fix = "remove files there, or build the rootfs on another disk"
        super().__init__(what, why, fix)


class DiskWatch:
    """The staging directory's filesystem while one pip jail runs (see INSTALL_LIMIT above):
    start() takes the first sample (and refuses to start the jail on a disk already below
    its floors), check() the next ones; `error` is the DiskLimitError once one said stop."""

    def __init__(self, stage, limit, what, where, rebuild=False):
        self.stage, self.limit, self.what, self.where = stage, limit, what, where
        self.rebuild, self.first, self.error = rebuild, None, None

    def start(self):
        self.first = self.error = None
        if self.check("before") is not None:
            raise self.error

    def check(self, when="running"):
        """Samples the filesystem; returns the error once the jail must stop, else None."""
        now = disk_sample(self.stage)
        if self.first is None:
            self.first = now
        verdict = disk_verdict(self.first, now, self.limit)
        if verdict is not None and self.error is None:
            self.error = DiskLimitError(verdict, now, self.limit, self.what, self.where, when,
                                        self.rebuild)
        return self.error


def pip_run(cmd, watch=None):
    """Runs the pip jail (pip_jail_command); returns the process, pip's log and pyjail's own
    messages in stdout (bounded: the jail's --output-limit). With `watch` (a DiskWatch), the
    jail runs only on a disk above its floors, and is stopped when it passes them or its
    limit; then watch.error says why."""
    env = {"PATH": os.environ.get("PATH", os.defpath), "LC_ALL": "C.UTF-8"}
    for k in ("HOME", "XDG_RUNTIME_DIR"):   # where pyjail keeps its notices, as the user's
        if k in os.environ:
            env[k] = os.environ[k]
    if watch is not None:
        watch.start()
    try:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, universal_newlines=True, env=env,
                                errors="replace", preexec_fn=functools.partial(
                                    die_with_parent, _prctl(), os.getpid()))
    except OSError as e:
        raise BuildError("pip", "cannot run %s: %s" % (cmd[0], e.strerror),
                         "run the build as pyjail rootfs build")
    with proc:
        try:
            out = wait_watched(proc, watch)
        except BaseException:
            # As subprocess.run: a builder that is stopped (SIGTERM, Ctrl-C) takes its jail
            # along.
            proc.kill()
            raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out)


def wait_watched(proc, watch):
    """The output of the pip jail `proc`, once it ended. With `watch`, the disk is sampled
    every WATCH_INTERVAL seconds while it runs, and once more when it ended (a jail that
    wrote its fill between two samples and ended is refused too); when the watch says stop,
    pyjail gets SIGTERM (which ends the jail at once: --kill-grace 0 in PIP_JAIL_LIMITS), and
    SIGKILL STOP_GRACE seconds later if it has not ended (its jail dies with it)."""
    if watch is None:
        return proc.communicate()[0]
    kill_at = None
    while True:
        try:
            out = proc.communicate(timeout=WATCH_INTERVAL)[0]   # nothing of the log is lost
            break
        except subprocess.TimeoutExpired:
            pass
        if kill_at is None and watch.check() is not None:
            proc.terminate()
            kill_at = time.monotonic() + STOP_GRACE
        elif kill_at is not None and time.monotonic() >= kill_at:
            proc.kill()
            kill_at = float("inf")
    watch.check("after")
    return out


def _prctl():
    """libc's prctl, looked up here: the child calls it, and nothing but it, before its exec."""
    import ctypes
    return ctypes.CDLL(None).prctl


def die_with_parent(prctl, parent):
    """In the child, before its exec: SIGKILL when the builder dies. A builder killed with
    SIGKILL left the pip jail running for up to its wall time (an hour), its pyjail
    reparented; pyjail keeps this signal through its changes of ids, and its jail dies with
    it."""
    if prctl(1, signal.SIGKILL, 0, 0, 0) != 0:   # PR_SET_PDEATHSIG
        os._exit(125)
    if os.getppid() != parent:   # the builder is gone already
        os._exit(125)


def explain_jail_failure(proc):
    """(what, why, fix) when the pip jail ended without pip's own word: pyjail could not make
    it, or a limit stopped it."""
    lines = [l for l in proc.stdout.splitlines() if l.startswith("pyjail:")]
    why = lines[-1][len("pyjail:"):].strip() if lines else "exit status %d" % proc.returncode
    return ("pip in a jail", one_line(why, 300),
            "check that this host can run jails (pyjail doctor), and, as root, that every user "
            "can read the output's directory and the --find-links directories (the jail runs "
            "as a host id of its own)")


def explain_build_failure(log):
    """(what, why, fix) for a source distribution whose build failed (in the jail)."""
    what = re.findall(r"^(?:Building wheel for|Processing) (\S+)", log, re.M)
    what = re.sub(r"\.(tar\.gz|zip|tar\.bz2)$", "", os.path.basename(
        what[-1])) if what else "a source distribution"
    own = log.split("subprocess-exited-with-error")[0]
    errors = re.findall(r"^\s+([A-Za-z_.]*(?:Error|Exception): .*)$", own, re.M)
    return ("--allow-build: building %s" % what,
            "its build failed (in the jail): %s" % one_line(
                errors[-1] if errors else "see pip's log", 200),
            "use a version that has a wheel, or build the wheel yourself and pass its directory "
            "with --find-links DIR")


# pip's words where NO_EXEC refused it a build backend's interpreter.
REFUSED_BUILD_RE = re.compile(r"^\s*ERROR: Error \[Errno 1\] Operation not permitted: .* while executing "
                              r"command ", re.M)


def explain_refused_build(before):
    """(what, why, fix) for a pip that had to build a package where no package code may run;
    `before`: its log up to the refusal, whose last distribution taken up is the one."""
    added = re.findall(r"^\s*Added (\S+) from (\S+)", before, re.M)
    name, url = added[-1] if added else ("a package", "")
    archive = url.split("#", 1)[0].rstrip("/").rsplit("/", 1)[-1] or "its source"
    return ("requirement %s" % one_line(name, 100),
            "pip would build it from %s, a source distribution, and a package's build code "
            "runs only with --allow-build" % one_line(archive, 200),
            "add --allow-build to build it in the jail, or give a wheel of it (--find-links)")


def run_pip(cmd, python_desc, watch=None):
    """Runs the pip jail (pip_jail_command), watched by `watch` (a DiskWatch) if given. Raises
    BuildError when pip failed, DiskLimitError when the watch stopped it (whatever pip said)."""
    proc = pip_run(cmd, watch)
    if watch is not None and watch.error is not None:
        raise watch.error
    if proc.returncode == 0:
        return
    log = proc.stdout
    refused = REFUSED_BUILD_RE.search(log)
    if refused:
        raise BuildError(*explain_refused_build(log[:refused.start()]))
    if "subprocess-exited-with-error" in log or "Failed building wheel" in log:
        raise BuildError(*explain_build_failure(log))
    if not re.search(r"^ERROR: ", log, re.M) and re.search(r"^pyjail:", log, re.M):
        raise BuildError(*explain_jail_failure(proc))
    raise BuildError(*explain_pip_failure(log, python_desc))


def read_report(stage_fd, name="report.json"):
    """The bytes of pip's --report in the staging directory: a regular file, opened without
    following a symlink (the jail wrote it), at most REPORT_LIMIT bytes."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     dir_fd=stage_fd)
    except OSError as e:
        raise BuildError("pip", "no installation report (%s)" % e.strerror,
                         "use pip 22.2 or newer for the rootfs's interpreter")
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise BuildError("pip", "its installation report is not a regular file",
                             "run the build again")
        data = f.read(REPORT_LIMIT + 1)
    if len(data) > REPORT_LIMIT:
        raise BuildError("pip", "its installation report is larger than %d MiB"
                         % (REPORT_LIMIT >> 20), "install fewer packages at once")
    return data


def check_report(data, allow_build):
    """What pip's --report says it installed, checked: [{name, version, file, sha256, built}],
    `file` the archive's name (a wheel, or for a build what it was built from). The report was
    written in the jail, so it is hostile: sizes bounded, every field checked, nothing of it
    used as a host path. Without `allow_build`, anything that did not come from a wheel archive
    is refused: pip built it (in the jail)."""
    def bad(why):
        return BuildError("pip", "its installation report is not usable: %s" % why,
                          "run the build again; if it persists, report it")
    try:
        report = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise bad("not JSON")
    if not isinstance(report, dict) or not isinstance(report.get("install"), list):
        raise bad("no list of installs")
    if len(report["install"]) > MAX_INSTALLS:
        raise bad("more than %d installs" % MAX_INSTALLS)
    out, seen = [], set()
    for item in report["install"]:
        meta = item.get("metadata") if isinstance(item, dict) else None
        info = item.get("download_info") if isinstance(item, dict) else None
        if not isinstance(meta, dict) or not isinstance(info, dict):
            raise bad("an install without metadata or download_info")
        name, version, url = meta.get("name"), meta.get("version"), info.get("url")
        if not isinstance(name, str) or not NAME_RE.match(name):
            raise bad("a distribution name %r" % one_line(repr(name), 80))
        if not isinstance(version, str) or not VERSION_RE.match(version):
            raise bad("a version %r of %s" % (one_line(repr(version), 80), name))
        if not isinstance(url, str) or len(url) > 8192:
            raise bad("the URL of %s" % name)
        if canonical(name) in seen:
            raise bad("%s installed twice" % name)
        seen.add(canonical(name))
        archive = info.get("archive_info")
        path = urllib.parse.urlsplit(url).path
        fname = urllib.parse.unquote(path.rsplit("/", 1)[-1])
        digest = None
        if isinstance(archive, dict):
            hashes = archive.get("hashes")
            if isinstance(hashes, dict) and isinstance(hashes.get("sha256"), str):
                digest = hashes["sha256"]
            elif isinstance(archive.get("hash"), str) and archive["hash"].startswith("sha256="):
                digest = archive["hash"][len("sha256="):]
            if digest is not None and not SHA256_RE.match(digest):
                raise bad("the hash of %s" % name)
        wheel = (isinstance(archive, dict) and "dir_info" not in info and
                 "vcs_info" not in info and fname.endswith(".whl") and FILE_RE.match(fname))
        if wheel:
            out.append({"name": name, "version": version, "file": fname, "sha256": digest,
                        "built": False})
            continue
        if "dir_info" in info:
            source = "a local directory"
        elif "vcs_info" in info:
            source = "a version control URL"
        elif isinstance(archive, dict) and FILE_RE.match(fname):
            source = "%s, a source distribution" % fname
        else:
            source = "a source it does not name"
        if not allow_build:
            raise BuildError("requirement %s" % name,
                             "pip built it from %s (in the jail), and built packages are kept "
                             "only with --allow-build" % source,
                             "use a version that has a wheel, or pass --allow-build to build "
                             "it in the jail")
        out.append({"name": name, "version": version, "built": True,
                    "file": fname if isinstance(archive, dict) and FILE_RE.match(fname)
                    else None, "sha256": digest})
    return out


def unmark_requested(site, requested, only=None):
    """pip marks every distribution it was asked for with a REQUESTED file (listed in its
    RECORD). A rebuild asks for each locked distribution by name; this takes the mark off those
    not in `requested` (the dist-info directories that had it before), so the rebuilt tree is
    the tree built first."""
    for entry, _, _ in dist_infos(site):
        mark = os.path.join(site, entry, "REQUESTED")
        if only is not None and entry not in only:
            continue
        if entry in requested or not os.path.exists(mark):
            continue
        os.unlink(mark)
        record = os.path.join(site, entry, "RECORD")
        with open(record, "rb") as f:       # bytes: its line ends stay as pip wrote them
            rows = [r for r in f if r.split(b",")[0] != os.fsencode(entry + "/REQUESTED")]
        with open(record, "wb") as f:
            f.writelines(rows)


# ------------------------------------------------------------------------------ virtualenv


def read_venv(venv, target_version):
    """The site-packages directory of virtualenv `venv`, checked to be of the same Python
    (major.minor) as `target_version` ("3.11.2"). Raises BuildError."""
    cfg = os.path.join(venv, "pyvenv.cfg")
    fix_other = ("make the virtualenv with the rootfs's interpreter (PYTHON -m venv DIR), or "
                 "build the rootfs from the virtualenv's interpreter with --python")
    try:
        # Not through a symlink: with root's rights it could name any file of the host.
        fd = os.open(cfg, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, encoding="utf-8", errors="replace") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise OSError(errno.EINVAL, "not a regular file")
            text = f.read(65536)
    except OSError as e:
        raise BuildError("--from-venv %s" % venv, "not a virtualenv (%s: %s)" % (
            cfg, e.strerror), "pass the directory that holds pyvenv.cfg")
    keys = dict((k.strip().lower(), v.strip()) for k, _, v in
                (l.partition("=") for l in text.splitlines() if "=" in l))
    version = keys.get("version_info") or keys.get("version") or ""
    impl = keys.get("implementation", "cpython").lower()
    if impl != "cpython":
        raise BuildError("--from-venv %s" % venv, "it is a virtualenv of %s" % impl, fix_other)
    if version.split(".")[:2] != target_version.split(".")[:2]:
        raise BuildError("--from-venv %s" % venv,
                         "it was made by Python %s, the rootfs's interpreter is Python %s"
                         % (version or "of unknown version", target_version), fix_other)
    site = os.path.join(venv, "lib", "python%s.%s" % tuple(target_version.split(".")[:2]),
                        "site-packages")
    if not os.path.isdir(site):
        raise BuildError("--from-venv %s" % venv, "it has no %s" % site,
                         "pass the virtualenv's top directory")
    return site


# --from-venv reads another tree of the host into one every jail reads: the builder follows no
# symlink out of the virtualenv's site-packages (a link to /etc/shadow would be copied with the
# builder's rights, root's for a system rootfs), and root takes a virtualenv only if no other
# user can change it (its owner could plant such a link, or change it after the build so that
# root's next `rebuild --if-stale` takes what they put there).


def others_can_change(st, euid):
    """Whether a user other than `euid` (and root) can change this directory entry."""
    return st.st_uid not in (0, euid) or bool(st.st_mode & 0o022) and \
        not stat.S_ISLNK(st.st_mode)


def root_walk_refusal(st, path, sticky_ok=True):
    """Why root must not pass directory `path` (`st`, its stat) on the way to what it copies
    into a rootfs or builds in, or None. Another user must not be able to change it: owned by
    root, writable by no one else, or a sticky directory of root's (/tmp; `sticky_ok`). Attack:
    whoever can rename entries there (any writer of a plain directory, the owner of a sticky
    one, sticky bit or not) swaps what root reads for a tree or a link of their own between
    root's checks and its copy, or before root's next `rebuild --if-stale`. The one rule of
    --from-venv, --ca-certificates and --out."""
    if not others_can_change(st, 0):
        return None
    if sticky_ok and st.st_uid == 0 and st.st_mode & stat.S_ISVTX:
        return None
    if st.st_mode & stat.S_ISVTX and st.st_uid != 0:
        return ("%s belongs to uid %d with mode %o: its owner can rename what is in it, sticky "
                "or not, and root builds this rootfs" % (path, st.st_uid, stat.S_IMODE(st.st_mode)))
    return ("%s belongs to uid %d with mode %o: others can change it, and root builds this "
            "rootfs" % (path, st.st_uid, stat.S_IMODE(st.st_mode)))


def open_venv_site(site, euid):
    """A descriptor of the virtualenv's site-packages, opened from / one component at a time
    without following a symlink below the virtualenv. For root, the virtualenv, its
    site-packages and every directory above it must be root's and writable by no one else
    (above the virtualenv, a sticky directory of root's such as /tmp may be shared:
    root_walk_refusal, as for --ca-certificates). Raises BuildError."""
    venv = os.path.realpath(os.path.join(site, os.pardir, os.pardir, os.pardir))
    below = os.path.relpath(site, os.path.join(site, os.pardir, os.pardir, os.pardir))
    fix = ("make the virtualenv as root, where only root can write, or build the rootfs as "
           "the virtualenv's owner (pyjail rootfs build --name NAME)")
    parts = [p for p in venv.split("/") if p] + below.split("/")
    fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    path = "/"
    try:
        for i, part in enumerate(parts):
            # Sticky (root's) only above the virtualenv: in it, others could add a lib/.
            why = euid == 0 and root_walk_refusal(os.fstat(fd), path, i < len(parts) - 3)
            if why:
                raise BuildError("--from-venv %s" % venv, why, fix)
            path = os.path.join(path, part)
            try:
                nfd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                              dir_fd=fd)
            except OSError as e:
                raise BuildError("--from-venv %s" % venv, "cannot open %s (%s)" % (
                    path, e.strerror if e.errno != errno.ELOOP else "a symlink"),
                                 "pass a virtualenv whose lib directory is a directory")
            os.close(fd)
            fd = nfd
        why = euid == 0 and root_walk_refusal(os.fstat(fd), path, False)
        if why:
            raise BuildError("--from-venv %s" % venv, why, fix)
        return fd
    except BaseException:
        os.close(fd)
        raise


class VenvCheck:
    """What copying a virtualenv's site-packages checks for each entry (copy_untrusted_tree)."""

    def __init__(self, venv, euid, site_fd):
        self.venv, self.euid, self.site_fd = venv, euid, site_fd

    def entry(self, rel, st):
        if self.euid == 0 and others_can_change(st, self.euid):
            raise BuildError("--from-venv %s" % self.venv, "%s in its site-packages can be "
                             "changed by uid %d or by others, and root builds this rootfs"
                             % (rel, st.st_uid), "make the virtualenv as root, where only "
                             "root can write, or build the rootfs as the virtualenv's owner")

    def link(self, rel, target):
        """A symlink is kept only if it stays inside site-packages, through real directories,
        to a file or directory (not another link). Any other refuses the build."""
        resolved = os.path.normpath(os.path.join(os.path.dirname(rel), target))
        ok = not os.path.isabs(target) and resolved != ".." and \
            not resolved.startswith("../") and resolved != "."
        if ok:
            dfd = os.dup(self.site_fd)
            try:
                parts = resolved.split("/")
                for i, part in enumerate(parts):
                    st = os.stat(part, dir_fd=dfd, follow_symlinks=False)
                    if i == len(parts) - 1:
                        ok = stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)
                    elif not stat.S_ISDIR(st.st_mode):
                        ok = False
                        break
                    else:
                        nfd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW |
                                      os.O_CLOEXEC, dir_fd=dfd)
                        os.close(dfd)
                        dfd = nfd
            except OSError:
                ok = False
            finally:
                os.close(dfd)
        if not ok:
            raise BuildError("--from-venv %s" % self.venv, "%s in its site-packages is a "
                             "symlink to %s, outside the site-packages (the builder follows "
                             "none)" % (rel, one_line(target, 120)),
                             "copy what it points to into the virtualenv, or leave that "
                             "package out")
        return True


def venv_skip(rel, is_dir):
    """What of a virtualenv's site-packages stays out of the rootfs."""
    parts = rel.split("/")
    name = parts[-1]
    if name == "__pycache__":
        return True
    if len(parts) == 1:
        if name.endswith(".pth"):
            return True  # code run at every start, or host paths (editable installs)
        base = re.split(r"-[0-9]", name)[0] if name.endswith(".dist-info") else name
        if base in VENV_TOOLS or name in ("distutils-precedence.pth",):
            return True
    return name.endswith((".pyc", ".pyo"))


# ------------------------------------------------------------------------------------ lock


def dist_infos(site):
    """(directory name, metadata name, version) of every *.dist-info in `site`, sorted."""
    out = []
    if not os.path.isdir(site):
        return out
    for entry in sorted(os.listdir(site)):
        if not entry.endswith(".dist-info"):
            continue
        name = version = None
        try:
            with open(os.path.join(site, entry, "METADATA"), encoding="utf-8",
                      errors="replace") as f:
                for line in f:
                    if not line.strip():
                        break
                    k, _, v = line.partition(":")
                    if k == "Name":
                        name = v.strip()
                    elif k == "Version":
                        version = v.strip()
        except OSError:
            pass
        if name is None:
            name, _, version = entry[:-len(".dist-info")].partition("-")
        out.append((entry, name, version))
    return out


def record_digest(dist_dir):
    """sha256 of the distribution's RECORD (the list of its files with their hashes), and
    its number of files."""
    try:
        # Not through a symlink: a virtualenv's RECORD is read again, with root's rights, by
        # root's `rebuild --if-stale` and `info`.
        fd = os.open(os.path.join(dist_dir, "RECORD"),
                     os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                return None, 0
            data = f.read(64 << 20)
    except OSError:
        return None, 0
    return hashlib.sha256(data).hexdigest(), sum(1 for l in data.splitlines() if l.strip())


def lock_entries(site, source, installed, only=None):
    """Lock entries for the distributions in `site` (a directory of the tree), or those of its
    entries in `only`. `installed`: check_report's list for pip's (every distribution must be
    in it), or None. A built one records what it was built from, and where: in the jail that
    ran pip."""
    entries = []
    by_name = {canonical(i["name"]): i for i in installed or []}
    for entry, name, version in dist_infos(site):
        if only is not None and entry not in only:
            continue
        digest, files = record_digest(os.path.join(site, entry))
        item = by_name.pop(canonical(name), None)
        if installed is not None and item is None:
            raise BuildError("pip", "%s was installed, but pip's report does not list it" % entry,
                             "run the build again; if it persists, report it")
        e = {
            "name": name,
            "version": version,
            "source": source,
            "wheel": {"file": item["file"], "sha256": item["sha256"]}
            if item and not item["built"] else None,
            "record_sha256": digest,
            "files": files,
        }
        if item and item["built"]:
            e["built"] = True
            e["built_from"] = {"file": item["file"], "sha256": item["sha256"], "in": "jail"}
        entries.append(e)
    if by_name:
        raise BuildError("pip", "its report lists %s, which it did not install"
                         % ", ".join(sorted(by_name)),
                         "run the build again; if it persists, report it")
    return entries
