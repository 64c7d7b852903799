"""The driver's end of the channel (pyjail._channel.Channel): waits and deadlines.
No jail needed: the "jail" is a pair of pipes."""

import os
import threading
import time

import pytest

from pyjail_testing.package import run_python

from pyjail import _channel, _wire

pytestmark = pytest.mark.no_binary


@pytest.fixture
def pipes():
    """(channel, the jail's end to write frames to)."""
    to_driver_r, to_driver_w = os.pipe()
    to_jail_r, to_jail_w = os.pipe()
    chan = _channel.Channel(to_jail_w, to_driver_r, 1 << 20)
    try:
        yield chan, to_driver_w
    finally:
        for fd in (to_driver_r, to_driver_w, to_jail_r, to_jail_w):
            os.close(fd)


def later(delay, fd, header):
    t = threading.Timer(delay, os.write, (fd, _wire.encode_frame(header)))
    t.start()
    return t


def test_spinning_backs_off_while_it_does_not_pay():
    # A wait spins (polls without sleeping) for a frame only while that pays: after
    # a spin that no frame ended, the next 1, 2, 4, ... waits sleep at once.
    r, w = os.pipe()
    try:
        spinner = _wire.Spinner(r)
        spinner.enabled = True          # as with several CPUs
        skipped = []
        for _ in range(200):
            if spinner.skip:
                skipped.append(spinner.skip)
            assert not spinner.spin()
        assert max(skipped) == _wire.MAX_SKIP
        while spinner.skip:
            spinner.spin()
        os.write(w, b"x")
        assert spinner.spin()
        assert spinner.backoff == 1 and spinner.skip == 0
        # Not when the caller's deadline comes sooner than a spin would end.
        os.read(r, 1)
        assert not spinner.spin(time.monotonic())
        assert spinner.backoff == 1 and spinner.skip == 0
    finally:
        os.close(r)
        os.close(w)


def test_an_idle_wait_sleeps(pipes):
    chan, jail = pipes
    cpu = time.process_time()
    for _ in range(3):
        with pytest.raises(_channel.ChannelTimeout):
            chan.recv(time.monotonic() + 0.2)
    assert time.process_time() - cpu < 0.1
    t = later(0.2, jail, {"op": "pong", "id": "r1"})
    assert chan.recv(time.monotonic() + 5)[0] == {"op": "pong", "id": "r1"}
    t.join()


def test_an_answer_that_is_there_beats_a_passed_deadline(pipes):
    # The driver looks once more after a deadline (e.g. a cell's result that came just
    # as its time ran out): an answer already there is taken, not a timeout.
    chan, jail = pipes
    os.write(jail, _wire.encode_frame(
        {"op": "result", "id": "r1", "error": None, "value": None, "stdout": [0, 0, 0],
         "stderr": [0, 0, 0]}))
    assert chan.recv(time.monotonic() - 1)[0]["id"] == "r1"
    with pytest.raises(_channel.ChannelTimeout):
        chan.recv(time.monotonic() - 1)


def test_a_frame_larger_than_the_pipe(pipes):
    chan, jail = pipes
    body = os.urandom(300_000)
    writer = threading.Thread(target=os.write, args=(jail, _wire.encode_frame(
        {"op": "file", "id": "r1"}, body)))
    writer.start()
    assert chan.recv(time.monotonic() + 10) == ({"op": "file", "id": "r1"}, body)
    writer.join()


def test_no_spinning_with_a_single_cpu():
    r = run_python("import os\n"
                   "from pyjail import _wire\n"
                   "os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})\n"
                   "print(_wire.Spinner(0).enabled)")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == b"False"
