"""Tests for rootfs/build-rootfs.py.

One rootfs is built per module and shared by most tests; the
reproducibility, --with and replacement tests build more. The bwrap tests
run the interpreter inside the tree and are skipped where bwrap is missing
or cannot create namespaces.
"""

import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from pyjail_testing import skip_or_fail

REPO = Path(__file__).resolve().parents[2]
BUILDER = REPO / "rootfs" / "build-rootfs.py"
TARGET_PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") \
    else os.path.realpath(sys.executable)
EPOCH = "1234567890"
UID, GID = 1234, 1235

SUMMARY = re.compile(r"^rootfs: (.+): (\d+) files, ([0-9.]+) MiB, built in ([0-9.]+) s$")


def build(out, *extra, env_extra=None):
    env = dict(os.environ, SOURCE_DATE_EPOCH=EPOCH)
    env.update(env_extra or {})
    return subprocess.run(
        [sys.executable, str(BUILDER), "--out", str(out), "--python", TARGET_PYTHON,
         "--jail-uid", str(UID), "--jail-gid", str(GID), "--quiet"] + list(extra),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
        env=env, timeout=300)


def read_info(root):
    info = {}
    for line in (root / "etc/pyjail-rootfs").read_text().splitlines():
        key, _, value = line.partition("=")
        info[key] = value.strip('"')
    return info


def target(*code):
    """Run the target interpreter on the host (for what pytest's Python may not know)."""
    return subprocess.run([TARGET_PYTHON, "-I", "-c"] + list(code), check=True,
                          stdout=subprocess.PIPE, universal_newlines=True).stdout.strip()


def listing(root):
    """(path, mode, size, mtime, symlink target, sha256) for every entry."""
    rows = []
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [""] + dirnames + filenames:
            full = os.path.join(dirpath, name) if name else dirpath
            if not name and dirpath != str(root):
                continue  # directories are listed by their parent
            st = os.lstat(full)
            rel = os.path.relpath(full, root)
            link = os.readlink(full) if stat.S_ISLNK(st.st_mode) else ""
            digest = ""
            if stat.S_ISREG(st.st_mode):
                digest = hashlib.sha256(Path(full).read_bytes()).hexdigest()
            rows.append((rel, oct(st.st_mode), st.st_size if not link else 0,
                         st.st_mtime_ns, link, digest))
    return sorted(rows)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("a") / "rootfs"
    proc = build(out)
    assert proc.returncode == 0, proc.stderr
    return out, proc


@pytest.fixture(scope="module")
def root(built):
    return built[0]


@pytest.fixture(scope="module")
def info(root):
    return read_info(root)


@pytest.fixture(scope="module")
def stdlib(root, info):
    return root / info["STDLIB"].lstrip("/")


def bwrap_works():
    if shutil.which("bwrap") is None:
        return "bwrap is not on PATH"
    probe = subprocess.run(["bwrap", "--unshare-all", "--ro-bind", "/", "/", "true"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True)
    if probe.returncode != 0:
        return "bwrap cannot create namespaces here: " + probe.stderr.strip()
    return None


def jail(root, code, *python_args, env=None):
    cmd = ["bwrap", "--unshare-all", "--ro-bind", str(root), "/", "--proc", "/proc",
           "--dev", "/dev", "--tmpfs", "/tmp", "--uid", str(UID), "--gid", str(GID),
           "--setenv", "HOME", "/tmp", "--chdir", "/tmp",
           "/usr/bin/python3"] + list(python_args) + ["-c", code]
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, env=dict(env or {}, PATH="/usr/bin"),
                          timeout=60)


@pytest.fixture(scope="module")
def _bwrap():
    """Skips a test that needs bwrap where it cannot run; under PYJAIL_MUST_WORK=1 (CI,
    where tests/run.sh installs bubblewrap) that is a failure instead."""
    problem = bwrap_works()
    if problem is not None:
        skip_or_fail(problem)


needs_bwrap = pytest.mark.usefixtures("_bwrap")


# --------------------------------------------------------------------------


def test_summary_line(built):
    out, proc = built
    lines = proc.stdout.splitlines()
    assert len(lines) == 1, proc.stdout
    m = SUMMARY.match(lines[0])
    assert m, lines[0]
    assert m.group(1) == str(out)
    nfiles = sum(1 for p in out.rglob("*") if p.is_file() and not p.is_symlink())
    assert int(m.group(2)) == nfiles
    assert proc.stderr == ""


def test_layout(root, info):
    for d in ("usr/bin", "usr/lib", "usr/lib64", "etc", "proc", "dev", "tmp", "work",
              "home"):
        assert (root / d).is_dir() and not (root / d).is_symlink(), d
    for d in ("proc", "dev", "tmp", "work", "home"):
        assert list((root / d).iterdir()) == [], d
    for link, dest in (("bin", "usr/bin"), ("lib", "usr/lib"), ("lib64", "usr/lib64"),
                       ("sbin", "usr/bin")):
        assert os.readlink(root / link) == dest
    real = os.path.realpath(TARGET_PYTHON)
    assert info["PYTHON"] == real  # /usr/bin/python3.11
    assert (root / real.lstrip("/")).is_file()
    assert not (root / real.lstrip("/")).is_symlink()
    for name in ("python3", "python"):
        p = root / "usr/bin" / name
        assert p.is_symlink()
        assert os.path.realpath(p) == os.path.realpath(root / real.lstrip("/"))
    assert info["PYTHON_VERSION"] == target(
        "import sys; print('%d.%d.%d' % sys.version_info[:3])")
    assert info["WITH"] == ""


def test_libraries(root):
    names = {p.name for p in root.rglob("*.so*")}
    for lib in ("libc.so.6", "libm.so.6", "libgcc_s.so.1", "libssl.so.3",
                "libsqlite3.so.0", "libffi.so.8"):
        assert lib in names, lib
    # The PT_INTERP path of the binary resolves inside the tree.
    loader = root / "lib64/ld-linux-x86-64.so.2"
    if os.uname().machine == "x86_64":
        assert loader.exists()
    # Every symlink stays inside the tree and is relative.
    for p in root.rglob("*"):
        if p.is_symlink():
            assert not os.readlink(p).startswith("/"), p
            assert os.path.realpath(p).startswith(str(root) + "/"), p
            assert p.exists(), "dangling %s" % p


def test_no_dead_weight(root, stdlib):
    for d in ("test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3",
              "site-packages", "dist-packages"):
        assert not (stdlib / d).exists(), d
    assert not (stdlib / "turtle.py").exists()
    assert not list(stdlib.glob("config-3.*"))
    for p in root.rglob("*"):
        if p.is_dir():
            assert p.name not in ("test", "tests"), p
    dynload = {p.name for p in (stdlib / "lib-dynload").iterdir()}
    assert any(n.startswith("_ssl.") for n in dynload)
    assert not [n for n in dynload if n.startswith(("_tkinter", "_test", "xxlimited"))]
    assert not (root / "usr/lib/python3").exists()   # no host dist-packages
    # The host's site policy (Debian's loads apport's hook) stays on the host.
    assert not (stdlib / "sitecustomize.py").exists()
    assert not list(stdlib.glob("__pycache__/sitecustomize.*"))
    # Nor its PEP 668 marker, which would refuse `pip install --user` into the jail's home.
    assert not (stdlib / "EXTERNALLY-MANAGED").exists()


def test_ld_cache(root):
    # The loader finds each library through /etc/ld.so.cache instead of probing
    # hwcaps directories: every library the interpreter needs is in it, at its
    # path inside the tree.
    cache = root / "etc/ld.so.cache"
    assert cache.is_file()
    listed = subprocess.run(["ldconfig", "-p", "-C", str(cache)], check=True,
                            stdout=subprocess.PIPE, universal_newlines=True).stdout
    entries = dict(re.findall(r"^\s+(\S+) \(.*\) => (\S+)$", listed, re.M))
    for lib in ("libc.so.6", "libm.so.6", "libz.so.1", "libssl.so.3", "libgcc_s.so.1"):
        assert lib in entries, (lib, listed)
        assert (root / entries[lib].lstrip("/")).exists(), entries[lib]


def test_pyc_unchecked_hash(stdlib, info):
    tag = target("import sys; print(sys.implementation.cache_tag)")
    magic = bytes.fromhex(target("import importlib.util; "
                                 "print(importlib.util.MAGIC_NUMBER.hex())"))
    sources = [p for p in stdlib.rglob("*.py")]
    assert len(sources) > 300
    for src in sources:
        pyc = src.parent / "__pycache__" / ("%s.%s.pyc" % (src.stem, tag))
        assert pyc.is_file(), pyc
        head = pyc.read_bytes()[:16]
        assert head[:4] == magic, pyc
        flags = int.from_bytes(head[4:8], "little")
        assert flags == 0b01, "%s: flags %#x, want unchecked-hash" % (pyc, flags)
    # The recorded source path is the in-jail one, not the build directory.
    pyc = stdlib / "json" / "__pycache__" / ("decoder.%s.pyc" % tag)
    filename = target("import marshal, sys; "
                      "print(marshal.loads(open(sys.argv[1], 'rb').read()[16:]).co_filename)",
                      str(pyc))
    assert filename == info["STDLIB"] + "/json/decoder.py"
    assert str(stdlib) not in filename and ".pyjail-tmp-" not in filename


def test_permissions(root):
    for dirpath, dirnames, filenames in os.walk(root):
        assert stat.S_IMODE(os.lstat(dirpath).st_mode) == 0o755, dirpath
        for name in filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                continue
            assert stat.S_ISREG(st.st_mode), p
            mode = stat.S_IMODE(st.st_mode)
            assert mode in (0o644, 0o755), (p, oct(mode))
            assert not st.st_mode & (stat.S_ISUID | stat.S_ISGID), p
            with open(p, "rb") as f:
                if f.read(4) == b"\x7fELF":
                    assert mode == 0o755, p


def test_etc(root):
    passwd = (root / "etc/passwd").read_text().splitlines()
    assert "jail:x:%d:%d:pyjail sandbox user:/tmp:/bin/sh" % (UID, GID) in passwd
    assert passwd[0] == "root:x:0:0:root:/root:/usr/sbin/nologin"
    assert "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin" in passwd
    group = (root / "etc/group").read_text().splitlines()
    assert "jail:x:%d:" % GID in group and "nogroup:x:65534:" in group
    nss = (root / "etc/nsswitch.conf").read_text()
    for db in ("passwd", "group"):
        assert re.search(r"^%s:\s+files$" % db, nss, re.M)
    # DNS after the files: a lookup under --net none tries a socket, which pyjail sees.
    assert re.search(r"^hosts:\s+files dns$", nss, re.M)
    assert "127.0.0.1\tlocalhost" in (root / "etc/hosts").read_text()
    # --net allow binds pyjail's own over it; a rootfs without one would leave glibc's defaults.
    assert (root / "etc/resolv.conf").read_text() == ""


def test_manifest(root):
    lines = (root / "etc/pyjail-manifest.sha256").read_text().splitlines()
    entries = [l.split("  ", 1) for l in lines]
    paths = [p for _, p in entries]
    assert paths == sorted(paths)
    files = sorted("./" + str(p.relative_to(root)) for p in root.rglob("*")
                   if p.is_file() and not p.is_symlink())
    assert paths == [f for f in files if f != "./etc/pyjail-manifest.sha256"]
    for digest, path in entries:
        assert hashlib.sha256((root / path).read_bytes()).hexdigest() == digest, path
    links = (root / "etc/pyjail-manifest.symlinks").read_text().splitlines()
    found = sorted("./%s -> %s" % (p.relative_to(root), os.readlink(p))
                   for p in root.rglob("*") if p.is_symlink())
    assert links == found
    assert "./lib64 -> usr/lib64" in links


def test_mtimes(root):
    for row in listing(root):
        assert row[3] == int(EPOCH) * 10**9, row


def test_reproducible(root, tmp_path):
    out = tmp_path / "rootfs"
    proc = build(out)
    assert proc.returncode == 0, proc.stderr
    first, second = listing(root), listing(out)
    assert len(first) == len(second)
    assert [r for r in first if r not in second] == []


def test_replaces_previous_build(tmp_path):
    out = tmp_path / "rootfs"
    assert build(out).returncode == 0
    (out / "etc/stale").write_text("x")
    proc = build(out)
    assert proc.returncode == 0, proc.stderr
    assert not (out / "etc/stale").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rootfs"]


def test_refuses_foreign_directory(tmp_path):
    out = tmp_path / "precious"
    out.mkdir()
    (out / "data").write_text("keep me")
    proc = build(out)
    assert proc.returncode == 1
    assert len(proc.stderr.splitlines()) == 1
    assert proc.stderr.startswith("build-rootfs: ")
    assert (out / "data").read_text() == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["precious"]


def test_missing_package_fails_cleanly(tmp_path):
    out = tmp_path / "rootfs"
    proc = build(out, "--with", "no_such_package_xyz")
    assert proc.returncode == 1
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert re.match(r"^build-rootfs: .*no_such_package_xyz.*: .* \(.*\)$", lines[0])
    assert proc.stdout == ""
    assert list(tmp_path.iterdir()) == []


def test_bad_option_fails_with_one_line(tmp_path):
    proc = build(tmp_path / "rootfs", "--jail-uid", "0")
    assert proc.returncode == 1
    assert len(proc.stderr.splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


# -------------------------------------------------------------- --with PKG

def find_with_package():
    for name in ("yaml", "numpy"):
        if subprocess.run([TARGET_PYTHON, "-I", "-c", "import " + name],
                          stderr=subprocess.DEVNULL).returncode == 0:
            return name
    return None


WITH_PKG = find_with_package()


@pytest.fixture(scope="module")
def with_root(tmp_path_factory):
    if WITH_PKG is None:
        skip_or_fail("neither yaml nor numpy is importable by %s" % TARGET_PYTHON)
    out = tmp_path_factory.mktemp("w") / "rootfs"
    proc = build(out, "--with", WITH_PKG)
    assert proc.returncode == 0, proc.stderr
    return out


def test_with_package(with_root):
    info = read_info(with_root)
    assert info["WITH"] == WITH_PKG
    assert info["DISTRIBUTIONS"]
    pkg_dir = os.path.dirname(target("import %s; print(%s.__file__)" % (WITH_PKG, WITH_PKG)))
    copied = with_root / pkg_dir.lstrip("/")
    assert (copied / "__init__.py").is_file()
    parent = copied.parent
    assert list(parent.glob("*.dist-info")) + list(parent.glob("*.egg-info"))
    tag = target("import sys; print(sys.implementation.cache_tag)")
    pyc = copied / "__pycache__" / ("__init__.%s.pyc" % tag)
    assert int.from_bytes(pyc.read_bytes()[4:8], "little") == 0b01
    # Only what was asked for: no other host package came along.
    assert sorted(p.name for p in parent.iterdir()
                  if not p.name.endswith((".dist-info", ".egg-info", ".libs"))) == [WITH_PKG]


@needs_bwrap
def test_with_package_imports_in_jail(with_root):
    code = {"yaml": "import yaml; print(yaml.safe_load('a: [1, 2]'))",
            "numpy": "import numpy; print(int(numpy.arange(4).sum()))"}[WITH_PKG]
    proc = jail(with_root, code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() in ("{'a': [1, 2]}", "6")


# ------------------------------------------------------------------- bwrap

@needs_bwrap
def test_runs_in_jail(root):
    proc = jail(root, "import json, re, decimal, ssl, sqlite3, ctypes, hashlib, threading, "
                      "multiprocessing, asyncio, zlib, lzma, bz2, uuid, getpass, pathlib; "
                      "print('ok', getpass.getuser())")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "ok jail\n"


@needs_bwrap
def test_threads_and_ctypes_in_jail(root):
    # pthread_exit unwinds the thread through libgcc_s.so.1, which glibc
    # dlopen()s; without it the process aborts.
    code = ("import ctypes, os, threading, time\n"
            "t = threading.Thread(target=lambda: None); t.start(); t.join()\n"
            "libc = ctypes.CDLL(None)\n"
            "assert libc.getpid() == os.getpid()\n"
            "u = threading.Thread(target=lambda: libc.pthread_exit(None), daemon=True)\n"
            "u.start(); time.sleep(0.2)\n"
            "print('threads ok')\n")
    proc = jail(root, code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "threads ok\n"


@needs_bwrap
def test_jail_uses_pyc(root):
    proc = jail(root, "import json, asyncio, decimal", "-v")
    assert proc.returncode == 0, proc.stderr
    loaded = [l for l in proc.stderr.splitlines() if l.startswith("# code object from")]
    assert len(loaded) > 20
    assert all(".pyc" in l for l in loaded), [l for l in loaded if ".pyc" not in l]
    assert "could not create" not in proc.stderr


@needs_bwrap
def test_loader_uses_ld_cache(root):
    # With the cache, the loader opens each library by its full path: no probes
    # of glibc-hwcaps/tls subdirectories.
    proc = jail(root, "pass", "-I", "-S", env={"LD_DEBUG": "libs"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "search cache=/etc/ld.so.cache" in proc.stderr, proc.stderr[-2000:]
    tried = [l for l in proc.stderr.splitlines() if "trying file=" in l]
    assert tried and not [l for l in tried if "glibc-hwcaps" in l or "/tls/" in l], tried


# ------------------------------------------------------------------- --shell-tools


@pytest.fixture(scope="module")
def tools_root(tmp_path_factory):
    if not os.path.isfile("/bin/busybox"):
        if os.environ.get("PYJAIL_MUST_WORK") == "1":
            pytest.fail("PYJAIL_MUST_WORK=1, but there is no /bin/busybox (apt-get install "
                        "busybox-static)", pytrace=False)
        pytest.skip("no /bin/busybox (apt-get install busybox-static)")
    out = tmp_path_factory.mktemp("tools") / "rootfs"
    proc = build(out, "--shell-tools")
    assert proc.returncode == 0, proc.stderr
    return out


def test_default_rootfs_has_no_shell_tools(root):
    assert not (root / "usr/bin/busybox").exists()
    assert not (root / "usr/bin/ls").exists()
    assert os.readlink(root / "usr/bin/sh") == "dash"


def test_shell_tools_are_busybox_links(tools_root):
    busybox = tools_root / "usr/bin/busybox"
    data = busybox.read_bytes()
    assert data[:4] == b"\x7fELF"
    assert b"/lib64/ld-linux" not in data   # static: it needs no library of the tree
    for tool in ("ls", "cat", "grep", "head", "tail", "wc", "sort", "uniq", "sed", "awk",
                 "find", "xargs", "cut", "tr", "env"):
        assert os.readlink(tools_root / "usr/bin" / tool) == "busybox", tool
    # What the tree has already keeps its own binary.
    assert os.readlink(tools_root / "usr/bin/sh") == "dash"
    assert not (tools_root / "usr/bin/python3").resolve().samefile(busybox)
    manifest = (tools_root / "etc/pyjail-manifest.symlinks").read_text()
    assert "./usr/bin/awk -> busybox\n" in manifest


@needs_bwrap
def test_shell_tools_run_through_subprocess(tools_root):
    proc = jail(tools_root, "import subprocess\n"
                            "r = subprocess.run('ls /usr/bin | grep -c ^busybox$; "
                            "echo b a | tr \" \" \"\\\\n\" | sort | head -1', shell=True, "
                            "capture_output=True, text=True)\n"
                            "print(r.returncode, r.stdout.split(), r.stderr)")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "0 ['1', 'a'] \n"


# ------------------------------------------------------------------- CA certificates
#
# The host's bundle goes where the tree's OpenSSL looks by default, so ssl's default context
# verifies servers in a jail; --ca-certificates FILE puts another there, --no-ca-certificates
# none.

SOURCES = "etc/pyjail-rootfs.sources.json"


def openssl_cafile():
    """Where the target interpreter's OpenSSL reads its CA bundle (/usr/lib/ssl/cert.pem)."""
    return target("import ssl; print(ssl.get_default_verify_paths().openssl_cafile)")


def host_bundle():
    cafile = openssl_cafile()
    if not os.path.isfile(cafile):
        skip_or_fail("this host has no CA bundle at %s (apt-get install ca-certificates)" % cafile)
    return os.path.realpath(cafile)


def make_ca(d, name):
    """A self-signed CA certificate (and its key beside it) made by openssl."""
    if shutil.which("openssl") is None:
        skip_or_fail("openssl is not installed (apt-get install openssl)")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=%s" % name, "-keyout", str(d / (name + ".key")),
                    "-out", str(d / (name + ".pem"))], check=True, capture_output=True)
    return d / (name + ".pem")


def jail_trust(root):
    """What a jail's default context trusts: (cert_store_stats, [the first CAs' names])."""
    proc = jail(root, "import json, ssl\n"
                      "ctx = ssl.create_default_context()\n"
                      "names = [dict(n[0] for n in c['subject'])['commonName']\n"
                      "         for c in ctx.get_ca_certs()[:5]]\n"
                      "print(json.dumps([ctx.cert_store_stats(), names]))")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def one_line_error(proc, pattern):
    assert proc.returncode == 1, proc.stderr
    assert len(proc.stderr.splitlines()) == 1, proc.stderr
    assert re.match(pattern, proc.stderr), proc.stderr
    assert proc.stdout == ""


def test_the_hosts_ca_bundle_is_in_the_tree(root, info):
    host = host_bundle()
    cafile = openssl_cafile()
    copy = root / cafile.lstrip("/")
    # A regular file with the bundle's content, not a link out of the tree.
    assert copy.is_file() and not copy.is_symlink()
    assert stat.S_IMODE(copy.stat().st_mode) == 0o644
    assert copy.read_bytes() == Path(host).read_bytes()
    assert info["CA_CERTIFICATES"] == cafile
    digest = hashlib.sha256(copy.read_bytes()).hexdigest()
    assert "%s  ./%s" % (digest, cafile.lstrip("/")) in \
        (root / "etc/pyjail-manifest.sha256").read_text().splitlines()
    # A host file like the others: a changed bundle makes the tree stale.
    assert json.loads((root / SOURCES).read_text())["files"][host] == digest


@needs_bwrap
def test_a_jails_default_context_trusts_what_the_hosts_does(root):
    host_bundle()
    stats, _ = jail_trust(root)
    assert stats["x509_ca"] > 0, stats
    host = target("import json, ssl; "
                  "print(json.dumps(ssl.create_default_context().cert_store_stats()))")
    assert stats == json.loads(host)


def test_ca_certificates_file_and_rebuild(tmp_path):
    """--ca-certificates FILE: that file's content, recorded for rebuilds (which read it again)
    and as a host file (whose change makes the tree stale)."""
    ca = make_ca(tmp_path, "pyjail test CA")
    out = tmp_path / "rootfs"
    proc = build(out, "--ca-certificates", str(ca))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    copy = out / openssl_cafile().lstrip("/")
    assert copy.read_bytes() == ca.read_bytes() and not copy.is_symlink()
    rec = json.loads((out / SOURCES).read_text())
    assert rec["inputs"]["ca_certificates"] == str(ca)
    assert rec["files"][str(ca)] == hashlib.sha256(ca.read_bytes()).hexdigest()
    if bwrap_works() is None:
        stats, names = jail_trust(out)
        assert (stats["x509_ca"], names) == (1, ["pyjail test CA"]), (stats, names)
    # The file changes (another CA): the tree is stale, and a rebuild takes the new one.
    make_ca(tmp_path, "other CA")
    (tmp_path / "other CA.pem").rename(ca)
    state = subprocess.run([sys.executable, str(BUILDER), "sources", str(out)], check=True,
                           stdout=subprocess.PIPE, universal_newlines=True).stdout
    assert json.loads(state)["state"] == "stale"
    assert "1 file differs (%s)" % ca in json.loads(state)["summary"]
    proc = subprocess.run([sys.executable, str(BUILDER), "rebuild", "--if-stale", "--quiet",
                           str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert copy.read_bytes() == ca.read_bytes()


def test_no_ca_certificates(tmp_path):
    out = tmp_path / "rootfs"
    proc = build(out, "--no-ca-certificates")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""     # no warning: asked for
    assert not (out / openssl_cafile().lstrip("/")).exists()
    assert read_info(out)["CA_CERTIFICATES"] == ""
    if bwrap_works() is None:
        assert jail_trust(out)[0] == {"x509": 0, "crl": 0, "x509_ca": 0}


def test_bad_ca_certificates_fail_with_one_line(tmp_path):
    ca = make_ca(tmp_path, "ca")
    key = tmp_path / "ca.key"
    both = tmp_path / "both.pem"
    both.write_bytes(ca.read_bytes() + key.read_bytes())
    text = tmp_path / "notes.txt"
    text.write_text("not a certificate\n")
    broken = tmp_path / "broken.pem"
    broken.write_text("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")
    link = tmp_path / "link.pem"
    link.symlink_to(both)
    out = tmp_path / "rootfs"
    for args, pattern in (
            ([both], r"build-rootfs: --ca-certificates \S+/both\.pem: it holds a private key, "
                     r"which every jail would read \(give a file of certificates only\)$"),
            ([link], r"build-rootfs: --ca-certificates \S+/link\.pem: \S+/both\.pem holds a "
                     r"private key"),
            ([text], r"build-rootfs: --ca-certificates \S+/notes\.txt: it holds no PEM "
                     r"certificate"),
            ([broken], r"build-rootfs: --ca-certificates \S+/broken\.pem: OpenSSL reads no "
                       r"certificate from \S+/broken\.pem \("),
            ([tmp_path / "missing.pem"], r"build-rootfs: --ca-certificates \S+/missing\.pem: "
                                         r"cannot open \S+/missing\.pem \(No such file"),
            ([tmp_path], r"build-rootfs: --ca-certificates \S+: it is not a regular file"),
            ([ca, "--no-ca-certificates"], r"build-rootfs: command line: argument "
                                           r"--no-ca-certificates: not allowed with argument "
                                           r"--ca-certificates")):
        proc = build(out, "--ca-certificates", *map(str, args))
        one_line_error(proc, pattern)
        assert not out.exists()
        assert not [p for p in tmp_path.iterdir() if p.name.startswith("rootfs")]


def test_root_takes_no_bundle_another_user_can_change(tmp_path):
    if os.geteuid() != 0:
        skip_or_fail("only root's builds refuse a bundle others can change (not root here)")
    os.chmod(tmp_path, 0o755)
    ca = make_ca(tmp_path, "ca")
    out = tmp_path / "rootfs"
    os.chown(ca, 65534, 65534)
    one_line_error(build(out, "--ca-certificates", str(ca)),
                   r"build-rootfs: --ca-certificates %s: it belongs to uid 65534 with mode "
                   r"644: others can change it, and root builds this rootfs \(give a file of "
                   r"PEM certificates that only root can change" % re.escape(str(ca)))
    os.chown(ca, 0, 0)
    os.chmod(ca, 0o664)
    one_line_error(build(out, "--ca-certificates", str(ca)),
                   r"build-rootfs: --ca-certificates \S+: it belongs to uid 0 with mode 664")
    os.chmod(ca, 0o644)
    # Root's file, in another user's directory: its owner could swap the file for another.
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    ca.rename(theirs / "ca.pem")
    os.chown(theirs, 65534, 65534)
    one_line_error(build(out, "--ca-certificates", str(theirs / "ca.pem")),
                   r"build-rootfs: --ca-certificates \S+: %s belongs to uid 65534 with mode "
                   r"755: others can change it" % re.escape(str(theirs)))
    assert not out.exists()
    # In a sticky directory of root's (/tmp), root's own file is taken.
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    os.chmod(sticky, 0o1777)
    (theirs / "ca.pem").rename(sticky / "ca.pem")
    proc = build(out, "--ca-certificates", str(sticky / "ca.pem"))
    assert proc.returncode == 0, proc.stderr


def load_builder():
    import importlib.util
    spec = importlib.util.spec_from_file_location("build_rootfs_under_test", str(BUILDER))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def ca_step(module, tree, cafile):
    """A Builder that has reached its CA step, on an empty tree, for an interpreter whose
    OpenSSL reads `cafile`."""
    b = module.Builder(module.parse_args(["--out", str(tree) + ".out", "--quiet"]))
    b.root = str(tree)
    b.info = {"openssl_cafile": cafile}
    b.binary = os.path.realpath(TARGET_PYTHON)
    b.python_desc = "CPython"
    return b


# Where the OpenSSL of those tests' interpreter looks: a path this host does not have, and not
# below a jail's mount points (/tmp: a jail would not see a file there).
NOWHERE = "/nonexistent-pyjail-test/ssl/cert.pem"


def test_a_host_without_a_bundle_builds_on_and_says_so(tmp_path, monkeypatch, capsys):
    module = load_builder()
    monkeypatch.setattr(module, "HOST_CA_BUNDLES", ())
    tree = tmp_path / "tree"
    tree.mkdir()
    b = ca_step(module, tree, NOWHERE)
    b.copy_ca_certificates()
    err = capsys.readouterr().err
    assert err == ("build-rootfs: warning: no CA certificates on this host (%s): HTTPS in the "
                   "jail cannot verify any server (apt-get install ca-certificates and rebuild, "
                   "or give --ca-certificates FILE; --no-ca-certificates builds without and "
                   "says nothing)\n" % NOWHERE)
    assert list(tree.iterdir()) == [] and b.ca_certificates == ""


def test_an_openssl_of_another_layout_gets_the_hosts_bundle_where_it_looks(tmp_path,
                                                                           monkeypatch):
    """An interpreter whose OpenSSL looks where this host has nothing (a standalone build's
    /etc/ssl/cert.pem on Debian) gets the host's bundle there."""
    module = load_builder()
    ca = make_ca(tmp_path, "host CA")
    monkeypatch.setattr(module, "HOST_CA_BUNDLES", (str(tmp_path / "none.pem"), str(ca)))
    tree = tmp_path / "tree"
    tree.mkdir()
    b = ca_step(module, tree, NOWHERE)
    b.copy_ca_certificates()
    assert (tree / NOWHERE.lstrip("/")).read_bytes() == ca.read_bytes()
    assert b.host_files == {NOWHERE: str(ca)} and b.ca_certificates == NOWHERE
