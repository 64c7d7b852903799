"""Network: no way out under --net none, and only a private loopback under --net loopback."""

import socket
import threading
import time
import uuid

import pytest


class HostListener:
    """Listeners on the host's loopback (TCP on 127.0.0.1 and, where the host has it, ::1) and
    on an abstract unix socket, recording every connection they accept."""

    def __init__(self):
        self.accepted: list[str] = []
        self._stop = threading.Event()
        self._socks = []
        tcp4 = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        tcp4.bind(("127.0.0.1", 0))
        self.port = tcp4.getsockname()[1]
        self._socks.append(("tcp4", tcp4))
        self.port6 = None
        try:
            tcp6 = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
            tcp6.bind(("::1", 0))
            self.port6 = tcp6.getsockname()[1]
            self._socks.append(("tcp6", tcp6))
        except OSError:
            pass
        self.abstract = "\0pyjail-it-" + uuid.uuid4().hex
        unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        unix.bind(self.abstract)
        self._socks.append(("abstract", unix))
        for _, s in self._socks:
            s.listen(8)
            s.settimeout(0.05)
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self):
        while not self._stop.is_set():
            for kind, s in self._socks:
                try:
                    conn, _ = s.accept()
                except (socket.timeout, OSError):
                    continue
                self.accepted.append(kind)
                conn.close()

    def wait_for(self, count: int, timeout: float = 3.0) -> int:
        """Waits until `count` connections were accepted (or `timeout`); returns how many were.
        With count 0, waits for a few turns of the accept loop: time for a late one to land."""
        deadline = time.monotonic() + (timeout if count else 0.2)
        while time.monotonic() < deadline and (count == 0 or len(self.accepted) < count):
            time.sleep(0.01)
        return len(self.accepted)

    def close(self):
        self._stop.set()
        self._thread.join(timeout=5)
        for _, s in self._socks:
            s.close()


@pytest.fixture
def host_listener():
    listener = HostListener()
    yield listener
    listener.close()


CONNECT = """\
import socket
def connect(family, address):
    try:
        with socket.socket(family, socket.SOCK_STREAM) as s:  # the filter may refuse this
            s.settimeout(3)
            s.connect(address)
            return "ok"
    except OSError as e:
        return _errno.errorcode.get(e.errno, str(e))
"""

# The network namespace must hold by itself: each test runs with the syscall filter (which
# refuses AF_INET sockets under --net none) and without it.
LAYERS = {"filtered": [], "unfiltered": ["--seccomp", "off"]}


@pytest.mark.parametrize("layer", sorted(LAYERS))
@pytest.mark.parametrize("net", ["none", "loopback"])
def test_host_loopback_listeners_are_unreachable(run_py, as_user, host_listener, net, layer):
    # The listeners do work from the host.
    for family, address in [(socket.AF_INET, ("127.0.0.1", host_listener.port)),
                            (socket.AF_UNIX, host_listener.abstract)]:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.settimeout(3)
            s.connect(address)
    controls = host_listener.wait_for(2)
    assert controls == 2, host_listener.accepted

    r = run_py("""\
        port, port6, abstract = int(sys.argv[1]), sys.argv[2], "\\0" + sys.argv[3]
        out = {"tcp4": connect(socket.AF_INET, ("127.0.0.1", port)),
               "tcp4 any": connect(socket.AF_INET, ("0.0.0.0", port)),
               "abstract": connect(socket.AF_UNIX, abstract)}
        if port6:
            out["tcp6"] = connect(socket.AF_INET6, ("::1", int(port6)))
        emit(out)
        """, setup=CONNECT, user=as_user, opts=["--net", net, *LAYERS[layer]],
        argv=[str(host_listener.port), str(host_listener.port6 or ""),
              host_listener.abstract[1:]])
    got = r.result
    assert all(v != "ok" for v in got.values()), got
    if net == "loopback":
        assert got["tcp4"] == "ECONNREFUSED"  # the jail's own, empty, 127.0.0.1
    elif layer == "filtered":
        assert got["tcp4"] == "EPERM"  # no AF_INET socket at all
    else:
        assert got["tcp4"] == "ENETUNREACH"
    assert got["abstract"] == "ECONNREFUSED"  # abstract sockets are per network namespace
    assert host_listener.wait_for(0) == controls, host_listener.accepted


LO_STATE = """\
import fcntl, socket, struct
def lo_flags():
    # SIOCGIFFLAGS works on any socket; AF_UNIX is one the filter always allows.
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        req = struct.pack("16sH14s", b"lo", 0, b"")
        return struct.unpack("16sH14s", fcntl.ioctl(s, 0x8913, req))[1]
def interfaces():
    lines = open("/proc/net/dev").read().splitlines()[2:]
    return sorted(line.split(":")[0].strip() for line in lines)
def talk(family, host):
    try:
        with socket.socket(family, socket.SOCK_STREAM) as srv:
            srv.bind((host, 0))
            srv.listen(1)
            with socket.create_connection(srv.getsockname()[:2], timeout=3) as c:
                conn, _ = srv.accept()
                c.sendall(b"ping")
                got = conn.recv(4)
                conn.close()
                return got.decode()
    except OSError as e:
        return _errno.errorcode.get(e.errno, str(e))
def udp(host):
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.sendto(b"x", (host, 9))
            return "ok"
    except OSError as e:
        return _errno.errorcode.get(e.errno, str(e))
"""


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_net_none_has_only_lo_and_it_is_down(run_py, as_user, layer):
    r = run_py("""\
        emit({"interfaces": interfaces(), "flags": lo_flags(),
              "talk": talk(socket.AF_INET, "127.0.0.1"), "udp": udp("127.0.0.1")})
        """, setup=LO_STATE, user=as_user, opts=["--net", "none", *LAYERS[layer]])
    got = r.result
    assert got["interfaces"] == ["lo"]
    assert got["flags"] & 0x1 == 0, f"lo is up: flags {got['flags']:#x}"
    expected = "EPERM" if layer == "filtered" else "ENETUNREACH"
    assert got["talk"] == expected
    assert got["udp"] == expected


def test_net_loopback_is_a_private_working_lo(run_py, as_user):
    r = run_py("""\
        out = {"interfaces": interfaces(), "flags": lo_flags(),
               "talk": talk(socket.AF_INET, "127.0.0.1")}
        if socket.has_ipv6:
            out["talk6"] = talk(socket.AF_INET6, "::1")
        emit(out)
        """, setup=LO_STATE, user=as_user, opts=["--net", "loopback"])
    got = r.result
    assert got["interfaces"] == ["lo"]
    assert got["flags"] & 0x1, f"lo is down: flags {got['flags']:#x}"
    assert got["talk"] == "ping"
    if "talk6" in got and got["talk6"] != "EADDRNOTAVAIL":  # a kernel without IPv6 on lo
        assert got["talk6"] == "ping"


FETCH = """\
import sys, urllib.request
try:
    urllib.request.urlopen("http://example.com/", timeout=5)
except OSError as e:
    print("no network:", e)
    sys.exit(int(sys.argv[1]))
"""
HINT = ("pyjail: the program was refused network sockets (socket(AF_INET) x")


def test_a_program_failing_for_want_of_a_network_is_told_why(run_jail, as_user):
    # The program sees only a failed name lookup; pyjail says the jail refused it, and how to
    # let it out.
    r = run_jail(["--profile", "strict", "--", "python", "-c", FETCH, "1"], user=as_user)
    assert r.returncode == 1, r.stderr
    assert "no network:" in r.stdout
    lines = [line for line in r.stderr.splitlines() if line.startswith(HINT)]
    assert len(lines) == 1, r.stderr
    assert "(--net none, the strict profile's); --net allow --allow-host HOST[:PORT]" in lines[0]
    # One that goes on without it is not told; nor one that has a network, nor one told --quiet.
    for opts, arg in [(["--profile", "strict"], "0"), (["--net", "loopback"], "1"),
                      (["--profile", "strict", "--quiet"], "1")]:
        r = run_jail([*opts, "--", "python", "-c", FETCH, arg], user=as_user)
        assert r.returncode == int(arg), r.stderr
        assert "refused network sockets" not in r.stderr, (opts, r.stderr)
