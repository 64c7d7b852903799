"""Controlled egress in AsyncSession and the agent adapters: they take net/allow_hosts/
net_resolve as Session does, tell the model which hosts it can reach, and smolagents'
additional_imports are distributions, pip-installed in the session from an allowed index."""

import asyncio
import tempfile

import pytest

import pyjail
from pyjail_testing.package import import_or_skip
from pyjail_testing.web import hello_server, make_wheel, package_index

DIST, MODULE = "pj-tiny-widget", "tinywidget"


@pytest.fixture(scope="module")
def tiny_wheel():
    with tempfile.TemporaryDirectory() as d:
        yield make_wheel(d, DIST, MODULE)


def test_an_async_session_takes_the_egress_options():
    async def main(port):
        async with pyjail.AsyncSession(net="allow", allow_hosts=[f"web.test:{port}"],
                                       options={"net_resolve": {"web.test": "127.0.0.1"}}) as s:
            r = await s.run(f"import urllib.request\n"
                            f"urllib.request.urlopen('http://web.test:{port}/').read().decode()",
                            want_data=True)
            return s.egress, r.data

    with hello_server() as port:
        egress, body = asyncio.run(main(port))
    assert egress == ("allow", [f"web.test:{port}"])
    assert body == f"hello web.test:{port}"
    assert pyjail.AsyncSession(net="allow", allow_hosts=["a.test"]).egress == ("allow", ["a.test"])


def test_net_resolve_takes_a_dict_a_list_or_one_pair():
    from pyjail._common import option_args
    assert option_args({"net_resolve": {"a.test": "127.0.0.1"}}) == [
        "--net-resolve", "a.test:127.0.0.1"]
    assert option_args({"net_resolve": ["a.test:10.0.0.1"]}) == [
        "--net-resolve", "a.test:10.0.0.1"]
    assert option_args({"net_resolve": "a.test:10.0.0.1"}) == ["--net-resolve", "a.test:10.0.0.1"]


def test_langchain_tools_name_the_reachable_hosts():
    import_or_skip("langchain_core")
    from pyjail.langchain import PythonAstREPLTool, PythonREPL, PythonREPLTool

    with hello_server() as port:
        host = f"web.test:{port}"
        tool = PythonREPLTool(python_repl=PythonREPL(
            net="allow", allow_hosts=[host], options={"net_resolve": {"web.test": "127.0.0.1"}}))
        try:
            assert f"The network reaches only these hosts (a port after the colon; else 80 and " \
                   f"443): {host}. Nothing else is reachable" in tool.description
            assert "no network" not in tool.description
            out = tool.run(f"import urllib.request\n"
                           f"print(urllib.request.urlopen('http://{host}/').read().decode())")
            assert out == f"hello {host}\n"
        finally:
            tool.close()
    ast_tool = PythonAstREPLTool()
    try:
        assert "There is no network in this sandbox" in ast_tool.description
        assert "reaches only" not in ast_tool.description
    finally:
        ast_tool.close()


def _smolagents():
    import_or_skip("smolagents")
    from pyjail._agents import MissingModuleError
    from pyjail.smolagents import PyjailExecutor
    return PyjailExecutor, MissingModuleError


def test_smolagents_additional_imports_are_distributions_or_modules(data_rootfs):
    PyjailExecutor, MissingModuleError = _smolagents()
    # pillow is the data rootfs's (its lock lists the distribution; it provides PIL).
    with PyjailExecutor(["pillow", "PIL", "scikit-learn", "numpy.*"], rootfs=data_rootfs) as ex:
        assert ex("import PIL.Image\nPIL.Image.new('L', (2, 3)).size").output == (2, 3)
    with pytest.raises(MissingModuleError) as info:
        PyjailExecutor([DIST, "pillow"], rootfs=data_rootfs)
    message = str(info.value)
    assert f"has no package '{DIST}' (named in additional_imports" in message, message
    assert "no allowed package index" in message and "net='allow'" in message, message
    assert info.value.name == DIST


def test_smolagents_installs_a_missing_distribution_from_the_allowed_index(data_rootfs, tiny_wheel):
    PyjailExecutor, MissingModuleError = _smolagents()
    with package_index([tiny_wheel]) as index:
        with PyjailExecutor([DIST, "pillow"], rootfs=data_rootfs, net="allow",
                            allow_hosts=[index.host], options={"net_resolve": index.resolve},
                            env=index.pip_env) as ex:
            assert ex(f"import {MODULE}\n{MODULE}.VALUE").output == 42
            # A new interpreter (its /tmp gone with the old jail) gets it again.
            with pytest.raises(Exception):
                ex("import os\nos._exit(3)")
            assert ex(f"import {MODULE}\n{MODULE}.VALUE").output == 42
            facts = ex.describe()
            assert f"reaches only these hosts (a port after the colon; else 80 and 443): " \
                   f"{index.host}. Nothing else" in facts, facts
            assert "pip', 'install', '--target', '/tmp/site-packages'" in facts, facts
        assert index.requests.count(f"/simple/{DIST}/") == 2, index.requests
        # A distribution the index does not have: pip's own words, and the fix.
        with pytest.raises(MissingModuleError, match=r"has no package 'pj-no-such' .* pip could "
                                                     r"not install it in the session .*No matching "
                                                     r"distribution"):
            PyjailExecutor(["pj-no-such"], rootfs=data_rootfs, net="allow",
                           allow_hosts=[index.host], options={"net_resolve": index.resolve},
                           env=index.pip_env)


def test_a_missing_module_note_points_at_pip_only_with_an_index_in_reach():
    from pyjail._agents import JailFacts, missing_module_note
    from pyjail._session import CellError
    err = CellError(type="ModuleNotFoundError", message="No module named 'torch'", traceback="")
    closed = JailFacts(rootfs="data", packages=["numpy", "pip"])
    assert "nothing can be installed here (no network, no pip)" in missing_module_note(err, closed)
    open_ = JailFacts(rootfs="data", packages=["numpy", "pip"], network=True, hosts=["pypi.org"])
    note = missing_module_note(err, open_)
    assert "pip can install a package from the package index if it is one of the reachable " \
           "hosts (pypi.org), with --target '/tmp/site-packages'" in note, note
