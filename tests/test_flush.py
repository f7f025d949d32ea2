"""Flush services (``pystore.log.flush``): the leader/follower group commit and the SYNC_FLUSH warm."""

from __future__ import annotations

import os
import threading
import time

import pytest
from smaps import mapped_ranges, requires_visible_advice

from pystore import Message, MessageBatch, MessageStore
from pystore.config import FlushDiskType
from pystore.status import GetMessageStatus, PutMessageStatus


def _sync_store(store_factory, **overrides) -> MessageStore:
    return store_factory(flush_disk_type=FlushDiskType.SYNC_FLUSH, **overrides)


def test_a_lone_sync_put_flushes_on_its_own_thread(store_factory):
    """With the service thread's flush disabled, a durable put still returns PUT_OK because it finds no
    flush under way and flushes itself; the data is flushed and dispatched when the put returns."""
    store = _sync_store(store_factory)
    gc = store._flush_service
    gc.do_commit = lambda: None  # white-box: the service thread would never flush
    for i in range(20):
        r = store.put_message(Message("Lead", b"m%d" % i))
        assert r.status == PutMessageStatus.PUT_OK
        assert store._commitlog.queue.flushed_where >= r.next_offset
    got = store.get_message("g", "Lead", 0, 0, 32)
    assert got.status == GetMessageStatus.FOUND
    assert [m.body for m in got.messages] == [b"m%d" % i for i in range(20)]
    store_factory.expect_messages(20)


def test_a_puts_flush_completes_requests_it_covers(store_factory):
    """A request handed to the service that a put's flush covers is completed by that put."""
    from pystore.log.flush import GroupCommitRequest

    store = _sync_store(store_factory)
    gc = store._flush_service
    gc.do_commit = lambda: None
    gc.on_wait_end = lambda: None  # the service never takes the request over
    r1 = store._commitlog.append_message(Message("Cover", b"one"))
    req = GroupCommitRequest(r1.next_offset)
    with gc._lock:
        gc._write.append(req)
    r2 = store._commitlog.append_message(Message("Cover", b"two"))
    assert gc.sync(r2.next_offset, 5) is True
    assert req.event.is_set() and req.ok
    store_factory.expect_messages(2)


def _flush_under_way(gc) -> None:
    """White-box: take the flush as a leader would (``_lead`` ends it), once the service's pass is over."""
    deadline = time.monotonic() + 60
    while True:
        with gc._state:
            if not gc._flushing:
                gc._flushing = True
                return
        assert time.monotonic() < deadline, "the flush stayed under way for 60 s"
        time.sleep(0.001)


def test_a_sync_put_waits_for_the_flush_under_way_and_times_out(store_factory):
    store = _sync_store(store_factory)
    gc = store._flush_service
    gc.do_commit = lambda: None        # the service's own passes would flush the message
    _flush_under_way(gc)
    r = store._commitlog.append_message(Message("Wait", b"one"))
    try:
        assert gc.sync(r.next_offset, 0.05) is False          # nobody ends that flush: the put times out
        assert store._commitlog.queue.flushed_where < r.next_offset
        with gc._state:
            assert not gc._waiting and gc._followers == 0      # and no longer counts as waiting
    finally:
        gc._lead(0, by_put=False)                             # the flush under way ends (and covers it)
    assert store._commitlog.queue.flushed_where >= r.next_offset
    assert gc.sync(r.next_offset, 0.05) is True
    store_factory.expect_messages(1)


def test_a_follower_returns_with_the_leaders_flush_without_flushing_itself(store_factory):
    store = _sync_store(store_factory)
    gc = store._flush_service
    gc.do_commit = lambda: None
    r = store._commitlog.append_message(Message("Follow", b"one"))
    _flush_under_way(gc)
    got: list[bool] = []
    follower = threading.Thread(target=lambda: got.append(gc.sync(r.next_offset, 60)))
    follower.start()
    deadline = time.monotonic() + 60
    while gc._followers < 1 and time.monotonic() < deadline:   # it waits for the flush under way
        time.sleep(0.001)
    calls: list[int] = []
    real = store._commitlog.queue.flush
    store._commitlog.queue.flush = lambda least: calls.append(least) or real(least)
    try:
        gc._lead(r.next_offset, by_put=True)                  # the leader's flush ends, covering it
        follower.join(60)
        assert got == [True] and len(calls) == 1              # the follower did not flush again
    finally:
        del store._commitlog.queue.flush
    store_factory.expect_messages(1)


def test_the_service_does_not_wait_for_a_puts_flush_it_has_no_request_for(store_factory):
    """Waiting would have the end of every put's flush wake the service thread and hand it the GIL."""
    store = _sync_store(store_factory)
    gc = store._flush_service
    _flush_under_way(gc)
    try:
        time.sleep(0.1)                       # ten of the service's 10 ms passes, with a flush under way
        with gc._state:
            assert not gc._waiting and gc._flushing
    finally:
        gc._lead(0, by_put=False)


def test_a_leader_waits_for_the_last_group_to_come_back(store_factory):
    """After a flush for three puts, the next leader flushes once the other two are back, for all three:
    one flush, not one each."""
    store = _sync_store(store_factory)
    gc = store._flush_service
    gc.do_commit = lambda: None
    gc.GATHER_MAX_S = 60                                       # only the arrivals end the wait here
    _flush_under_way(gc)                                       # (once a pass of the service is over)
    with gc._state:
        gc._flushing = False
        gc._expect, gc._last_flush_s = 3, 60.0                 # as after a flush led for 2 followers
    calls: list[int] = []
    real = store._commitlog.queue.flush
    store._commitlog.queue.flush = lambda least: calls.append(least) or real(least)
    results: list[bool] = []

    def put(body: bytes) -> None:
        r = store._commitlog.append_message(Message("Gather", body))
        results.append(gc.sync(r.next_offset, 60))

    try:
        leader = threading.Thread(target=put, args=(b"leader",))
        leader.start()
        deadline = time.monotonic() + 10
        while gc._gatherer is None and time.monotonic() < deadline:   # (10 s: only a guard)
            time.sleep(0.001)
        assert gc._gatherer is not None and not calls                    # the leader waits, nothing flushed yet
        followers = [threading.Thread(target=put, args=(b"f%d" % i,)) for i in range(2)]
        for t in followers:
            t.start()
        for t in [leader, *followers]:
            t.join(60)
        assert results == [True, True, True]
        assert len(calls) == 1, calls                          # one flush for the three
        assert store._commitlog.queue.flushed_where == store.get_max_phy_offset()
    finally:
        del store._commitlog.queue.flush
    store_factory.expect_messages(3)


def test_a_leader_interrupted_while_gathering_ends_its_flush(store_factory, monkeypatch):
    """Whatever stops a leader (here an exception while it waits for its group), the flush ends: later
    puts do not wait for it."""
    import pystore.log.flush as flush

    store = _sync_store(store_factory)
    gc = store._flush_service
    gc.do_commit = lambda: None
    _flush_under_way(gc)
    with gc._state:
        gc._flushing = False
        gc._expect, gc._last_flush_s = 3, 60.0

    class Interrupted(Exception):
        pass

    class Gatherer:
        def acquire(self, *args):
            if args:                   # the leader's wait for its group
                raise Interrupted
            return True

    monkeypatch.setattr(flush, "_allocate_lock", Gatherer)
    r = store._commitlog.append_message(Message("Stop", b"one"))
    with pytest.raises(Interrupted):
        gc.sync(r.next_offset, 5)
    monkeypatch.undo()
    with gc._state:
        assert not gc._flushing and gc._gatherer is None
    assert store.put_message(Message("Stop", b"two")).status == PutMessageStatus.PUT_OK
    store_factory.expect_messages(2)


def test_a_lone_put_never_waits(store_factory, monkeypatch):
    """A put alone leads every flush and never sleeps: neither as a follower nor gathering a group (both
    would take a lock of their own)."""
    import pystore.log.flush as flush

    store = _sync_store(store_factory)
    gc = store._flush_service
    gc.do_commit = lambda: None        # (the service's passes could make it a follower)
    _flush_under_way(gc)
    gc._lead(0, by_put=False)
    locks: list[object] = []
    real = flush._allocate_lock
    monkeypatch.setattr(flush, "_allocate_lock", lambda: locks.append(1) or real())
    for i in range(50):
        assert store.put_message(Message("Lone", b"%d" % i)).status == PutMessageStatus.PUT_OK
        assert store._commitlog.queue.flushed_where == store.get_max_phy_offset()
    assert locks == [] and gc._expect == 1
    store_factory.expect_messages(50)


def test_concurrent_sync_puts_all_complete(store_factory):
    """Leaders and followers: 8 threads of durable puts all return PUT_OK and every message is readable."""
    store = _sync_store(store_factory, mapped_file_size_commit_log=1 << 20)
    errors: list[object] = []

    def writer(t: int) -> None:
        for i in range(100):
            r = store.put_message(Message("Many", b"%d-%d" % (t, i), queue_id=t))
            if r.status != PutMessageStatus.PUT_OK:
                errors.append(r)

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert not errors
    assert store._commitlog.queue.flushed_where == store.get_max_phy_offset()
    for t in range(8):
        assert store.get_max_offset_in_queue("Many", t) == 100
    store_factory.expect_messages(800)


def test_sync_warm_writes_the_zeros_and_the_store_works(store_factory):
    """``warm_mapped_file_enable`` with SYNC_FLUSH warms files with the zeros written to disk every
    ``flush_least_pages_when_warm_mapped_file`` pages (RocketMQ); the files stay zero and puts work."""
    store = _sync_store(store_factory, warm_mapped_file_enable=True, flush_least_pages_when_warm_mapped_file=2)
    assert store._allocate.sync_warm_every == 2 * 4096
    r = store.put_message(Message("Warm", b"x" * 100))
    assert r.status == PutMessageStatus.PUT_OK
    mf = store._commitlog.last_file
    tail = mf.read_any(r.next_offset, mf.file_size - r.next_offset)
    assert tail == bytes(len(tail))
    assert store.look_message_by_offset(r.wrote_offset).body == b"x" * 100
    store_factory.expect_messages(1)


def _commit_log_files(store: MessageStore) -> list:
    return list(store._commitlog.queue.files)


_FLUSH_MODES = pytest.mark.parametrize("flush", [FlushDiskType.SYNC_FLUSH, FlushDiskType.ASYNC_FLUSH],
                                       ids=["sync", "async"])


@_FLUSH_MODES
@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
@requires_visible_advice
def test_the_commit_log_is_written_page_by_page(store_factory, warm, flush):
    """The commit-log file being written is mapped without read-ahead (``_warm.write_page_by_page``), so no large
    folio grows around the writer and a flush writes what the puts wrote; once the writer rolls to the next
    file, the full one has read-ahead again for its readers. Both flush modes: ASYNC_FLUSH flushes every
    16 KiB, which large folios turned into rewriting up to 2 MiB each time."""
    store = store_factory(flush_disk_type=flush, warm_mapped_file_enable=warm)
    assert store.put_message(Message("Pages", b"x" * 1000)).status == PutMessageStatus.PUT_OK
    first = _commit_log_files(store)[0]
    assert mapped_ranges(first.file_name) == [(0, first.file_size, True)]
    n = 1
    while len(_commit_log_files(store)) < 2:
        assert store.put_message(Message("Pages", b"x" * 1000)).status == PutMessageStatus.PUT_OK
        n += 1
    second = _commit_log_files(store)[1]
    assert all(not rr for _, _, rr in mapped_ranges(first.file_name))
    assert mapped_ranges(second.file_name) == [(0, second.file_size, True)]
    store_factory.expect_messages(n)


def _write_bytes() -> int | None:
    """Bytes this process has dirtied for the disk (``/proc/self/io``: counted when a page or a whole folio
    turns dirty), or None without task I/O accounting."""
    try:
        with open("/proc/self/io") as f:
            for line in f:
                if line.startswith("write_bytes:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


@pytest.mark.slow
def test_flushes_write_what_the_puts_wrote_deep_in_a_file(store_factory):
    """ASYNC_FLUSH, 40 MiB into a 64 MiB file (where read-ahead used to have grown 2 MiB folios on a kernel
    with large folios): 6 MiB of batches, each followed by a flush, dirty at most 3x what they put (the
    consume queue and the pages pre-faulted ahead of the writer included). With read-ahead on, a flush per
    ~7 KiB rewrote a whole folio each time: 50-100x on ext4, Linux 6.18 (on a kernel without large folios
    this test cannot tell the difference)."""
    if _write_bytes() is None:
        pytest.skip("no /proc/self/io here")
    store = store_factory(mapped_file_size_commit_log=64 * 1024 * 1024)
    fill = MessageBatch([Message("Deep", b"f" * 1024) for _ in range(128)])
    while store.get_max_phy_offset() < 40 * 1024 * 1024:
        assert store.put_messages(fill).status == PutMessageStatus.PUT_OK
    store.flush()
    batch = MessageBatch([Message("Deep", b"d" * 200) for _ in range(32)])
    start, before = store.get_max_phy_offset(), _write_bytes()
    while store.get_max_phy_offset() - start < 6 * 1024 * 1024:
        assert store.put_messages(batch).status == PutMessageStatus.PUT_OK
        store.flush()
    written = store.get_max_phy_offset() - start
    dirtied = _write_bytes() - before
    assert len(_commit_log_files(store)) == 1
    assert dirtied < 3 * written, "%d bytes dirtied for %d bytes put" % (dirtied, written)


@_FLUSH_MODES
@requires_visible_advice
def test_after_a_restart_the_rest_of_the_last_file_is_written_page_by_page(store_factory, flush):
    """The file recovery leaves the writer in: what it holds keeps read-ahead (readers catching up read
    it from disk), the rest from the page the next record goes to is written page by page."""
    store = store_factory(flush_disk_type=flush)
    for _ in range(9):
        assert store.put_message(Message("Pages", b"y" * 1000)).status == PutMessageStatus.PUT_OK
    store.shutdown()
    store = store_factory(flush_disk_type=flush)
    mf = _commit_log_files(store)[-1]
    end = mf.wrote_position
    page = end // 4096 * 4096
    assert 0 < page < mf.file_size
    assert mapped_ranges(mf.file_name) == [(0, page, False), (page, mf.file_size, True)]
    r = store.put_message(Message("Pages", b"y" * 1000))
    assert r.status == PutMessageStatus.PUT_OK and r.wrote_offset == mf.file_from_offset + end
    n = 10
    # once the writer rolls past it, the recovered file has read-ahead back, like any file it filled
    while len(_commit_log_files(store)) < 2:
        assert store.put_message(Message("Pages", b"y" * 1000)).status == PutMessageStatus.PUT_OK
        n += 1
    assert all(not rr for _, _, rr in mapped_ranges(mf.file_name))
    store_factory.expect_messages(n)


def test_timed_flush_service_stops_at_shutdown_without_sleeping_out_its_interval(store_factory):
    # flush_commit_log_timed: puts do not wake the flush service, it sleeps its interval; shutdown must still
    # end that sleep at once and flush everything (a 10-minute interval would otherwise hold shutdown up to
    # the 90 s join limit, and then leave the service running)
    store = store_factory(flush_commit_log_timed=True, flush_interval_commit_log=600_000)
    results = [store.put_message(Message("Timed", b"t%d" % i)) for i in range(100)]
    assert all(r.is_ok() for r in results)
    service = store._flush_service
    t0 = time.monotonic()
    store.shutdown()
    assert time.monotonic() - t0 < 60, "shutdown waited for the flush service's interval"
    assert not service._thread.is_alive()
    assert store._commitlog.queue.flushed_where == results[-1].append_message_result.wrote_offset + \
        results[-1].append_message_result.wrote_bytes
    again = store_factory()
    assert again.look_message_by_offset(results[-1].append_message_result.wrote_offset).body == b"t99"
    store_factory.expect_messages(100)


def test_completing_a_request_its_timer_already_expired_is_quiet():
    """A future's timer and a flush may both see it not done; the second to set it must not raise (it
    would raise in the thread of whichever put led the flush)."""
    from concurrent.futures import Future

    from pystore.log.flush import GroupCommitRequest

    class RacedFuture(Future):
        def done(self) -> bool:          # as if the timer set it just after this check
            return False

    fut = RacedFuture()
    fut.set_result("expired")
    req = GroupCommitRequest(1, fut, object())
    req.complete(True)
    assert req.ok and req.event.is_set() and fut.result(0) == "expired"


@pytest.mark.no_verify
def test_a_failed_consume_queue_flush_is_not_claimed_by_the_checkpoint(store_factory, monkeypatch):
    """When a consume queue's flush fails (logged, the service goes on), neither the thorough flush nor
    shutdown moves the checkpoint's logics time past it, and shutdown leaves the abort file: the next open
    rebuilds the queues from the commit log. Before, the time moved on as if the units were on disk."""
    from pystore.engine.checkpoint import StoreCheckpoint
    from pystore.queue.consume_queue import ConsumeQueue

    store = store_factory()
    for i in range(10):
        assert store.put_message(Message("TopicTest", b"m%d" % i, queue_id=0)).is_ok()
    before = store._checkpoint.logics_msg_timestamp

    def failing_flush(self, least_pages):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(ConsumeQueue, "flush", failing_flush)
    assert store._cq_store.flush(0) is False
    store.shutdown()
    assert StoreCheckpoint(store.config.checkpoint_path(), read_only=True).logics_msg_timestamp == before
    assert os.path.exists(store.config.abort_path())


def test_async_sync_flush_puts_start_no_thread_each(store_factory):
    """``async_put_message`` on a SYNC_FLUSH store hands its request to the group-commit service, whose one
    expiry thread watches every deadline; before, each put started a ``threading.Timer`` (a thread per put,
    alive until its future completed)."""
    store = store_factory(flush_disk_type=FlushDiskType.SYNC_FLUSH)
    gc = store._flush_service
    gate = threading.Event()
    real = gc.do_commit

    def held() -> None:
        gate.wait(30)
        real()

    gc.do_commit = held
    try:
        time.sleep(0.05)        # the service thread waits at the gate: the futures stay pending
        before = threading.active_count()
        futs = [store.async_put_message(Message("TopicTest", b"m%d" % i, queue_id=0)) for i in range(200)]
        assert not any(f.done() for f in futs)
        assert threading.active_count() - before <= 1
    finally:
        gate.set()
        gc.do_commit = real
    assert all(f.result(30).status is PutMessageStatus.PUT_OK for f in futs)
