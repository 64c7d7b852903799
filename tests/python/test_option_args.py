"""options= by name -> pyjail's command line: one mapping (option_args) for run(), Session
and Pool, checked against every option of the binary's option table (jail/plan/options.cpp)."""

import re

import pytest

from pyjail_testing import REPO
import pyjail
from pyjail import Limits
from pyjail._common import FLAG_OPTIONS, jail_args, option_args

pytestmark = pytest.mark.no_binary


def option_table():
    """(name, kind) of every row of the table, in its order."""
    text = (REPO / "jail" / "plan" / "options.cpp").read_text()
    rows = re.findall(r'\{"([a-z0-9-]+)",\s*OptKind::(\w+)', text)
    assert len(rows) > 30, "the option table was not found in jail/plan/options.cpp"
    return rows


@pytest.mark.parametrize("name,kind", option_table())
def test_every_option_of_the_table_maps_by_either_spelling(name, kind):
    for key in {name, name.replace("-", "_")}:
        if kind == "Flag":
            assert option_args({key: True}) == ["--" + name]
            assert option_args({key: False}) == []
            with pytest.raises(ValueError, match="is a flag"):
                option_args({key: "yes"})
        elif kind == "List":
            assert option_args({key: ["a", "b"]}) == ["--" + name, "a", "--" + name, "b"]
            assert option_args({key: "a"}) == ["--" + name, "a"]
        else:
            assert kind == "Text", kind
            assert option_args({key: "some-value"}) == ["--" + name, "some-value"]
        assert option_args({key: None}) == []


def test_the_flags_are_the_tables_flags():
    assert FLAG_OPTIONS == {name for name, kind in option_table() if kind == "Flag"}


def test_values_are_written_as_pyjail_reads_them():
    assert option_args({"cpus": 0.5, "wall_time": 3.0, "memory": 64 << 20, "cpu_time": 1e-7}) == [
        "--cpus", "0.5", "--wall-time", "3", "--memory", "67108864", "--cpu-time", "0.0000001"]
    assert option_args({"env": {"A": "1", "B": "x=y"}}) == ["--env", "A=1", "--env", "B=x=y"]
    assert option_args({"allow_sensitive_bind": True, "quiet": False}) == ["--allow-sensitive-bind"]
    for bad in ("--memory", "", "memory=1G"):
        with pytest.raises(ValueError, match="option name"):
            option_args({bad: "1G"})


def test_run_session_and_pool_map_options_the_same_way(monkeypatch):
    # run() and Session build their arguments with jail_args, which maps options= (and its
    # own keyword settings) through option_args; a Pool's options come first, as defaults
    # that the call's own replace (pyjail takes the last of an option given twice).
    monkeypatch.delenv("PYJAIL_AUDIT_LOG", raising=False)
    args = jail_args(profile="strict", memory="1G", env={"A": "1"},
                     options={"cpu_time": 5, "quiet": True},
                     defaults=option_args({"memory": "64M", "wall_time": 3}))
    assert args == ["--profile", "strict", "--memory", "64M", "--wall-time", "3",
                    "--memory", "1G", "--env", "A=1", "--cpu-time", "5", "--quiet"]


@pytest.mark.parametrize("keywords, options", [
    ({"memory": "1G"}, {"memory": "2G"}),
    ({"limits": Limits(cpu_time=5)}, {"cpu_time": 10}),
    ({"limits": Limits(pids=8)}, {"pids": 64}),
    ({"wall_time": 3}, {"wall-time": 30}),
    ({"allow_hosts": ["pypi.org"]}, {"allow_host": ["example.com"]}),
    ({"profile": "strict"}, {"profile": "standard"}),
])
def test_a_setting_given_twice_is_refused(keywords, options):
    # A limit given by its keyword (or in Limits) and again in options=: refused, where the
    # later option used to win silently and drop the limit the caller set.
    with pytest.raises(ValueError, match="given twice"):
        jail_args(options=options, **keywords)


def test_a_pool_refuses_a_setting_given_twice(monkeypatch):
    monkeypatch.delenv("PYJAIL_AUDIT_LOG", raising=False)
    with pytest.raises(ValueError, match="given twice"):
        pyjail.Pool(size=1, limits=Limits(cpu_time=5), options={"cpu-time": 10})
    # Given once, in either place, it is taken (and an option left None is not given).
    assert jail_args(limits=Limits(cpu_time=5), options={"cpu_time": None, "pids": 8}) == [
        "--cpu-time", "5", "--pids", "8"]
