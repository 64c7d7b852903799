"""Async calls, streamed output and rich results (issue: what agent frameworks expect):
the driver's checks of the new frames against a stand-in hostile jail (no binary needed),
then the real thing in jails: AsyncSession and arun(), on_stdout/on_stderr callbacks,
images of figures and top-level await."""

import asyncio
import os
import time

import pytest

import pyjail

from test_hostile_jail import drive, hostile  # noqa: F401  (a fixture)


# ------------------------------------------------------------------ forged frames

@pytest.mark.no_binary
@pytest.mark.parametrize("attack,why", [
    ("image-mime", "bad image entry"),
    ("image-count", "bad list of images"),
    ("image-sizes", "body length mismatch"),
    ("image-over-cap", "over max_image_bytes"),
    ("output-over-cap", "streamed output over max_output"),
    ("output-other-id", "'output' frame while a cell ran"),
])
def test_forged_images_and_output_break_the_protocol(hostile, attack, why):
    out = drive("""
        s = pyjail.Session(caps=pyjail.OutputCaps(max_output=1000, max_image_bytes=1 << 20))
        got = []
        try:
            r = s.run("x", on_stdout=got.append)
            out["error"] = [r.error.type, r.error.message] if r.error else None
            out["restarted"] = r.restarted
            out["images"] = len(r.images)
            out["got"] = sum(map(len, got))
        finally:
            s.close()
    """, env=hostile(attack))
    assert "raised" not in out, out
    assert out["error"][0] == "ProtocolError" and why in out["error"][1], out
    assert out["restarted"] and out["images"] == 0 and out["got"] <= 1000, out


@pytest.mark.no_binary
def test_output_frames_are_refused_when_none_were_asked_for(hostile):
    out = drive("""
        s = pyjail.Session()
        try:
            r = s.run("x")
            out["error"] = [r.error.type, r.error.message] if r.error else None
        finally:
            s.close()
    """, env=hostile("output-ok"))
    assert out["error"][0] == "ProtocolError" and "'output' frame" in out["error"][1], out


@pytest.mark.no_binary
def test_honest_frames_from_a_stand_in_jail(hostile):
    out = drive("""
        s = pyjail.Session()
        got = []
        try:
            r = s.run("x", on_stdout=got.append)
            out["got"] = got
            out["error"] = r.error
        finally:
            s.close()
    """, env=hostile("output-ok"))
    # A character split between two frames comes whole, in the second call.
    assert out["got"] == ["ab", "\u00e9"] and out["error"] is None, out
    out = drive("""
        s = pyjail.Session()
        try:
            r = s.run("x")
            out["images"] = [(i.mime, i.data.decode("latin-1")) for i in r.images]
        finally:
            s.close()
    """, env=hostile("image-ok"))
    assert out["images"] == [["image/png", "\x89PNG\r\n\x1a\n"]], out


# ------------------------------------------------------------------ async

def test_async_session_has_the_api_of_session():
    async def main():
        async with pyjail.AsyncSession(timeout=30) as s:
            r = await s.run("x = 6 * 7\nx", want_data=True)
            assert r.ok and r.value == "42" and r.data == 42
            assert await s.upload("a.txt", "hi") == 2
            assert (await s.run("open('a.txt').read()")).value == "'hi'"
            assert await s.download("a.txt") == b"hi"
            assert await s.list_files() == {"a.txt": 2}
            assert await s.set_variables({"y": [1, 2]}) == {}
            await s.expose({"double": lambda v: 2 * v})
            assert (await s.run("double(y)")).value == "[1, 2, 1, 2]"
            assert await s.ping() > 0
            pid = s.pid
            await s.restart()
            assert s.pid != pid
            assert (await s.run("'x' in dir()")).value == "False"
            assert s.restarts == 1
        assert s.closed
        with pytest.raises(pyjail.SessionClosedError):
            await s.run("1")
    asyncio.run(main())


def test_async_sessions_run_at_the_same_time_and_one_session_takes_turns():
    # Shown without a clock: each cell of two sessions waits, through host functions,
    # until the other session's cell has started -- which only concurrent cells can do.
    started = set()

    async def main():
        a, b = pyjail.AsyncSession(timeout=60), pyjail.AsyncSession(timeout=60)
        try:
            for s, me, other in ((a, "a", "b"), (b, "b", "a")):
                await s.expose({"start": started.add, "seen": lambda o=other: o in started})
            wait = ("start(%r)\nimport time\nfor _ in range(1000):\n"
                    "    if seen(): break\n    time.sleep(0.02)\nseen()")
            ra, rb = await asyncio.gather(a.run(wait % "a"), b.run(wait % "b"))
            assert ra.value == rb.value == "True", (ra, rb)
            # One session: its calls run one after the other, never at once (each waits in a
            # worker thread for the session's lock, so which goes first is the threads' race).
            cell = "import time\nt0 = time.monotonic()\ntime.sleep(0.3)\n(t0, time.monotonic())"
            r1, r2 = await asyncio.gather(a.run(cell, want_data=True),
                                          a.run(cell, want_data=True))
            first, second = sorted([r1.data, r2.data])
            assert first[1] <= second[0], (r1.data, r2.data)
        finally:
            await asyncio.gather(a.close(), b.close())
    asyncio.run(main())


def test_cancelling_a_call_interrupts_its_cell():
    async def main():
        async with pyjail.AsyncSession(timeout=None) as s:
            await s.run("x = 1")
            started = asyncio.Event()

            async def on_stdout(text):
                if "going" in text:
                    started.set()
            task = asyncio.ensure_future(
                s.run("print('going', flush=True)\nimport time\ntime.sleep(600)",
                      on_stdout=on_stdout))
            await asyncio.wait_for(started.wait(), 60)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            # Without the interrupt the next call would wait for the 600 s sleep.
            r = await asyncio.wait_for(s.run("x + 1"), 60)
            assert r.value == "2" and s.restarts == 0
    asyncio.run(main())


def test_async_callbacks_run_on_the_event_loop_in_order():
    import threading
    loop_thread = threading.get_ident()
    got, threads = [], set()

    async def slow(text):
        await asyncio.sleep(0.01)
        got.append(("out", text))
        threads.add(threading.get_ident())

    def err(text):
        got.append(("err", text))
        threads.add(threading.get_ident())

    async def main():
        async with pyjail.AsyncSession(timeout=30) as s:
            r = await s.run("import sys, time\nfor i in range(5):\n    print(i, flush=True)\n"
                            "    time.sleep(0.05)\nprint('oops', file=sys.stderr)",
                            on_stdout=slow, on_stderr=err)
            assert r.ok
            # Every chunk was delivered before run() returned.
            assert "".join(t for k, t in got if k == "out") == "0\n1\n2\n3\n4\n"
            assert "".join(t for k, t in got if k == "err") == "oops\n"
            assert threads == {loop_thread}
    asyncio.run(main())


def test_arun_is_run_awaited():
    async def main():
        got = []
        rs = await asyncio.gather(
            pyjail.arun("print(6 * 7)", timeout=30),
            pyjail.arun("open('o.txt', 'w').write(open('i.txt').read() * 2)",
                        files={"i.txt": "ab"}, outputs=["*.txt"], timeout=30),
            pyjail.arun("import sys\nprint('e', file=sys.stderr)",
                        callbacks=pyjail.Callbacks(on_stderr=got.append)))
        assert rs[0].stdout == "42\n" and rs[0].ok
        assert rs[1].files == {"o.txt": b"abab"}
        assert got == ["e\n"] and rs[2].stderr == "e\n"
    asyncio.run(main())


def _pyjail_children():
    from pyjail import _hostprocs
    parents = _hostprocs.process_parents()
    return _hostprocs.descendants(parents, [os.getpid()])


def test_cancelling_arun_kills_the_jail():
    async def main():
        started = asyncio.Event()

        def on_stdout(text):
            started.set()
        task = asyncio.ensure_future(pyjail.arun(
            "import time\nprint('going', flush=True)\ntime.sleep(600)",
            callbacks=pyjail.Callbacks(on_stdout=on_stdout), timeout=600))
        await asyncio.wait_for(started.wait(), 60)
        assert _pyjail_children()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    asyncio.run(main())
    for _ in range(200):
        if not _pyjail_children():
            break
        time.sleep(0.1)
    assert not _pyjail_children()


# ------------------------------------------------------------------ streaming

def test_a_session_streams_output_as_the_cell_writes_it(session):
    # The cell waits until the host has seen its first line: only output that is
    # passed on while the cell runs gets it through.
    got = {"out": "", "err": ""}
    session.expose({"received": lambda: got["out"]})
    r = session.run(
        "import sys, time\nprint('first line', flush=True)\n"
        "print('to stderr', file=sys.stderr, flush=True)\n"
        "for _ in range(500):\n    if 'first line' in received(): break\n"
        "    time.sleep(0.02)\nelse:\n    raise SystemExit('never streamed')\nprint('second')",
        timeout=60, on_stdout=lambda t: got.__setitem__("out", got["out"] + t),
        on_stderr=lambda t: got.__setitem__("err", got["err"] + t))
    assert r.ok, r.error
    assert got == {"out": "first line\nsecond\n", "err": "to stderr\n"}
    assert r.stdout == "first line\nsecond\n" and r.stderr == "to stderr\n"


def test_streamed_output_has_the_same_caps_and_whole_characters():
    with pyjail.Session(caps=pyjail.OutputCaps(max_output=64 << 10)) as s:
        got = []
        r = s.run("import sys\nsys.stdout.write('x' * 1000000)", on_stdout=got.append)
        assert len("".join(got)) == 64 << 10
        assert r.stdout_omitted == 1000000 - (64 << 10)
        got = []
        # Two-byte characters, read in pieces that split some of them.
        r = s.run("import os\nfor i in range(50):\n    os.write(1, ('\\u00e9' * 999).encode())",
                  on_stdout=got.append)
        assert "".join(got) == "\u00e9" * (32 << 10)
        assert r.stdout_omitted == 999 * 50 * 2 - (64 << 10)


def test_a_callback_that_raises_leaves_the_session_usable(session):
    def boom(text):
        raise ValueError("the UI is gone")
    with pytest.raises(ValueError, match="the UI is gone"):
        session.run("print('a')\ny = 5", on_stdout=boom)
    assert session.run("y").value == "5" and session.restarts == 0


@pytest.fixture
def sync_dir():
    """A host directory the jail's host user can read (pytest's tmp_path may sit in a
    directory only the test's user can enter)."""
    import pathlib
    import shutil
    import tempfile
    path = tempfile.mkdtemp(prefix="pyjail-sync-")
    os.chmod(path, 0o755)
    try:
        yield pathlib.Path(path)
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("served", [False, True], ids=["direct", "with-files"])
def test_run_streams_output_as_the_program_writes_it(sync_dir, served):
    # The program waits for a file the callback creates on the host (a read-only bind).
    sync = sync_dir

    def on_stdout(text):
        got.append(text)
        if "ready" in text:
            (sync / "go").write_text("")
            (sync / "go").chmod(0o644)
    got = []
    extra = {"files": {"in.txt": "x"}} if served else {}
    r = pyjail.run("import os, sys, time\nprint('ready', flush=True)\n"
                   "for _ in range(1000):\n    if os.path.exists('/sync/go'): break\n"
                   "    time.sleep(0.02)\nelse:\n    sys.exit('never streamed')\n"
                   "print('went')\nprint('x' * 100000)",
                   options={"ro_bind": ["%s:/sync" % sync]}, timeout=60,
                   callbacks=pyjail.Callbacks(on_stdout=on_stdout),
                   caps=pyjail.OutputCaps(max_output=1000), **extra)
    assert r.ok, r.stderr
    text = "".join(got)
    assert text.startswith("ready\nwent\nxxx") and len(text) == 1000


# ------------------------------------------------------------------ rich results

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def png_size(data):
    import struct
    assert data[:8] == PNG_MAGIC and data[12:16] == b"IHDR", data[:16]
    return struct.unpack(">II", data[16:24])


def test_top_level_await_in_cells(session):
    r = session.run("import asyncio\nawait asyncio.sleep(0)\nx = await asyncio.sleep(0, 21)")
    assert r.ok, r.error
    assert session.run("await asyncio.sleep(0, x * 2)").value == "42"
    # The loop lives on between cells: a task started in one cell runs in the next.
    r = session.run("done, go = [], asyncio.Event()\nasync def later():\n    await go.wait()\n"
                    "    done.append(1)\ntask = asyncio.get_running_loop().create_task(later())\n"
                    "await asyncio.sleep(0)\ndone")
    assert r.value == "[]", r.error
    assert session.run("go.set()\nawait task\ndone").value == "[1]"
    r = session.run("async def f():\n    raise KeyError('k')\nawait f()")
    assert r.error.type == "KeyError" and "await f()" in r.error.traceback
    r = session.run("await asyncio.sleep(600)", timeout=1)
    assert r.timed_out and not r.restarted and r.error.type == "KeyboardInterrupt"
    assert session.run("await asyncio.sleep(0, x)").value == "21"


class_with_png = (
    "class Picture:\n"
    "    def __init__(self, n): self.n = n\n"
    "    def _repr_png_(self): return b'\\x89PNG\\r\\n\\x1a\\n' + b'.' * self.n\n"
    "    def __repr__(self): return 'Picture(%d)' % self.n\n")


def test_display_and_a_trailing_object_with_an_image(session):
    session.run(class_with_png)
    r = session.run("display(Picture(1), 'text', 3)\nPicture(2)")
    assert r.ok and r.stdout == "'text'\n3\n" and r.value == "Picture(2)"
    assert [(i.mime, i.data) for i in r.images] == [
        ("image/png", PNG_MAGIC + b"."), ("image/png", PNG_MAGIC + b"..")]
    assert session.run("1").images == []


def test_images_are_capped():
    with pyjail.Session(caps=pyjail.OutputCaps(max_image_bytes=1000)) as s:
        s.run(class_with_png)
        r = s.run("display(Picture(600), Picture(600), Picture(100))")
        assert [len(i.data) for i in r.images] == [608, 108]
        assert "an image (image/png, 608 bytes) was left out" in r.stderr
        r = s.run("for _ in range(40): display(Picture(0))")
        assert len(r.images) == 32 and r.stderr.count("was left out") == 8


def test_matplotlib_figures_come_back_as_images(data_rootfs):
    with pyjail.Session(rootfs=data_rootfs, timeout=120) as s:
        r = s.run("import matplotlib.pyplot as plt\nplt.plot([1, 4, 9])\nplt.show()")
        assert r.ok, r.error
        assert [i.mime for i in r.images] == ["image/png"] and png_size(r.images[0].data)[0] > 100
        assert "cannot be shown" not in r.stderr and "non-interactive" not in r.stderr, r.stderr
        # show() shows and closes: the next plot is a figure of its own.
        r = s.run("plt.plot([1])\nplt.show()\nplt.plot([2])\nplt.show()\nplt.get_fignums()")
        assert r.value == "[]" and len(r.images) == 2, (r.error, r.stderr)
        # A trailing figure: once, though pyplot holds it too.
        r = s.run("fig, ax = plt.subplots(figsize=(2, 1))\nax.plot([1, 2])\nfig")
        assert r.ok and r.value.startswith("<Figure size 200x100") and len(r.images) == 1
        # display() of a figure pyplot does not know; figures left open are shown at the end.
        r = s.run("from matplotlib.figure import Figure\nf = Figure()\nf.add_subplot().plot([1])\n"
                  "display(f)\nplt.figure()\nplt.plot([3, 2])\nplt.figure()\nplt.bar([1], [2])")
        assert r.ok and len(r.images) == 3, (r.error, r.stderr)
        assert s.run("plt.get_fignums()").value == "[]"
        # A chart of a DataFrame.
        r = s.run("import pandas as pd\npd.DataFrame({'a': [1, 3, 2]}).plot()")
        assert r.ok and len(r.images) == 1


def test_figures_of_a_session_forked_from_a_template_with_pyplot_preloaded(data_rootfs):
    # pyplot imported before the in-jail server starts: its show() is replaced all the same.
    with pyjail.Pool(preload=["matplotlib.pyplot"], rootfs=data_rootfs, profile="repl") as pool:
        with pool.session(timeout=120) as s:
            r = s.run("import sys\nprint('matplotlib.pyplot' in sys.modules)\n"
                      "import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()\n"
                      "plt.plot([2, 1])\nplt.show()")
            assert r.ok and r.stdout == "True\n", (r.error, r.stderr)
            # Two figures: each show() showed and closed the current one.
            assert [i.mime for i in r.images] == ["image/png"] * 2
