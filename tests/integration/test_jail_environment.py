"""Environment and file descriptors: nothing of the caller's leaks in but what is asked for."""

import os
import socket
import subprocess
import uuid

import pytest

JAIL_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "USER": "jail",
            "LOGNAME": "jail", "LANG": "C.UTF-8", "PWD": "/work"}

# Reads every /proc file of every jail process the program can read, looking for a word.
SCAN_PROC = """\
def proc_files_with(word):
    hits, denied = [], []
    for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
        for name in ["environ", "cmdline"]:
            path = f"/proc/{pid}/{name}"
            try:
                data = open(path, "rb").read()
            except OSError as e:
                denied.append([path, _errno.errorcode[e.errno]])
                continue
            if word.encode() in data:
                hits.append(path)
    return hits, denied
"""


def test_host_environment_is_not_passed(run_py, as_user):
    secret = "xyz-" + uuid.uuid4().hex
    r = run_py("""\
        secret = sys.argv[1] + sys.argv[2]  # not whole in our own command line
        hits, denied = proc_files_with(secret)
        emit({"env": dict(os.environ), "hits": hits, "denied": denied,
              "self": secret.encode() in open("/proc/self/environ", "rb").read()})
        """, setup=SCAN_PROC, user=as_user, argv=[secret[:10], secret[10:]],
        env={"SECRET_TOKEN": secret, "PYTHONPATH": "/nonexistent", "LD_PRELOAD": ""})
    got = r.result
    assert got["env"] == JAIL_ENV
    assert got["self"] is False
    assert got["hits"] == [], f"the host's variable is readable at {got['hits']}"
    # pid 1's environment is closed to the program
    assert ["/proc/1/environ", "EACCES"] in got["denied"]


def test_env_option_adds_and_overrides_variables(run_py, as_user):
    r = run_py("""\
        emit(dict(os.environ))
        """, user=as_user,
        opts=["--env", "A=B", "--env", "WITH_EQUALS=d=e", "--env", "EMPTY=", "--env", "HOME=/work"])
    assert r.result == {**JAIL_ENV, "HOME": "/work", "A": "B", "WITH_EQUALS": "d=e", "EMPTY": ""}


def test_pid1_holds_nothing_of_pyjails_command_line(run_py, as_user, world_tmp, pyjail_bin):
    # pid 1 is a copy of pyjail: its command line named host paths and --env values.
    secret = "sekrit-" + uuid.uuid4().hex
    bound = world_tmp.dir()
    r = run_py("""\
        hits = {}
        for word in sys.argv[1:]:
            found, denied = proc_files_with(word)
            hits[word] = [p for p in found if not p.startswith("/proc/2/")]
        emit({"hits": hits, "pid1": open("/proc/1/cmdline", "rb").read().strip(b"\\0").decode()})
        """, setup=SCAN_PROC, user=as_user,
        opts=["--env", f"API_KEY={secret}", "--ro-bind", f"{bound}:/mnt/b"],
        argv=[secret, str(pyjail_bin), str(bound)])
    assert all(not hits for hits in r.result["hits"].values()), r.result["hits"]
    assert r.result["pid1"] == ""


def test_inherited_descriptors_are_closed(run_py, as_user, world_tmp):
    secret = world_tmp.file("open-file.txt", "host file content\n")
    file_fd = os.open(secret, os.O_RDONLY)
    host_end, jail_end = socket.socketpair()
    fds = {"file": 43, "socket": 44}
    os.dup2(file_fd, fds["file"], inheritable=True)
    os.dup2(jail_end.fileno(), fds["socket"], inheritable=True)
    try:
        r = run_py("""\
            out = {}
            for name, fd in [("file", 43), ("socket", 44)]:
                out[name] = attempt(os.fstat, fd)
                out[name + " write"] = attempt(os.write, fd, b"leak")
            listed = [int(f) for f in os.listdir("/proc/self/fd")]
            # what the listing showed, less the descriptor the listing itself used
            out["open"] = sorted(fd for fd in listed if attempt(os.fstat, fd) == "ok")
            out["listed"] = len(listed)
            out["any"] = [fd for fd in range(3, 1024) if attempt(os.fstat, fd) == "ok"]
            emit(out)
            """, user=as_user, pass_fds=tuple(fds.values()))
    finally:
        for fd in (file_fd, *fds.values()):
            os.close(fd)
        jail_end.close()
    got = r.result
    assert got["file"] == "EBADF" and got["socket"] == "EBADF"
    assert got["file write"] == "EBADF" and got["socket write"] == "EBADF"
    assert got["open"] == [0, 1, 2]
    assert got["listed"] == 4  # 0, 1, 2 and the listing's own
    assert got["any"] == []
    # Every copy of the other end is closed now: the host's end reads EOF, and no data.
    host_end.settimeout(5)
    assert host_end.recv(100) == b"", "something arrived on the host's end"
    host_end.close()


@pytest.mark.parametrize("closed", [0, 2])
def test_closed_standard_descriptor_is_not_reused(pyjail_command, as_user, closed):
    # With stdin (or stderr) closed by the caller, pyjail must not hand one of its own files
    # to the program under that number.
    code = ("import os, sys\n"
            "print(os.readlink(f'/proc/self/fd/{sys.argv[1]}'), repr(sys.stdin.read()))\n")
    p = subprocess.run([*pyjail_command(as_user), "--", "python", "-c", code, str(closed)],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE if closed != 2 else None,
                       stdin=subprocess.DEVNULL if closed != 0 else None, cwd="/", text=True,
                       preexec_fn=lambda: os.close(closed), timeout=30)
    assert p.returncode == 0, p
    assert p.stdout == "/dev/null ''\n"
