"""Host binds of runs from a template (`pyjail serve --allow-binds`, `pyjail --via` with
--bind, --ro-bind, --workdir or a profile's binds): the batch profile's current directory
works through a template, and every way of making a run's binds show more than its client
may see fails: a source the client cannot read, the host's / or /proc, a source swapped for
a symlink, more descriptors than a request may carry, another run's binds. Each test runs as
root and as an unprivileged user."""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import textwrap
import threading
import time

from pyjail_testing.runs import UNPRIVILEGED_ID, describe
from pyjail_testing.template_wire import HELLO_SIZE, REFUSED, capture_request

# The host user every run here writes as: root's jails are --host-user nobody, and the
# unprivileged user of these tests is that id too.
FILES_OWNER = UNPRIVILEGED_ID


def via(run_jail, user, sock, code, *args, opts=(), **kwargs):
    return run_jail(["--quiet", *opts, "--via", sock, "--", "python", "-c", textwrap.dedent(code), *args],
                    user=user, **kwargs)


def result(r):
    assert r.returncode == 0, describe(r)
    return json.loads(r.stdout.strip().splitlines()[-1])


def one_line_refusal(r, *parts):
    assert r.returncode == 125, describe(r)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, describe(r)
    for part in parts:
        assert part in lines[0], describe(r)
    return lines[0]


# A server whose runs may have what the batch and standard profiles ask for.
LOOSE = ("--wall-time", "0", "--cpu-time", "0", "--memory", "8G", "--pids", "4096", "--cpus", "8", "--fsize=",
         "--output-limit=", "--tmpfs-size", "2G")


def owned_dir(world_tmp, mode=0o755):
    d = world_tmp.dir(mode)
    os.chown(d, FILES_OWNER, FILES_OWNER)
    return d


def test_a_batch_run_through_a_template_reads_and_writes_its_directory(run_jail, as_user, serve, world_tmp):
    # The cron case: `pyjail --profile batch` in the job's directory, through a template.
    job = owned_dir(world_tmp)
    world_tmp.file("data.csv", "a,b\n1,2\n", dir=job, mode=0o666)  # only a read-only mount stops a write
    sock, _ = serve(as_user, "--allow-binds", *LOOSE)
    r = via(run_jail, as_user, sock, """
        import json, os
        rows = open("data.csv").read().splitlines()
        open("result.txt", "w").write(str(len(rows)))
        print(json.dumps([os.getcwd(), rows]))
    """, opts=("--profile", "batch"), cwd=job)
    assert result(r) == ["/work", ["a,b", "1,2"]]
    assert (job / "result.txt").read_text() == "2"
    assert (job / "result.txt").stat().st_uid == FILES_OWNER
    # Read-only where asked: the standard profile's /work, and --ro-bind.
    extra = world_tmp.dir()
    world_tmp.file("note", "from the host\n", dir=extra, mode=0o666)
    r = via(run_jail, as_user, sock, """
        import json
        out = []
        for path in ("/work/data.csv", "/tmp/extra/note"):
            text = open(path).read()
            try:
                open(path, "a").write("from a run")
                out.append([text, "written"])
            except OSError as e:
                out.append([text, e.strerror])
        print(json.dumps(out))
    """, opts=("--profile", "standard", "--ro-bind", f"{extra}:/tmp/extra"),
        cwd=job)
    assert result(r) == [["a,b\n1,2\n", "Read-only file system"], ["from the host\n", "Read-only file system"]]
    assert (extra / "note").read_text() == "from the host\n"


def test_a_run_s_mount_point_made_in_its_directory_is_gone_after_it(run_jail, as_user, serve, world_tmp):
    # A bind inside the batch profile's /work has its mount point made in the job's directory
    # by the run's pid 1 (in the template): the client removes it once the run is over, as a
    # fresh jail's supervisor does.
    job = owned_dir(world_tmp)
    src = world_tmp.dir()
    world_tmp.file("x.txt", "x\n", dir=src)
    sock, _ = serve(as_user, "--allow-binds", *LOOSE)
    r = via(run_jail, as_user, sock, """
        import json, os
        print(json.dumps([open("in/x.txt").read(), sorted(os.listdir("."))]))
    """, opts=("--profile", "batch", "--ro-bind", f"{src}:/work/in"), cwd=job)
    assert result(r) == ["x\n", ["in"]]
    assert os.listdir(job) == []


def test_a_server_takes_binds_only_when_started_with_allow_binds(run_jail, as_user, serve, world_tmp):
    data = world_tmp.dir()
    sock, _ = serve(as_user)
    r = via(run_jail, as_user, sock, "print('ran')", opts=("--ro-bind", f"{data}:/tmp/data"))
    one_line_refusal(r, "--allow-binds")
    # Nowhere but below /work and /tmp: the rest of a run's tree is the template's rootfs.
    sock, _ = serve(as_user, "--allow-binds")
    r = via(run_jail, as_user, sock, "print('ran')", opts=("--ro-bind", f"{data}:/data"))
    one_line_refusal(r, "only below /work and /tmp", "/data")


def test_a_run_binds_nothing_its_client_cannot_read(run_jail, as_user, serve, world_tmp):
    # Attack: the client names a path only root may reach; root's client opens it as the
    # jail's host user, a user's as itself: the run gets nothing the client's fresh jail would
    # not get.
    private = world_tmp.dir(0o700)  # root's
    (private / "sub").mkdir()
    world_tmp.file("secret", "root's secret\n", dir=private / "sub")
    open_dir = world_tmp.dir()
    world_tmp.file("secret", "root's secret\n", dir=open_dir, mode=0o600)
    sock, _ = serve(as_user, "--allow-binds")
    r = via(run_jail, as_user, sock, "print('ran')", opts=("--ro-bind", f"{private}/sub:/tmp/sub"))
    line = one_line_refusal(r, f"{private}/sub", "Permission denied")
    assert "cannot reach" in line or "cannot open" in line, line
    # Reachable, but not readable: the run opens it with the run's own rights, and fails.
    r = via(run_jail, as_user, sock, """
        import json
        try:
            print(json.dumps(open("/tmp/open/secret").read()))
        except OSError as e:
            print(json.dumps(e.strerror))
    """, opts=("--ro-bind", f"{open_dir}:/tmp/open"))
    assert result(r) == "Permission denied"


def test_a_run_binds_neither_the_hosts_root_nor_its_proc(run_jail, as_user, serve, world_tmp):
    # Attack: the host's / (every file), its /proc (every process, the client's own
    # environment), its /sys.
    sock, _ = serve(as_user, "--allow-binds")
    r = via(run_jail, as_user, sock, "print('ran')", opts=("--ro-bind", "/:/tmp/host"))
    one_line_refusal(r, "the whole host file system")
    for source, kind in (("/proc", "procfs"), ("/proc/self", "procfs"), ("/sys", "sysfs")):
        r = via(run_jail, as_user, sock, "print('ran')", opts=("--ro-bind", f"{source}:/tmp/k"))
        one_line_refusal(r, kind, "binds none of it")
    # Named on the command line with --allow-sensitive-bind, / is what a fresh jail would
    # show too; /proc stays refused.
    r = via(run_jail, as_user, sock, "print('ran')", opts=("--allow-sensitive-bind", "--ro-bind", "/proc:/tmp/k"))
    one_line_refusal(r, "procfs")


def test_a_source_swapped_for_a_symlink_is_judged_by_what_was_opened(run_jail, as_user, serve, world_tmp):
    # Attack: the source is a plain directory when the client checks it and a symlink to the
    # host's / when it is opened. Whatever the timing, no run sees the host's root: each is
    # refused (at the plan, or by the check of what was opened) or sees the directory.
    base = world_tmp.dir(0o755)
    real = base / "real"
    real.mkdir()
    world_tmp.file("marker", "plain\n", dir=real)
    link_tmp = base / "link.tmp"
    src = base / "src"
    os.symlink(real, src)  # a symlink to a plain directory: allowed
    stop = threading.Event()

    def swap():
        n = 0
        while not stop.is_set():
            target = "/" if n % 2 else str(real)
            try:
                os.unlink(link_tmp)
            except FileNotFoundError:
                pass
            os.symlink(target, link_tmp)
            os.rename(link_tmp, src)
            n += 1
            time.sleep(0.0005)

    sock, _ = serve(as_user, "--allow-binds")
    t = threading.Thread(target=swap)
    t.start()
    outcomes = []
    try:
        for _ in range(12):
            r = via(run_jail, as_user, sock, "import os, json; print(json.dumps(sorted(os.listdir('/tmp/src'))))",
                    opts=("--ro-bind", f"{src}:/tmp/src"))
            outcomes.append(r)
    finally:
        stop.set()
        t.join()
    for r in outcomes:
        if r.returncode == 0:
            assert json.loads(r.stdout) == ["marker"], describe(r)
        else:
            one_line_refusal(r, "the whole host file system")


def test_a_request_with_more_descriptors_or_binds_than_allowed_is_refused(run_jail, as_user, serve, world_tmp,
                                                                          jail_rootfs):
    # Attack: a local client of the server's user sends a request naming more host binds than
    # a run may have, or more descriptors than it names: refused, nothing kept, and the server
    # serves the next run.
    data = world_tmp.dir()
    request, nfds = capture_request(run_jail, as_user, jail_rootfs, world_tmp, opts=("--ro-bind", f"{data}:/tmp/d"))
    assert nfds == 4 + 1  # report socket, fds 0-2, the bind's tree (-c: no script)
    # ..., files ids, count, the one op index; then the egress part (32 bytes without --net allow).
    egress_part = request[-32:]
    binds_at = len(request) - 32 - 8
    assert struct.unpack_from("<II", request, binds_at) [0] == 1
    sock, p = serve(as_user, "--allow-binds")
    time.sleep(0.2)
    baseline = len(os.listdir(f"/proc/{p.pid}/fd"))
    devnull = os.open("/dev/null", os.O_RDONLY)
    try:
        too_many = request[:binds_at] + struct.pack("<I", 9) + struct.pack("<9I", *([0] * 9)) + egress_part
        for payload, count in ((too_many, 4 + 9), (request, 14), (request, 30)):
            c = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            c.settimeout(10)
            c.connect(sock)
            assert len(c.recv(4096)) == HELLO_SIZE
            fds = [devnull] * count
            c.sendmsg([payload], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack(f"{count}i", *fds))])
            reply = c.recv(4096)
            kind = struct.unpack_from("<i", reply)[0]
            text = reply[12:].split(b"\0", 1)[0].decode()
            assert kind == REFUSED, text
            assert "too many host binds" in text or "descriptors are missing" in text, text
            c.close()
        r = via(run_jail, as_user, sock, "import os; print(sorted(os.listdir('/tmp/d')))",
                opts=("--ro-bind", f"{data}:/tmp/d"))
        assert r.returncode == 0 and r.stdout == "[]\n", describe(r)
    finally:
        os.close(devnull)
    deadline = time.monotonic() + 5
    while len(os.listdir(f"/proc/{p.pid}/fd")) > baseline and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(os.listdir(f"/proc/{p.pid}/fd")) <= baseline
    assert p.poll() is None


def test_a_run_cannot_reach_another_runs_binds(run_jail, as_user, serve, world_tmp, pyjail_command):
    # Attack: a run looks for what a concurrent run of the same template bound: in its own
    # tree, through /proc (another pid namespace), in the mount table.
    secret = world_tmp.dir()
    world_tmp.file("token", "bound-for-run-a\n", dir=secret)
    sock, _ = serve(as_user, "--allow-binds")
    a = subprocess.Popen([*pyjail_command(as_user), "--quiet", "--ro-bind", f"{secret}:/tmp/secret", "--via", sock,
                          "--", "python", "-c",
                          "import sys; print(open('/tmp/secret/token').read().strip(), flush=True); sys.stdin.read()"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd="/")
    try:
        assert a.stdout.readline().strip() == "bound-for-run-a", a.stderr.read() if a.poll() is not None else ""
        r = via(run_jail, as_user, sock, """
            import json, os
            found = []
            for top in ("/tmp", "/work", "/proc"):
                for root, dirs, files in os.walk(top, onerror=lambda e: None):
                    if root.startswith("/proc/") and root.count("/") > 2:
                        dirs[:] = [d for d in dirs if d in ("root", "cwd")]
                    for name in files:
                        if name == "token":
                            found.append(os.path.join(root, name))
            mounts = open("/proc/self/mountinfo").read()
            print(json.dumps([found, "secret" in mounts]))
        """)
        assert result(r) == [[], False]
    finally:
        a.stdin.close()
        a.wait(30)
        a.stdout.close()
        a.stderr.close()
