"""No package code and no pip resolution runs on the host: `pyjail rootfs build` runs pip in a
jail, and keeps what pip built from source only with --allow-build.

`--only-binary :all:` alone does not stop pip from building: it builds (a) a requirement that is
a local directory, (b) a direct reference `NAME @ URL` to a source archive, (c) anything a
requirements file lets it build with its own `--no-binary :all:` line, and (d) a URL dependency
of a wheel that came from --find-links or a private index. Each case's build code writes a
marker file at a host path (a directory made here, writable by every user); run on the host, as
the builder once did, it would be there. Now the marker never appears, and the build is refused
without --allow-build. The sdists are served from a --find-links directory and, for the direct
references, by an HTTP server on the host's loopback.

Environment: as test_rootfs_command.py (PYJAIL_BIN, PYJAIL_MUST_WORK).
"""

from __future__ import annotations

import fcntl
import functools
import http.server
import json
import os
import re
import shutil
import ssl
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_rootfs_command import (  # noqa: E402,F401  (fixtures are used by name)
    UNPRIVILEGED, as_user, binary, describe, skip_or_fail, users, world_dir)
from test_rootfs_rebuild import one_error, run  # noqa: E402
from tiny_packages import make_project, make_sdist, make_wheel  # noqa: E402


@pytest.fixture
def marker_dir():
    """Where build code that runs on the host would leave its marker: a directory every user
    may write to, as /tmp is (so the unprivileged builds could write there too)."""
    d = world_dir("pyjail-marker-")
    os.chmod(d, 0o1777)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def server():
    """An HTTP server on the host's loopback, serving a directory of sdists."""
    d = world_dir("pyjail-served-")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(d))
    handler.log_message = lambda *a: None
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield d, "http://127.0.0.1:%d" % httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()
    shutil.rmtree(d, ignore_errors=True)


def readable(d):
    for p in Path(d).rglob("*"):
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    return d


def build(binary, user, links, *args):
    """A build by `user` (root, or the unprivileged user) into a directory of theirs."""
    top = world_dir()
    if user.name != "root":
        os.chown(top, UNPRIVILEGED, UNPRIVILEGED)
    try:
        r = run(binary, user, "rootfs", "build", "--out", top / "r", "--no-index",
                "--find-links", links, *map(str, args), "--quiet")
        left = sorted(p.name for p in top.iterdir())
        lock = None
        if r.returncode == 0:
            lock = json.loads((top / "r/etc/pyjail-rootfs.lock.json").read_text())
            info = run(binary, user, "rootfs", "info", top / "r")
            assert info.returncode == 0, describe(info)
            lock["info"] = info.stdout     # what `pyjail rootfs info` says of it
        return r, left, lock
    finally:
        # rm: what a failed builder may leave (a chain 3000 deep) is beyond shutil.rmtree.
        subprocess.run(["rm", "-rf", "--", str(top)])


def test_a_local_directory_is_not_built_on_the_host(binary, as_user, marker_dir):
    links = world_dir()
    try:
        make_wheel(links, "tinydep", "1.0")
        project = make_project(links, "localproj", "1.0", marker=marker_dir / "built")
        readable(links)
        r, left, _ = build(binary, as_user, links, "--pip", project)
        assert not (marker_dir / "built").exists(), "build code ran on the host"
        assert r.returncode == 125 and left == [], describe(r)
    finally:
        shutil.rmtree(links, ignore_errors=True)


def test_a_direct_reference_is_not_built_on_the_host(binary, as_user, marker_dir, server):
    served, url = server
    make_sdist(served, "directref", "1.0", marker=marker_dir / "built")
    readable(served)
    links = world_dir()
    try:
        make_wheel(links, "tinydep", "1.0")
        readable(links)
        r, left, _ = build(binary, as_user, links, "--pip",
                           "directref @ %s/directref-1.0.tar.gz" % url)
        assert not (marker_dir / "built").exists(), "build code ran on the host"
        assert r.returncode == 125 and left == [], describe(r)
    finally:
        shutil.rmtree(links, ignore_errors=True)


def test_no_binary_in_a_requirements_file_is_not_built_on_the_host(binary, as_user, marker_dir):
    links = world_dir()
    try:
        make_sdist(links, "nobinary", "1.0", code="VALUE = 'built'\n", marker=marker_dir / "built")
        req = links / "requirements.txt"
        req.write_text("--no-binary :all:\nnobinary\n")
        readable(links)
        r, left, _ = build(binary, as_user, links, "--requirements", req)
        assert not (marker_dir / "built").exists(), "build code ran on the host"
        # Not built at all: the jail that runs pip refuses it the build's interpreter.
        one_error(r, r"requirement nobinary: pip would build it from nobinary-1\.0\.tar\.gz, a source "
                     r"distribution, and a package's build code runs only with --allow-build \(")
        assert left == []
        # Allowed, it is built in the jail: still nothing on the host, and the lock says so.
        r, left, lock = build(binary, as_user, links, "--requirements", req, "--allow-build")
        assert not (marker_dir / "built").exists(), "build code ran on the host"
        assert r.returncode == 0, describe(r)
        entry = next(p for p in lock["packages"] if p["name"] == "nobinary")
        assert entry["built"] is True and entry["wheel"] is None
        assert entry["built_from"] == {"file": "nobinary-1.0.tar.gz", "in": "jail",
                                       "sha256": entry["built_from"]["sha256"]}
        assert len(entry["built_from"]["sha256"]) == 64
        assert re.search(r"^  nobinary 1\.0 +pip +built in the jail from nobinary-1\.0\.tar\.gz$",
                         lock["info"], re.M), lock["info"]
    finally:
        shutil.rmtree(links, ignore_errors=True)


def test_a_url_dependency_of_a_wheel_is_not_built_on_the_host(binary, as_user, marker_dir, server):
    served, url = server
    make_sdist(served, "urldep", "1.0", marker=marker_dir / "built")
    readable(served)
    links = world_dir()
    try:
        make_wheel(links, "wantsurl", "1.0", requires=["urldep @ %s/urldep-1.0.tar.gz" % url])
        readable(links)
        r, left, _ = build(binary, as_user, links, "--pip", "wantsurl")
        assert not (marker_dir / "built").exists(), "build code ran on the host"
        assert r.returncode == 125 and left == [], describe(r)
    finally:
        shutil.rmtree(links, ignore_errors=True)


def test_a_module_in_the_working_directory_does_not_run_on_the_host(binary, as_user, marker_dir):
    # Attack: the builder byte-compiles the tree on the host with `python -m compileall`, which
    # put its working directory first on sys.path: a py_compile.py where the builder was
    # started (a checkout of an untrusted project, say) ran on the host, as root when root
    # builds. The module now runs from /.
    top = world_dir()
    try:
        (top / "py_compile.py").write_text("open(%r, 'w').write('ran')\n" % str(marker_dir / "built"))
        os.chmod(top / "py_compile.py", 0o644)
        if as_user.name != "root":
            os.chown(top, UNPRIVILEGED, UNPRIVILEGED)
        r = run(binary, as_user, "rootfs", "build", "--out", top / "r", "--quiet", cwd=top)
        assert not (marker_dir / "built").exists(), "a module of the working directory ran on the host"
        assert r.returncode == 0, describe(r)
    finally:
        shutil.rmtree(top, ignore_errors=True)


# ------------------------------------------------------- what the jail writes is hostile

# Build code that, in the jail that runs pip, plants a symlink to a host file among what pip
# installs: read with the builder's rights (root's), it would copy that file into the tree.
PLANT = '''
if os.path.isdir("/pyjail/pip"):
    os.makedirs("/work/site", exist_ok=True)
    try:
        os.symlink(%r, "/work/site/leak.txt")
    except OSError:
        pass
'''


def test_a_symlink_the_jail_plants_is_not_followed(binary, as_user, marker_dir):
    links = world_dir()
    try:
        secret = links / "secret"
        secret.write_text("root's secret\n")
        make_sdist(links, "planter", "1.0", marker=marker_dir / "built",
                   plant=PLANT % str(secret))
        readable(links)
        os.chmod(secret, 0o600)
        top = world_dir()
        if as_user.name != "root":
            os.chown(top, UNPRIVILEGED, UNPRIVILEGED)
        r = run(binary, as_user, "rootfs", "build", "--out", top / "r", "--no-index",
                "--find-links", links, "--pip", "planter", "--allow-build", "--quiet")
        try:
            assert not (marker_dir / "built").exists(), "build code ran on the host"
            assert r.returncode == 0, describe(r)
            assert "left out of the tree what pip's jail made that a wheel cannot hold " \
                   "(symlinks, hard links, special files): leak.txt" in r.stderr
            tree = top / "r"
            assert list(tree.rglob("leak.txt")) == [] and list(tree.rglob("planter.py"))
            for p in tree.rglob("*"):
                if p.is_file() and not p.is_symlink() and p.stat().st_size < 1 << 20:
                    assert b"root's secret" not in p.read_bytes(), p
        finally:
            shutil.rmtree(top, ignore_errors=True)
    finally:
        shutil.rmtree(links, ignore_errors=True)


# Build code that, in the jail that downloads for the wheel cache, writes a file named as a
# wheel of another project among the downloads: taken into the cache, every later build that
# needs that project (another requirement, another user) would install it.
POISON = '''
if os.path.isdir("/pyjail/pip"):
    os.makedirs("/work/download", exist_ok=True)
    with open("/work/download/six-99.0-py2.py3-none-any.whl", "wb") as f:
        f.write(b"PK planted by build code")
'''


def test_build_code_cannot_plant_a_wheel_in_the_wheel_cache(binary, as_user, marker_dir):
    # The download jail runs no package code (rootfs_packages.NO_EXEC): the sdist's build
    # code never starts there, so nothing it would write reaches the cache. With
    # --allow-build it is built in the install jail, which writes nowhere near the cache.
    links = world_dir()
    try:
        make_sdist(links, "poisoner", "1.0", marker=marker_dir / "built", plant=POISON)
        readable(links)
        top = world_dir()
        if as_user.name != "root":
            os.chown(top, UNPRIVILEGED, UNPRIVILEGED)
        cache = top / "wheels"
        try:
            # A direct reference (as a requirements file or a wheel's dependency may hold):
            # pip takes it up even where it downloads wheels only. Its path in the jail: the
            # first --find-links directory.
            r = run(binary, as_user, "rootfs", "build", "--out", top / "r", "--no-index",
                    "--find-links", links, "--pip",
                    "poisoner @ file:///pyjail/links/0/poisoner-1.0.tar.gz", "--allow-build",
                    "--wheel-cache", cache, "--quiet")
            assert not (marker_dir / "built").exists(), "build code ran on the host"
            assert r.returncode == 0, describe(r)
            assert sorted(p.name for p in cache.iterdir()) == [], "build code planted a wheel"
            assert "the wheel cache takes only wheels downloaded without running any " \
                   "package's code" in r.stderr, r.stderr
            assert list((top / "r").rglob("poisoner.py"))     # built, in the install jail
        finally:
            shutil.rmtree(top, ignore_errors=True)
    finally:
        shutil.rmtree(links, ignore_errors=True)


# Run as another local user during root's build: for every staging directory beside the
# output that appears, try to write into it; print what got through.
INTRUDER = """
import glob, os, sys, time
top, deadline, got = sys.argv[1], time.monotonic() + float(sys.argv[2]), set()
print("watching", flush=True)
while time.monotonic() < deadline:
    for d in (glob.glob(os.path.join(top, "r.pyjail-pip-*")) +
              glob.glob(os.path.join(top, "r.pyjail-pip-*/*/"))):
        try:
            with open(os.path.join(d, "zz_intruder.pth"), "w") as f:
                f.write("import sys\\n")
        except OSError:
            continue
        if d not in got:
            got.add(d)
            print("wrote into", d, flush=True)
    time.sleep(0.005)
"""


def test_another_user_cannot_write_into_roots_staging_directory(binary, users, marker_dir):
    # Attack: root's pip jails ran as nobody (uid 65534), and the staging directory, the only
    # host directory they write, was nobody's: every process of the real nobody user could
    # write into it for the whole build (a .pth file the builder then copies into root's
    # rootfs, a wheel into the cache). Now the jails run as a host id of pyjail's own range
    # that no one else has while the build runs, and the directory is closed to others.
    if "root" not in users or "unprivileged" not in users:
        skip_or_fail("needs root and a second local user (uid 65534)")
    root, other = users["root"], users["unprivileged"]
    top = world_dir()
    links = world_dir()
    try:
        make_wheel(links, "tinydep", "1.0")
        readable(links)
        watcher = subprocess.Popen([*other.prefix, sys.executable, "-I", "-c", INTRUDER, str(top), "120"],
                                   stdout=subprocess.PIPE, text=True, cwd="/")
        assert watcher.stdout.readline() == "watching\n"
        r = run(binary, root, "rootfs", "build", "--out", top / "r", "--no-index", "--find-links", links,
                "--pip", "tinydep", "--quiet")
        watcher.kill()
        out, _ = watcher.communicate()
        assert r.returncode == 0, describe(r)
        assert list((top / "r").rglob("zz_intruder.pth")) == []
        assert sorted(p.name for p in top.iterdir()) == ["r"]
        assert "wrote into" not in out, out
    finally:
        shutil.rmtree(top, ignore_errors=True)
        shutil.rmtree(links, ignore_errors=True)


def test_root_does_not_build_in_a_directory_another_user_can_change(binary, users):
    # Attack: the owner of the directory root builds in renames root's build directory while
    # root fills it (path by path) and puts a link to a directory of root's in its place:
    # root then writes the rootfs's files there. Refused before anything is made.
    if "root" not in users:
        skip_or_fail("needs root")
    top = world_dir()
    try:
        os.chown(top, UNPRIVILEGED, UNPRIVILEGED)
        r = run(binary, users["root"], "rootfs", "build", "--out", top / "r", "--quiet")
        one_error(r, r"--out in %s: %s belongs to uid %d with mode 755: others can change it, and "
                     r"root builds this rootfs \(build into a directory only root can change, or "
                     r"build as that user\)$" % (re.escape(str(top)), re.escape(str(top)), UNPRIVILEGED))
        assert list(top.iterdir()) == []
    finally:
        shutil.rmtree(top, ignore_errors=True)


def pids_with(text: str) -> set:
    found = set()
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open("/proc/%s/cmdline" % p, "rb") as f:
                    if text.encode() in f.read():
                        found.add(int(p))
            except OSError:
                pass
    return found


def locked(path):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


# Build code that leaves among what pip installs a directory of 3000 subdirectories.
WIDE = '''
if os.path.isdir("/pyjail/pip") and not os.path.exists("/work/site/wide"):
    for i in range(3000):
        os.makedirs("/work/site/wide/%d" % i)
'''


def test_a_killed_builder_leaves_no_pip_jail_running_and_the_next_build_removes_its_dirs(
        binary, as_user, marker_dir):
    # A builder killed with SIGKILL (the OOM killer, a CI timeout) left its pip jail running
    # for up to its wall time (an hour), reparented. The jail's pyjail now dies with the
    # builder (its parent-death signal, which it keeps through its changes of ids), and the
    # jail with it. Its build and staging directories (hundreds of MB, for a big rootfs) stayed
    # for good: the next build of the same output now removes them, as it can take their
    # locks; not another user's entry of such a name, nor a symlink, nor those of a build
    # that runs (simulated here: a directory whose lock the test holds). That next build
    # also copies a directory of 3000 subdirectories, which took a descriptor each.
    links = world_dir()
    top = world_dir()
    try:
        make_sdist(links, "sleeper", "1.0", marker=marker_dir / "built",
                   plant='if os.path.isdir("/pyjail/pip"):\n    import time\n    time.sleep(120)\n')
        make_sdist(links, "widener", "1.0", marker=marker_dir / "built", plant=WIDE)
        readable(links)
        uid = 0 if as_user.name == "root" else UNPRIVILEGED
        if as_user.name != "root":
            os.chown(top, UNPRIVILEGED, UNPRIVILEGED)
        else:
            os.chmod(top, 0o1777)     # as /tmp: other users have entries there
        builder = subprocess.Popen([*as_user.prefix, str(binary), "rootfs", "build", "--out", str(top / "r"),
                                    "--no-index", "--find-links", str(links), "--pip", "sleeper",
                                    "--allow-build", "--quiet"], cwd="/", stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
        mark = "--workdir\0%s/r.pyjail-pip-" % top
        deadline = time.monotonic() + 60
        while not pids_with(mark) and time.monotonic() < deadline:
            time.sleep(0.1)
        jail = pids_with(mark)
        assert jail, "the pip jail did not start"
        own = sorted(top.iterdir())
        assert len(own) == 2 and all(locked(p) for p in own), own    # held for its life
        time.sleep(1)                       # into the sleeping build code
        os.kill(builder.pid, signal.SIGKILL)
        builder.wait()
        deadline = time.monotonic() + 15
        while pids_with(mark) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = pids_with(mark)
        for p in left:
            os.kill(p, signal.SIGKILL)
        assert not left, "the pip jail outlived its builder"

        killed = sorted(p.name for p in top.iterdir())
        assert [re.sub(r"-\w{8}$", "", n) for n in killed] == [
            "r.pyjail-pip", "r.pyjail-tmp"], killed
        assert not any(locked(top / n) for n in killed)
        # Another user's entry, a symlink, and a running build's directory, by those names.
        other = top / "r.pyjail-pip-foreign1"
        other.mkdir()
        (other / "data").write_text("theirs\n")
        os.chown(other, 0 if uid else UNPRIVILEGED, 0 if uid else UNPRIVILEGED)
        (top / "r.pyjail-tmp-alink123").symlink_to(links)
        running = top / "r.pyjail-tmp-running1"
        running.mkdir()
        (running / "data").write_text("in use\n")
        os.chown(running, uid, uid)
        fd = os.open(running, os.O_RDONLY | os.O_DIRECTORY)
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            r = run(binary, as_user, "rootfs", "build", "--out", top / "r", "--no-index",
                    "--find-links", links, "--pip", "widener", "--allow-build")
        finally:
            os.close(fd)
        assert r.returncode == 0, describe(r)
        for n in killed:
            assert "removed %s, left by a build of r that was killed" % (top / n) in r.stdout, \
                r.stdout
        assert sorted(p.name for p in top.iterdir()) == [
            "r", "r.pyjail-pip-foreign1", "r.pyjail-tmp-alink123", "r.pyjail-tmp-running1"]
        assert (other / "data").exists() and (running / "data").exists()
        assert sorted(p.name for p in links.iterdir()) == [
            "sleeper-1.0.tar.gz", "widener-1.0.tar.gz"]
        wide = next((top / "r").rglob("wide"))
        assert len(list(wide.iterdir())) == 3000
    finally:
        shutil.rmtree(top, ignore_errors=True)
        shutil.rmtree(links, ignore_errors=True)


# Build code that leaves in the staging directory a tree it closed to everyone (mode 000),
# and a chain of directories 3000 deep, some of them closed too.
CLOSE_UP = '''
if os.path.isdir("/pyjail/pip") and not os.path.exists("/work/deep"):
    os.makedirs("/work/keep/inner/deeper", exist_ok=True)
    with open("/work/keep/inner/deeper/data", "wb") as f:
        f.write(b"x" * 4096)
    for d in ("/work/keep/inner/deeper", "/work/keep/inner", "/work/keep"):
        os.chmod(d, 0)
    here = os.getcwd()
    os.mkdir("/work/deep")
    os.chdir("/work/deep")
    for _ in range(3000):
        os.mkdir("d")
        os.chdir("d")
    open("data", "w").close()
    for i in range(3000):
        os.chdir("..")
        if i % 700 == 0:
            os.chmod("d", 0)
    os.chdir(here)
'''


def test_a_failed_build_leaves_nothing_the_jail_closed_up_or_nested_deep(binary, as_user,
                                                                         marker_dir):
    # A build the jail's code made fail, after it left directories without permissions in
    # the staging directory: a user's builder could not list or remove them, and left them
    # (silently). And a chain 3000 deep: shutil.rmtree (recursive in Python 3.11) died of
    # RecursionError, with a traceback of 1000 lines, and left it all. They are opened up and
    # removed, without recursion or a descriptor per level; the error is pip's, one line.
    links = world_dir()
    try:
        make_sdist(links, "closer", "1.0", fail=True, marker=marker_dir / "built", plant=CLOSE_UP)
        readable(links)
        r, left, _ = build(binary, as_user, links, "--pip", "closer", "--allow-build")
        one_error(r, r"--allow-build: building closer-1\.0: its build failed \(in the jail\): "
                     r"RuntimeError: tiny backend: ")
        assert left == [], (left, describe(r))
    finally:
        shutil.rmtree(links, ignore_errors=True)


# Build code that puts among what pip installs a chain of directories deeper than any package.
DEEP_SITE = '''
if os.path.isdir("/pyjail/pip") and not os.path.exists("/work/site/deep"):
    here = os.getcwd()
    os.makedirs("/work/site/deep")
    os.chdir("/work/site/deep")
    for _ in range(200):
        os.mkdir("d")
        os.chdir("d")
    os.chdir(here)
'''


def test_a_tree_deeper_than_any_package_is_refused(binary, as_user, marker_dir):
    # What the jail installed is copied into the tree, which is then walked by path and
    # recursively (os.walk): a tree nested thousands deep would break those walks. Nothing
    # deeper than the bound reaches the tree.
    links = world_dir()
    try:
        make_sdist(links, "nester", "1.0", marker=marker_dir / "built", plant=DEEP_SITE)
        readable(links)
        r, left, _ = build(binary, as_user, links, "--pip", "nester", "--allow-build")
        one_error(r, r"what pip installed: deep(/d)+/?(\.\.\.)?: directories nested more than 128 "
                     r"deep, which no package needs \(the builder copies no deeper\) \(leave out "
                     r"the package that made them\)$")
        assert left == [], (left, describe(r))
    finally:
        shutil.rmtree(links, ignore_errors=True)


def test_a_wheel_cache_others_can_write_is_refused(binary, as_user, marker_dir):
    # Attack: a wheel cache another user can write (a /tmp/wheels someone else made) lets
    # them plant wheels for the builder's later builds, or a link the builder writes through.
    top = world_dir()
    try:
        cache = top / "wheels"
        cache.mkdir()
        os.chmod(cache, 0o777)
        if as_user.name != "root":
            os.chown(top, UNPRIVILEGED, UNPRIVILEGED)
            os.chown(cache, UNPRIVILEGED, UNPRIVILEGED)
        r = run(binary, as_user, "rootfs", "build", "--out", top / "r", "--no-index",
                "--find-links", top, "--pip", "anything", "--wheel-cache", cache, "--quiet")
        one_error(r, r"--wheel-cache %s: it belongs to uid \d+ or others can write it \(mode 777\) "
                     r"\(give a directory of your own that only you can write\)$" % re.escape(str(cache)))
        assert sorted(p.name for p in top.iterdir()) == ["wheels"]
    finally:
        shutil.rmtree(top, ignore_errors=True)


# ------------------------------------------------------------- the relay to the index


def test_the_jail_reaches_no_host_but_the_index(binary, as_user):
    """A direct reference to a host that is not the index: the relay refuses it."""
    top = world_dir()
    if as_user.name != "root":
        os.chown(top, UNPRIVILEGED, UNPRIVILEGED)
    try:
        r = run(binary, as_user, "rootfs", "build", "--out", top / "r", "--pip",
                "directref @ https://files.elsewhere.invalid/directref-1.0.tar.gz", "--quiet")
        one_error(r, r"pip install: .*; the relay to the index refused "
                     r"files\.elsewhere\.invalid:443 \(")
        assert list(top.iterdir()) == []
    finally:
        shutil.rmtree(top, ignore_errors=True)


@pytest.fixture
def https_index(tmp_path):
    """A PEP 503 index over HTTPS on the host's loopback, as `localhost`, with a certificate
    of its own (the builds trust it through PIP_CERT), serving tiny wheels and an sdist."""
    if shutil.which("openssl") is None:
        skip_or_fail("no openssl to make the index's certificate")
    d = world_dir("pyjail-index-")
    public = world_dir("pyjail-cert-")
    cert, key = public / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost",
                    "-keyout", str(key), "-out", str(cert)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.chmod(cert, 0o644)
    files = d / "files"
    files.mkdir()
    made = {}

    def publish(path):
        name = path.name.split("-")[0]
        made.setdefault(name, []).append(path.name)
        page = d / "simple" / name
        page.mkdir(parents=True, exist_ok=True)
        (page / "index.html").write_text("".join(
            '<a href="../../files/%s">%s</a>\n' % (f, f) for f in made[name]))

    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(d))
    handler.log_message = lambda *a: None
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(cert), str(key))
    httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield files, publish, "https://localhost:%d/simple" % httpd.server_address[1], cert
    httpd.shutdown()
    httpd.server_close()
    shutil.rmtree(d, ignore_errors=True)
    shutil.rmtree(public, ignore_errors=True)


def test_packages_from_an_index_through_the_relay(binary, as_user, marker_dir, https_index):
    """The jail installs from the index named by --index-url (a host of this machine, so named
    on purpose); a wheel there whose dependency is a URL sdist on another host cannot make
    pip fetch, let alone build, it."""
    files, publish, url, cert = https_index
    publish(make_wheel(files, "tinydep", "1.0", code="def answer():\n    return 42\n"))
    publish(make_wheel(files, "tinyapp", "2.0", code="import tinydep\nVALUE = tinydep.answer()\n",
                       requires=["tinydep>=1.0"]))
    publish(make_wheel(files, "wantsurl", "1.0",
                       requires=["urldep @ https://files.elsewhere.invalid/urldep-1.0.tar.gz"]))
    readable(files.parent)
    top = world_dir()
    if as_user.name != "root":
        os.chown(top, UNPRIVILEGED, UNPRIVILEGED)
    try:
        r = run(binary, as_user, "rootfs", "build", "--out", top / "r", "--index-url", url,
                "--pip", "tinyapp", "--quiet", env={"PIP_CERT": str(cert)})
        assert r.returncode == 0, describe(r)
        lock = json.loads((top / "r/etc/pyjail-rootfs.lock.json").read_text())
        assert {p["name"]: p["wheel"]["file"] for p in lock["packages"]} == {
            "tinyapp": "tinyapp-2.0-py3-none-any.whl", "tinydep": "tinydep-1.0-py3-none-any.whl"}
        r = run(binary, as_user, "--rootfs", top / "r", "--", "python3", "-c",
                "import tinyapp; print(tinyapp.VALUE)")
        assert r.returncode == 0 and r.stdout == "42\n", describe(r)
        r = run(binary, as_user, "rootfs", "build", "--out", top / "s", "--index-url", url,
                "--pip", "wantsurl", "--quiet", env={"PIP_CERT": str(cert)})
        one_error(r, r"pip install: .*; the relay to the index refused "
                     r"files\.elsewhere\.invalid:443 \(")
        assert not (marker_dir / "built").exists()
        assert sorted(p.name for p in top.iterdir()) == ["r"]
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_the_wheel_cache_is_filled_by_a_jail_and_read_offline(binary, as_user, https_index):
    """--wheel-cache (what the rootfs-data target uses): pip downloads in a jail, the builder
    moves the wheels into the cache, whose files stay the builder's; a later build takes them
    from there with no index at all."""
    files, publish, url, cert = https_index
    publish(make_wheel(files, "tinydep", "1.0", code="def answer():\n    return 42\n"))
    publish(make_wheel(files, "tinyapp", "2.0", code="import tinydep\nVALUE = tinydep.answer()\n",
                       requires=["tinydep>=1.0"]))
    readable(files.parent)
    top = world_dir()
    uid = 0 if as_user.name == "root" else UNPRIVILEGED
    os.chown(top, uid, uid)
    cache = top / "wheels"
    try:
        r = run(binary, as_user, "rootfs", "build", "--out", top / "r", "--index-url", url,
                "--wheel-cache", cache, "--pip", "tinyapp", "--quiet",
                env={"PIP_CERT": str(cert)})
        assert r.returncode == 0, describe(r)
        assert sorted(p.name for p in cache.iterdir()) == [
            "tinyapp-2.0-py3-none-any.whl", "tinydep-1.0-py3-none-any.whl"]
        assert {(p.lstat().st_uid, p.is_symlink()) for p in cache.iterdir()} == {(uid, False)}
        assert sorted(p.name for p in top.iterdir()) == ["r", "wheels"]
        shutil.rmtree(files)        # the index has nothing any more
        r = run(binary, as_user, "rootfs", "build", "--out", top / "s", "--no-index",
                "--wheel-cache", cache, "--pip", "tinyapp", "--quiet")
        assert r.returncode == 0, describe(r)
        r = run(binary, as_user, "--rootfs", top / "s", "--", "python3", "-c",
                "import tinyapp; print(tinyapp.VALUE)")
        assert r.returncode == 0 and r.stdout == "42\n", describe(r)
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_a_build_downloads_no_more_than_its_limit(binary, as_user, https_index):
    """--download-limit: the relay counts what the index sends, all files together. Attack:
    an index whose packages need more and more (large wheels, dependencies that multiply)
    fills the host's disk through the staging directory and the wheel cache; --fsize caps
    each file, not their sum. Under the limit a build goes through; over it, the relay cuts
    pip off, the build fails naming the limit, and nothing of the download is cached."""
    files, publish, url, cert = https_index
    publish(make_wheel(files, "tinydep", "1.0", code="def answer():\n    return 42\n"))
    publish(make_wheel(files, "tinyapp", "2.0", code="import tinydep\nVALUE = tinydep.answer()\n",
                       requires=["tinydep>=1.0"]))
    # 1 MiB that does not compress away (a wheel is a zip; its data is stored).
    blob = os.urandom(1 << 19).hex()
    publish(make_wheel(files, "bigdep", "1.0", code="DATA = %r\n" % blob))
    publish(make_wheel(files, "bigapp", "1.0", code="import bigdep\n", requires=["bigdep"]))
    readable(files.parent)
    top = world_dir()
    uid = 0 if as_user.name == "root" else UNPRIVILEGED
    os.chown(top, uid, uid)
    cache = top / "wheels"
    env = {"PIP_CERT": str(cert)}

    def build(out, *args):
        return run(binary, as_user, "rootfs", "build", "--out", top / out, "--index-url", url,
                   "--download-limit", "300K", *args, "--quiet", env=env)

    try:
        r = build("r", "--wheel-cache", cache, "--pip", "tinyapp")
        assert r.returncode == 0, describe(r)
        small = sorted(p.name for p in cache.iterdir())
        assert small == ["tinyapp-2.0-py3-none-any.whl", "tinydep-1.0-py3-none-any.whl"]
        r = build("s", "--wheel-cache", cache, "--pip", "bigapp")
        one_error(r, re.escape("pip download: the index sent more than --download-limit 300K, "
                               "the most a build may download, and the relay cut pip off (if "
                               "the packages need that much, raise it: --download-limit 600K)")
                  + "$")
        assert sorted(p.name for p in cache.iterdir()) == small
        r = build("s", "--pip", "bigapp")
        one_error(r, r"pip install: the index sent more than --download-limit 300K, ")
        assert sorted(p.name for p in top.iterdir()) == ["r", "wheels"]
        r = build("s", "--pip", "bigapp", "--download-limit", "2M")   # the last one counts
        assert r.returncode == 0, describe(r)
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_a_build_writes_no_more_than_its_install_limit(binary, as_user):
    """--install-limit: the builder watches the disk the pip jail writes to (the staging
    directory's) and stops the jail past the limit. Attack: a zip bomb, a wheel of a few KiB
    that pip unpacks to gigabytes on the host's disk; neither --fsize (per file) nor
    --download-limit (what the index sends) bounds that. Under the limit the wheel installs;
    over it the build fails naming the limit, and leaves nothing behind: no tree, no staging
    directory, the wheel cache as it was. (The watch counts every writer on that disk, and
    every file another program deletes there: the build writes to a filesystem of its own, a
    tmpfs, where nothing else does.)"""
    links, top = world_dir(), world_dir()
    mounted = os.geteuid() == 0 and subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2g,mode=0755", "pyjail-test", str(top)]).returncode == 0
    uid = 0 if as_user.name == "root" else UNPRIVILEGED
    os.chown(top, uid, uid)
    cache = top / "wheels"
    try:
        bomb = make_wheel(links, "zipbomb", "1.0", deflate=True,
                          more={"zipbomb_data/zeros.bin": bytes(8 << 20)})
        assert bomb.stat().st_size < 64 << 10           # 8 MiB of zeros: about 8 KiB
        # The same bytes stored: what the download for the wheel cache writes is watched too.
        make_wheel(links, "bigwheel", "1.0", more={"bigwheel_data/zeros.bin": bytes(8 << 20)})
        readable(links)

        def build(out, *args):
            return run(binary, as_user, "rootfs", "build", "--out", top / out, "--no-index",
                       "--find-links", links, *args, "--quiet")

        r = build("r", "--wheel-cache", cache, "--pip", "zipbomb", "--install-limit", "1G")
        assert r.returncode == 0, describe(r)
        [zeros] = (top / "r").rglob("zeros.bin")
        assert zeros.stat().st_size == 8 << 20
        cached = {p.name: p.read_bytes() for p in cache.iterdir()}
        assert list(cached) == ["zipbomb-1.0-py3-none-any.whl"]
        r = build("s", "--pip", "zipbomb", "--install-limit", "4M")
        one_error(r, re.escape("pip install: the space used on the disk that holds %s grew by "
                               "more than --install-limit 4M while pip ran in its jail (what "
                               "pip downloads, unpacks and builds there, and any other "
                               "program's writes), and the builder " % top) +
                  r"(stopped it|keeps nothing of what it made) " +
                  re.escape("(if the packages need that much, raise it: --install-limit 8M)") +
                  "$")
        assert sorted(p.name for p in top.iterdir()) == ["r", "wheels"]
        r = build("s", "--wheel-cache", cache, "--pip", "bigwheel", "--install-limit", "4M")
        one_error(r, r"pip download: the space used on the disk that holds .* grew by more "
                     r"than --install-limit 4M ")
        assert sorted(p.name for p in top.iterdir()) == ["r", "wheels"]
        assert {p.name: p.read_bytes() for p in cache.iterdir()} == cached
    finally:
        if mounted:
            subprocess.run(["umount", str(top)], check=True)
        shutil.rmtree(top, ignore_errors=True)
        shutil.rmtree(links, ignore_errors=True)
