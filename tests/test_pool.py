"""The transient store pool: puts land in pooled buffers, readers and consume queues see only what the commit
service copied into the files, shutdown commits everything (docs/format.md §5.4)."""

from __future__ import annotations

import os

import pytest
from conftest import SMALL_FILE, make_message

from pystore import FlushDiskType, GetMessageStatus, PutMessageStatus
from pystore.log.pool import TransientStorePool
from pystore.tools import iter_commitlog

NEVER = 3_600_000


def _pool_store(store_factory, **kw):
    kw.setdefault("transient_store_pool_enable", True)
    kw.setdefault("transient_store_pool_size", 3)
    kw.setdefault("commit_interval_commit_log", NEVER)
    kw.setdefault("commit_commit_log_thorough_interval", NEVER)
    return store_factory(**kw)


def test_uncommitted_puts_are_invisible_until_committed(store_factory):
    s = _pool_store(store_factory)
    assert s.transient_store_pool_enabled()
    s.put_message(make_message(0))             # the first commit pass may run at start; later ones wait
    s.flush()
    base = s.get_max_phy_offset()
    results = [s.put_message(make_message(i)) for i in range(1, 6)]
    assert all(r.status == PutMessageStatus.PUT_OK for r in results)
    first = results[0].append_message_result.wrote_offset
    assert first == base
    mf = s._commitlog.last_file                              # a pool buffer takes the writes: nothing of the
    assert mf.has_pool_buffer and mf.prefaulted_position == mf.file_size   # file is pre-faulted, none asked again
    assert s.get_max_phy_offset() == base                    # nothing new committed yet
    assert s.look_message_by_offset(first) is None
    assert s.get_max_offset_in_queue("TopicTest", 0) == 1    # dispatch waits for the commit
    assert s.get_message("g", "TopicTest", 0, 1).status == GetMessageStatus.OFFSET_OVERFLOW_ONE
    # the file on disk holds nothing past the committed end yet
    with open(os.path.join(s.root, "commitlog", "%020d" % 0), "rb") as fh:
        fh.seek(first)
        assert fh.read(8) == bytes(8)
    s.flush()                                                # commit + flush + dispatch
    assert s.get_max_phy_offset() == results[-1].append_message_result.wrote_offset + \
        results[-1].append_message_result.wrote_bytes
    assert s.look_message_by_offset(first).body == make_message(1).body
    r = s.get_message("g", "TopicTest", 0, 0)
    assert r.status == GetMessageStatus.FOUND and [m.queue_offset for m in r.messages] == list(range(6))
    store_factory.expect_messages(6)


def test_the_commit_service_publishes_on_its_own(store_factory):
    import time
    s = _pool_store(store_factory, commit_interval_commit_log=10, commit_commit_log_thorough_interval=50)
    for i in range(300):
        assert s.put_message(make_message(i, body_size=500)).is_ok()
    deadline = time.monotonic() + 60
    while s.get_max_offset_in_queue("TopicTest", 0) < 300 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert s.get_max_offset_in_queue("TopicTest", 0) == 300
    assert s.dispatch_behind_bytes() == 0
    r = s.get_message("g", "TopicTest", 0, 290)
    assert [m.body for m in r.messages] == [make_message(i, body_size=500).body for i in range(290, 300)]
    store_factory.expect_messages(300)


def test_shutdown_commits_everything_and_reopens(store_factory):
    s = _pool_store(store_factory)
    bodies = []
    for i in range(400):                                     # rolls several 64 KiB files through the pool
        m = make_message(i, body_size=300)
        bodies.append(m.body)
        assert s.put_message(m).is_ok()
    end = s.put_message(make_message(400, body_size=300)).append_message_result
    bodies.append(make_message(400, body_size=300).body)
    s.shutdown()
    assert not os.path.exists(os.path.join(s.root, "abort"))
    got = [m.body for m in iter_commitlog(os.path.join(s.root, "commitlog"))]
    assert got == bodies
    s2 = store_factory()
    assert s2.get_max_phy_offset() == end.wrote_offset + end.wrote_bytes
    assert s2.get_max_offset_in_queue("TopicTest", 0) == 401
    store_factory.expect_messages(401)


def test_buffers_go_back_to_the_pool_when_a_file_is_committed_whole(store_factory):
    s = _pool_store(store_factory, transient_store_pool_size=2)
    pool = s._pool
    assert isinstance(pool, TransientStorePool) and pool.available_buffer_nums() <= 2
    for i in range(600):
        assert s.put_message(make_message(i, body_size=300)).is_ok()
    s.flush()
    # every full file was committed whole and gave its buffer back
    files = s._commitlog.queue.files
    assert len(files) > 3
    assert not any(f.has_pool_buffer for f in files[:-1])
    assert pool.available_buffer_nums() + sum(f.has_pool_buffer for f in files) <= 2
    assert s.get_max_offset_in_queue("TopicTest", 0) == 600
    store_factory.expect_messages(600)


@pytest.mark.parametrize("why", ["sync", "read_only"])
def test_the_pool_is_only_for_an_async_master(store_factory, why):
    if why == "sync":
        s = _pool_store(store_factory, flush_disk_type=FlushDiskType.SYNC_FLUSH)
        assert not s.transient_store_pool_enabled() and s._pool is None
        assert s.put_message(make_message(0)).is_ok()
        assert s.look_message_by_offset(0) is not None
        store_factory.expect_messages(1)
    else:
        w = store_factory()
        w.put_message(make_message(0))
        w.flush()
        ro = store_factory(read_only=True, transient_store_pool_enable=True)
        assert not ro.transient_store_pool_enabled()
        assert ro.look_message_by_offset(0).body == make_message(0).body


def test_fast_fail_without_buffers_refuses_the_new_file(store_factory):
    # flush_commit_log_timed: puts do not wake the commit service, which sleeps for an hour
    s = _pool_store(store_factory, transient_store_pool_size=1, fast_fail_if_no_buffer_in_store_pool=True,
                    flush_commit_log_timed=True)
    statuses = set()
    for i in range(300):
        statuses.add(s.put_message(make_message(i, body_size=500)).status)
        if PutMessageStatus.CREATE_MAPPED_FILE_FAILED in statuses:
            break
    # one buffer, held by the first file until it is committed whole: the roll finds none
    assert PutMessageStatus.CREATE_MAPPED_FILE_FAILED in statuses
    names = sorted(os.listdir(os.path.join(s.root, "commitlog")))
    known = sorted(os.path.basename(f.file_name) for f in s._commitlog.queue.files)
    assert names == known                                     # no half-made file left behind
    store_factory.skip_check()


def test_pool_rejects_a_bad_size():
    with pytest.raises(ValueError):
        TransientStorePool(0, SMALL_FILE)
