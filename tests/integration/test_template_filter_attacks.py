"""Attacks on a template from its own rootfs: a module the template runs as it starts (a .pth
file of site-packages, run by site before any preload) tries what no template needs -- a
second syscall path (io_uring), a network namespace of its own, BPF, the kernel's keyrings --
with the capabilities the template holds for its runs. Each must be refused: the template has
a filter of its own, and its capabilities are not effective outside a run's set-up. As root
and as an unprivileged user."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import textwrap

from pyjail_testing.runs import describe

# Run at the template's start by site (a .pth line that starts with "import"). What it got is
# kept in the interpreter, which every run is a fork of.
PROBE = """
import ctypes, errno, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def call(nr, *args):
    rc = libc.syscall(ctypes.c_long(nr), *[ctypes.c_ulong(a % (1 << 64)) for a in args])
    return "ok" if rc >= 0 else errno.errorcode.get(ctypes.get_errno(), "?")
params = ctypes.create_string_buffer(120)
bpf_attr = ctypes.create_string_buffer(128)
bpf_attr[0:16] = (2).to_bytes(4, "little") + (4).to_bytes(4, "little") * 2 + (1).to_bytes(4, "little")
with open("/proc/self/status") as f:
    cap_eff = [l.split()[1] for l in f if l.startswith("CapEff:")][0]
sys.pyjail_pth_probe = {
    "io_uring_setup": call(425, 4, ctypes.addressof(params)),
    "unshare(CLONE_NEWNET)": call(272, 0x40000000),
    "bpf(BPF_MAP_CREATE)": call(321, 0, ctypes.addressof(bpf_attr), 128),
    "keyctl(KEYCTL_GET_KEYRING_ID)": call(250, 0, -3, 0),
    "keyctl(KEYCTL_JOIN_SESSION_KEYRING)": call(250, 1, 0),
    "effective capabilities": cap_eff,
}
"""

SITE_DIRS = ("usr/lib/python3/dist-packages", "usr/lib/python3.11/dist-packages",
             "usr/local/lib/python3.11/dist-packages")


def test_a_pth_file_in_the_rootfs_cannot_use_the_templates_capabilities(run_jail, as_user, serve, world_tmp,
                                                                          jail_rootfs):
    rootfs = world_tmp.dir() / "rootfs"
    shutil.copytree(jail_rootfs, rootfs, symlinks=True)
    # Wherever this interpreter's site looks: the first that exists runs the probe.
    for d in SITE_DIRS:
        (rootfs / d).mkdir(parents=True, exist_ok=True)
        (rootfs / d / "pyjail_pth_probe.py").write_text(textwrap.dedent(PROBE))
        (rootfs / d / "zz-probe.pth").write_text("import pyjail_pth_probe\n")
    sock, _ = serve(as_user, "--rootfs", str(rootfs))
    r = run_jail(["--quiet", "--rootfs", rootfs, "--via", sock, "--", "python", "-c",
                  "import json, sys; print(json.dumps(getattr(sys, 'pyjail_pth_probe', None)))"],
                 user=as_user)
    assert r.returncode == 0, describe(r)
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got is not None, "site did not run the .pth file in the template"
    assert got == {"io_uring_setup": "ENOSYS", "unshare(CLONE_NEWNET)": "EPERM",
                   "bpf(BPF_MAP_CREATE)": "ENOSYS", "keyctl(KEYCTL_GET_KEYRING_ID)": "ENOSYS",
                   "keyctl(KEYCTL_JOIN_SESSION_KEYRING)": "ENOSYS",
                   "effective capabilities": "0000000000000000"}, got


def keys_held(uid: int) -> int:
    """How many keys of its quota the host user `uid` holds (/proc/key-users, readable by root)."""
    with open("/proc/key-users") as f:
        for line in f:
            user, fields = line.split(":", 1)
            if int(user) == uid:
                return int(fields.split()[2].split("/")[0])
    return 0


def descendant_uids(pid: int) -> set[int]:
    uids, todo = set(), [pid]
    while todo:
        p = todo.pop()
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo += [int(c) for c in f.read().split()]
            with open(f"/proc/{p}/status") as f:
                uids |= {int(line.split()[1]) for line in f if line.startswith("Uid:")}
        except OSError:
            pass
    return uids


def test_runs_from_a_template_do_not_each_take_a_key_of_its_users_quota(popen_jail, serve, root_user, helpers):
    """A keyring per run would charge each live run to the template's host user's key quota
    (kernel.keys.maxkeys, 200 by default): a template could hold no more runs at once, and a
    run could use up what the others need. Runs keep the template's keyring, empty and out of
    every process's reach (the probe above). Root only: root's template has a host uid of its
    own, which no other test's jail charges while this one counts."""
    sock, server = serve(root_user)
    jail_uids = descendant_uids(server.pid) - {0}
    assert len(jail_uids) == 1, jail_uids
    uid = jail_uids.pop()
    before = keys_held(uid)
    runs = [popen_jail(["--quiet", "--via", sock, "--", "python", "-c",
                        "import sys; print('up', flush=True); sys.stdin.read()"],
                       user=root_user, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            for _ in range(6)]
    try:
        for r in runs:
            assert helpers.read_line(r.stdout, 30) == b"up\n"
        held = keys_held(uid)
    finally:
        for r in runs:
            r.communicate(timeout=30)   # closes its stdin: the program ends
    assert held - before < 6, f"{held - before} more keys held by uid {uid} with 6 runs live"
    assert all(r.returncode == 0 for r in runs)
