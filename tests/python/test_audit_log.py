"""One audit log for every run and session of a process: $PYJAIL_AUDIT_LOG, or
audit_log= / options={"audit_log": ...} passed through as pyjail's --audit-log."""

import hashlib
import json
import os

import pytest

import pyjail
from pyjail._common import jail_args


@pytest.mark.no_binary
def test_jail_args_pass_the_audit_log_through(tmp_path, monkeypatch):
    monkeypatch.delenv("PYJAIL_AUDIT_LOG", raising=False)
    assert "--audit-log" not in jail_args()
    log = tmp_path / "audit.jsonl"
    assert jail_args(audit_log=log)[-2:] == ["--audit-log", str(log)]
    monkeypatch.chdir(tmp_path)
    assert jail_args(audit_log="rel.jsonl")[-2:] == ["--audit-log", str(tmp_path / "rel.jsonl")]
    monkeypatch.setenv("PYJAIL_AUDIT_LOG", str(log))
    assert jail_args()[-2:] == ["--audit-log", str(log)]
    # Named for this call: the variable does not add a second one.
    other = str(tmp_path / "other.jsonl")
    args = jail_args(options={"audit_log": other})
    assert args.count("--audit-log") == 1 and args[args.index("--audit-log") + 1] == other


def test_every_run_and_session_appends_to_one_log(tmp_path, monkeypatch):
    log = tmp_path / "audit.jsonl"
    monkeypatch.setenv("PYJAIL_AUDIT_LOG", str(log))
    code = "print('audited')"
    r = pyjail.run(code)
    assert r.ok, r.stderr
    failed = pyjail.run("raise SystemExit(3)")
    assert failed.exit_code == 3
    with pyjail.Session() as s:
        s.run("x = 1")
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(lines) == 3, lines
    first, second, session = lines
    assert first["status"] == "ok" and first["exit_code"] == 0
    # The program run() wrote to a file for the jail, hashed as the jail read it.
    assert first["program_sha256"] == hashlib.sha256(code.encode()).hexdigest()
    assert second["status"] == "exit" and second["exit_code"] == 3
    assert session["profile"] == "repl"
    assert all(line["uid"] == os.geteuid() for line in lines)
