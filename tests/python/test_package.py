"""`pip install ./python` gives a working, typed package."""

import os
import shutil
import subprocess
import sys
import zipfile

from pyjail_testing.package import REPO, need


def test_wheel_builds_installs_and_runs(tmp_path, pyjail_bin):
    try:
        import setuptools  # the build backend, used without build isolation
        import wheel  # noqa: F401
        # 77: the first that reads pyproject's `license` as an SPDX expression.
        have_backend = tuple(int(x) for x in setuptools.__version__.split(".")[:2]) >= (77, 0)
    except (ImportError, ValueError):
        have_backend = False
    need(have_backend, "setuptools >= 77 and wheel are needed to build the wheel offline")
    # Built from a copy: a build leaves build/ and *.egg-info behind.
    src = tmp_path / "src"
    shutil.copytree(str(REPO / "python"), str(src),
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                        "-q", "-w", str(tmp_path / "dist"), str(src)],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    wheels = list((tmp_path / "dist").glob("pyjail_sandbox-*.whl"))
    assert len(wheels) == 1
    names = set(zipfile.ZipFile(wheels[0]).namelist())
    for f in ("__init__.py", "_server.py", "_spawn.py", "_wire.py", "_session.py", "_run.py",
              "_launch.py", "langchain.py",
              "smolagents.py", "deepagents.py", "langchain_tools.py", "_shell.py",
              "py.typed"):
        assert "pyjail/" + f in names, f
    target = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target",
                        str(target), str(wheels[0])], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, universal_newlines=True, timeout=300)
    assert r.returncode == 0, r.stderr
    env = dict(os.environ, PYTHONPATH=str(target), PYJAIL_BIN=pyjail_bin)
    r = subprocess.run([sys.executable, "-c",
                        "import pyjail, sys\n"
                        "assert pyjail.__file__.startswith(sys.argv[1]), pyjail.__file__\n"
                        "with pyjail.Session() as s:\n"
                        "    print(s.run('6 * 7').value)\n"
                        "print(pyjail.run('print(1)').stdout, end='')",
                        str(target)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "42\n1\n"


def test_every_exported_error_is_one_the_host_can_catch():
    # An exception class the package exports is one its host-side code raises: a
    # PyjailError. (A host function's failure reaches the host as a cell's error.type.)
    import pyjail
    errors = [name for name in pyjail.__all__ if isinstance(getattr(pyjail, name), type) and
              issubclass(getattr(pyjail, name), BaseException)]
    assert "ProtocolError" in errors and "SessionDiedError" in errors
    for name in errors:
        assert issubclass(getattr(pyjail, name), pyjail.PyjailError), name
    assert not hasattr(pyjail, "HostFunctionError")
