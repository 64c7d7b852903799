"""`pyjail rootfs build|info|list` and named rootfses, on the real pyjail binary.

A rootfs built from a requirements file (cffi, which needs pycparser: a compiled wheel and a
dependency chain; editdistance, a C++ extension that needs the host's libstdc++, which the
default rootfs does not have) runs a program that uses them under --profile strict, as root
and as an unprivileged user (65534 through setpriv when the tests run as root); another comes from a
virtualenv; the default rootfs has time zone data and a working ctypes.util.find_library();
every bad input ends with one line, exit 125 and nothing left behind.

The wheels come from a cache directory (PYJAIL_WHEEL_CACHE, default /tmp/pyjail-wheel-cache),
filled from PyPI with `pip download` on the first run; the builds then run with --no-index
--find-links, as on an offline host.

Environment:
  PYJAIL_BIN=PATH       the binary to test (default: build/pyjail of this checkout)
  PYJAIL_MUST_WORK=1    a test that would be skipped (no root, no setpriv, no network for the
                        first download) fails instead
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest
from pyjail_testing import skip_or_fail

REPO = Path(__file__).resolve().parents[2]
TARGET_PYTHON = "/usr/bin/python3"
WHEEL_CACHE = Path(os.environ.get("PYJAIL_WHEEL_CACHE", "/tmp/pyjail-it-wheel-cache"))
UNPRIVILEGED = 65534
NOTICE = "pyjail: no cgroup v2 for the limits"

# Uses cffi (ABI mode: no compiler) and so pycparser, which parses the declaration, and
# ctypes.util.find_library, which needs ldconfig in the rootfs.
CFFI_PROGRAM = """
import ctypes.util, cffi, pycparser
ffi = cffi.FFI()
ffi.cdef("size_t strlen(const char *s); int abs(int);")
libc = ffi.dlopen(ctypes.util.find_library("c"))
buf = ffi.new("char[]", b"jailed cffi")
print(libc.strlen(buf), libc.abs(-42), cffi.__version__ == "%s")
"""
# A C++ extension module: it loads libstdc++.so.6 and libgcc_s.so.1 from the rootfs.
CXX_PROGRAM = """
import editdistance
print(editdistance.eval("kitten", "sitting"), editdistance.eval([1, 2, 3], [1, 3]))
"""
REQUIREMENTS = "# compiled wheels, and what they depend on\ncffi\neditdistance\n"


def pyjail_bin() -> Path:
    env = os.environ.get("PYJAIL_BIN")
    return Path(env) if env else REPO / "build" / "pyjail"


@pytest.fixture(scope="module")
def binary():
    b = pyjail_bin()
    if not os.access(b, os.X_OK):
        skip_or_fail("no pyjail binary at %s (build it, or set PYJAIL_BIN)" % b)
    if not os.path.exists(TARGET_PYTHON):
        skip_or_fail("no %s to build rootfses from" % TARGET_PYTHON)
    return b


def world_dir(prefix="pyjail-rt-") -> Path:
    """A directory under /tmp that the unprivileged user can read (and own when asked). Named
    like the integration tests' own files, whose checks for leftovers pass over them: tests/run.sh
    runs both at once."""
    d = Path(tempfile.mkdtemp(prefix="pyjail-it-" + prefix.removeprefix("pyjail-"), dir="/tmp"))
    os.chmod(d, 0o755)
    return d


class User:
    def __init__(self, name, prefix, home):
        self.name, self.prefix, self.home = name, prefix, home


@pytest.fixture(scope="module")
def users():
    """{"root": User, "unprivileged": User}; each with a private HOME (for its own rootfses)."""
    made, out = [], {}
    if os.geteuid() == 0:
        home = world_dir()
        made.append(home)
        out["root"] = User("root", [], home)
        setpriv = shutil.which("setpriv")
        if setpriv:
            uhome = world_dir()
            made.append(uhome)
            os.chown(uhome, UNPRIVILEGED, UNPRIVILEGED)
            out["unprivileged"] = User("unprivileged", [
                setpriv, "--reuid=%d" % UNPRIVILEGED, "--regid=%d" % UNPRIVILEGED,
                "--clear-groups", "--"], uhome)
    else:
        home = world_dir()
        made.append(home)
        out["unprivileged"] = User("unprivileged", [], home)
    yield out
    for d in made:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(params=["root", "unprivileged"])
def as_user(request, users):
    if request.param not in users:
        skip_or_fail("cannot run pyjail as %s here (%s)" % (
            request.param, "not root" if request.param == "root" else "no setpriv"))
    return users[request.param]


def current(users):
    return users["root"] if "root" in users else users["unprivileged"]


def pyjail(binary, user, *args, cwd="/", timeout=300):
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(user.home),
           "LANG": "C.UTF-8"}
    if "PIP_CERT" in os.environ:
        env["PIP_CERT"] = os.environ["PIP_CERT"]
    return subprocess.run([*user.prefix, str(binary), *map(str, args)], cwd=cwd, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=timeout)


def stderr_of(r):
    return "".join(l for l in r.stderr.splitlines(True) if not l.startswith(NOTICE))


def describe(r):
    return "exit %d\n--- stdout:\n%s\n--- stderr:\n%s" % (r.returncode, r.stdout, r.stderr)


# ------------------------------------------------------------------------------ wheels


@pytest.fixture(scope="module")
def wheels():
    """The wheel cache, with cffi and pycparser for the target interpreter."""
    tag = "cp%s%s" % tuple(target_version()[:2])

    def have():
        return (sorted(WHEEL_CACHE.glob("cffi-*-%s-*.whl" % tag))
                and sorted(WHEEL_CACHE.glob("editdistance-*-%s-*.whl" % tag))
                and sorted(WHEEL_CACHE.glob("pycparser-*.whl")))

    if WHEEL_CACHE.exists():
        # Wheels others could have planted would become the tests' packages.
        st = WHEEL_CACHE.lstat()
        assert WHEEL_CACHE.is_dir() and not WHEEL_CACHE.is_symlink() and \
            st.st_uid in (0, os.geteuid()) and not st.st_mode & 0o022, (
                "%s is not a directory only you can write: remove it or set "
                "PYJAIL_WHEEL_CACHE" % WHEEL_CACHE)
    if not have():
        WHEEL_CACHE.mkdir(mode=0o755, exist_ok=True)
        r = subprocess.run([TARGET_PYTHON, "-m", "pip", "download", "-q", "--only-binary",
                            ":all:", "--disable-pip-version-check", "-d", str(WHEEL_CACHE),
                            "cffi", "editdistance"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           universal_newlines=True, timeout=300)
        if r.returncode != 0 or not have():
            skip_or_fail("cannot download the cffi wheels into %s: %s" % (
                WHEEL_CACHE, r.stdout.strip()[-300:]))
    os.chmod(WHEEL_CACHE, 0o755)
    for f in WHEEL_CACHE.iterdir():
        os.chmod(f, 0o644)
    return WHEEL_CACHE


def target_version():
    out = subprocess.run([TARGET_PYTHON, "-c", "import sys; print(*sys.version_info[:3])"],
                         stdout=subprocess.PIPE, universal_newlines=True, check=True).stdout
    return out.split()


def cffi_version(wheels):
    return sorted(wheels.glob("cffi-*.whl"))[-1].name.split("-")[1]


# --------------------------------------------------- a rootfs from a requirements file


@pytest.fixture(scope="module")
def cffi_rootfs(binary, users, wheels):
    """A named rootfs built from requirements.txt by whoever runs the tests (root: into the
    installed directory of named rootfses; others: into their own)."""
    user = current(users)
    name = "t-cffi-" + uuid.uuid4().hex[:8]
    req_dir = world_dir()
    req = req_dir / "requirements.txt"
    req.write_text(REQUIREMENTS)
    os.chmod(req, 0o644)
    r = pyjail(binary, user, "rootfs", "build", "--name", name, "--requirements", req,
               "--no-index", "--find-links", wheels, "--quiet")
    assert r.returncode == 0, describe(r)
    assert stderr_of(r) == "", r.stderr
    m = re.match(r"^rootfs: (/\S+): \d+ files, [0-9.]+ MiB, built in [0-9.]+ s$", r.stdout.strip())
    assert m, r.stdout
    path = Path(m.group(1))
    assert path.name == name
    yield name, path
    shutil.rmtree(path, ignore_errors=True)
    shutil.rmtree(req_dir, ignore_errors=True)


def test_requirements_rootfs_runs_cffi_strict(binary, cffi_rootfs, wheels, as_user):
    name, _ = cffi_rootfs
    r = pyjail(binary, as_user, "--profile", "strict", "--rootfs", name, "--", "python3", "-c",
               CFFI_PROGRAM % cffi_version(wheels))
    assert r.returncode == 0, describe(r)
    assert r.stdout == "11 42 True\n"


def test_requirements_rootfs_runs_a_cxx_extension_strict(binary, cffi_rootfs, as_user):
    name, path = cffi_rootfs
    # Found from the module's DT_NEEDED: the default rootfs has no libstdc++.
    assert list(path.glob("usr/lib/*/libstdc++.so.6"))
    r = pyjail(binary, as_user, "--profile", "strict", "--rootfs", name, "--", "python3", "-c",
               CXX_PROGRAM)
    assert r.returncode == 0, describe(r)
    assert r.stdout == "3 1\n"


def test_lock_records_what_went_in(binary, users, cffi_rootfs, wheels):
    name, path = cffi_rootfs
    lock = json.loads((path / "etc/pyjail-rootfs.lock.json").read_text())
    assert lock["requested"]["requirements"] == ["cffi", "editdistance"]
    by_name = {p["name"]: p for p in lock["packages"]}
    assert set(by_name) == {"cffi", "editdistance", "pycparser"}
    for pkg in by_name.values():
        wheel = wheels / pkg["wheel"]["file"]
        assert pkg["source"] == "pip"
        assert pkg["wheel"]["sha256"] == hashlib.sha256(wheel.read_bytes()).hexdigest()
        record = path / lock["site_packages"].lstrip("/") / (
            "%s-%s.dist-info/RECORD" % (pkg["name"], pkg["version"]))
        assert pkg["record_sha256"] == hashlib.sha256(record.read_bytes()).hexdigest()
    # Only what the wheels' RECORDs list: no console scripts (bin/), no host package.
    site = path / lock["site_packages"].lstrip("/")
    recorded = {line.split(",")[0].split("/")[0] for record in site.glob("*.dist-info/RECORD")
                for line in record.read_text().splitlines() if line}
    present = {p.name for p in site.iterdir()}
    assert present == recorded - {"bin", "__pycache__", ".."}
    assert {"cffi", "editdistance", "pycparser"} <= present
    r = pyjail(binary, current(users), "rootfs", "info", name)
    assert r.returncode == 0, describe(r)
    assert "cffi %s" % by_name["cffi"]["version"] in r.stdout
    assert "sha256:%s" % by_name["pycparser"]["wheel"]["sha256"] in r.stdout
    assert "rootfs       %s\n" % path in r.stdout


def test_package_build_is_reproducible(binary, users, cffi_rootfs, wheels):
    """The same requirements and wheels give the same tree: the manifest (every file's hash,
    the lock's included) is byte-identical."""
    name, path = cffi_rootfs
    top = world_dir()
    try:
        req = top / "requirements.txt"
        req.write_text(REQUIREMENTS)
        r = pyjail(binary, current(users), "rootfs", "build", "--out", top / "again",
                   "--requirements", req, "--no-index", "--find-links", wheels, "--quiet")
        assert r.returncode == 0, describe(r)
        for f in ("etc/pyjail-manifest.sha256", "etc/pyjail-manifest.symlinks"):
            assert (top / "again" / f).read_bytes() == (path / f).read_bytes(), f
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_list_shows_size_python_and_packages(binary, users, cffi_rootfs):
    name, path = cffi_rootfs
    r = pyjail(binary, current(users), "rootfs", "list")
    assert r.returncode == 0, describe(r)
    version = ".".join(target_version())
    line = next(l for l in r.stdout.splitlines() if l.startswith(name + " "))
    assert re.match(r"^%s +(installed|user) +%s +[0-9.]+ MiB  cffi [0-9.]+, editdistance "
                    r"[0-9.]+, pycparser [0-9.]+$"
                    % (re.escape(name), re.escape(version)), line), r.stdout
    assert re.search(r"^default +installed +%s " % re.escape(version), r.stdout, re.M)


def test_doctor_verifies_a_named_rootfs(binary, users, cffi_rootfs):
    name, path = cffi_rootfs
    r = pyjail(binary, current(users), "doctor", "--rootfs", name)
    line = next(l for l in r.stdout.splitlines() if l.split()[1:3] == ["rootfs", name])
    assert line.startswith("ok ") and "files match the manifest" in line, r.stdout
    # A changed copy fails.
    copy = world_dir() / "copy"
    try:
        shutil.copytree(path, copy, symlinks=True)
        lock = copy / "etc/pyjail-rootfs.lock.json"
        lock.write_text(lock.read_text().replace('"cffi"', '"cff1"'))
        r = pyjail(binary, current(users), "doctor", "--rootfs", copy)
        assert r.returncode == 1
        line = next(l for l in r.stdout.splitlines() if l.split()[1:3] == ["rootfs", str(copy)])
        assert line.startswith("FAIL ") and "files differ from its manifest" in line, r.stdout
        assert "pyjail-rootfs.lock.json" in line
    finally:
        shutil.rmtree(copy.parent, ignore_errors=True)


# ------------------------------------------------------------------------- virtualenv


def test_from_venv(binary, users, wheels):
    user = current(users)
    top = world_dir()
    try:
        venv = top / "venv"
        subprocess.run([TARGET_PYTHON, "-m", "venv", "--without-pip", str(venv)], check=True)
        r = subprocess.run([TARGET_PYTHON, "-m", "pip", "--python", str(venv / "bin/python"),
                            "install", "-q", "--disable-pip-version-check", "--no-index",
                            "--find-links", str(wheels), "cffi"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           universal_newlines=True)
        assert r.returncode == 0, r.stdout
        out = top / "rootfs"
        r = pyjail(binary, user, "rootfs", "build", "--out", out, "--from-venv", venv,
                   "--quiet")
        assert r.returncode == 0, describe(r)
        lock = json.loads((out / "etc/pyjail-rootfs.lock.json").read_text())
        assert {(p["name"], p["source"]) for p in lock["packages"]} == {
            ("cffi", "venv"), ("pycparser", "venv")}
        assert lock["requested"]["from_venv"] is True
        r = pyjail(binary, user, "--profile", "strict", "--rootfs", out, "--", "python3", "-c",
                   CFFI_PROGRAM % cffi_version(wheels))
        assert r.returncode == 0, describe(r)
        assert r.stdout == "11 42 True\n"
    finally:
        shutil.rmtree(top, ignore_errors=True)


# -------------------------------------------------------------------- every rootfs


def test_zoneinfo_in_default_rootfs(binary, as_user):
    code = ("import zoneinfo, datetime\n"
            "t = datetime.datetime(2024, 7, 1, 12, tzinfo=zoneinfo.ZoneInfo('Europe/Paris'))\n"
            "print(t.utcoffset(), t.astimezone(zoneinfo.ZoneInfo('America/New_York')).hour,\n"
            "      'Asia/Tokyo' in zoneinfo.available_timezones())\n")
    r = pyjail(binary, as_user, "--profile", "strict", "--", "python3", "-c", code)
    assert r.returncode == 0, describe(r)
    assert r.stdout == "2:00:00 6 True\n"


def test_find_library_in_default_rootfs(binary, as_user):
    code = ("import ctypes, ctypes.util\n"
            "name = ctypes.util.find_library('c')\n"
            "print(name, ctypes.util.find_library('m'), ctypes.CDLL(name).abs(-7))\n")
    r = pyjail(binary, as_user, "--profile", "strict", "--", "python3", "-c", code)
    assert r.returncode == 0, describe(r)
    assert r.stdout == "libc.so.6 libm.so.6 7\n"


# ------------------------------------------------------------------ named rootfses


@pytest.fixture(scope="module")
def users_own_rootfs(binary, users):
    """A small rootfs the unprivileged user builds by name, into their own directory."""
    if "unprivileged" not in users:
        skip_or_fail("cannot run pyjail as an unprivileged user here")
    user = users["unprivileged"]
    r = pyjail(binary, user, "rootfs", "build", "--name", "mine", "--quiet")
    assert r.returncode == 0, describe(r)
    path = user.home / ".local/share/pyjail/rootfs/mine"
    assert r.stdout.startswith("rootfs: %s: " % path), r.stdout
    return user, path


def test_named_rootfs_found_by_name_and_profile_key(binary, users_own_rootfs):
    user, path = users_own_rootfs
    r = pyjail(binary, user, "--rootfs", "mine", "--explain")
    assert r.returncode == 0, describe(r)
    assert 'rootfs = "%s"' % path in r.stdout, r.stdout
    # The jail runs in it: its etc/pyjail-rootfs is the one this build wrote.
    code = "print(open('/etc/pyjail-rootfs').read() == %r)" % (
        path / "etc/pyjail-rootfs").read_text()
    r = pyjail(binary, user, "--profile", "strict", "--rootfs", "mine", "--", "python3", "-c",
               code)
    assert r.returncode == 0, describe(r)
    assert r.stdout == "True\n"
    profile = user.home / "mine.toml"
    profile.write_text('rootfs = "mine"\n')
    r = pyjail(binary, user, "--profile", profile, "--", "python3", "-c", code)
    assert r.returncode == 0, describe(r)
    assert r.stdout == "True\n"
    r = pyjail(binary, user, "rootfs", "list")
    assert re.search(r"^mine +user ", r.stdout, re.M), r.stdout


def test_a_user_builds_a_named_rootfs_with_packages(binary, users, wheels):
    """A user's named rootfses live in ~/.local/share/pyjail/rootfs, and the build's staging
    directory beside them is the pip jail's /work: pyjail's own data is not taken for the
    credentials .local holds (the build was refused as a sensitive bind)."""
    if "unprivileged" not in users:
        skip_or_fail("cannot run pyjail as an unprivileged user here")
    user = users["unprivileged"]
    name = "t-own-pkgs-" + uuid.uuid4().hex[:8]
    path = user.home / ".local/share/pyjail/rootfs" / name
    try:
        r = pyjail(binary, user, "rootfs", "build", "--name", name, "--pip", "pycparser",
                   "--no-index", "--find-links", wheels, "--quiet")
        assert r.returncode == 0, describe(r)
        assert r.stdout.startswith("rootfs: %s: " % path), r.stdout
        r = pyjail(binary, user, "--profile", "strict", "--rootfs", name, "--", "python3", "-c",
                   "import pycparser; print(pycparser.__file__)")
        assert r.returncode == 0, describe(r)
        assert r.stdout.startswith("/usr/"), r.stdout
        # The rest of .local stays out of reach: a bind of it is still refused.
        secret = user.home / ".local/share/keyrings"
        secret.mkdir(parents=True, exist_ok=True)
        r = pyjail(binary, user, "--ro-bind", "%s:/k" % secret, "--", "python3", "-c", "pass")
        assert r.returncode == 125 and "inside .local, which holds credentials" in r.stderr, describe(r)
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_named_rootfs_others_can_write_is_refused(binary, users_own_rootfs):
    user, path = users_own_rootfs
    os.chmod(path, 0o777)
    try:
        r = pyjail(binary, user, "--rootfs", "mine", "--", "python3", "-c", "print('ran')")
    finally:
        os.chmod(path, 0o755)
    assert r.returncode == 125
    assert r.stdout == ""
    lines = stderr_of(r).splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("pyjail: data: refusing pyjail's data in %s: " % path)
    assert "writable by everyone" in lines[0]


# ---------------------------------------------------------------------- bad input


@pytest.fixture
def bad_links():
    """A --find-links directory with a wheel for another platform and an sdist only."""
    d = world_dir()
    (d / "winonly-1.0-cp27-cp27m-win32.whl").write_bytes(b"not read: skipped by its tags")
    (d / "sdistonly-1.0.tar.gz").write_bytes(b"not read: skipped, it is a source")
    (d / "pinned-1.0-py3-none-any.whl").write_bytes(b"not read: not the version asked for")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def fake_venv(top, version):
    venv = top / "venv"
    (venv / ("lib/python%s/site-packages" % ".".join(version.split(".")[:2]))).mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\nversion = %s\n" % version)
    return venv


BAD_BUILDS = {
    "unresolvable": (["--pip", "nosuchpkg-xyz"],
                     r"requirement nosuchpkg-xyz: no such project on the index or in the "
                     r"--find-links directories \(check the name"),
    "wrong-platform": (["--pip", "winonly"],
                       r"requirement winonly: no wheel of it for CPython 3\.\d+ on \S+ \(its "
                       r"wheels are for: cp27-cp27m-win32\) \(pick a package or version"),
    "no-matching-version": (["--pip", "pinned==2.0"],
                            r"requirement pinned==2\.0: no version of it that matches has a "
                            r"wheel for CPython 3\.\d+ on \S+ \(versions with one: 1\.0\) "
                            r"\(change the version it asks for\)$"),
    "sdist-only": (["--pip", "sdistonly"],
                   r"requirement sdistonly: it has only source distributions "
                   r"\(sdistonly-1\.0\.tar\.gz\), and building one runs its code \(in a "
                   r"jail\) only with --allow-build \(use a version that has a wheel, or build "
                   r"the wheel yourself"),
    "other-python-venv": (["--from-venv", "VENV"],
                          r"--from-venv \S+/venv: it was made by Python 3\.2\.0, the rootfs's "
                          r"interpreter is Python 3\.\d+\.\d+ \(make the virtualenv with"),
    "requirements-missing": (["--requirements", "/nonexistent/requirements.txt"],
                             r"--requirements /nonexistent/requirements.txt: cannot read it"),
}


@pytest.mark.parametrize("case", sorted(BAD_BUILDS))
def test_bad_build_input(binary, users, bad_links, case):
    args, message = BAD_BUILDS[case]
    top = world_dir()
    try:
        if "VENV" in args:
            args = [str(fake_venv(top, "3.2.0")) if a == "VENV" else a for a in args]
        out_parent = top / "out"
        out_parent.mkdir()
        r = pyjail(binary, current(users), "rootfs", "build", "--out", out_parent / "r",
                   "--no-index", "--find-links", bad_links, *args, "--quiet")
        assert r.returncode == 125, describe(r)
        lines = r.stderr.splitlines()
        assert len(lines) == 1, r.stderr
        assert re.match(r"^pyjail rootfs: " + message, lines[0]), lines[0]
        assert r.stdout == ""
        assert list(out_parent.iterdir()) == [], "left behind"
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_build_refuses_a_directory_that_is_not_a_rootfs(binary, users):
    top = world_dir()
    try:
        (top / "precious").mkdir()
        (top / "precious/data").write_text("keep me")
        r = pyjail(binary, current(users), "rootfs", "build", "--out", top / "precious",
                   "--quiet")
        assert r.returncode == 125
        assert re.match(r"^pyjail rootfs: output \S+/precious: exists, is not empty and is not "
                        r"a rootfs made by this script \(remove it yourself or choose another "
                        r"--out or --name\)$", r.stderr.strip()), r.stderr
        assert sorted(p.name for p in top.iterdir()) == ["precious"]
        assert (top / "precious/data").read_text() == "keep me"
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_rootfs_without_a_command_is_a_usage_error_and_help_is_not(binary, as_user):
    r = pyjail(binary, as_user, "rootfs")
    assert r.returncode == 125 and r.stdout == ""
    assert stderr_of(r).splitlines() == [
        "pyjail: rootfs: no command given (pyjail rootfs build|rebuild|info|list "
        "(pyjail rootfs --help))"], r.stderr
    r = pyjail(binary, as_user, "rootfs", "--help")
    assert r.returncode == 0 and r.stdout.startswith("Usage: pyjail rootfs build"), r.stdout


def test_unknown_rootfs_name(binary, as_user):
    r = pyjail(binary, as_user, "--rootfs", "no-such-rootfs", "--", "python3", "-c", "pass")
    assert r.returncode == 125
    lines = stderr_of(r).splitlines()
    assert len(lines) == 1, r.stderr
    assert re.match(r"^pyjail: rootfs: no rootfs named 'no-such-rootfs' \(looked for "
                    r"\S+/no-such-rootfs and \S+/rootfs\.d/no-such-rootfs\) \(.*build it: "
                    r"pyjail rootfs build --name no-such-rootfs", lines[0]), lines[0]
    r = pyjail(binary, as_user, "rootfs", "info", "no-such-rootfs")
    assert r.returncode == 125 and "no rootfs named 'no-such-rootfs'" in r.stderr


def test_bad_rootfs_name(binary, users):
    r = pyjail(binary, current(users), "rootfs", "build", "--name", "..x", "--quiet")
    assert r.returncode == 125
    assert r.stderr.startswith("pyjail rootfs: --name ..x: not a rootfs name"), r.stderr
    r = pyjail(binary, current(users), "--rootfs", "a b", "--", "python3", "-c", "pass")
    assert r.returncode == 125
    assert "'a b' is not a rootfs name: it may hold only letters" in r.stderr
    # The names a build of another rootfs leaves beside it (py.pyjail-tmp-XXXXXXXX while it
    # runs): a build of `py` would take such a rootfs for its own leftover and remove it. And
    # those earlier versions gave them: an earlier pyjail would, and rootfs list skips them.
    for opt, value in (("--name", "py.pyjail-tmp-2024_jan"),
                       ("--out", "/tmp/data.pyjail-old-20240101"),
                       ("--name", "py.tmp-2024_jan"), ("--out", "/tmp/data.old-20240101")):
        r = pyjail(binary, current(users), "rootfs", "build", opt, value, "--quiet")
        assert r.returncode == 125 and stderr_of(r).splitlines() == [
            "pyjail rootfs: %s %s: names ending in .pyjail-tmp-, .pyjail-pip- or .pyjail-old- "
            "(or, as earlier versions made them, .tmp-, .pip- or .old-) and 8 letters, digits "
            "or '_' are the builder's own (what a build of another rootfs leaves beside it) "
            "(choose another name)" % (opt, value)], r.stderr
    assert not os.path.exists("/tmp/data.pyjail-old-20240101")
    assert not os.path.exists("/tmp/data.old-20240101")
