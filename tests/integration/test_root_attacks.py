"""Host paths pyjail opens on a jail's behalf, attacked by another user of the host.

pyjail run by root (cron, a service) runs its jail as --host-user (nobody). Whatever root
itself opens for the jail -- the script it copies in, the report it writes, its own profiles,
filters and rootfs -- must not be chosen by another user through a planted symlink, FIFO or
writable directory. "The other user" is uid 65534 when root runs pyjail, and root when the
unprivileged user does: in both cases someone pyjail must not trust.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import uuid
from pathlib import Path

import pytest
from pyjail_testing.runs import UNPRIVILEGED_ID, describe

# What a planted file must never leak: a root-only file holding this marker.
SECRET_CODE = 'print("{marker}")\n'


def other_user(user) -> int:
    """Someone pyjail (run by `user`) must not trust."""
    return UNPRIVILEGED_ID if user.is_root else 0


def chown_to(path: Path, uid: int) -> None:
    os.lchown(path, uid, uid)


@pytest.fixture
def secret(world_tmp):
    """A root-only file (0600 in a 0700 directory) whose code prints a marker."""
    marker = f"PYJAIL-SECRET-{uuid.uuid4().hex}"
    d = world_tmp.dir(0o700)
    path = world_tmp.file("secret.py", SECRET_CODE.format(marker=marker), dir=d, mode=0o600)
    return path, marker


def run_bounded(run_jail, args, *, user, timeout=15):
    """run_jail, with a hang turned into a failure that says so."""
    try:
        return run_jail(args, user=user, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"pyjail {' '.join(map(str, args))} hung for {timeout} s", pytrace=False)


# --------------------------------------------------------------------------------------------
# The script (root opens it as the host user)


def test_a_planted_script_symlink_never_reads_a_root_only_file(run_jail, world_tmp, secret, as_user):
    path, marker = secret
    job = world_tmp.dir(0o755)
    chown_to(job, UNPRIVILEGED_ID)
    task = job / "task.py"
    task.symlink_to(path)  # /tmp/job/task.py -> the secret, planted by the directory's owner
    chown_to(task, UNPRIVILEGED_ID)
    r = run_jail(["--", "python3", str(task)], user=as_user)
    assert marker not in r.stdout and marker not in r.stderr, describe(r)
    assert r.returncode == 125, describe(r)
    if as_user.is_root:
        assert r.stderr == (
            f"pyjail: script: {task} is not readable by uid {as_user.host_uid} (the jail's host "
            f"user), and root reads a script for it only on a path nobody else could have planted: "
            f"{job} is owned by uid {UNPRIVILEGED_ID} (make it readable by uid {as_user.host_uid}, "
            f"or choose a --host-user who can read it)\n")
    else:
        assert r.stderr == f"pyjail: script: cannot open {task}: Permission denied\n"


def test_root_runs_its_own_script_from_its_own_private_directory(run_jail, world_tmp, root_user):
    """`sudo pyjail -- python /root/job.py`: nobody cannot read it, nobody else could plant it."""
    d = world_tmp.dir(0o700)
    job = world_tmp.file("job.py", 'print("own job ran")\n', dir=d, mode=0o600)
    r = run_jail(["--", "python3", str(job)], user=root_user)
    assert r.returncode == 0 and r.stdout == "own job ran\n", describe(r)


def test_root_never_reads_its_own_file_through_a_symlink_for_the_jail(run_jail, world_tmp, secret,
                                                                     root_user):
    path, marker = secret
    d = world_tmp.dir(0o700)
    link = d / "job.py"
    link.symlink_to(path)
    r = run_jail(["--", "python3", str(link)], user=root_user)
    assert marker not in r.stdout + r.stderr
    assert r.returncode == 125
    assert f"planted: {link} is a symbolic link (make it readable by uid" in r.stderr, describe(r)


def test_a_script_the_host_user_can_read_runs_through_a_symlink(run_jail, world_tmp, as_user):
    target = world_tmp.script('print("readable ran")\n')
    d = world_tmp.dir(0o755)
    (d / "task.py").symlink_to(target)
    r = run_jail(["--", "python3", str(d / "task.py")], user=as_user)
    assert r.returncode == 0 and r.stdout == "readable ran\n", describe(r)


@pytest.mark.parametrize("how", ["bind", "bind-symlink", "workdir"])
def test_bind_sources_and_workdir_are_opened_as_the_jail_user(run_jail, world_tmp, secret, as_user, how):
    """pid 1 opens binds after it became the jail user: a root-only directory stays closed."""
    path, marker = secret
    source = path.parent
    if how == "bind-symlink":
        d = world_tmp.dir(0o755)
        chown_to(d, UNPRIVILEGED_ID)
        (d / "data").symlink_to(source)
        source = d / "data"
    opts = ["--workdir", str(source)] if how == "workdir" else ["--ro-bind", f"{source}:/mnt/data"]
    where = "/work" if how == "workdir" else "/mnt/data"
    r = run_jail([*opts, "--", "python3", "-c",
                  f"print(open('{where}/secret.py').read())"], user=as_user)
    assert marker not in r.stdout + r.stderr, describe(r)
    # Refused where pid 1 (or the invoker) opens the source, or mounted with the directory's
    # own permissions, which keep the jail user out.
    assert r.returncode != 0 and "Permission denied" in r.stderr, describe(r)


# --------------------------------------------------------------------------------------------
# The report


def test_a_fifo_planted_at_the_report_path_fails_fast(run_jail, world_tmp, as_user):
    d = world_tmp.dir(0o1777)
    fifo = d / "report.json"
    os.mkfifo(fifo)
    os.chmod(fifo, 0o666)  # writable by the user under test, whoever planted it
    chown_to(fifo, other_user(as_user))
    r = run_bounded(run_jail, ["--report", str(fifo), "--", "python3", "-c", "print(1)"],
                    user=as_user)
    assert r.returncode == 125 and r.stdout == "", describe(r)
    assert r.stderr == (f"pyjail: report: refusing to write {fifo}: it is a FIFO, not a regular "
                        f"file (give a path in a directory only you can write, e.g. your home)\n")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_symlinked_directory_on_the_report_path_is_refused(run_jail, world_tmp, as_user):
    """A link another user planted in a directory everyone writes would pick where root writes."""
    shared = world_tmp.dir(0o777)
    victim = world_tmp.dir(0o777)
    (victim / "keep.txt").write_text("keep me")
    link = shared / "out"
    link.symlink_to(victim)
    chown_to(link, other_user(as_user))
    report = link / "report.json"
    r = run_bounded(run_jail, ["--report", str(report), "--", "python3", "-c", "print(1)"],
                    user=as_user)
    assert r.returncode == 125 and r.stdout == "", describe(r)
    assert r.stderr.startswith(
        f"pyjail: report: refusing to write {report}: {link} is a symbolic link in {shared}, "
        "which is "), describe(r)
    assert sorted(p.name for p in victim.iterdir()) == ["keep.txt"]
    assert (victim / "keep.txt").read_text() == "keep me"


def test_another_users_file_in_a_sticky_directory_is_not_truncated(run_jail, world_tmp, as_user):
    d = world_tmp.dir(0o1777)
    os.chown(d, 1, 1)  # a third user's shared directory (the kernel's rule trusts its owner)
    theirs = world_tmp.file("report.json", "theirs, keep me", dir=d, mode=0o666)
    chown_to(theirs, other_user(as_user))
    r = run_bounded(run_jail, ["--report", str(theirs), "--", "python3", "-c", "print(1)"],
                    user=as_user)
    assert r.returncode == 125 and r.stdout == "", describe(r)
    assert r.stderr.startswith(
        f"pyjail: report: refusing to write {theirs}: it belongs to uid {other_user(as_user)} and "
        "lies in a sticky directory others can write"), describe(r)
    assert theirs.read_text() == "theirs, keep me"


def test_a_report_is_still_written_and_truncated_where_it_should_be(run_jail, world_tmp, as_user):
    d = world_tmp.dir(0o1777)
    mine = d / "report.json"
    r = run_bounded(run_jail, ["--report", str(mine), "--", "python3", "-c", "print(1)"],
                    user=as_user)
    assert r.returncode == 0, describe(r)
    assert json.loads(mine.read_text())["status"] == "ok"
    # Again, over the previous (longer) report that the same user wrote: replaced whole.
    mine.write_text(mine.read_text() + " " * 10000)
    r = run_bounded(run_jail, ["--report", str(mine), "--", "python3", "-c", "print(1)"],
                    user=as_user)
    assert r.returncode == 0, describe(r)
    assert json.loads(mine.read_text())["status"] == "ok"


# --------------------------------------------------------------------------------------------
# pyjail's own data


def data_dirs(run_jail, user) -> tuple[Path, Path]:
    """The profiles directory and rootfs the tested binary uses, from --explain."""
    r = run_jail(["--explain", "--", "python3", "-c", "pass"], user=user)
    assert r.returncode == 0, describe(r)
    rootfs = profile = None
    for line in r.stdout.splitlines():
        if line.startswith("rootfs = "):
            rootfs = Path(json.loads(line.split("=", 1)[1].split("#", 1)[0].strip()))
        if "profile (" in line and "strict.toml:" in line:
            profile = Path(line.split("profile (", 1)[1].split("strict.toml:", 1)[0])
    assert rootfs and profile, r.stdout
    return profile, rootfs


def copy_install(pyjail_bin, world_tmp, profiles: Path, rootfs: Path) -> Path:
    """A relocated installation: bin/pyjail, share/pyjail/profiles, lib/pyjail/rootfs (a link)."""
    prefix = world_tmp.dir() / "install"
    (prefix / "bin").mkdir(parents=True)
    shutil.copy2(pyjail_bin, prefix / "bin/pyjail")
    shutil.copytree(profiles, prefix / "share/pyjail/profiles")
    (prefix / "lib/pyjail").mkdir(parents=True)
    (prefix / "lib/pyjail/rootfs").symlink_to(rootfs)
    return prefix / "bin/pyjail"


def test_a_copy_of_the_binary_never_falls_back_to_the_build_tree(pyjail_bin, world_tmp, as_user):
    copy = world_tmp.dir() / "pyjail"
    shutil.copy2(pyjail_bin, copy)
    r = subprocess.run([*as_user.prefix, str(copy), "--explain", "--", "python3", "-c", "pass"],
                       capture_output=True, text=True, timeout=60, cwd="/")
    assert r.returncode == 125 and r.stdout == "", describe(r)
    assert r.stderr.startswith(f"pyjail: data: {copy} finds no profiles next to it "), describe(r)
    assert "(run an installed pyjail (cmake --install), or the build's own binary)" in r.stderr


@pytest.mark.parametrize("writable", ["profiles directory", "profile file"])
def test_data_that_others_can_write_is_refused(pyjail_bin, run_jail, world_tmp, as_user, writable):
    """Whoever can write the profiles chooses every jail's binds, network and filter."""
    profiles, rootfs = data_dirs(run_jail, as_user)
    binary = copy_install(pyjail_bin, world_tmp, profiles, rootfs)
    data = binary.parents[1] / "share/pyjail/profiles"
    strict = data / "strict.toml"
    # The other user's plant: the default profile now hands the jail a variable of theirs.
    strict.write_text(strict.read_text().replace("env = []", 'env = ["PLANTED=yes"]'))
    if writable == "profiles directory":
        os.chmod(data, 0o777)
        why = f"{data} is writable by everyone"
    else:
        os.chmod(strict, 0o666)
        why = f"refusing {strict}: it is writable by everyone"
    r = subprocess.run([*as_user.prefix, str(binary), "--", "python3", "-c",
                        "import os; print(os.environ.get('PLANTED'))"],
                       capture_output=True, text=True, timeout=60, cwd="/")
    assert "yes" not in r.stdout, describe(r)
    assert r.returncode == 125, describe(r)
    assert why in r.stderr, describe(r)
    assert r.stderr.startswith("pyjail: data: refusing "), describe(r)


# The data directories are checked one walk after another, each going on from the directories
# the walks before it checked (hostopen.hpp, TrustedWalks): a directory only a later walk
# reaches is still checked, and so is a shared one made writable.
@pytest.mark.parametrize("writable", ["share/pyjail", "share/pyjail/profiles/seccomp",
                                      "share/pyjail/profiles/seccomp/compiled", "lib/pyjail"])
def test_every_data_directory_on_the_way_is_checked(pyjail_bin, run_jail, world_tmp, as_user, writable):
    profiles, rootfs = data_dirs(run_jail, as_user)
    binary = copy_install(pyjail_bin, world_tmp, profiles, rootfs)
    place = binary.parents[1] / writable
    place.mkdir(parents=True, exist_ok=True)
    os.chmod(place, 0o777)
    r = subprocess.run([*as_user.prefix, str(binary), "--", "python3", "-c", "print('ran')"],
                       capture_output=True, text=True, timeout=60, cwd="/")
    assert r.returncode == 125 and r.stdout == "", describe(r)
    assert r.stderr.startswith("pyjail: data: refusing "), describe(r)
    assert f"{place} is writable by everyone" in r.stderr, describe(r)


def test_a_relocated_trusted_copy_still_runs(pyjail_bin, run_jail, world_tmp, as_user):
    profiles, rootfs = data_dirs(run_jail, as_user)
    binary = copy_install(pyjail_bin, world_tmp, profiles, rootfs)
    r = subprocess.run([*as_user.prefix, str(binary), "--", "python3", "-c", "print('copy ran')"],
                       capture_output=True, text=True, timeout=60, cwd="/")
    assert r.returncode == 0 and r.stdout == "copy ran\n", describe(r)
