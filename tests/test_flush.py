"""Flush services (``pystore.flush``): the leader/follower group commit and the SYNC_FLUSH warm."""

from __future__ import annotations

import threading
import time

import pytest
from smaps import mapped_ranges, requires_visible_advice

from pystore import Message, MessageStore
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


def test_flush_inline_completes_requests_it_covers(store_factory):
    """A request handed to the service that the leader's flush covers is completed by the leader."""
    from pystore.flush import GroupCommitRequest

    store = _sync_store(store_factory)
    gc = store._flush_service
    gc.do_commit = lambda: None
    gc.on_wait_end = lambda: None  # the service never takes the request over
    r1 = store._commitlog.append_message(Message("Cover", b"one"))
    req = GroupCommitRequest(r1.next_offset)
    with gc._lock:
        gc._write.append(req)
    r2 = store._commitlog.append_message(Message("Cover", b"two"))
    assert gc.flush_inline(r2.next_offset) is True
    assert req.event.is_set() and req.ok
    store_factory.expect_messages(2)


def test_flush_inline_steps_aside_while_a_flush_is_under_way(store_factory):
    store = _sync_store(store_factory)
    gc = store._flush_service
    with gc._leader:
        assert gc.flush_inline(1) is None


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


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
@requires_visible_advice
def test_sync_flush_writes_the_commit_log_page_by_page(store_factory, warm):
    """SYNC_FLUSH maps the commit-log file being written without read-ahead (``write_page_by_page``), so
    no large folio grows around the writer and a put's flush writes what it wrote; once the writer rolls
    to the next file, the full one has read-ahead again for its readers."""
    store = _sync_store(store_factory, warm_mapped_file_enable=warm)
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


@requires_visible_advice
def test_async_flush_keeps_read_ahead_on_the_commit_log(store_factory):
    """ASYNC_FLUSH leaves the kernel's read-ahead on: its writer gains from large folios (fewer, cheaper
    faults), and its flushes cover many puts at once."""
    store = store_factory()
    assert store.put_message(Message("Pages", b"x" * 1000)).is_ok()
    mf = _commit_log_files(store)[0]
    assert mapped_ranges(mf.file_name) == [(0, mf.file_size, False)]
    store_factory.expect_messages(1)


@requires_visible_advice
def test_sync_flush_after_a_restart_writes_the_rest_of_the_last_file_page_by_page(store_factory):
    """The file recovery leaves the writer in: what it holds keeps read-ahead (readers catching up read
    it from disk), the rest from the page the next record goes to is written page by page."""
    store = _sync_store(store_factory)
    for _ in range(9):
        assert store.put_message(Message("Pages", b"y" * 1000)).status == PutMessageStatus.PUT_OK
    store.shutdown()
    store = _sync_store(store_factory)
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
