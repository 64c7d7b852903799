"""Profiles: standard and batch show the current directory, a profile file works, the command
line wins over it, and --explain tells all that without running anything."""

import json
import os
import pwd
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

from pyjail_testing import skip_or_fail

PROGRAM = """\
import json, os, socket
import sibling
out = {"cwd": os.getcwd(), "sibling": sibling.VALUE, "data": open("data.txt").read(),
       "listing": sorted(n for n in os.listdir(".") if n != "__pycache__")}
try:
    with open("result.txt", "w") as f:
        f.write("written in the jail")
    out["write"] = "ok"
except OSError as e:
    out["write"] = e.errno
print(json.dumps(out))
"""


def project_dir(world_tmp, mode):
    d = world_tmp.dir(mode)
    world_tmp.file("sibling.py", "VALUE = 42\n", dir=d)
    world_tmp.file("data.txt", "some data\n", dir=d)
    world_tmp.script(PROGRAM, "main.py", dir=d)
    return d


def test_standard_shows_the_current_directory_read_only(run_jail, as_user, world_tmp, helpers):
    d = project_dir(world_tmp, 0o777)  # writable on the host: the mount must still refuse
    r = run_jail(["--profile", "standard", "--", "python", "main.py"], user=as_user, cwd=d)
    assert r.returncode == 0, helpers.describe(r)
    got = json.loads(r.stdout)
    assert got["cwd"] == "/work"
    assert got["sibling"] == 42 and got["data"] == "some data\n"
    assert got["listing"] == ["data.txt", "main.py", "sibling.py"]
    assert got["write"] == 30  # EROFS
    assert not (d / "result.txt").exists()


def test_batch_makes_the_current_directory_writable(run_jail, as_user, world_tmp, helpers):
    d = project_dir(world_tmp, 0o777)  # as root, the jail writes as nobody
    r = run_jail(["--profile", "batch", "--", "python", "main.py"], user=as_user, cwd=d)
    assert r.returncode == 0, helpers.describe(r)
    got = json.loads(r.stdout)
    assert got["cwd"] == "/work" and got["sibling"] == 42
    assert got["write"] == "ok"
    result = d / "result.txt"
    assert result.read_text() == "written in the jail"
    st = result.stat()
    assert (st.st_uid, st.st_gid) == (as_user.host_uid, as_user.host_gid)


def test_strict_does_not_show_the_current_directory(run_jail, as_user, world_tmp):
    d = project_dir(world_tmp, 0o755)
    r = run_jail(["--profile", "strict", "--", "python", "main.py"], user=as_user, cwd=d)
    assert r.returncode == 1
    assert "ModuleNotFoundError" in r.stderr and "sibling" in r.stderr


CHECK = """\
import fcntl, socket, struct
with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
    req = struct.pack("16sH14s", b"lo", 0, b"")
    lo_up = bool(struct.unpack("16sH14s", fcntl.ioctl(s, 0x8913, req))[1] & 1)
def fill(path, size):
    try:
        with open(path, "wb") as f:
            f.write(b"\\0" * size)
        return "ok"
    except OSError as e:
        return _errno.errorcode[e.errno]
    finally:
        if os.path.exists(path):
            os.unlink(path)
"""


def test_a_profile_file(run_py, as_user, world_tmp):
    profile = world_tmp.file("mine.toml", """\
# a profile of one's own
hostname = "from-profile"    # trailing comments are fine
net = "loopback"
env = ["FROM_PROFILE=yes", 'LITERAL=C:\\path']
tmpfs-size = "1M"
""")
    code = """\
        emit({"host": os.uname().nodename, "lo": lo_up, "env": os.environ.get("FROM_PROFILE"),
              "literal": os.environ.get("LITERAL"), "2M": fill("/tmp/big", 2 << 20),
              "512K": fill("/tmp/small", 512 << 10)})
        """
    expected = {"host": "from-profile", "lo": True, "env": "yes", "literal": "C:\\path",
                "2M": "ENOSPC", "512K": "ok"}
    r = run_py(code, setup=CHECK, user=as_user, opts=["--profile", profile])
    assert r.result == expected
    # and named relative to the current directory
    r = run_py(code, setup=CHECK, user=as_user, opts=["--profile", "./mine.toml"],
               cwd=profile.parent)
    assert r.result == expected


def test_the_command_line_wins_over_the_profile(run_py, as_user, world_tmp):
    profile = world_tmp.file("p.toml", 'net = "loopback"\ntmpfs-size = "1M"\nhostname = "p"\n'
                                       'env = ["FROM_PROFILE=1"]\n')
    r = run_py("""\
        emit({"host": os.uname().nodename, "lo": lo_up, "2M": fill("/tmp/big", 2 << 20),
              "env": sorted(k for k in os.environ if k.startswith("FROM_"))})
        """, setup=CHECK, user=as_user,
        opts=["--profile", profile, "--net", "none", "--tmpfs-size", "4M", "--hostname", "c",
              "--env", "FROM_CLI=1"])
    # scalars: the command line's value; lists: the command line's items are added
    assert r.result == {"host": "c", "lo": False, "2M": "ok", "env": ["FROM_CLI", "FROM_PROFILE"]}


def test_tmpfs_size_caps_every_private_tmpfs(run_py, as_user):
    r = run_py("""\
        emit({d: [fill(d + "/big", 2 << 20), fill(d + "/small", 256 << 10)]
              for d in ["/tmp", "/work", "/dev/shm"]})
        """, setup=CHECK, user=as_user, opts=["--tmpfs-size", "1M"])
    assert r.result == {d: ["ENOSPC", "ok"] for d in ["/tmp", "/work", "/dev/shm"]}


def test_explain_prints_the_policy_and_runs_nothing(run_jail, as_user, world_tmp, helpers):
    out = world_tmp.dir(0o777)
    profile = world_tmp.file("e.toml", '# explained\ntmpfs-size = "3M"\nwall-time = 7\n')
    script = world_tmp.script("open('/mnt/out/ran', 'w').write('it ran')\n", "would_run.py")
    r = run_jail(["--profile", profile, "--net", "loopback", "--bind", f"{out}:/mnt/out",
                  "--explain", "--", "python", script], user=as_user)
    assert r.returncode == 0, helpers.describe(r)
    assert os.listdir(out) == [], "--explain ran the program"
    text = r.stdout

    def setting(key):
        m = re.search(rf"^{re.escape(key)} = (.*?)\s+# (.*)$", text, re.M)
        assert m, f"no {key} line in:\n{text}"
        return m.group(1), m.group(2)

    assert setting("net") == ('"loopback"', "command line (--net)")
    assert setting("tmpfs-size") == ('"3M"', f"profile ({profile}:2)")
    assert setting("wall-time") == ("7", f"profile ({profile}:3)")
    assert setting("hostname") == ('"pyjail"', "default")
    value, source = setting("bind")
    assert f"{out}:/mnt/out" in value and "command line" in source
    assert "/work/would_run.py" in text
    assert r.stderr == ""


def test_explain_writes_booleans_and_numbers_as_toml_types(run_jail, as_user, world_tmp):
    """Parsed as TOML (it is a profile), a flag is a boolean and a time or count a number, not
    the strings "true" and "300"; sizes and words stay strings, and none is "". Saved as a
    profile, it plans the same."""
    r = run_jail(["--explain", "--allow-sensitive-bind", "--cpus", "0.5", "--pids", "64", "--wall-time", "2.5"],
                 user=as_user)
    assert r.returncode == 0, r.stderr
    settings = tomllib.loads(r.stdout)
    assert settings["allow-sensitive-bind"] is True
    assert settings["cpus"] == 0.5 and settings["wall-time"] == 2.5
    assert settings["pids"] == 64 and type(settings["pids"]) is int
    for key in ("cpu-time", "kill-grace", "nofile"):
        assert type(settings[key]) is int, (key, settings[key])
    assert settings["memory"] == "512M" and settings["output-limit"] == "" and settings["net"] == "none"
    assert tomllib.loads(run_jail(["--explain"], user=as_user).stdout)["allow-sensitive-bind"] is False
    saved = world_tmp.file("saved.toml", r.stdout)
    again = run_jail(["--profile", saved, "--explain"], user=as_user)
    assert again.returncode == 0, again.stderr
    assert tomllib.loads(again.stdout) == settings


def test_explain_lines_up_the_limits(run_jail, as_user):
    r = run_jail(["--explain"], user=as_user)
    assert r.returncode == 0, r.stderr
    rows = r.stdout.split("# Limits:\n")[1].split("# Seccomp:")[0].splitlines()
    assert any(row.split()[1] == "inotify-instances" for row in rows)  # the widest name
    # Each row: "#   NAME VALUE MECHANISM (DETAIL)"; the values and the mechanisms start in
    # one column each, however long a name or a value is.
    starts = {(len(row) - len(row[4:].split(" ", 1)[1].lstrip()),
               len(row) - len(row[4:].split(" ", 1)[1].lstrip().split(" ", 1)[1].lstrip())) for row in rows}
    assert len(starts) == 1, "\n".join(rows)


def test_explain_only_plans_it_warns_of_nothing(run_jail, root_user, world_tmp, helpers):
    # A writable bind the jail's host user (nobody) cannot write: a run warns of it before the
    # program starts; --explain, which runs nothing, prints the plan and nothing else.
    out = world_tmp.dir(0o755)
    args = ["--bind", f"{out}:/mnt/out", "--", "python", "-c", "pass"]
    run = run_jail(args, user=root_user)
    assert "is not writable by uid" in run.stderr, helpers.describe(run)
    r = run_jail(["--explain", *args], user=root_user)
    assert r.returncode == 0, helpers.describe(r)
    assert r.stderr == "", helpers.describe(r)


def test_the_unwritable_bind_warning_names_a_fix_that_works(run_jail, root_user, world_tmp,
                                                           helpers):
    # Root's jails write as nobody: a directory of root's, or of a user's, is not theirs to
    # write. The warning says what to do, and what it says works.
    mine = world_tmp.dir(0o755)
    run = run_jail(["--bind", f"{mine}:/mnt/out", "--", "python", "-c", "pass"], user=root_user)
    assert "(chown it to uid 65534, or to a user you name with --host-user)" in run.stderr, \
        helpers.describe(run)
    theirs = world_tmp.dir(0o755)
    os.chown(theirs, 12345, 12345)
    write = ["python", "-c", "open('/mnt/out/result', 'w').write('ok')"]
    run = run_jail(["--bind", f"{theirs}:/mnt/out", "--", *write], user=root_user)
    assert "(its owner is uid 12345: run with --host-user 12345, or chown it)" in run.stderr, \
        helpers.describe(run)
    assert run.returncode == 1 and not (theirs / "result").exists(), helpers.describe(run)
    run = run_jail(["--host-user", "12345", "--bind", f"{theirs}:/mnt/out", "--", *write],
                   user=root_user)
    assert run.returncode == 0 and "warning" not in run.stderr, helpers.describe(run)
    assert (theirs / "result").read_text() == "ok"
    assert (theirs / "result").stat().st_uid == 12345


def test_a_bind_the_jails_host_user_cannot_write_is_warned_of(run_jail, as_user, world_tmp, helpers):
    # One check as the jail's host user, whoever runs pyjail: a directory of root's is not
    # nobody's to write, either as root's --host-user or as the unprivileged user itself (whose
    # program found out only by failing, with no word before).
    theirs = world_tmp.dir(0o755)
    who = f"uid {as_user.host_uid} ({pwd.getpwuid(as_user.host_uid).pw_name})"
    write = ["python", "-c", "open('/mnt/out/result', 'w').write('ok')"]
    run = run_jail(["--bind", f"{theirs}:/mnt/out", "--", *write], user=as_user)
    warning = (f"pyjail: warning: --bind: {theirs} is not writable by {who}, the jail's host user when pyjail "
               "runs as root: what the program writes there will fail (chown it to uid" if as_user.is_root else
               f"pyjail: warning: --bind: {theirs} is not writable by you, {who}: what the program writes there "
               "will fail (make it writable by you, or bind a directory you can write)\n")
    assert warning in run.stderr, helpers.describe(run)
    assert run.returncode == 1 and not (theirs / "result").exists(), helpers.describe(run)
    # Control: the user's own directory, no warning, and the write lands.
    mine = world_tmp.dir(0o755)
    os.chown(mine, as_user.host_uid, as_user.host_uid)
    run = run_jail(["--bind", f"{mine}:/mnt/out", "--", *write], user=as_user)
    assert run.returncode == 0 and "warning" not in run.stderr, helpers.describe(run)
    assert (mine / "result").read_text() == "ok"
    # --quiet keeps it quiet, as root's.
    run = run_jail(["--quiet", "--bind", f"{theirs}:/mnt/out", "--", "python", "-c", "pass"], user=as_user)
    assert run.returncode == 0 and run.stderr == "", helpers.describe(run)


def setfacl(path, entry):
    if shutil.which("setfacl") is None:
        skip_or_fail("no setfacl to give a directory an ACL: apt-get install acl")
    subprocess.run(["setfacl", "-m", entry, path], check=True)


def test_the_unwritable_bind_warning_asks_the_kernel_not_the_mode_bits(run_jail, root_user,
                                                                       world_tmp, helpers):
    # Whether the jail's host user (nobody) can write a bind is what the kernel says for that
    # user: an ACL counts, whatever the mode bits say. The warning says what the write does.
    write = ["python", "-c", "open('/mnt/out/result', 'w').write('ok')"]
    denied = world_tmp.dir(0o777)  # the bits let everybody write; the ACL does not let nobody
    setfacl(denied, "u:65534:r-x")
    run = run_jail(["--bind", f"{denied}:/mnt/out", "--", *write], user=root_user)
    assert f"pyjail: warning: --bind: {denied} is not writable by uid 65534 (nobody)" in run.stderr, \
        helpers.describe(run)
    assert run.returncode == 1 and "PermissionError" in run.stderr, helpers.describe(run)
    assert not (denied / "result").exists()
    granted = world_tmp.dir(0o755)  # root's, and not nobody's to write but for the ACL
    setfacl(granted, "u:65534:rwx")
    run = run_jail(["--bind", f"{granted}:/mnt/out", "--", *write], user=root_user)
    assert run.returncode == 0 and "warning" not in run.stderr, helpers.describe(run)
    assert (granted / "result").read_text() == "ok"
    assert (granted / "result").stat().st_uid == 65534


def test_a_writable_bind_on_a_read_only_mount_is_refused(run_jail, root_user, world_tmp, helpers):
    # Writable by its bits, but the mount is read-only: the plan refuses it outright.
    source, ro = world_tmp.dir(0o777), world_tmp.dir(0o777)
    subprocess.run(["mount", "--bind", "-o", "ro", source, ro], check=True)
    try:
        run = run_jail(["--bind", f"{ro}:/mnt/out", "--", "python", "-c", "pass"], user=root_user)
    finally:
        subprocess.run(["umount", ro], check=True)
    assert run.returncode == 125, helpers.describe(run)
    assert run.stderr == (f"pyjail: --bind: {ro} is on a read-only filesystem, so it cannot be bound "
                          "writable (use --ro-bind, or a writable directory)\n"), helpers.describe(run)


def test_a_profile_starts_from_strict_unless_it_extends_another(run_jail, as_user, world_tmp):
    d = world_tmp.dir()
    world_tmp.file("mine.toml", 'hostname = "mine"\n', dir=d)
    world_tmp.file("wide.toml", 'extends = "batch"\nhostname = "wide"\n', dir=d)
    world_tmp.file("deeper.toml", 'extends = "wide.toml"   # beside this file\npids = 7\n', dir=d)
    work = world_tmp.dir(0o777)  # batch's workdir: not / (a sensitive bind)

    def explained(profile):
        r = run_jail(["--profile", profile, "--explain"], user=as_user, cwd=work)
        assert r.returncode == 0, r.stderr
        return tomllib.loads(r.stdout)

    mine = explained(d / "mine.toml")
    # The keys it leaves out are strict's, not the built-in "no limit".
    assert (mine["hostname"], mine["wall-time"], mine["cpu-time"], mine["pids"], mine["fsize"]) == \
        ("mine", 300, 120, 128, "64M")
    deeper = explained(d / "deeper.toml")
    assert (deeper["hostname"], deeper["pids"], deeper["wall-time"], deeper["cpu-time"]) == \
        ("wide", 7, 3600, 0)
    # The shipped profiles are what they were.
    standard = explained("standard")
    assert (standard["wall-time"], standard["fsize"], standard["ro-bind"]) == (900, "", [".:/work"])


def test_a_missing_base_or_a_cycle_is_one_line(run_jail, as_user, world_tmp):
    d = world_tmp.dir()
    world_tmp.file("a.toml", '# a\nextends = "b.toml"\n', dir=d)
    world_tmp.file("b.toml", 'extends = "a.toml"\n', dir=d)
    world_tmp.file("lost.toml", 'extends = "nosuch"\n', dir=d)
    world_tmp.file("gone.toml", 'extends = "gone-base.toml"\n', dir=d)
    r = run_jail(["--profile", d / "a.toml", "--", "python3", "-c", "1"], user=as_user)
    assert r.returncode == 125 and r.stdout == ""
    assert r.stderr == (f"pyjail: {d}/b.toml:1: profiles extend each other in a cycle: {d}/a.toml -> "
                        f"{d}/b.toml -> {d}/a.toml (remove one of their `extends` lines)\n")
    r = run_jail(["--profile", d / "lost.toml", "--", "python3", "-c", "1"], user=as_user)
    assert r.returncode == 125
    assert r.stderr.startswith(f"pyjail: {d}/lost.toml:1: extends 'nosuch': no profile named 'nosuch' "
                               "(available: "), r.stderr
    assert r.stderr.count("\n") == 1
    r = run_jail(["--profile", d / "gone.toml", "--", "python3", "-c", "1"], user=as_user)
    assert r.returncode == 125
    assert r.stderr == (f"pyjail: {d}/gone.toml:1: extends 'gone-base.toml': cannot read profile "
                        f"file {d}/gone-base.toml: No such file or directory\n")
    assert r.stderr.count("\n") == 1


def test_help_shows_the_values_of_the_chosen_profile(run_jail, current_user):
    def line(text, option):
        return " ".join(next(l for l in text.splitlines() if l.strip().startswith(option)).split())

    r = run_jail(["--help"], user=current_user)
    assert r.returncode == 0
    assert "[default: 300]" in line(r.stdout, "--wall-time")  # strict's, the default profile
    assert "Defaults shown are profile strict's" in r.stdout
    r = run_jail(["--profile", "batch", "--help"], user=current_user)
    assert "[default: 3600]" in line(r.stdout, "--wall-time")
    assert "[default: 16M]" in line(r.stdout, "--output-limit")
    assert "[default: batch]" in line(r.stdout, "--profile")
    # A profile that cannot be read: the built-in defaults, and why.
    r = run_jail(["--profile", "nosuch", "--help"], user=current_user)
    assert r.returncode == 0
    assert "[default: 0]" in line(r.stdout, "--wall-time")
    assert r.stderr.startswith("pyjail: --help shows the built-in defaults: --profile: no profile "
                               "named 'nosuch' (available: ")


def test_pyjail_profiles_lists_what_profile_finds(pyjail_bin, as_user, world_tmp):
    """Each shipped profile once: its name, its opening comment's first line, and its file;
    strict marked as the default. Nothing else of the command line is taken."""
    def profiles(*args):
        return subprocess.run([*as_user.prefix, str(pyjail_bin), "profiles", *args], capture_output=True,
                              text=True, timeout=60, cwd=str(world_tmp.dir()))

    r = profiles()
    assert r.returncode == 0 and r.stderr == "", r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["NAME", "DESCRIPTION"]
    rows = lines[1:]
    assert len(rows) == 8, r.stdout  # a line of name and description, then one of the file
    names = [row.split()[0] for row in rows[::2]]
    assert names == ["batch", "repl", "standard", "strict"]
    for name, about, where in zip(names, rows[::2], rows[1::2]):
        path = Path(where.split()[0])
        assert path.name == f"{name}.toml" and path.is_file() and where.startswith(" ")
        first = path.read_text().splitlines()[0]
        assert about[len("standard") + 2:] == first.removeprefix(f"# {name}: "), (about, first)
        assert where.endswith(" (the default)") == (name == "strict")
    r = profiles("strict")
    assert r.returncode == 125 and r.stdout == ""
    assert r.stderr == "pyjail: profiles: unknown argument 'strict' (usage: pyjail profiles)\n"
    r = profiles("--help")
    assert r.returncode == 0 and r.stdout.startswith("Usage: pyjail profiles\n")


def test_pyjail_profiles_says_why_a_profile_cannot_be_used(pyjail_bin, as_user, world_tmp):
    """A profile file anyone may write is listed with the reason --profile refuses it, not with
    a description taken from it; the others are listed as ever."""
    prefix = Path(pyjail_bin).resolve().parents[1]
    if not (prefix / "share" / "pyjail" / "profiles").is_dir():
        skip_or_fail("pyjail is not an installed copy (run through tests/run.sh)")
    copy = world_tmp.dir(0o755) / "prefix"
    shutil.copytree(prefix / "bin", copy / "bin")
    shutil.copytree(prefix / "share" / "pyjail", copy / "share" / "pyjail")
    (copy / "lib" / "pyjail" / "rootfs").mkdir(parents=True)  # not read by `profiles`
    for d in (copy, copy / "lib", copy / "lib" / "pyjail", copy / "lib" / "pyjail" / "rootfs"):
        os.chmod(d, 0o755)
    victim = copy / "share" / "pyjail" / "profiles" / "batch.toml"
    os.chmod(victim, 0o666)
    r = subprocess.run([*as_user.prefix, str(copy / "bin" / "pyjail"), "profiles"], capture_output=True,
                       text=True, timeout=60, cwd="/")
    assert r.returncode == 0, r.stderr
    rows = r.stdout.splitlines()[1:]
    assert rows[0] == (f"batch     cannot be used: data: refusing {victim}: it is writable by everyone, so others "
                       "could choose the jail's profiles or filter (make it owned by root (or you) and not writable "
                       "by others (chmod go-w))")
    assert rows[1].strip() == str(victim)
    assert [row.split()[0] for row in rows[2::2]] == ["repl", "standard", "strict"]
