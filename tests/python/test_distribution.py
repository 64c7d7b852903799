"""The Python package's distribution: its PyPI name, clean metadata, and install hints that
name it (the name "pyjail" on PyPI belongs to an unrelated project)."""

import os
import re
import subprocess
import sys
import zipfile

import pytest

from pyjail_testing.package import REPO, need

DIST = "pyjail-sandbox"
FOREIGN = "py" + "jail"   # spelt in two so that this file does not match its own patterns


def _install_hints_of_the_foreign_name(text):
    """Lines that tell users to pip install the foreign distribution: its bare name, with
    extras or a version, in a pip command, or quoted with extras anywhere (a path such as
    ./python or 'python/[test]' and our own name are fine)."""
    bad = []
    foreign = re.compile(r"""(?<![\w./-])['"]?%s(?:\[[^\]]*\])?(?:[<>=!~][^\s'"]*)?['"]?"""
                         r"""(?![\w./-])""" % FOREIGN)
    for line in text.splitlines():
        m = re.search(r"\bpip3?\s+(?:install|download|wheel)\b(.*)", line)
        if m and foreign.search(m.group(1).split("#")[0]):
            bad.append(line.strip())
        if re.search(r"""(?<![\w./-])['"]%s\[""" % FOREIGN, line):
            bad.append(line.strip())
    return bad


@pytest.mark.no_binary
def test_the_pattern_finds_the_foreign_name_and_spares_ours():
    for line in ["pip install %s" % FOREIGN, "  pip install '%s[langchain]'" % FOREIGN,
                 "(``pip install '%s[smolagents]'``)" % FOREIGN, "pip3 install -U %s==0.1" % FOREIGN,
                 'extras = "%s[test]"' % FOREIGN]:
        assert _install_hints_of_the_foreign_name(line), line
    for line in ["pip install ./python", "pip install './python[langchain]'",
                 "pip install 'python/[test]'", "pip install %s" % DIST,
                 "pip install '%s[langchain]'" % DIST, "pip install foo  # then run %s" % FOREIGN,
                 "%s --profile strict -- python x.py" % FOREIGN]:
        assert not _install_hints_of_the_foreign_name(line), line


@pytest.mark.no_binary
def test_no_text_in_the_repository_installs_the_foreign_package():
    files = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z"], stdout=subprocess.PIPE,
                           check=True).stdout.decode().split("\0")
    need(len(files) > 10, "not a git checkout")
    bad = []
    for name in filter(None, files):
        path = REPO / name
        try:
            data = path.read_bytes()
        except (IsADirectoryError, FileNotFoundError):
            continue
        if b"\0" in data[:4096]:
            continue     # binary
        bad += ["%s: %s" % (name, l)
                for l in _install_hints_of_the_foreign_name(data.decode("utf-8", "replace"))]
    assert not bad, "install hints that name the unrelated PyPI project:\n" + "\n".join(bad)


@pytest.mark.no_binary
def test_distribution_name_and_licence():
    import tomllib
    meta = tomllib.loads((REPO / "python" / "pyproject.toml").read_text())
    assert meta["project"]["name"] == DIST
    # An SPDX expression (PEP 639): the TOML-table form is deprecated by setuptools.
    assert meta["project"]["license"] == "Apache-2.0"
    assert not any("License ::" in c for c in meta["project"]["classifiers"])
    assert "Operating System :: POSIX :: Linux" in meta["project"]["classifiers"]


@pytest.mark.no_binary
def test_the_wheel_builds_without_warnings(tmp_path):
    try:
        import setuptools
        version = tuple(int(x) for x in setuptools.__version__.split(".")[:2])
    except (ImportError, ValueError):
        version = (0, 0)
    need(version >= (77, 0), "setuptools >= 77 is needed (tests/python/requirements.txt)")
    import shutil
    src = tmp_path / "src"
    shutil.copytree(str(REPO / "python"), str(src),
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    out = tmp_path / "dist"
    out.mkdir()
    # The build backend as pip runs it, with every warning shown.
    r = subprocess.run([sys.executable, "-W", "always", "-c",
                        "import sys; from setuptools import build_meta as b; "
                        "print(b.build_wheel(sys.argv[1]))", str(out)],
                       cwd=str(src), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True, timeout=300,
                       env=dict(os.environ, PYTHONDONTWRITEBYTECODE=""))
    assert r.returncode == 0, r.stdout
    assert "Deprecat" not in r.stdout and "SetuptoolsWarning" not in r.stdout, r.stdout
    wheel, = out.glob("pyjail_sandbox-*.whl")
    with zipfile.ZipFile(str(wheel)) as z:
        metadata = z.read([n for n in z.namelist() if n.endswith(".dist-info/METADATA")][0])
    lines = metadata.decode().splitlines()
    assert "Name: %s" % DIST in lines and "License-Expression: Apache-2.0" in lines
