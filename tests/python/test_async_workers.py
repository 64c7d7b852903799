"""The threads that run AsyncSession's and arun()'s blocking calls (pyjail._async._Workers):
calls at once each get a thread of their own, idle threads are reused, and an idle thread ends.
No jail is started here."""

import asyncio
import threading
import time

import pytest

from pyjail import _async

pytestmark = pytest.mark.no_binary


def async_threads():
    return [t for t in threading.enumerate() if t.name == "pyjail-async"]


def test_calls_at_once_each_run_on_a_thread_of_their_own():
    # Five calls that can only return when all five are running: with fewer threads than
    # calls, the barrier breaks (BrokenBarrierError) instead of passing.
    barrier = threading.Barrier(5, timeout=30)

    async def main():
        return await asyncio.gather(*[_async._in_thread(barrier.wait) for _ in range(5)])

    assert sorted(asyncio.run(main())) == [0, 1, 2, 3, 4]


def test_idle_threads_are_reused_and_errors_reach_the_caller():
    async def main():
        for _ in range(50):
            assert await _async._in_thread(lambda: 7) == 7
        with pytest.raises(ZeroDivisionError):
            await _async._in_thread(lambda: 1 / 0)

    before = len(async_threads())
    asyncio.run(main())
    # One after another, 51 calls: an idle thread takes each (the first may start one).
    assert len(async_threads()) <= max(before, 1)


def test_an_idle_thread_ends(monkeypatch):
    workers = _async._Workers()
    monkeypatch.setattr(workers, "IDLE_SECONDS", 0.05)
    done = threading.Event()
    workers.submit(done.set)
    assert done.wait(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and workers._idle:
        time.sleep(0.01)
    assert workers._idle == 0
    assert workers._threads == 0


def test_past_the_cap_or_without_a_thread_a_call_is_refused_and_nothing_is_left(monkeypatch):
    # Attack: a client of pyjail-server parking a thread per request until the process could
    # start none; the calls that then started no thread stayed queued, and later calls waited
    # behind them for ever (the service stuck, SIGTERM too).
    workers = _async._Workers()
    monkeypatch.setattr(workers, "MAX_THREADS", 2)
    release = threading.Event()
    workers.submit(release.wait)
    workers.submit(release.wait)
    with pytest.raises(_async.WorkersBusy):
        workers.submit(lambda: None)
    release.set()
    ran = threading.Event()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:      # the two threads go idle, then take the next
        try:
            workers.submit(ran.set)
            break
        except _async.WorkersBusy:
            time.sleep(0.01)
    assert ran.wait(30)
    # A thread that cannot start: refused, and no job is left queued for a later thread.
    other = _async._Workers()

    class NoThread(threading.Thread):
        def start(self):
            raise RuntimeError("can't start new thread")
    monkeypatch.setattr(_async.threading, "Thread", NoThread)
    with pytest.raises(_async.WorkersBusy):
        other.submit(lambda: None)
    assert other._threads == 0 and other._jobs.empty()
