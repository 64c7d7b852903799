"""What `cmake --install` puts in place, checked on the staged installation the suite runs
(tests/run.sh installs into a throw-away DESTDIR): the binary finds its profiles and rootfs
by itself, and the man pages, bash completion and AppArmor profile are there and work. And an
install with `--prefix DIR` of the build (PYJAIL_BUILD_DIR, default build/ of this checkout)
puts everything under DIR, from where that pyjail runs."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from pyjail_testing import skip_or_fail


@pytest.fixture(scope="module")
def prefix(pyjail_bin):
    p = Path(pyjail_bin).resolve().parents[1]
    if not (p / "share" / "pyjail").is_dir():
        pytest.skip("pyjail is not an installed copy (run through tests/run.sh)")
    return p


def test_the_installed_binary_finds_its_own_profiles_and_rootfs(prefix, run_jail, as_user):
    r = run_jail(["--explain", "--", "python3", "-c", "pass"], user=as_user)
    assert r.returncode == 0
    assert f'rootfs = "{prefix}/lib/pyjail/rootfs"' in r.stdout
    assert f"profile ({prefix}/share/pyjail/profiles/strict.toml:" in r.stdout


def test_the_compiled_seccomp_filters_are_installed_and_used(prefix, run_jail, as_user):
    compiled = sorted((prefix / "share/pyjail/profiles/seccomp/compiled").glob("*.bpf"))
    assert len(compiled) == 2  # the python set, for --net none and --net loopback
    r = run_jail(["--verbose", "--", "python3", "-c", "pass"], user=as_user)
    assert r.returncode == 0, r.stderr
    assert f"compiled at build time: {prefix}/share/pyjail/profiles/seccomp/compiled/" in r.stderr


def test_without_its_compiled_filters_pyjail_compiles_and_doctor_says_so(prefix, world_tmp, as_user):
    """A copy of the installation whose compiled filters went missing still runs, filtered."""
    copy = world_tmp.dir() / "install"
    shutil.copytree(prefix / "bin", copy / "bin")
    shutil.copytree(prefix / "share/pyjail", copy / "share/pyjail",
                    ignore=shutil.ignore_patterns("*.bpf"))
    (copy / "lib/pyjail").mkdir(parents=True)
    (copy / "lib/pyjail/rootfs").symlink_to(prefix / "lib/pyjail/rootfs")
    binary = str(copy / "bin/pyjail")
    run = lambda *args: subprocess.run([*as_user.prefix, binary, *args], capture_output=True,
                                       text=True, timeout=60, cwd="/")
    r = run("--verbose", "--", "python3", "-c", "import socket; socket.socket()")
    assert r.returncode == 1
    assert "PermissionError" in r.stderr
    assert "pyjail: seccomp filter compiled at run time" in r.stderr
    r = run("doctor")
    assert r.returncode == 0
    assert "warn  seccomp filters  set 'python' (net none, net loopback) has no up-to-date filter" in r.stdout


def test_man_pages_are_installed(prefix):
    assert (prefix / "share/man/man1/pyjail.1").is_file()
    assert (prefix / "share/man/man5/pyjail-profile.5").is_file()
    assert (prefix / "share/man/man1/pyjail-rootfs.1").is_file()
    # The Python package's commands: pyjail-mcp's page is a link to pyjail-server's.
    assert (prefix / "share/man/man1/pyjail-server.1").is_file()
    mcp = prefix / "share/man/man1/pyjail-mcp.1"
    assert mcp.is_symlink() and os.readlink(mcp) == "pyjail-server.1"


def test_the_rootfs_builder_is_installed_and_found(prefix, pyjail_bin, as_user):
    """`pyjail rootfs` runs the builder installed next to the default rootfs (a copy of the
    checkout's), with the session server it puts into every rootfs."""
    libdir = prefix / "lib/pyjail"
    for name in ("build-rootfs.py", "rootfs_elf.py", "rootfs_packages.py", "rootfs_show.py",
                 "rootfs_sources.py", "rootfs_rebuild.py", "rootfs_relay.py",
                 "pyjail_server.py", "pyjail_spawn.py", "pyjail_wire.py",
                 "pyjail_matplotlib.py"):
        assert (libdir / name).is_file(), name
    run = lambda *args: subprocess.run([*as_user.prefix, str(pyjail_bin), *args],
                                       capture_output=True, text=True, timeout=60, cwd="/")
    r = run("rootfs", "info", "default")
    assert r.returncode == 0, r.stderr
    assert f"rootfs       {libdir}/rootfs\n" in r.stdout
    r = run("rootfs", "build", "--help")
    assert r.returncode == 0 and "--requirements FILE" in r.stdout, r.stderr


def test_the_apparmor_profile_names_the_installed_binary(prefix):
    text = (prefix / "share/pyjail/apparmor/pyjail").read_text()
    # The path the package is configured for (the staging DESTDIR is not part of it).
    assert "profile pyjail /usr/local/bin/pyjail flags=(unconfined) {" in text
    assert "  userns," in text


def test_bash_completion(prefix):
    completion = Path("/usr/share/bash-completion/bash_completion")
    if not completion.exists() or shutil.which("bash") is None:
        pytest.skip("bash-completion is not installed")
    script = f'''
source {completion}
source {prefix}/share/bash-completion/completions/pyjail
t() {{ COMP_WORDS=("$@"); COMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 ))
      COMP_LINE="${{COMP_WORDS[*]}}"; COMP_POINT=${{#COMP_LINE}}; COMPREPLY=(); _pyjail
      echo "${{COMPREPLY[*]}}"; }}
t {prefix}/bin/pyjail --wall
t {prefix}/bin/pyjail --net ''
t {prefix}/bin/pyjail --profile st
t {prefix}/bin/pyjail --memory 1G -- py
t {prefix}/bin/pyjail ro
t {prefix}/bin/pyjail se
t {prefix}/bin/pyjail rootfs ''
t {prefix}/bin/pyjail pr
t {prefix}/bin/pyjail profiles ''
'''
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True).stdout.splitlines()
    assert out == ["--wall-time", "none loopback", "standard strict", "python python3", "rootfs", "serve",
                   "build rebuild info list", "profiles", ""]


def test_bash_completion_without_the_bash_completion_package(prefix, world_tmp):
    """Sourced into a plain bash (no _init_completion, no _filedir), it still completes."""
    if shutil.which("bash") is None:
        skip_or_fail("bash is not installed")
    d = world_tmp.dir()
    (d / "job.py").write_text("")
    (d / "mine.toml").write_text("")
    (d / "logs").mkdir()
    script = f'''
declare -F _init_completion _filedir && echo "helpers are loaded"
source {prefix}/share/bash-completion/completions/pyjail
t() {{ COMP_WORDS=("$@"); COMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 ))
      COMP_LINE="${{COMP_WORDS[*]}}"; COMP_POINT=${{#COMP_LINE}}; COMPREPLY=(); _pyjail
      echo "${{COMPREPLY[*]}}"; }}
t {prefix}/bin/pyjail --wall
t {prefix}/bin/pyjail --net ''
t {prefix}/bin/pyjail --cgroup-notice ''
t {prefix}/bin/pyjail --profile st
t {prefix}/bin/pyjail --profile mi
t {prefix}/bin/pyjail --workdir l
t {prefix}/bin/pyjail --memory 1G -- py
t {prefix}/bin/pyjail -- python jo
t {prefix}/bin/pyjail rootfs ''
'''
    r = subprocess.run(["bash", "--norc", "--noprofile", "-c", script], capture_output=True,
                       text=True, cwd=d)
    assert r.stderr == ""
    assert r.stdout.splitlines() == ["--wall-time", "none loopback", "daily always off",
                                     "standard strict", "mine.toml", "logs", "python python3",
                                     "job.py", "build rebuild info list"]


def _elf_section_names(path: Path) -> set[str]:
    """The section names of a 64-bit little-endian ELF file (enough for the installed binaries)."""
    import struct
    data = path.read_bytes()
    assert data[:4] == b"\x7fELF" and data[4] == 2 and data[5] == 1, path
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    def header(i):
        return struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize)
    strtab_off = header(shstrndx)[4]
    names = set()
    for i in range(shnum):
        name_off = header(i)[0]
        end = data.index(b"\0", strtab_off + name_off)
        names.add(data[strtab_off + name_off:end].decode())
    return names


def test_the_installed_binaries_are_stripped_and_their_debug_info_installed_beside(prefix):
    """`cmake --install` puts stripped binaries in place (pyjail is some 3 MB, not 50), each
    with a debug link to its NAME.debug under lib/debug/PREFIX/..., where gdb looks."""
    binaries = [prefix / "bin/pyjail", prefix / "lib/pyjail/template/pyjail-reaper",
                *(prefix / "lib/pyjail/template").glob("_pyjail_template*.so")]
    assert len(binaries) == 3, binaries
    for binary in binaries:
        sections = _elf_section_names(binary)
        assert not any(s.startswith(".debug_") for s in sections), (binary, sections)
        assert ".gnu_debuglink" in sections, binary
        debug = list((prefix / "lib/debug").glob(f"**/{binary.parent.name}/{binary.name}.debug"))
        assert len(debug) == 1, (binary, debug)
        assert ".debug_info" in _elf_section_names(debug[0])
    assert (prefix / "bin/pyjail").stat().st_size < 8 * 1024 * 1024


def _copy_installation(prefix: Path, copy: Path) -> str:
    shutil.copytree(prefix / "bin", copy / "bin")
    shutil.copytree(prefix / "share/pyjail", copy / "share/pyjail")
    (copy / "lib/pyjail").mkdir(parents=True)
    (copy / "lib/pyjail/rootfs").symlink_to(prefix / "lib/pyjail/rootfs")
    return str(copy / "bin/pyjail")


def test_data_writable_only_by_roots_group_is_trusted_and_another_groups_is_not(prefix, world_tmp, as_user):
    """A tree unpacked by root from a `git archive` tarball has directories 0775 of group 0:
    nobody but root is in that group, so pyjail takes its profiles from there. A directory that
    group 1 (daemon's) may write is still refused: its member could plant a profile."""
    copy = world_tmp.dir() / "install"
    binary = _copy_installation(prefix, copy)
    for d in [copy, *(p for p in copy.rglob("*") if p.is_dir() and not p.is_symlink())]:
        os.chown(d, 0, 0)
        d.chmod(0o775)
    run = lambda: subprocess.run([*as_user.prefix, binary, "--", "python3", "-c", "print('ran')"],
                                 capture_output=True, text=True, timeout=60, cwd="/")
    r = run()
    assert r.returncode == 0 and r.stdout == "ran\n", r.stderr
    os.chown(copy / "share/pyjail/profiles", 0, 1)
    r = run()
    assert r.returncode == 125, r.stderr
    assert "profiles is writable by group 1, so others could choose the jail's profiles" in r.stderr


def test_bash_completion_of_rootfs_names_and_doctor_options(pyjail_bin, world_tmp):
    """After --rootfs: the installed rootfses' names (as `pyjail rootfs list` gives them) and
    directories; `pyjail doctor` offers its own options, not a run's."""
    if shutil.which("bash") is None:
        skip_or_fail("bash is not installed")
    from pyjail_testing import REPO

    d = world_tmp.dir()
    (d / "defaults-dir").mkdir()
    names = subprocess.run([str(pyjail_bin), "rootfs", "list"], capture_output=True, text=True,
                           cwd=d).stdout
    installed = sorted(l.split()[0] for l in names.splitlines()[1:] if l and not l[0].isspace())
    assert "default" in installed
    script = f'''
source {REPO}/dist/pyjail.bash-completion
t() {{ COMP_WORDS=("$@"); COMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 ))
      COMP_LINE="${{COMP_WORDS[*]}}"; COMP_POINT=${{#COMP_LINE}}; COMPREPLY=(); _pyjail
      printf '%s\\n' "$(printf '%s\\n' "${{COMPREPLY[@]}}" | sort | tr '\\n' ' ')"; }}
t {pyjail_bin} --rootfs ''
t {pyjail_bin} --rootfs def
t {pyjail_bin} doctor ''
t {pyjail_bin} doctor --
t {pyjail_bin} doctor --rootfs def
t {pyjail_bin} --env-pass PYJAIL_COMPLETION_T
'''
    r = subprocess.run(["bash", "--norc", "--noprofile", "-c", script], capture_output=True,
                       text=True, cwd=d, env={**os.environ, "PYJAIL_COMPLETION_TEST": "1"})
    assert r.stderr == ""
    out = [line.split() for line in r.stdout.splitlines()]
    assert out[0] == sorted(installed + ["defaults-dir"])
    assert out[1] == ["default", "defaults-dir"]
    assert out[2] == ["--json", "--rootfs"]
    assert out[3] == ["--json", "--rootfs"]
    assert out[4] == ["default", "defaults-dir"]
    assert out[5] == ["PYJAIL_COMPLETION_TEST"]


# --------------------------------------------------------------------------------------------
# cmake --install BUILD --prefix DIR


def _build_dir() -> Path:
    from pyjail_testing import REPO

    return Path(os.environ.get("PYJAIL_BUILD_DIR") or REPO / "build")


@pytest.fixture(scope="module")
def prefix_install():
    """`cmake --install BUILD --prefix DIR`, as a user installs into a directory of their own
    (no DESTDIR), into a fresh world-readable DIR: (DIR, the completed install)."""
    from conftest import WorldTmp

    build = _build_dir()
    if not (build / "cmake_install.cmake").is_file():
        skip_or_fail(f"no configured build at {build} (set PYJAIL_BUILD_DIR)")
    if shutil.which("cmake") is None:
        skip_or_fail("cmake is not installed")
    tmp = WorldTmp()
    prefix = tmp.dir() / "prefix"
    env = {k: v for k, v in os.environ.items() if k != "DESTDIR"}
    # Everything but the data rootfs (a component of its own): 600 MiB of copying that tells
    # nothing about the prefix.
    r = subprocess.run(["cmake", "--install", str(build), "--prefix", str(prefix),
                        "--component", "Unspecified"],
                       capture_output=True, text=True, timeout=900, env=env, cwd="/")
    yield prefix, r
    tmp.cleanup()


def test_cmake_install_with_a_prefix_puts_everything_under_it(prefix_install):
    """Every install step honours --prefix: the man page link (once made from the configured
    prefix, so the install failed halfway, or wrote outside DIR), the debug files' path, and the
    files that name the installed binary."""
    prefix, r = prefix_install
    assert r.returncode == 0, r.stderr
    installed = [line.split(": ", 1)[1] for line in r.stdout.splitlines()
                 if line.startswith(("-- Installing: ", "-- Up-to-date: "))]
    assert len(installed) > 100
    assert [p for p in installed if not p.startswith(f"{prefix}/")] == []
    # What the install records (files and links, for uninstalling): the same, under DIR.
    manifest = (_build_dir() / "install_manifest_Unspecified.txt").read_text().splitlines()
    assert len(manifest) > 100 and set(manifest) <= set(installed)
    mcp = prefix / "share/man/man1/pyjail-mcp.1"
    assert mcp.is_symlink() and os.readlink(mcp) == "pyjail-server.1" and mcp.is_file()
    binary = f"{prefix}/bin/pyjail"
    assert f"profile pyjail {binary} flags=(unconfined) {{" in \
        (prefix / "share/pyjail/apparmor/pyjail").read_text()
    hooks = prefix / "share/pyjail/upgrade-hooks"
    assert f"if [ -x {binary} ]; then {binary} rootfs rebuild" in \
        (hooks / "apt-pyjail-rootfs").read_text()
    assert f"sudo install -m 644 {hooks}/apt-pyjail-rootfs" in (hooks / "apt-pyjail-rootfs").read_text()
    assert f"ExecStart={binary} rootfs rebuild" in (hooks / "pyjail-rootfs-refresh.service").read_text()
    if (_build_dir() / "pyjail.debug").is_file():
        # Where gdb looks: lib/debug/<the binary's installed path>.debug.
        assert (prefix / f"lib/debug{prefix}/bin/pyjail.debug").is_file()


def test_the_pyjail_installed_at_a_prefix_runs_from_there(prefix_install, as_user):
    prefix, r = prefix_install
    assert r.returncode == 0, r.stderr
    run = lambda *args: subprocess.run([*as_user.prefix, str(prefix / "bin/pyjail"), *args],
                                       capture_output=True, text=True, timeout=60, cwd="/")
    r = run("--profile", "strict", "--", "python", "-c", "print('ran')")
    assert r.returncode == 0 and r.stdout == "ran\n", r.stderr
    r = run("--profile", "strict", "--explain", "--", "python", "-c", "pass")
    assert f'rootfs = "{prefix}/lib/pyjail/rootfs"' in r.stdout, r.stdout
    assert f"profile ({prefix}/share/pyjail/profiles/strict.toml:" in r.stdout, r.stdout
