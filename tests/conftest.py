"""The one conftest that every test directory shares.

Under PYJAIL_MUST_WORK=1 (CI) nothing may skip: a skip that did not go through
pyjail_testing.skip_or_fail (a skipif, a pytest.skip or importorskip in a helper) is turned into
a failure here. Expected failures stay what they are.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# The shared helpers are imported by name (pyjail_testing), from this directory, whichever
# interpreter and working directory pytest runs with.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from pyjail_testing import MUST_WORK  # noqa: E402


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if MUST_WORK and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"PYJAIL_MUST_WORK=1, but the test was skipped: {reason}"
