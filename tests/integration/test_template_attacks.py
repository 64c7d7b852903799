"""Attacks on runs from a template (`pyjail serve`, `pyjail --via`), from the inside (a run
that tries to learn or change something of the template, of an earlier, later or concurrent
run, or of the host) and from the outside (a local user or a malformed client against the
server, a server that is not the client's). Each test tries the attack and checks that it
fails; each runs as root and as an unprivileged user where both apply."""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import socket
import struct
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
import time

import pytest

from pyjail_testing import skip_or_fail
from pyjail_testing.runs import describe, without_notices
from pyjail_testing.template_wire import HELLO, HELLO_SIZE, REFUSED, SERVE_VERSION, capture_request


def via(run_jail, user, sock, code, *args, opts=(), **kwargs):
    return run_jail(["--quiet", *opts, "--via", sock, "--", "python", "-c", textwrap.dedent(code), *args],
                    user=user, **kwargs)


def result(r):
    assert r.returncode == 0, describe(r)
    return json.loads(r.stdout.strip().splitlines()[-1])


def as_uid(uid: int) -> list[str]:
    """What runs a host command as `uid` (the tests run as root, or as that user already)."""
    if os.geteuid() == uid:
        return []
    if os.geteuid() != 0:
        skip_or_fail(f"a second local user (uid {uid}) needs the tests to run as root")
    return [shutil.which("setpriv") or "setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"]


def server_fds(p: subprocess.Popen) -> int:
    return len(os.listdir(f"/proc/{p.pid}/fd"))


# --------------------------------------------------------------------------------------------
# From inside a run


# Scans this process's writable memory (its own copy of the template's) for NEEDLE followed by
# TAIL (both given in hex, so that this program's text holds neither): prints how often.
SCAN_MEMORY = """
    import json, os, sys
    needle, tail = bytes.fromhex(sys.argv[1]), bytes.fromhex(sys.argv[2])
    found = 0
    fd = os.open("/proc/self/mem", os.O_RDONLY)
    for line in open("/proc/self/maps").read().splitlines():
        fields = line.split()
        if not fields[1].startswith("rw") or (len(fields) > 5 and fields[5] in ("[vvar]", "[vsyscall]")):
            continue
        start, end = (int(x, 16) for x in fields[0].split("-"))
        at = start
        while at < end:
            size = min(1 << 20, end - at)
            try:
                data = os.pread(fd, size + 256 if at + size < end else size, at)
            except OSError:
                break
            i = data.find(needle)
            while 0 <= i < size:
                if data[i + len(needle):i + len(needle) + len(tail)] == tail:
                    found += 1
                i = data.find(needle, i + 1)
            at += size
    print(json.dumps({"found": found}))
"""


def test_a_run_finds_nothing_of_an_earlier_runs_request_in_its_memory(run_jail, as_user, serve):
    # Attack: every run is a fork of the template, so a run's memory is a copy of the
    # template's. What the template keeps of the requests it forked earlier runs for (its
    # receive buffer; the decoded strings, freed but not cleared) a later run reads: an
    # earlier run's environment and command line, with their tokens and keys.
    sock, _ = serve(as_user)
    # Strings the allocator keeps in its free lists (the first 16 bytes of a freed chunk are
    # its links: the marker sits after them); more of them than the next request reuses.
    needle, tail = b"-pjleak-", b"s" * 30
    entry = "a" * 29 + (needle + tail).decode()
    env = [o for i in range(40) for o in ("--env", f"K{i:02d}={entry}")]
    first = via(run_jail, as_user, sock, "pass", "x" * 5000 + entry, opts=env)
    assert first.returncode == 0, describe(first)
    second = result(via(run_jail, as_user, sock, SCAN_MEMORY, needle.hex(), tail.hex()))
    assert second["found"] == 0, f"a later run read {second['found']} of an earlier run's environment entries"
    # The scan finds what is there: the same strings in its own environment.
    own = result(via(run_jail, as_user, sock, SCAN_MEMORY, needle.hex(), tail.hex(), opts=env[:2]))
    assert own["found"] > 0, own


def test_the_programs_first_line_finds_its_pid1_already_closed_to_it(run_jail, as_user, serve):
    # Attack: the run's pid 1 execs the reaper after forking the program, and an exec makes a
    # process dumpable again; a program that ran before the reaper made itself undumpable could
    # read or write pid 1's memory through /proc/1/mem and forge the run's report. The reaper
    # releases the program only after that (jail/template/reaper.cpp): the program's very first
    # statement already finds pid 1 closed. Twenty runs, for a window to show. (A draft that
    # released the program first failed here.)
    sock, _ = serve(as_user)
    code = ("try:\n    open('/proc/1/mem', 'rb').read(1); mem = 'ok'\nexcept OSError as e:\n    mem = e.errno\n"
            "try:\n    open('/proc/1/environ', 'rb').read(); env = 'ok'\nexcept OSError as e:\n    env = e.errno\n"
            "print(mem, env)")
    for _ in range(20):
        r = run_jail(["--quiet", "--via", sock, "--", "python", "-c", code], user=as_user)
        assert r.returncode == 0, describe(r)
        mem, env = r.stdout.split()
        assert mem != "ok" and env != "ok", r.stdout


def test_pid1_and_the_program_hold_nothing_of_the_template(run_jail, as_user, serve):
    # Attack: the run's pid 1 and its program are copies of the template. Any descriptor of the
    # template (its control socket to the server, its pid namespace) left open would let the
    # program talk to the server or enter the template's pid namespace; a pid 1 without the
    # filter or with capabilities would be a way out once the program takes it over.
    sock, _ = serve(as_user, "--preload", "json")
    got = result(via(run_jail, as_user, sock, """
        import json, os
        fds = {}
        for fd in os.listdir("/proc/self/fd"):
            try:
                fds[fd] = os.readlink("/proc/self/fd/" + fd)
            except OSError:
                pass
        status = dict(l.split(":", 1) for l in open("/proc/1/status").read().splitlines() if ":" in l)
        def attempt(fn):
            try:
                fn(); return "ok"
            except OSError as e:
                return e.errno
        print(json.dumps({
            "fds": fds,
            "pid1": {k: status[k].strip() for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb",
                                                   "NoNewPrivs", "Seccomp")},
            "pid1_fds": attempt(lambda: os.listdir("/proc/1/fd")),
            "pid1_environ": attempt(lambda: open("/proc/1/environ", "rb").read()),
            "pid1_maps": attempt(lambda: open("/proc/1/maps").read()),
            "template_dir": os.path.exists("/tmp/.pyjail-template"),
            "ns_fd": attempt(lambda: os.close(os.open("/proc/1/ns/pid", os.O_RDONLY))),
        }))
    """))
    extra = {fd: target for fd, target in got["fds"].items() if fd not in ("0", "1", "2")}
    # Only the descriptor listdir itself opened on /proc/self/fd.
    assert len(extra) <= 1 and all(t.endswith("/fd") for t in extra.values()), got["fds"]
    assert got["pid1"] == {"CapInh": "0000000000000000", "CapPrm": "0000000000000000",
                           "CapEff": "0000000000000000", "CapBnd": "0000000000000000",
                           "CapAmb": "0000000000000000", "NoNewPrivs": "1", "Seccomp": "2"}, got["pid1"]
    for key in ("pid1_fds", "pid1_environ", "pid1_maps", "ns_fd"):
        assert got[key] != "ok", (key, got)
    assert got["template_dir"] is False


def set_without_close_range(world_tmp) -> str:
    """The shipped seccomp set, but for close_range (refused, as a set of one's own may)."""
    import re
    shipped = Path(__file__).resolve().parents[2] / "profiles" / "seccomp"
    groups = (shipped / "groups.toml").read_text()
    io = re.search(r"^io = \[(.*?)\]", groups, re.S | re.M).group(1)
    names = [n.strip().strip('"') for n in io.replace("\n", " ").split(",") if n.strip()]
    assert "close_range" in names
    text = (shipped / "python.toml").read_text()
    assert '"@io", ' in text
    text = text.replace('"@io", ', "".join(f'"{n}", ' for n in names if n != "close_range"), 1)
    return str(world_tmp.file("no-close-range.toml", text))


def test_a_program_under_a_set_without_close_range_holds_none_of_pid1s_descriptors(run_jail, as_user, serve,
                                                                                    world_tmp):
    # Attack: a run's program is forked by its pid 1 and closes pid 1's descriptors (3-6: the
    # report socket to the client, the program's release, the reaper's binary) with
    # close_range, under the run's filter. A seccomp set that refuses close_range left all
    # four open: the program could write the run's report (its status, its usage) itself. Each
    # is closed by itself then.
    sock, _ = serve(as_user)
    seccomp = set_without_close_range(world_tmp)
    got = result(via(run_jail, as_user, sock, """
        import ctypes, json, os
        held = []
        for fd in (3, 4, 5, 6):
            try:
                os.fstat(fd); held.append(fd)
            except OSError:
                pass
        libc = ctypes.CDLL(None, use_errno=True)
        refused = libc.syscall(436, 100, 101, 0) != 0 and ctypes.get_errno()
        print(json.dumps({"held": held, "close_range_refused": refused}))
    """, opts=("--seccomp", seccomp)))
    assert got["close_range_refused"], got   # the set took effect
    assert got["held"] == [], got


def test_nothing_a_run_writes_anywhere_reaches_a_later_run(run_jail, as_user, serve):
    # Attack: a run plants a file wherever it can write (outside its own /tmp and /work too:
    # /dev/shm, /dev/mqueue, /run, /var/tmp, the rootfs...) for the template or a later run
    # to read.
    sock, _ = serve(as_user)
    planted = result(via(run_jail, as_user, sock, """
        import json, os
        planted = []
        for top in ("/",):
            for d, subdirs, _ in os.walk(top):
                if d.startswith(("/proc", "/sys")):
                    subdirs[:] = []
                    continue
                path = os.path.join(d, ".pjplanted")
                try:
                    with open(path, "w") as f:
                        f.write("x")
                    planted.append(path)
                except OSError:
                    pass
        print(json.dumps(planted))
    """))
    assert "/tmp/.pjplanted" in planted, planted  # the scan writes where a run may
    later = result(via(run_jail, as_user, sock, """
        import json, os, sys
        print(json.dumps([p for p in json.loads(sys.argv[1]) if os.path.exists(p)]))
    """, json.dumps(planted)))
    assert later == [], later


def test_concurrent_runs_share_no_socket_terminal_or_ipc(run_jail, as_user, serve):
    # Attack: two runs in flight at once meet through an abstract unix socket (a network
    # namespace's), a pseudo-terminal (/dev/pts), a POSIX message queue or shared memory
    # (/dev/mqueue, /dev/shm) or System V IPC (an IPC namespace's).
    sock, _ = serve(as_user)
    listener = """
        import ctypes, json, os, socket, sys, time
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(b"\\0pjattack-meet")
        s.listen(1)
        out = {}
        try:
            m, sl = os.openpty()
            out["pty"] = os.ttyname(sl)
        except OSError as e:
            out["pty"] = e.errno
        open("/dev/shm/pjattack-meet", "w").write("x")
        libc = ctypes.CDLL(None, use_errno=True)
        out["shm"] = libc.shmget(0x706a6174, 4096, 0o1666)  # IPC_CREAT, key "pjat"
        time.sleep(4)
        print(json.dumps(out))
    """
    prober = """
        import ctypes, json, os, socket
        out = {}
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            c.connect(b"\\0pjattack-meet"); out["abstract"] = "connected"
        except OSError as e:
            out["abstract"] = e.errno
        out["pts"] = sorted(os.listdir("/dev/pts"))
        out["shm_file"] = os.path.exists("/dev/shm/pjattack-meet")
        out["mqueue"] = sorted(os.listdir("/dev/mqueue")) if os.path.isdir("/dev/mqueue") else None
        libc = ctypes.CDLL(None, use_errno=True)
        out["shm"] = libc.shmget(0x706a6174, 4096, 0)
        print(json.dumps(out))
    """
    results = {}
    t = threading.Thread(target=lambda: results.update(a=via(run_jail, as_user, sock, listener)))
    t.start()
    time.sleep(1.5)  # the listener is up (a late prober only weakens the test, never fails it)
    probe = result(via(run_jail, as_user, sock, prober))
    t.join()
    first = result(results["a"])
    assert probe["abstract"] != "connected" and not probe["shm_file"] and probe["shm"] == -1, (probe, first)
    assert probe["pts"] in ([], ["ptmx"]), (probe, first)
    assert not probe["mqueue"], (probe, first)


def test_a_run_cannot_signal_the_template_or_a_concurrent_run(run_jail, as_user, serve, token):
    # Attack: a run signals every process it can name (kill -1, and every pid up to 4 million
    # in a guessing loop would be the same) while another run is in flight; the other run and
    # the template must not notice.
    sock, _ = serve(as_user)
    results = {}
    t = threading.Thread(target=lambda: results.update(r=via(
        run_jail, as_user, sock, "import time; time.sleep(3); print('alive')", token)))
    t.start()
    time.sleep(1)
    killer = via(run_jail, as_user, sock, """
        import json, os, signal
        hit = []
        for pid in list(range(1, 4096)) + [-1]:
            try:
                os.kill(pid, signal.SIGKILL if pid != os.getpid() else 0)
                hit.append(pid)
            except OSError:
                pass
        print(json.dumps(hit))
    """)
    t.join()
    assert results["r"].returncode == 0 and results["r"].stdout == "alive\n", describe(results["r"])
    after = via(run_jail, as_user, sock, "print('after')")
    assert after.returncode == 0 and after.stdout == "after\n" and "started again" not in after.stderr, describe(after)
    # The run sees no pid but its own two (and -1 finds nothing else to kill).
    assert set(result(killer)) <= {1, 2}, describe(killer)


def test_mountinfo_reveals_no_more_than_a_fresh_jails(run_jail, as_user, serve):
    # Attack: /proc/self/mountinfo names each mount's source; a run from a template must not
    # learn host paths a fresh jail would not show (the template's directory, the server's).
    sock, _ = serve(as_user)
    code = "print(open('/proc/self/mountinfo').read())"
    forked = result_text(via(run_jail, as_user, sock, code))
    fresh = run_jail(["--quiet", "--", "python", "-c", code], user=as_user)
    assert fresh.returncode == 0, describe(fresh)
    roots = lambda text: {line.split()[3] for line in text.splitlines() if line.strip()}
    rootfs = [line.split()[3] for line in fresh.stdout.splitlines() if line.split()[4:5] == ["/"]]
    assert len(rootfs) == 1, fresh.stdout
    # The template's directory (covered by the run's /tmp) is the one host path a fresh jail
    # does not name: it sits beside the rootfs, whose path a fresh jail shows too.
    extra = roots(forked) - roots(fresh.stdout)
    assert all(os.path.dirname(r) == os.path.dirname(rootfs[0]) for r in extra), (extra, rootfs)


def result_text(r):
    assert r.returncode == 0, describe(r)
    return r.stdout


# --------------------------------------------------------------------------------------------
# Against the server, from the host


def raw_connect(sock: str) -> socket.socket:
    c = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    c.settimeout(10)
    c.connect(sock)
    hello = c.recv(4096)
    assert len(hello) == HELLO_SIZE and struct.unpack_from("<I", hello)[0] == SERVE_VERSION, hello[:8]
    return c


def reply_of(c: socket.socket) -> tuple[int, str]:
    data = c.recv(4096)
    kind, pid, restarted = struct.unpack_from("<iiI", data)
    return kind, data[12:].split(b"\0", 1)[0].decode(errors="replace")



def test_malformed_clients_leave_the_server_serving(run_jail, as_user, serve):
    # Attack: a local client of the server's user (or root) sends what no pyjail sends:
    # garbage, a request larger than the limit, too many descriptors, a request cut short,
    # nothing at all (and stays), or leaves at once. Each is refused or forgotten; the server
    # holds no descriptor of a client that left, and serves the next run.
    sock, p = serve(as_user)
    time.sleep(0.2)
    baseline = server_fds(p)
    devnull = os.open("/dev/null", os.O_RDONLY)
    try:
        for payload, fds in [(b"garbage", []), (b"\0" * (200 * 1024), []), (b"PJRQ", []),
                             (b"x" * 100, [devnull] * 12)]:
            c = raw_connect(sock)
            try:
                c.sendmsg([payload], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack(f"{len(fds)}i", *fds))]
                          if fds else [])
            except OSError:
                pass  # larger than the socket takes: refused by the kernel already
            else:
                kind, text = reply_of(c)
                assert kind == REFUSED and text, (payload[:10], kind, text)
            c.close()
        silent = raw_connect(sock)          # connects and never sends
        for _ in range(20):                 # connects and leaves at once
            raw_connect(sock).close()
        r = via(run_jail, as_user, sock, "print('served')")
        assert r.returncode == 0 and r.stdout == "served\n", describe(r)
        silent.close()
    finally:
        os.close(devnull)
    deadline = time.monotonic() + 5
    while server_fds(p) > baseline and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server_fds(p) <= baseline, os.listdir(f"/proc/{p.pid}/fd")
    assert p.poll() is None


def test_a_client_cannot_have_its_run_write_to_a_cgroup_of_its_choosing(run_jail, as_user, serve, world_tmp,
                                                                         jail_rootfs):
    # Attack: the request's flag that puts a run in its cgroup is the server's to set, with a
    # cgroup.procs the server opened. A client that set it itself (on a server without
    # cgroups) had the run's pid 1 write "0" to a descriptor of the client's choosing.
    sock, p = serve(as_user)
    request = capture_request(run_jail, as_user, jail_rootfs, world_tmp, "pass")[0]
    rootfs = os.path.realpath(jail_rootfs).encode()
    at = request.index(struct.pack("<I", len(rootfs)) + rootfs) + 4 + len(rootfs)
    assert struct.unpack_from("<I", request, at)[0] == 0  # no script, no cgroup
    forged = request[:at] + struct.pack("<I", 2) + request[at + 4:]
    report_ours, report_theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    target_r, target_w = os.pipe()
    null = os.open("/dev/null", os.O_RDWR)
    try:
        c = raw_connect(sock)
        c.sendmsg([forged], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                              struct.pack("5i", report_theirs.fileno(), null, null, null, target_w))])
        kind, text = reply_of(c)
        c.close()
        assert (kind, text) == (REFUSED, "the request names a cgroup of its own: only the server makes one")
        os.close(target_w)
        target_w = -1
        assert os.read(target_r, 16) == b""  # nothing was written to the client's descriptor
        r = via(run_jail, as_user, sock, "print('served')")
        assert r.returncode == 0 and r.stdout == "served\n", describe(r)
    finally:
        for fd in (null, target_r, target_w):
            if fd >= 0:
                os.close(fd)
        report_ours.close()
        report_theirs.close()


def descendants(pid: int) -> set[int]:
    """The host processes below `pid` (its children, theirs, ...)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = open(f"/proc/{entry}/stat").read()
            except OSError:
                continue
            children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def test_a_client_that_leaves_takes_its_run_with_it(pyjail_command, as_user, serve):
    # Attack: a client starts a run and goes (killed, or on purpose), so that nobody enforces
    # the run's limits (its wall time, its output): the server must end the run.
    sock, p = serve(as_user)
    template = descendants(p.pid)
    client = subprocess.Popen([*pyjail_command(as_user), "--quiet", "--via", sock, "--", "python", "-c",
                               "import time; print('started', flush=True); time.sleep(60)"],
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              cwd="/")
    try:
        assert client.stdout.readline() == b"started\n"
        run = descendants(p.pid) - template
        assert len(run) == 2, run  # the run's pid 1 and its program, below the template
        client.kill()
        client.wait()
        deadline = time.monotonic() + 5
        while descendants(p.pid) & run and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not descendants(p.pid) & run, "the run outlived its client"
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()
        client.stdout.close()


def test_another_user_cannot_connect_or_start_runs(serve, as_user, pyjail_command):
    # Attack: a second local user connects to someone's server to start runs in their
    # template (with their rights, their cgroup) or to learn about it.
    sock, _ = serve(as_user)
    other = 65533 if as_user.invoker_uid != 65533 else 65532
    probe = textwrap.dedent("""
        import socket, sys
        c = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        c.settimeout(5)
        try:
            c.connect(sys.argv[1])
            print("hello" if c.recv(4096) else "closed")
        except OSError as e:
            print("refused", e.errno)
    """)
    r = subprocess.run([*as_uid(other), sys.executable, "-c", probe, sock], capture_output=True, text=True, cwd="/")
    assert r.stdout.startswith("refused"), (r.stdout, r.stderr)


def test_a_planted_link_at_the_socket_path_is_not_followed(serve, as_user, pyjail_command, world_tmp):
    # Attack: another user plants a symlink (or a file) where the server will listen, so that
    # the server removes or replaces the link's target.
    d = world_tmp.dir(0o777)
    victim = world_tmp.file("victim", "keep me")
    os.chmod(victim, 0o666)
    link = d / "t.sock"
    os.symlink(victim, link)
    p = subprocess.run([*pyjail_command(as_user), "serve", "--quiet", "--socket", str(link)],
                       stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60, cwd="/")
    assert p.returncode == 125 and "is not a socket" in p.stderr, (p.returncode, p.stderr)
    assert os.path.islink(link) and open(victim).read() == "keep me"


# A server that is not pyjail's, run by another local user at the path the victim uses: it
# answers as pyjail serve would, then reports what the victim's client sent it.
IMPOSTOR = """
import json, os, socket, struct, sys
path, rootfs, out = sys.argv[1], sys.argv[2].encode(), sys.argv[3]
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.bind(path)
os.chmod(path, 0o777)
s.listen(1)
print("listening", flush=True)
s.settimeout(30)
c, _ = s.accept()
c.send(struct.pack("<II1024s512s256s", 2, 0, rootfs, b"", b""))
c.settimeout(10)
got = {"bytes": 0, "fds": []}
try:
    data, anc, _, _ = c.recvmsg(1 << 20, socket.CMSG_SPACE(64 * 4))
    got["bytes"] = len(data)
    for level, kind, payload in anc:
        for fd in struct.unpack(f"{len(payload) // 4}i", payload[:len(payload) // 4 * 4]):
            try:
                got["fds"].append(os.readlink(f"/proc/self/fd/{fd}"))
            except OSError:
                got["fds"].append("?")
except OSError as e:
    got["error"] = e.errno
json.dump(got, open(out, "w"))
"""


def test_the_client_gives_nothing_to_a_server_of_another_user(run_jail, as_user, world_tmp, jail_rootfs):
    # Attack: another local user listens at the socket path the victim's `pyjail --via` uses
    # (a shared directory, or after the victim's server stopped). The client would hand it its
    # stdin, stdout and stderr, its script and its report socket, and then trust the pidfd it
    # sends back (a root client would kill whatever process that is, at the deadline).
    attacker = 65533 if as_user.invoker_uid != 65533 else 65532
    d = world_tmp.dir(0o777)
    sock, out = str(d / "t.sock"), str(d / "got.json")
    fake = subprocess.Popen([*as_uid(attacker), sys.executable, "-c", IMPOSTOR, sock,
                             os.path.realpath(jail_rootfs), out],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd="/")
    try:
        assert fake.stdout.readline() == b"listening\n", fake.stderr.read()
        r = run_jail(["--quiet", "--via", sock, "--", "python", "-c", "pass"], user=as_user, timeout=60)
        fake.wait(30)
        got = json.load(open(out)) if os.path.exists(out) else {}
        assert r.returncode == 125 and f"uid {attacker}" in r.stderr, (got, describe(r))
        assert not got.get("fds") and not got.get("bytes"), f"another user's server got {got}"
    finally:
        if fake.poll() is None:
            fake.kill()
            fake.wait()
        fake.stdout.close()
        fake.stderr.close()


def test_a_burst_of_runs_cannot_wedge_the_server_and_its_template(run_jail, as_user, serve, world_tmp,
                                                                 jail_rootfs):
    # Attack: many clients at once (a busy pool, or one user on purpose). The server forwards
    # every request it reads to the template and reads the template's replies one per turn
    # of its loop, both over blocking sends: once the template's replies fill their socket
    # while the server still sends requests, each waits for the other, and every run of the
    # server (and every later one) hangs with no deadline to end it.
    sock, p = serve(as_user)
    # Large requests: the server's sends block often, so the requests that arrive meanwhile
    # are handled together in its next turn.
    request = capture_request(run_jail, as_user, jail_rootfs, world_tmp, "pass  # " + "x" * 100_000)[0]
    report_ours, report_theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    null = os.open("/dev/null", os.O_RDWR)
    conns = []
    try:
        for _ in range(300):
            conns.append(raw_connect(sock))
        fds = struct.pack("4i", report_theirs.fileno(), null, null, null)
        for c in conns:
            c.sendmsg([request], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
        started = 0
        # A wedge is for good; a loaded machine (the suite's other lanes, two emulated VMs) is
        # merely slow: 300 runs take about 2 s on an idle one.
        deadline = time.monotonic() + 300
        for c in conns:
            c.settimeout(max(1.0, deadline - time.monotonic()))
            try:
                kind, text = reply_of(c)
            except socket.timeout:
                break
            started += kind == 2
        assert started == len(conns), f"{started} of {len(conns)} runs started: the server is wedged"
    finally:
        for c in conns:
            c.close()
        os.close(null)
        report_ours.close()
        report_theirs.close()
    # The burst's runs are being ended (their clients left); until they are, the host user's
    # process count (RLIMIT_NPROC without cgroup v2) may refuse a new run's fork.
    deadline = time.monotonic() + 60
    while True:
        r = via(run_jail, as_user, sock, "print('served')")
        if r.returncode == 0 or time.monotonic() > deadline or "Resource temporarily unavailable" not in r.stderr:
            break
        time.sleep(0.5)
    assert r.returncode == 0 and r.stdout == "served\n", describe(r)


def test_a_client_that_sends_and_leaves_at_once_leaves_no_run(run_jail, as_user, serve, world_tmp, jail_rootfs):
    # Attack: clients that send a request and close the connection before the template has
    # answered (the server learns of the run only after its client is gone): each such run
    # must be ended, not left running unsupervised below the template.
    sock, p = serve(as_user)
    request = capture_request(run_jail, as_user, jail_rootfs, world_tmp, "import time; time.sleep(60)")[0]
    template = descendants(p.pid)
    report_ours, report_theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    null = os.open("/dev/null", os.O_RDWR)
    try:
        fds = struct.pack("4i", report_theirs.fileno(), null, null, null)
        for _ in range(10):
            c = raw_connect(sock)
            c.sendmsg([request], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
            c.close()
        r = via(run_jail, as_user, sock, "print('served')")  # after the ten, in order
        assert r.returncode == 0 and r.stdout == "served\n", describe(r)
        deadline = time.monotonic() + 5
        while descendants(p.pid) - template and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not descendants(p.pid) - template, "runs outlived their clients"
    finally:
        os.close(null)
        report_ours.close()
        report_theirs.close()


# --------------------------------------------------------------------------------------------
# The server's own settings bound its runs


def one_line_refusal(r, *parts):
    assert r.returncode == 125, describe(r)
    # (--seccomp off says so on a line of its own, before anything else.)
    lines = [line for line in without_notices(r.stderr).strip().splitlines()
             if not line.startswith("pyjail: WARNING: --seccomp off")]
    assert len(lines) == 1 and all(p in lines[0] for p in parts), describe(r)


ALLOCATE = "import sys; x = bytearray(int(sys.argv[1]) << 20); print('allocated', len(x) >> 20)"
SLEEP = "import sys, time; time.sleep(float(sys.argv[1])); print('slept')"


def test_a_server_holds_every_run_to_its_own_limits(run_jail, as_user, serve):
    # Attack: a server started with small limits (`pyjail serve --memory 64M --wall-time 3`:
    # what its operator lets runs have) whose clients ask for the profile's larger ones, or for
    # no filter, or for a network: the server's settings would bound nothing. It refuses them.
    sock, _ = serve(as_user, "--memory", "64M", "--wall-time", "3", "--pids", "32")
    for opts, what in [((), "this server's runs have"),  # strict's 512M, 300 s, 128 pids
                       (("--memory", "64M", "--pids", "32", "--wall-time", "10"), "--wall-time 10"),
                       # Sizes as the options take them, not bytes (RLIMIT_DATA or memory.max).
                       (("--memory", "8G", "--pids", "32", "--wall-time", "3"), "8G; this server's runs have "),
                       (("--memory", "8G", "--pids", "32", "--wall-time", "3"), " 64M: ask for less"),
                       (("--memory", "64M", "--pids", "32", "--wall-time", "3", "--seccomp", "off"), "--seccomp off"),
                       (("--memory", "64M", "--pids", "32", "--wall-time", "3", "--net", "loopback"),
                        "another network")]:
        one_line_refusal(via(run_jail, as_user, sock, "print('ran')", opts=opts), what, "ask for")
    # Within them, a run has them: under each limit it runs, over it it is stopped.
    within = ("--memory", "64M", "--pids", "32", "--wall-time", "3")
    r = via(run_jail, as_user, sock, ALLOCATE, "16", opts=within)
    assert (r.returncode, r.stdout) == (0, "allocated 16\n"), describe(r)
    r = via(run_jail, as_user, sock, ALLOCATE, "300", opts=within)
    assert r.returncode != 0 and "allocated" not in r.stdout, describe(r)
    r = via(run_jail, as_user, sock, SLEEP, "0.1", opts=within)
    assert (r.returncode, r.stdout) == (0, "slept\n"), describe(r)
    r = via(run_jail, as_user, sock, SLEEP, "5", opts=within, timeout=60)
    assert r.returncode == 124 and r.stdout == "", describe(r)
    # Smaller settings than the server's are a run's own.
    r = via(run_jail, as_user, sock, SLEEP, "2", opts=("--memory", "32M", "--pids", "16", "--wall-time", "1"))
    assert r.returncode == 124, describe(r)


POOL_PROGRAM = """
import json, pyjail
out = {}
with pyjail.Pool(options={"memory": "64M", "wall_time": 3, "pids": 32, "cpu_time": 5, "quiet": True}) as pool:
    def ran(code, *args, **kwargs):
        r = pool.run(code, args=list(args), **kwargs)
        return [r.exit_code, r.stdout]
    out["small"] = ran(%(allocate)r, "16")
    out["large"] = ran(%(allocate)r, "300")
    out["short"] = ran(%(sleep)r, "0.1")
    out["long"] = ran(%(sleep)r, "5")
    try:
        out["more"] = ran("print('ran')", memory="1G")
    except pyjail.JailError as e:
        out["more"] = str(e)
    with pool.session() as s:
        out["session"] = s.run("6 * 7").value
r = pyjail.run("print('quiet')", options={"quiet": True, "cpu_time": 5})
out["quiet"] = [r.exit_code, r.stdout]
print(json.dumps(out))
"""


def test_a_pools_options_bound_its_runs(as_user, pyjail_bin):
    # Attack: Pool(options=...) set the templates' limits only; its runs had the profile's
    # (512M, 300 s), so a run allocated 300 MiB and slept 5 s under "memory 64M, wall-time
    # 3". The Pool's options are its runs' settings and their bound.
    from pyjail_testing import REPO
    env = dict(os.environ, PYTHONPATH=str(REPO / "python"), PYJAIL_BIN=str(pyjail_bin))
    code = POOL_PROGRAM % {"allocate": ALLOCATE, "sleep": SLEEP}
    r = subprocess.run([*as_user.prefix, sys.executable, "-c", code], env=env, cwd="/", capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, describe(r)
    out = json.loads(r.stdout.splitlines()[-1])
    assert out["small"] == [0, "allocated 16\n"], out
    assert out["large"][0] != 0 and "allocated" not in out["large"][1], out
    assert out["short"] == [0, "slept\n"], out
    assert out["long"] == [124, ""], out
    assert "this server's runs have" in out["more"], out
    assert out["session"] == "42", out
    assert out["quiet"] == [0, "quiet\n"], out


# --------------------------------------------------------------------------------------------
# Many clients


def test_more_clients_than_the_server_holds_are_refused_and_runs_survive(pyjail_command, run_jail, as_user,
                                                                          serve):
    # Attack: many connections at once. The server polled every client's descriptors with
    # poll(), which fails (EINVAL) beyond the open-file limit: at about 510 clients it exited,
    # and every run in flight died with it. It holds a bounded number of clients, refuses the
    # others with a reason, and keeps serving.
    # The server starts with the usual soft open-file limit (1024), as from a login shell.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(1024, hard), hard))
    try:
        sock, p = serve(as_user)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    inflight = subprocess.Popen([*pyjail_command(as_user), "--quiet", "--via", sock, "--", "python", "-c",
                                 "import time; print('started', flush=True); time.sleep(4); print('survived')"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd="/")
    conns, hellos = [], []
    try:
        assert inflight.stdout.readline() == "started\n", inflight.stderr.read()
        for i in range(600):
            c = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            conns.append(c)
            c.settimeout(30)
            try:
                c.connect(sock)
                hellos.append(c.recv(4096))
            except OSError:
                hellos.append(b"")
            if p.poll() is not None or not hellos[-1]:
                time.sleep(0.5)
                pytest.fail(f"the server ended at client {i + 1}: {p.stderr.read().decode().strip()}")
        assert all(len(h) == HELLO_SIZE for h in hellos), hellos[0][:8]
        refusals = [r for r in (struct.unpack(HELLO, h)[4].split(b"\0", 1)[0].decode() for h in hellos) if r]
        assert refusals and len(refusals) < 600, len(refusals)
        assert all(r.startswith("the server holds ") and "its most" in r for r in refusals), refusals[0]
        # While they stay, a client is told why it cannot run.
        one_line_refusal(via(run_jail, as_user, sock, "print('ran')"), "takes no run now: the server holds")
        assert p.poll() is None, p.stderr.read().decode()
    finally:
        for c in conns:
            c.close()
    out, err = inflight.communicate(timeout=60)
    assert (inflight.returncode, out) == (0, "survived\n"), err
    r = via(run_jail, as_user, sock, "print('served')")
    assert (r.returncode, r.stdout) == (0, "served\n"), describe(r)


# --------------------------------------------------------------------------------------------
# What the server's runs share


def test_a_server_refuses_a_writable_bind_its_runs_would_share(run_jail, as_user, serve, world_tmp):
    # Attack: `pyjail serve --bind DIR` binds DIR into the template, and every run (a fork of
    # it, with only /tmp, /work, /proc, /dev/shm and /dev/pts of its own) has it writable: runs
    # of other clients, at once or later, read and change what one run left there.
    shared = world_tmp.dir(0o777)
    (shared / "note").write_text("from the host\n")
    os.chmod(shared / "note", 0o644)
    sock, p = serve(as_user, "--bind", f"{shared}:/shared", ready=False)
    try:
        p.wait(60)
    except subprocess.TimeoutExpired:
        pytest.fail("pyjail serve started with a writable bind")
    err = p.stderr.read().decode()
    assert p.returncode == 125 and len(err.strip().splitlines()) == 1, err
    assert "--bind" in err and "writable bind" in err and "--ro-bind" in err, err
    assert not os.path.exists(sock)
    # Read-only, it is the template's and every run's to read, and none can write it.
    sock, _ = serve(as_user, "--ro-bind", f"{shared}:/shared")
    r = via(run_jail, as_user, sock, """
        import json
        text = open("/shared/note").read()
        try:
            open("/shared/note", "a").write("from a run")
            wrote = True
        except OSError:
            wrote = False
        print(json.dumps([text, wrote]))
    """)
    assert result(r) == ["from the host\n", False]


def test_a_run_whose_client_stops_is_ended_after_the_servers_wall_time(pyjail_command, as_user, serve):
    # Attack: the client enforces the run's wall time; a client that stops (SIGSTOP, a
    # debugger) keeps its connection open, and its run would go on for ever, beyond the
    # server's --wall-time. The server ends it a little (10 s) after its wall time.
    sock, p = serve(as_user, "--wall-time", "2")
    template = descendants(p.pid)
    client = subprocess.Popen([*pyjail_command(as_user), "--quiet", "--wall-time", "2", "--via", sock, "--",
                               "python", "-c", "import time; print('started', flush=True); time.sleep(120)"],
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd="/")
    try:
        assert client.stdout.readline() == b"started\n"
        run = descendants(p.pid) - template
        assert len(run) == 2, run
        client.send_signal(signal.SIGSTOP)
        deadline = time.monotonic() + 40
        while descendants(p.pid) & run and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not descendants(p.pid) & run, "the run outlived the server's wall time"
        assert p.poll() is None
    finally:
        client.kill()
        client.wait()
        client.stdout.close()


# The template makes each run's network namespace while it waits for the request (a new one
# takes the kernel most of a millisecond): one for each run, handed to that run alone. Attack: a
# run that leaves a listening abstract socket in its namespace, for the next run to find, or
# that finds the template's own namespace or the one the template holds for the next run.
def test_each_run_has_a_network_namespace_made_for_it_alone(run_jail, as_user, serve):
    sock, p = serve(as_user, "--net", "loopback")
    interpreters = [pid for pid in descendants(p.pid)
                    if open(f"/proc/{pid}/comm").read().strip().startswith("python")]
    assert len(interpreters) == 1, interpreters
    template = interpreters[0]
    code = """
        import json, os, socket, sys, time
        out = {"net": os.readlink("/proc/self/ns/net")}
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            c.connect(b"\\0pjattack-left"); out["found"] = True
        except OSError as e:
            out["found"] = e.errno
        left = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        left.bind(b"\\0pjattack-left"); left.listen(1)
        out["fds"] = []
        for fd in os.listdir("/proc/self/fd"):
            try:
                out["fds"].append(os.readlink("/proc/self/fd/" + fd))
            except OSError:
                pass        # listdir's own descriptor, closed since
        time.sleep(float(sys.argv[1]))
        print(json.dumps(out))
    """
    # One after another: what a run leaves in its namespace, the next does not find.
    for _ in range(3):
        r = result(via(run_jail, as_user, sock, code, "0", opts=["--net", "loopback"]))
        assert r["found"] != True, r  # noqa: E712 (an errno otherwise)
        assert not [link for link in r["fds"] if link.startswith("net:")], r
    # At once (a namespace's number is reused once it is freed, so they are compared while all
    # are alive): three runs, the template's own and the one it holds for the next run are
    # five different namespaces.
    runs = []
    threads = [threading.Thread(target=lambda: runs.append(result(via(
        run_jail, as_user, sock, code, "4", opts=["--net", "loopback"])))) for _ in range(3)]
    for t in threads:
        t.start()
    time.sleep(2)       # all three are in their sleep
    own = os.readlink(f"/proc/{template}/ns/net")
    held = set()
    for fd in os.listdir(f"/proc/{template}/fd"):
        try:
            held.add(os.readlink(f"/proc/{template}/fd/{fd}"))
        except OSError:
            pass
    held = {link for link in held if link.startswith("net:")}
    for t in threads:
        t.join()
    nets = [r["net"] for r in runs]
    spare = held - {own}
    assert len(spare) == 1, (own, held, nets)
    assert len(set(nets) | {own} | spare) == 5, (own, spare, nets)


# --------------------------------------------------------------------------------------------
# From the template's own code


def rootfs_with_module(world_tmp, jail_rootfs, name: str, code: str):
    """A copy of the rootfs with the module `name` in its site-packages (wherever its site looks)."""
    rootfs = world_tmp.dir() / "rootfs"
    shutil.copytree(jail_rootfs, rootfs, symlinks=True)
    for d in ("usr/lib/python3/dist-packages", "usr/lib/python3.11/dist-packages",
              "usr/local/lib/python3.11/dist-packages"):
        (rootfs / d).mkdir(parents=True, exist_ok=True)
        (rootfs / d / f"{name}.py").write_text(textwrap.dedent(code))
    return rootfs


# A preload that never returns: it plays the template's side of the server's socket (fd 0)
# itself. For each request it answers "started" with a pidfd of a process outside its jail:
# the peer of the client's stdin if that is a socket, else the server (its socket's maker), as
# SO_PEERPIDFD gives them to any holder of a socket.
FORGING_TEMPLATE = """
import os, socket, struct
REPLY = "<IiI400si32s256s"
SO_PEERPIDFD = 77
ctl = socket.socket(fileno=os.dup(0))
def reply(kind, fd=-1):
    anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("i", fd))] if fd >= 0 else []
    ctl.sendmsg([struct.pack(REPLY, kind, 1, 0, b"", 0, b"", b"")], anc)
def peer_pidfd(fd):
    s = socket.socket(fileno=os.dup(fd))
    try:
        return s.getsockopt(socket.SOL_SOCKET, SO_PEERPIDFD)
    finally:
        s.close()
reply(1)
while True:
    data, anc, _, _ = ctl.recvmsg(1 << 20, socket.CMSG_SPACE(16 * 4))
    if not data:
        os._exit(0)
    fds = [fd for _, _, payload in anc for fd in struct.unpack(f"{len(payload) // 4}i", payload)]
    try:
        victim = peer_pidfd(fds[1])
    except OSError:
        victim = peer_pidfd(0)
    reply(2, victim)
    for fd in fds + [victim]:
        os.close(fd)
"""

# Holds a listening socket: the peer of every connection to it (SO_PEERCRED, SO_PEERPIDFD).
VICTIM = """
import socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(sys.argv[1])
s.listen(1)
print("listening", flush=True)
c, _ = s.accept()
time.sleep(120)
"""


def test_a_template_cannot_make_the_server_or_a_client_kill_a_process_outside_it(as_user, serve, pyjail_command,
                                                                                 world_tmp, jail_rootfs):
    # Attack: a preload of the rootfs owns the template's end of the server's socket, and answers
    # a request with a pidfd of a host process (one it cannot signal from its pid namespace): the
    # server and the client would take it for the run's pid 1, and kill it when the client
    # leaves, the run is overdue or the server stops. The server believes only a pidfd of a
    # process in the template's jail.
    rootfs = rootfs_with_module(world_tmp, jail_rootfs, "pjforge", FORGING_TEMPLATE)
    sock, server = serve(as_user, "--rootfs", str(rootfs), "--preload", "pjforge")
    path = str(world_tmp.dir(0o777) / "victim.sock")
    victim = subprocess.Popen([*as_user.prefix, sys.executable, "-c", VICTIM, path], stdout=subprocess.PIPE,
                              stdin=subprocess.DEVNULL, cwd="/")
    try:
        assert victim.stdout.readline() == b"listening\n"
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(path)
        client = [*pyjail_command(as_user), "--quiet", "--rootfs", str(rootfs), "--wall-time", "3", "--via", sock,
                  "--", "python", "-c", "pass"]
        # The first run's stdin is a socket to the victim; the second's is not (the server's own).
        runs = [subprocess.run(client, stdin=stdin, capture_output=True, text=True, timeout=60, cwd="/")
                for stdin in (conn.fileno(), subprocess.DEVNULL)]
        conn.close()
        time.sleep(1)
        assert victim.poll() is None, "a process outside the template was killed"
        assert server.poll() is None, "the server was killed"
        for r in runs:
            assert r.returncode == 125 and "outside its jail" in r.stderr, describe(r)
    finally:
        victim.kill()
        victim.wait()
        victim.stdout.close()


# A preload that says "ready", then neither reads a request nor ends.
DEAF_TEMPLATE = """
import os, socket, struct, time
ctl = socket.socket(fileno=os.dup(0))
ctl.send(struct.pack("<IiI400si32s256s", 1, 0, 0, b"", 0, b"", b""))
while True:
    time.sleep(60)
"""


def test_a_template_that_never_ends_goes_with_its_server_killed(root_user, serve, world_tmp, jail_rootfs):
    # Attack: a template that ignores its socket's end (a preload that never returns) outlives
    # its server once that is killed: a jail nobody answers for, with a host id of root's.
    # The template's supervisor dies with the server (its parent-death signal), then its jail
    # with it. Root only: root's supervisor changes its file-system ids, which clears that
    # signal unless it is set again.
    rootfs = rootfs_with_module(world_tmp, jail_rootfs, "pjdeaf", DEAF_TEMPLATE)
    sock, server = serve(root_user, "--rootfs", str(rootfs), "--preload", "pjdeaf")
    below = descendants(server.pid)
    assert below
    server.kill()
    server.wait()
    os.unlink(sock)  # left by a server killed
    deadline = time.monotonic() + 10
    while [p for p in below if os.path.exists(f"/proc/{p}")] and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [p for p in below if os.path.exists(f"/proc/{p}")]
    for p in left:  # not left for the next test: its supervisor's end takes the jail
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert not left, "the template outlived its server"


def test_a_template_that_never_answers_holds_its_client_no_longer_than_the_wall_time(as_user, serve,
                                                                                    pyjail_command, world_tmp,
                                                                                    jail_rootfs):
    # Attack (or a stalled template): the client waited for the template's answer for ever,
    # with the relayed signals blocked, so Ctrl-C did nothing either; and the request held the
    # client's descriptors (the caller's stdout) in the template's socket. The client waits no
    # longer than the run's wall time, and a signal ends it; the server ends a template that
    # leaves a request unanswered for longer than that (and 10 s), which lets the descriptors
    # go, and starts another.
    rootfs = rootfs_with_module(world_tmp, jail_rootfs, "pjdeaf", DEAF_TEMPLATE)
    sock, server = serve(as_user, "--rootfs", str(rootfs), "--preload", "pjdeaf")
    client = [*pyjail_command(as_user), "--quiet", "--rootfs", str(rootfs), "--via", sock]
    started = time.monotonic()
    r = subprocess.run([*client, "--wall-time", "2", "--", "python", "-c", "pass"], stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=60, cwd="/")
    assert r.returncode == 125, describe(r)
    assert r.stderr == (f"pyjail: via: the template at {sock} did not start the run within its wall time (2 s) "
                        "(the server's stderr says why; stop it and start it again)\n"), describe(r)
    assert time.monotonic() - started < 30
    p = subprocess.Popen([*client, "--wall-time", "3", "--", "python", "-c", "pass"], stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd="/")
    time.sleep(1.5)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=30)
    assert p.returncode == 130, (p.returncode, err)
    assert err == f"pyjail: via: SIGINT before the template at {sock} started the run: it was not run\n", err
    assert server.poll() is None
    raw_connect(sock).close()   # still serving


def test_a_template_that_reads_no_request_cannot_stop_the_server(as_user, serve, pyjail_command, world_tmp,
                                                                  jail_rootfs):
    # Attack: a template that never reads its socket, sent requests (the largest a client may
    # send) until the socket is full: a server that waited to send the next would take no
    # client and no signal any more (SIGTERM included), and end no overdue run. The server
    # keeps the request until the template's socket has room, and serves on.
    rootfs = rootfs_with_module(world_tmp, jail_rootfs, "pjdeaf", DEAF_TEMPLATE)
    sock, server = serve(as_user, "--rootfs", str(rootfs), "--preload", "pjdeaf")
    large = ["--env", "A=" + "a" * 70000, "--env", "B=" + "b" * 70000]
    clients = [subprocess.Popen([*pyjail_command(as_user), "--quiet", "--rootfs", str(rootfs), *large, "--via",
                                 sock, "--", "python", "-c", "pass"], stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd="/") for _ in range(3)]
    try:
        time.sleep(3)               # all three sent; the template's socket is full
        raw_connect(sock).close()   # the server's hello, within 10 s
        server.send_signal(signal.SIGTERM)
        assert server.wait(15) is not None
    finally:
        for p in clients:
            p.kill()
            p.wait()
