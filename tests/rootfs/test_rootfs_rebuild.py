"""Security updates reach the jail: `pyjail rootfs info` and `pyjail doctor` say when the host
files a rootfs was built from changed, `pyjail rootfs rebuild` builds it again in place while
jails keep running in the old tree; and the bad inputs of package builds (--allow-build, missing
dependencies, conflicts, outputs that are not ours), each one line, exit 125, nothing left.

No Debian package is really upgraded: the builds read a dpkg database of the test's own
(DPKG_ADMINDIR, which the builder honours as dpkg does) that claims the host's dash and python3
binaries, and the test changes a version there. Packages are tiny wheels and sdists made here
(tiny_packages.py), installed with --no-index --find-links: no network.

Environment: as test_rootfs_command.py (PYJAIL_BIN, PYJAIL_MUST_WORK).
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_rootfs_command import (  # noqa: E402,F401  (fixtures are used by name)
    REPO, TARGET_PYTHON, UNPRIVILEGED, as_user, binary, current, describe, skip_or_fail,
    stderr_of, users, world_dir)
from tiny_packages import make_sdist, make_wheel  # noqa: E402

sys.path.insert(0, str(REPO / "rootfs"))
import rootfs_rebuild  # noqa: E402

SOURCES = "etc/pyjail-rootfs.sources.json"


def run(binary, user, *args, env=None, timeout=300, cwd="/"):
    full = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(user.home),
            "LANG": "C.UTF-8"}
    full.update(env or {})
    return subprocess.run([*user.prefix, str(binary), *map(str, args)], cwd=cwd, env=full,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=timeout)


def one_error(r, pattern):
    """Exit 125 and exactly one line on stderr, matching `pattern`."""
    assert r.returncode == 125, describe(r)
    lines = stderr_of(r).splitlines()
    assert len(lines) == 1, r.stderr
    assert re.match("^pyjail rootfs: " + pattern, lines[0]), lines[0]


def manifest(root):
    return (Path(root) / "etc/pyjail-manifest.sha256").read_bytes()


class FakeDpkg:
    """A dpkg database claiming two of the host's files, at versions the test chooses."""

    def __init__(self, top):
        self.dir = top / "dpkg"
        (self.dir / "info").mkdir(parents=True)
        self.owned = {"fakedash": os.path.realpath("/usr/bin/dash"),
                      "fakepython": os.path.realpath(TARGET_PYTHON)}
        for package, path in self.owned.items():
            (self.dir / "info" / (package + ".list")).write_text("/.\n%s\n" % path)
        self.versions = {"fakedash": "1.0", "fakepython": "1.0"}
        self.write()

    def write(self):
        (self.dir / "status").write_text("".join(
            "Package: %s\nStatus: install ok installed\nArchitecture: amd64\nVersion: %s\n\n"
            % kv for kv in sorted(self.versions.items())))

    def upgrade(self, package, version):
        self.versions[package] = version
        self.write()

    @property
    def env(self):
        return {"DPKG_ADMINDIR": str(self.dir)}


def rootfs_line(doctor_out, path):
    return next(l for l in doctor_out.splitlines() if l.split()[1:3] == ["rootfs", str(path)])


def test_an_upgrade_is_reported_and_rebuild_refreshes_while_a_jail_runs(binary, users, as_user):
    if not os.path.exists("/usr/bin/dash"):
        skip_or_fail("no /usr/bin/dash on this host")
    builder = current(users)
    top = world_dir()
    try:
        dpkg = FakeDpkg(top)
        root = top / "r"
        r = run(binary, builder, "rootfs", "build", "--out", root, "--quiet", env=dpkg.env)
        assert r.returncode == 0, describe(r)
        rec = json.loads((root / SOURCES).read_text())
        assert rec["packages"] == {"fakedash": {"version": "1.0", "files": 1},
                                   "fakepython": {"version": "1.0", "files": 1}}
        # Files no package owns (here: all the others) are recorded by their hash.
        libc = next(p for p in rec["files"] if re.search(r"/libc\.so\.6$", p))
        assert rec["files"][libc] == subprocess.run(
            ["sha256sum", libc], stdout=subprocess.PIPE, universal_newlines=True,
            check=True).stdout.split()[0]
        r = run(binary, builder, "rootfs", "info", root, env=dpkg.env)
        assert re.search(r"^sources +as built \(2 Debian packages, \d+ files by hash\)$",
                         r.stdout, re.M), r.stdout
        r = run(binary, builder, "doctor", "--rootfs", root, env=dpkg.env)
        assert rootfs_line(r.stdout, root).startswith("ok "), r.stdout

        dpkg.upgrade("fakepython", "1.1")     # what `apt-get upgrade` did to the host
        r = run(binary, builder, "rootfs", "info", root, env=dpkg.env)
        assert r.returncode == 0, describe(r)
        assert "sources      CHANGED on the host since the build (rebuild it: pyjail rootfs " \
               "rebuild %s)\n  package fakepython was 1.0, now 1.1\n" % root in r.stdout
        r = run(binary, builder, "rootfs", "info", "--json", root, env=dpkg.env)
        assert json.loads(r.stdout)["sources"]["changes"] == [
            "package fakepython was 1.0, now 1.1"]
        r = run(binary, builder, "doctor", "--rootfs", root, env=dpkg.env)
        line = rootfs_line(r.stdout, root)
        assert line.startswith("warn ") and line.endswith(
            "files match the manifest, but its sources changed on the host since the build: "
            "package fakepython was 1.0, now 1.1"), r.stdout
        assert "fix: pyjail rootfs rebuild %s " % root in r.stdout

        # A jail started before the rebuild: it imports and reads the rootfs after it. Attack:
        # it holds a lock on its / (the tree), which a build waited for, for as long as the
        # jail liked.
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(as_user.home),
               "LANG": "C.UTF-8"}
        code = ("import fcntl, os, sys\nfcntl.flock(os.open('/', os.O_RDONLY), fcntl.LOCK_EX)\n"
                "print('started', flush=True)\nsys.stdin.readline()\n"
                "import json, decimal, sqlite3, email.mime.text, zoneinfo\n"
                "print(json.load(open('/%s'))['packages']['fakepython']['version'])\n" % SOURCES)
        jail = subprocess.Popen([*as_user.prefix, str(binary), "--profile", "strict",
                                 "--rootfs", str(root), "--", "python3", "-c", code],
                                cwd="/", env=env, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                universal_newlines=True)
        try:
            assert jail.stdout.readline() == "started\n"
            r = run(binary, builder, "rootfs", "rebuild", root, env=dpkg.env, timeout=120)
            assert r.returncode == 0, describe(r)
            kept = [p for p in top.iterdir() if p.name.startswith("r.pyjail-old-")]
            assert len(kept) == 1 and re.fullmatch(r"r\.pyjail-old-[a-z0-9_]{8}",
                                                   kept[0].name), \
                list(top.iterdir())
            assert "the previous tree is kept as %s for the jails still running in it" \
                % kept[0] in r.stdout
            out, err = jail.communicate("go\n", timeout=60)
        finally:
            if jail.poll() is None:
                jail.kill()
                jail.wait()
        assert jail.returncode == 0, err
        assert out == "1.0\n", err      # it ran in the tree it started in, whole

        assert json.loads((root / SOURCES).read_text())["packages"]["fakepython"] == {
            "version": "1.1", "files": 1}
        r = run(binary, builder, "rootfs", "info", root, env=dpkg.env)
        assert re.search(r"^sources +as built ", r.stdout, re.M), r.stdout
        r = run(binary, builder, "doctor", "--rootfs", root, env=dpkg.env)
        assert rootfs_line(r.stdout, root).startswith("ok "), r.stdout
        r = run(binary, builder, "rootfs", "rebuild", "--if-stale", root, env=dpkg.env)
        assert r.returncode == 0 and r.stdout == \
            "rootfs: %s: its sources are as built, nothing to do\n" % root, describe(r)
        # The jail has ended: the next rebuild deletes the kept tree; the same inputs give the
        # same tree.
        before = manifest(root)
        r = run(binary, builder, "rootfs", "rebuild", root, env=dpkg.env)
        assert r.returncode == 0, describe(r)
        assert sorted(p.name for p in top.iterdir()) == ["dpkg", "r"], describe(r)
        assert manifest(root) == before
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_a_users_backups_beside_a_rootfs_survive_its_builds(binary, as_user):
    # Data loss: a build or rebuild of DIR removed every directory of the user's named
    # DIR.old-XXXXXXXX, DIR.tmp-XXXXXXXX or DIR.pip-XXXXXXXX beside it as its own leftover, and
    # `cp -a data data.old-20240101` is how people keep a backup. The builder's own names carry
    # .pyjail- now; those of earlier versions are only pointed out, never removed.
    top = world_dir()
    owner = UNPRIVILEGED if as_user.name != "root" and os.geteuid() == 0 else os.geteuid()

    def mine(path):
        if os.geteuid() == 0:
            for p in [path, *path.rglob("*")]:
                os.chown(p, owner, owner, follow_symlinks=False)

    try:
        mine(top)
        data = top / "data"
        notes = top / "data.old-20240101"
        notes.mkdir()
        (notes / "notes.txt").write_text("mine\n")
        mine(notes)
        r = run(binary, as_user, "rootfs", "build", "--out", data)
        assert r.returncode == 0, describe(r)
        assert (notes / "notes.txt").read_text() == "mine\n", describe(r)

        # A whole copy of the tree, and one moved aside and built again, as backups go.
        subprocess.run(["cp", "-a", str(data), str(top / "data.old-20241201")], check=True)
        mine(top / "data.old-20241201")
        os.rename(data, top / "data.tmp-2024_dec")
        r = run(binary, as_user, "rootfs", "build", "--out", data)
        assert r.returncode == 0, describe(r)
        # What a build of this version left when it was killed is still removed.
        leftover = top / "data.pyjail-tmp-abcd_123"
        leftover.mkdir()
        (leftover / "half").write_text("x\n")
        mine(leftover)
        r = run(binary, as_user, "rootfs", "rebuild", data)
        assert r.returncode == 0, describe(r)
        assert sorted(p.name for p in top.iterdir()) == [
            "data", "data.old-20240101", "data.old-20241201", "data.tmp-2024_dec"], describe(r)
        assert (notes / "notes.txt").read_text() == "mine\n"
        for kept in ("data.old-20241201", "data.tmp-2024_dec"):
            r2 = subprocess.run(["sha256sum", "-c", "--strict", "--quiet",
                                 "etc/pyjail-manifest.sha256"], cwd=str(top / kept))
            assert r2.returncode == 0, kept
        assert "removed %s, left by a build of data that was killed" % leftover in r.stdout
        # Said once, in one line, naming them.
        said = [l for l in r.stdout.splitlines() if "data.old-20240101" in l]
        assert said == ["build-rootfs: %s, %s and %s: named as earlier versions of pyjail named "
                        "what a build leaves beside data, which a build no longer removes (they "
                        "may be backups of yours); remove them by hand if they are such "
                        "leftovers" % (notes, top / "data.old-20241201",
                                       top / "data.tmp-2024_dec")], r.stdout
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_changed_files_no_package_owns_are_reported(tmp_path):
    """With no dpkg database claiming anything, every host file is recorded by hash: a changed
    one, and a changed copy of pyjail's session server, are named; a rebuild takes the new
    server. The builder runs from a copy here (the server it copies sits next to it)."""
    lib = tmp_path / "lib"
    lib.mkdir()
    for f in (REPO / "rootfs").glob("*.py"):
        shutil.copy(f, lib)
    for module in ("server", "spawn", "wire"):
        shutil.copy(REPO / f"python/pyjail/_{module}.py", lib / f"pyjail_{module}.py")
    (tmp_path / "dpkg").mkdir()
    env = dict(os.environ, DPKG_ADMINDIR=str(tmp_path / "dpkg"))

    def builder(*args):
        return subprocess.run([sys.executable, str(lib / "build-rootfs.py"), *map(str, args)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True, env=env, timeout=300)

    def state(root):
        r = builder("sources", root)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    root = tmp_path / "r"
    r = builder("--out", root, "--python", TARGET_PYTHON, "--quiet")
    assert r.returncode == 0, r.stderr
    rec = json.loads((root / SOURCES).read_text())
    assert rec["packages"] == {} and len(rec["files"]) > 100
    assert state(root)["state"] == "fresh"
    with open(lib / "pyjail_server.py", "a") as f:
        f.write("# a newer pyjail\n")
    assert state(root) == {"state": "stale",
                           "changes": ["1 file differs (pyjail's pyjail_server.py)"],
                           "summary": "changed on the host since the build: 1 file differs "
                                      "(pyjail's pyjail_server.py)"}
    # A host file changed since the build: as if its recorded hash were another.
    changed = root / SOURCES
    text = changed.read_text()
    libc = next(p for p in rec["files"] if p.endswith("/libc.so.6"))
    changed.write_text(text.replace(rec["files"][libc], "0" * 64))
    assert state(root)["changes"] == [
        "2 files differ (%s, pyjail's pyjail_server.py)" % libc]
    r = builder("rebuild", "--quiet", root)
    assert r.returncode == 0, r.stderr
    assert state(root)["state"] == "fresh"
    assert (root / "usr/lib/pyjail/pyjail_server.py").read_text().endswith("# a newer pyjail\n")


# --------------------------------------------------------------- packages, rebuilds


@pytest.fixture(scope="module")
def links():
    """A --find-links directory: tinyapp (needs tinydep), tinysdist (source only), tinybroken
    (a source that fails to build), needsmissing (needs what is nowhere), wantsold (conflicts
    with tinyapp's need of tinydep >= 1.0)."""
    d = world_dir()
    make_wheel(d, "tinydep", "1.0", code="def answer():\n    return 42\n")
    make_wheel(d, "tinydep", "0.5", code="def answer():\n    return 0\n")
    make_wheel(d, "tinyapp", "2.0", code="import tinydep\nVALUE = tinydep.answer()\n",
               requires=["tinydep>=1.0"])
    make_sdist(d, "tinysdist", "3.0", code="VALUE = 'built here'\n")
    make_sdist(d, "tinybroken", "1.0", fail=True)
    make_wheel(d, "needsmissing", "1.0", requires=["missingdep"])
    make_wheel(d, "wantsold", "1.0", requires=["tinydep<1.0"])
    for f in d.iterdir():
        os.chmod(f, 0o644)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_rebuild_by_name_installs_the_locked_wheels_again(binary, users, links):
    user = current(users)
    name = "t-rebuild-" + uuid.uuid4().hex[:8]
    r = run(binary, user, "rootfs", "build", "--name", name, "--pip", "tinyapp", "--no-index",
            "--find-links", links, "--quiet")
    assert r.returncode == 0, describe(r)
    path = Path(r.stdout.split(": ")[1])
    try:
        lock, before = (path / "etc/pyjail-rootfs.lock.json").read_bytes(), manifest(path)
        assert json.loads((path / SOURCES).read_text())["inputs"]["find_links"] == [str(links)]
        r = run(binary, user, "rootfs", "rebuild", name, "--quiet")
        assert r.returncode == 0, describe(r)
        assert r.stdout == "rootfs: %s: " % path + r.stdout.split(": ", 2)[2]
        assert (path / "etc/pyjail-rootfs.lock.json").read_bytes() == lock
        assert manifest(path) == before
        r = run(binary, user, "--profile", "strict", "--rootfs", name, "--", "python3", "-c",
                "import tinyapp; print(tinyapp.VALUE)")
        assert r.returncode == 0 and r.stdout == "42\n", describe(r)
        # Its wheels are gone: the rebuild fails, and the tree is untouched, nothing beside it.
        moved = links.with_name(links.name + "-moved")
        links.rename(moved)
        try:
            r = run(binary, user, "rootfs", "rebuild", name)
        finally:
            moved.rename(links)
        one_error(r, r"--find-links %s: no such directory \(give a directory of wheels"
                  % re.escape(str(links)))
        assert manifest(path) == before
        assert sorted(p.name for p in path.parent.iterdir() if p.name.startswith(name)) == [name]
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_allow_build_builds_an_sdist_outside_the_rootfs(binary, users, links, as_user):
    top = world_dir()
    try:
        out = top / "r"
        r = run(binary, current(users), "rootfs", "build", "--out", out, "--pip", "tinysdist",
                "tinyapp", "--no-index", "--find-links", links, "--quiet")
        one_error(r, r"requirement tinysdist: it has only source distributions "
                     r"\(tinysdist-3\.0\.tar\.gz\), .*, or pass --allow-build to let pip build "
                     r"it in the jail\)$")
        assert list(top.iterdir()) == []
        r = run(binary, current(users), "rootfs", "build", "--out", out, "--pip", "tinysdist",
                "tinyapp", "--no-index", "--find-links", links, "--allow-build", "--quiet")
        assert r.returncode == 0, describe(r)
        assert sorted(p.name for p in top.iterdir()) == ["r"]
        lock = json.loads((out / "etc/pyjail-rootfs.lock.json").read_text())
        built = {p["name"]: p.get("built", False) for p in lock["packages"]}
        assert built == {"tinysdist": True, "tinyapp": False, "tinydep": False}
        r = run(binary, as_user, "--profile", "strict", "--rootfs", out, "--", "python3", "-c",
                "import tinysdist, tinyapp; print(tinysdist.VALUE, tinyapp.VALUE)")
        assert r.returncode == 0 and r.stdout == "built here 42\n", describe(r)
    finally:
        shutil.rmtree(top, ignore_errors=True)


BAD_PACKAGES = {
    "sdist-build-fails": (["--pip", "tinybroken", "--allow-build"],
                          r"--allow-build: building tinybroken-1\.0: its build failed \(in the "
                          r"jail\): RuntimeError: tiny backend: this package does not build, "
                          r"on purpose \(use a version that has a wheel"),
    "missing-dependency": (["--pip", "needsmissing"],
                           r"requirement missingdep \(needed by needsmissing\): no such project "
                           r"on the index or in the --find-links directories \(check the name"),
    "conflict": (["--pip", "wantsold", "tinyapp"],
                 r"requirements: Cannot install .*(wantsold|tinyapp).* because these package "
                 r"versions have conflicting dependencies\. \(loosen the conflicting version "
                 r"pins\)$"),
}


@pytest.mark.parametrize("case", sorted(BAD_PACKAGES))
def test_bad_packages(binary, users, links, case):
    args, message = BAD_PACKAGES[case]
    top = world_dir()
    try:
        r = run(binary, current(users), "rootfs", "build", "--out", top / "r", "--no-index",
                "--find-links", links, *args, "--quiet")
        one_error(r, message)
        assert r.stdout == "" and list(top.iterdir()) == [], "left behind"
    finally:
        shutil.rmtree(top, ignore_errors=True)


# ---------------------------------------------------------------------- bad outputs


def test_output_that_is_a_file(binary, users):
    top = world_dir()
    try:
        (top / "file").write_text("keep me")
        r = run(binary, current(users), "rootfs", "build", "--out", top / "file", "--quiet")
        one_error(r, r"output \S+/file: exists and is not a directory \(remove it or choose "
                     r"another --out\)$")
        assert sorted(p.name for p in top.iterdir()) == ["file"]
        assert (top / "file").read_text() == "keep me"
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_output_that_belongs_to_another_user(binary, users):
    """An earlier rootfs of another user: not replaced (root would leave root's files in the
    user's directory; a user cannot replace root's)."""
    if os.geteuid() != 0:
        skip_or_fail("needs root, to make a directory of another user")
    top = world_dir()
    try:
        theirs = top / "theirs"
        (theirs / "etc").mkdir(parents=True)
        (theirs / "etc/pyjail-rootfs").write_text('NAME="pyjail rootfs"\n')
        os.chown(theirs, UNPRIVILEGED, UNPRIVILEGED)
        r = run(binary, current(users), "rootfs", "build", "--out", theirs, "--quiet")
        one_error(r, r"output %s: belongs to uid %d, not to you \(uid 0\) \(build it as its "
                     r"owner, or choose another --out or --name\)$"
                  % (re.escape(str(theirs)), UNPRIVILEGED))
        assert sorted(p.name for p in top.iterdir()) == ["theirs"]
        assert sorted(p.name for p in theirs.iterdir()) == ["etc"]
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_rebuild_bad_input(binary, users):
    user = current(users)
    r = run(binary, user, "rootfs", "rebuild", "no-such-rootfs")
    assert r.returncode == 125
    lines = stderr_of(r).splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "pyjail: rootfs: no rootfs named 'no-such-rootfs'"), r.stderr
    r = run(binary, user, "rootfs", "rebuild")
    one_error(r, r"command line: name the rootfs to rebuild, or pass --all")
    top = world_dir()
    try:
        # Built before rebuilds existed: nothing says how to build it again.
        old = top / "old"
        (old / "etc").mkdir(parents=True)
        (old / "etc/pyjail-rootfs").write_text('NAME="pyjail rootfs"\n')
        r = run(binary, user, "rootfs", "rebuild", old)
        one_error(r, r"rebuild %s: it does not record how it was built \(its builder predates "
                     r"rebuilds\) \(build it again with pyjail rootfs build" % re.escape(str(old)))
        r = run(binary, user, "rootfs", "rebuild", top)
        one_error(r, r"rootfs %s: not a rootfs built by pyjail" % re.escape(str(top)))
        assert sorted(p.name for p in top.iterdir()) == ["old"]
    finally:
        shutil.rmtree(top, ignore_errors=True)


# ------------------------------------------------------------------ the upgrade hook


def exchange(a, b):
    """Swaps two paths on one filesystem in one step (renameat2 with RENAME_EXCHANGE)."""
    libc = ctypes.CDLL(None, use_errno=True)
    at_fdcwd, rename_exchange = -100, 2
    if libc.renameat2(at_fdcwd, os.fsencode(str(a)), at_fdcwd, os.fsencode(str(b)),
                      rename_exchange) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), str(a))


def test_the_apt_hook_rebuilds_the_installed_default_rootfs(binary, users):
    """The shipped apt hook's command, run after a (simulated) upgrade, rebuilds the default
    rootfs installed with the binary; run again, it finds nothing to do."""
    user = current(users)
    hook = binary.parent.parent / "share/pyjail/upgrade-hooks/apt-pyjail-rootfs"
    if not hook.is_file():
        skip_or_fail("no %s: PYJAIL_BIN is not an installed pyjail" % hook)
    text = hook.read_text()
    if shutil.which("apt-config"):
        r = subprocess.run(["apt-config", "-c", str(hook), "dump"], stdout=subprocess.PIPE,
                           universal_newlines=True, check=True)
        assert "rootfs rebuild --if-stale --all" in r.stdout
    command = re.search(r'^DPkg::Post-Invoke \{ "(.*)"; \};$', text, re.M).group(1)
    installed = re.search(r"-x (\S+) \]", command).group(1)
    command = command.replace(installed, str(binary))
    r = run(binary, user, "rootfs", "info", "--json", "default")
    default = Path(json.loads(r.stdout)["rootfs"])
    if default.stat().st_uid != os.geteuid():
        skip_or_fail("the installed default rootfs is not this user's to rebuild")
    top = world_dir()
    # The default rootfs as installed, kept as hard links (instant, no copy): the rebuild
    # makes a new tree and swaps it in, so these stay as they were, and putting them back
    # afterwards spares a second full rebuild just to return to this host's own database.
    # (Its name has the suffix a build's own temporary tree has, so that retiring it below
    # keeps it under a name of its own.)
    kept = top / ("default-as-installed.pyjail-tmp-" + uuid.uuid4().hex[:8])
    same_fs = top.stat().st_dev == default.stat().st_dev
    subprocess.run(["cp", "-al" if same_fs else "-a", str(default), str(kept)], check=True)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(user.home)}
    try:
        dpkg = FakeDpkg(top)    # to it, the default rootfs's packages are all gone
        upgraded = dict(env, **dpkg.env)
        r = subprocess.run(["sh", "-c", command], env=upgraded, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, universal_newlines=True, timeout=600)
        assert r.returncode == 0 and r.stderr == "", describe(r)
        assert re.search(r"^rootfs: %s: \d+ files, " % re.escape(str(default)), r.stdout,
                         re.M), describe(r)
        r = run(binary, user, "rootfs", "info", "--json", "default", env=upgraded)
        assert json.loads(r.stdout)["sources"]["state"] == "fresh"
        r = subprocess.run(["sh", "-c", command], env=upgraded, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, universal_newlines=True, timeout=600)
        assert "rootfs: %s: its sources are as built, nothing to do\n" % default \
            in r.stdout, describe(r)
        r = run(binary, user, "--profile", "strict", "--", "python3", "-c", "print('ok')")
        assert r.returncode == 0 and r.stdout == "ok\n", describe(r)
    finally:
        if same_fs:
            # At once (renameat2 RENAME_EXCHANGE): the installed rootfs is never missing for
            # the jails the other lanes start from it meanwhile.
            exchange(kept, default)
            # `kept` now holds the rebuilt tree, the root of every jail another lane started
            # since the rebuild (a session imports from it for as long as it lives): it is
            # retired as the rebuild retires a tree, kept as DIR.pyjail-old-* while a jail runs in
            # it.
            rootfs_rebuild.retire(str(kept), str(default), lambda text: None)
        else:
            shutil.rmtree(default, ignore_errors=True)
            shutil.move(str(kept), str(default))
        shutil.rmtree(top, ignore_errors=True)
    # Back on this host's own database, the tree as installed has nothing to rebuild.
    r = subprocess.run(["sh", "-c", command], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, universal_newlines=True, timeout=600)
    assert r.returncode == 0 and r.stderr == "", describe(r)
    assert "rootfs: %s: its sources are as built, nothing to do\n" % default in r.stdout, describe(r)


def test_a_changed_virtualenv_is_reported_and_rebuilt(binary, users, links):
    user = current(users)
    top = world_dir()
    try:
        venv = top / "venv"
        subprocess.run([TARGET_PYTHON, "-m", "venv", "--without-pip", str(venv)], check=True)

        def venv_install(spec):
            r = subprocess.run([TARGET_PYTHON, "-m", "pip", "--python", str(venv / "bin/python"),
                                "install", "-q", "--disable-pip-version-check", "--no-index",
                                "--find-links", str(links), spec], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, universal_newlines=True)
            assert r.returncode == 0, r.stdout

        venv_install("tinydep==1.0")
        root = top / "r"
        r = run(binary, user, "rootfs", "build", "--out", root, "--from-venv", venv, "--quiet")
        assert r.returncode == 0, describe(r)
        r = run(binary, user, "rootfs", "info", "--json", root)
        assert json.loads(r.stdout)["sources"]["state"] == "fresh"
        venv_install("tinydep==0.5")
        r = run(binary, user, "rootfs", "info", "--json", root)
        assert json.loads(r.stdout)["sources"]["changes"] == [
            "virtualenv packages changed or removed: tinydep-1.0"]
        r = run(binary, user, "rootfs", "rebuild", "--if-stale", "--quiet", root)
        assert r.returncode == 0, describe(r)
        lock = json.loads((root / "etc/pyjail-rootfs.lock.json").read_text())
        assert [(p["name"], p["version"], p["source"]) for p in lock["packages"]] == [
            ("tinydep", "0.5", "venv")]
        r = run(binary, user, "rootfs", "info", "--json", root)
        assert json.loads(r.stdout)["sources"]["state"] == "fresh"
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_a_flood_from_the_jail_that_builds_the_font_cache_is_cut_off(binary, users):
    # The font cache is built by the package's own code, in a jail, and its stdout is read
    # into the builder's memory: a "matplotlib" that floods it must end the build at pyjail's
    # output limit, not fill the host's memory.
    top = world_dir()
    try:
        links = top / "links"
        links.mkdir()
        make_wheel(links, "matplotlib", "9.0",
                   "import os\nchunk = b'x' * (1 << 20)\nfor _ in range(48):\n"
                   "    os.write(1, chunk)\n", module="matplotlib/__init__.py")
        out = top / "r"
        r = run(binary, current(users), "rootfs", "build", "--out", out, "--pip", "matplotlib",
                "--no-index", "--find-links", links, "--quiet")
        one_error(r, r"build matplotlib's font cache in a jail: pyjail exited 137: "
                     r"pyjail: output limit reached \(--output-limit 16M\)")
        assert sorted(p.name for p in top.iterdir()) == ["links"]
    finally:
        shutil.rmtree(top, ignore_errors=True)
