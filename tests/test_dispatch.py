"""Dispatch: commit log → consume queues and index (docs/format.md §7, §8; docs/architecture.md "The write path";
RocketMQ ``ReputMessageServiceTest``, ``ConsumeQueueTest.testPutMessagePositionInfo_buildCQRepeatedly``).

* ASYNC_FLUSH dispatches inline: a message is readable by queue when its put returns;
* SYNC_FLUSH dispatches only flushed data (5.x): with the flush held back nothing is dispatched;
* the catch-up dispatcher rebuilds consume queues that are missing or behind, byte for byte as the inline
  path wrote them, crossing commit-log files and their blanks;
* re-dispatching what is already there changes nothing; transaction types and the schedule topic follow
  docs/format.md §2.2 and §7.2 on both paths.
"""

from __future__ import annotations

import os
import shutil
import struct
import time

import pytest
from conftest import SMALL_FILE, make_message
from reference_codec import java_hash

from pystore import FlushDiskType, GetMessageStatus, Message, MessageBatch, PutMessageStatus
from pystore.message.constants import SCHEDULE_TOPIC, SysFlag
from pystore.tools import iter_commitlog, iter_consume_queue

TOPIC = "TopicTest"
GROUP = "G"




def cq_files(root):
    """{relative path: bytes} of every consume-queue file under ``root``."""
    base = os.path.join(root, "consumequeue")
    out = {}
    for dirpath, _, names in os.walk(base):
        for n in names:
            p = os.path.join(dirpath, n)
            with open(p, "rb") as f:
                out[os.path.relpath(p, base)] = f.read()
    return out


def wait_for(predicate, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.002)
    return True


def fill(store, n=1200, queues=3, topics=("TopicTest", "TopicOther")):
    """``n`` messages over several topics and queues, singles and batches, spanning commit-log files."""
    i = 0
    while i < n:
        topic, qid = topics[i % len(topics)], i % queues
        if i % 7 == 0:
            k = min(5, n - i)
            r = store.put_messages(MessageBatch([make_message(j, topic=topic, queue_id=qid, tags="T%d" % (j % 3))
                                                 for j in range(i, i + k)]))
            i += k
        else:
            r = store.put_message(make_message(i, topic=topic, queue_id=qid, tags="T%d" % (i % 3)))
            i += 1
        assert r.is_ok(), r
    return n


# ------------------------------------------------------------------------------------------------------
# inline (ASYNC_FLUSH) and SYNC_FLUSH
# ------------------------------------------------------------------------------------------------------


def test_sync_flush_dispatches_into_a_queue_made_again_after_its_topic_was_cleaned(store_factory):
    """SYNC_FLUSH dispatches by reput, which remembers the cells it looked up: a queue destroyed by cleaning
    (its cell removed from the topic-queue table) and made again by a later put must get that put's unit,
    not the destroyed queue it replaced."""
    store = store_factory(flush_disk_type=FlushDiskType.SYNC_FLUSH)
    assert store.put_message(make_message(0, topic="A")).status is PutMessageStatus.PUT_OK
    assert store.put_message(make_message(1, topic="B")).status is PutMessageStatus.PUT_OK
    assert store.put_message(make_message(2, topic="A")).status is PutMessageStatus.PUT_OK
    assert store.clean_unused_topic({"B"}) == [("A", 0)]
    r = store.put_message(make_message(3, topic="A"))
    assert r.status is PutMessageStatus.PUT_OK and r.append_message_result.logics_offset == 0
    assert wait_for(lambda: store.get_max_offset_in_queue("A", 0) == 1, timeout=5)
    g = store.get_message(GROUP, "A", 0, 0)
    assert g.status is GetMessageStatus.FOUND
    assert g.messages[0].commit_log_offset == r.append_message_result.wrote_offset
    assert [u[0] for u in iter_consume_queue(os.path.join(store.root, "consumequeue", "A", "0"))] == \
        [r.append_message_result.wrote_offset]


def test_async_flush_dispatches_inline(store_factory):
    store = store_factory()
    for i in range(50):
        r = store.put_message(make_message(i))
        # readable by queue the moment the put returns
        assert store.get_max_offset_in_queue(TOPIC, 0) == i + 1
        g = store.get_message(GROUP, TOPIC, 0, i, 1)
        assert g.status is GetMessageStatus.FOUND
        assert g.messages[0].commit_log_offset == r.append_message_result.wrote_offset
        assert store.dispatch_behind_bytes() == 0


def test_sync_flush_dispatches_flushed_data(store_factory):
    store = store_factory(flush_disk_type=FlushDiskType.SYNC_FLUSH)
    for i in range(20):
        r = store.put_message(make_message(i))
        assert r.status is PutMessageStatus.PUT_OK
        # a waiting put returns once flushed, and the group commit dispatched what it flushed
        assert store.get_max_offset_in_queue(TOPIC, 0) == i + 1
    assert store.get_message(GROUP, TOPIC, 0, 0, 32).message_count == 20
    assert store.dispatch_behind_bytes() == 0


def test_sync_flush_dispatches_nothing_unflushed(store_factory, monkeypatch):
    """``ReputMessageServiceTest``: SYNC_FLUSH with the flush held back ⇒ nothing is dispatched; the queue
    offsets are assigned all the same; once flushed, everything is."""
    store = store_factory(flush_disk_type=FlushDiskType.SYNC_FLUSH)
    queue = store._commitlog.queue
    monkeypatch.setattr(queue, "flush", lambda least_pages: True)
    rs = [store.put_message(make_message(i, wait_store_msg_ok=False)) for i in range(10)]
    assert all(r.status is PutMessageStatus.PUT_OK for r in rs)
    time.sleep(0.05)                                       # the group commit runs every 10 ms
    last = rs[-1].append_message_result
    assert store.get_max_phy_offset() == last.wrote_offset + last.wrote_bytes
    assert store.get_max_offset_in_queue(TOPIC, 0) == 0
    assert store.get_message(GROUP, TOPIC, 0, 0).status is GetMessageStatus.NO_MESSAGE_IN_QUEUE
    assert store.get_topic_queue_table() == {(TOPIC, 0): 10}
    assert store.dispatch_behind_bytes() == 0             # behind the *flushed* offset, which did not move
    monkeypatch.undo()
    store.flush()
    assert wait_for(lambda: store.get_max_offset_in_queue(TOPIC, 0) == 10)
    assert [m.queue_offset for m in store.get_message(GROUP, TOPIC, 0, 0).messages] == list(range(10))
    assert store.dispatch_behind_bytes() == 0


def test_sync_flush_timeout_put_is_not_dispatched(store_factory, monkeypatch):
    """A put that times out waiting for the flush is in the commit log but not readable by queue."""
    store = store_factory(flush_disk_type=FlushDiskType.SYNC_FLUSH, sync_flush_timeout=50)
    monkeypatch.setattr(store._commitlog.queue, "flush", lambda least_pages: True)
    r = store.put_message(make_message(0))
    assert r.status is PutMessageStatus.FLUSH_DISK_TIMEOUT and r.is_ok()
    assert store.get_max_offset_in_queue(TOPIC, 0) == 0
    monkeypatch.undo()
    store.flush()
    assert wait_for(lambda: store.get_max_offset_in_queue(TOPIC, 0) == 1)


def test_reput_stops_before_a_record_that_crosses_the_end(store_factory, monkeypatch):
    """The end offset is a flushed position; a record that would cross it waits (``dispatch_until``)."""
    store = store_factory(flush_disk_type=FlushDiskType.SYNC_FLUSH)
    monkeypatch.setattr(store._commitlog.queue, "flush", lambda least_pages: True)
    rs = [store.put_message(make_message(i, wait_store_msg_ok=False)).append_message_result for i in range(3)]
    reput = store._reput
    mid = rs[1].wrote_offset + rs[1].wrote_bytes // 2
    assert reput.dispatch_until(mid) == rs[1].wrote_offset
    assert store.get_max_offset_in_queue(TOPIC, 0) == 1
    assert reput.behind() == mid - rs[1].wrote_offset
    end = rs[2].wrote_offset + rs[2].wrote_bytes
    assert reput.dispatch_until(end) == end
    assert store.get_max_offset_in_queue(TOPIC, 0) == 3 and reput.behind() == 0


def test_shutdown_of_a_sync_store_dispatches_what_it_flushed(store_factory):
    store = store_factory(flush_disk_type=FlushDiskType.SYNC_FLUSH)
    for i in range(5):
        store.put_message(make_message(i, wait_store_msg_ok=False))
    store.shutdown()
    assert not os.path.exists(os.path.join(store.root, "abort"))
    store = store_factory(flush_disk_type=FlushDiskType.SYNC_FLUSH)
    assert store.get_max_offset_in_queue(TOPIC, 0) == 5
    store_factory.expect_messages(5)


# ------------------------------------------------------------------------------------------------------
# catching up from the commit log
# ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("abnormal", [False, True], ids=["clean", "abort-file"])
def test_missing_consume_queues_are_rebuilt_byte_for_byte(store_factory, abnormal):
    store = store_factory(mapped_file_size_consume_queue=20 * 64)
    n = fill(store)
    assert store.get_max_phy_offset() > 2 * SMALL_FILE              # crosses files and their blanks
    table = store.get_topic_queue_table()
    store.shutdown()
    before = cq_files(store.root)
    shutil.rmtree(os.path.join(store.root, "consumequeue"))
    if abnormal:
        open(os.path.join(store.root, "abort"), "wb").close()
    store = store_factory(mapped_file_size_consume_queue=20 * 64)
    assert store.get_topic_queue_table() == table
    assert store.dispatch_behind_bytes() == 0
    store.shutdown()
    assert cq_files(store.root) == before
    store_factory.expect_messages(n)


def _cut_units(root, keep):
    """Zero every unit from the first one ``keep(unit)`` rejects, in every consume-queue file."""
    for rel, data in cq_files(root).items():
        for pos in range(0, len(data), 20):
            phy, size, _ = struct.unpack_from(">qiq", data, pos)
            if size == 0 or not keep(phy):
                with open(os.path.join(root, "consumequeue", rel), "r+b") as f:
                    f.seek(pos)
                    f.write(bytes(len(data) - pos))
                break


def test_consume_queues_behind_catch_up(store_factory):
    """Every queue lost its units from one commit-log offset on (what a crash leaves when the queues were
    last flushed there): a normal open dispatches from the highest offset the queues reference."""
    store = store_factory(mapped_file_size_consume_queue=20 * 1000)
    n = fill(store, 600)
    cut = store.look_message_by_offset(store.get_commit_log_offset_in_queue(TOPIC, 0, 40)).commit_log_offset
    store.shutdown()
    before = cq_files(store.root)
    _cut_units(store.root, lambda phy: phy < cut)
    assert cq_files(store.root) != before
    store = store_factory(mapped_file_size_consume_queue=20 * 1000)
    store.shutdown()
    assert cq_files(store.root) == before
    store_factory.expect_messages(n)


def test_consume_queues_unequally_behind_after_a_crash(store_factory):
    """After a crash (abort file), queues behind by different amounts are rebuilt from the checkpoint's time:
    abnormal recovery dispatches from there."""
    store = store_factory(mapped_file_size_consume_queue=20 * 1000)
    n = fill(store, 600)
    store.shutdown()
    before = cq_files(store.root)
    for k, rel in enumerate(sorted(before)):
        path = os.path.join(store.root, "consumequeue", rel)
        data = before[rel]
        units = next(p for p in range(0, len(data) + 20, 20) if p == len(data) or data[p + 8:p + 12] == bytes(4))
        keep = max(0, units - 20 * (5 + 7 * k))
        with open(path, "r+b") as f:
            f.seek(keep)
            f.write(bytes(len(data) - keep))
    open(os.path.join(store.root, "abort"), "wb").close()
    store = store_factory(mapped_file_size_consume_queue=20 * 1000)
    store.shutdown()
    assert cq_files(store.root) == before
    store_factory.expect_messages(n)


def test_commit_log_only_store_is_indexed_by_dispatch(store_factory):
    """A folder holding only a commit log (a broker copied without its queues): reads work after open."""
    store = store_factory()
    rs = [store.put_message(make_message(i, queue_id=i % 2)) for i in range(300)]
    store.shutdown()
    for name in ("consumequeue", "index"):
        shutil.rmtree(os.path.join(store.root, name))
    os.unlink(os.path.join(store.root, "checkpoint"))
    store = store_factory()
    assert store.get_topic_queue_table() == {(TOPIC, 0): 150, (TOPIC, 1): 150}
    g = store.get_message(GROUP, TOPIC, 1, 0, 32)
    assert [m.body for m in g.messages] == [b"Hello RocketMQ %d" % i for i in range(1, 64, 2)]
    assert store.get_message_store_timestamp(TOPIC, 0, 149) == rs[298].append_message_result.store_timestamp
    r = store.put_message(make_message(300, queue_id=1))
    assert r.append_message_result.logics_offset == 150
    store_factory.expect_messages(301)


def test_read_only_open_does_not_rebuild_or_write(store_factory):
    """A read-only opener writes nothing: missing queues stay missing for it (no dispatch)."""
    store = store_factory()
    for i in range(10):
        store.put_message(make_message(i))
    store.shutdown()
    shutil.rmtree(os.path.join(store.root, "consumequeue"))
    reader = store_factory(read_only=True)
    assert not os.path.exists(os.path.join(store.root, "consumequeue"))
    assert reader.get_message(GROUP, TOPIC, 0, 0).status is GetMessageStatus.NO_MESSAGE_IN_QUEUE
    assert reader.look_message_by_offset(0).body == b"Hello RocketMQ 0"
    reader.shutdown()
    assert not os.path.exists(os.path.join(store.root, "consumequeue"))


# ------------------------------------------------------------------------------------------------------
# re-dispatch is ignored
# ------------------------------------------------------------------------------------------------------


def test_re_dispatching_everything_changes_nothing(store_factory):
    """``buildCQRepeatedly``: walking the whole log again over built queues leaves them as they are."""
    store = store_factory(mapped_file_size_consume_queue=20 * 64)
    n = fill(store, 500)
    store.flush()
    before = cq_files(store.root)
    table = store.get_topic_queue_table()
    cl = store._commitlog.queue
    end = store.get_max_phy_offset()
    assert store._dispatcher.reput(cl.files, cl.mapped_file_size, 0, end) == end
    store._dispatcher.reput(cl.files, cl.mapped_file_size, cl.files[1].file_from_offset, end)
    assert cq_files(store.root) == before
    assert store.get_topic_queue_table() == table
    assert all(len(store.query_message(TOPIC, "key%d" % i).messages) <= 1 for i in range(0, n, 37))
    r = store.put_message(make_message(n))
    assert r.append_message_result.logics_offset == table[(TOPIC, 0)]
    store_factory.expect_messages(n + 1)


@pytest.mark.no_verify
def test_a_checked_re_dispatch_returns_the_queues_found_behind(store_factory):
    """Recovery's re-dispatch (``reput_checked``) returns what it reached and, for each queue lacking units
    before a record of it, where the first such record is; it gives that record no unit. The dispatcher
    keeps no attribute for it."""
    store = store_factory()
    offsets = [store.put_message(make_message(i)).append_message_result.wrote_offset for i in range(10)]
    cl = store._commitlog.queue
    end = store.get_max_phy_offset()
    assert store._dispatcher.reput_checked(cl.files, cl.mapped_file_size, 0, end) == (end, {})
    cq = store._cq_store.find(TOPIC, 0)
    cq.truncate_dirty_logic_files(offsets[5])             # the queue lost its last 5 units
    assert cq.get_max_offset_in_queue() == 5
    assert store._dispatcher.reput_checked(cl.files, cl.mapped_file_size, offsets[7], end) == \
        (end, {(TOPIC, 0): offsets[7]})
    assert cq.get_max_offset_in_queue() == 5              # no unit at the wrong offset
    assert not hasattr(store._dispatcher, "gaps")


# ------------------------------------------------------------------------------------------------------
# what enters a queue
# ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("rebuild", [False, True], ids=["inline", "reput"])
def test_transaction_types(store_factory, rebuild):
    """docs/format.md §7.2: only NOT and COMMIT types enter a consume queue; PREPARED and ROLLBACK records carry
    queue offset 0 and take none."""
    store = store_factory()
    kinds = [SysFlag.TRANSACTION_NOT_TYPE, SysFlag.TRANSACTION_PREPARED_TYPE, SysFlag.TRANSACTION_COMMIT_TYPE,
             SysFlag.TRANSACTION_ROLLBACK_TYPE, SysFlag.TRANSACTION_NOT_TYPE]
    for i, k in enumerate(kinds):
        assert store.put_message(make_message(i, sys_flag=k)).is_ok()
    if rebuild:
        store.shutdown()
        shutil.rmtree(os.path.join(store.root, "consumequeue"))
        store = store_factory()
    g = store.get_message(GROUP, TOPIC, 0, 0, 32)
    assert [m.body for m in g.messages] == [b"Hello RocketMQ %d" % i for i in (0, 2, 4)]
    assert [m.queue_offset for m in g.messages] == [0, 1, 2]
    assert store.get_topic_queue_table() == {(TOPIC, 0): 3}
    recs = list(iter_commitlog(os.path.join(store.root, "commitlog")))
    assert [m.queue_offset for m in recs] == [0, 0, 1, 0, 2]
    store_factory.expect_messages(5)


@pytest.mark.parametrize("rebuild", [False, True], ids=["inline", "reput"])
def test_schedule_topic_tags_code_is_the_deliver_time(store_factory, fake_clock, rebuild):
    """docs/format.md §2.2: in ``SCHEDULE_TOPIC_XXXX`` the unit's tags code is store time + the level's delay
    (level capped at the highest, 18 = 2 h); other topics keep the tags hash."""
    store = store_factory(clock=fake_clock)
    levels = [1, 3, 18, 99]
    want: dict[int, list] = {}
    for lvl in levels:
        fake_clock.advance(7)
        # the store rewrites a delay message into the schedule topic, queue level - 1 (capped)
        m = Message(TOPIC, b"delayed", tags="TagA", queue_id=0, delay_time_level=lvl)
        r = store.put_message(m)
        assert r.is_ok(), r
        delay = {1: 1000, 3: 10_000, 18: 7_200_000, 99: 7_200_000}[lvl]
        want.setdefault(min(lvl, 18) - 1, []).append(
            (r.append_message_result.wrote_offset, r.append_message_result.wrote_bytes,
             r.append_message_result.store_timestamp + delay))
    r = store.put_message(make_message(9, delay_time_level=0))
    if rebuild:
        store.shutdown()
        shutil.rmtree(os.path.join(store.root, "consumequeue"))
        store = store_factory(clock=fake_clock)
    for qid, units in want.items():
        assert list(iter_consume_queue(os.path.join(store.root, "consumequeue", SCHEDULE_TOPIC, str(qid)))) == units
    (u,) = iter_consume_queue(os.path.join(store.root, "consumequeue", TOPIC, "0"))
    assert u[2] == java_hash("TagA")


def test_long_topic_v2_records_dispatch_on_both_paths(store_factory):
    topic = "T" * 200                     # > 127 chars: a V2 record (2-byte topic length)
    store = store_factory()
    rs = [store.put_message(make_message(i, topic=topic)) for i in range(3)]
    assert all(r.is_ok() for r in rs)
    assert store.get_message(GROUP, topic, 0, 0).message_count == 3
    store.shutdown()
    before = cq_files(store.root)
    shutil.rmtree(os.path.join(store.root, "consumequeue"))
    store = store_factory()
    assert [m.topic for m in store.get_message(GROUP, topic, 0, 0).messages] == [topic] * 3
    store.shutdown()
    assert cq_files(store.root) == before
    unit = struct.unpack(">qiq", before[os.path.join(topic, "0", "%020d" % 0)][:20])
    assert unit == (0, rs[0].append_message_result.wrote_bytes, java_hash("TagA"))
