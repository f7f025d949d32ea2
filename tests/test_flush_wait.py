"""The async flush service's wait without the GIL (``pystore.log._flush_wait``): ``follow_flush`` flushes the commit
log's newest file whenever the puts dirtied ``least_pages`` pages (they wake it through the commit log's word,
``CommitLogCore.flush_wake_c``), and returns at its time limit, on ``FlushStop.poke`` (the service's
``wakeup``), at the file's end, or on ``stop``. The service's passes around it: test_flush.py."""

from __future__ import annotations

import threading
import time

from pystore import Message
from pystore.log._flush_wait import FLUSH_FILE_DONE, FLUSH_STOPPED, FLUSH_TIMEOUT, FlushStop, follow_flush
from pystore.log.flush import FlushRealTimeService

TOPIC = "TopicTest"
MS = 1_000_000
PAGE = 4096


def quiet_store(store_factory, **kw):
    """An async-flush store whose flush service is stopped: only the test's ``follow_flush`` flushes."""
    store = store_factory(**kw)
    service = store._writer.flush_service
    assert isinstance(service, FlushRealTimeService)
    service.shutdown()
    cl = store._commitlog
    assert cl.flush_wake_c
    store.put_message(Message(TOPIC, b"first"))
    return store, cl


def run_follow(cl, stop, least_pages, max_ns, interval_ns=None):
    interval_ns = max_ns if interval_ns is None else interval_ns
    got: list[int] = []
    t = threading.Thread(target=lambda: got.append(follow_flush(cl.core, cl.queue.last(), stop, least_pages, interval_ns,
                                                                max_ns)))
    t.start()
    return t, got


def wait_for(cond, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.002)


def test_puts_wake_the_wait_and_it_flushes_each_time_enough_is_dirty(store_factory):
    store, cl = quiet_store(store_factory, mapped_file_size_commit_log=1 << 20)
    mf = cl.queue.last()
    stop = FlushStop()
    t, got = run_follow(cl, stop, 4, 600_000 * MS)
    for _ in range(5):
        before = mf.flushed_position
        while mf.wrote_position - before < 4 * PAGE + PAGE:
            store.put_message(Message(TOPIC, b"x" * 1000))
        # every page dirtied is flushed by the waiting follow; the put path's wake-up needs no Python thread
        wait_for(lambda b=before: mf.flushed_position >= mf.wrote_position - 4 * PAGE and mf.flushed_position > b)
    assert t.is_alive() and got == []
    stop.stop(cl.core)
    t.join(30)
    assert got == [FLUSH_STOPPED]


def test_less_than_least_pages_is_left_dirty_until_the_time_is_up(store_factory):
    store, cl = quiet_store(store_factory, mapped_file_size_commit_log=1 << 20)
    mf = cl.queue.last()
    flushed = mf.flushed_position
    store.put_message(Message(TOPIC, b"y" * 3000))
    t0 = time.monotonic()
    assert follow_flush(cl.core, mf, FlushStop(), 4, 50 * MS, 50 * MS) == FLUSH_TIMEOUT
    assert time.monotonic() - t0 >= 0.04
    assert mf.flushed_position == flushed
    # with least_pages 0 anything dirty is flushed
    assert follow_flush(cl.core, mf, FlushStop(), 0, 20 * MS, 20 * MS) == FLUSH_TIMEOUT
    assert mf.flushed_position == mf.wrote_position


def test_a_poke_ends_the_wait_once(store_factory):
    store, cl = quiet_store(store_factory)
    stop = FlushStop()
    t, got = run_follow(cl, stop, 4, 600_000 * MS)
    time.sleep(0.05)
    stop.poke(cl.core)
    t.join(30)
    assert got == [FLUSH_TIMEOUT]
    # the poke was taken: the next wait runs its time
    t0 = time.monotonic()
    assert follow_flush(cl.core, cl.queue.last(), stop, 4, 30 * MS, 30 * MS) == FLUSH_TIMEOUT
    assert time.monotonic() - t0 >= 0.02


def test_a_stop_holds_for_later_waits_until_resumed(store_factory):
    store, cl = quiet_store(store_factory)
    stop = FlushStop()
    stop.stop(cl.core)
    assert follow_flush(cl.core, cl.queue.last(), stop, 4, 600_000 * MS, 600_000 * MS) == FLUSH_STOPPED
    stop.resume()
    assert follow_flush(cl.core, cl.queue.last(), stop, 4, 10 * MS, 10 * MS) == FLUSH_TIMEOUT


def test_a_full_file_is_flushed_to_its_end_and_handed_back(store_factory):
    store, cl = quiet_store(store_factory, mapped_file_size_commit_log=64 * 1024)
    mf = cl.queue.last()
    stop = FlushStop()
    t, got = run_follow(cl, stop, 4, 600_000 * MS)
    while len(cl.queue.files) < 2:
        store.put_message(Message(TOPIC, b"z" * 1000))
    t.join(30)
    assert got == [FLUSH_FILE_DONE]
    assert mf.flushed_position == mf.file_size


def test_the_service_flushes_as_puts_come_without_a_python_pass_each_time(store_factory):
    """With the service running, a stream of puts is flushed by its C wait: the Python passes (``_flush``)
    run about once a thorough-flush interval, not once a wake-up (before: one pass each ``least_pages``)."""
    store = store_factory(mapped_file_size_commit_log=4 << 20, flush_commit_log_thorough_interval=60_000)
    service = store._writer.flush_service
    passes = []
    flush = service._flush

    def counted(least: int) -> bool:
        passes.append(least)
        return flush(least)

    service._flush = counted
    store.put_message(Message(TOPIC, b"first"))
    time.sleep(0.7)                         # the service's pass after the log's first file (every 500 ms before it)
    mf = store._commitlog.queue.last()
    n0 = len(passes)
    for _ in range(400):                    # ~400 KiB: 25 wake-ups at 4 pages each
        store.put_message(Message(TOPIC, b"w" * 1000))
    wait_for(lambda: mf.flushed_position >= mf.wrote_position - 4 * PAGE)
    assert len(passes) - n0 <= 2, passes


def test_a_log_that_grows_without_wake_ups_is_flushed_at_the_interval(store_factory):
    """A slave's log grows by transfers, which wake nobody: the wait looks at the dirty pages every interval
    (the service's timed pass, as before it waited in C) and flushes what is due."""
    store, cl = quiet_store(store_factory, mapped_file_size_commit_log=1 << 20)
    mf = cl.queue.last()
    cl.flush_wake_c = False                 # the puts below wake nobody
    stop = FlushStop()
    t, got = run_follow(cl, stop, 4, 600_000 * MS, interval_ns=20 * MS)
    try:
        before = mf.flushed_position
        while mf.wrote_position - before < 6 * PAGE:
            store.put_message(Message(TOPIC, b"s" * 1000))
        wait_for(lambda: mf.flushed_position >= mf.wrote_position - 4 * PAGE and mf.flushed_position > before)
    finally:
        stop.stop(cl.core)
        t.join(30)
        cl.flush_wake_c = True
    assert got == [FLUSH_STOPPED]


def test_the_waits_take_no_reference_on_the_file_they_follow(store_factory):
    """The flush wait and the index builder's follow keep the newest file mapped while they work in it without
    the GIL (``MappedFile.pin``), but take no reference: its count still says who reads it (1: only its owner),
    as RocketMQ's ReferenceResource counts it."""
    store = store_factory(mapped_file_size_commit_log=1 << 20)
    for i in range(50):
        store.put_message(Message(TOPIC, b"r" * 1000))
    time.sleep(0.1)                         # both services are in their waits by now
    mf = store._commitlog.queue.last()
    for _ in range(20):
        assert mf.ref_count == 1
        time.sleep(0.005)


def _put_from(store, cpus: set[int] | None, n: int = 100) -> None:
    """``n`` puts of 1000 B (enough to wake the flush a few times) from a thread pinned to ``cpus`` (None: not
    pinned)."""
    import os

    def puts():
        if cpus is not None:
            os.sched_setaffinity(0, cpus)
        for _ in range(n):
            store.put_message(Message(TOPIC, b"c" * 1000))

    t = threading.Thread(target=puts)
    t.start()
    t.join()
    # the builder's next look: its pauses between looks at keyless records grow to idle_max_ms
    time.sleep(2 * store._writer.index_builder.idle_max_ms / 1000 + 0.05)


def _service_cpus(store) -> tuple[set[int], set[int]]:
    import os

    return (os.sched_getaffinity(store._writer.flush_service._thread.native_id),
            os.sched_getaffinity(store._writer.index_builder._thread.native_id))


def _prefault_worker_cpus() -> set[int]:
    """The CPU set of the process's prefault worker (a C thread named ``pystore-pfault``)."""
    import glob
    import os

    for task in glob.glob("/proc/self/task/*"):
        with open(os.path.join(task, "comm")) as f:
            if f.read().strip() == "pystore-pfault":
                return os.sched_getaffinity(int(os.path.basename(task)))
    raise AssertionError("no prefault worker thread")


def test_the_waits_move_to_the_cpu_of_a_pinned_put_thread(store_factory):
    """``follow_put_cpu``: while the put thread is pinned to one CPU, the flush service, the index builder and
    the prefault worker run on that CPU, not on a core another pinned thread (a spinning consumer) holds; when the put thread is
    not pinned they go back to their own CPU sets; with the option off they are never moved."""
    import os

    import pytest

    allowed = os.sched_getaffinity(0)
    if len(allowed) < 2:
        pytest.skip("needs two CPUs")
    cpu = max(allowed)
    # the put thread's CPU is looked up when its puts wake the flush: at most one wake-up a min gap
    store = store_factory("follow", mapped_file_size_commit_log=4 << 20, flush_commit_log_min_gap=10)
    store.put_message(Message(TOPIC, b"first"))
    time.sleep(0.7)                         # the flush service is in its wait (its pass after the first file)
    _put_from(store, None)
    assert _service_cpus(store) == (allowed, allowed)          # an unpinned put thread: nothing moves
    _put_from(store, {cpu}, 6000)       # 6 MB, into a new file: the prefault worker populates ahead of the puts
    assert _service_cpus(store) == ({cpu}, {cpu})
    assert _prefault_worker_cpus() == {cpu}                      # it moves before each request
    _put_from(store, None, 6000)
    assert _service_cpus(store) == (allowed, allowed)          # back to their own sets
    assert _prefault_worker_cpus() == allowed
    off = store_factory("free", mapped_file_size_commit_log=4 << 20, follow_put_cpu=False)
    off.put_message(Message(TOPIC, b"first"))
    time.sleep(0.7)
    _put_from(off, {cpu})
    assert _service_cpus(off) == (allowed, allowed)


def test_flushes_while_puts_go_on_are_a_min_gap_apart(store_factory):
    """With ``min_gap_ns``, what the puts dirty right after a flush waits for the next one, at least that long
    after: one wake-up of the service per gap instead of one per ``least_pages``; the data is flushed all the
    same, and a stop still ends the wait at once."""
    store, cl = quiet_store(store_factory, mapped_file_size_commit_log=4 << 20)
    mf = cl.queue.last()
    stop = FlushStop()
    flushes = []
    got: list[int] = []
    t = threading.Thread(target=lambda: got.append(follow_flush(cl.core, mf, stop, 4, 600_000 * MS, 600_000 * MS,
                                                                200 * MS)))
    t.start()
    seen = mf.flushed_position
    t0 = time.monotonic()
    while time.monotonic() - t0 < 0.5:     # puts for half a second, a flush's worth every few ms
        store.put_message(Message(TOPIC, b"g" * 1000))
        if mf.flushed_position != seen:
            seen = mf.flushed_position
            flushes.append(time.monotonic())
        time.sleep(0.0005)
    # 0.5 s at one flush per 200 ms: the first at once, then about two more (not one per 4 pages: dozens)
    assert 1 <= len(flushes) <= 4, flushes
    assert all(b - a >= 0.15 for a, b in zip(flushes, flushes[1:]))
    wait_for(lambda: mf.flushed_position >= mf.wrote_position - 4 * PAGE)
    t1 = time.monotonic()
    stop.stop(cl.core)
    t.join(30)
    assert got == [FLUSH_STOPPED] and time.monotonic() - t1 < 5
