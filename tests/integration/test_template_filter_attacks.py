"""Attacks on a template from its own rootfs: a module the template runs as it starts (a .pth
file of site-packages, run by site before any preload) tries what no template needs -- a
second syscall path (io_uring), a network namespace of its own, BPF, the kernel's keyrings --
with the capabilities the template holds for its runs. Each must be refused: the template has
a filter of its own, and its capabilities are not effective outside a run's set-up. As root
and as an unprivileged user."""

from __future__ import annotations

import json
import shutil
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
                   "effective capabilities": "0000000000000000"}, got
