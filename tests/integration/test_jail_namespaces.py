"""Namespaces: every one is new, and a namespace the program makes inside does not lead out."""

import os
import socket

import pytest

LAYERS = {"filtered": [], "unfiltered": ["--seccomp", "off"]}


def test_every_namespace_is_the_jails_own(run_py, as_user, host_namespaces):
    r = run_py("""\
        emit({n: os.readlink("/proc/self/ns/" + n)
              for n in ["user", "mnt", "pid", "net", "ipc", "uts", "cgroup"]})
        """, user=as_user)
    same = {n for n, link in r.result.items() if host_namespaces[n] == link}
    assert not same, f"shared with the host: {sorted(same)}"


# The network namespace is not made by the clone that makes the others: the supervisor has it
# made beside pid 1's mounts, in the jail's user namespace, and pid 1 enters it before its
# lock-down (jail/supervisor/network_maker.hpp). Attack on that path: a namespace made in the
# supervisor's (the host's) user namespace, whose owner holds every capability over it, or one
# shared by two jails, which could then reach each other's loopback and abstract sockets.
NETNS_OWNER = """\
    import fcntl, struct, sys
    NS_GET_USERNS = 0xb701
    net = os.open("/proc/self/ns/net", os.O_RDONLY)
    owner = fcntl.ioctl(net, NS_GET_USERNS)
    print(json.dumps({"net": os.readlink("/proc/self/ns/net"), "owner": os.fstat(owner).st_ino,
                      "user": os.stat("/proc/self/ns/user").st_ino}), flush=True)
    sys.stdin.read()  # alive until the test has seen every jail
    """


def test_each_jail_has_a_network_namespace_of_its_own_owned_by_its_user_namespace(
        popen_jail, as_user, host_namespaces, helpers):
    import json
    import subprocess
    import textwrap
    code = "import json, os\n" + textwrap.dedent(NETNS_OWNER)
    jails = [popen_jail(["--net", net, "--", "python", "-c", code], user=as_user, stdin=subprocess.PIPE)
             for net in ("none", "loopback", "none")]
    seen = []
    for p in jails:
        line = helpers.read_line(p.stdout, 30)
        assert line, f"no answer from a jail: {p.poll()} {p.stderr.read1(4096) if p.poll() is not None else ''}"
        seen.append(json.loads(line))
    for p in jails:
        p.communicate(timeout=30)  # stdin closed: the jail ends
        assert p.returncode == 0
    nets = [s["net"] for s in seen]
    assert len(set(nets)) == len(nets), f"jails alive at once share a network namespace: {nets}"
    assert host_namespaces["net"] not in nets
    for s in seen:
        assert s["owner"] == s["user"], f"the network namespace is not owned by the jail's user namespace: {s}"


def _refuse_setns() -> None:
    """In the child before it execs pyjail: a seccomp filter that fails setns(2) with EPERM
    (as a container's profile may), and allows every other call (x86-64 only, as pyjail)."""
    import ctypes
    import struct
    SYS_setns = 308
    insns = [
        (0x20, 0, 0, 0),                    # ld [0]: seccomp_data.nr
        (0x15, 0, 1, SYS_setns),            # jeq #setns
        (0x06, 0, 0, 0x00050000 | 1),       # ret ERRNO(EPERM)
        (0x06, 0, 0, 0x7FFF0000),           # ret ALLOW
    ]
    code = b"".join(struct.pack("HBBI", *i) for i in insns)
    buf = ctypes.create_string_buffer(code)
    prog = struct.pack("HxxxxxxQ", len(insns), ctypes.addressof(buf))
    libc = ctypes.CDLL(None, use_errno=True)
    PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 or \
            libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.c_char_p(prog), 0, 0) != 0:
        os._exit(99)


def test_without_setns_the_jail_still_gets_a_network_namespace_of_its_own(
        popen_jail, as_user, host_namespaces, helpers):
    """The supervisor's helper cannot enter the jail's user namespace (setns refused): pid 1
    makes the namespace itself, and it is still new and owned by the jail's user namespace."""
    import json
    import subprocess
    import textwrap
    code = "import json, os\n" + textwrap.dedent(NETNS_OWNER)
    p = popen_jail(["--", "python", "-c", code], user=as_user, stdin=subprocess.PIPE,
                   preexec_fn=_refuse_setns)
    line = helpers.read_line(p.stdout, 30)
    assert line, f"no answer from the jail: {p.communicate(timeout=30)}"
    seen = json.loads(line)
    out, err = p.communicate(timeout=30)
    assert p.returncode == 0, err
    assert seen["net"] != host_namespaces["net"]
    assert seen["owner"] == seen["user"], seen


def test_hostname(run_py, as_user):
    host = socket.gethostname()
    sethostname = """\
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        ctypes.set_errno(0)
        rc = libc.sethostname(b"changed", 7)
        emit({"name": os.uname().nodename,
              "set": "ok" if rc == 0 else _errno.errorcode[ctypes.get_errno()]})
        """
    r = run_py(sethostname, user=as_user)
    assert r.result == {"name": "pyjail", "set": "EPERM"}
    r = run_py(sethostname, user=as_user, opts=["--hostname", "sandbox-7.example"])
    assert r.result == {"name": "sandbox-7.example", "set": "EPERM"}
    assert socket.gethostname() == host


NESTED = """\
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
def call(fn, *args):
    ctypes.set_errno(0)
    return "ok" if fn(*args) == 0 else _errno.errorcode.get(ctypes.get_errno(), "?")
CLONE_NEWUSER, CLONE_NEWNS = 0x10000000, 0x00020000
MS_REMOUNT, MS_BIND = 32, 4096
"""


# The root is the rootfs itself, or -- when a bind needs a mount point the rootfs lacks, as
# /mnt/extra here -- a tmpfs with the rootfs's directories bound in.
ROOTS = {"rootfs root": [], "tmpfs root": ["--ro-bind", "{extra}:/mnt/extra"]}


@pytest.mark.parametrize("root", sorted(ROOTS))
@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_a_nested_user_namespace_does_not_lead_out(run_py, as_user, world_tmp, layer, root):
    marker = world_tmp.file("nested-marker.txt", "host\n")
    extra = world_tmp.dir()
    opts = LAYERS[layer] + [o.format(extra=extra) for o in ROOTS[root]]
    r = run_py("""\
        marker = sys.argv[1]
        root_before = sorted(os.listdir("/"))
        out = {"unshare": call(libc.unshare, CLONE_NEWUSER | CLONE_NEWNS)}
        if out["unshare"] == "ok":
            # "root" with every capability, but of a namespace that owns nothing of the host
            out["umount /usr"] = call(libc.umount2, b"/usr", 2)
            out["umount /"] = call(libc.umount2, b"/", 2)
            out["remount /usr rw"] = call(libc.mount, None, b"/usr", None,
                                          ctypes.c_ulong(MS_REMOUNT | MS_BIND), None)
            out["remount / rw"] = call(libc.mount, None, b"/", None,
                                       ctypes.c_ulong(MS_REMOUNT | MS_BIND), None)
            out["write /usr"] = attempt(lambda: open("/usr/pyjail-probe", "w"))
            # the classic chroot escape: chroot elsewhere, climb out with "..", chroot there
            os.makedirs("/tmp/inner", exist_ok=True)
            out["chroot"] = call(libc.chroot, b"/tmp/inner")
            for _ in range(64):
                os.chdir("..")
            out["chroot back"] = call(libc.chroot, b".")
            out["root after"] = sorted(os.listdir("/")) == root_before
            out["marker"] = os.path.exists(marker) or os.path.exists("/tmp" + marker)
        emit(out)
        """, setup=NESTED, user=as_user, opts=opts, argv=[str(marker)])
    got = r.result
    if layer == "filtered":
        assert got == {"unshare": "EPERM"}
        return
    if got["unshare"] != "ok":  # the kernel may refuse nested namespaces: fine too
        assert got["unshare"] in ("EPERM", "ENOSPC", "EUSERS", "EINVAL"), got
        return
    assert got["umount /usr"] == "EINVAL" and got["umount /"] == "EINVAL"  # locked mounts
    # The read-only flag of the jail's mounts is locked. (/usr is a mount of its own only when
    # the root is a tmpfs; in the default rootfs it is part of the root: EINVAL, no mount.)
    assert got["remount / rw"] == "EPERM"
    assert got["remount /usr rw"] == ("EPERM" if root == "tmpfs root" else "EINVAL")
    assert got["write /usr"] == "EROFS"
    assert got["root after"] is True and got["marker"] is False, got


# A fresh jail writes user.max_user_namespaces=0 but not the other kinds' counts: its program
# holds no capability, so the kernel refuses each kind (EPERM), and with a user namespace
# first, where it would hold them, the count of 0 refuses that (ENOSPC). Shown without the
# filter, which refuses them all too.
KINDS = {"mnt": 0x00020000, "pid": 0x20000000, "net": 0x40000000, "ipc": 0x08000000,
         "uts": 0x04000000, "cgroup": 0x02000000, "time": 0x00000080}


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_the_program_can_make_no_namespace_of_any_kind(run_py, as_user, layer):
    r = run_py("""\
        out = {}
        for name, flag in KINDS.items():
            out[name] = call(libc.unshare, flag)
            out["user+" + name] = call(libc.unshare, CLONE_NEWUSER | flag)
        out["user"] = call(libc.unshare, CLONE_NEWUSER)
        emit(out)
        """, setup=NESTED + f"KINDS = {KINDS!r}\n", user=as_user, opts=LAYERS[layer])
    made = {k: v for k, v in r.result.items() if v == "ok"}
    assert not made, f"the program made namespaces: {sorted(made)}"
    if layer == "unfiltered":
        assert r.result["user"] == "ENOSPC", r.result
        assert all(r.result[k] == "EPERM" for k in KINDS), r.result
