"""pyjail inside a rootless container, as README.md ("Inside a container or a Kubernetes pod")
says to start one, and `pyjail doctor` naming what is missing when it is started without.

The container is Debian's podman, run by an unprivileged user (nobody, given a range of
subordinate ids for the test's duration, as useradd gives every new user) on a root file system
made here (`--rootfs DIR`: no image is downloaded): busybox and a copy of the pyjail
installation under test, owned by the user, as a user's own copy would be (files of other users
show up as the overflow uid in the container's user namespace, and pyjail rightly refuses to
trust them). pyjail runs as the container's root, as most containers' processes do, and the
jail as its --host-user nobody (a subordinate id on the host).

The runtime is runc with cgroupfs: crun refuses hosts whose cgroup2 hierarchy is mounted beside
v1 controllers ("hybrid"), and nothing here asks systemd for a cgroup. Neither changes what the
container lets pyjail do.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from pyjail_testing import skip_or_fail
from pyjail_testing.runs import UNPRIVILEGED_ID, describe

# What README.md says a container needs (beyond what podman gives by default), and what
# `pyjail doctor` calls the check that fails without each.
UNMASK = ["--security-opt", "unmask=ALL"]
SECCOMP = ["--security-opt", "seccomp=unconfined"]
DOCUMENTED_FLAGS = UNMASK + SECCOMP
SUBORDINATE = f"nobody:200000:65536\n"


def _give_subordinate_ids() -> dict[Path, str]:
    """Adds a range for nobody to /etc/subuid and /etc/subgid; returns what to restore."""
    saved = {}
    for path in (Path("/etc/subuid"), Path("/etc/subgid")):
        text = path.read_text() if path.exists() else ""
        if not any(line.startswith("nobody:") for line in text.splitlines()):
            saved[path] = text
            path.write_text(text + ("" if text.endswith("\n") or not text else "\n") + SUBORDINATE)
    return saved


def _failed_checks(doctor_output: str) -> list[str]:
    return [line[6:22].strip() for line in doctor_output.splitlines() if line.startswith("FAIL ")]


@pytest.fixture(scope="module")
def container(pyjail_bin):
    """podman_run(flags, argv) -> CompletedProcess: argv in a fresh rootless container."""
    if os.geteuid() != 0:
        skip_or_fail("the container test runs podman as another user: it must run as root")
    for tool, package in (("podman", "podman"), ("runc", "runc"), ("setpriv", "util-linux"),
                          ("busybox", "busybox-static")):
        if shutil.which(tool) is None:
            skip_or_fail(f"{tool} is missing: apt-get install {package}")
    saved = _give_subordinate_ids()
    top = Path(tempfile.mkdtemp(prefix="pyjail-it-podman-", dir="/tmp"))
    os.chmod(top, 0o755)
    home, runtime, rootfs = top / "home", top / "run", top / "rootfs"
    for d in (home, runtime):
        d.mkdir(mode=0o700)
    # The container's root file system.
    for d in ("bin", "etc", "proc", "sys", "dev", "tmp", "run", "usr"):
        (rootfs / d).mkdir(parents=True)
    os.chmod(rootfs / "tmp", 0o1777)
    shutil.copy(shutil.which("busybox"), rootfs / "bin" / "busybox")
    for applet in ("sh", "cat", "echo", "ls"):
        (rootfs / "bin" / applet).symlink_to("busybox")
    (rootfs / "etc" / "passwd").write_text(
        f"root:x:0:0:root:/root:/bin/sh\nnobody:x:{UNPRIVILEGED_ID}:{UNPRIVILEGED_ID}::/:/bin/sh\n")
    (rootfs / "etc" / "group").write_text(f"root:x:0:\nnogroup:x:{UNPRIVILEGED_ID}:\n")
    (rootfs / "etc" / "mtab").symlink_to("../proc/self/mounts")
    prefix = Path(pyjail_bin).resolve().parent.parent  # STAGE/usr/local
    shutil.copytree(prefix, rootfs / "usr" / "local", symlinks=True)
    subprocess.run(["chown", "-R", f"{UNPRIVILEGED_ID}:{UNPRIVILEGED_ID}", str(top)], check=True)

    def podman_run(flags, argv, timeout=120):
        env = {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
               "HOME": str(home), "XDG_RUNTIME_DIR": str(runtime)}
        cmd = ["setpriv", f"--reuid={UNPRIVILEGED_ID}", f"--regid={UNPRIVILEGED_ID}",
               "--clear-groups", "--",
               "podman", "--root", str(home / "storage"), "--runroot", str(runtime / "storage"),
               "--runtime", "runc", "--cgroup-manager", "cgroupfs", "--events-backend", "file",
               "run", "--rm", "--network", "none", *flags, "--rootfs", str(rootfs), *argv]
        r = subprocess.run(cmd, env=env, text=True, capture_output=True, timeout=timeout,
                           cwd="/")
        # podman's own warnings (no subordinate ids, "/" not a shared mount) are not pyjail's.
        r.stderr = "".join(line for line in r.stderr.splitlines(keepends=True)
                           if "level=warning" not in line and "level=error" not in line)
        return r

    try:
        probe = podman_run([], ["/bin/cat", "/proc/self/uid_map"])
        if probe.returncode != 0 or len(probe.stdout.splitlines()) != 2:
            pytest.fail(f"rootless podman cannot run a container with subordinate ids here: "
                        f"{describe(probe)}", pytrace=False)
        yield podman_run
    finally:
        # Rootless podman leaves a process holding its user namespace: it goes too.
        pause = runtime / "libpod" / "tmp" / "pause.pid"
        if pause.exists():
            try:
                os.kill(int(pause.read_text()), 9)
            except (ProcessLookupError, ValueError):
                pass
        shutil.rmtree(top, ignore_errors=True)
        for path, text in saved.items():
            path.write_text(text)


def test_pyjail_runs_in_a_rootless_container_started_as_documented(container):
    t0 = time.monotonic()
    r = container(DOCUMENTED_FLAGS, ["/usr/local/bin/pyjail", "--profile", "strict", "--",
                                     "python3", "-c", "import os; print(6 * 7, os.getuid())"])
    assert r.returncode == 0, describe(r)
    assert r.stdout == "42 1000\n"
    print(f"container run: {time.monotonic() - t0:.2f} s")



def test_doctor_in_the_documented_container_is_content(container):
    r = container(DOCUMENTED_FLAGS, ["/usr/local/bin/pyjail", "doctor"])
    assert r.returncode == 0, describe(r)
    assert "=> --profile strict can run here." in r.stdout
    assert "FAIL" not in r.stdout


@pytest.mark.parametrize("flags,missing", [
    ([], ["/proc", "outer filter"]),
    (SECCOMP, ["/proc"]),
    (UNMASK, ["outer filter"]),
], ids=["no-flags", "no-unmask", "no-seccomp"])
def test_without_the_flags_doctor_names_what_is_missing(container, flags, missing):
    r = container(flags, ["/usr/local/bin/pyjail", "doctor"])
    assert r.returncode == 1, describe(r)
    # Exactly what is missing, and the jail that cannot run for want of it.
    assert _failed_checks(r.stdout) == [*missing, "profile strict"], r.stdout
    fixes = {line[6:22].strip(): next_line.split("fix: ", 1)[1]
             for line, next_line in zip(r.stdout.splitlines(), r.stdout.splitlines()[1:])
             if line.startswith("FAIL ") and "fix: " in next_line}
    if "/proc" in missing:
        assert "partly covered by mounts (/proc/" in r.stdout
        assert fixes["/proc"] == (
            "run pyjail where /proc is fully visible: podman --security-opt unmask=ALL, docker "
            "--security-opt systempaths=unconfined, Kubernetes procMount: Unmasked")
    if "outer filter" in missing:
        assert "sethostname is denied (EPERM) in a jail's own namespaces" in r.stdout
        assert fixes["outer filter"].startswith(
            "start the container with podman/docker --security-opt seccomp=unconfined")
    # And a run fails with one line.
    run = container(flags, ["/usr/local/bin/pyjail", "--", "python3", "-c", "pass"])
    assert run.returncode == 125, describe(run)
    assert run.stderr.count("\n") <= 2, describe(run)  # the rlimit notice, and the error
