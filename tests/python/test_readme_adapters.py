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


def test_the_langchain_images_example(pyjail_bin, data_rootfs):
    code = find("content_and_artifact")
    r = run_example(code, pyjail_bin)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("['image'] [Image(mime='image/png', "), r.stdout


def install_lines():
    block = re.search(r"```\n(python3 -m venv .*?)```", section(), re.S).group(1)
    return [l.split("  #")[0].strip() for l in block.strip().splitlines()]


def test_every_example_runs_in_a_fresh_venv_made_as_the_readme_says(tmp_path, pyjail_bin,
                                                                     data_rootfs):
    """A venv made by the README's own lines, from a copy of the checkout's package, with
    nothing lent from this one: every Python example of the package's section then runs in it,
    importing the installed package. The wheels come from $PYJAIL_TEST_WHEELHOUSE when it is
    set (tests/run.sh downloads the test requirements' wheels there once; pip installs
    offline from them, the command as written: PIP_NO_INDEX and PIP_FIND_LINKS are pip's own
    settings), else from the package index through pip's cache."""
    lines = install_lines()
    assert len(lines) == 2 and lines[0].startswith("python3 -m venv ~/.venvs/pyjail")
    home = tmp_path / "home"
    home.mkdir()
    env = dict(os.environ, HOME=str(home), PIP_DISABLE_PIP_VERSION_CHECK="1",
               PYTHONDONTWRITEBYTECODE="1")
    for key in ("PYTHONPATH", "PYJAIL_BIN", "VIRTUAL_ENV", "PIP_FIND_LINKS", "PIP_NO_INDEX"):
        env.pop(key, None)
    wheels = os.environ.get("PYJAIL_TEST_WHEELHOUSE")
    if wheels:
        need(os.path.isdir(wheels), "$PYJAIL_TEST_WHEELHOUSE %s is not a directory" % wheels)
        env.update(PIP_NO_INDEX="1", PIP_FIND_LINKS=wheels)
    import shutil
    checkout = tmp_path / "checkout"
    shutil.copytree(str(REPO / "python"), str(checkout / "python"),
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    # The README's lines, run by a shell as a user would paste them (Debian's python3, whose
    # own venv is where the package goes).
    for line in lines:
        r = subprocess.run(["/bin/sh", "-c", line], env=env, cwd=str(checkout),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           universal_newlines=True, timeout=900)
        assert r.returncode == 0, "%s\n%s" % (line, r.stdout[-4000:])
    python = home / ".venvs" / "pyjail" / "bin" / "python"
    env["PATH"] = os.path.dirname(pyjail_bin) + os.pathsep + env.get("PATH", "")
    examples = re.findall(r"```python\n(.*?)```", section(), re.S)
    assert len(examples) >= 8
    for code in examples:
        r = subprocess.run([str(python), "-c", code], env=env, cwd=str(home),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True, timeout=300)
        assert r.returncode == 0, "%s\n---\n%s" % (code, r.stderr[-4000:])
    r = subprocess.run([str(python), "-c", "import pyjail; print(pyjail.__file__)"], env=env,
                       cwd=str(home), stdout=subprocess.PIPE, universal_newlines=True, timeout=60)
    assert r.stdout.startswith(str(home / ".venvs" / "pyjail"))
