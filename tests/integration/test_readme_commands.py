"""The README's shell recipes as written: the first usage example under strict, and the cron
recipe for a pandas job run as cron runs it (a crontab variable, a short environment, a
cron daemon as an ancestor); --env-pass and the notice of what the jail does not get."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

from pyjail_testing import REPO, skip_or_fail
from pyjail_testing.runs import describe, without_notices

README = REPO / "README.md"
NOTICE = "pyjail: the jail does not get your environment ("


def readme_line(marker: str) -> str:
    lines = [l for l in README.read_text().splitlines() if marker in l and l.startswith("pyjail ")]
    assert len(lines) == 1, marker
    return lines[0]


def test_the_first_example_reads_its_data_under_strict(run_jail, world_tmp, as_user):
    line = readme_line("python analyse.py data.csv")
    assert "--profile" not in line  # the default profile, strict
    d = world_tmp.dir()
    world_tmp.script("""
        import csv, sys
        with open(sys.argv[1]) as f:
            rows = list(csv.DictReader(f))
        print(sum(int(r["n"]) for r in rows))
    """, name="analyse.py", dir=d)
    world_tmp.file("data.csv", "name,n\na,2\nb,40\n", dir=d)
    args = line.split("#")[0].split()[1:]
    r = run_jail(args, user=as_user, cwd=d)
    assert r.returncode == 0, describe(r)
    assert r.stdout == "42\n"
    # As the README said before: strict shows the script alone.
    r = run_jail(["--", "python", "analyse.py", "data.csv"], user=as_user, cwd=d)
    assert r.returncode == 1 and "FileNotFoundError" in r.stderr


def cron_recipe() -> str:
    text = README.read_text()
    section = text[text.index("### From cron"):]
    return re.search(r"```\n(#!/bin/sh\n.*?)```", section, re.S).group(1)


def fake_cron(world_tmp) -> Path:
    """A shell whose process is named `cron`, as the daemon that runs a crontab's jobs."""
    d = world_tmp.dir()
    cron = d / "cron"
    shutil.copy("/bin/sh", cron)
    os.chmod(cron, 0o755)
    return cron


def data_rootfs_or_skip(run_jail, user):
    r = run_jail(["--rootfs", "data", "--explain"], user=user)
    if r.returncode != 0:
        skip_or_fail("no data rootfs (cmake --build build --target rootfs-data): " + r.stderr.strip())


JOB = """\
import os, sys
import pandas as pd
df = pd.read_csv("sales.csv")
df.groupby("city")["sales"].sum().to_csv("totals.csv")
threshold = int(os.environ.get("THRESHOLD", "1000"))
print("largest", int(df["sales"].max()), "threshold", threshold)
sys.exit(3 if df["sales"].max() > threshold else 0)
"""


def run_recipe(pyjail_bin, world_tmp, user, *, edit=lambda s: s):
    """The README's cron script, with only its paths and user made this host's, run by a
    process named cron with the environment a crontab line gets (THRESHOLD set in it)."""
    job_dir = world_tmp.dir(0o777)  # batch: the jail's host user writes here
    (job_dir / "job.py").write_text(JOB)
    (job_dir / "sales.csv").write_text("city,sales\nParis,10\nOslo,20\nParis,30\n")
    logs = world_tmp.dir(0o777)
    if os.geteuid() == 0 and user.prefix:
        os.chown(logs, user.invoker_uid, user.invoker_uid)
    script = (cron_recipe().replace("/srv/nightly", str(job_dir))
              .replace("/usr/local/bin/pyjail", str(pyjail_bin))
              .replace("/var/log/nightly", str(logs))
              .replace("--host-user nightly", "--host-user nobody"))
    script = edit(script)
    run_job = world_tmp.file("run-job", script, mode=0o755)
    home = world_tmp.dir(0o755)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "LOGNAME": "nightly", "SHELL": "/bin/sh",
           "THRESHOLD": "25"}
    # Not the -c command's last word, which the shell may exec in its own place.
    command = f"{run_job}; exit $?"
    r = subprocess.run([*user.prefix, str(fake_cron(world_tmp)), "-c", command], env=env,
                       capture_output=True, text=True, timeout=300, cwd="/")
    return r, job_dir, logs


def test_the_cron_recipe_runs_a_pandas_job_as_written(run_jail, pyjail_bin, world_tmp, as_user):
    data_rootfs_or_skip(run_jail, as_user)
    r, job_dir, logs = run_recipe(pyjail_bin, world_tmp, as_user)
    # THRESHOLD=25 reached the job through --env-pass: 30 > 25, so it exits 3.
    assert r.returncode == 3, describe(r)
    assert r.stdout == "largest 30 threshold 25\nnightly job failed: status 3\n"
    assert without_notices(r.stderr) == "" and NOTICE not in r.stderr, r.stderr
    assert (job_dir / "totals.csv").read_text() == "city,sales\nOslo,20\nParis,40\n"
    report = json.loads((logs / "report.json").read_text())
    assert (report["status"], report["program_exit_code"]) == ("exit", 3)
    assert report["denied_syscalls"] == []
    assert json.loads((logs / "audit.jsonl").read_text().splitlines()[-1])["exit_code"] == 3


def test_under_cron_a_variable_left_behind_is_said(run_jail, pyjail_bin, world_tmp, as_user):
    """The recipe without --env-pass: the job does not get THRESHOLD and exits 0, and cron's
    mail says why."""
    data_rootfs_or_skip(run_jail, as_user)
    r, _, _ = run_recipe(pyjail_bin, world_tmp, as_user,
                         edit=lambda s: s.replace("    --env-pass THRESHOLD \\\n", ""))
    assert r.returncode == 0, describe(r)
    assert r.stdout == "largest 30 threshold 1000\n"
    notices = [l for l in r.stderr.splitlines() if l.startswith(NOTICE)]
    assert notices == [NOTICE + "THRESHOLD); pass a variable with --env-pass NAME or set one with "
                       "--env NAME=VALUE (said on every run under cron; --quiet silences it)"], r.stderr
    # --quiet: not said.
    r, _, _ = run_recipe(pyjail_bin, world_tmp, as_user,
                         edit=lambda s: s.replace("    --env-pass THRESHOLD \\\n", "    --quiet \\\n"))
    assert r.returncode == 0 and NOTICE not in r.stderr, r.stderr


def test_env_pass_passes_one_variable_by_name(run_jail, world_tmp, as_user):
    program = "import os; print(sorted((k, v) for k, v in os.environ.items() if k.startswith('T_')))"
    r = run_jail(["--env-pass", "T_ONE", "--env-pass", "T_UNSET", "--env", "T_TWO=given",
                  "--env-pass", "T_TWO", "--", "python3", "-c", program],
                 user=as_user, env={"T_ONE": "a b=c", "T_TWO": "host", "T_OTHER": "x"})
    assert r.returncode == 0, describe(r)
    # An unset name stays unset; --env wins; nothing else of the host's.
    assert r.stdout == "[('T_ONE', 'a b=c'), ('T_TWO', 'given')]\n"
    # Off cron, with stderr read by a program: nothing said.
    assert NOTICE not in r.stderr
    r = run_jail(["--env-pass", "A=B", "--", "python3", "-c", "1"], user=as_user)
    assert r.returncode == 125
    assert r.stderr == ("pyjail: --env-pass: 'A=B' is not a variable name (--env-pass NAME passes "
                        "the host's NAME; --env NAME=VALUE sets one)\n")


def test_at_a_terminal_the_notice_is_said_once_a_day(pyjail_bin, world_tmp, as_user):
    import pty

    state = world_tmp.dir(0o700)
    if os.geteuid() == 0:
        os.chown(state, as_user.invoker_uid, as_user.invoker_uid)
    env = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "XDG_STATE_HOME": str(state),
           "API_TOKEN": "not-for-the-jail"}

    def stderr_on_a_terminal(*args):
        main, sub = pty.openpty()
        try:
            r = subprocess.run([*as_user.prefix, str(pyjail_bin), "--cgroup-notice", "off", *args,
                                "--", "python3", "-c", "import os; print(os.environ.get('API_TOKEN'))"],
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=sub, env=env,
                               text=True, timeout=60, cwd="/")
            os.close(sub)
            sub = -1
            out = b""
            while True:
                try:
                    chunk = os.read(main, 4096)
                except OSError:
                    break
                if not chunk:
                    break
                out += chunk
            return r, out.decode()
        finally:
            os.close(main)
            if sub >= 0:
                os.close(sub)

    r, err = stderr_on_a_terminal()
    assert r.stdout == "None\n"
    assert err.count(NOTICE + "API_TOKEN)") == 1, err
    assert "(said once a day; --quiet silences it)" in err, err
    assert "not-for-the-jail" not in err
    r, err = stderr_on_a_terminal()
    assert r.stdout == "None\n" and NOTICE not in err, err
    assert (state / "pyjail" / "env-notice").is_file()
