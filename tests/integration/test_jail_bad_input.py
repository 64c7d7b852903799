"""Bad input: each mistake gets its exit status and one line on stderr that names it, and
leaves nothing behind (no /tmp entry, no process)."""

import pwd
import re

import pytest

pytestmark = pytest.mark.usefixtures("no_leftovers")


def assert_one_error(r, status, *fragments):
    where = f"exit {r.returncode}\n--- stdout:\n{r.stdout}\n--- stderr:\n{r.stderr}"
    assert r.returncode == status, where
    assert r.stdout == "", where
    assert r.stderr.endswith("\n") and r.stderr.count("\n") == 1, f"not one line: {where}"
    assert r.stderr.startswith("pyjail: "), where
    for fragment in fragments:
        assert fragment in r.stderr, f"{fragment!r} missing: {where}"
    return r.stderr


# (profile text, line of the error, fragments the message must hold)
BAD_PROFILES = {
    "unknown key": ('net = "none"\nwal-time = 5\n', 2, ["'wal-time'", "did you mean",
                                                        "'wall-time'"]),
    "wrong type": ('net = "none"\n\nwall-time = true\n', 3, ["wall-time", "true"]),
    "unclosed string": ('# a comment\nhostname = "abc\n', 2, ["hostname", "not closed"]),
    "list for scalar": ('net = ["none"]\n', 1, ["net", "not a list"]),
    "scalar for list": ('tmpfs-size = "1M"\nro-bind = "/tmp"\n', 2, ["ro-bind", "list"]),
    "unquoted word": ('net = none\n', 1, ["net", "quote"]),
    "key twice": ('net = "none"\nnet = "loopback"\n', 2, ["net", "twice"]),
    "table": ('net = "none"\n[jail]\n', 2, ["tables"]),
    "bad value": ('tmpfs-size = "lots"\n', 1, ["tmpfs-size", "lots"]),
    "command-line only key": ('explain = true\n', 1, ["explain", "command-line"]),
}


@pytest.mark.parametrize("case", sorted(BAD_PROFILES))
def test_malformed_profile(run_jail, as_user, world_tmp, case):
    text, line, fragments = BAD_PROFILES[case]
    profile = world_tmp.file("bad.toml", text)
    r = run_jail(["--profile", profile, "--", "python", "-c", "print('ran')"], user=as_user)
    assert_one_error(r, 125, f"{profile}:{line}:", *fragments)


def test_missing_profile_file(run_jail, as_user, world_tmp):
    missing = world_tmp.dir() / "nope.toml"
    r = run_jail(["--profile", missing, "--", "python", "-c", "1"], user=as_user)
    assert_one_error(r, 125, str(missing))


@pytest.mark.parametrize("option,step", [("--profile", "profile"), ("--seccomp", "seccomp")])
def test_a_directory_for_a_profile_or_set_file(run_jail, as_user, world_tmp, option, step):
    folder = world_tmp.dir() / "dir.toml"
    folder.mkdir()
    r = run_jail([option, folder, "--", "python", "-c", "1"], user=as_user)
    assert_one_error(r, 125, f"{step}: cannot read {folder}", "Is a directory")


def test_unknown_profile_name_lists_the_known_ones(run_jail, as_user):
    r = run_jail(["--profile", "nosuch", "--", "python", "-c", "1"], user=as_user)
    assert_one_error(r, 125, "'nosuch'", "strict", "standard", "batch")


@pytest.mark.parametrize("name,meant", [("Strict", "strict"), ("STANDARD", "standard"), ("stirct", "strict")])
def test_a_typo_of_a_profile_name_gets_a_suggestion(run_jail, as_user, name, meant):
    r = run_jail(["--profile", name, "--", "python", "-c", "1"], user=as_user)
    assert_one_error(r, 125, f"no profile named '{name}' (did you mean '{meant}'? available: ")


@pytest.mark.parametrize("args,meant", [
    (["--proflie", "strict"], "--profile"),  # an option no profile may set
    (["--wall-tme", "5"], "--wall-time"),
    (["--explian"], "--explain"),
])
def test_a_typo_of_an_option_gets_a_suggestion(run_jail, as_user, args, meant):
    r = run_jail([*args, "--", "python", "-c", "print('ran')"], user=as_user)
    assert_one_error(r, 125, f"unknown option {args[0]} (did you mean {meant}?)")


@pytest.mark.parametrize("word,meant", [("doctr", "pyjail doctor"), ("help", "pyjail --help"),
                                        ("serv", "pyjail serve"), ("rootsf", "pyjail rootfs")])
def test_a_typo_of_a_subcommand_is_named_by_the_command_not_found(run_jail, as_user, word, meant):
    # pyjail's subcommands are its first word exactly: anything else is a command for the jail.
    r = run_jail([word], user=as_user)
    line = assert_one_error(r, 127, f"command: {word}: command not found in the jail")
    assert line.endswith(f"(the jail sees only its rootfs, not the host's programs; did you mean '{meant}'?)\n")


@pytest.mark.parametrize("args,fragment", [
    (["--bogus"], "--bogus"),
    (["--wall-tim", "5"], "--wall-tim"),
    (["-x"], "-x"),
])
def test_unknown_option(run_jail, as_user, args, fragment):
    r = run_jail([*args, "--", "python", "-c", "print('ran')"], user=as_user)
    assert_one_error(r, 125, "unknown option", fragment)


@pytest.mark.parametrize("option,value", [
    ("--wall-time", "abc"), ("--wall-time", "-1"), ("--wall-time", ""), ("--wall-time", "nan"),
    ("--wall-time", "1e999"), ("--wall-time", "5s"),
    ("--tmpfs-size", "lots"), ("--tmpfs-size", "0"), ("--tmpfs-size", "12X"),
    ("--net", "host"), ("--hostname", "bad name!"), ("--env", "NO_EQUALS"), ("--env", "=x"),
])
def test_bad_option_value(run_jail, as_user, option, value):
    r = run_jail([option, value, "--", "python", "-c", "print('ran')"], user=as_user)
    assert_one_error(r, 125, option)


def test_rootfs_that_does_not_exist_says_how_to_build_one(run_jail, as_user):
    r = run_jail(["--rootfs", "/nonexistent", "--", "python", "-c", "1"], user=as_user)
    line = assert_one_error(r, 125, "/nonexistent")
    assert "build-rootfs" in line or "cmake --build" in line, line


def test_rootfs_that_is_not_one(run_jail, as_user, world_tmp):
    empty = world_tmp.dir()
    r = run_jail(["--rootfs", empty, "--", "python", "-c", "1"], user=as_user)
    assert_one_error(r, 125, str(empty), "pyjail rootfs build")


@pytest.mark.parametrize("args,fragments", [
    (["--ro-bind", "/nonexistent"], ["/nonexistent"]),
    (["--bind", "/nonexistent/dir:/mnt/x"], ["/nonexistent/dir"]),
    (["--ro-bind", "relative/dir"], ["relative", "--ro-bind"]),
    (["--bind", "/tmp:relative-target"], ["relative-target", "absolute"]),
    (["--bind", "/tmp:/mnt/../etc"], ["'..'"]),
    (["--ro-bind", "/tmp:/proc/x"], ["/proc/x", "reserved"]),
    (["--ro-bind", "/tmp:/dev/x"], ["/dev/x", "reserved"]),
    (["--ro-bind", "/tmp:/"], ["reserved"]),
    (["--ro-bind", ":/mnt/x"], ["source"]),
    (["--ro-bind", "/tmp:/mnt/a", "--bind", "/tmp:/mnt/a"], ["/mnt/a"]),
    (["--ro-bind", "/tmp:/etc/new-dir"], ["/etc/new-dir", "read-only"]),
])
def test_bad_binds(run_jail, as_user, args, fragments):
    r = run_jail([*args, "--", "python", "-c", "print('ran')"], user=as_user)
    assert_one_error(r, 125, *fragments)


def test_workdir_and_a_bind_over_work(run_jail, as_user, world_tmp):
    d = world_tmp.dir()
    r = run_jail(["--workdir", d, "--ro-bind", f"{d}:/work", "--", "python", "-c", "1"],
                 user=as_user)
    assert_one_error(r, 125, "--workdir", "/work")


def test_missing_script(run_jail, as_user, world_tmp):
    missing = world_tmp.dir() / "missing.py"
    r = run_jail(["--", "python", missing], user=as_user)
    assert_one_error(r, 125, str(missing))


def test_missing_script_in_the_current_directory(run_jail, as_user, world_tmp):
    d = world_tmp.dir()
    r = run_jail(["--", "python", "nope.py"], user=as_user, cwd=d)
    line = assert_one_error(r, 125, f"pyjail: script: nope.py does not exist in the current directory: there is "
                                    f"no {d}/nope.py (check its name; ")
    assert "No such file" not in line


def test_roots_missing_script_in_a_directory_closed_to_the_host_user(run_jail, root_user, world_tmp):
    # The host user cannot look in root's 0700 directory; root's own look finds no script: it
    # does not exist, whoever may read it.
    d = world_tmp.dir(0o700)
    r = run_jail(["--", "python", "nope.py"], user=root_user, cwd=d)
    line = assert_one_error(r, 125, f"pyjail: script: nope.py does not exist in the current directory: there is "
                                    f"no {d}/nope.py (check its name; ")
    assert "not readable" not in line and "No such file" not in line
    r = run_jail(["--", "python", d / "sub" / "nope.py"], user=root_user)
    assert_one_error(r, 125, f"pyjail: script: cannot open {d}/sub/nope.py: No such file or directory (check the path")


def test_a_bind_the_jails_host_user_cannot_reach(run_jail, as_user, world_tmp):
    # Root's directory, closed to others: root reaches it, the jail's host user (nobody, or
    # the unprivileged user itself) does not. The error names the option, who cannot reach
    # what, and a fix that fits the errno (not "must exist": it does).
    private = world_tmp.dir(0o700)
    (private / "sub").mkdir()
    r = run_jail(["--ro-bind", f"{private}/sub:/data", "--", "python", "-c", "1"], user=as_user)
    who = f"uid {as_user.host_uid} ({pwd.getpwuid(as_user.host_uid).pw_name})"
    if as_user.is_root:
        line = assert_one_error(r, 125, f"pyjail: bind: --ro-bind: {who}, the jail's host user, cannot reach "
                                        f"{private}/sub: Permission denied (make it readable by that user")
        assert "--host-user USER" in line
    else:
        line = assert_one_error(r, 125, f"pyjail: bind: --ro-bind: you, {who}, cannot reach {private}/sub: "
                                        "Permission denied (make it readable by you")
    assert "must exist" not in line


@pytest.mark.parametrize("profile", ["standard", "batch"])
def test_a_profile_binding_a_current_directory_out_of_reach(run_jail, as_user, world_tmp, profile):
    private = world_tmp.dir(0o700)
    here = private / "project"
    here.mkdir()
    r = run_jail(["--profile", profile, "--", "python", "-c", "1"], user=as_user, cwd=here)
    who = f"uid {as_user.host_uid} ({pwd.getpwuid(as_user.host_uid).pw_name})"
    who = f"{who}, the jail's host user," if as_user.is_root else f"you, {who},"
    line = assert_one_error(r, 125, f"pyjail: bind: --profile {profile} binds the current directory {here}, which "
                                    f"{who} cannot reach: Permission denied (run from a directory ",
                            "--profile strict")
    assert ".toml" not in line  # not a line of a profile the user never wrote


@pytest.mark.parametrize("profile", ["standard", "batch"])
def test_a_current_directory_the_jails_host_user_cannot_enter(run_jail, as_user, world_tmp, profile):
    # Root's `mktemp -d` (0700) under a /tmp everyone may search: the jail's host user (root's
    # --host-user, or the unprivileged user itself) can open it (O_PATH) but not enter it.
    # Refused while planning, in one line that says so -- not "chdir: cannot enter /work" from
    # inside the jail (as the unprivileged user's run failed), and not batch's warning that the
    # directory is not writable first.
    here = world_tmp.dir(0o700)
    r = run_jail(["--profile", profile, "--", "python", "-c", "1"], user=as_user, cwd=here)
    who = f"uid {as_user.host_uid} ({pwd.getpwuid(as_user.host_uid).pw_name})"
    if as_user.is_root:
        line = assert_one_error(r, 125, f"pyjail: bind: --profile {profile} binds the current directory {here}, "
                                        f"which {who}, the jail's host user, cannot enter: Permission denied (run "
                                        "from a directory it can enter, chmod o+rx this one, use --profile strict, "
                                        "or --host-user USER)")
    else:
        line = assert_one_error(r, 125, f"pyjail: bind: --profile {profile} binds the current directory {here}, "
                                        f"which you, {who}, cannot enter: Permission denied (run from a directory "
                                        "you can enter, or use --profile strict)")
    assert "chdir" not in line and "not writable" not in line


@pytest.mark.parametrize("option", ["--ro-bind", "--bind"])
def test_a_bind_the_jails_host_user_cannot_enter(run_jail, as_user, world_tmp, option):
    # The unprivileged user's program found out for itself: PermissionError on /data.
    closed = world_tmp.dir(0o700)
    r = run_jail([option, f"{closed}:/data", "--", "python", "-c", "import os; os.listdir('/data')"], user=as_user)
    who = f"uid {as_user.host_uid} ({pwd.getpwuid(as_user.host_uid).pw_name})"
    if as_user.is_root:
        assert_one_error(r, 125, f"pyjail: bind: {option}: {who}, the jail's host user, cannot enter {closed}: "
                                 "Permission denied (let that user in (chmod o+rx")
    else:
        assert_one_error(r, 125, f"pyjail: bind: {option}: you, {who}, cannot enter {closed}: "
                                 "Permission denied (make it searchable by you, or bind another directory)")


def test_a_rootfs_the_jails_host_user_cannot_reach(run_jail, as_user, world_tmp, jail_rootfs):
    # The rootfs behind a directory closed to others: root plans the run, but the jail's pid 1
    # opens the rootfs as the jail's host user.
    private = world_tmp.dir(0o700)
    link = private / "rootfs"
    link.symlink_to(jail_rootfs)
    r = run_jail(["--rootfs", link, "--", "python", "-c", "1"], user=as_user)
    if as_user.is_root:
        line = assert_one_error(r, 125, f"pyjail: rootfs bind: cannot open {link}: Permission denied (uid ",
                                ", the jail's host user, cannot reach the rootfs: install it (cmake --install "
                                "build), or make every directory on its path searchable by that user (chmod o+x))")
        # Its own id (no name), or --host-user's.
        assert re.search(r"\(uid \d+ \((an id of the jail's own, with others' rights|\w+)\), the jail", line), line
    else:
        assert_one_error(r, 125, f"pyjail: rootfs: cannot open rootfs {link}: Permission denied (you cannot reach it: "
                                 "install it (cmake --install build), or make every directory on its path "
                                 "searchable by you (chmod o+x))")


def test_script_that_is_a_directory(run_jail, as_user, world_tmp):
    d = world_tmp.dir()
    world_tmp.script("import sys; print('app', __name__, sys.path[0])", name="__main__.py", dir=d)
    r = run_jail(["--", "python", d], user=as_user)
    said = assert_one_error(r, 125, str(d), "not a regular file")
    # The fix it names works, as given.
    fix = re.search(r"\(--ro-bind DIR:/work/app\) and run python -c \"(.*)\"\)$", said.strip())
    assert fix, said
    ran = run_jail(["--quiet", "--ro-bind", f"{d}:/work/app", "--", "python", "-c", fix.group(1)], user=as_user)
    assert (ran.returncode, ran.stdout) == (0, "app __main__ /work/app\n"), ran.stderr


def test_no_command(run_jail, as_user):
    r = run_jail(["--net", "none"], user=as_user)
    assert_one_error(r, 125, "no command")


@pytest.mark.parametrize("command", [["ls"], ["bash", "-c", "id"], ["/bin/ls"],
                                     ["/usr/bin/nonexistent"], [""]])
def test_command_not_in_the_rootfs(run_jail, as_user, command):
    r = run_jail(["--", *command], user=as_user)
    assert_one_error(r, 127)


def test_unknown_python_lists_the_available_ones(run_jail, as_user, jail_rootfs):
    pythons = sorted(p.name for p in (jail_rootfs / "usr/bin").iterdir()
                     if re.fullmatch(r"python(3(\.\d+)?)?", p.name))
    r = run_jail(["--", "python3.99", "-c", "1"], user=as_user)
    assert_one_error(r, 127, "python3.99", *pythons)


@pytest.mark.parametrize("value", ["root", "0", "0:0", "65534:0", "0:65534"])
def test_host_user_root_is_refused(run_jail, root_user, value):
    r = run_jail(["--host-user", value, "--", "python", "-c", "print('ran')"], user=root_user)
    assert_one_error(r, 125, "--host-user")


def test_host_user_unknown_name(run_jail, root_user):
    r = run_jail(["--host-user", "no-such-user-here", "--", "python", "-c", "1"],
                 user=root_user)
    assert_one_error(r, 125, "no-such-user-here")


def test_the_rootfs_shell_serves_os_system_and_shell_true(run_jail, as_user):
    # /bin/sh is in the rootfs (and nothing else of the host's programs): code written for a
    # normal machine that shells out still runs, inside the same jail.
    r = run_jail(["--", "python3", "-c",
                  "import os, subprocess\n"
                  "print(os.system('exit 3') >> 8)\n"
                  "print(subprocess.run('echo $((6 * 7)); id -u 2>/dev/null || echo no-id',"
                  " shell=True, capture_output=True, text=True).stdout, end='')\n"],
                 user=as_user)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "3\n42\nno-id\n"
