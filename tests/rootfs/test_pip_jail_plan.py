"""The pure parts of running pip in a jail (rootfs_packages.py) and of its relay to the index
(rootfs_relay.py): the jail's command line, the checks of pip's report (written in the jail:
hostile), the relay's decisions; and the relay itself, in this process, against a server on
the loopback.
"""

import json
import os
import re
import socket
import ssl
import stat
import sys
import tempfile
import threading
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "rootfs"))
import rootfs_packages as rp  # noqa: E402
import rootfs_relay as rr  # noqa: E402


def raises(pattern, fn, *args):
    """fn(*args) fails with a BuildError whose one line matches `pattern`."""
    with pytest.raises(rp.BuildError) as e:
        fn(*args)
    assert re.search(pattern, e.value.line()), e.value.line()


def plan(**kw):
    args = dict(pyjail="/bin/pyjail", rootfs="/out/r.pyjail-tmp-x", python="/usr/bin/python3.11",
                pip_dir="/usr/lib/python3/dist-packages/pip", stage="/out/r.pyjail-pip-x",
                requirements=["/home/u/req.txt"], specs=["cffi"], find_links=["/w"],
                no_index=True, allow_build=False)
    args.update(kw)
    return rp.pip_jail_command(**args)


def pairs(cmd, opt):
    return [cmd[i + 1] for i, a in enumerate(cmd[:cmd.index("--")]) if a == opt]


def test_the_jail_sees_its_inputs_read_only_and_writes_only_the_stage():
    cmd = plan()
    assert pairs(cmd, "--rootfs") == ["/out/r.pyjail-tmp-x"]
    assert pairs(cmd, "--workdir") == ["/out/r.pyjail-pip-x"]
    assert pairs(cmd, "--bind") == []
    assert pairs(cmd, "--ro-bind") == ["/usr/lib/python3/dist-packages/pip:/pyjail/pip/pip",
                                       "/w:/pyjail/links/0",
                                       "/home/u/req.txt:/pyjail/requirements/0.txt"]
    assert pairs(cmd, "--net") == ["none"]
    pip = cmd[cmd.index("--") + 1:]
    assert pip[:3] == ["/usr/bin/python3.11", "-I", "-c"] and pip[3] == rp.NO_EXEC + rp.RUN_PIP
    assert pip[4] == "install" and "--only-binary" in pip
    assert pip[pip.index("--target") + 1] == "/work/site"
    assert pip[-6:] == ["--no-index", "--find-links", "/pyjail/links/0", "--requirement",
                        "/pyjail/requirements/0.txt", "cffi"]
    assert "PIP_CONFIG_FILE=/dev/null" in pairs(cmd, "--env")


def test_allow_build_drops_only_binary_and_root_names_the_host_user():
    cmd = plan(allow_build=True, host_user="65534:65534")
    assert "--only-binary" not in cmd and pairs(cmd, "--host-user") == ["65534:65534"]
    assert cmd[cmd.index("--") + 4] == rp.RUN_PIP     # a build runs its backend: exec allowed


def test_where_nothing_may_be_built_pip_runs_with_exec_refused():
    # The download that fills the wheel cache, and an install without --allow-build.
    for cmd in (plan(), plan(download=True), plan(download=True, allow_build=True)):
        assert cmd[cmd.index("--") + 4] == rp.NO_EXEC + rp.RUN_PIP
    cmd = plan(no_index=False, find_links=[], relay="/r.sock", index_urls=["https://i.example/s"])
    assert cmd[cmd.index("--") + 4] == rp.NO_EXEC + rp.RUN_PIP_RELAYED


def test_the_exec_refusal_holds_for_a_child_and_fails_closed(tmp_path):
    # Here, on the host, in a child of this test: the prelude, then a subprocess.
    import subprocess
    ok = subprocess.run([sys.executable, "-I", "-c", rp.NO_EXEC + (
        "import subprocess\n"
        "try:\n    subprocess.run(['/bin/true'])\nexcept PermissionError:\n    print('refused')\n"
        "import os\nos.fork() or os._exit(0)\nprint('fork ok')\n")],
        capture_output=True, text=True, timeout=30)
    assert ok.returncode == 0 and ok.stdout == "refused\nfork ok\n", ok
    # Where the filter cannot be installed (no ctypes), pip never runs.
    blocked = subprocess.run([sys.executable, "-I", "-c", "import sys; sys.modules['ctypes'] = None\n" +
                              rp.NO_EXEC + "print('pip ran')"], capture_output=True, text=True, timeout=30)
    assert blocked.returncode == 1 and blocked.stdout == "", blocked
    assert "cannot refuse execve to pip" in blocked.stderr, blocked


def test_with_an_index_the_jail_has_loopback_and_the_relay():
    cmd = plan(no_index=False, find_links=[], relay="/out/r.pyjail-pip-y/relay.sock",
               index_urls=["https://pypi.example/simple"], ca_file="/etc/ssl/ca.crt")
    assert pairs(cmd, "--net") == ["loopback"]
    assert pairs(cmd, "--ro-bind")[1:3] == ["/out/r.pyjail-pip-y/relay.sock:/pyjail/relay.sock",
                                            "/etc/ssl/ca.crt:/pyjail/ca.pem"]
    pip = cmd[cmd.index("--") + 1:]
    assert pip[3] == rp.NO_EXEC + rp.RUN_PIP_RELAYED and "--no-index" not in pip
    assert pip[pip.index("--index-url") + 1] == "https://pypi.example/simple"
    assert pip[pip.index("--cert") + 1] == "/pyjail/ca.pem"


def test_a_path_that_cannot_be_bound_is_refused():
    raises("--find-links /a:b: a path with ':' or a newline cannot be bound",
           lambda: plan(find_links=["/a:b"]))


def test_download_writes_to_the_stage():
    cmd = plan(download=True)
    pip = cmd[cmd.index("--") + 1:]
    assert pip[4] == "download" and pip[pip.index("--dest") + 1] == "/work/download"
    assert pairs(cmd, "--bind") == []


def test_a_stopped_jail_is_killed_at_once():
    # The builder stops the jail with SIGTERM to pyjail (DiskWatch): no grace, in which build
    # code that ignores SIGTERM would go on writing.
    assert pairs(plan(), "--kill-grace") == ["0"]


# ------------------------------------------------------------------- the staging disk

GiB = 1 << 30


def disk(used=10 * GiB, avail=50 * GiB, size=100 * GiB, inodes_avail=5000, inodes=10000):
    return rp.DiskSample(used, avail, size, inodes_avail, inodes)


def test_the_jail_goes_on_up_to_its_limit_and_stops_past_it():
    start = disk()
    assert rp.disk_verdict(start, start, 4 << 20) is None
    assert rp.disk_verdict(start, disk(used=start.used + (4 << 20)), 4 << 20) is None
    assert rp.disk_verdict(start, disk(used=start.used + (4 << 20) + 1), 4 << 20) == "limit"
    # What was used before the jail started does not count; what is freed since does.
    assert rp.disk_verdict(disk(used=90 * GiB), disk(used=90 * GiB + 1), 4 << 20) is None
    assert rp.disk_verdict(start, disk(used=start.used - GiB), 4 << 20) is None


def test_the_floor_of_free_space_is_five_percent_from_1_to_4_gib():
    assert rp.free_floor(2 * GiB) == GiB                 # 5% would be 102 MiB
    assert rp.free_floor(40 * GiB) == 2 * GiB
    assert rp.free_floor(4096 * GiB) == 4 * GiB          # 5% would be 205 GiB
    start = disk()      # 100 GiB: its floor is 4 GiB
    assert rp.disk_verdict(start, disk(avail=4 * GiB), 32 * GiB) is None
    assert rp.disk_verdict(start, disk(avail=4 * GiB - 1), 32 * GiB) == "space"
    start = disk(size=40 * GiB)
    assert rp.disk_verdict(start, disk(avail=2 * GiB, size=40 * GiB), 32 * GiB) is None
    assert rp.disk_verdict(start, disk(avail=2 * GiB - 1, size=40 * GiB), 32 * GiB) == "space"
    # A disk below its floor before pip starts: pip does not start.
    small = disk(used=GiB, avail=GiB - 1, size=10 * GiB)
    assert rp.disk_verdict(small, small, 32 * GiB) == "space"


def test_the_floor_of_free_inodes_is_five_percent_where_there_is_a_count():
    start = disk()
    assert rp.disk_verdict(start, disk(inodes_avail=500), GiB) is None
    assert rp.disk_verdict(start, disk(inodes_avail=499), GiB) == "inodes"
    assert rp.disk_verdict(start, disk(inodes_avail=0, inodes=0), GiB) is None   # btrfs
    # The limit is said first, then space, then inodes.
    assert rp.disk_verdict(start, disk(used=20 * GiB, avail=0, inodes_avail=0), GiB) == "limit"
    assert rp.disk_verdict(start, disk(avail=0, inodes_avail=0), GiB) == "space"


def test_the_disk_errors_name_the_limit_or_the_floor_and_the_fix():
    def line(*args, **kw):
        return rp.DiskLimitError(*args, **kw).line("pyjail rootfs")
    assert line("limit", disk(), 300 << 10, "pip install", "/srv/r") == (
        "pyjail rootfs: pip install: the space used on the disk that holds /srv/r grew by more "
        "than --install-limit 300K while pip ran in its jail (what pip downloads, unpacks and "
        "builds there, and any other program's writes), and the builder stopped it (if the "
        "packages need that much, raise it: --install-limit 600K)")
    assert line("limit", disk(), 32 * GiB, "pip download", "/srv/r", "after", True) == (
        "pyjail rootfs: pip download: the space used on the disk that holds /srv/r grew by more "
        "than --install-limit 32G while pip ran in its jail (what pip downloads, unpacks and "
        "builds there, and any other program's writes), and the builder keeps nothing of what "
        "it made (a rebuild keeps its build's limit; if the packages need that much, build it "
        "again with --install-limit 64G)")
    assert line("space", disk(avail=700 << 20, size=10 * GiB), GiB, "pip install", "/srv/r",
                "before") == (
        "pyjail rootfs: pip install: the disk that holds /srv/r has 700 MiB free, less than the "
        "1 GiB the builder keeps free while pip runs (5% of the disk, from 1 GiB to 4 GiB), so "
        "pip did not start (free space there, or build the rootfs on another disk)")
    assert line("space", disk(avail=int(1.5 * GiB)), GiB, "pip install", "/srv/r") == (
        "pyjail rootfs: pip install: the disk that holds /srv/r has 1.5 GiB free, less than the "
        "4 GiB the builder keeps free while pip runs (5% of the disk, from 1 GiB to 4 GiB), and "
        "the builder stopped it (free space there, or build the rootfs on another disk)")
    assert line("inodes", disk(inodes_avail=12), GiB, "pip install", "/srv/r") == (
        "pyjail rootfs: pip install: the disk that holds /srv/r has 12 inodes free, less than "
        "the 500 (5% of its inodes) the builder keeps free while pip runs, and the builder "
        "stopped it (remove files there, or build the rootfs on another disk)")


class FakeDisk:
    """rp.disk_sample for a DiskWatch: the same disk, whose use grows by `grow` bytes at each
    sample after the first `quiet` ones."""

    def __init__(self, grow=0, quiet=0, **kw):
        self.grow, self.quiet, self.kw, self.samples = grow, quiet, kw, 0

    def __call__(self, path):
        n = max(0, self.samples - self.quiet)
        self.samples += 1
        return disk(used=10 * GiB + n * self.grow, **self.kw)


# A jail that will not stop: it ignores SIGTERM, and writes its output after it.
STUBBORN = ("import signal, sys, time\n"
            "signal.signal(signal.SIGTERM, lambda *a: print('got SIGTERM', flush=True))\n"
            "print('started', flush=True)\n"
            "time.sleep(60)\n")


def test_a_jail_past_its_limit_gets_sigterm_then_sigkill(monkeypatch):
    monkeypatch.setattr(rp, "disk_sample", FakeDisk(grow=GiB, quiet=2))
    monkeypatch.setattr(rp, "STOP_GRACE", 0.5)
    watch = rp.DiskWatch("/stage", 4 << 20, "pip install", "/srv")
    proc = rp.pip_run([sys.executable, "-c", STUBBORN], watch)
    assert proc.returncode == -9 and proc.stdout == "started\ngot SIGTERM\n", proc
    assert watch.error.what == "pip install"
    assert re.match(r"the space used on the disk that holds /srv grew by more than "
                    r"--install-limit 4M .* and the builder stopped it$", watch.error.why), \
        watch.error.why
    # Whatever pip said: the builder stopped it, and says so.
    monkeypatch.setattr(rp, "disk_sample", FakeDisk(grow=GiB))
    with pytest.raises(rp.DiskLimitError):
        rp.run_pip([sys.executable, "-c", "import sys; print('ERROR: No matching distribution "
                    "found for nosuch'); sys.exit(1)"],
                   "CPython", rp.DiskWatch("/stage", 4 << 20, "pip install", "/srv"))


def test_a_jail_within_its_bounds_runs_to_its_end(monkeypatch):
    monkeypatch.setattr(rp, "disk_sample", FakeDisk(grow=1 << 20))
    watch = rp.DiskWatch("/stage", 4 << 30, "pip install", "/srv")
    proc = rp.pip_run([sys.executable, "-c", "import time; time.sleep(0.7); print('x' * 100000)"],
                      watch)
    assert proc.returncode == 0 and proc.stdout == "x" * 100000 + "\n" and watch.error is None
    # pip's own failure is explained as before.
    with pytest.raises(rp.BuildError) as e:
        rp.run_pip([sys.executable, "-c", "import sys; print('ERROR: No matching distribution "
                    "found for nosuch'); sys.exit(1)"],
                   "CPython", rp.DiskWatch("/stage", 4 << 30, "pip install", "/srv"))
    assert not isinstance(e.value, rp.DiskLimitError)
    assert e.value.what == "requirement nosuch", e.value.line()


def test_a_jail_that_filled_the_disk_and_ended_is_refused(monkeypatch):
    # Between two samples: the one after the jail ended sees it.
    monkeypatch.setattr(rp, "disk_sample", FakeDisk(grow=GiB))
    watch = rp.DiskWatch("/stage", 4 << 20, "pip install", "/srv")
    proc = rp.pip_run([sys.executable, "-c", "pass"], watch)
    assert proc.returncode == 0
    assert watch.error is not None and "keeps nothing of what it made" in watch.error.why


def test_no_jail_starts_on_a_disk_below_its_floor(monkeypatch, tmp_path):
    monkeypatch.setattr(rp, "disk_sample", FakeDisk(avail=100 << 20))
    marker = tmp_path / "ran"
    with pytest.raises(rp.DiskLimitError) as e:
        rp.pip_run([sys.executable, "-c", "open(%r, 'w')" % str(marker)],
                   rp.DiskWatch("/stage", GiB, "pip install", "/srv"))
    assert "has 100 MiB free, less than the 4 GiB" in e.value.why
    assert e.value.why.endswith("so pip did not start") and not marker.exists()


def test_the_disk_is_sampled_from_statvfs(tmp_path):
    now = rp.disk_sample(str(tmp_path))
    assert now.size == os.statvfs(tmp_path).f_blocks * os.statvfs(tmp_path).f_frsize
    assert 0 < now.used and 0 < now.avail and now.used + now.avail <= now.size
    assert 0 <= now.inodes_avail <= now.inodes or now.inodes == 0


# ------------------------------------------------------------------------ the report

WHEEL = {"download_info": {"url": "file:///pyjail/links/0/tinyapp-2.0-py3-none-any.whl",
                           "archive_info": {"hash": "sha256=" + "a" * 64}},
         "metadata": {"name": "tinyapp", "version": "2.0"}}


def report(*items):
    return json.dumps({"version": "1", "install": list(items)}).encode()


def with_info(**info):
    return dict(WHEEL, download_info=info)


def test_a_wheel_is_accepted():
    assert rp.check_report(report(WHEEL), False) == [
        {"name": "tinyapp", "version": "2.0", "file": "tinyapp-2.0-py3-none-any.whl",
         "sha256": "a" * 64, "built": False}]


@pytest.mark.parametrize("info, source", [
    ({"url": "file:///pyjail/links/0/x-1.0.tar.gz", "archive_info": {}},
     "x-1.0.tar.gz, a source distribution"),
    ({"url": "file:///home/u/proj", "dir_info": {}}, "a local directory"),
    ({"url": "https://h/x.git", "vcs_info": {"vcs": "git"}}, "a version control URL"),
    # A wheel's name on a directory is still a directory.
    ({"url": "file:///d/x-1.0-py3-none-any.whl", "dir_info": {}}, "a local directory"),
])
def test_what_pip_built_is_refused_without_allow_build(info, source):
    with pytest.raises(rp.BuildError) as e:
        rp.check_report(report(with_info(**info)), False)
    assert e.value.what == "requirement tinyapp"
    assert e.value.why == ("pip built it from %s (in the jail), and built packages are kept "
                           "only with --allow-build" % source)
    got = rp.check_report(report(with_info(**info)), True)
    assert got[0]["built"] is True


@pytest.mark.parametrize("data, why", [
    (b"\xff", "not JSON"),
    (b"[" * 100000 + b"]" * 100000, "not JSON"),
    (b"[]", "no list of installs"),
    (json.dumps({"install": {}}).encode(), "no list of installs"),
    (report("x"), "an install without metadata"),
    (report(dict(WHEEL, metadata={"name": "../etc", "version": "1"})), "a distribution name"),
    (report(dict(WHEEL, metadata={"name": "a\nb", "version": "1"})), "a distribution name"),
    (report(dict(WHEEL, metadata={"name": "a", "version": "1 2"})), "a version"),
    (report(with_info(url="file:///x-1-py3-none-any.whl", archive_info={"hash": "sha256=zz"})),
     "the hash of"),
    (report(WHEEL, WHEEL), "tinyapp installed twice"),
    (report(with_info(url=["x"], archive_info={})), "the URL of"),
])
def test_a_hostile_report_is_refused(data, why):
    raises("pip: its installation report is not usable: " + why, rp.check_report, data, True)


def test_the_report_is_read_without_following_a_symlink_and_bounded(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("{}")
    stage = tmp_path / "stage"
    stage.mkdir()
    (stage / "report.json").symlink_to(secret)
    fd = os.open(stage, os.O_RDONLY | os.O_DIRECTORY)
    try:
        raises("pip: no installation report", rp.read_report, fd)
        (stage / "report.json").unlink()
        with open(stage / "report.json", "wb") as f:
            f.truncate(rp.REPORT_LIMIT + 1)
        raises("larger than 16 MiB", rp.read_report, fd)
    finally:
        os.close(fd)


def test_the_lock_lists_only_what_the_report_does(tmp_path):
    for name in ("tinyapp-2.0.dist-info", "planted-1.0.dist-info"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "METADATA").write_text("Name: %s\nVersion: 1\n\n" % name.split("-")[0])
    installed = rp.check_report(report(WHEEL), False)
    raises("planted-1.0.dist-info was installed, but pip's report does not list it",
           rp.lock_entries, str(tmp_path), "pip", installed)
    entries = rp.lock_entries(str(tmp_path), "pip", installed, {"tinyapp-2.0.dist-info"})
    assert [e["name"] for e in entries] == ["tinyapp"]


# ------------------------------------------------------------------------- the relay


def test_allowed_hosts():
    assert rr.allowed_hosts([], []) == {"pypi.org": {443}, "files.pythonhosted.org": {443}}
    assert rr.allowed_hosts(["https://Idx.Example:8443/simple"], ["https://f.example/w/", "/d"]) \
        == {"idx.example": {8443}, "f.example": {443}}
    for bad in ("http://pypi.org/simple", "https:///simple", "file:///x"):
        with pytest.raises(ValueError):
            rr.allowed_hosts([bad], [])


@pytest.mark.parametrize("head, expected", [
    (b"CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org:443\r\n\r\n", ("pypi.org", 443)),
    (b"CONNECT PyPI.org:443 HTTP/1.0\r\n\r\n", ("pypi.org", 443)),
    (b"GET http://pypi.org/ HTTP/1.1\r\n\r\n", None),
    (b"CONNECT pypi.org:443 HTTP/1.1\r\n", None),
    (b"CONNECT pypi.org:99999 HTTP/1.1\r\n\r\n", None),
    (b"CONNECT [::1]:443 HTTP/1.1\r\n\r\n", None),
    (b"CONNECT pypi.org\x00evil:443 HTTP/1.1\r\n\r\n", ("pypi.org\x00evil", 443)),
])
def test_parse_connect(head, expected):
    if expected is None:
        with pytest.raises(ValueError):
            rr.parse_connect(head)
    else:
        assert rr.parse_connect(head) == expected


@pytest.mark.parametrize("address, private_ok, ok", [
    ("151.101.0.223", False, True),
    ("203.0.113.80", False, True),
    ("127.0.0.1", False, False), ("127.0.0.1", True, True),
    ("10.1.2.3", False, False), ("10.1.2.3", True, True),
    ("::ffff:192.168.1.1", False, False),
    ("169.254.169.254", True, False),     # cloud metadata: never
    ("fe80::1", True, False), ("224.0.0.1", True, False), ("0.0.0.0", True, False),
])
def test_address_ok(address, private_ok, ok):
    assert rr.address_ok(address, private_ok) is ok


@pytest.fixture
def echo_server():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)

    def serve():
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            with c:
                data = c.recv(100)
                c.sendall(b"echo:" + data)

    threading.Thread(target=serve, daemon=True).start()
    yield srv.getsockname()[1]
    srv.close()


def client_hello(name):
    """The first TLS record a client sends to `name`."""
    ctx = ssl.create_default_context()
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ctx.wrap_bio(incoming, outgoing, server_hostname=name)
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def test_client_hello_sni():
    assert rr.client_hello_sni(client_hello("PyPI.org")) == "pypi.org"
    hello = client_hello("pypi.org")
    for bad in (b"", b"GET / HTTP/1.1\r\n\r\n", hello[:40], hello[:-1],
                b"\x16\x03\x01\x00\x05\x02\x00\x00\x01\x00"):
        with pytest.raises(ValueError):
            rr.client_hello_sni(bad)


def ask(path, head, payload=b""):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(30)
    s.connect(path)
    s.sendall(head)
    reply = b""
    while b"\r\n\r\n" not in reply:
        try:
            chunk = s.recv(1)
        except ConnectionResetError:
            break
        if not chunk:
            break
        reply += chunk
    if payload and reply.startswith(b"HTTP/1.1 200"):
        s.sendall(payload)
        try:
            reply += s.recv(100)
        except ConnectionResetError:
            pass
    s.close()
    return reply


def test_the_relay_reaches_only_the_named_hosts(echo_server):
    d = tempfile.mkdtemp()
    path = os.path.join(d, "relay.sock")
    relay = rr.Relay(path, {"localhost": {echo_server}}, {"localhost"})
    try:
        # Only the builder's user (or, given, the jail's host id) may connect.
        st = os.stat(path)
        assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (os.geteuid(), 0o600)
        hello = client_hello("localhost")
        got = ask(path, b"CONNECT localhost:%d HTTP/1.1\r\n\r\n" % echo_server, hello)
        assert got == b"HTTP/1.1 200 Connection established\r\n\r\necho:" + hello[:95]
        # TLS for another name through the tunnel to this one (domain fronting): cut.
        got = ask(path, b"CONNECT localhost:%d HTTP/1.1\r\n\r\n" % echo_server,
                  client_hello("other.example"))
        assert got == b"HTTP/1.1 200 Connection established\r\n\r\n"
        assert ask(path, b"CONNECT localhost:1 HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 403")
        assert ask(path, b"CONNECT evil.example:443 HTTP/1.1\r\n\r\n").startswith(
            b"HTTP/1.1 403")
        assert ask(path, b"GET http://localhost/ HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 405")
        assert ask(path, b"X" * (rr.HEAD_LIMIT + 10)) == b""
        assert relay.refused == ["localhost:%d (TLS for other.example)" % echo_server,
                                 "localhost:1", "evil.example:443",
                                 "a request that is not CONNECT"]
    finally:
        relay.close()
    # Loopback only for a host the user named as an index.
    relay = rr.Relay(path + "2", {"localhost": {echo_server}})
    try:
        got = ask(path + "2", b"CONNECT localhost:%d HTTP/1.1\r\n\r\n" % echo_server,
                  client_hello("localhost"))
        assert got == b"HTTP/1.1 200 Connection established\r\n\r\n"
        assert "localhost (address 127.0.0.1)" in relay.refused
    finally:
        relay.close()


# ------------------------------------------------- the relay's bound on what a build downloads


@pytest.mark.parametrize("text, size", [
    ("1", 1), ("300K", 300 << 10), ("300k", 300 << 10), ("64M", 64 << 20), ("8G", 8 << 30),
    ("2GiB", 2 << 30), ("512B", 512), ("0", None), ("0G", None), ("", None), ("-1", None),
    ("1.5G", None), ("8T", None), ("8 G", None), ("G", None), ("8G\n", None),
    ("99999999999999999999G", None),
])
def test_parse_size(text, size):
    if size is None:
        with pytest.raises(ValueError):
            rr.parse_size(text)
    else:
        assert rr.parse_size(text) == size


def test_format_size_gives_a_size_as_the_option_takes_it():
    assert [rr.format_size(n) for n in (8 << 30, 300 << 10, 3 << 19, 1000, 1536 << 20)] == \
        ["8G", "300K", "1536K", "1000", "1536M"]
    assert rr.format_size(rr.DOWNLOAD_LIMIT) == "8G"
    for n in (1, 999, 300 << 10, 5 << 30):
        assert rr.parse_size(rr.format_size(n)) == n


def test_the_download_budget_is_one_total_and_stays_spent():
    budget = rr.DownloadBudget(1000)
    assert budget.take(600) and budget.take(400)       # exactly the limit passes
    assert not budget.take(1) and budget.over
    assert budget.used == 1000
    budget = rr.DownloadBudget(1000)
    assert budget.take(900) and not budget.take(200)   # a chunk that would pass it is not taken
    assert not budget.take(50)                         # nor anything after, though it would fit
    assert budget.used == 900


@pytest.fixture
def sending_server():
    """A server on the loopback standing in for the index: it reads the TLS record the relay
    passes on, then a line "N", sends N bytes and closes (N = 0: sends nothing, holds the
    connection until the other side ends it)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)

    def read(c, n):
        data = b""
        while len(data) < n:
            chunk = c.recv(n - len(data))
            if not chunk:
                raise OSError("closed")
            data += chunk
        return data

    def serve_one(c):
        with c:
            try:
                header = read(c, 5)
                read(c, int.from_bytes(header[3:5], "big"))
                line = b""
                while not line.endswith(b"\n"):
                    line += read(c, 1)
                n = int(line)
                if n:
                    c.sendall(b"x" * n)
                else:
                    while c.recv(4096):
                        pass
            except OSError:
                pass

    def serve():
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            threading.Thread(target=serve_one, args=(c,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    yield srv.getsockname()[1]
    srv.close()


def tunnel(path, port):
    """A connection through the relay to the server at `port`, past its ClientHello check."""
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(30)
    s.connect(path)
    head = b""
    try:
        s.sendall(b"CONNECT localhost:%d HTTP/1.1\r\n\r\n" % port + client_hello("localhost"))
        while not head.endswith(b"\r\n\r\n"):
            chunk = s.recv(1)
            if not chunk:
                break
            head += chunk
    except (BrokenPipeError, ConnectionResetError):
        pass                # refused: closed at once
    return s, head


def fetch(path, port, n):
    """The bytes the jail gets through the relay when the index sends `n`."""
    s, head = tunnel(path, port)
    with s:
        assert head == b"HTTP/1.1 200 Connection established\r\n\r\n", head
        s.sendall(b"%d\n" % n)
        got = b""
        while True:
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            got += chunk
    return got


@pytest.fixture
def relay_sock():
    with tempfile.TemporaryDirectory() as d:
        yield os.path.join(d, "relay.sock")


def test_the_relay_passes_a_download_under_its_limit(sending_server, relay_sock):
    path = relay_sock
    relay = rr.Relay(path, {"localhost": {sending_server}}, {"localhost"},
                     download_limit=300 << 10)
    try:
        # Two connections, together exactly the limit: all of it, and the relay goes on.
        assert fetch(path, sending_server, 200 << 10) == b"x" * (200 << 10)
        assert fetch(path, sending_server, 100 << 10) == b"x" * (100 << 10)
        assert relay.stopped is None and relay.budget.used == 300 << 10
    finally:
        relay.close()


def test_the_relay_stops_a_download_over_its_limit(sending_server, relay_sock):
    # Attack: an index that sends without end, over many connections (many large wheels,
    # dependencies that multiply), to fill the host's disk through the staging directory and
    # the wheel cache: no connection is over the per-connection bound, their sum is.
    path = relay_sock
    relay = rr.Relay(path, {"localhost": {sending_server}}, {"localhost"},
                     download_limit=300 << 10)
    try:
        # A connection that sends nothing yet: cut as well when another passes the limit.
        idle, head = tunnel(path, sending_server)
        assert head.startswith(b"HTTP/1.1 200")
        idle.sendall(b"0\n")
        assert fetch(path, sending_server, 200 << 10) == b"x" * (200 << 10)
        got = fetch(path, sending_server, 1 << 20)    # the one that goes over
        assert len(got) <= 100 << 10, len(got)
        assert relay.stopped == "the index's hosts sent more than 300K"
        assert relay.budget.used <= 300 << 10
        assert idle.recv(1) == b""                    # cut, not left to its idle timeout
        idle.close()
        # And no new connection is relayed.
        s, head = tunnel(path, sending_server)
        s.close()
        assert head == b"", head
        assert relay.budget.used <= 300 << 10
    finally:
        relay.close()


def test_a_packages_text_reaches_the_terminal_without_control_characters():
    # Attack: an error text from package code (pip's output) with terminal escape sequences:
    # a changed title, a cleared line. Each control character is shown as "?".
    hostile = "boom\x1b]0;TITLE\x07\x1b[2K\x9b31m done"
    assert rp.one_line(hostile) == "boom?]0;TITLE??[2K?31m done"
    line = rp.BuildError("requirement x", hostile, "fix\x1b[1A").line("pyjail rootfs")
    assert not any(ord(c) < 32 or 127 <= ord(c) < 160 for c in line), repr(line)


def test_pip_s_own_crash_is_explained_by_what_it_raised():
    # A wheel whose tree pip cannot extract (a thousand directories deep) made pip crash,
    # and the builder said only "Exception:".
    log = ("Processing /links/deep-1.0-py3-none-any.whl\n"
           "ERROR: Exception:\nTraceback (most recent call last):\n"
           '  File "<frozen os>", line 215, in makedirs\n'
           "  [Previous line repeated 979 more times]\n"
           "RecursionError: maximum recursion depth exceeded\n")
    what, why, fix = rp.explain_pip_failure(log, "CPython 3.11")
    assert why == "pip failed: RecursionError: maximum recursion depth exceeded", why
    # Package code that prints pip's words and kills pip (--allow-build): still one line.
    for log in ("ERROR:  Exception:\n", "Collecting evil\nException:\n"):
        what, why, fix = rp.explain_pip_failure(log, "CPython 3.11")
        assert why == "pip failed: an exception", (log, why)
