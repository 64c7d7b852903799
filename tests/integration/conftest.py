"""Shared fixtures of the integration tests.

These tests run the real pyjail binary on real Python programs and show each isolation
property by trying to break it. Every test that can runs twice, through the `as_user`
fixture: as root (pyjail's jail then runs as --host-user, nobody) and as an unprivileged
user (65534 via setpriv when the tests run as root, else the current user).

Environment:
  PYJAIL_BIN=PATH       the binary to test (default: build/pyjail of this checkout)
  PYJAIL_ROOTFS=DIR     pass --rootfs DIR to every run (default: the binary finds its own)
  PYJAIL_MUST_WORK=1    a test that would be skipped for lack of a host feature (root,
                        setpriv, user namespaces, a rootfs, a pty) fails instead
  PYJAIL_THROUGH_TEMPLATE=1
                        every run a template run can be (a Python program, binds only below
                        /work and /tmp) goes through `pyjail serve` (one server per user, for
                        the session, and one started with --allow-binds for runs with host
                        binds) with --via: the same tests, the same expectations, against runs
                        forked from a template. The summary says how many ran that way.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pwd
import resource
import select
import shutil
import signal
import stat
import subprocess
import tempfile
import textwrap
import time
import uuid
from pathlib import Path

import pytest
from pyjail_testing import MUST_WORK, skip_or_fail
from pyjail_testing.runs import UNPRIVILEGED_ID, describe, without_notices

# Every temporary file or directory these tests make under /tmp starts with this, so the
# checks for things left behind can tell them from anything pyjail might create.
TMP_PREFIX = "pyjail-it-"

RESULT_MARK = "@@RESULT@@"

# Prepended to the code of `run_py`: small helpers for the programs that probe the jail.
PRELUDE = '''\
import errno as _errno, json as _json, os, sys
def attempt(fn, *args, **kwargs):
    """Calls fn; returns "ok", or the errno name of the OSError it raised."""
    try:
        fn(*args, **kwargs)
        return "ok"
    except OSError as e:
        return _errno.errorcode.get(e.errno, str(e.errno))
def emit(obj):
    print("@@RESULT@@" + _json.dumps(obj), flush=True)
'''


# --------------------------------------------------------------------------------------------
# The binary


def _binary_path() -> Path:
    env = os.environ.get("PYJAIL_BIN")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "build" / "pyjail"


def _extra_args() -> list[str]:
    rootfs = os.environ.get("PYJAIL_ROOTFS")
    return ["--rootfs", rootfs] if rootfs else []


@pytest.fixture(scope="session")
def pyjail_bin() -> Path:
    path = _binary_path()
    if not path.is_file() or not os.access(path, os.X_OK):
        how = ("check PYJAIL_BIN" if os.environ.get("PYJAIL_BIN")
               else "build it (cmake + ninja), or set PYJAIL_BIN")
        skip_or_fail(f"no pyjail binary at {path} ({how})")
    return path


# --------------------------------------------------------------------------------------------
# Who runs pyjail


@dataclasses.dataclass(frozen=True)
class JailUser:
    name: str  # "root" or "unprivileged": the test id
    prefix: tuple[str, ...]  # what runs pyjail as this user
    invoker_uid: int  # the uid pyjail runs as
    host_uid: int  # the uid the jailed program has on the host
    host_gid: int

    @property
    def is_root(self) -> bool:
        return self.invoker_uid == 0


def _nobody_ids() -> tuple[int, int]:
    try:
        pw = pwd.getpwnam("nobody")
        return pw.pw_uid, pw.pw_gid
    except KeyError:
        return UNPRIVILEGED_ID, UNPRIVILEGED_ID


def _make_user(name: str) -> JailUser:
    if name == "root":
        if os.geteuid() != 0:
            skip_or_fail("the tests do not run as root, so pyjail cannot be run as root")
        uid, gid = _nobody_ids()  # --host-user defaults to nobody
        return JailUser("root", (), 0, uid, gid)
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            skip_or_fail("setpriv (util-linux) is missing: "
                         "cannot run pyjail as an unprivileged user")
        prefix = (setpriv, f"--reuid={UNPRIVILEGED_ID}", f"--regid={UNPRIVILEGED_ID}",
                  "--clear-groups", "--")
        return JailUser("unprivileged", prefix, UNPRIVILEGED_ID, UNPRIVILEGED_ID, UNPRIVILEGED_ID)
    return JailUser("unprivileged", (), os.geteuid(), os.geteuid(), os.getegid())


THROUGH_TEMPLATE = os.environ.get("PYJAIL_THROUGH_TEMPLATE") == "1"
# Options a run from a template cannot have (another user or rootfs), or that do not run a
# program.
_NOT_FOR_TEMPLATES = ("--rootfs", "--host-user", "--explain", "--via", "--version", "--help", "-h", "-V")
# Options and profiles that bind host paths: such runs go to a server started with --allow-binds.
_BINDING = ("--bind", "--ro-bind", "--workdir")
_BINDING_PROFILES = ("batch", "standard")
_template_servers: dict[str, tuple[subprocess.Popen, str]] = {}
TEMPLATE_RUNS = {"through a template": 0, "fresh (options a template run cannot have)": 0}


# Options of controlled egress: a run with --net allow goes through a server started with the
# same ones (its allowlist bounds its runs'), one per distinct set, the last few kept.
_EGRESS_OPTIONS = ("--net", "--allow-host", "--net-resolve", "--net-dns", "--net-bytes")
_EGRESS_SERVERS_KEPT = 3
_egress_servers: list[str] = []


def _egress_options(opts: list[str]) -> tuple[str, ...]:
    """The egress options among `opts` ("--opt value" or "--opt=value"), when --net is allow."""
    found: list[str] = []
    i = 0
    while i < len(opts):
        name = opts[i].split("=", 1)[0]
        if name in _EGRESS_OPTIONS:
            if "=" in opts[i]:
                found += [name, opts[i].split("=", 1)[1]]
            elif i + 1 < len(opts):
                found += [name, opts[i + 1]]
                i += 1
        i += 1
    pairs = list(zip(found[::2], found[1::2]))
    return tuple(found) if ("--net", "allow") in pairs else ()


def _template_socket(binary: Path, user: JailUser, binds: bool = False,
                     egress: tuple[str, ...] = ()) -> str | None:
    """The socket of this user's `pyjail serve` (with --allow-binds: `binds`; for runs with
    `egress` options, one started with them), started on first use."""
    key = user.name + (" binds" if binds else "") + "\0" + "\0".join(egress)
    if egress and key not in _template_servers:
        _egress_servers.append(key)
        if len(_egress_servers) > _EGRESS_SERVERS_KEPT:
            p, sock = _template_servers.pop(_egress_servers.pop(0))
            p.send_signal(signal.SIGTERM)
            p.wait(15)
            shutil.rmtree(os.path.dirname(sock), ignore_errors=True)
    if key not in _template_servers:
        d = tempfile.mkdtemp(prefix=TMP_PREFIX, dir="/tmp")
        os.chmod(d, 0o777)
        sock = os.path.join(d, "template.sock")
        # A server holds its runs to its own settings: this one's are as large as a run's
        # may be (a run refused for its network or filter runs fresh: see _run).
        nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        # (Memory, pids and CPUs stay limited, so that the server looks for the same cgroup
        # controllers as a run does.)
        loose = ["--wall-time", "0", "--cpu-time", "0", "--memory", "1024G", "--pids", "1000000", "--cpus", "4096",
                 "--fsize=", "--output-limit=", "--tmpfs-size", "16G",
                 "--nofile", str(nofile if nofile != resource.RLIM_INFINITY else 1 << 20)]
        p = subprocess.Popen([*user.prefix, str(binary), *_extra_args(), "serve", "--quiet",
                              "--socket", sock, "--preload", "json", *loose,
                              *(["--allow-binds"] if binds else []), *egress],
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, cwd="/")
        line = p.stdout.readline().decode()
        if egress and not line.startswith("pyjail serve: ready"):
            # Egress options pyjail refuses: the run (fresh) shows the same error.
            p.wait(15)
            shutil.rmtree(d, ignore_errors=True)
            _egress_servers.remove(key)
            return None
        assert line.startswith("pyjail serve: ready"), f"pyjail serve did not start: {line!r}"
        _template_servers[key] = (p, sock)
    return _template_servers[key][1]


def _through_template(binary: Path, args: list[str], user: JailUser) -> list[str]:
    """args with --via added, when the run can be a template's."""
    if "--" not in args:
        return args
    split = args.index("--")
    opts, command = args[:split], args[split + 1:]
    if not command or command[0] not in ("python", "python3") or any(
            o.split("=", 1)[0] in _NOT_FOR_TEMPLATES for o in opts):
        TEMPLATE_RUNS["fresh (options a template run cannot have)"] += 1
        return args
    names = [o.split("=", 1)[0] for o in opts]
    binds = any(n in _BINDING for n in names) or any(
        o == "--profile" and i + 1 < len(opts) and opts[i + 1] in _BINDING_PROFILES for i, o in enumerate(opts)) or any(
        o.startswith("--profile=") and o.split("=", 1)[1] in _BINDING_PROFILES for o in opts)
    sock = _template_socket(binary, user, binds, _egress_options(opts))
    if sock is None:
        TEMPLATE_RUNS["fresh (options a template run cannot have)"] += 1
        return args
    TEMPLATE_RUNS["through a template"] += 1
    return [*opts, "--via", sock, "--", *command]


@pytest.fixture(scope="session", autouse=True)
def _stop_template_servers():
    yield
    for p, sock in _template_servers.values():
        p.send_signal(signal.SIGTERM)
        p.wait(15)
        shutil.rmtree(os.path.dirname(sock), ignore_errors=True)


def pytest_terminal_summary(terminalreporter):
    if THROUGH_TEMPLATE:
        terminalreporter.write_line("pyjail runs: " + ", ".join(f"{n} {k}" for k, n in TEMPLATE_RUNS.items()))


def _run(binary: Path, args, *, user: JailUser, input=None, timeout=30, cwd=None, pass_fds=(),
         env=None) -> subprocess.CompletedProcess:
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    args = [str(a) for a in args]
    fresh = args
    if THROUGH_TEMPLATE:
        args = _through_template(binary, args, user)

    def run(args):
        cmd = [*user.prefix, str(binary), *_extra_args(), *args]
        return subprocess.run(cmd, input=input, timeout=timeout, cwd=str(cwd) if cwd else "/",
                              pass_fds=pass_fds, env=full_env, text=True, capture_output=True)

    r = run(args)
    if args is not fresh and r.returncode == 125 and ("this server's runs" in r.stderr or
                                                      "binds host paths only below" in r.stderr or
                                                      "a run from a template is a fork" in r.stderr):
        # Beyond what the shared server's runs may have (another --net, another filter), or
        # what no run from a template has (a bind outside /work and /tmp, an option python
        # acts on only when it starts).
        TEMPLATE_RUNS["through a template"] -= 1
        TEMPLATE_RUNS["fresh (options a template run cannot have)"] += 1
        r = run(fresh)
    return r


# Markers of a host that cannot run pyjail at all (as opposed to a broken pyjail).
_ENVIRONMENT_TROUBLE = ("cannot create the jail's namespaces", "pyjail: rootfs", "mount /proc",
                        "setpriv: failed to execute")


@pytest.fixture(scope="session")
def _preflight(pyjail_bin):
    """Whether a trivial program runs, per user: cached for the session."""
    cache: dict[str, JailUser] = {}

    def check(name: str) -> JailUser:
        if name in cache:
            return cache[name]
        user = _make_user(name)
        r = _run(pyjail_bin, ["--", "python", "-c", "print('pyjail-preflight-ok')"], user=user)
        if r.returncode != 0 or r.stdout != "pyjail-preflight-ok\n":
            what = (f"pyjail cannot run a trivial program as {name} "
                    f"(exit {r.returncode}): {r.stderr.strip()}")
            if any(t in r.stderr for t in _ENVIRONMENT_TROUBLE):
                skip_or_fail(what)
            pytest.fail(what, pytrace=False)
        cache[name] = user
        return user

    return check


@pytest.fixture(params=["root", "unprivileged"])
def as_user(request, _preflight) -> JailUser:
    """The user who runs pyjail: root, then an unprivileged user."""
    return _preflight(request.param)


@pytest.fixture
def root_user(_preflight) -> JailUser:
    """For the few tests that are about pyjail run by root only."""
    return _preflight("root")


@pytest.fixture
def current_user(_preflight) -> JailUser:
    """Whoever runs the tests (for tests whose point does not depend on the user)."""
    return _preflight("root" if os.geteuid() == 0 else "unprivileged")


@pytest.fixture(scope="session", autouse=True)
def _remove_stamp_directories_made():
    """Without a usable state directory (the unprivileged user here has root's HOME) pyjail
    keeps its notices' stamps in $TMPDIR/pyjail-state-UID or /tmp/pyjail-state-UID, the
    user's own, which stays: the session removes those it made (one that was there before
    may be a real user's)."""
    tmpdir = os.environ.get("TMPDIR", "")
    base = Path(tmpdir if tmpdir.startswith("/") else "/tmp")
    uids = {0, UNPRIVILEGED_ID} if os.geteuid() == 0 else {os.geteuid()}
    dirs = {uid: base / f"pyjail-state-{uid}" for uid in uids}
    before = {uid for uid, d in dirs.items() if os.path.lexists(d)}
    yield
    for uid, d in dirs.items():
        # Only a directory of that user's: never through a link someone put at the name.
        if uid not in before and not d.is_symlink() and d.is_dir() and d.stat().st_uid == uid:
            shutil.rmtree(d, ignore_errors=True)


# --------------------------------------------------------------------------------------------
# Running pyjail


@pytest.fixture
def run_jail(pyjail_bin):
    """run_jail(args, *, user, input=None, timeout=30, cwd=None, pass_fds=(), env=None)

    Runs `pyjail ARGS...` as `user` (text mode, output captured) and returns the
    CompletedProcess. `cwd` defaults to /; `env` holds variables added to the caller's
    environment.
    """

    def run_jail(args, *, user, input=None, timeout=30, cwd=None, pass_fds=(), env=None):
        return _run(pyjail_bin, args, user=user, input=input, timeout=timeout, cwd=cwd,
                    pass_fds=pass_fds, env=env)

    return run_jail


@pytest.fixture
def run_py(run_jail):
    """run_py(code, *, user, setup="", opts=(), argv=(), check=True, **run_jail_kwargs)

    Runs `pyjail OPTS -- python -c PROGRAM ARGV`, where PROGRAM is PRELUDE, then `setup`
    (shared helper code, as is), then `code` (dedented). Returns the CompletedProcess with
    `.result`: what the program passed to emit(), or None. With check, the program must have
    exited 0 and emitted a result.
    """

    def run_py(code, *, user, setup="", opts=(), argv=(), check=True, **kwargs):
        program = PRELUDE + textwrap.dedent(setup) + textwrap.dedent(code)
        r = run_jail([*opts, "--", "python", "-c", program, *argv], user=user, **kwargs)
        r.result = None
        for line in r.stdout.splitlines():
            if line.startswith(RESULT_MARK):
                r.result = json.loads(line[len(RESULT_MARK):])
        if check:
            assert r.returncode == 0, describe(r)
            assert r.result is not None, f"the program emitted no result\n{describe(r)}"
        return r

    return run_py


@pytest.fixture
def pyjail_command(pyjail_bin):
    """pyjail_command(user) -> the argv that starts pyjail as `user`, for tests that start it in
    their own way (before pyjail's own arguments)."""

    def pyjail_command(user):
        return [*user.prefix, str(pyjail_bin), *_extra_args()]

    return pyjail_command


@pytest.fixture
def popen_jail(pyjail_command):
    """popen_jail(args, *, user, **popen_kwargs): pyjail started, not waited for (binary pipes).

    Whatever is still running at the end of the test is killed.
    """
    started: list[subprocess.Popen] = []

    def popen_jail(args, *, user, **kwargs):
        kwargs.setdefault("stdin", subprocess.DEVNULL)
        kwargs.setdefault("stdout", subprocess.PIPE)
        kwargs.setdefault("stderr", subprocess.PIPE)
        kwargs.setdefault("cwd", "/")
        p = subprocess.Popen([*pyjail_command(user), *map(str, args)], **kwargs)
        started.append(p)
        return p

    yield popen_jail
    for p in started:
        if p.poll() is None:
            p.kill()
        p.communicate()


def read_line(stream, timeout: float) -> bytes:
    """One line from a binary pipe, waiting at most `timeout` seconds (b"" on EOF/time-out)."""
    fd = stream.fileno()
    data = b""
    deadline = time.monotonic() + timeout
    while not data.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            break
        chunk = os.read(fd, 1)
        if not chunk:
            break
        data += chunk
    return data


# --------------------------------------------------------------------------------------------
# World-readable temporary files


class WorldTmp:
    """Directories and files under /tmp that any user can read (pyjail may run as nobody)."""

    def __init__(self):
        self._made: list[Path] = []

    def dir(self, mode: int = 0o755) -> Path:
        d = Path(tempfile.mkdtemp(prefix=TMP_PREFIX, dir="/tmp"))
        os.chmod(d, mode)
        self._made.append(d)
        return d

    def file(self, name: str, content: str | bytes = "", *, dir: Path | None = None,
             mode: int = 0o644) -> Path:
        path = (dir or self.dir()) / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
        os.chmod(path, mode)
        return path

    def script(self, code: str, name: str = "prog.py", *, dir: Path | None = None) -> Path:
        return self.file(name, textwrap.dedent(code), dir=dir)

    def cleanup(self) -> None:
        def make_writable_and_retry(func, path, _exc):
            parent = os.path.dirname(path)
            os.chmod(parent, os.stat(parent).st_mode | stat.S_IWUSR | stat.S_IXUSR)
            func(path)

        for d in self._made:
            shutil.rmtree(d, onerror=make_writable_and_retry)


@pytest.fixture
def world_tmp():
    tmp = WorldTmp()
    yield tmp
    tmp.cleanup()


# --------------------------------------------------------------------------------------------
# What the jail looks like, and what must not be left behind


@pytest.fixture(scope="session")
def jail_rootfs(pyjail_bin, _preflight) -> Path:
    """The rootfs pyjail runs in, as its --explain reports it."""
    user = _preflight("root" if os.geteuid() == 0 else "unprivileged")
    r = _run(pyjail_bin, ["--explain"], user=user)
    assert r.returncode == 0, describe(r)
    for line in r.stdout.splitlines():
        if line.startswith("rootfs = "):
            return Path(json.loads(line.split("=", 1)[1].split("#", 1)[0].strip()))
    pytest.fail(f"--explain does not name the rootfs:\n{r.stdout}")


def processes_with(text: str) -> dict[int, str]:
    """Host processes whose command line contains `text` (what `pgrep -f` matches)."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            found[int(entry)] = cmdline
    return found


def kill_processes_with(text: str) -> dict[int, str]:
    """Kills what processes_with(text) finds; returns what it killed."""
    found = processes_with(text)
    for pid in found:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return found


@pytest.fixture
def token():
    """A unique word to put in a jailed process's command line; such processes are killed at
    the end of the test, whatever happened."""
    word = "pjtoken" + uuid.uuid4().hex[:12]
    yield word
    kill_processes_with(word)


def wait_until_gone(text: str, timeout: float = 3.0) -> dict[int, str]:
    """Waits for the host processes with `text` in their command line to end; returns those
    still there after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        left = processes_with(text)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.02)


def _tmp_entries(owners: set[int]) -> set[str]:
    """/tmp's entries owned by `owners`, less the tests' own."""
    found = set()
    for name in os.listdir("/tmp"):
        if name.startswith(TMP_PREFIX):
            continue
        try:
            if os.lstat(os.path.join("/tmp", name)).st_uid in owners:
                found.add(name)
        except FileNotFoundError:
            pass
    return found


@pytest.fixture
def no_leftovers(request, pyjail_bin):
    """Asserts that the test left no new /tmp entry (other than the tests' own) and no pyjail
    process behind."""
    user = (request.getfixturevalue("as_user") if "as_user" in request.fixturenames
            else request.getfixturevalue("current_user"))
    # Only pyjail (the invoking user) or the jail (its host user) could have made an entry.
    owners = {user.invoker_uid, user.host_uid}
    tmp_before = _tmp_entries(owners)
    procs_before = set(processes_with(str(pyjail_bin)))
    yield
    new_tmp = _tmp_entries(owners) - tmp_before
    # Something else on the machine may be using /tmp meanwhile: what is left behind stays,
    # what vanishes again within a few seconds was another program's temporary file.
    deadline = time.monotonic() + 5
    while new_tmp and time.monotonic() < deadline:
        time.sleep(0.1)
        new_tmp &= _tmp_entries(owners)
    # The template servers the harness itself starts (PYJAIL_THROUGH_TEMPLATE) live on.
    harness = [sock for _, sock in _template_servers.values()]
    new_procs = {pid: cmd for pid, cmd in processes_with(str(pyjail_bin)).items()
                 if pid not in procs_before and not any(s in cmd for s in harness)}
    assert not new_tmp, f"new entries in /tmp: {sorted(new_tmp)}"
    assert not new_procs, f"pyjail processes left running: {new_procs}"


@pytest.fixture
def serve(pyjail_command, world_tmp):
    """serve(user, *options, ready=True, quiet=True) -> (socket path, Popen) of a `pyjail serve`
    started as `user` (and, with ready, waited for until it takes runs; with quiet, --quiet);
    stopped (SIGTERM) at the end of the test, when its socket must be gone."""
    started = []

    def serve(user, *options, ready=True, quiet=True):
        d = world_tmp.dir(0o777)
        sock = str(d / "t.sock")
        p = subprocess.Popen([*pyjail_command(user), "serve", *(["--quiet"] if quiet else []), "--socket", sock,
                              *options],
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             cwd="/")
        started.append((p, sock))
        if ready:
            line = p.stdout.readline().decode()
            assert line.startswith("pyjail serve: ready at " + sock), (
                line + p.stderr.read().decode() if p.poll() is not None else line)
        return sock, p

    yield serve
    for p, sock in started:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            p.wait(15)
        p.stdout.close()
        p.stderr.close()
        assert not os.path.exists(sock), "the server left its socket behind"


@pytest.fixture(scope="session")
def host_namespaces() -> dict[str, str]:
    return {n: os.readlink(f"/proc/self/ns/{n}")
            for n in ("user", "mnt", "pid", "net", "ipc", "uts", "cgroup")}


@pytest.fixture
def helpers():
    """This conftest's helper functions, for the test modules (importing a conftest by name is
    unreliable when another test directory has one too)."""
    return _Helpers


class _Helpers:
    describe = staticmethod(describe)
    without_notices = staticmethod(without_notices)
    read_line = staticmethod(read_line)
    processes_with = staticmethod(processes_with)
    wait_until_gone = staticmethod(wait_until_gone)
    skip_or_fail = staticmethod(skip_or_fail)
    must_work = MUST_WORK
