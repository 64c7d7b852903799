"""options= by name -> pyjail's command line: one mapping (option_args) for run(), Session
and Pool, checked against every option of the binary's option table (options.cpp under jail/)."""

import re

import pytest

from pyjail_testing import REPO
from pyjail._common import FLAG_OPTIONS, jail_args, option_args

pytestmark = pytest.mark.no_binary


def option_table():
    """(name, kind) of every row of the table, in its order."""
    # Wherever under jail/ the table's source lives.
    sources = sorted((REPO / "jail").glob("**/options.cpp"))
    assert len(sources) == 1, sources
    rows = re.findall(r'\{"([a-z0-9-]+)",\s*OptKind::(\w+)', sources[0].read_text())
    assert len(rows) > 30, "the option table was not found in %s" % sources[0]
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
