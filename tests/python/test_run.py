"""pyjail.run: one program, one fresh jail."""

import datetime
import os
import shutil
import time

import pytest

import pyjail
from pyjail_testing.web import hello_server


def test_output_exit_code_and_report():
    before = datetime.datetime.now(datetime.timezone.utc)
    r = pyjail.run("import sys\nprint('out')\nprint('err', file=sys.stderr)\nsys.exit(3)")
    assert r.stdout == "out\n"
    # pyjail's own lines (e.g. the cgroup fallback notice) never reach the program's stderr.
    assert r.stderr == "err\n"
    assert r.exit_code == 3 and not r.ok
    assert r.report is not None and r.status == "exit"
    assert r.report.program_exit_code == 3
    assert r.report.wall_time_s > 0 and r.report.memory_peak_bytes > 0
    assert r.report.cpu_time_s is not None
    assert "memory" in r.report.limits
    # When it started (to the millisecond, cut) and the limits as numbers.
    after = datetime.datetime.now(datetime.timezone.utc)
    assert before.replace(microsecond=before.microsecond // 1000 * 1000) <= r.report.started_at <= after
    assert r.started_at == r.report.started_at
    amounts = r.report.limit_amounts
    assert type(amounts["memory"]) is int and amounts["memory"] == int(r.report.limits["memory"]["value"])
    assert type(amounts["wall-time"]) is float and r.report.limits["wall-time"]["unit"] == "seconds"


def test_a_report_of_an_older_pyjail_has_no_start_time_or_amounts():
    old = pyjail.Report.from_json({"status": "ok", "limits": {"memory": {"value": "1024"}}})
    assert old.started_at is None and old.limit_amounts == {}
    bad = pyjail.Report.from_json({"status": "ok", "started_at": "yesterday", "limits": {"x": 3}})
    assert bad.started_at is None and bad.limit_amounts == {}
    now = pyjail.Report.from_json({"status": "ok", "started_at": "2026-12-03T18:45:12.345Z",
                                   "limits": {"pids": {"value": "64", "amount": 64, "unit": "count"}}})
    assert now.started_at == datetime.datetime(2026, 12, 3, 18, 45, 12, 345000, datetime.timezone.utc)
    assert now.limit_amounts == {"pids": 64}


def test_ok_stdin_args_and_env():
    r = pyjail.run("import sys, os\nprint(sys.stdin.read().upper(), sys.argv[1:], os.environ['K'])",
                   stdin="hello", args=["a", "b"], env={"K": "v"})
    assert r.ok and r.status == "ok"
    assert r.stdout == "HELLO ['a', 'b'] v\n"


def test_script_file(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text("import sys\nprint('from', sys.argv[0])\n")
    r = pyjail.run(script=script)
    assert r.ok and r.stdout.startswith("from ") and r.stdout.strip().endswith("prog.py")


def test_program_exit_125_is_not_a_setup_error():
    r = pyjail.run("raise SystemExit(125)")
    assert r.exit_code == 125 and r.status == "exit"


def test_syntax_error_is_a_result():
    r = pyjail.run("def (:\n")
    assert r.exit_code == 1
    assert "SyntaxError" in r.stderr


def test_timeout_kills_and_reports():
    t = time.monotonic()
    r = pyjail.run("import time\nprint('started', flush=True)\ntime.sleep(60)", timeout=1)
    assert time.monotonic() - t < 10
    assert r.exit_code == 124 and r.timed_out and r.status == "wall-timeout"
    assert r.stdout == "started\n"


def test_files_in_and_out():
    r = pyjail.run(
        "import os\n"
        "data = open('in/data.txt').read()\n"
        "open('upper.txt', 'w').write(data.upper())\n"
        "os.makedirs('res', exist_ok=True)\n"
        "open('res/n.bin', 'wb').write(bytes(range(5)))\n"
        "print(sorted(os.listdir('.')))\n",
        files={"in/data.txt": "abc", "blob.bin": b"\x00\x01"}, outputs=True)
    assert r.ok, r.stderr
    assert r.files == {"upper.txt": b"ABC", "res/n.bin": bytes(range(5))}
    assert "main.py" not in r.files   # the program itself, and unchanged inputs, are not outputs
    assert r.stdout == "['blob.bin', 'in', 'main.py', 'res', 'upper.txt']\n"


def test_files_from_host_path_and_patterns(tmp_path):
    src = tmp_path / "input.csv"
    src.write_text("1,2\n")
    r = pyjail.run("open('a.csv', 'w').write(open('input.csv').read())\nopen('b.txt', 'w').write('x')",
                   files={"input.csv": src}, outputs=["*.csv"])
    assert r.ok, r.stderr
    assert r.files == {"a.csv": b"1,2\n"}


def test_output_file_caps():
    r = pyjail.run("for i in range(5): open('f%d.txt' % i, 'w').write('x' * 1000 * (i + 1))",
                   outputs=True, caps=pyjail.OutputCaps(max_output_files=2, max_output_bytes=2500))
    assert r.ok
    assert list(r.files) == ["f0.txt"]            # f1 fits the count but not the bytes left
    assert set(r.skipped_files) == {"f1.txt", "f2.txt", "f3.txt", "f4.txt"}
    r = pyjail.run("for i in range(5): open('f%d.txt' % i, 'w').write('x')",
                   outputs=True, caps=pyjail.OutputCaps(max_output_files=2))
    assert len(r.files) == 2 and len(r.skipped_files) == 3


def test_files_mode_keeps_exit_status_and_signal():
    r = pyjail.run("import sys; sys.exit(7)", files={"x": "y"})
    assert r.exit_code == 7 and r.status == "exit"
    r = pyjail.run("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", files={"x": "y"})
    assert r.exit_code == 128 + 9 and r.status == "signal"


def test_files_mode_timeout_keeps_partial_output():
    r = pyjail.run("import time\nprint('partial', flush=True)\ntime.sleep(30)",
                   files={"x": "y"}, outputs=True, timeout=1)
    assert r.timed_out and r.exit_code == 124
    assert r.stdout == "partial\n" and r.files == {}


def test_bad_file_names():
    for name in ("/etc/x", "../x", "a/../b", ""):
        with pytest.raises(ValueError):
            pyjail.run("pass", files={name: "x"})
    with pytest.raises(ValueError):
        pyjail.run("pass", files={"main.py": "x"})
    with pytest.raises(ValueError):
        pyjail.run()
    with pytest.raises(ValueError):
        pyjail.run("pass", script="x.py")


def test_100mb_of_output_is_capped_not_a_hang():
    t = time.monotonic()
    r = pyjail.run("import sys\nsys.stdout.write('x' * 100_000_000)\nprint('END')",
                   caps=pyjail.OutputCaps(max_output=1 << 20))
    assert time.monotonic() - t < 30
    assert r.ok
    assert len(r.stdout_bytes) == 1 << 20 and r.stdout_omitted == 100_000_004 - (1 << 20)
    assert r.stdout.endswith("END\n") and "bytes of output omitted" in r.stdout


def test_output_limit_stops_the_program():
    r = pyjail.run("while True: print('y' * 1000)", limits=pyjail.Limits(output_limit="1M"), timeout=20)
    assert r.status == "output-limit" and not r.ok


def test_host_files_are_out_of_reach(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("s3cret")
    os.chmod(tmp_path, 0o755)
    os.chmod(secret, 0o644)
    r = pyjail.run("import os\nprint(os.path.exists(%r))\nprint(open('/etc/passwd').read())"
                   % str(secret))
    assert r.ok
    assert r.stdout.startswith("False\n")
    assert "jail:x:1000" in r.stdout and "s3cret" not in r.stdout


def test_network_is_out_of_reach(host_port):
    r = pyjail.run("import socket\nsocket.create_connection(('127.0.0.1', %d), timeout=3)"
                   % host_port)
    assert r.exit_code == 1
    assert "PermissionError" in r.stderr
    assert any(d.get("syscall", "").startswith("socket(AF_INET") for d in r.denied_syscalls)


def test_fork_bomb_ends_the_run_not_the_host():
    t = time.monotonic()
    r = pyjail.run("import os\nwhile True: os.fork()", timeout=20)
    assert time.monotonic() - t < 25
    assert not r.ok
    assert "BlockingIOError" in r.stderr or r.status in ("pids-limit", "wall-timeout")


def test_memory_bomb_ends_the_run_not_the_host():
    r = pyjail.run("x = []\nwhile True: x.append(bytearray(10 ** 7))", memory="256M", timeout=30)
    assert not r.ok
    assert "MemoryError" in r.stderr or r.status == "oom"


@pytest.mark.no_binary
def test_missing_binary_is_a_clear_exception(monkeypatch, tmp_path):
    monkeypatch.delenv("PYJAIL_BIN", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(pyjail.BinaryNotFoundError, match="not on PATH"):
        pyjail.run("print(1)")
    with pytest.raises(pyjail.BinaryNotFoundError, match="does not exist"):
        pyjail.run("print(1)", binary=str(tmp_path / "pyjail"))
    with pytest.raises(FileNotFoundError):   # it is one, too
        pyjail.Session(binary=str(tmp_path / "nope"))
    # PYJAIL_BIN naming the build directory, not the binary in it.
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "pyjail").write_text("")
    monkeypatch.setenv("PYJAIL_BIN", str(tmp_path / "build"))
    with pytest.raises(pyjail.BinaryNotFoundError,
                       match=r"is a directory: did you mean .*/build/pyjail\?"):
        pyjail.run("print(1)")


def test_setup_error_is_a_jail_error():
    with pytest.raises(pyjail.JailError) as info:
        pyjail.run("print(1)", profile="no-such-profile")
    assert "no-such-profile" in str(info.value) and str(info.value).startswith("pyjail: ")
    with pytest.raises(pyjail.JailError, match="memory"):
        pyjail.run("print(1)", memory="lots")
    with pytest.raises(pyjail.JailError):
        pyjail.run("print(1)", files={"a": "b"}, rootfs="/nonexistent-rootfs")


def test_nothing_left_behind():
    import tempfile
    before = set(os.listdir(tempfile.gettempdir()))
    pyjail.run("print(1)")
    pyjail.run("open('o', 'w').write('x')", files={"i": "x"}, outputs=True)
    after = set(os.listdir(tempfile.gettempdir()))
    assert not [n for n in after - before if n.startswith("pyjail-run-")]


def _default_rootfs(pyjail_bin):
    """The path of the installed rootfs, as `pyjail rootfs info default` names it."""
    import subprocess
    r = subprocess.run([pyjail_bin, "rootfs", "info", "default"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, universal_newlines=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return [l.split(None, 1)[1] for l in r.stdout.splitlines() if l.startswith("rootfs ")][0]


@pytest.mark.parametrize("files", [None, {"in.txt": "x"}], ids=["direct", "with-files"])
def test_rootfs_by_name_or_path(pyjail_bin, files):
    # A name that does not exist: pyjail's own one-line error, as a JailError.
    with pytest.raises(pyjail.JailError) as info:
        pyjail.run("print(1)", rootfs="no-such-rootfs", files=files)
    assert str(info.value).startswith("pyjail: ")
    assert "no rootfs named 'no-such-rootfs'" in str(info.value)
    assert info.value.report is not None and info.value.report.status == "setup-error"
    # A path (a str or a PathLike) is passed through as it is.
    from pathlib import Path
    for rootfs in (_default_rootfs(pyjail_bin), Path(_default_rootfs(pyjail_bin))):
        r = pyjail.run("import sys; print(sys.version_info[0])", rootfs=rootfs, files=files)
        assert r.ok and r.stdout == "3\n", r.stderr


def test_nothing_left_behind_when_the_jail_is_killed_or_times_out(monkeypatch, tmp_path):
    import tempfile
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    for files in (None, {"in": "x"}):
        r = pyjail.run("import os, signal\nos.kill(1, signal.SIGKILL)\nimport time\n"
                       "time.sleep(30)", files=files, timeout=5)
        assert not r.ok
        r = pyjail.run("while True: pass", files=files, timeout=1)
        assert r.timed_out
    assert os.listdir(str(tmp)) == []


def test_net_allow_reaches_an_allowed_host_by_name_only():
    with hello_server() as port:
        code = f"""
import socket, urllib.request
print(urllib.request.urlopen("http://web.test:{port}/", timeout=5).read().decode())
try:
    socket.gethostbyname("other.test")
except socket.gaierror:
    print("other.test: no such name")
"""
        r = pyjail.run(code, net="allow", allow_hosts=[f"web.test:{port}"],
                       options={"net_resolve": "web.test:127.0.0.1"})
        assert r.ok, r.stderr
        assert r.stdout == f"hello web.test:{port}\nother.test: no such name\n"
        assert r.report.raw["egress"]["refused"] == 0
        # Without the host allowed, the name does not exist in the jail.
        r = pyjail.run(code, net="allow", allow_hosts=["elsewhere.test"],
                       options={"net_resolve": "elsewhere.test:127.0.0.1"})
        assert not r.ok and "URLError" in r.stderr


def test_a_run_with_files_starts_its_program_as_popen_would():
    # The in-jail server starts the program with os.posix_spawnp, not subprocess (whose
    # import cost every such run 10 ms): the program gets its own three descriptors and no
    # other, runs in the work directory, has no signal blocked, and reads its stdin whole.
    code = ("import os, sys\n"
            "fds = sorted(int(f) for f in os.listdir('/proc/self/fd'))[:-1]\n"
            "blocked = [l.split()[1] for l in open('/proc/self/status') if l.startswith('SigBlk')]\n"
            "data = sys.stdin.buffer.read()\n"
            "print(fds, os.getcwd(), blocked, len(data), open('in.txt').read())\n")
    r = pyjail.run(code, files={"in.txt": "x"}, stdin=b"y" * 300000)
    assert r.ok, r.stderr
    assert r.stdout == "[0, 1, 2] /work ['0000000000000000'] 300000 x\n", r.stdout
