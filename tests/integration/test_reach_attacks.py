"""What a jail can reach or learn beyond its own files, and the resources no limit counted:
/proc's view of the host (keys, kernel command line), binds that expose a home or its
credentials, tmpfs inodes and the scratch space's total, System V IPC and memfd, inotify
instances, inherited real-time/nice/memlock limits, socketpair families, and setuid bits.
Each test tries the attack; each runs as root and as an unprivileged user."""

from __future__ import annotations

import json
import os
import resource
import shutil
import stat
import subprocess
import sys
import uuid

import pytest

from pyjail_testing import skip_or_fail

# add_key/keyctl through ctypes (Python has no binding), run on the host as a given user.
KEYS = r'''
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
KEY_SPEC_USER_KEYRING = -4
if sys.argv[1] == "add":
    payload = b"pyjail-test-secret"
    serial = libc.syscall(248, b"user", sys.argv[2].encode(), payload, len(payload),
                          KEY_SPEC_USER_KEYRING)
    if serial < 0:
        raise SystemExit(f"add_key: errno {ctypes.get_errno()}")
    print(serial)
else:
    libc.syscall(250, 21, int(sys.argv[2]))  # keyctl(KEYCTL_INVALIDATE, serial)
'''


def host_user_prefix(uid: int) -> list[str]:
    """What runs a host command as `uid` (the tests run as root or as that user already)."""
    if os.geteuid() == uid:
        return []
    return [shutil.which("setpriv") or "setpriv", f"--reuid={uid}", f"--regid={uid}",
            "--clear-groups", "--"]


@pytest.fixture
def invoker_key(as_user):
    """A key in the invoking user's user keyring, named uniquely; removed afterwards."""
    name = "pyjail-it-key-" + uuid.uuid4().hex[:10]
    prefix = host_user_prefix(as_user.invoker_uid)
    r = subprocess.run([*prefix, sys.executable, "-c", KEYS, "add", name],
                       capture_output=True, text=True, cwd="/")
    assert r.returncode == 0, r.stderr
    serial = r.stdout.strip()
    yield name, int(serial)
    subprocess.run([*prefix, sys.executable, "-c", KEYS, "remove", serial], cwd="/")


def test_proc_hides_keys_and_the_kernel_command_line(run_py, as_user, invoker_key):
    name, serial = invoker_key
    r = run_py("""\
        out = {}
        for f in ["keys", "key-users", "cmdline", "kallsyms", "timer_list", "sched_debug"]:
            try:
                out[f] = open("/proc/" + f).read()
            except OSError as e:
                out[f] = _errno.errorcode[e.errno]
        out["acpi"] = os.listdir("/proc/acpi") if os.path.isdir("/proc/acpi") else []
        out["sys write"] = attempt(lambda: open("/proc/sys/kernel/hostname", "w").write("x"))
        # What Python and its libraries read is still there.
        out["kept"] = {f: len(open("/proc/" + f).read()) > 0
                       for f in ["cpuinfo", "meminfo", "stat", "self/status", "self/maps"]}
        emit(out)
        """, user=as_user)
    got = r.result
    for f in ["keys", "key-users", "cmdline", "kallsyms", "timer_list", "sched_debug"]:
        assert got[f] in ("", "ENOENT"), (f, got[f])  # masked (ENOENT: this kernel has none)
    assert name not in json.dumps(got) and f"{serial:08x}" not in json.dumps(got)
    assert got["acpi"] == []
    assert got["sys write"] == "EROFS"
    assert all(got["kept"].values()), got["kept"]


# The masked /proc directories are read-only binds of one empty directory of the jail's
# writable scratch tmpfs (mountplan.cpp): a file written through one mask would show in every
# other, and a chmod would reach them all. Each bind must refuse writes itself.
def test_the_masked_proc_directories_stay_empty_and_read_only(run_py, as_user):
    r = run_py("""\
        masked = [d for d in ["acpi", "asound", "scsi", "driver"] if os.path.isdir("/proc/" + d)]
        out = {"masked": masked}
        for d in masked:
            p = "/proc/" + d
            out[d] = {"create": attempt(lambda: open(p + "/planted", "w").close()),
                      "mkdir": attempt(lambda: os.mkdir(p + "/planted")),
                      "chmod": attempt(lambda: os.chmod(p, 0o777)),
                      "utime": attempt(lambda: os.utime(p))}
        out["after"] = {d: os.listdir("/proc/" + d) for d in masked}
        emit(out)
        """, user=as_user)
    got = r.result
    if not got["masked"]:
        skip_or_fail("this kernel's /proc has none of the masked directories")
    for d in got["masked"]:
        assert set(got[d].values()) == {"EROFS"}, (d, got[d])
    assert all(v == [] for v in got["after"].values()), got["after"]


def _home_with_credentials(world_tmp):
    home = world_tmp.dir(0o755)
    (home / ".ssh").mkdir(mode=0o755)
    (home / ".ssh" / "id_ed25519").write_text("PRIVATE KEY\n")
    os.chmod(home / ".ssh" / "id_ed25519", 0o644)
    return home


@pytest.mark.parametrize("profile", ["standard", "batch"])
def test_a_profile_never_binds_the_home_from_which_it_runs(run_jail, as_user, world_tmp, helpers,
                                                          profile):
    # As cron does: the job starts in $HOME.
    home = _home_with_credentials(world_tmp)
    r = run_jail(["--profile", profile, "--", "python", "-c", "import os; print(os.listdir('.'))"],
                 user=as_user, cwd=home, env={"HOME": str(home)})
    err = helpers.without_notices(r.stderr)
    assert r.returncode == 125, helpers.describe(r)
    assert err.count("\n") == 1 and "your home directory" in err, err
    assert "run from a project directory" in err and "--allow-sensitive-bind" in err, err
    assert ".ssh" not in r.stdout
    # Even the profile key does not make the profile's own bind explicit.
    prof = world_tmp.file("p.toml", f'workdir = "{home}"\nallow-sensitive-bind = true\n')
    r = run_jail(["--profile", prof, "--", "python", "-c", "pass"], user=as_user,
                 env={"HOME": str(home)})
    assert r.returncode == 125 and "your home directory" in r.stderr, helpers.describe(r)


def test_credentials_root_and_ancestors_need_the_explicit_opt_in(run_jail, as_user, world_tmp,
                                                                helpers):
    home = _home_with_credentials(world_tmp)
    # The fallback notice's daily stamp goes elsewhere: /work must show the home as it is.
    env = {"HOME": str(home), "XDG_STATE_HOME": str(world_tmp.dir(0o777))}
    other = world_tmp.dir(0o755)
    (other / ".aws").mkdir()
    cases = {
        "home": ["--workdir", str(home)],
        "credentials": ["--ro-bind", f"{other}:/mnt/x"],
        "inside .ssh": ["--ro-bind", f"{home}/.ssh:/mnt/x"],
        "root": ["--ro-bind", "/:/mnt/host"],
        "ancestor": ["--ro-bind", f"{home.parent}:/mnt/x"],
    }
    for what, opts in cases.items():
        r = run_jail([*opts, "--", "python", "-c", "pass"], user=as_user, env=env)
        assert r.returncode == 125, (what, helpers.describe(r))
        assert "--allow-sensitive-bind" in r.stderr, (what, r.stderr)
    # Named on the command line and opted in: the user means it.
    r = run_jail(["--workdir", str(home), "--allow-sensitive-bind", "--", "python", "-c",
                  "import os; print(sorted(os.listdir('/work')))"],
                 user=as_user, env=env)
    assert r.returncode == 0, helpers.describe(r)
    assert r.stdout.strip() == "['.ssh']"


def test_tmpfs_inodes_are_capped(run_py, as_user):
    r = run_py("""\
        import time
        n, err = 0, None
        start = time.monotonic()
        try:
            while n < 300_000:
                open(f"/tmp/f{n}", "w").close()
                n += 1
        except OSError as e:
            err = _errno.errorcode[e.errno]
        emit({"files": n, "error": err})
        """, user=as_user, opts=["--tmpfs-size", "64M"], timeout=120)
    assert r.result["error"] == "ENOSPC", r.result
    assert r.result["files"] <= 8192, r.result


def test_tmpfs_size_is_the_jails_total(run_py, as_user):
    r = run_py("""\
        chunk = b"x" * (1 << 20)
        def fill(path):
            n = 0
            try:
                with open(path, "wb") as f:
                    while n < 64:
                        f.write(chunk)
                        f.flush()
                        n += 1
            except OSError as e:
                return n, _errno.errorcode[e.errno]
            return n, "ok"
        emit({d: fill(d + "/big") for d in ["/tmp", "/dev/shm", "/work"]})
        """, user=as_user, opts=["--tmpfs-size", "8M"])
    got = r.result
    assert got["/tmp"][1] == "ENOSPC" and got["/tmp"][0] <= 8, got
    # /tmp took the space: the other two have none left of their own.
    assert got["/dev/shm"] == [0, "ENOSPC"] and got["/work"] == [0, "ENOSPC"], got


def test_system_v_ipc_and_memfd_are_refused(run_py, as_user):
    r = run_py("""\
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        def call(fn, *args):
            ctypes.set_errno(0)
            rc = fn(*args)
            return "ok" if rc >= 0 else _errno.errorcode[ctypes.get_errno()]
        emit({"shmget 1G": call(libc.shmget, 0, ctypes.c_size_t(1 << 30), 0o1600),
              "msgget": call(libc.msgget, 0, 0o1600),
              "semget": call(libc.semget, 0, 1, 0o1600),
              "memfd_create": attempt(os.memfd_create, "x")})
        """, user=as_user, opts=["--memory", "512M"])
    assert r.result == {"shmget 1G": "EPERM", "msgget": "EPERM", "semget": "EPERM",
                        "memfd_create": "EPERM"}, r.result


HOLD_INOTIFY = """\
import ctypes, sys, errno
libc = ctypes.CDLL(None, use_errno=True)
fds = []
while len(fds) < 4096:
    fd = libc.inotify_init1(0)
    if fd < 0:
        break
    fds.append(fd)
print(len(fds), errno.errorcode.get(ctypes.get_errno()), flush=True)
sys.stdin.read()
"""

HOST_INOTIFY = """\
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
print("ok" if libc.inotify_init1(0) >= 0 else ctypes.get_errno())
"""


def test_inotify_instances_are_capped_and_the_host_user_keeps_its_own(popen_jail, as_user, helpers):
    p = popen_jail(["--", "python", "-c", HOLD_INOTIFY], user=as_user, stdin=subprocess.PIPE)
    line = helpers.read_line(p.stdout, 30).decode()
    count, err = line.split()
    assert int(count) <= 16 and err == "EMFILE", line
    # While the jail holds all it can, the same host user can still watch files.
    host = subprocess.run([*host_user_prefix(as_user.host_uid), sys.executable, "-c", HOST_INOTIFY],
                          capture_output=True, text=True, cwd="/")
    p.communicate(timeout=30)  # closes stdin: the jail ends
    assert host.stdout.strip() == "ok", host.stdout + host.stderr


def _raised_limits():
    # The invoker's own limits, raised where this host lets us (CAP_SYS_RESOURCE): none of
    # them may reach the jail. Where it does not, the host's own values (MEMLOCK is 8 MiB on
    # most) are what would be inherited.
    for name, value in [("RLIMIT_RTPRIO", 50), ("RLIMIT_NICE", 30), ("RLIMIT_MEMLOCK", 1 << 30)]:
        try:
            resource.setrlimit(getattr(resource, name), (value, value))
        except (ValueError, OSError):
            pass


def test_realtime_nice_and_memlock_limits_are_not_inherited(pyjail_command, as_user, helpers):
    program = ("import resource as r, os\n"
               "print([r.getrlimit(getattr(r, n)) for n in ('RLIMIT_RTPRIO', 'RLIMIT_NICE', "
               "'RLIMIT_MEMLOCK')])\n"
               "try:\n    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1)); print('fifo')\n"
               "except OSError as e:\n    print(e.errno)\n")
    r = subprocess.run([*pyjail_command(as_user), "--", "python", "-c", program], cwd="/",
                       capture_output=True, text=True, timeout=30, preexec_fn=_raised_limits)
    assert r.returncode == 0, helpers.describe(r)
    limits, fifo = r.stdout.splitlines()
    assert limits == "[(0, 0), (0, 0), (65536, 65536)]", limits
    assert fifo == "1"  # EPERM: no real-time scheduling


@pytest.mark.parametrize("net", ["none", "loopback"])
def test_socketpair_is_unix_only(run_py, as_user, net):
    r = run_py("""\
        import socket
        emit({"unix": attempt(socket.socketpair, socket.AF_UNIX),
              "inet": attempt(socket.socketpair, socket.AF_INET),
              "inet6": attempt(socket.socketpair, socket.AF_INET6),
              "tipc": attempt(socket.socketpair, 30)})
        """, user=as_user, opts=["--net", net])
    assert r.result == {"unix": "ok", "inet": "EPERM", "inet6": "EPERM", "tipc": "EPERM"}, r.result


def test_no_setuid_or_setgid_file_can_be_made(run_py, as_user, world_tmp):
    out = world_tmp.dir(0o777)  # as root, the jail writes as nobody
    r = run_py("""\
        import stat
        p = "/work/f"
        open(p, "w").close()
        os.chmod(p, 0o755)
        fd = os.open(p, os.O_RDONLY)
        res = {"chmod 4755": attempt(os.chmod, p, 0o4755),
               "chmod 2755": attempt(os.chmod, p, 0o2755),
               "fchmod 6755": attempt(os.fchmod, fd, 0o6755),
               "chmod 1777": (os.mkdir("/work/d"), attempt(os.chmod, "/work/d", 0o1777))[1],
               "open creat 4755": attempt(os.open, "/work/g", os.O_WRONLY | os.O_CREAT, 0o4755),
               "mknod 4755": attempt(os.mknod, "/work/h", stat.S_IFREG | 0o4755),
               "mode": oct(os.stat(p).st_mode & 0o7777)}
        emit(res)
        """, user=as_user, opts=["--workdir", str(out)])
    got = r.result
    assert got == {"chmod 4755": "EPERM", "chmod 2755": "EPERM", "fchmod 6755": "EPERM",
                   "chmod 1777": "ok", "open creat 4755": "EPERM", "mknod 4755": "EPERM",
                   "mode": "0o755"}, got
    for f in out.iterdir():
        assert not os.lstat(f).st_mode & (stat.S_ISUID | stat.S_ISGID), f


def test_explain_shows_the_new_limits(run_jail, as_user):
    r = run_jail(["--explain"], user=as_user)
    assert r.returncode == 0
    # (The columns are as wide as their widest entry: compared word by word.)
    lines = [l.split() for l in r.stdout.splitlines()]
    for words in (["rtprio", "0"], ["nice", "0"], ["memlock", "65536"],
                  ["inotify-instances", "16"], ["inotify-watches", "8192"]):
        assert any(l[1:3] == words for l in lines if l[:1] == ["#"]), words
