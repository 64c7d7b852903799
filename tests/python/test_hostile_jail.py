"""Everything that comes out of a jail is hostile: the driver's side of the boundary.

Each attack is made twice where it can be: for real, by a program or cell in a jail
(which, with the fixes, can no longer reach the channel, or is ended on time), and by a
stand-in jail (hostile_jail.py) that feeds the driver the forged frames such a program
would send, so that the driver's own checks are shown to hold even against a jail whose
server was taken over. Drivers run in a fresh host interpreter (drive()), which gives
their peak RSS and keeps a driver that would hang from hanging the tests.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import pyjail
from pyjail_testing.package import REPO, need, run_python

from pyjail import _channel, _common, _run, _wire

HERE = os.path.dirname(os.path.abspath(__file__))
MiB = 1 << 20
# Host memory per frame: a small multiple of the frame's size, plus the interpreter.
FIXED = 50 * MiB


def rss_bound(frame_bytes):
    return 8 * frame_bytes + FIXED


# ------------------------------------------------------------------ drivers

def _user_prefix(user):
    """The command prefix that runs a driver as `user`: "root" (pyjail then runs as root,
    its jail as nobody) or "unprivileged" (65534 via setpriv when the tests run as root)."""
    if user == "root":
        need(os.geteuid() == 0, "the tests do not run as root: pyjail cannot be run as root")
        return []
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    need(setpriv is not None, "setpriv (util-linux) is missing: cannot run as 65534")
    return [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--"]


_package_copies = []


def _package_path(prefix):
    """Where the driver imports pyjail from: this checkout's python/, or, for a driver run
    as another user, a world-readable copy of it (the checkout may be private)."""
    if not prefix:
        return str(REPO / "python")
    if not _package_copies:
        import atexit
        import tempfile
        top = tempfile.mkdtemp(prefix="pyjail-package-")
        atexit.register(shutil.rmtree, top, True)
        shutil.copytree(str(REPO / "python" / "pyjail"), os.path.join(top, "pyjail"),
                        ignore=shutil.ignore_patterns("__pycache__"))
        for d, _dirs, files in os.walk(top):
            os.chmod(d, 0o755)
            for f in files:
                os.chmod(os.path.join(d, f), 0o644)
        _package_copies.append(top)
    return _package_copies[0]


def drive(code, *, user=None, env=None, timeout=120):
    """Run driver code (it fills the dict `out`) in a fresh host interpreter; returns `out`
    with what the code raised, how long it took (s) and the interpreter's peak RSS (bytes,
    its VmHWM).
    A driver still running after `timeout` s is killed: the test fails, naming the hang."""
    prog = (
        "import json, os, sys, time\n"
        "import pyjail\n"
        "out = {}\n"
        "t0 = time.monotonic()\n"
        "try:\n" + textwrap.indent(textwrap.dedent(code), "    ") + "\n"
        "except BaseException as e:\n"
        "    out['raised'] = type(e).__name__\n"
        "    out['message'] = str(e)\n"
        "out['elapsed'] = time.monotonic() - t0\n"
        # VmHWM, not ru_maxrss, which keeps the peak of the process that forked this one.
        "out['rss'] = [int(l.split()[1]) * 1024 for l in open('/proc/self/status')\n"
        "              if l.startswith('VmHWM:')][0]\n"
        "print('RESULT ' + json.dumps(out, default=repr), flush=True)\n"
        "os._exit(0)\n")
    cmd = _user_prefix(user) if user else []
    e = dict(os.environ)
    e["PYTHONPATH"] = _package_path(cmd)
    e.update(env or {})
    proc = subprocess.Popen(cmd + [sys.executable, "-c", prog], env=e, cwd="/",
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail("the driver was still running after %d s" % timeout, pytrace=False)
    lines = [l for l in stdout.decode().splitlines() if l.startswith("RESULT ")]
    assert lines, "the driver died (%s): %s" % (proc.returncode, stderr.decode()[-3000:])
    return json.loads(lines[-1][len("RESULT "):])


@pytest.fixture
def hostile(tmp_path):
    """A stand-in pyjail binary that plays a hostile jail: returns the env for drive()."""
    path = tmp_path / "pyjail"
    path.write_text("#!/bin/sh\nexec %s %s \"$@\"\n" % (sys.executable,
                                                       os.path.join(HERE, "hostile_jail.py")))
    path.chmod(0o755)

    def env(attack, mode="session", **more):
        e = {"PYJAIL_BIN": str(path), "HOSTILE_ATTACK": attack, "HOSTILE_MODE": mode}
        e.update({k: str(v) for k, v in more.items()})
        return e
    return env


# ------------------------------------------------------------------ the pure checks

@pytest.mark.no_binary
@pytest.mark.parametrize("name", ["../../../root/.ssh/authorized_keys", "/etc/cron.d/x",
                                  "a/../../b", "a\0b", "", ".", "a//b", "a/", 7, None])
def test_the_name_checker_refuses_host_paths(name):
    with pytest.raises(ValueError):
        _common.check_name(name)


@pytest.mark.no_binary
@pytest.mark.parametrize("name", ["a", "out/b.csv", "..x", "x..", "é/ü", "\udcff"])
def test_the_name_checker_takes_relative_names(name):
    assert _common.check_name(name) == name


def outputs(files, body, collect=True, max_files=10, max_bytes=100, skipped=()):
    return _run._outputs_from_jail({"files": files, "skipped": list(skipped)}, body, collect,
                                   "main.py", max_files, max_bytes)


@pytest.mark.no_binary
@pytest.mark.parametrize("files,body,why", [
    ([["../x", 1]], b"x", "'..'"),
    ([["/etc/cron.d/x", 1]], b"x", "relative"),
    ([["a", -1]], b"", "bad size"),
    ([["a", -1], ["b", 2]], b"x", "bad size"),
    ([["a", True]], b"x", "bad size"),
    ([["a", 1.0]], b"x", "bad size"),
    ([["a", 1]], b"xy", "add up"),
    ([["a", 2]], b"x", "add up"),
    ([["a", 1], ["a", 1]], b"xy", "twice"),
    ([["main.py", 1]], b"x", "the program itself"),
    ([["a", 101]], b"x" * 101, "max_output_bytes"),
    ([["f%d" % i, 0] for i in range(11)], b"", "max_output_files"),
    ([["a"]], b"", "malformed"),
    ("a", b"", "malformed"),
])
def test_returned_files_are_checked_by_the_driver(files, body, why):
    with pytest.raises(_channel.ProtocolError, match=why):
        outputs(files, body)


@pytest.mark.no_binary
def test_returned_files_match_the_patterns_and_skipped_names_are_checked():
    assert outputs([["out/a.csv", 1], ["b.csv", 1]], b"xy", ["*.csv"])[0] == \
        {"out/a.csv": b"x", "b.csv": b"y"}
    with pytest.raises(_channel.ProtocolError, match="matches none"):
        outputs([["secret.key", 1]], b"x", ["*.csv"])
    with pytest.raises(_channel.ProtocolError, match="none were asked for"):
        outputs([["a.csv", 1]], b"x", [])
    with pytest.raises(_channel.ProtocolError, match="'..'"):
        outputs([], b"", skipped=[["../../x", 1, "over the size budget"]])
    with pytest.raises(_channel.ProtocolError, match="skipped"):
        outputs([], b"", skipped=[["x", 1, "why"]] * 1001)
    assert outputs([], b"", skipped=[["big", 5, "over the size budget"]])[1] == \
        {"big": "over the size budget (5 bytes)"}


@pytest.mark.no_binary
def test_the_checkers_doctests():
    import doctest
    result = doctest.testmod(_run)
    assert result.attempted >= 2 and result.failed == 0


@pytest.mark.no_binary
def test_colliding_keys_are_refused_in_linear_time():
    # 100,000 ints that all hash to 0: decoding them as a set took the driver minutes.
    evil = {"$s": [{"$i": str(k * (2 ** 61 - 1))} for k in range(1, 100_001)]}
    cpu = time.process_time()
    with pytest.raises(ValueError, match="same hash"):
        _wire.decode_value(evil, from_jail=True)
    with pytest.raises(ValueError, match="same hash"):
        _wire.decode_value({"$d": [[k, 0] for k in evil["$s"][:50_000]]}, from_jail=True)
    with pytest.raises(ValueError, match="same hash"):
        _wire.decode_value({"$fs": [{"$t": [k]} for k in evil["$s"][:50]]}, from_jail=True)
    print("CPU to refuse sets and dicts of colliding keys: %.2f s" % (time.process_time() - cpu))
    # Plain data still comes back as it was (-1 and -2 share a hash: a few may).
    for value in ({1: "a", 2: "b"}, {-1, -2, 3}, {"a": {(1, 2): frozenset({3})}}, [1.5, None]):
        assert _wire.decode_value(_wire.encode_value(value), from_jail=True) == value


@pytest.mark.no_binary
def test_values_from_the_jail_are_bounded():
    with pytest.raises(ValueError, match="values"):
        _wire.decode_value(list(range(_wire.ITEMS_FROM_JAIL + 1)), from_jail=True)
    with pytest.raises(ValueError, match="digits"):
        _wire.decode_value({"$i": "9" * 100_000}, from_jail=True)
    with pytest.raises(ValueError, match="deeply"):
        _wire.decode_value(json.loads("[" * 200 + "]" * 200), from_jail=True)
    with pytest.raises(ValueError, match="pickled"):
        _wire.decode_value({"$p": "gARLAS4=", "$r": "1"}, from_jail=True)


@pytest.mark.no_binary
@pytest.mark.parametrize("head,why", [
    (b"[" * 100_000 + b"]" * 100_000, "deeply"),
    (b'{"a": ' + b"9" * 100_000 + b"}", "digits"),
    (b"[1, 2]", "not a JSON object"),
    (b"\xff", "utf-8"),
])
def test_headers_from_the_jail_are_bounded(head, why):
    with pytest.raises(ValueError, match=why):
        _wire.decode_header_from_jail(head)


@pytest.mark.no_binary
def test_a_big_header_is_refused_before_it_is_read():
    # 12 bytes announce a 16 MiB header: refused at once, nothing buffered for it.
    to_driver_r, to_driver_w = os.pipe()
    to_jail_r, to_jail_w = os.pipe()
    try:
        chan = _channel.Channel(to_jail_w, to_driver_r, MiB)
        os.write(to_driver_w, _wire.FRAME.pack(_wire.MAGIC, 16 * MiB - 1, 0) + b"[")
        with pytest.raises(_channel.ProtocolError, match="header of"):
            chan.recv(time.monotonic() + 5)
        assert len(chan.buf) < 64 << 10
    finally:
        for fd in (to_driver_r, to_driver_w, to_jail_r, to_jail_w):
            os.close(fd)


@pytest.mark.no_binary
def test_a_server_that_cannot_become_non_dumpable_refuses_to_serve():
    # Fail closed: without ctypes (its C half included, or with prctl refused) no user code runs.
    r = run_python("import sys\nsys.modules['ctypes'] = sys.modules['_ctypes'] = None\n"
                   "from pyjail import _server\n_server.main()")
    assert r.returncode == 125, r.stderr
    buf = bytearray(r.stdout)
    head, _ = _wire.parse_frame(buf)
    header = json.loads(head)
    assert header["op"] == "refused" and "non-dumpable" in header["error"], header
    assert not buf, "it sent more than its refusal"


# ------------------------------------------------------------------ forged frames, driver side

@pytest.mark.no_binary
@pytest.mark.parametrize("code,error", [
    ("pyjail.run('pass', files={'in.txt': 'x'})", "JailError"),
    ("pyjail.Session()", "JailError"),
])
def test_the_driver_reports_a_server_that_refused(hostile, code, error):
    out = drive(code, env=hostile("refused", "run" if "run" in code else "session"))
    assert out.get("raised") == error and "non-dumpable" in out["message"], out


@pytest.mark.no_binary
def test_forged_exit_with_host_paths_is_refused(hostile):
    out = drive("""
        r = pyjail.run("pass", files={"in.txt": "x"}, outputs=True)
        out["files"] = sorted(r.files)
    """, env=hostile("host-paths", "run"))
    assert out.get("raised") == "ProtocolError", out
    assert "authorized_keys" in out["message"] and "broke the protocol" in out["message"]


@pytest.mark.no_binary
def test_forged_exit_past_the_patterns_and_caps_is_refused(hostile):
    out = drive("""
        r = pyjail.run("pass", files={"in.txt": "x"}, outputs=["*.txt"], caps=pyjail.OutputCaps(max_output_files=100))
        out["files"] = sorted(r.files)
    """, env=hostile("over-caps", "run"))
    assert out.get("raised") == "ProtocolError", out


@pytest.mark.no_binary
def test_a_forged_error_that_is_no_utf_8_is_reported_not_raised(hostile):
    out = drive("""
        r = pyjail.run("pass", files={"in.txt": "x"}, outputs=True)
        out["stderr"] = r.stderr
    """, env=hostile("error-surrogate", "run"))
    assert "raised" not in out, out
    assert out["stderr"].startswith("pyjail: cannot start"), out


@pytest.mark.no_binary
def test_negative_sizes_cost_no_memory(hostile):
    body = 8 * MiB
    out = drive("""
        r = pyjail.run("pass", files={"in.txt": "x"}, outputs=True)
        out["files"] = len(r.files)
    """, env=hostile("negative-sizes", "run", HOSTILE_BODY=body))
    print("driver peak RSS after an 8 MiB frame of negative sizes: %.0f MiB" % (out["rss"] / MiB))
    assert out["rss"] < rss_bound(body), out
    assert out.get("raised") == "ProtocolError", out


@pytest.mark.no_binary
@pytest.mark.parametrize("mode", ["run", "session"])
def test_a_huge_header_costs_no_memory(hostile, mode):
    # 5 million empty objects in 15 MiB of JSON (under the old 16 MiB cap): ~400 MB decoded.
    code = ("pyjail.run('pass', files={'in.txt': 'x'}, outputs=True)" if mode == "run" else
            "s = pyjail.Session()\nout['cell'] = s.run('1').error.type\ns.close()")
    out = drive(code, env=hostile("huge-header", mode))
    print("driver peak RSS after a 15 MiB header (%s): %.0f MiB" % (mode, out["rss"] / MiB))
    assert out["rss"] < rss_bound(HUGE_HEADER)
    if mode == "run":
        assert out.get("raised") == "ProtocolError", out
    else:
        assert out.get("cell") == "ProtocolError", out


@pytest.mark.no_binary
def test_the_costliest_header_the_driver_accepts_stays_bounded(hostile):
    # 1 MiB of `{},{},...`: the JSON that costs the most memory per byte, at the cap.
    out = drive("s = pyjail.Session()\nout['cell'] = s.run('1').error.type\ns.close()",
                env=hostile("max-header"))
    print("driver peak RSS after a 1 MiB header of empty objects: %.0f MiB" % (out["rss"] / MiB))
    assert out["rss"] < rss_bound(_wire.HEADER_FROM_JAIL), out
    assert out.get("cell") == "ProtocolError", out


# The size of the huge headers below: 5 Mi empty objects.
HUGE_HEADER = 3 * (5 << 20) + 1


@pytest.mark.no_binary
def test_the_driver_never_unpickles_what_the_jail_sends(hostile, tmp_path):
    # A pickle in a cell's value and in a host function's arguments: were either loaded,
    # its __reduce__ would create the marker file on the host.
    marker = tmp_path / "unpickled"
    out = drive("""
        s = pyjail.Session()
        r = s.run("x", want_data=True)
        out["data"] = [type(r.data).__name__, repr(r.data)]
        s.close()
    """, env=hostile("pickle-result", HOSTILE_MARKER=marker))
    assert out.get("data") == ["JailObject", "'x'"], out
    assert not marker.exists()
    out = drive("""
        s = pyjail.Session()
        calls = []
        s.expose({"record": lambda *a: calls.append(a)})
        r = s.run("record(x)")
        out["reply"] = json.loads(r.value)
        out["calls"] = len(calls)
        s.close()
    """, env=hostile("pickle-call", HOSTILE_MARKER=marker))
    assert "raised" not in out, out
    assert out["calls"] == 0, out
    assert out["reply"]["type"] == "ValueError", out
    assert "pickled value is not accepted" in out["reply"]["error"], out
    assert not marker.exists()


@pytest.mark.no_binary
def test_a_colliding_set_is_not_decoded(hostile):
    out = drive("""
        s = pyjail.Session()
        r = s.run("x", want_data=True)
        out["data"] = type(r.data).__name__
        out["cpu"] = time.process_time()
        s.close()
    """, env=hostile("colliding-set"))
    print("driver CPU after a set of 25,000 colliding ints: %.2f s, peak RSS %.0f MiB"
          % (out["cpu"], out["rss"] / MiB))
    assert out.get("data") == "JailObject", out


@pytest.mark.no_binary
@pytest.mark.parametrize("attack", ["deep-header", "huge-int"])
def test_headers_that_cost_cpu_are_refused(hostile, attack):
    out = drive("""
        s = pyjail.Session()
        r = s.run("x")
        out["error"] = r.error.type if r.error else None
        s.close()
    """, env=hostile(attack))
    assert out.get("error") == "ProtocolError", out


@pytest.mark.no_binary
@pytest.mark.parametrize("attack,call", [
    ("host-paths", "s.list_files()"),
    ("negative-size", "s.list_files()"),
    ("negative-size", "s.upload('a', b'x')"),
    ("big-download", "s.download('a', max_bytes=10)"),
])
def test_session_file_answers_are_checked(hostile, attack, call):
    out = drive("""
        s = pyjail.Session()
        try:
            out["value"] = %s
        finally:
            s.close()
    """ % call, env=hostile(attack, HOSTILE_BODY=1000))
    assert out.get("raised") == "SessionError" and "broke the protocol" in out["message"], out


@pytest.mark.no_binary
@pytest.mark.parametrize("attack", ["flood", "flood-calls"])
def test_a_flood_does_not_stop_a_cell_timeout(hostile, attack):
    out = drive("""
        s = pyjail.Session(interrupt_grace=1)
        t = time.monotonic()
        r = s.run("x", timeout=2)
        out["took"] = time.monotonic() - t
        out["error"] = r.error.type if r.error else None
        t = time.monotonic()
        s.close()
        out["close"] = time.monotonic() - t
    """, env=hostile(attack), timeout=90)
    print("a cell flooding %s with timeout=2 ended after %.1f s" % (attack, out.get("took", -1)))
    assert "raised" not in out, out
    assert out["error"] is not None and out["took"] < 15 and out["close"] < 15, out
    if attack == "flood":
        # Not a timeout that a silent moment let fire: the first stray frame ends it.
        assert out["error"] == "ProtocolError", out


@pytest.mark.no_binary
def test_a_flood_does_not_stop_a_ping(hostile):
    out = drive("""
        s = pyjail.Session()
        try:
            s.ping(timeout=2)
        finally:
            s.close()
    """, env=hostile("flood-ping"), timeout=90)
    assert out.get("raised") == "SessionError" and out["elapsed"] < 15, out
    assert "broke the protocol" in out["message"], out


# ------------------------------------------------------------------ real jails

DRIVER_USERS = ["root", "unprivileged"]

FORGE = r"""
import json, os, struct
# The server's channel through /proc/PPID/fd, and its memory: a forged 'exited'
# frame to every pipe of the parent's that opens for writing.
head = json.dumps({"op": "exited", "id": "run", "status": 0, "skipped": [],
                   "files": [["../../../root/.ssh/authorized_keys", 4],
                             ["/etc/cron.d/x", 4], ["neg", -3]]}).encode()
forged = struct.pack(">4sII", b"PJF1", len(head), 8) + head + b"ssh-cron"
ppid = os.getppid()
reached = []
try:
    fds = os.listdir("/proc/%d/fd" % ppid)
except OSError as e:
    print("fd:", type(e).__name__)
    fds = []
for fd in fds:
    try:
        w = os.open("/proc/%d/fd/%s" % (ppid, fd), os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        continue
    try:
        os.write(w, forged)
        reached.append(fd)
    except OSError:
        pass
    os.close(w)
try:
    open("/proc/%d/mem" % ppid, "r+b").close()
    print("mem: opened")
except OSError as e:
    print("mem:", type(e).__name__)
print("reached:", reached)
# Nothing of the server's but the program's own stdio pipes is inherited (the listing's fd).
print("own fds:", sorted(int(fd) for fd in os.listdir("/proc/self/fd")))
open("result.txt", "w").write("mine")
"""


@pytest.mark.parametrize("user", DRIVER_USERS)
def test_the_program_cannot_reach_the_server(user):
    out = drive("""
        r = pyjail.run(%r, files={"in.txt": "x"}, outputs=True, timeout=30)
        out["files"] = sorted(r.files)
        out["stdout"] = r.stdout
        out["stderr"] = r.stderr[-2000:]
    """ % FORGE, user=user)
    assert "raised" not in out, out
    assert out["files"] == ["result.txt"], out
    assert "fd: PermissionError" in out["stdout"], out
    assert "mem: PermissionError" in out["stdout"], out
    assert "reached: []" in out["stdout"], out
    assert "own fds: [0, 1, 2, 3]" in out["stdout"], out


@pytest.fixture(scope="module")
def template_pool(pyjail_bin):
    os.environ.setdefault("PYJAIL_BIN", pyjail_bin)
    with pyjail.Pool() as p:
        yield p


@pytest.fixture(params=["fresh", "template"])
def any_session(request):
    """A session of each kind: in a fresh jail, and forked from a template (Pool.session),
    whose server makes itself non-dumpable through the template's C half, not ctypes."""
    s = pyjail.Session() if request.param == "fresh" else \
        request.getfixturevalue("template_pool").session()
    try:
        yield request.param, s
    finally:
        s.close()


def test_the_session_server_is_not_dumpable(any_session):
    kind, session = any_session
    r = session.run("import ctypes\nctypes.CDLL(None).prctl(3, 0, 0, 0, 0)")   # PR_GET_DUMPABLE
    assert r.value == "0", r
    if session.server_info["server"] == "rootfs":
        r = session.run("import sys\nsys.modules['pyjail_server'].UNREACHABLE_BY")
        assert r.value == repr("ctypes" if kind == "fresh" else "template"), r
    # A program the cell starts cannot reach the server's channel.
    session.upload("probe.py", "import os\ntry:\n    os.listdir('/proc/%d/fd' % os.getppid())\n"
                               "    print('reached')\nexcept OSError as e:\n"
                               "    print(type(e).__name__)\n")
    r = session.run("import subprocess, sys\n"
                    "subprocess.run([sys.executable, 'probe.py']).returncode")
    assert r.stdout.strip() == "PermissionError" and r.value == "0", r


def test_a_large_honest_result_still_comes_back(session):
    # Its data and texts come to more than the driver's 1 MiB header cap in JSON: the
    # server leaves the data out (a JailObject then) rather than break the protocol.
    r = session.run("s = '\\x01' * 60000 + '\\U0001F600' * 60000\ns", want_data=True,
                    want_str=True)
    assert r.error is None and not r.restarted, r
    assert r.value.startswith("'\\x01") and r.value_str.startswith("\x01"), r.value[:20]
    assert isinstance(r.data, pyjail.JailObject)
    assert session.run("len(s)", want_data=True).data == 120000


# A cell that takes over the server it runs in (it may: the trust model says a cell can
# affect its own session), and writes frames on the channel itself.
TAKE_OVER = r"""
import gc, json, os, struct, sys
srv = next(o for o in gc.get_objects() if type(o).__name__ == "Server" and hasattr(o, "proto_out"))
def frame(header, body=b""):
    head = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack(">4sII", b"PJF1", len(head), len(body)) + head + body
def raw(data, fd=srv.proto_out):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
def flood(one):
    # From three processes (through a copy of the descriptor: the server closes its own
    # in a forked child), faster than the driver can read: the channel never falls silent.
    fd = os.dup(srv.proto_out)
    for _ in range(2):
        if os.fork() == 0:
            break
    many = one * (4096 // len(one))
    while True:
        raw(many, fd)
"""


@pytest.mark.parametrize("user", DRIVER_USERS)
@pytest.mark.parametrize("what", ["stray", "call"])
def test_a_flooding_cell_ends_on_time(user, what):
    flood = ('frame({"op": "result", "id": "stray"})' if what == "stray" else
             'frame({"op": "call", "id": "c9", "name": "nope", "args": [], "kwargs": {}})')
    cell = TAKE_OVER + "flood(%s)\n" % flood
    out = drive("""
        s = pyjail.Session()
        t = time.monotonic()
        r = s.run(%r, timeout=2)
        out["took"] = time.monotonic() - t
        out["error"] = r.error.type if r.error else None
        out["restarted"] = r.restarted
        out["after"] = s.run("1 + 1").value
        t = time.monotonic()
        s.close()
        out["close"] = time.monotonic() - t
    """ % cell, user=user, timeout=90)
    print("a cell flooding %s frames with timeout=2 (%s) ended after %.2f s"
          % (what, user, out.get("took", -1)))
    assert "raised" not in out, out
    assert out["error"] is not None and out["took"] < 15 and out["close"] < 15, out
    assert out["after"] == "2", out
    if what == "stray":
        # Not a timeout that a silent moment let fire: the first stray frame ends it.
        # (A flood of calls, which are legitimate frames, ends with the cell's time.)
        assert out["error"] == "ProtocolError" and out["restarted"], out


@pytest.mark.parametrize("user", DRIVER_USERS)
def test_a_flood_after_the_cell_does_not_stop_a_ping_or_a_download(user):
    cell = TAKE_OVER + textwrap.dedent("""
        import threading, time
        def later():
            time.sleep(1)
            flood(frame({"op": "result", "id": "stray"}))
        threading.Thread(target=later, daemon=True).start()
    """)
    out = drive("""
        s = pyjail.Session()
        for call in ("s.ping(timeout=2)", "s.download('x')"):
            s.run(%r)
            time.sleep(1.5)
            t = time.monotonic()
            try:
                eval(call)
            except pyjail.SessionError as e:
                out[call] = [time.monotonic() - t, str(e)]
        s.close()
    """ % cell, user=user, timeout=120)
    assert "raised" not in out, out
    for call in ("s.ping(timeout=2)", "s.download('x')"):
        took, message = out[call]
        assert took < 15 and "broke the protocol" in message, out


@pytest.mark.parametrize("user", DRIVER_USERS)
def test_a_colliding_set_from_a_cell_is_not_decoded(user):
    # The cell has the server send, as its value's data, 25,000 ints that hash alike
    # (as many as fit in a header the driver accepts).
    cell = textwrap.dedent("""
        import sys
        m = sys.modules["pyjail_server"]
        m.encode_value = lambda v, *a, **k: {"$s": [{"$i": str(i * (2 ** 61 - 1))}
                                                    for i in range(1, 25001)]}
    """)
    out = drive("""
        s = pyjail.Session()
        s.run(%r)
        cpu = time.process_time()
        r = s.run("7", want_data=True)
        out["cpu"] = time.process_time() - cpu
        out["data"] = type(r.data).__name__
        s.close()
    """ % cell, user=user, timeout=300)
    print("driver CPU for a cell's set of colliding ints (%s): %.2f s" % (user, out.get("cpu", -1)))
    assert out.get("data") == "JailObject", out


@pytest.mark.parametrize("user", DRIVER_USERS)
def test_a_huge_header_from_a_cell_costs_no_memory(user):
    cell = TAKE_OVER + 'raw(frame(b"[" + b",".join([b"{}"] * (5 << 20)) + b"]"))\n'
    out = drive("""
        s = pyjail.Session()
        r = s.run(%r, timeout=30)
        out["error"] = r.error.type if r.error else None
        s.close()
    """ % cell, user=user, timeout=120)
    print("driver peak RSS after a cell's 15 MiB header (%s): %.0f MiB" % (user, out["rss"] / MiB))
    assert out.get("error") == "ProtocolError", out
    assert out["rss"] < rss_bound(HUGE_HEADER), out


def test_a_forged_rootfs_lock_too_deep_for_json_gives_no_facts(session):
    # The agent adapters read the rootfs's lock from the jail (read_facts): a cell that took
    # over the server answers with JSON nested deeper than the host's recursion limit.
    from pyjail import _agents
    r = session.run(TAKE_OVER + 'srv.handlers["get"] = lambda rid, header, body: '
                                'srv.send({"op": "file", "id": rid}, b"[" * 200000)\n')
    assert r.ok, r.error
    assert _agents.read_lock(session) is None
    facts = _agents.read_facts(session, None, False)
    assert facts.packages == [], facts
    assert session.run("1 + 1").value == "2"


def test_a_forged_errno_raises_an_os_error_only_for_a_file(session):
    # A cell that took over the server answers every request with an error and an errno:
    # a file's request raises OSError (FileNotFoundError here), the others SessionError.
    r = session.run(TAKE_OVER + textwrap.dedent("""
        def fail(rid, header, body):
            srv.send({"op": "error", "id": rid, "error": "forged", "errno": 2})
        for op in ("ping", "set", "expose", "killall", "get"):
            srv.handlers[op] = fail
    """))
    assert r.ok, r.error
    calls = [lambda: session.ping(), lambda: session.set_variables({"a": 1}),
             lambda: session.expose({"f": len}), lambda: session.kill_processes()]
    for call in calls:
        with pytest.raises(pyjail.SessionError, match="forged"):
            call()
    with pytest.raises(FileNotFoundError):
        session.download("x")


@pytest.mark.parametrize("user", DRIVER_USERS)
def test_close_from_another_thread_ends_a_stuck_cell(user):
    out = drive("""
        import shutil, tempfile, threading
        tempfile.tempdir = tempfile.mkdtemp()   # the driver's own, to see what is left in it
        s = pyjail.Session()
        ended = {}
        def cell():
            t = time.monotonic()
            try:
                s.run("while True: pass", timeout=None)
                ended["how"] = "returned"
            except pyjail.SessionClosedError:
                ended["how"] = "SessionClosedError"
            ended["at"] = time.monotonic() - t
        th = threading.Thread(target=cell)
        th.start()
        time.sleep(1.5)
        t = time.monotonic()
        s.close()
        out["close"] = time.monotonic() - t
        th.join(30)
        out["run"] = dict(ended)
        out["leftover"] = bool(os.listdir(tempfile.tempdir)) or s._jail is not None
        shutil.rmtree(tempfile.tempdir)
    """, user=user, timeout=90)
    assert "raised" not in out, out
    assert out["close"] < 15, out
    assert out["run"].get("how") == "SessionClosedError" and out["run"]["at"] < 20, out
    assert out["leftover"] is False, out
