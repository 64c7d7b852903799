"""A program through a template (`pyjail --via`) gets what a fresh jail's python gives it: the
same traceback when it fails (no frame of the template's own code, nor of runpy), and the
same `__main__` (its names, `__file__`, `__loader__`, `__builtins__`), for a source file, a
zip archive, compiled code, `-c` and `-m`."""

from __future__ import annotations

import io
import py_compile
import subprocess
import textwrap
import zipfile

import pytest

from pyjail_testing.runs import describe

PROGRAMS = {
    "an exception from a nested call, with its cause": """
        def inner(n):
            return {}[n]

        def outer():
            try:
                inner("key")
            except KeyError as e:
                raise ValueError("outer failed") from e

        outer()
    """,
    "a syntax error": """
        x = 1
        def broken(:
            pass
    """,
    "an exception at the top level": """
        import sys
        print("before", flush=True)
        raise SystemError("at the top")
    """,
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_a_failing_script_prints_the_same_traceback_fresh_and_through_a_template(run_jail, as_user, serve,
                                                                                world_tmp, name):
    script = world_tmp.script(PROGRAMS[name], name="job.py")
    sock, _ = serve(as_user)
    fresh = run_jail(["--quiet", "--", "python", str(script)], user=as_user)
    forked = run_jail(["--quiet", "--via", sock, "--", "python", str(script)], user=as_user)
    assert fresh.returncode == 1, describe(fresh)
    assert "<frozen runpy>" not in forked.stderr and "pyjail_template" not in forked.stderr, describe(forked)
    assert (forked.returncode, forked.stdout, forked.stderr) == (1, fresh.stdout, fresh.stderr), (
        describe(fresh) + "\n" + describe(forked))


def test_a_failing_command_prints_the_same_traceback_fresh_and_through_a_template(run_jail, as_user, serve):
    code = textwrap.dedent(PROGRAMS["an exception from a nested call, with its cause"])
    sock, _ = serve(as_user)
    fresh = run_jail(["--quiet", "--", "python", "-c", code], user=as_user)
    forked = run_jail(["--quiet", "--via", sock, "--", "python", "-c", code], user=as_user)
    assert fresh.returncode == 1, describe(fresh)
    assert (forked.returncode, forked.stderr) == (1, fresh.stderr), describe(fresh) + "\n" + describe(forked)


# What a program can see of how python started it.
MAIN = """
import sys
main = sys.modules["__main__"]
print(sorted(vars(main)), __name__, globals().get("__file__"), globals().get("__cached__"),
      __package__, __spec__, type(__loader__).__name__, getattr(__loader__, "path", None),
      type(__builtins__).__name__, __annotations__, __doc__, sys.argv, sys.path[0],
      main.__dict__ is globals())
"""


def program_file(world_tmp, kind):
    d = world_tmp.dir()
    if kind == "source":
        return world_tmp.script(MAIN, name="job.py", dir=d)
    if kind == "latin-1 source":   # its coding cookie holds: the bytes are compiled, not text
        path = d / "job.py"
        path.write_bytes(b"# -*- coding: latin-1 -*-\nname = '\xe9t\xe9'\nprint(name, len(name))\n"
                         + textwrap.dedent(MAIN).encode())
        path.chmod(0o644)
        return path
    if kind == "zip archive":
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as z:
            z.writestr("__main__.py", textwrap.dedent(MAIN))
        path = d / "app.pyz"
        path.write_bytes(buf.getvalue())
        path.chmod(0o644)
        return path
    assert kind == "compiled"
    source = world_tmp.script(MAIN, name="src.py", dir=d)
    path = d / "job.pyc"
    py_compile.compile(str(source), cfile=str(path), dfile="job.py", doraise=True)
    path.chmod(0o644)
    return path


@pytest.mark.parametrize("kind", ["source", "latin-1 source", "zip archive", "compiled"])
def test_a_script_sees_the_same_main_fresh_and_through_a_template(run_jail, as_user, serve, world_tmp, kind):
    path = program_file(world_tmp, kind)
    if kind == "compiled":
        # The rootfs's python must read this python's bytecode: the same version only.
        probe = run_jail(["--quiet", "--", "python", "-c", "import sys; print(sys.version_info[:2])"],
                         user=as_user)
        import sys
        if probe.stdout.strip() != str(tuple(sys.version_info[:2])):
            pytest.skip("the rootfs's python is not this one's version: its bytecode differs")
    sock, _ = serve(as_user)
    fresh = run_jail(["--quiet", "--", "python", str(path), "an", "arg"], user=as_user)
    forked = run_jail(["--quiet", "--via", sock, "--", "python", str(path), "an", "arg"], user=as_user)
    assert fresh.returncode == 0 and fresh.stdout, describe(fresh)
    assert (forked.returncode, forked.stdout, forked.stderr) == (0, fresh.stdout, fresh.stderr), (
        describe(fresh) + "\n" + describe(forked))


def test_a_command_sees_the_same_main_fresh_and_through_a_template(run_jail, as_user, serve):
    code = textwrap.dedent(MAIN)
    sock, _ = serve(as_user)
    fresh = run_jail(["--quiet", "--", "python", "-c", code, "an", "arg"], user=as_user)
    forked = run_jail(["--quiet", "--via", sock, "--", "python", "-c", code, "an", "arg"], user=as_user)
    assert fresh.returncode == 0 and fresh.stdout, describe(fresh)
    assert (forked.returncode, forked.stdout) == (0, fresh.stdout), describe(fresh) + "\n" + describe(forked)


def test_a_failing_zip_archive_prints_the_same_traceback_fresh_and_through_a_template(run_jail, as_user, serve,
                                                                                    world_tmp):
    # python runs an archive's __main__ through runpy: its frames are in both tracebacks.
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("__main__.py", textwrap.dedent(PROGRAMS["an exception from a nested call, with its cause"]))
    path = world_tmp.dir() / "app.pyz"
    path.write_bytes(buf.getvalue())
    path.chmod(0o644)
    sock, _ = serve(as_user)
    fresh = run_jail(["--quiet", "--", "python", str(path)], user=as_user)
    forked = run_jail(["--quiet", "--via", sock, "--", "python", str(path)], user=as_user)
    assert fresh.returncode == 1 and "runpy" in fresh.stderr, describe(fresh)
    assert (forked.returncode, forked.stderr) == (1, fresh.stderr), describe(fresh) + "\n" + describe(forked)


def test_a_module_run_with_m_sees_only_its_own_names_fresh_and_through_a_template(run_jail, as_user, serve,
                                                                                 world_tmp):
    # runpy runs -m in __main__'s namespace: the template's own boot namespace was there
    # (its names `sys` and `pyjail_template`), not a fresh one.
    d = world_tmp.dir()
    world_tmp.script('print(sorted(k for k in globals() if not k.startswith("__")), __name__)',
                     name="showmain.py", dir=d)
    sock, _ = serve(as_user, "--allow-binds")
    fresh = run_jail(["--quiet", "--workdir", str(d), "--", "python", "-m", "showmain"], user=as_user)
    forked = run_jail(["--quiet", "--workdir", str(d), "--via", sock, "--", "python", "-m", "showmain"],
                      user=as_user)
    assert (fresh.returncode, fresh.stdout) == (0, "[] __main__\n"), describe(fresh)
    assert (forked.returncode, forked.stdout) == (0, fresh.stdout), describe(fresh) + "\n" + describe(forked)
