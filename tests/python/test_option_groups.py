"""The rarer settings of run(), Session, AsyncSession and Pool in small typed groups
(Limits, OutputCaps, Callbacks), and the keywords they replaced: still taken for one
release, each with a DeprecationWarning naming its replacement, to the same effect."""

import asyncio
import warnings

import pytest

import pyjail
from pyjail import _run, _session


class _Launched(Exception):
    """Stands in for starting pyjail: carries the arguments it was given."""


@pytest.fixture
def launched(monkeypatch):
    """run() and Session raise _Launched(options) where they would start pyjail."""
    def fake_launch(binary, options, program, **kwargs):
        raise _Launched(options)
    monkeypatch.setattr(_run, "launch", fake_launch)
    monkeypatch.setattr(_session, "launch", fake_launch)
    monkeypatch.delenv("PYJAIL_AUDIT_LOG", raising=False)


def args_of(make):
    with pytest.raises(_Launched) as info:
        make()
    return info.value.args[0]


# (old keyword, its value, the same in the new form)
RUN_MOVED = [
    ("cpu_time", 5, {"limits": pyjail.Limits(cpu_time=5)}),
    ("pids", 32, {"limits": pyjail.Limits(pids=32)}),
    ("tmpfs_size", "64M", {"limits": pyjail.Limits(tmpfs_size="64M")}),
    ("output_limit", "1M", {"limits": pyjail.Limits(output_limit="1M")}),
    ("ro_bind", ["/usr:/mnt"], {"options": {"ro_bind": ["/usr:/mnt"]}}),
    ("net_resolve", {"a.test": "10.0.0.1"}, {"options": {"net_resolve": {"a.test": "10.0.0.1"}}}),
    ("extra_args", ["--verbose"], {"options": {"verbose": True}}),
]
SESSION_MOVED = RUN_MOVED[:3] + RUN_MOVED[4:] + [
    ("wall_time", 30, {"limits": pyjail.Limits(wall_time=30)})]


@pytest.mark.no_binary
@pytest.mark.parametrize("old,value,new", RUN_MOVED, ids=[m[0] for m in RUN_MOVED])
def test_runs_old_keywords_warn_and_give_the_same_command_line(launched, old, value, new):
    with pytest.warns(DeprecationWarning) as caught:
        before = args_of(lambda: pyjail.run("pass", **{old: value}))
    assert len(caught) == 1
    message = str(caught[0].message)
    assert message.startswith("run(%s=...) is deprecated and goes in the next release: use "
                              % old), message
    group = next(iter(new))
    assert ("%s=pyjail.%s(" % (group, type(new[group]).__name__) in message
            if group != "options" else "options={" in message), message
    assert caught[0].filename == __file__      # it points at the caller
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert args_of(lambda: pyjail.run("pass", **new)) == before


@pytest.mark.no_binary
@pytest.mark.parametrize("old,value,new", SESSION_MOVED, ids=[m[0] for m in SESSION_MOVED])
def test_sessions_old_keywords_warn_and_give_the_same_command_line(launched, old, value, new):
    with pytest.warns(DeprecationWarning, match=r"^Session\(%s=\.\.\.\) is deprecated" % old):
        before = args_of(lambda: pyjail.Session(**{old: value}))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert args_of(lambda: pyjail.Session(**new)) == before


@pytest.mark.no_binary
def test_mistakes_are_errors(launched):
    with pytest.raises(TypeError, match="unexpected keyword argument 'cpu_tme'"):
        pyjail.run("pass", cpu_tme=5)
    with pytest.raises(TypeError, match="unexpected keyword argument 'max_output_files'"):
        pyjail.Session(max_output_files=5)
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="given twice"):
        pyjail.run("pass", cpu_time=5, limits=pyjail.Limits(cpu_time=6))
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="given twice"):
        pyjail.Session(net_resolve=["a:1.2.3.4"], options={"net-resolve": "b:1.2.3.4"})
    with pytest.raises(ValueError, match="max_image_bytes does not apply to run()"):
        pyjail.run("pass", caps=pyjail.OutputCaps(max_image_bytes=1))
    with pytest.raises(ValueError, match="max_output_files does not apply to a Session"):
        pyjail.Session(caps=pyjail.OutputCaps(max_output_files=1))
    with pytest.raises(ValueError, match="must be an int"):
        pyjail.run("pass", caps=pyjail.OutputCaps(max_output="1M"))
    with pytest.raises(ValueError, match="wall time once"):
        pyjail.run("pass", timeout=1, limits=pyjail.Limits(wall_time=2))
    with pytest.raises(TypeError, match="pyjail.Limits"):
        pyjail.run("pass", limits={"cpu_time": 5})
    # run()'s wall time may also come from Limits.
    assert args_of(lambda: pyjail.run("pass", limits=pyjail.Limits(wall_time=2))) == \
        args_of(lambda: pyjail.run("pass", timeout=2))


def test_the_groups_take_effect_and_so_do_the_old_keywords():
    limits = pyjail.Limits(cpu_time=5, pids=40, output_limit="10M")
    got = []
    r = pyjail.run("print('x' * 100)", limits=limits, caps=pyjail.OutputCaps(max_output=10),
                   callbacks=pyjail.Callbacks(on_stdout=got.append))
    assert r.ok and len(r.stdout_bytes) == 10 and r.stdout_omitted == 91
    assert "".join(got) == "x" * 10
    assert r.report.limits["pids"]["value"] == "40"
    assert r.report.limits["cpu-time"]["value"] == "5"
    old = []
    with pytest.warns(DeprecationWarning):
        r = pyjail.run("print('x' * 100)", cpu_time=5, pids=40, output_limit="10M",
                       max_output=10, on_stdout=old.append)
    assert r.stdout_omitted == 91 and old == got
    assert r.report.limits["pids"]["value"] == "40"
    # A run's collected files, and a session's output per cell.
    r = pyjail.run("for i in range(3): open('f%d' % i, 'w').write('x')", outputs=True,
                   caps=pyjail.OutputCaps(max_output_files=2))
    assert len(r.files) == 2 and len(r.skipped_files) == 1
    with pyjail.Session(caps=pyjail.OutputCaps(max_output=10), limits=limits) as s:
        assert s.run("print('y' * 100)").stdout_omitted == 91
        assert s.max_output == 10
        with pytest.warns(DeprecationWarning, match="use Session.max_output"):
            assert s.output_limit == 10
    with pytest.warns(DeprecationWarning, match=r"Session\(output_limit=\.\.\.\)"):
        with pyjail.Session(output_limit=10) as s:
            assert s.run("print('y' * 100)").stdout_omitted == 91


def test_arun_takes_callbacks_and_its_old_keywords():
    async def main():
        got, old = [], []
        r = await pyjail.arun("print('hi')", callbacks=pyjail.Callbacks(on_stdout=got.append))
        with pytest.warns(DeprecationWarning, match=r"arun\(on_stdout=\.\.\.\)"):
            await pyjail.arun("print('hi')", on_stdout=old.append)
        return r, got, old
    r, got, old = asyncio.run(main())
    assert r.stdout == "hi\n" and "".join(got) == "hi\n" and "".join(old) == "hi\n"


def test_a_pool_takes_limits_as_its_runs_bound():
    with pyjail.Pool(limits=pyjail.Limits(cpu_time=5)) as pool:
        r = pool.run("print(1)", limits=pyjail.Limits(pids=20))
        assert r.ok and r.report.limits["cpu-time"]["value"] == "5"
        assert r.report.limits["pids"]["value"] == "20"
        with pytest.raises(pyjail.JailError, match="cpu"):
            pool.run("print(1)", limits=pyjail.Limits(cpu_time=50))
        with pool.session(limits=pyjail.Limits(wall_time=60)) as s:
            assert s.run("6 * 7").value == "42"
