"""Runs of the pyjail binary as the integration tests see them: who runs it, and how a run's
outcome is shown and compared."""

from __future__ import annotations

import subprocess

# The uid/gid the "unprivileged" runs use when the tests run as root.
UNPRIVILEGED_ID = 65534


def describe(r: subprocess.CompletedProcess) -> str:
    return f"exit {r.returncode}\n--- stdout:\n{r.stdout}\n--- stderr:\n{r.stderr}"


# Notices pyjail prints by design on some hosts, before running the program: on a host without
# a usable cgroup v2 it says, once a day per user and reason, that it limits by rlimits instead
# (which run of a suite says it depends on the other runs that day); under cron (a suite
# started by cron) it says which of the environment's variables the jail does not get.
HOST_NOTICES = ("pyjail: no cgroup v2 for the limits", "pyjail: the jail does not get your environment")


def without_notices(stderr: str) -> str:
    """stderr less pyjail's per-host notices (HOST_NOTICES)."""
    return "".join(line for line in stderr.splitlines(keepends=True)
                   if not line.startswith(HOST_NOTICES))
