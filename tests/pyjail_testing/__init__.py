"""What every test directory shares (integration, rootfs, vm, man, python).

Imported by name (`from pyjail_testing import skip_or_fail`): tests/conftest.py puts tests/ on
sys.path. A conftest is never imported by name, since several test directories have one and
`import conftest` finds whichever came first on the path.

Environment:
  PYJAIL_MUST_WORK=1   a test that would be skipped for lack of something on the host (root,
                       a tool, a library, the binary, a VM) fails instead; tests/conftest.py
                       turns every other skip into a failure too
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

MUST_WORK = os.environ.get("PYJAIL_MUST_WORK") == "1"

# The checkout the tests belong to.
REPO = Path(__file__).resolve().parents[2]


def skip_or_fail(reason: str) -> None:
    """Skips the current test for lack of something on the host, or fails it under
    PYJAIL_MUST_WORK=1."""
    if MUST_WORK:
        pytest.fail(f"PYJAIL_MUST_WORK=1, but: {reason}", pytrace=False)
    pytest.skip(reason)
