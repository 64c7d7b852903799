"""A jail pyjail cannot set up raises JailError carrying the report's structured error
(step, errno, hint), for a fresh run, a Session and a Pool's template and runs; stderr is
read only when pyjail wrote no report."""

import os
import stat
import sys

import pytest

import pyjail

MISSING_ROOTFS = {"rootfs": "no-such-rootfs"}
BAD_VALUE = {"memory": "12Q"}
BAD_WORKDIR = {"options": {"workdir": "/nonexistent-workdir"}}


def check_missing_rootfs(e):
    assert e.step == "rootfs" and e.errno == 0 and e.errno_name is None
    assert "no rootfs named 'no-such-rootfs'" in e.detail and "pyjail rootfs build" in e.hint
    assert str(e) == e.message and e.message.startswith("pyjail: rootfs: no rootfs named")
    assert e.report is not None and e.report.status == "setup-error"


def check_bad_value(e):
    assert e.step == "usage" and e.errno == 0
    assert e.detail == "--memory: '12Q' is not a size" and "64M" in e.hint
    # pyjail's own line: no step for a usage error, the hint in parentheses.
    assert e.message == "pyjail: --memory: '12Q' is not a size (%s)" % e.hint


def check_bad_workdir(e):
    assert e.step == "bind" and e.errno == 2 and e.errno_name == "ENOENT"
    assert e.message.startswith("pyjail: bind: --workdir: cannot use /nonexistent-workdir: "
                                "No such file or directory (")


CASES = [(MISSING_ROOTFS, check_missing_rootfs), (BAD_VALUE, check_bad_value),
         (BAD_WORKDIR, check_bad_workdir)]
IDS = ["missing-rootfs", "bad-value", "bad-workdir"]


@pytest.mark.parametrize("kwargs,check", CASES, ids=IDS)
@pytest.mark.parametrize("files", [None, {"in.txt": "x"}], ids=["direct", "with-files"])
def test_a_fresh_run(kwargs, check, files):
    with pytest.raises(pyjail.JailError) as info:
        pyjail.run("print(1)", files=files, **kwargs)
    check(info.value)


@pytest.mark.parametrize("kwargs,check", CASES, ids=IDS)
def test_a_session_start(kwargs, check):
    with pytest.raises(pyjail.JailError) as info:
        pyjail.Session(**kwargs)
    check(info.value)


def test_a_pool_and_its_runs_and_sessions():
    with pytest.raises(pyjail.JailError) as info:
        pyjail.Pool(options={"memory": "12Q"})
    check_bad_value(info.value)
    with pytest.raises(pyjail.JailError) as info:
        pyjail.Pool(["no_such_module_xyz"])
    e = info.value
    assert e.step == "template" and "--preload" in e.hint
    # pyjail's line says the template's error is above it: that error's last line is added.
    assert e.message.endswith("the template said: pyjail template: --preload no_such_module_xyz: no module "
                              "named 'no_such_module_xyz' in the rootfs (pyjail rootfs info ROOTFS lists "
                              "its packages)"), e.message
    with pyjail.Pool(options={"memory": "256M"}) as pool:
        for kwargs, check in CASES:
            with pytest.raises(pyjail.JailError) as info:
                pool.run("print(1)", **kwargs)
            check(info.value)
            with pytest.raises(pyjail.JailError) as info:
                pool.session(**kwargs)
            check(info.value)
        with pytest.raises(pyjail.JailError) as info:
            pool.run("print(1)", memory="1G")    # more than the template's runs may have
        assert info.value.step == "via" and "at most 256M" in info.value.detail
        assert pool.run("print(1)").stdout == "1\n"


def test_without_a_report_the_line_is_pyjails_stderr():
    # A command line pyjail refuses before it has a report to write.
    with pytest.raises(pyjail.JailError) as info:
        pyjail.run("print(1)", options={"no_such_option": 1})
    e = info.value
    assert e.message == "pyjail: unknown option --no-such-option (see pyjail --help)"
    assert e.step is None and e.report is None and e.hint is None


FAKE = r"""#!%s
# A pyjail that fails with a report whose error differs from its stderr.
import os, sys
fd = int(sys.argv[sys.argv.index("--report-fd") + 1])
os.write(fd, b'{"status": "setup-error", "exit_code": 125, "error": {"step": "mount", '
             b'"errno": 13, "errno_name": "EACCES", "message": "cannot mount /proc", '
             b'"hint": "see pyjail doctor"}}')
sys.stderr.write("pyjail: something else entirely\n")
sys.exit(125)
"""


@pytest.mark.no_binary
@pytest.mark.parametrize("files", [None, {"in.txt": "x"}], ids=["direct", "with-files"])
def test_the_report_wins_over_stderr(tmp_path, files):
    fake = tmp_path / "pyjail"
    fake.write_text(FAKE % sys.executable)
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    for make in (lambda: pyjail.run("print(1)", files=files, binary=str(fake)),
                 lambda: pyjail.Session(binary=str(fake))):
        with pytest.raises(pyjail.JailError) as info:
            make()
        e = info.value
        assert (e.step, e.errno, e.errno_name, e.detail, e.hint) == (
            "mount", 13, "EACCES", "cannot mount /proc", "see pyjail doctor")
        assert e.message == ("pyjail: mount: cannot mount /proc: %s (see pyjail doctor)"
                             % os.strerror(13))


def test_the_issues_options_work():
    # options= by name, a flag and a number, for a fresh run and a Pool's runs.
    r = pyjail.run("print('quiet')", options={"quiet": True, "cpu_time": 5})
    assert (r.exit_code, r.stdout) == (0, "quiet\n"), r.stderr
    assert r.report.limits["cpu-time"]["value"] == "5"
    with pyjail.Pool(options={"cpu_time": 5}) as pool:
        r = pool.run("print('pooled')")
        assert (r.exit_code, r.stdout) == (0, "pooled\n"), r.stderr
        assert r.report.limits["cpu-time"]["value"] == "5"
