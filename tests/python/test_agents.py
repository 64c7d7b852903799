"""The agent adapters' pure helpers (pyjail._agents): the output budget and the no-network
note. No jail needed."""

import doctest

import pytest

from pyjail._agents import NO_NETWORK_NOTE, JailFacts, fit_for_model, network_note
from pyjail._session import CellError

pytestmark = pytest.mark.no_binary


def test_doctests():
    import pyjail._agents
    result = doctest.testmod(pyjail._agents)
    assert result.attempted >= 3 and result.failed == 0


@pytest.mark.parametrize("n,width", [(10, 5), (5000, 7), (100000, 30), (3, 20000)])
def test_cut_keeps_whole_lines_and_counts_what_it_left_out(n, width):
    text = "".join(("%d:" % i).ljust(width, "x") + "\n" for i in range(n))
    out = fit_for_model(text, 16000)
    if len(text) <= 16000:
        assert out == text
        return
    assert len(out) <= 16000
    head, _, rest = out.partition("[... ")
    line, _, tail = rest.partition("\n")
    marker = "[... " + line
    left_out = int(line.split()[0])
    if not text.startswith(head):
        head = head[:-1]        # a line longer than the head's share: cut, then a newline
    # What is shown plus what is left out is the whole text, and the pieces are its own.
    assert text.startswith(head) and text.endswith(tail)
    assert len(head) + left_out + len(tail) == len(text)
    if width < 1000:
        assert head.endswith("\n") and all(l.startswith(tuple("0123456789"))
                                           for l in out.splitlines() if l != marker)


def test_no_budget_means_no_cut():
    assert fit_for_model("x" * 10 ** 6, None) == "x" * 10 ** 6


@pytest.mark.parametrize("error,noted", [
    (CellError("gaierror", "[Errno -3] Temporary failure in name resolution"), True),
    (CellError("URLError", "<urlopen error [Errno -2] Name or service not known>"), True),
    (CellError("ConnectionError", "HTTPSConnectionPool(host='x', port=443): Max retries "
               "exceeded with url: / (Caused by NameResolutionError(...))"), True),
    (CellError("PermissionError", "[Errno 1] Operation not permitted",
               'Traceback...\n  File "socket.py", line 1, in create_connection\n'), True),
    (CellError("PermissionError", "[Errno 13] Permission denied: '/etc/shadow'",
               'Traceback...\n  File "<cell-1>", line 1, in <module>\n'), False),
    (CellError("ZeroDivisionError", "division by zero"), False),
    (None, False),
])
def test_the_no_network_note(error, noted):
    assert network_note(error, network=False) == (NO_NETWORK_NOTE if noted else None)
    assert network_note(error, network=True) is None


def test_facts_describe_the_jail():
    text = JailFacts("data", "3.11.2", ["numpy", "pandas"]).describe()
    assert text == ("The code runs in an isolated sandbox (rootfs 'data'): Python 3.11.2 with "
                    "its standard library and these packages: numpy, pandas. There is no "
                    "network in this sandbox: code cannot download anything, call web APIs or "
                    "pip install packages. Files are in /work, the working directory; "
                    "variables persist from one call to the next.")
    assert "standard library only" in JailFacts(None).describe()
    assert "network" not in JailFacts(None, network=True).describe()


def test_the_missing_module_note():
    from pyjail._agents import missing_module_note
    err = CellError("ModuleNotFoundError", "No module named 'torch'")
    assert missing_module_note(err, JailFacts("data", packages=["numpy", "pandas"])) == (
        "[pyjail] There is no module 'torch' in this sandbox, and nothing can be installed "
        "here (no network, no pip); its packages are: numpy, pandas.")
    assert missing_module_note(err, JailFacts(None)).endswith(
        "; it has the standard library only.")
    assert missing_module_note(CellError("ImportError", "cannot import name 'x'"),
                               JailFacts(None)) is None
    assert missing_module_note(None, JailFacts(None)) is None


def test_refused_calls_are_blamed_only_when_they_killed_the_program():
    from pyjail._common import Report
    denied = [{"syscall": "mbind", "count": 3}]
    # A plain os._exit(3) after numpy's refused mbind calls (as older builds reported it).
    old = Report.from_json({"status": "seccomp-denied", "program_exit_code": 3,
                            "denied_syscalls": denied})
    assert old.describe() == "exited with status 3"
    now = Report.from_json({"status": "exit", "program_exit_code": 3, "denied_syscalls": denied})
    assert now.describe() == "exited with status 3"
    killed = Report.from_json({"status": "seccomp-denied", "signal": 31, "signal_name": "SIGSYS"})
    assert killed.describe() == "was killed by the system-call filter (SIGSYS)"
