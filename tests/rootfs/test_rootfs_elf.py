"""rootfs/rootfs_elf.py: the libraries an ELF file needs, resolved as glibc's loader would,
on small libraries compiled here."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "rootfs"))
import rootfs_elf  # noqa: E402


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    """ext.so (DT_RPATH $ORIGIN/libs) -> libs/liba.so (no path of its own) -> libs/libb.so:
    the layout auditwheel gives a wheel (an extension module and its NAME.libs)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        if os.environ.get("PYJAIL_MUST_WORK") == "1":
            pytest.fail("PYJAIL_MUST_WORK=1, but there is no C compiler", pytrace=False)
        pytest.skip("no C compiler")
    top = tmp_path_factory.mktemp("elf")
    libs = top / "libs"
    libs.mkdir()
    (top / "b.c").write_text("int b(void) { return 2; }\n")
    (top / "a.c").write_text("int b(void);\nint a(void) { return b(); }\n")
    (top / "ext.c").write_text("int a(void);\nint ext(void) { return a(); }\n")

    def cc_shared(out, src, *flags):
        subprocess.run([cc, "-shared", "-fPIC", "-o", str(out), str(src), *flags], check=True)

    cc_shared(libs / "libb.so", top / "b.c")
    cc_shared(libs / "liba.so", top / "a.c", "-L" + str(libs), "-lb")
    cc_shared(top / "ext.so", top / "ext.c", "-L" + str(libs), "-la",
              "-Wl,--disable-new-dtags,-rpath,$ORIGIN/libs")
    return top


def test_a_library_finds_its_neighbour_through_its_loaders_rpath(chain):
    resolver = rootfs_elf.Resolver()
    ext, liba = str(chain / "ext.so"), str(chain / "libs/liba.so")
    ext_info, liba_info = resolver.info(ext), resolver.info(liba)
    assert ext_info.rpath == ["$ORIGIN/libs"] and ext_info.runpath == []
    assert resolver.resolve(ext, "liba.so", ext_info) == str(chain / "libs/liba.so")
    # On its own, liba.so has no way to libb.so; loaded by ext.so, the loader searches
    # ext.so's DT_RPATH for it too.
    assert resolver.resolve(liba, "libb.so", liba_info) is None
    loaders = tuple(resolver.rpath_dirs(ext, ext_info))
    assert resolver.resolve(liba, "libb.so", liba_info, loaders) == str(chain / "libs/libb.so")


def test_runpath_turns_the_loaders_rpath_off(chain, tmp_path):
    shutil.copy(chain / "libs/liba.so", tmp_path / "liba.so")
    subprocess.run([shutil.which("cc") or "gcc", "-shared", "-fPIC", "-o",
                    str(tmp_path / "libr.so"), str(chain / "a.c"), "-L" + str(chain / "libs"),
                    "-lb", "-Wl,--enable-new-dtags,-rpath,/nonexistent"], check=True)
    resolver = rootfs_elf.Resolver()
    info = resolver.info(str(tmp_path / "libr.so"))
    assert info.runpath == ["/nonexistent"]
    assert resolver.resolve(str(tmp_path / "libr.so"), "libb.so", info,
                            (str(chain / "libs"),)) is None


def test_a_package_finds_no_library_outside_the_tree_by_its_own_paths(chain, tmp_path):
    """A package's ELF file names its library search paths and may name libraries by absolute
    path: outside the tree being built, neither counts (the builder would copy a host file it
    chose, root's for a system rootfs, into a tree every jail reads)."""
    tree = tmp_path / "tree"
    tree.mkdir()
    outside = chain / "libs"                 # a host directory, not the tree
    cc = shutil.which("cc") or "gcc"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(tree / "ext.so"), str(chain / "ext.c"),
                    "-L" + str(outside), "-la", "-Wl,--disable-new-dtags,-rpath," + str(outside)],
                   check=True)
    ext = str(tree / "ext.so")
    info = rootfs_elf.Resolver().info(ext)
    assert info.rpath == [str(outside)]
    # Without a tree (the host's own files), as the loader would; with one, not outside it.
    assert rootfs_elf.Resolver().resolve(ext, "liba.so", info) == str(outside / "liba.so")
    confined = rootfs_elf.Resolver(str(tree))
    assert confined.resolve(ext, "liba.so", info) is None
    assert confined.resolve(ext, str(outside / "liba.so"), info) is None
    # Inside the tree, both still work.
    shutil.copytree(outside, tree / "libs")
    assert confined.resolve(ext, str(tree / "libs/liba.so"), info) == str(tree / "libs/liba.so")
    assert confined.resolve(ext, "liba.so", info, (str(tree / "libs"),)) == \
        str(tree / "libs/liba.so")
