"""Peak memory of the pyjail supervisor itself, not of the program in its jail.

The jail's processes are other pids, so the supervisor's own high-water mark is VmHWM in
/proc/<pyjail's pid>/status. It is polled every few ms until pyjail exits; the last value read
is the peak, since VmHWM only grows (and its line is gone once the process has exited).
"""
from __future__ import annotations

import subprocess
import time

POLL_SECONDS = 0.002


def vmhwm_kib(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def peak_rss_kib(argv: list[str]) -> int:
    """The supervisor's VmHWM in KiB at the last poll before it exited."""
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    last = None
    # poll() reaps the process only once it has exited, so the pid cannot be reused meanwhile.
    while proc.poll() is None:
        last = vmhwm_kib(proc.pid) or last
        time.sleep(POLL_SECONDS)
    err = proc.stderr.read().decode().strip()
    proc.stderr.close()
    if proc.returncode != 0 or last is None:
        raise SystemExit(f"bench: memory run failed ({proc.returncode}): {err}")
    return last
