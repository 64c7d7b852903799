"""tools/quickstart.sh, the README's one set-up command, run with a stand-in cmake and apt step
(nothing is installed or built): CMAKE_BUILD_PARALLEL_LEVEL reaches the build, nothing in the
script overrides it, and a value cmake would refuse is refused before anything is installed."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Records each call (its CMAKE_BUILD_PARALLEL_LEVEL and arguments) and stops the script at the
# build, as a failed build would.
FAKE_CMAKE = """#!/bin/sh
echo "level=${CMAKE_BUILD_PARALLEL_LEVEL-unset} args=$*" >> "$CALLS"
case "$1" in --build) exit 3;; esac
exit 0
"""


def quickstart(tmp_path: Path, level: str | None) -> tuple[subprocess.CompletedProcess, list[str]]:
    tree = tmp_path / "tree"
    (tree / "tools").mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "tools/quickstart.sh", tree / "tools/quickstart.sh")
    apt = tree / "tools/apt-install-missing.sh"
    apt.write_text('#!/bin/sh\necho apt >> "$CALLS"\n')
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    cmake = bin_dir / "cmake"
    cmake.write_text(FAKE_CMAKE)
    for f in (apt, cmake):
        f.chmod(0o755)
    calls = tmp_path / "calls"
    calls.write_text("")
    env = {k: v for k, v in os.environ.items() if k != "CMAKE_BUILD_PARALLEL_LEVEL"}
    env.update(PATH=f"{bin_dir}:{os.environ['PATH']}", CALLS=str(calls))
    if level is not None:
        env["CMAKE_BUILD_PARALLEL_LEVEL"] = level
    r = subprocess.run(["bash", str(tree / "tools/quickstart.sh")], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, universal_newlines=True, timeout=60)
    return r, calls.read_text().splitlines()


def test_the_build_gets_cmake_build_parallel_level_and_no_j_of_its_own(tmp_path):
    r, calls = quickstart(tmp_path, "1")
    assert r.returncode == 3, r.stderr
    builds = [c for c in calls if "args=--build" in c]
    assert builds == ["level=1 args=--build build --target pyjail seccomp_filters rootfs"], calls
    assert "(at most 1 jobs at once: CMAKE_BUILD_PARALLEL_LEVEL)" in r.stdout
    # Unset, the build is left to ninja's default, and the line says how to bound it.
    r, calls = quickstart(tmp_path, None)
    assert [c for c in calls if "args=--build" in c] == [
        "level=unset args=--build build --target pyjail seccomp_filters rootfs"], calls
    assert "CMAKE_BUILD_PARALLEL_LEVEL=N bounds the build to N jobs" in r.stdout


def test_a_level_that_is_no_number_of_jobs_is_refused_before_anything_is_installed(tmp_path):
    for level in ("abc", "0", "-2", "2 "):
        r, calls = quickstart(tmp_path, level)
        assert r.returncode == 2, (level, r.stdout, r.stderr)
        assert r.stderr == (
            "quickstart: CMAKE_BUILD_PARALLEL_LEVEL=%s is not a number of build jobs (give a whole "
            "number of at least 1, e.g. CMAKE_BUILD_PARALLEL_LEVEL=2, or unset it for ninja's "
            "default)\n" % level), level
        assert calls == [], level
