"""tests/conftest.py's PYJAIL_MUST_WORK hook, on a throw-away test file: under
PYJAIL_MUST_WORK=1 every kind of skip fails, wherever the test lives; without it a skip is a
skip. (CI runs with PYJAIL_MUST_WORK=1 and must print "0 skipped".)"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

TESTS = Path(__file__).resolve().parent

SAMPLE = textwrap.dedent('''
    import pytest
    from pyjail_testing import skip_or_fail

    def test_skip_in_body():
        pytest.skip("no frobnicator")

    @pytest.mark.skipif(True, reason="never here")
    def test_skipif():
        pass

    def test_skip_or_fail():
        skip_or_fail("no widget")

    @pytest.mark.xfail(reason="known", strict=True)
    def test_expected_failure():
        assert False

    def test_passes():
        pass
''')


def run_sample(tmp_path: Path, must_work: bool) -> str:
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    env = dict(os.environ, PYTHONPATH=str(TESTS))
    env.pop("PYJAIL_MUST_WORK", None)
    if must_work:
        env["PYJAIL_MUST_WORK"] = "1"
    # tests/conftest.py loaded as a plugin: the sample lives outside tests/.
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "-p", "conftest", "-rA", str(tmp_path)],
                       capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    return r.stdout + r.stderr


def test_every_skip_fails_under_must_work(tmp_path):
    out = run_sample(tmp_path, must_work=True)
    # A skipif skips in the setup phase: there it becomes an error.
    last = out.strip().splitlines()[-1]
    assert "2 failed, 1 passed, 1 xfailed, 1 error" in last and "skipped" not in last, out
    assert "PYJAIL_MUST_WORK=1, but: no widget" in out, out
    assert "PYJAIL_MUST_WORK=1, but the test was skipped" in out, out


def test_skips_are_skips_otherwise(tmp_path):
    out = run_sample(tmp_path, must_work=False)
    assert "1 passed, 3 skipped, 1 xfailed" in out, out

