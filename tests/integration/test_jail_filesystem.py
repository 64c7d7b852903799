"""Filesystem: nothing of the host is visible or writable unless bound, and the mounts stay put."""

import json
import os
import platform
import textwrap
import uuid

import pytest

JAIL_OWNED = {"proc", "dev", "tmp", "work"}

# The attacks on the mount namespace must fail by themselves: each runs with the syscall
# filter (which refuses mount, chroot, ... outright) and without it.
LAYERS = {"filtered": [], "unfiltered": ["--seccomp", "off"]}

# A program's view of the whole tree (but /proc and /dev): every name it can reach, and the
# paths of the readable files that hold `word`.
WALK = """\
def walk(word):
    names, holding, count = set(), [], 0
    for top, dirs, filenames in os.walk("/", followlinks=False):
        if top == "/":
            dirs[:] = [d for d in dirs if d not in ("proc", "dev")]
        names.update(dirs, filenames)
        count += len(dirs) + len(filenames)
        for n in filenames:
            path = os.path.join(top, n)
            try:
                with open(path, "rb") as f:
                    if word.encode() in f.read(1 << 20):
                        holding.append(path)
            except OSError:
                pass
    return names, holding, count
"""


def expected_root(rootfs):
    """What / holds in the jail: the rootfs's top directories and symlinks, and the jail's own
    mount points."""
    names = set()
    for entry in os.scandir(rootfs):
        if entry.name in JAIL_OWNED or entry.name == "sys":
            continue
        if entry.is_symlink() or entry.is_dir(follow_symlinks=False):
            names.add(entry.name)
    return names | JAIL_OWNED


def test_host_files_are_invisible(run_jail, as_user, world_tmp, helpers):
    tag = "marker" + uuid.uuid4().hex[:10]
    elsewhere = world_tmp.file(f"{tag}-elsewhere.txt", f"{tag} secret elsewhere\n")
    cwd = world_tmp.dir()
    beside = world_tmp.file(f"{tag}-beside.txt", f"{tag} secret beside\n", dir=cwd)
    world_tmp.file("sibling.py", "X = 1\n", dir=cwd)
    script = world_tmp.script("import json, os, sys\n" + WALK + textwrap.dedent("""\
        tag, paths = sys.argv[1], sys.argv[2:]
        names, holding, count = walk(tag)
        hostname = None
        try:
            hostname = open("/etc/hostname").read()
        except OSError as e:
            hostname = "error " + str(e.errno)
        print(json.dumps({
            "found": sorted(n for n in names if tag in n) + holding,
            "count": count,
            "has_python": "python3" in names,
            "reachable": [p for p in paths if os.path.exists(p)
                          or os.path.exists("/work" + p) or os.path.exists("/tmp" + p)],
            "work": sorted(os.listdir("/work")),
            "home": os.listdir("/home"),
            "hostname": hostname,
        }))
        """), dir=cwd)
    host_hostname = open("/etc/hostname").read() if os.path.exists("/etc/hostname") else None
    r = run_jail(["--", "python", "prog.py", tag, str(elsewhere), str(beside), str(cwd)],
                 user=as_user, cwd=cwd)
    assert r.returncode == 0, helpers.describe(r)
    got = json.loads(r.stdout)
    # The walk did see the jail's own files, so not finding the markers means something.
    assert got["has_python"] and got["count"] > 100, got
    assert got["found"] == []
    assert got["reachable"] == []
    assert got["work"] == ["prog.py"]  # the script's copy, not its directory
    assert got["home"] == []
    if host_hostname is not None:
        assert got["hostname"] != host_hostname
    assert script.exists()


def test_root_holds_exactly_the_jails_entries(run_py, as_user, jail_rootfs):
    r = run_py("""\
        emit({"root": sorted(os.listdir("/")), "dev": sorted(os.listdir("/dev")),
              "null": [f(os.stat("/dev/null").st_rdev) for f in (os.major, os.minor)],
              "full": attempt(lambda: open("/dev/full", "wb", buffering=0).write(b"x"))})
        """, user=as_user)
    got = r.result
    assert set(got["root"]) == expected_root(jail_rootfs)
    for host_only in ("root", "var", "run", "sys", "boot", "srv", "opt", "mnt", "media"):
        assert host_only not in got["root"]
    assert sorted(got["dev"]) == sorted(["null", "zero", "full", "random", "urandom", "fd",
                                         "stdin", "stdout", "stderr", "shm", "pts", "ptmx"])
    assert got["null"] == [1, 3]
    assert got["full"] == "ENOSPC"


def test_rootfs_and_root_are_not_writable(run_py, as_user, jail_rootfs):
    python = sorted(p.name for p in (jail_rootfs / "usr/bin").iterdir()
                    if p.name.startswith("python3."))[0]
    r = run_py(f"""\
        python = "/usr/bin/{python}"
        def create(path):
            with open(path, "w") as f:
                f.write("x")
        results = {{}}
        for d in ["/", "/usr", "/usr/bin", "/usr/lib", "/etc", "/home", "/dev", "/bin"]:
            results["create " + d] = attempt(create, os.path.join(d, "pyjail-probe"))
            results["mkdir " + d] = attempt(os.mkdir, os.path.join(d, "pyjail-probe-dir"))
        results["append /etc/passwd"] = attempt(lambda: open("/etc/passwd", "a").write("x"))
        results["unlink /etc/passwd"] = attempt(os.unlink, "/etc/passwd")
        results["rename python"] = attempt(os.rename, python, "/usr/bin/renamed")
        results["chmod python"] = attempt(os.chmod, python, 0o777)
        results["utime python"] = attempt(os.utime, python, (0, 0))
        results["symlink in /"] = attempt(os.symlink, "/tmp", "/pyjail-link")
        results["rmdir /work"] = attempt(os.rmdir, "/work")
        results["rename /tmp"] = attempt(os.rename, "/tmp", "/tmp2")
        emit(results)
        """, user=as_user)
    bad = {k: v for k, v in r.result.items() if v not in ("EROFS", "EACCES", "EPERM", "EBUSY")}
    assert not bad, f"these succeeded or failed oddly: {bad}"


def test_private_scratch_space_is_writable(run_py, as_user):
    r = run_py("""\
        out = {}
        for d in ["/tmp", "/work", "/dev/shm"]:
            p = os.path.join(d, "scratch")
            with open(p, "w") as f:
                f.write(d)
            out[d] = open(p).read()
        mounts = {}
        for line in open("/proc/self/mounts"):
            dev, point, fstype, opts = line.split()[:4]
            mounts[point] = [fstype, opts.split(",")]
        emit({"read": out,
              "mounts": {k: mounts.get(k) for k in ["/tmp", "/work", "/dev/shm", "/"]}})
        """, user=as_user)
    assert r.result["read"] == {"/tmp": "/tmp", "/work": "/work", "/dev/shm": "/dev/shm"}
    for point in ("/tmp", "/work", "/dev/shm"):
        fstype, opts = r.result["mounts"][point]
        assert fstype == "tmpfs", (point, fstype)
        assert "nosuid" in opts and "nodev" in opts and any(o.startswith("size=") for o in opts)
    assert "ro" in r.result["mounts"]["/"][1]


MOUNT_ATTACKS = """\
import ctypes, ctypes.util
libc = ctypes.CDLL(None, use_errno=True)
MS_RDONLY, MS_REMOUNT, MS_BIND, MS_REC = 1, 32, 4096, 16384
def call(fn, *args):
    ctypes.set_errno(0)
    rc = fn(*args)
    return "ok" if rc == 0 else _errno.errorcode.get(ctypes.get_errno(), "?")
def mount(src, target, fstype, flags):
    return call(libc.mount, src, target, fstype, ctypes.c_ulong(flags), None)
"""


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_cannot_mount_remount_or_unmount(run_py, as_user, layer):
    r = run_py("""\
        emit({
            "tmpfs on /tmp": mount(b"tmpfs", b"/tmp", b"tmpfs", 0),
            "proc on /work": mount(b"proc", b"/work", b"proc", 0),
            "remount / rw": mount(None, b"/", None, MS_REMOUNT | MS_BIND),
            "remount /usr rw": mount(None, b"/usr", None, MS_REMOUNT | MS_BIND),
            "remount /etc rw": mount(None, b"/etc", None, MS_REMOUNT),
            "bind / on /work": mount(b"/", b"/work", None, MS_BIND | MS_REC),
            "umount /usr": call(libc.umount2, b"/usr", 2),
            "umount /proc": call(libc.umount2, b"/proc", 0),
            "unshare mount ns": call(libc.unshare, 0x00020000),
        })
        """, setup=MOUNT_ATTACKS, user=as_user, opts=LAYERS[layer])
    bad = {k: v for k, v in r.result.items() if v not in ("EPERM", "EACCES")}
    assert not bad, f"these mount operations were not refused: {bad}"


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_cannot_create_device_nodes(run_py, as_user, layer):
    r = run_py("""\
        import stat
        out = {}
        for d in ["/tmp", "/work", "/dev/shm"]:
            for kind, mode, dev in [("char", stat.S_IFCHR, (1, 1)), ("block", stat.S_IFBLK, (8, 0))]:
                out[f"{d} {kind}"] = attempt(os.mknod, f"{d}/{kind}", 0o666 | mode, os.makedev(*dev))
        emit(out)
        """, user=as_user, opts=LAYERS[layer])
    assert set(r.result.values()) == {"EPERM"}, r.result


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_pid1_cannot_be_read_or_traced(run_py, as_user, layer):
    r = run_py("""\
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        out = {}
        for name in ["environ", "mem", "maps", "auxv", "stack", "syscall"]:
            out[name] = attempt(lambda: open("/proc/1/" + name, "rb").read(64))
        for name in ["root", "cwd", "fd"]:
            out[name] = attempt(os.listdir, "/proc/1/" + name)
        out["exe"] = attempt(os.readlink, "/proc/1/exe")
        ctypes.set_errno(0)
        rc = libc.ptrace(16, 1, None, None)  # PTRACE_ATTACH
        out["ptrace"] = "ok" if rc == 0 else _errno.errorcode[ctypes.get_errno()]
        emit({"me": os.getpid(), "out": out})
        """, user=as_user, opts=LAYERS[layer])
    assert r.result["me"] == 2
    bad = {k: v for k, v in r.result["out"].items() if v not in ("EACCES", "EPERM")}
    assert not bad, f"pid 1 (the reaper) let these through: {bad}"


def _pivot_root_nr():
    return {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203, "s390x": 217}.get(
        platform.machine())


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_chroot_and_pivot_root_fail(run_py, as_user, layer):
    nr = _pivot_root_nr()
    r = run_py(f"""\
        os.makedirs("/tmp/newroot/old", exist_ok=True)
        out = {{"os.chroot": attempt(os.chroot, "/tmp/newroot"),
                "libc chroot": call(libc.chroot, b"/tmp")}}
        if {nr!r} is not None:
            out["pivot_root"] = call(libc.syscall, {nr!r}, b"/tmp/newroot", b"/tmp/newroot/old")
            out["pivot_root ."] = call(libc.syscall, {nr!r}, b".", b".")
        out["root after"] = sorted(os.listdir("/"))
        emit(out)
        """, setup=MOUNT_ATTACKS, user=as_user, opts=LAYERS[layer])
    root_after = r.result.pop("root after")
    assert "newroot" not in root_after and "tmp" in root_after
    bad = {k: v for k, v in r.result.items() if v != "EPERM"}
    assert not bad, f"not refused: {bad}"


def test_dotdot_does_not_leave_the_jail(run_py, as_user, world_tmp):
    host_dir = world_tmp.dir()
    marker = world_tmp.file("dotdot-marker.txt", "host\n", dir=host_dir)
    r = run_py("""\
        marker = sys.argv[1]
        os.chdir("/work")
        for _ in range(20):
            os.chdir("..")
        deep = "/work/" + "../" * 20
        emit({"cwd": os.getcwd(), "deep": sorted(os.listdir(deep)), "root": sorted(os.listdir("/")),
              "via work": os.path.exists("/work/" + "../" * 20 + marker.lstrip("/")),
              "via tmp": os.path.exists("/tmp/../../.." + marker),
              "relative": os.path.exists("../" * 20 + marker.lstrip("/")),
              "realpath": os.path.realpath("/work/../../..")})
        """, user=as_user, argv=[str(marker)])
    got = r.result
    assert got["cwd"] == "/"
    assert got["deep"] == got["root"]
    assert got["realpath"] == "/"
    assert not got["via work"] and not got["via tmp"] and not got["relative"]


def test_symlinks_in_a_bound_directory_resolve_inside_the_jail(run_py, as_user, world_tmp):
    secret_dir = world_tmp.dir()
    secret = world_tmp.file("secret.txt", "host secret\n", dir=secret_dir)
    exposed = world_tmp.dir()
    links = {
        "shadow": "/etc/shadow",
        "absolute": str(secret),
        "relative": os.path.relpath(secret, exposed),  # ../pyjail-it-xxx/secret.txt
        "deep": "../../../../../../.." + str(secret),
        "etc": "/etc",
    }
    for name, target in links.items():
        os.symlink(target, exposed / name)
    # On the host, the links do lead to the secret (so the jail would show it if it resolved
    # them on the host's side).
    assert (exposed / "absolute").read_text() == "host secret\n"
    assert (exposed / "relative").read_text() == "host secret\n"
    assert (exposed / "deep").read_text() == "host secret\n"
    host_shadow = None
    try:
        host_shadow = open("/etc/shadow").read()
    except OSError:
        pass
    for target in ("/mnt/exposed", str(exposed)):
        r = run_py("""\
            d = sys.argv[1]
            out = {}
            for name in ["shadow", "absolute", "relative", "deep"]:
                try:
                    out[name] = open(os.path.join(d, name)).read()
                except OSError as e:
                    out[name] = _errno.errorcode[e.errno]
            out["etc"] = sorted(os.listdir(os.path.join(d, "etc")))
            out["jail etc"] = sorted(os.listdir("/etc"))
            emit(out)
            """, user=as_user, opts=["--ro-bind", f"{exposed}:{target}"], argv=[target])
        got = r.result
        for name in ("shadow", "absolute", "relative", "deep"):
            assert got[name] == "ENOENT", (target, name, got[name])
            assert got[name] != host_shadow
        assert got["etc"] == got["jail etc"]
        assert "shadow" not in got["etc"]


def test_ro_bind_is_read_only_and_bind_is_writable(run_py, as_user, world_tmp):
    ro = world_tmp.dir()
    world_tmp.file("data.txt", "read me\n", dir=ro)
    os.chmod(ro, 0o777)  # the host would let the jail's user write: the mount must not
    rw = world_tmp.dir(0o777)
    r = run_py("""\
        out = {"read": open("/mnt/ro/data.txt").read(),
               "write ro": attempt(lambda: open("/mnt/ro/new.txt", "w").write("x")),
               "unlink ro": attempt(os.unlink, "/mnt/ro/data.txt"),
               "remount ro rw": mount(None, b"/mnt/ro", None, MS_REMOUNT | MS_BIND),
               "write rw": attempt(lambda: open("/mnt/rw/new.txt", "w").write("from the jail"))}
        emit(out)
        """, setup=MOUNT_ATTACKS, user=as_user,
        opts=["--ro-bind", f"{ro}:/mnt/ro", "--bind", f"{rw}:/mnt/rw"])
    got = r.result
    assert got["read"] == "read me\n"
    assert got["write ro"] == "EROFS"
    assert got["unlink ro"] == "EROFS"
    assert got["remount ro rw"] == "EPERM"
    assert got["write rw"] == "ok"
    assert sorted(os.listdir(ro)) == ["data.txt"]
    assert (rw / "new.txt").read_text() == "from the jail"


def test_a_bind_onto_the_rootfs_work_mount_point(run_py, as_user, world_tmp, jail_rootfs):
    # The rootfs ships /work as a mount point; a bind there must still land (regression).
    src = world_tmp.dir()
    world_tmp.file("data.txt", "bound at /work\n", dir=src)
    r = run_py("""\
        emit({"cwd": os.getcwd(), "data": open("/work/data.txt").read()})
        """, user=as_user, opts=["--ro-bind", f"{src}:/work"])
    assert r.result == {"cwd": "/work", "data": "bound at /work\n"}


def test_roots_private_files_stay_private(run_py, root_user, world_tmp, helpers):
    # When root runs pyjail, the jail meets host files as nobody, never as root.
    private = world_tmp.dir(0o700)
    world_tmp.file("secret.txt", "root only\n", dir=private, mode=0o600)
    r = run_py("""\
        emit({"list": attempt(os.listdir, "/mnt/p"),
              "read": attempt(lambda: open("/mnt/p/secret.txt").read())})
        """, user=root_user, opts=["--ro-bind", f"{private}:/mnt/p"], check=False)
    assert "root only" not in r.stdout + r.stderr
    if r.returncode == 125:  # refused up front: fine too
        err = helpers.without_notices(r.stderr)
        assert err.startswith("pyjail: ") and err.count("\n") == 1 and str(private) in err
    else:
        assert r.returncode == 0, r.stderr
        assert r.result == {"list": "EACCES", "read": "EACCES"}


def test_a_bind_inside_a_read_only_bind_needs_its_mount_point_there(run_jail, as_user, world_tmp, helpers):
    # standard binds the current directory read-only at /work: a bind inside it has its mount
    # point in that host directory, where the jail cannot make one. Refused while planning, in
    # one line naming the bind, why, and the way out -- it was "mkfile: cannot create mount
    # point /work/data.csv: Read-only file system" from inside the jail.
    proj = world_tmp.dir()
    data = world_tmp.file("data.csv", "a,b\n")
    args = ["--profile", "standard", "--ro-bind", f"{data}:/work/data.csv", "--",
            "python", "-c", "print(open('/work/data.csv').read(), end='')"]
    r = run_jail(args, user=as_user, cwd=proj)
    assert r.returncode == 125 and r.stdout == "" and r.stderr.count("\n") == 1, helpers.describe(r)
    assert r.stderr.startswith(f"pyjail: --ro-bind: /work/data.csv lies inside /work, the read-only bind of "
                               f"{proj} ("), helpers.describe(r)
    assert r.stderr.endswith(f"which has no file to mount it on (bind it elsewhere, e.g. /data.csv, or create "
                             f"the file {proj}/data.csv beforehand)\n"), helpers.describe(r)
    assert os.listdir(proj) == []
    # Both ways out work.
    r = run_jail([*args[:3], f"{data}:/data.csv", "--", "python", "-c", "print(open('/data.csv').read(), end='')"],
                 user=as_user, cwd=proj)
    assert (r.returncode, r.stdout) == (0, "a,b\n"), helpers.describe(r)
    (proj / "data.csv").touch()
    r = run_jail(args, user=as_user, cwd=proj)
    assert (r.returncode, r.stdout) == (0, "a,b\n"), helpers.describe(r)
    assert os.listdir(proj) == ["data.csv"] and (proj / "data.csv").read_text() == ""


def test_a_bind_inside_a_workdir_the_jails_host_user_cannot_write(run_jail, as_user, world_tmp, helpers):
    # batch binds the current directory writable at /work; root's directory is not the jail's
    # host user's (nobody) to write, so the mount point of a bind inside it cannot be made
    # there: refused while planning, not "mkdir: cannot create mount point /work/in" from the
    # jail.
    proj = world_tmp.dir(0o755)
    src = world_tmp.dir()
    r = run_jail(["--profile", "batch", "--ro-bind", f"{src}:/work/in", "--", "python", "-c", "1"],
                 user=as_user, cwd=proj)
    assert r.returncode == 125 and r.stdout == "" and r.stderr.count("\n") == 1, helpers.describe(r)
    assert r.stderr.startswith(f"pyjail: --ro-bind: /work/in lies inside /work, the bind of {proj} ("), \
        helpers.describe(r)
    assert r.stderr.endswith("where its mount point would be made, but the jail's host user cannot write that "
                             f"directory (bind it elsewhere, e.g. /in, or create the directory {proj}/in "
                             "beforehand)\n"), helpers.describe(r)
    assert os.listdir(proj) == []


def test_mount_points_made_in_a_workdir_are_gone_after_the_run(run_jail, as_user, world_tmp, helpers):
    # Where the jail's host user can write the host directory, pid 1 makes the mount points
    # there. They are pyjail's, not the program's: the run removes them (and the directories
    # it made on the way), leaving what the program wrote and the user's own directories.
    proj = world_tmp.dir(0o755)
    (proj / "keep").mkdir()
    for d in (proj, proj / "keep"):
        os.chown(d, as_user.host_uid, as_user.host_gid)
    data = world_tmp.file("data.csv", "a,b\n")
    src = world_tmp.dir()
    world_tmp.file("x.txt", "x\n", dir=src)
    r = run_jail(["--profile", "batch", "--ro-bind", f"{data}:/work/data.csv", "--ro-bind", f"{src}:/work/a/b/in",
                  "--ro-bind", f"{src}:/work/keep/in", "--", "python", "-c",
                  "import os; open('out.txt', 'w').write(open('data.csv').read() + open('a/b/in/x.txt').read()); "
                  "print(sorted(os.listdir('.')))"], user=as_user, cwd=proj)
    assert (r.returncode, r.stdout) == (0, "['a', 'data.csv', 'keep', 'out.txt']\n"), helpers.describe(r)
    assert sorted(os.listdir(proj)) == ["keep", "out.txt"], helpers.describe(r)
    assert os.listdir(proj / "keep") == []
    assert (proj / "out.txt").read_text() == "a,b\nx\n"


def test_removing_the_mount_points_follows_no_link_the_program_left(run_jail, as_user, world_tmp, helpers):
    # Attack: the program moves away a directory pid 1 made on the way to a mount point and
    # leaves a symbolic link in its place, so that the removal after the run (as root's
    # --host-user, or the user) would reach another directory and remove its empty entries.
    # The removal goes through no link: the victim's stay, and so does the link.
    proj = world_tmp.dir(0o755)
    os.chown(proj, as_user.host_uid, as_user.host_gid)
    victim = world_tmp.dir(0o777)
    (victim / "b" / "in").mkdir(parents=True)
    for d in (victim / "b", victim / "b" / "in"):
        os.chmod(d, 0o777)
    src = world_tmp.dir()
    r = run_jail(["--profile", "batch", "--ro-bind", f"{src}:/work/a/b/in", "--", "python", "-c",
                  f"import os; os.rename('a', 'moved'); os.symlink({str(victim)!r}, 'a'); print('swapped')"],
                 user=as_user, cwd=proj)
    assert (r.returncode, r.stdout) == (0, "swapped\n"), helpers.describe(r)
    assert (victim / "b" / "in").is_dir(), "the removal followed the program's link"
    assert os.readlink(proj / "a") == str(victim)
    # What pid 1 made, moved by the program, is the program's now: it stays where it was put.
    assert sorted(os.listdir(proj)) == ["a", "moved"]


def test_removing_the_mount_points_follows_no_link_in_place_of_the_bind_directory(run_jail, as_user, world_tmp,
                                                                                  helpers):
    # Attack: the enclosing bind's host directory (here proj/out, bound at /out) is also seen
    # writable through another bind (proj at /work). The program moves it away there and
    # leaves a symbolic link in its place: the removal after the run opened proj/out by name,
    # followed the link, and removed the victim's empty file and directory of the same names.
    proj = world_tmp.dir(0o755)
    (proj / "out").mkdir()
    victim = world_tmp.dir(0o755)
    (victim / "in").mkdir()
    (victim / "in" / "data.csv").touch()
    for d in (proj, proj / "out", victim, victim / "in", victim / "in" / "data.csv"):
        os.chown(d, as_user.host_uid, as_user.host_gid)
    data = world_tmp.file("data.csv", "a,b\n")
    r = run_jail(["--profile", "batch", "--bind", f"{proj}/out:/out", "--ro-bind", f"{data}:/out/in/data.csv",
                  "--", "python", "-c",
                  f"import os; os.rename('/work/out', '/work/moved'); os.symlink({str(victim)!r}, '/work/out'); "
                  "print('swapped')"], user=as_user, cwd=proj)
    assert (r.returncode, r.stdout) == (0, "swapped\n"), helpers.describe(r)
    assert (victim / "in" / "data.csv").is_file(), "the removal followed the program's link"
    assert os.listdir(victim) == ["in"]
