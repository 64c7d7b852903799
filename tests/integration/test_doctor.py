"""pyjail doctor: on this host, with user namespaces turned off (in a user namespace of the
test's own, never on the host), and with a damaged rootfs."""

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest


def doctor(pyjail_bin, user, *args, prefix=(), cwd="/", env=None):
    return subprocess.run([*prefix, *user.prefix, str(pyjail_bin), "doctor", *args],
                          capture_output=True, text=True, timeout=60, cwd=str(cwd),
                          env=None if env is None else {**os.environ, **env})


def test_doctor_on_this_host(pyjail_bin, as_user, world_tmp):
    # From a project directory: standard and batch bind the current directory, and refuse /.
    r = doctor(pyjail_bin, as_user, cwd=world_tmp.dir())
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    status = {line[6:22].strip(): line[:5].strip() for line in lines if line[:5].strip() in
              ("ok", "warn", "FAIL")}
    assert status["kernel"] == "ok"
    assert status["user namespaces"] == "ok"
    assert status["seccomp"] == "ok"
    assert status["rootfs"] == "ok"
    assert status["seccomp filters"] == "ok"
    assert status["profile strict"] == "ok"
    assert status["profiles"] == "ok"
    assert "batch, repl, standard, strict plan here" in r.stdout
    assert status["cgroup v2"] in ("ok", "warn")
    if status["cgroup v2"] == "warn":  # say why, and how to get one
        assert "fix: " in r.stdout
    assert lines[-1] == "=> --profile strict can run here."


def test_doctor_from_home_says_once_that_binding_profiles_refuse_it(pyjail_bin, as_user, world_tmp):
    """From the home directory, standard and batch (which bind the current directory) refuse to
    run: that is where the doctor was started, not a fault of the host, so it says so once, as
    a fact of this directory, and the profiles still plan (it warned, a message per profile)."""
    home = world_tmp.dir(0o755)
    if os.geteuid() == 0:
        os.chown(home, as_user.invoker_uid, as_user.invoker_uid)
    r = doctor(pyjail_bin, as_user, "--json", cwd=home, env={"HOME": str(home)})
    assert r.returncode == 0, r.stdout + r.stderr
    check = next(c for c in json.loads(r.stdout)["checks"] if c["check"] == "profiles")
    assert check["status"] == "ok", check
    assert check["detail"] == (f"batch, repl, standard, strict plan here; batch and standard bind the current "
                               f"directory, and refuse this one: {home} is your home directory: the jail would "
                               f"see every file there and reach its Unix sockets (run them from a project "
                               f"directory)"), check
    # From a project directory nothing of the kind is said.
    r = doctor(pyjail_bin, as_user, "--json", cwd=world_tmp.dir(), env={"HOME": str(home)})
    check = next(c for c in json.loads(r.stdout)["checks"] if c["check"] == "profiles")
    assert check == {"check": "profiles", "status": "ok", "detail": "batch, repl, standard, strict plan here",
                     "fix": ""}


def test_doctor_json(pyjail_bin, as_user):
    r = doctor(pyjail_bin, as_user, "--json")
    assert r.returncode == 0
    doc = json.loads(r.stdout)
    assert doc["strict_can_run"] is True
    names = [c["check"] for c in doc["checks"]]
    assert names[:3] == ["kernel", "user namespaces", "seccomp"]
    assert all(c["status"] in ("ok", "warn", "fail") for c in doc["checks"])


def test_without_user_namespaces_doctor_names_the_sysctl(pyjail_bin, current_user):
    if shutil.which("unshare") is None:
        pytest.skip("no unshare(1)")
    # A user namespace of our own whose limit of nested user namespaces is 0.
    r = subprocess.run(["unshare", "-Ur", "sh", "-c",
                        'echo 0 > /proc/sys/user/max_user_namespaces && exec "$0" doctor',
                        str(pyjail_bin)], capture_output=True, text=True, timeout=60, cwd="/")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "FAIL  user namespaces  cannot create one" in r.stdout
    assert "fix: user namespaces are disabled: sysctl -w user.max_user_namespaces=" in r.stdout
    assert r.stdout.splitlines()[-1] == "=> --profile strict cannot run here; fix the FAILs above."


def test_a_damaged_rootfs_fails_the_check(pyjail_bin, as_user):
    # A copy of the installed tree, with one file of the rootfs changed.
    prefix = Path(pyjail_bin).resolve().parents[1]
    if not (prefix / "share" / "pyjail").is_dir():
        pytest.skip("pyjail is not an installed copy (run through tests/run.sh)")
    top = Path(tempfile.mkdtemp(prefix="pyjail-doctor-"))
    try:
        os.chmod(top, 0o755)
        copy = top / "prefix"
        # Without the named rootfses (the data one is 600 MiB): the default one is checked.
        shutil.copytree(prefix, copy, symlinks=True, ignore=shutil.ignore_patterns("rootfs.d"))
        victim = next((copy / "lib").glob("**/rootfs/usr/lib/python3*/json/__init__.py"))
        os.chmod(victim, 0o644)
        victim.write_text(victim.read_text() + "\n# changed\n")
        r = doctor(copy / "bin" / "pyjail", as_user)
        assert r.returncode == 1, r.stdout
        assert "FAIL  rootfs" in r.stdout and "files differ from its manifest" in r.stdout
        assert "json/__init__.py" in r.stdout
    finally:
        shutil.rmtree(top)


def test_the_manifest_check_needs_no_tool_and_follows_no_link(pyjail_bin, as_user, world_tmp):
    """doctor --rootfs checks a rootfs's manifest itself: with no sha256sum on PATH it still
    finds a changed file, and a file swapped for a symbolic link (to a host file) fails
    without being read through the link."""
    r = doctor(pyjail_bin, as_user, "--json")
    rootfs = Path(next(c for c in json.loads(r.stdout)["checks"] if c["check"] == "rootfs")["detail"].split(":")[0])
    copy = world_tmp.dir() / "rootfs"
    shutil.copytree(rootfs, copy, symlinks=True)
    no_tools = ("env", "PATH=/nonexistent")
    r = doctor(pyjail_bin, as_user, "--rootfs", str(copy), prefix=no_tools)
    assert f"ok    rootfs {copy}" in r.stdout, r.stdout
    victim = next(copy.glob("usr/lib/python3*/json/decoder.py"))
    victim.unlink()
    victim.symlink_to("/etc/passwd")
    r = doctor(pyjail_bin, as_user, "--rootfs", str(copy), prefix=no_tools)
    assert r.returncode == 1, r.stdout
    assert "json/decoder.py: Too many levels of symbolic links" in r.stdout
    # The manifest itself swapped for a link to a file only root reads: doctor run by root
    # used to follow it and print the file's first line as "a malformed manifest line".
    secret = world_tmp.dir() / "secret"
    secret.write_text("SECRET-first-line-of-a-root-only-file\n")
    os.chmod(secret, 0o600)
    manifest = copy / "etc/pyjail-manifest.sha256"
    manifest.unlink()
    manifest.symlink_to(secret)
    r = doctor(pyjail_bin, as_user, "--rootfs", str(copy), prefix=no_tools)
    assert r.returncode == 1, r.stdout
    assert "SECRET" not in r.stdout + r.stderr
    assert "cannot read etc/pyjail-manifest.sha256: Too many levels of symbolic links" in r.stdout
    # A manifest larger than any a builder writes is not read into memory.
    manifest.unlink()
    with open(manifest, "wb") as f:
        f.truncate(65 << 20)
    r = doctor(pyjail_bin, as_user, "--rootfs", str(copy), prefix=no_tools)
    assert r.returncode == 1 and "more than a manifest takes" in r.stdout, r.stdout


def test_a_rootfs_the_jail_cannot_reach_fails_the_check(pyjail_bin, as_user, world_tmp, jail_rootfs):
    """doctor may run as root, who reads any rootfs; a jail opens it as its host user. The
    check says FAIL with the reason a run would give, not ok."""
    private = world_tmp.dir(0o700)
    link = private / "rootfs"
    link.symlink_to(jail_rootfs)
    r = doctor(pyjail_bin, as_user, "--rootfs", str(link))
    assert r.returncode == 1, r.stdout
    lines = r.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(f"FAIL  rootfs {link} "))
    if as_user.is_root:
        assert lines[at].endswith(f"a jail cannot use it: rootfs bind: cannot open {link}: Permission denied")
        assert lines[at + 1].endswith(", the jail's host user, cannot reach the rootfs: install it (cmake --install "
                                      "build), or make every directory on its path searchable by that user (chmod o+x)")
    else:
        assert lines[at].endswith(f"a jail cannot use it: rootfs: cannot open rootfs {link}: Permission denied")
        assert "fix: you cannot reach it: install it (cmake --install build)" in lines[at + 1]
    # The default rootfs, which it can reach, still checks out.
    assert any(line.startswith("ok    rootfs  ") for line in lines), r.stdout


def test_doctor_refuses_unknown_arguments(pyjail_bin, as_user):
    r = doctor(pyjail_bin, as_user, "--frob")
    assert r.returncode == 125
    assert r.stderr == ("pyjail: doctor: unknown argument '--frob' (usage: pyjail doctor "
                        "[--json] [--rootfs NAME|DIR])\n")


def test_a_rootfs_asked_about_fails_alone(pyjail_bin, as_user):
    # A --rootfs that cannot be used fails doctor, but does not make the host unfit for strict.
    r = doctor(pyjail_bin, as_user, "--rootfs", "/nonexistent")
    assert r.returncode == 1, r.stdout
    lines = r.stdout.splitlines()
    assert lines[-1] == ("=> --profile strict can run here, but not with --rootfs /nonexistent; "
                         "fix the FAILs above."), r.stdout
    fail = next(line for line in lines if line.startswith("FAIL"))
    ok = next(line for line in lines if line.startswith("ok    profile strict"))
    # The details start in one column, however long a check's name.
    assert fail.index("a jail cannot use it") == ok.index("ran python3"), r.stdout
    doc = json.loads(doctor(pyjail_bin, as_user, "--rootfs", "/nonexistent", "--json").stdout)
    assert doc["strict_can_run"] is True
    assert [c["status"] for c in doc["checks"] if c["check"] == "rootfs /nonexistent"] == ["fail"]
