"""The README's examples of the Python package work as written."""

import os
import re
import subprocess
import sys

import pytest

from pyjail_testing.package import REPO, import_or_skip


def section():
    text = (REPO / "README.md").read_text()
    start = text.index("## The Python package")
    end = text.index("\n## ", start + 1)
    return text[start:end]


def examples():
    return re.findall(r"```python\n(.*?)```", section(), re.S)


def run_example(code, pyjail_bin):
    # As a user would have it: pyjail on PATH, the package importable.
    env = dict(os.environ)
    env.pop("PYJAIL_BIN", None)
    env["PATH"] = os.path.dirname(pyjail_bin) + os.pathsep + env.get("PATH", "")
    env["PYTHONPATH"] = str(REPO / "python")
    return subprocess.run([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=120)


def find(marker):
    found = [c for c in examples() if marker in c]
    assert len(found) == 1, marker
    return found[0]


def test_langchain_example(pyjail_bin):
    import_or_skip("langchain_core")
    code = find("tool = PythonREPLTool()")
    assert len([l for l in code.splitlines() if l.strip()]) <= 10
    r = run_example(code, pyjail_bin)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert out.startswith("2432902008176640000\n\n2432\n\n")
    assert "jail:x:1000" in out
    assert "Execution timed out after 2 s" in out
    assert out.endswith("True\n\n")


def test_smolagents_example(pyjail_bin):
    import_or_skip("smolagents")
    code = find("pyjail.smolagents")
    assert len([l for l in code.splitlines() if l.strip()]) <= 10
    r = run_example(code, pyjail_bin)
    assert r.returncode == 0, r.stderr
    assert r.stdout.rstrip().endswith("2432902008176640000")


def test_run_and_session_examples(pyjail_bin):
    r = run_example(find("pyjail.run("), pyjail_bin)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("3\n 0 ok ") and "{'out.txt': b'ABC'}" in r.stdout
    r = run_example(find("pyjail.Session("), pyjail_bin)
    assert r.returncode == 0, r.stderr
    assert "half: 1.5707963267948966\n 6.283185307179586" in r.stdout
    assert "True 3.141592653589793" in r.stdout
    assert "ZeroDivisionError" in r.stdout


def test_async_streaming_and_images_examples(pyjail_bin):
    r = run_example(find("pyjail.AsyncSession("), pyjail_bin)
    assert r.returncode == 0, r.stderr
    # (Lines written close together may come in one call of on_stdout.)
    assert r.stdout.startswith("live: step 0\n") and "step 1\nlive: step 2\n" in \
        r.stdout.replace("step 1\nstep 2", "step 1\nlive: step 2"), r.stdout
    assert r.stdout.endswith("step 2\n'done'\n['0\\n', '1\\n', '4\\n']\n"), r.stdout


def test_images_example(pyjail_bin, data_rootfs):
    r = run_example(find("print(r.images"), pyjail_bin)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("[Image(mime='image/png', ") and r.stdout.endswith(
        " bytes)] b'\\x89PNG'\n"), r.stdout


def test_pip_in_a_session_example(pyjail_bin, data_rootfs, tmp_path):
    # As written, but against the tests' own index (holding a "humanize" the test builds)
    # in place of PyPI's hosts.
    from pyjail_testing.web import make_wheel, package_index
    code = find("'humanize'")
    pypi = 'pypi = ["pypi.org", "files.pythonhosted.org"]'
    assert pypi in code and "allow_hosts=pypi)" in code
    wheel = make_wheel(tmp_path, "humanize", "humanize", source=(
        "def naturalsize(n):\n    return '%.1f MB' % (n / 1e6)\n"))
    with package_index([wheel]) as index:
        code = code.replace(pypi, "pypi = [%r]" % index.host).replace(
            "allow_hosts=pypi)", "allow_hosts=pypi, options={'net_resolve': %r}, env=%r)"
            % (index.resolve, index.pip_env))
        r = run_example(code, pyjail_bin)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "'3.0 MB'\n"
