"""The seccomp filter: each rule shown by a program that tries to get past it, from Python
through ctypes (raw syscalls, not just what the standard library offers), through the x32 and
int 0x80 entry points, and the report of what was refused."""

import json
import signal
import subprocess

import pytest

from pyjail_testing.runs import without_notices

# Raw syscalls from inside the jail, with errno.
SYSCALL = '''
import ctypes, ctypes.util
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def sc(nr, *args):
    """errno name of syscall(nr, *args), or "ok"."""
    ctypes.set_errno(0)
    rc = libc.syscall(ctypes.c_long(nr), *[ctypes.c_ulong(a & 0xffffffffffffffff) for a in args])
    return "ok" if rc >= 0 else _errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))
'''

# x86-64 numbers, with harmless arguments (bad pointers, -1 fds, zero sizes).
DENIED = {
    "ptrace": (101, 0, 0, 0, 0),                 # PTRACE_TRACEME
    "process_vm_readv": (310, 1, 0, 0, 0, 0, 0),
    "process_vm_writev": (311, 1, 0, 0, 0, 0, 0),
    "bpf": (321, 0, 0, 0),
    "perf_event_open": (298, 0, 0, -1, -1, 0),
    "userfaultfd": (323, 0),
    "io_uring_setup": (425, 1, 0),
    "io_uring_enter": (426, -1, 0, 0, 0, 0, 0),
    "keyctl": (250, 0, (1 << 64) - 3, 0),         # KEYCTL_GET_KEYRING_ID session
    "add_key": (248, 0, 0, 0, 0, 0),
    "request_key": (249, 0, 0, 0, 0),
    "mount": (165, 0, 0, 0, 0, 0),
    "umount2": (166, 0, 0),
    "pivot_root": (155, 0, 0),
    "chroot": (161, 0),
    "open_by_handle_at": (304, -1, 0, 0),
    "init_module": (175, 0, 0, 0),
    "finit_module": (313, -1, 0, 0),
    "delete_module": (176, 0, 0),
    "kexec_load": (246, 0, 0, 0, 0),
    "reboot": (169, 0, 0, 0, 0),
    "swapon": (167, 0, 0),
    "acct": (163, 0),
    "quotactl": (179, 0, 0, 0, 0),
    "settimeofday": (164, 0, 0),
    "clock_settime": (227, 0, 0),
    "unshare": (272, 0x10000000),                 # CLONE_NEWUSER
    "setns": (308, -1, 0),
    "modify_ldt": (154, 0, 0, 0),
    "kcmp": (312, 1, 1, 0, 0, 0),
}

# Allowed syscalls given bad arguments: the kernel answers (EFAULT, EBADF, ...), not the filter.
REACHES_KERNEL = {
    "read": (0, -1, 0, 0),
    "openat": (257, -100, 0, 0, 0),
    "fstat": (5, -1, 0),
    "mmap": (9, 0, 0, 0, 0, -1, 0),
    "futex": (202, 0, 0, 0, 0, 0, 0),
    "wait4": (61, -1, 0, 0, 0),
    "ioctl": (16, -1, 0x5413, 0),                 # TIOCGWINSZ on a bad fd
    "getrandom": (318, 0, 1, 0),
    "socket(AF_UNIX)": (41, 1, 1, 0),
}


def test_denied_syscalls_get_eperm_and_allowed_ones_reach_the_kernel(run_py, as_user):
    r = run_py(f"""
        denied = {{name: sc(*args) for name, args in {DENIED!r}.items()}}
        allowed = {{name: sc(*args) for name, args in {REACHES_KERNEL!r}.items()}}
        emit({{"denied": denied, "allowed": allowed}})
        """, setup=SYSCALL, user=as_user)
    for name, result in r.result["denied"].items():
        assert result == "EPERM", f"{name}: {result}"
    for name, result in r.result["allowed"].items():
        assert result not in ("EPERM", "ENOSYS"), f"{name} was refused by the filter: {result}"


def test_syscalls_unknown_to_the_policy_get_enosys(run_py, as_user):
    # mq_open (240) and name_to_handle_at's neighbours are not named by the python set.
    r = run_py("emit([sc(240, 0, 0, 0, 0), sc(245, 0, 0, 0, 0)])", setup=SYSCALL, user=as_user)
    assert r.result == ["ENOSYS", "ENOSYS"]


def test_no_new_namespaces_through_clone_clone3_or_unshare(run_py, as_user):
    r = run_py("""
        import threading, subprocess
        CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWNET, SIGCHLD = 0x10000000, 0x20000, 0x40000000, 17
        results = {
            "clone NEWUSER": sc(56, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0),
            "clone NEWNS|NEWNET": sc(56, CLONE_NEWNS | CLONE_NEWNET | SIGCHLD, 0, 0, 0, 0),
            "clone3": sc(435, 0, 0),
            "unshare NEWNS": sc(272, CLONE_NEWNS),
        }
        # glibc falls back from clone3 to clone: threads and processes still work.
        t = threading.Thread(target=lambda: None); t.start(); t.join()
        results["fork"] = subprocess.run(["python3", "-c", "print(6*7)"], capture_output=True,
                                         text=True).stdout.strip()
        emit(results)
        """, setup=SYSCALL, user=as_user)
    assert r.result == {"clone NEWUSER": "EPERM", "clone NEWNS|NEWNET": "EPERM",
                        "clone3": "ENOSYS", "unshare NEWNS": "EPERM", "fork": "42"}


def test_terminal_injection_ioctls_are_refused_even_with_high_bits_set(run_py, as_user):
    r = run_py("""
        TIOCSTI, TIOCLINUX, TIOCGWINSZ = 0x5412, 0x541C, 0x5413
        emit({
            "TIOCSTI": sc(16, 0, TIOCSTI, 0),
            "TIOCSTI|1<<32": sc(16, 0, TIOCSTI | (1 << 32), 0),
            "TIOCSTI|~0<<32": sc(16, 0, TIOCSTI | (0xffffffff << 32), 0),
            "TIOCLINUX": sc(16, 0, TIOCLINUX, 0),
            "TIOCGWINSZ on /dev/null": sc(16, 0, TIOCGWINSZ, 0),
        })
        """, setup=SYSCALL, user=as_user, input="")
    assert r.result == {"TIOCSTI": "EPERM", "TIOCSTI|1<<32": "EPERM", "TIOCSTI|~0<<32": "EPERM",
                        "TIOCLINUX": "EPERM", "TIOCGWINSZ on /dev/null": "ENOTTY"}


@pytest.mark.parametrize("net, inet", [("none", "EPERM"), ("loopback", "ok")])
def test_socket_families(run_py, as_user, net, inet):
    r = run_py("""
        import socket
        def make(family, kind=socket.SOCK_STREAM):
            s = socket.socket(family, kind); s.close()
        emit({
            "unix": attempt(make, socket.AF_UNIX),
            "inet": attempt(make, socket.AF_INET),
            "inet6": attempt(make, socket.AF_INET6),
            "netlink": attempt(make, socket.AF_NETLINK, socket.SOCK_RAW),
            "packet": attempt(make, socket.AF_PACKET, socket.SOCK_RAW),
            "vsock": attempt(make, 40),
            "alg": attempt(make, socket.AF_ALG, socket.SOCK_SEQPACKET),
            "unix|1<<32 (raw)": sc(41, 1 | (1 << 32), 1, 0),
        })
        """, setup=SYSCALL, user=as_user, opts=["--net", net])
    assert r.result == {"unix": "ok", "inet": inet, "inet6": inet, "netlink": "EPERM",
                        "packet": "EPERM", "vsock": "EPERM", "alg": "EPERM",
                        "unix|1<<32 (raw)": "EPERM"}


def test_personality_can_be_read_not_changed(run_py, as_user):
    r = run_py("""
        READ_IMPLIES_EXEC, ADDR_NO_RANDOMIZE = 0x0400000, 0x0040000
        emit([sc(135, 0xffffffff), sc(135, 0), sc(135, READ_IMPLIES_EXEC), sc(135, ADDR_NO_RANDOMIZE)])
        """, setup=SYSCALL, user=as_user)
    assert r.result == ["ok", "ok", "EPERM", "EPERM"]


# Machine code: "mov eax, NR; int 0x80; ret" (the i386 entry point), and an x32 syscall.
FOREIGN_ABI = '''
import ctypes, mmap, sys
mode = sys.argv[1]
if mode == "int80":
    code = bytes([0xb8, 20, 0, 0, 0, 0xcd, 0x80, 0xc3])      # i386 getpid
    buf = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    buf.write(code)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    print("returned", ctypes.CFUNCTYPE(ctypes.c_int)(addr)(), flush=True)
else:
    libc = ctypes.CDLL(None)
    libc.syscall.restype = ctypes.c_long
    print("returned", libc.syscall(ctypes.c_long(0x40000000 | 39)), flush=True)  # x32 getpid
'''


@pytest.mark.parametrize("mode", ["int80", "x32"])
def test_other_architectures_entry_points_kill_the_process(run_py, as_user, mode):
    r = run_py(f"""
        import subprocess
        p = subprocess.run(["python3", "-c", {FOREIGN_ABI!r}, {mode!r}], capture_output=True, text=True)
        emit({{"rc": p.returncode, "out": p.stdout}})
        """, user=as_user)
    assert r.result == {"rc": -signal.SIGSYS, "out": ""}


def test_a_program_killed_by_the_filter_says_so(run_jail, world_tmp, as_user):
    """The one refusal that is a cause of death: the filter's kill action (SIGSYS)."""
    d = world_tmp.dir(0o777)
    report = d / "report.json"
    r = run_jail(["--report", report, "--", "python3", "-c", FOREIGN_ABI, "x32"], user=as_user)
    assert r.returncode == 128 + signal.SIGSYS
    assert r.stdout == ""
    assert "pyjail: the program was killed by the syscall filter (SIGSYS)" in r.stderr, r.stderr
    rep = json.loads(report.read_text())
    assert (rep["status"], rep["signal_name"]) == ("seccomp-denied", "SIGSYS")


def test_a_program_that_exits_after_a_refusal_reports_its_exit(run_jail, world_tmp, as_user):
    d = world_tmp.dir(0o777)
    report = d / "report.json"
    program = "import os, socket\ntry: socket.socket(socket.AF_INET)\nexcept OSError: os._exit(3)\n"
    r = run_jail(["--report", report, "--", "python3", "-c", program], user=as_user)
    # Its one line on stderr is the hint that the jail, not the network, refused the socket.
    lines = without_notices(r.stderr).splitlines()
    assert r.returncode == 3 and len(lines) == 1, r.stderr
    assert lines[0].startswith("pyjail: the program was refused network sockets (socket(AF_INET) x1)")
    rep = json.loads(report.read_text())
    assert (rep["status"], rep["program_exit_code"]) == ("exit", 3)
    assert rep["denied_syscalls"] == [{"syscall": "socket(AF_INET)", "count": 1}]


# x86-64 numbers of the NUMA calls, and their flags (<linux/mempolicy.h>).
MBIND, SET_MEMPOLICY, GET_MEMPOLICY, MIGRATE_PAGES, MOVE_PAGES, HOME_NODE = 237, 238, 239, 256, 279, 450
MPOL_BIND, MPOL_MF_STRICT, MPOL_MF_MOVE, MPOL_MF_MOVE_ALL = 2, 1, 2, 4


def test_a_process_may_set_its_own_numa_policy_not_move_pages(run_py, as_user):
    r = run_py(f"""
        import mmap
        buf = mmap.mmap(-1, 1 << 16)
        addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
        node0 = ctypes.c_ulong(1)
        mode = ctypes.c_int(0)
        emit({{
            "get": sc({GET_MEMPOLICY}, ctypes.addressof(mode), 0, 0, 0, 0),
            "set": sc({SET_MEMPOLICY}, 0, 0, 0),                       # MPOL_DEFAULT
            "mbind": sc({MBIND}, addr, 1 << 16, {MPOL_BIND}, ctypes.addressof(node0), 64, 0),
            "mbind strict": sc({MBIND}, addr, 1 << 16, {MPOL_BIND}, ctypes.addressof(node0), 64,
                               {MPOL_MF_STRICT}),
            "mbind move": sc({MBIND}, addr, 1 << 16, {MPOL_BIND}, ctypes.addressof(node0), 64,
                             {MPOL_MF_MOVE}),
            "mbind move all": sc({MBIND}, addr, 1 << 16, {MPOL_BIND}, ctypes.addressof(node0), 64,
                                 {MPOL_MF_MOVE_ALL}),
            # The kernel reads the flags as 32 bits: what is above them is ignored, there too.
            "mbind high junk": sc({MBIND}, addr, 1 << 16, {MPOL_BIND}, ctypes.addressof(node0), 64,
                                  0xdead << 32),
            "mbind high junk move": sc({MBIND}, addr, 1 << 16, {MPOL_BIND}, ctypes.addressof(node0),
                                       64, (0xdead << 32) | {MPOL_MF_MOVE}),
            "home node flags": sc({HOME_NODE}, addr, 1 << 16, 0, 1),
            "migrate_pages": sc({MIGRATE_PAGES}, 1, 64, ctypes.addressof(node0), ctypes.addressof(node0)),
            "move_pages": sc({MOVE_PAGES}, 1, 0, 0, 0, 0, 0),
        }})
        """, setup=SYSCALL, user=as_user)
    assert r.result == {"get": "ok", "set": "ok", "mbind": "ok", "mbind strict": "ok",
                        "mbind move": "EPERM", "mbind move all": "EPERM",
                        "mbind high junk": "ok", "mbind high junk move": "EPERM",
                        "home node flags": "EPERM",
                        "migrate_pages": "EPERM", "move_pages": "EPERM"}


def test_refused_calls_are_reported_with_the_deciding_argument(run_jail, as_user):
    program = (
        "import socket, ctypes\n"
        "for _ in range(3):\n"
        "    try: socket.socket(socket.AF_INET)\n"
        "    except PermissionError: pass\n"
        "ctypes.CDLL(None).unshare(0x10000000)\n"
        "print('still running')\n")
    r = run_jail(["--verbose", "--", "python3", "-c", program], user=as_user)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "still running\n"
    denied = [l for l in r.stderr.splitlines() if l.startswith("pyjail: denied: ")]
    assert denied == ["pyjail: denied: socket(AF_INET) x3, unshare x1"], r.stderr


def test_ordinary_python_workloads_need_nothing_the_filter_refuses(run_jail, world_tmp, as_user):
    script = world_tmp.script('''
import asyncio, concurrent.futures, ctypes, hashlib, mmap, multiprocessing, os, pty, select
import shutil, signal, socket, sqlite3, ssl, subprocess, sys, tempfile, threading, time

def square(x):
    return x * x

async def run_child():
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", "pass")
    return await proc.wait()

if __name__ == "__main__":
    with concurrent.futures.ThreadPoolExecutor(4) as ex:
        assert sum(ex.map(square, range(10))) == 285
    with multiprocessing.Pool(2) as pool:
        assert pool.map(square, [3]) == [9]
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        assert pool.apply(square, (4,)) == 16
    assert asyncio.run(run_child()) == 0
    db = sqlite3.connect(os.path.join(tempfile.mkdtemp(), "x.db"))
    db.execute("create table t(x)")
    m = mmap.mmap(-1, 4096)
    ctypes.CDLL(None).getpid()
    ssl.create_default_context()
    a, b = socket.socketpair()
    signal.setitimer(signal.ITIMER_REAL, 0.01)
    signal.signal(signal.SIGALRM, lambda *_: None)
    time.sleep(0.02)
    pid, fd = pty.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    print("ok")
''')
    r = run_jail(["--verbose", "--", "python3", str(script)], user=as_user, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "ok\n"
    assert "denied:" not in r.stderr


def test_seccomp_off_is_loud_and_explicit(run_py, as_user):
    r = run_py("emit(sc(41, 2, 1, 0))", setup=SYSCALL, user=as_user, opts=["--seccomp", "off"])
    assert r.result == "ok"  # without the filter, socket(AF_INET) is allowed
    # (A nested user namespace is refused even then: the jail's user namespace allows none.)
    assert "WARNING: --seccomp off" in r.stderr


def test_explain_shows_the_filter(run_jail, as_user):
    r = run_jail(["--explain", "--", "python3", "-c", "pass"], user=as_user)
    assert r.returncode == 0
    assert "# Seccomp:   set 'python':" in r.stdout
    assert "ptrace" in r.stdout.split("denied:")[1]


def test_an_unknown_set_is_refused_before_anything_runs(run_jail, as_user):
    r = run_jail(["--seccomp", "nosuch", "--", "python3", "-c", "print(1)"], user=as_user)
    assert r.returncode == 125
    assert r.stdout == ""
    assert r.stderr.startswith("pyjail: --seccomp: no syscall set 'nosuch'")


def test_a_broken_set_file_names_the_line(run_jail, world_tmp, as_user):
    bad = world_tmp.file("bad.toml", '# a set\nallow = ["read", "reed"]\n')
    r = run_jail(["--seccomp", str(bad), "--", "python3", "-c", "print(1)"], user=as_user)
    assert r.returncode == 125
    assert f"{bad}:2: unknown syscall 'reed'" in r.stderr


@pytest.mark.parametrize("net", ["none", "loopback"])
def test_the_shipped_set_uses_the_filter_compiled_at_build_time(run_jail, as_user, net):
    r = run_jail(["--verbose", "--net", net, "--", "python3", "-c", "pass"], user=as_user)
    assert r.returncode == 0, r.stderr
    assert "pyjail: seccomp filter compiled at build time: " in r.stderr, r.stderr


def test_an_edited_set_is_compiled_at_run_time_and_enforced(run_jail, world_tmp, as_user):
    """A set that differs from the shipped one by a byte must not load the shipped filter."""
    from pathlib import Path
    shipped = Path(__file__).resolve().parents[2] / "profiles" / "seccomp" / "python.toml"
    text = shipped.read_text()
    assert '"@debugging", ' in text
    # Allow kcmp (which the shipped set denies with the rest of @debugging).
    text = text.replace('"@debugging", ', "").replace("allow = [", 'allow = ["kcmp", ', 1)
    edited = world_tmp.file("edited.toml", text)
    program = "import errno as _errno, os\n" + SYSCALL + "print(sc(312, os.getpid(), os.getpid(), 1, 0, 0), sc(272, 0x10000000))\n"
    r = run_jail(["--verbose", "--seccomp", str(edited), "--", "python3", "-c", program],
                 user=as_user)
    assert r.returncode == 0, r.stderr
    assert "compiled at run time" in r.stderr, r.stderr
    kcmp, unshare = r.stdout.split()
    assert kcmp == "ok"            # the edit took effect: kcmp(KCMP_VM) of itself reaches the kernel
    assert unshare == "EPERM"      # and the rest of the set is still enforced


@pytest.fixture(scope="module")
def numpy_rootfs():
    """A rootfs with the host's numpy in it (Debian: python3-numpy), built for this module."""
    import os
    import shutil
    import tempfile
    from pathlib import Path

    from pyjail_testing import skip_or_fail

    if subprocess.run(["/usr/bin/python3", "-c", "import numpy"], capture_output=True).returncode:
        skip_or_fail("numpy is not installed on the host (apt-get install python3-numpy)")
    top = tempfile.mkdtemp(prefix="pyjail-numpy-")
    os.chmod(top, 0o755)
    out = Path(top) / "rootfs"
    builder = Path(__file__).resolve().parents[2] / "rootfs" / "build-rootfs.py"
    r = subprocess.run(["/usr/bin/python3", str(builder), "--out", str(out), "--with", "numpy",
                        "--quiet"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    yield out
    shutil.rmtree(top)


def test_numpy_computes_under_the_filter(run_jail, numpy_rootfs, as_user):
    program = ("import numpy as np\n"
               "a = np.arange(1_000_000, dtype=np.float64).reshape(1000, 1000)\n"
               "print(int(np.linalg.matrix_rank(a[:50, :50] + np.eye(50))), int((a @ a.T).trace() % 1000))\n")
    r = run_jail(["--rootfs", str(numpy_rootfs), "--verbose", "--", "python3", "-c", program],
                 user=as_user, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[0] == "50"
    assert "denied:" not in r.stderr


# Runs pyjail under a filter of its own that makes seccomp() fail with ENOSYS, as on a kernel
# built without seccomp filters.
WITHOUT_SECCOMP = '''
import ctypes, os, struct, sys
def insn(code, jt, jf, k):
    return struct.pack("HBBI", code, jt, jf, k)
prog = b"".join([
    insn(0x20, 0, 0, 0),                  # A = syscall number
    insn(0x15, 0, 1, 317),                # if A == seccomp
    insn(0x06, 0, 0, 0x00050000 | 38),    #   return ERRNO(ENOSYS)
    insn(0x06, 0, 0, 0x7fff0000),         # return ALLOW
])
buf = ctypes.create_string_buffer(prog)
class Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
fprog = Fprog(len(prog) // 8, ctypes.addressof(buf))
libc = ctypes.CDLL(None, use_errno=True)
assert libc.prctl(38, 1, 0, 0, 0) == 0                       # PR_SET_NO_NEW_PRIVS
assert libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) == 0     # PR_SET_SECCOMP, filter
os.execv(sys.argv[1], sys.argv[1:])
'''


def test_without_seccomp_in_the_kernel_pyjail_refuses_to_run(pyjail_bin, as_user):
    cmd = ["/usr/bin/python3", "-c", WITHOUT_SECCOMP, str(pyjail_bin), "--", "python3", "-c",
           "print('ran without a filter')"]
    r = subprocess.run([*as_user.prefix, *cmd], capture_output=True, text=True, cwd="/", timeout=30)
    assert r.returncode == 125, r.stderr
    assert r.stdout == ""
    assert r.stderr.startswith("pyjail: seccomp: this kernel cannot filter syscalls with user "
                               "notification: Function not implemented (this kernel lacks "
                               "seccomp filters"), r.stderr
    assert "--seccomp off" in r.stderr
