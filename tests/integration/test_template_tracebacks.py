"""A failing program prints the same traceback through a template (`pyjail --via`) as in a
fresh jail: no frame of the template's own code, nor of runpy, which runs a file there."""

from __future__ import annotations

import subprocess
import textwrap

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
