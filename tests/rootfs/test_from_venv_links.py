"""--from-venv copies a virtualenv into a tree every jail reads, with the builder's rights (root's
for a system rootfs): it follows no symlink out of the virtualenv's site-packages, and root
takes no virtualenv another user can change (they could plant such a link, or change it after
the build for root's next `rebuild --if-stale`).

Environment: as test_rootfs_command.py (PYJAIL_BIN, PYJAIL_MUST_WORK).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_rootfs_command import (  # noqa: E402,F401  (fixtures are used by name)
    TARGET_PYTHON, UNPRIVILEGED, binary, current, describe, skip_or_fail, users, world_dir)
from test_rootfs_rebuild import one_error, run  # noqa: E402


def make_venv(top):
    venv = top / "venv"
    subprocess.run([TARGET_PYTHON, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next(venv.glob("lib/python3*/site-packages"))
    (site / "plainmod.py").write_text("VALUE = 1\n")
    return venv, site


def test_a_link_out_of_the_venv_is_not_followed(binary, users):
    top = world_dir()
    try:
        secret = top / "secret"
        secret.write_text("root's secret\n")
        os.chmod(secret, 0o600)          # only its owner (root, when the tests run as root)
        venv, site = make_venv(top)
        (site / "stolen.py").symlink_to(secret)
        out = top / "r"
        r = run(binary, current(users), "rootfs", "build", "--out", out, "--from-venv", venv,
                "--quiet")
        one_error(r, r"--from-venv %s: stolen\.py in its site-packages is a symlink to %s, "
                     r"outside the site-packages \(the builder follows none\) \(copy what it "
                     r"points to" % (venv, secret))
        assert not out.exists()
        # A link that stays inside is kept as a link.
        (site / "stolen.py").unlink()
        (site / "alias.py").symlink_to("plainmod.py")
        r = run(binary, current(users), "rootfs", "build", "--out", out, "--from-venv", venv,
                "--quiet")
        assert r.returncode == 0, describe(r)
        copied = next(out.glob("usr/*/lib/python3*/*-packages/alias.py"))
        assert os.readlink(copied) == "plainmod.py"
        assert "secret" not in subprocess.run(["grep", "-rl", "root's secret", str(out)],
                                              stdout=subprocess.PIPE,
                                              universal_newlines=True).stdout
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_root_refuses_a_venv_another_user_can_change(binary, users):
    if "root" not in users:
        skip_or_fail("only root's builds refuse another user's virtualenv (not root here)")
    top = world_dir()
    try:
        venv, site = make_venv(top)
        out = top / "r"
        for p in [venv, *venv.rglob("*")]:
            os.lchown(p, UNPRIVILEGED, UNPRIVILEGED)
        r = run(binary, users["root"], "rootfs", "build", "--out", out, "--from-venv", venv,
                "--quiet")
        one_error(r, r"--from-venv %s: %s belongs to uid %d with mode 755: others can change "
                     r"it, and root builds this rootfs \(make the virtualenv as root"
                  % (venv, venv, UNPRIVILEGED))
        assert not out.exists()
        # Root's again, but one package directory others may write to.
        for p in [venv, *venv.rglob("*")]:
            os.lchown(p, 0, 0)
        (site / "shared").mkdir()
        os.chmod(site / "shared", 0o777)
        r = run(binary, users["root"], "rootfs", "build", "--out", out, "--from-venv", venv,
                "--quiet")
        one_error(r, r"--from-venv %s: shared in its site-packages can be changed by uid 0 or "
                     r"by others, and root builds this rootfs" % venv)
        assert not out.exists()
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_root_refuses_a_venv_in_a_sticky_directory_of_another_user(binary, users):
    # Attack: the owner of a sticky directory may rename anything in it, sticky bit or not:
    # between root's checks of the virtualenv (all root's) and its copy, or before root's next
    # `rebuild --if-stale`, they put a virtualenv of their own in its place. Root walks to a
    # virtualenv as to a --ca-certificates bundle: only root's sticky directories are shared.
    if "root" not in users:
        skip_or_fail("only root's builds refuse another user's directories (not root here)")
    top = world_dir()
    try:
        shared = top / "shared"
        shared.mkdir()
        os.chmod(shared, 0o1777)
        os.chown(shared, UNPRIVILEGED, UNPRIVILEGED)
        venv, _ = make_venv(shared)          # root's, every file of it
        out = top / "r"
        r = run(binary, users["root"], "rootfs", "build", "--out", out, "--from-venv", venv,
                "--quiet")
        one_error(r, r"--from-venv %s: %s belongs to uid %d with mode 1777: its owner can "
                     r"rename what is in it, sticky or not, and root builds this rootfs "
                     r"\(make the virtualenv as root, where only root can write"
                  % (venv, shared, UNPRIVILEGED))
        assert not out.exists()
        # The same directory as root's (as /tmp is) is shared: others cannot rename root's.
        os.chown(shared, 0, 0)
        r = run(binary, users["root"], "rootfs", "build", "--out", out, "--from-venv", venv,
                "--quiet")
        assert r.returncode == 0, describe(r)
        assert list(out.glob("usr/*/lib/python3*/*-packages/plainmod.py"))
    finally:
        shutil.rmtree(top, ignore_errors=True)
