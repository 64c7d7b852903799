"""Basics: a program runs, gets its input and arguments, and its exit status comes back."""

import hashlib
import json
import os
import re

import pytest


def test_hello_world(run_jail, as_user, world_tmp, helpers):
    script = world_tmp.script('print("hello, jail")\n')
    r = run_jail(["--", "python", script], user=as_user)
    assert r.returncode == 0, helpers.describe(r)
    assert r.stdout == "hello, jail\n"
    assert helpers.without_notices(r.stderr) == ""


@pytest.mark.parametrize("code", [0, 3, 255])
def test_exit_status_is_the_programs(run_jail, as_user, world_tmp, code, helpers):
    script = world_tmp.script(f"import sys\nprint('exiting')\nsys.exit({code})\n")
    r = run_jail(["--", "python", script], user=as_user)
    assert r.returncode == code, helpers.describe(r)
    assert r.stdout == "exiting\n"


@pytest.mark.parametrize("sig,status", [("SIGKILL", 137), ("SIGTERM", 143), ("SIGSEGV", 139)])
def test_death_by_signal_is_128_plus_n(run_jail, as_user, sig, status, helpers):
    code = ("import os, signal, faulthandler\n"
            "faulthandler.disable()\n"
            f"os.kill(os.getpid(), signal.{sig})\n"
            "print('still alive')\n")
    r = run_jail(["--", "python", "-c", code], user=as_user)
    assert r.returncode == status, helpers.describe(r)
    assert "still alive" not in r.stdout


def test_program_from_stdin(run_jail, as_user, helpers):
    program = "import sys\nprint('from stdin', sys.argv[1:])\n"
    r = run_jail(["--", "python", "-", "a", "b c"], user=as_user, input=program)
    assert r.returncode == 0, helpers.describe(r)
    assert r.stdout == "from stdin ['a', 'b c']\n"


def test_script_reads_stdin(run_jail, as_user, world_tmp, helpers):
    script = world_tmp.script("""\
        first = input()
        second = input()
        print(f"got {first!r} and {second!r}")
        import sys
        print("rest", repr(sys.stdin.read()))
        """)
    r = run_jail(["--", "python", script], user=as_user, input="one\ntwo\nthree\nfour")
    assert r.returncode == 0, helpers.describe(r)
    assert r.stdout == "got 'one' and 'two'\nrest 'three\\nfour'\n"


def test_arguments_reach_the_script_unchanged(run_jail, as_user, world_tmp, helpers):
    script = world_tmp.script("import json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    args = ["plain", "with space", "", "--", "--verbose", "-c", "ünïcødé", "$HOME", "*", "a'b\"c"]
    r = run_jail(["--", "python", script, *args], user=as_user)
    assert r.returncode == 0, helpers.describe(r)
    assert json.loads(r.stdout) == args


def test_dash_c(run_jail, as_user, helpers):
    r = run_jail(["--", "python", "-c", "import sys; print(sys.argv)", "x", "y"], user=as_user)
    assert r.returncode == 0, helpers.describe(r)
    assert r.stdout == "['-c', 'x', 'y']\n"


def test_dash_m_json_tool_on_stdin(run_jail, as_user, helpers):
    r = run_jail(["--", "python", "-m", "json.tool", "--sort-keys"], user=as_user,
                 input='{"b": [1, 2], "a": null}')
    assert r.returncode == 0, helpers.describe(r)
    assert r.stdout == '{\n    "a": null,\n    "b": [\n        1,\n        2\n    ]\n}\n'


def test_every_python_name_is_the_rootfs_interpreter(run_jail, as_user, jail_rootfs, helpers):
    versioned = sorted(p.name for p in (jail_rootfs / "usr/bin").iterdir()
                       if re.fullmatch(r"python3\.\d+", p.name))
    assert versioned, f"no python3.X in {jail_rootfs}/usr/bin"
    seen = set()
    for name in ["python", "python3", *versioned]:
        r = run_jail(["--", name, "-c", "import sys; print(sys.version)"], user=as_user)
        assert r.returncode == 0, f"{name}: {helpers.describe(r)}"
        seen.add(r.stdout)
    assert len(seen) == 1, f"the names run different interpreters: {seen}"


def test_relative_script_path_from_another_directory(run_jail, as_user, world_tmp, helpers):
    base = world_tmp.dir()
    world_tmp.script("import os, sys\nprint(sys.argv[0], os.getcwd())\n", "prog.py",
                     dir=base / "sub")
    os.chmod(base / "sub", 0o755)
    r = run_jail(["--", "python", "sub/prog.py"], user=as_user, cwd=base)
    assert r.returncode == 0, helpers.describe(r)
    assert r.stdout == "/work/prog.py /work\n"
    r = run_jail(["--", "python", "./prog.py"], user=as_user, cwd=base / "sub")
    assert r.returncode == 0, helpers.describe(r)
    assert r.stdout == "/work/prog.py /work\n"


def test_identity_home_and_working_directory(run_py, as_user):
    r = run_py("""\
        import getpass, pathlib, pwd, grp
        emit({"user": getpass.getuser(), "home": str(pathlib.Path.home()), "cwd": os.getcwd(),
              "uid": os.getuid(), "gid": os.getgid(), "euid": os.geteuid(),
              "pw": pwd.getpwuid(os.getuid()).pw_name, "gr": grp.getgrgid(os.getgid()).gr_name,
              "env": dict(os.environ)})
        """, user=as_user)
    got = r.result
    assert got["user"] == "jail"
    assert got["pw"] == "jail" and got["gr"] == "jail"
    assert got["home"] == "/tmp"
    assert got["cwd"] == "/work"
    assert (got["uid"], got["euid"], got["gid"]) == (1000, 1000, 1000)
    assert got["env"] == {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "USER": "jail",
                          "LOGNAME": "jail", "LANG": "C.UTF-8", "PWD": "/work"}


def test_script_can_write_next_to_itself_and_home(run_jail, as_user, world_tmp, helpers):
    script = world_tmp.script("""\
        import pathlib
        pathlib.Path("result.txt").write_text("beside the script")
        (pathlib.Path.home() / "notes.txt").write_text("in home")
        print(open("/work/result.txt").read(), "|", open("/tmp/notes.txt").read())
        print(sorted(p.name for p in pathlib.Path(".").iterdir()))
        """)
    before = sorted(os.listdir(script.parent))
    r = run_jail(["--", "python", script], user=as_user, cwd=script.parent)
    assert r.returncode == 0, helpers.describe(r)
    assert r.stdout == "beside the script | in home\n['prog.py', 'result.txt']\n"
    # The writes went to the jail's private /work, not to the script's directory.
    assert sorted(os.listdir(script.parent)) == before


def test_script_copy_is_read_only_and_host_file_unchanged(run_jail, as_user, world_tmp, helpers):
    script = world_tmp.script("""\
        import errno, json, os, sys
        def attempt(fn):
            try:
                fn()
                return "ok"
            except OSError as e:
                return errno.errorcode[e.errno]
        def overwrite():
            with open(sys.argv[0], "w") as f:
                f.write("print('tampered')\\n")
        result = {"path": sys.argv[0], "mode": oct(os.stat(sys.argv[0]).st_mode & 0o777),
                  "direct": attempt(overwrite)}
        # The copy may belong to the jail user, so chmod may work: it changes the copy only.
        result["chmod"] = attempt(lambda: os.chmod(sys.argv[0], 0o644))
        result["after_chmod"] = attempt(overwrite) if result["chmod"] == "ok" else "skipped"
        print(json.dumps(result))
        """, "victim.py")
    # Even where the jail's host user could write the original.
    os.chmod(script.parent, 0o777)
    os.chmod(script, 0o666)
    digest = hashlib.sha256(script.read_bytes()).hexdigest()
    mtime = script.stat().st_mtime_ns
    r = run_jail(["--", "python", script], user=as_user)
    assert r.returncode == 0, helpers.describe(r)
    got = json.loads(r.stdout)
    assert got["path"] == "/work/victim.py"
    assert got["mode"] == "0o444"
    assert got["direct"] in ("EACCES", "EROFS", "EPERM"), got
    assert hashlib.sha256(script.read_bytes()).hexdigest() == digest
    assert script.stat().st_mtime_ns == mtime
    assert sorted(os.listdir(script.parent)) == ["victim.py"]


def test_version_and_help(run_jail, current_user, helpers):
    r = run_jail(["--version"], user=current_user)
    assert r.returncode == 0, helpers.describe(r)
    assert re.fullmatch(r"pyjail \d+\.\d+\.\d+\n", r.stdout)
    r = run_jail(["--help"], user=current_user)
    assert r.returncode == 0, helpers.describe(r)
    for option in ("--profile", "--rootfs", "--ro-bind", "--bind", "--workdir", "--tmpfs-size",
                   "--net", "--env", "--wall-time", "--hostname", "--host-user", "--explain"):
        assert option in r.stdout


def test_verbose_speaks_on_stderr_only(run_jail, as_user, helpers):
    r = run_jail(["--verbose", "--", "python", "-c", "print('out')"], user=as_user)
    assert r.returncode == 0, helpers.describe(r)
    assert r.stdout == "out\n"
    lines = r.stderr.splitlines()
    assert lines and all(line.startswith("pyjail: ") for line in lines), r.stderr
