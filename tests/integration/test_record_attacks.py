"""The record of a run against the jail: a report or audit log that the jail could reach
(inside --workdir, a writable --bind, or through a link in one) is one it could erase, forge
or hide. Such a path is refused before the jail starts; the report is replaced whole when the
run is over; a run whose audit line cannot be written fails."""

import json
import os
import subprocess

import pytest

# What a jailed program that can reach the log does: erase the lines of the runs before it
# and leave a forged one, or put a directory in the log's place so that its own line is never
# written.
FORGE_LOG = """
import os, sys
log = sys.argv[1]
os.unlink(log)
with open(log, "w") as f:
    f.write('{"status": "ok", "command": ["python3", "-c", "harmless"]}\\n')
print("ran")
"""
HIDE_LOG = """
import os, sys
log = sys.argv[1]
os.unlink(log)
os.mkdir(log)
print("ran")
"""
# ... and with the report: unlink pyjail's, leave an "ok" one, and fail.
FORGE_REPORT = """
import os, sys
report = sys.argv[1]
os.unlink(report)
with open(report, "w") as f:
    f.write('{"status": "ok", "exit_code": 0}\\n')
print("ran")
sys.exit(3)
"""


def owned_dir(world_tmp, user, mode=0o755):
    """A directory the user who runs pyjail owns."""
    d = world_tmp.dir(mode)
    if os.geteuid() == 0:
        os.chown(d, user.invoker_uid, user.invoker_uid)
    return d


def jail_writable_dir(world_tmp, user):
    """A host directory the jail may write (for --workdir or --bind)."""
    d = owned_dir(world_tmp, user, 0o777)
    os.chmod(d, 0o777)
    return d


def earlier_line(path, user):
    """The audit line of an earlier run, owned as pyjail would have left it."""
    line = '{"status": "exit", "command": ["python3", "evil.py"]}\n'
    path.write_text(line)
    os.chmod(path, 0o600)
    if os.geteuid() == 0:
        os.chown(path, user.invoker_uid, user.invoker_uid)
    return line


def places(world_tmp, user, how):
    """(pyjail's options, the cwd, the jail-writable host directory, its path in the jail, and
    the host directory where the output is named)."""
    work = jail_writable_dir(world_tmp, user)
    if how == "workdir":
        return ["--workdir", work], "/", work, "/work", work
    if how == "bind":
        return ["--bind", f"{work}:/out"], "/", work, "/out", work
    if how == "batch profile":
        # batch's work directory is the current one.
        return ["--profile", "batch"], work, work, "/work", work
    # A link elsewhere that leads into the work directory: the path as written is not in it.
    links = owned_dir(world_tmp, user)
    (links / "logs").symlink_to(work)
    if os.geteuid() == 0:
        os.lchown(links / "logs", user.invoker_uid, user.invoker_uid)
    return ["--workdir", work], "/", work, "/work", links / "logs"


HOW = ["workdir", "bind", "batch profile", "symlink into the workdir"]


@pytest.mark.parametrize("attack", [FORGE_LOG, HIDE_LOG], ids=["forge", "hide"])
@pytest.mark.parametrize("how", HOW)
def test_an_audit_log_the_jail_could_reach_is_refused(run_jail, world_tmp, as_user, how, attack):
    opts, cwd, work, in_jail, named_in = places(world_tmp, as_user, how)
    log = named_in / "audit.jsonl"
    before = earlier_line(work / "audit.jsonl", as_user)
    r = run_jail(["--audit-log", log, *opts, "--", "python3", "-c", attack, f"{in_jail}/audit.jsonl"],
                 user=as_user, cwd=cwd)
    # Refused before the jail starts: the program never ran.
    assert r.returncode == 125 and r.stdout == "", r.stderr
    assert r.stderr.startswith(f"pyjail: audit log: refusing to write {log}: its directory {work} "
                               f"lies inside "), r.stderr
    assert r.stderr.count("\n") == 1
    # The earlier line is intact; the refusal is logged after it (no jail ran to touch it).
    lines = (work / "audit.jsonl").read_text().splitlines(keepends=True)
    assert lines[0] == before
    assert json.loads(lines[-1])["status"] == "setup-error"


@pytest.mark.parametrize("how", HOW)
def test_a_report_the_jail_could_reach_is_refused(run_jail, world_tmp, as_user, how):
    opts, cwd, work, in_jail, named_in = places(world_tmp, as_user, how)
    report = named_in / "report.json"
    r = run_jail(["--report", report, *opts, "--", "python3", "-c", FORGE_REPORT,
                  f"{in_jail}/report.json"], user=as_user, cwd=cwd)
    assert r.returncode == 125 and r.stdout == "", r.stderr
    assert r.stderr.startswith(f"pyjail: report: refusing to write {report}: its directory {work} "
                               "lies inside "), r.stderr
    # What the caller reads is pyjail's: the run was refused.
    written = json.loads((work / "report.json").read_text())
    assert written["status"] == "setup-error" and written["exit_code"] == 125
    assert written["error"]["step"] == "report"


def test_a_file_bound_writable_cannot_be_the_audit_log(run_jail, world_tmp, as_user):
    d = owned_dir(world_tmp, as_user)
    log = d / "audit.jsonl"
    before = earlier_line(log, as_user)
    os.chmod(log, 0o666)  # the jail could write it
    r = run_jail(["--audit-log", log, "--bind", f"{log}:/log", "--", "python3", "-c",
                  "open('/log', 'w').write('forged\\n'); print('ran')"], user=as_user)
    assert r.returncode == 125 and r.stdout == "", r.stderr
    assert r.stderr.startswith(f"pyjail: audit log: refusing to write {log}: it is the source of "
                               f"--bind {log}, which the jail can write"), r.stderr
    assert log.read_text().splitlines(keepends=True)[0] == before


def test_outside_the_writable_places_batch_runs_are_recorded(run_jail, world_tmp, as_user):
    work = jail_writable_dir(world_tmp, as_user)
    out = owned_dir(world_tmp, as_user)
    # (--workdir names batch's own work directory again: such a run is never a template's.)
    r = run_jail(["--profile", "batch", "--workdir", work, "--report", out / "report.json", "--audit-log",
                  out / "audit.jsonl", "--", "python3", "-c",
                  "open('/work/result.txt', 'w').write('42'); print('done')"],
                 user=as_user, cwd=work)
    assert r.returncode == 0 and r.stdout == "done\n", r.stderr
    assert (work / "result.txt").read_text() == "42"
    report = json.loads((out / "report.json").read_text())
    assert report["status"] == "ok" and report["error"] is None and report["profile"] == "batch"
    (line,) = (out / "audit.jsonl").read_text().splitlines()
    assert json.loads(line)["status"] == "ok"
    # The report is a new file, renamed into place; no temporary file stays beside it.
    assert sorted(p.name for p in out.iterdir()) == ["audit.jsonl", "report.json"]


def test_the_report_is_replaced_whole_not_written_in_place(run_jail, world_tmp, as_user):
    """Whoever held the old report file open (or linked it elsewhere) has the old one: what is
    found at the path afterwards is the file pyjail wrote."""
    out = owned_dir(world_tmp, as_user)
    report = out / "report.json"
    report.write_text("old")
    if os.geteuid() == 0:
        os.chown(report, as_user.invoker_uid, as_user.invoker_uid)
    with open(report) as held:
        r = run_jail(["--report", report, "--", "python3", "-c", "pass"], user=as_user)
        assert r.returncode == 0, r.stderr
        assert held.read() == "old"
        assert os.fstat(held.fileno()).st_ino != report.stat().st_ino
    assert json.loads(report.read_text())["status"] == "ok"
    assert sorted(p.name for p in out.iterdir()) == ["report.json"]


def test_a_run_whose_audit_line_cannot_be_written_fails(popen_jail, world_tmp, as_user, helpers):
    """A log that stops being writable during the run (here: the log turned into a directory,
    as a jail that could reach it did) fails the run, and the report says why."""
    out = owned_dir(world_tmp, as_user)
    log, report = out / "audit.jsonl", out / "report.json"
    p = popen_jail(["--audit-log", log, "--report", report, "--", "python3", "-c",
                    "import sys\nprint('ready', flush=True)\nsys.stdin.readline()"],
                   user=as_user, stdin=subprocess.PIPE)
    assert helpers.read_line(p.stdout, 60) == b"ready\n", p.stderr.read()
    os.unlink(log)
    os.mkdir(log)
    out_rest, err = p.communicate(b"go\n", timeout=60)
    assert p.returncode == 125, err
    err = helpers.without_notices(err.decode())
    assert err == (f"pyjail: audit log: refusing to write {log}: it is a directory, not a regular "
                   "file (give a path in a directory only you can write, e.g. your home)\n"), err
    written = json.loads(report.read_text())
    assert written["status"] == "ok" and written["exit_code"] == 125
    assert written["program_exit_code"] == 0
    assert written["error"]["step"] == "audit log"
