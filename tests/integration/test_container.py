"""pyjail inside a rootless container, as README.md ("Inside a container or a Kubernetes pod")
says to start one, and `pyjail doctor` naming what is missing when it is started without.

The container is Debian's podman, run by an unprivileged user (nobody, with no subordinate ids:
podman maps that user alone) on a root file system made here (`--rootfs DIR`: no image is
downloaded): busybox and a copy of the pyjail installation under test, owned by the user, as a
user's own copy would be (files of other users show up as the overflow uid in the container's
user namespace, and pyjail rightly refuses to trust them).

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

# What README.md says a container needs (beyond what podman gives by default).
DOCUMENTED_FLAGS = ["--security-opt", "unmask=ALL"]


@pytest.fixture(scope="module")
def container(pyjail_bin):
    """podman_run(flags, argv) -> CompletedProcess: argv in a fresh rootless container."""
    if os.geteuid() != 0:
        skip_or_fail("the container test runs podman as another user: it must run as root")
    for tool, package in (("podman", "podman"), ("runc", "runc"), ("setpriv", "util-linux"),
                          ("busybox", "busybox-static")):
        if shutil.which(tool) is None:
            skip_or_fail(f"{tool} is missing: apt-get install {package}")
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
    (rootfs / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    (rootfs / "etc" / "group").write_text("root:x:0:\n")
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

    probe = podman_run([], ["/bin/echo", "container ok"])
    if probe.returncode != 0 or probe.stdout != "container ok\n":
        pytest.fail(f"rootless podman cannot run a container here: {describe(probe)}",
                    pytrace=False)
    yield podman_run
    shutil.rmtree(top, ignore_errors=True)


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


def test_without_the_flags_doctor_names_what_is_missing(container):
    r = container([], ["/usr/local/bin/pyjail", "doctor"])
    assert r.returncode == 1, describe(r)
    failed = [line.split()[1] for line in r.stdout.splitlines() if line.startswith("FAIL")]
    # Exactly the missing piece, and the jail that cannot run for want of it.
    assert failed == ["/proc", "profile"], r.stdout
    lines = r.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("FAIL  /proc"))
    assert "partly covered by mounts (/proc/" in lines[at]
    assert lines[at + 1].split("fix: ", 1)[1] == (
        "run pyjail where /proc is fully visible: podman --security-opt unmask=ALL, docker "
        "--security-opt systempaths=unconfined, Kubernetes procMount: Unmasked")
    # And a run fails with one line that says the same.
    run = container([], ["/usr/local/bin/pyjail", "--", "python3", "-c", "pass"])
    assert run.returncode == 125, describe(run)
    assert "systempaths=unconfined" in run.stderr
