"""Tests that run pyjail inside a small VM with a pure cgroup v2 hierarchy (see vm.py).

A test declares what runs in the VM with a marker, and gets the result from `vm_run`:

    @pytest.mark.vm("cat /sys/fs/cgroup/cgroup.controllers")
    def test_controllers(vm_run):
        assert vm_run.exit_code == 0, vm_run.describe()
        assert "memory" in vm_run.output.split()

The snippet is sh (busybox), run as root with vm.py's guest library sourced: $PYJAIL,
`as_nobody CMD...`, `as_user root|nobody CMD...`, $USER_CGROUP, $SESSION_CGROUP,
$ROOT_SESSION_CGROUP. The parameters of a parametrized test are set as shell variables of
the same name. All the selected tests' snippets run in ONE boot, each in its own shell and
fresh session cgroups, in collection order; `@pytest.mark.vm(snippet, timeout=SECONDS)`
bounds one (default 60 s). `@pytest.mark.vm(snippet, flavour="systemd")` runs it in the
other boot, whose init is systemd (vm.py's GUEST_SYSTEMD_LIB: `in_context`, `leftovers`);
each flavour boots once, when its first test runs. See README.md.

Environment:
  PYJAIL_BIN=PATH             bin/pyjail of a staged installation (what tests/run.sh sets):
                              its prefix goes into the VM at /usr/local
  PYJAIL_VM_GUEST_PREFIX=DIR  put it there instead
  PYJAIL_VM_LOG=PATH          where the serial console goes (default: in the cache)
  PYJAIL_MUST_WORK=1          what would be skipped for lack of qemu, a kernel, busybox or
                              a VM that boots fails instead
  and vm.py's: PYJAIL_VM_ACCEL=kvm|tcg, PYJAIL_VM_CACHE, PYJAIL_VM_KERNEL, ...
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
from pathlib import Path

import pytest
from pyjail_testing import skip_or_fail

sys.path.insert(0, str(Path(__file__).resolve().parent))
import vm  # noqa: E402

DEFAULT_SCENARIO_TIMEOUT = 60
BOOT_ALLOWANCE = 180  # seconds for the VM to boot and power off, on top of the scenarios'


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "vm(script, timeout=60, flavour='plain'): a shell snippet that runs as root "
                   "in the cgroup v2 VM (flavour systemd: one whose init is systemd); the test "
                   "gets its result from the vm_run fixture")


@dataclasses.dataclass
class VMSession:
    """The one boot that ran every selected scenario."""
    names: dict[str, str]  # test node id -> scenario name
    results: dict[str, vm.ScenarioResult]  # scenario name -> result
    vm: vm.VMResult | None = None
    problem: str = ""  # why nothing ran: the reason to skip (or fail) with


def _flavour(marker) -> str:
    return marker.kwargs.get("flavour", "plain")


def _scenarios(items, flavour: str) -> tuple[list[vm.Scenario], dict[str, str]]:
    scenarios, names, taken = [], {}, set()
    for item in items:
        marker = item.get_closest_marker("vm")
        if marker is None or _flavour(marker) != flavour:
            continue
        if not marker.args or not isinstance(marker.args[0], str):
            raise pytest.UsageError(f"{item.nodeid}: write @pytest.mark.vm(\"shell snippet\")")
        base = re.sub(r"[^A-Za-z0-9_.-]+", "_", item.nodeid.split("::", 1)[-1]).strip("_")[:80]
        name, n = base, 1
        while name in taken:
            n += 1
            name = f"{base}.{n}"
        taken.add(name)
        env = {}
        callspec = getattr(item, "callspec", None)
        for key, value in (callspec.params.items() if callspec else ()):
            if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key) and \
                    isinstance(value, (str, int, float, bool)):
                env[key] = value
        scenarios.append(vm.Scenario(name, marker.args[0], env,
                                     int(marker.kwargs.get("timeout", DEFAULT_SCENARIO_TIMEOUT))))
        names[item.nodeid] = name
    return scenarios, names


def _console_log() -> Path:
    if os.environ.get("PYJAIL_VM_LOG"):
        return Path(os.environ["PYJAIL_VM_LOG"])
    logs = vm.cache_root() / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    old = sorted(logs.glob("console-*.log"), key=lambda p: p.stat().st_mtime)
    for p in old[:-4]:
        p.unlink(missing_ok=True)
    return logs / f"console-{os.getpid()}.log"


@pytest.fixture(scope="session")
def vm_session(request) -> VMSession:
    """Boots the VM once for every selected test that has a `vm` marker (plain flavour)."""
    return _boot(request, "plain")


@pytest.fixture(scope="session")
def vm_systemd_session(request) -> VMSession:
    """Boots the systemd VM once for every selected test with `vm(..., flavour="systemd")`."""
    return _boot(request, "systemd")


def _boot(request, flavour: str) -> VMSession:
    scenarios, names = _scenarios(request.session.items, flavour)
    session = VMSession(names, {})
    # For the summary.
    request.config._pyjail_vm_sessions = getattr(request.config, "_pyjail_vm_sessions", {})
    request.config._pyjail_vm_sessions[flavour] = session
    binary = os.environ.get("PYJAIL_BIN")
    if not binary:
        session.problem = ("PYJAIL_BIN is not set: these tests need a staged installation "
                           "(DESTDIR=STAGE cmake --install BUILD --prefix /usr/local; "
                           "PYJAIL_BIN=STAGE/usr/local/bin/pyjail)")
        return session
    prefix = Path(binary).resolve().parent.parent
    timeout = BOOT_ALLOWANCE + sum(s.timeout for s in scenarios)
    try:
        session.vm, session.results = vm.run_scenarios(
            scenarios, prefix, timeout=timeout, log_path=_console_log(), flavour=flavour,
            guest_prefix=os.environ.get("PYJAIL_VM_GUEST_PREFIX") or "/usr/local")
    except vm.VMUnavailable as e:
        session.problem = str(e)
    except vm.VMBootError as e:
        session.problem = f"the VM cannot boot: {e}"
    return session


@pytest.fixture
def vm_run(request) -> vm.ScenarioResult:
    """The result of this test's `vm` snippet: exit_code, output (stdout and stderr),
    seconds, describe()."""
    marker = request.node.get_closest_marker("vm")
    if marker is None:
        raise pytest.UsageError(f"{request.node.nodeid} uses vm_run without a vm marker")
    vm_session = request.getfixturevalue(
        "vm_systemd_session" if _flavour(marker) == "systemd" else "vm_session")
    if vm_session.problem:
        skip_or_fail(vm_session.problem)
    result = vm_session.results[vm_session.names[request.node.nodeid]]
    if result.exit_code is None:
        where = vm_session.vm.log_path if vm_session.vm else None
        pytest.fail(f"the scenario did not finish (it ran out of time, or the VM stopped); "
                    f"console log: {where}\n{result.describe()}", pytrace=False)
    return result


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    for flavour, session in getattr(config, "_pyjail_vm_sessions", {}).items():
        _summary(terminalreporter, flavour, session)


def _summary(tr, flavour: str, session: VMSession) -> None:
    tr.write_sep("-", "pyjail VM" + ("" if flavour == "plain" else f" ({flavour})"))
    if session.problem:
        # With the console's last lines (a boot's failure carries them): what CI keeps of
        # the run is its end, where this summary is.
        tr.write_line(f"not run: {session.problem}")
        return
    r = session.vm
    tr.write_line(r.timing() + (f" [{r.accel_note}]" if r.accel_note else ""))
    for name, result in session.results.items():
        took = f"{result.seconds:6.2f} s" if result.seconds is not None else "   --   "
        tr.write_line(f"  {took}  {name}  (exit {result.exit_code})")
    tr.write_line(f"console log: {r.log_path}")
