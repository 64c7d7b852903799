"""The README's install commands and its agent-adapter examples work as written."""

import os
import re
import shlex
import subprocess
import sys

import pytest

from pyjail_testing.package import REPO, import_or_skip, need
from test_readme import find, run_example, section


def test_the_pandas_agent_example(pyjail_bin, data_rootfs):
    import_or_skip("pandas")
    import_or_skip("tabulate")
    import_or_skip("langchain_classic")
    code = find("create_pandas_dataframe_agent")
    assert len([l for l in code.splitlines() if l.strip()]) <= 10
    r = run_example(code, pyjail_bin)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "{'Oslo': 20.0, 'Rome': 3.0}\n23.0\n"


@pytest.mark.no_binary
def test_the_install_commands(tmp_path):
    """The README's venv and pip lines, run as written (pip offline: the build backend and
    the extras' libraries are this interpreter's)."""
    import_or_skip("langchain_core")
    import_or_skip("smolagents")
    try:
        import setuptools
        new_enough = tuple(int(x) for x in setuptools.__version__.split(".")[:2]) >= (77, 0)
    except (ImportError, ValueError):
        new_enough = False
    need(new_enough, "setuptools >= 77 is needed to build the package offline")
    block = re.search(r"```\n(python3 -m venv .*?)```", section(), re.S).group(1)
    lines = [l.split("#")[0].strip() for l in block.strip().splitlines()]
    assert lines[0].startswith("python3 -m venv ~/.venvs/pyjail")
    assert lines[1].startswith("~/.venvs/pyjail/bin/pip install ")
    home = tmp_path / "home"
    home.mkdir()
    venv = home / ".venvs" / "pyjail"
    env = dict(os.environ, HOME=str(home), PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1",
               PYTHONDONTWRITEBYTECODE="1")
    # A copy of the checkout's package: a build leaves build/ and *.egg-info behind.
    import shutil
    checkout = tmp_path / "checkout"
    shutil.copytree(str(REPO / "python"), str(checkout / "python"),
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    # The venv as the README makes it, from this interpreter, which then lends it the
    # libraries the extras name (no index: nothing is downloaded).
    argv = [a.replace("~", str(home), 1) for a in shlex.split(lines[0])]
    r = subprocess.run([sys.executable] + argv[1:], env=env, cwd=str(checkout),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True, timeout=300)
    assert r.returncode == 0, r.stdout
    site = subprocess.run([str(venv / "bin" / "python"), "-c",
                           "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          stdout=subprocess.PIPE, universal_newlines=True, check=True).stdout
    import sysconfig
    ours = [sysconfig.get_paths()["purelib"]]
    ours += [p for p in sys.path if p.endswith("-packages") and p not in ours]   # in order
    (venv / site.strip() / "host-libraries.pth").write_text("\n".join(ours) + "\n")
    # The venv's own setuptools may be older than 77 (Debian 12's is 66): this one's builds.
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "uninstall", "-q", "-y",
                    "setuptools"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                   timeout=120)
    pip = [a.replace("~", str(home), 1) for a in shlex.split(lines[1])]
    r = subprocess.run(pip + ["--no-build-isolation"], env=env, cwd=str(checkout),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True, timeout=300)
    assert r.returncode == 0, r.stdout
    assert "Deprecat" not in r.stdout, r.stdout
    r = subprocess.run([str(venv / "bin" / "python"), "-c",
                        "import importlib.metadata as m, pyjail, pyjail.langchain, "
                        "pyjail.smolagents; print(m.version('pyjail-sandbox'), "
                        "pyjail.__file__.startswith(%r))" % str(venv)],
                       env=env, cwd=str(home), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "0.1.0 True\n"
