"""Cleaning: expired and disk-pressure deletion of commit-log files and what follows it in the consume queues
and the index; the manual queue operations (docs/format.md §9, RocketMQ's DefaultMessageStoreCleanFilesTest)."""

from __future__ import annotations

import os
import time

import pytest
from conftest import SMALL_FILE, make_message

from pystore import GetMessageStatus, PutMessageStatus, StoreError
from pystore.tools import iter_consume_queue

HOUR = 3_600_000
CQ_FILE = 20 * 64            # 64 units a consume-queue file


def _fill(store, n, topic="TopicTest", body_size=1000):
    for i in range(n):
        assert store.put_message(make_message(i, topic=topic, body_size=body_size)).status == PutMessageStatus.PUT_OK
    store.flush()


def _age_files(folder, ms_ago, now_ms):
    for name in os.listdir(folder):
        t = (now_ms - ms_ago) / 1000
        os.utime(os.path.join(folder, name), (t, t))


def _files(store, *parts):
    names = sorted(os.listdir(os.path.join(store.root, *parts)))
    if parts == ("commitlog",):
        # the file the allocate service made ahead is not in the queue yet (as in RocketMQ)
        names = [n for n in names if int(n) < store.get_max_phy_offset()]
    return names


def _open(store_factory, fake_clock, **kw):
    kw.setdefault("mapped_file_size_consume_queue", CQ_FILE)
    kw.setdefault("delete_when", "%02d" % ((time.localtime(fake_clock() / 1000).tm_hour + 12) % 24))
    kw.setdefault("delete_commit_log_files_interval", 0)
    kw.setdefault("delete_consume_queue_files_interval", 0)
    kw.setdefault("clean_resource_interval", 3_600_000)    # passes run only when the test asks
    kw.setdefault("disk_usage", lambda path: 0.10)           # the machine's own disk must not decide
    return store_factory(clock=fake_clock, **kw)


def test_manual_deletion_removes_expired_files_oldest_first_never_the_last(store_factory, fake_clock):
    s = _open(store_factory, fake_clock)
    store_factory.skip_check()
    _fill(s, 400)                                   # ~6 commit-log files of 64 KiB
    logs = _files(s, "commitlog")
    assert len(logs) >= 5
    _age_files(os.path.join(s.root, "commitlog"), 73 * HOUR, fake_clock())
    assert s.clean_files() == (0, 0)                # not the hour, not manual, disk fine: nothing happens
    s.execute_delete_files_manually()
    deleted, follow = s.clean_files()
    assert deleted == len(logs) - 1                 # every file but the last
    assert _files(s, "commitlog") == logs[-1:]
    assert s.get_min_phy_offset() == int(logs[-1])
    # the consume queue dropped the files that only pointed below the new min, and corrected its min offset
    assert follow > 0
    cq_min = s.get_min_offset_in_queue("TopicTest", 0)
    assert cq_min > 0
    assert s.get_commit_log_offset_in_queue("TopicTest", 0, cq_min) >= int(logs[-1])
    assert s.get_commit_log_offset_in_queue("TopicTest", 0, cq_min - 1) < int(logs[-1]) or cq_min % 64 == 0
    r = s.get_message("g", "TopicTest", 0, 0)
    assert r.status == GetMessageStatus.OFFSET_TOO_SMALL and r.next_begin_offset == cq_min
    r = s.get_message("g", "TopicTest", 0, cq_min)
    assert r.status == GetMessageStatus.FOUND and r.messages[0].queue_offset == cq_min
    assert s.get_max_offset_in_queue("TopicTest", 0) == 400


def test_a_held_commit_log_file_is_forced_out_on_the_store_clock(store_factory, fake_clock):
    """A head file a reader holds is shut down by the pass and kept (no file after it goes either), and forced
    out once ``destroy_mapped_file_interval_forcibly`` has passed on the store's clock: the deletion and the
    hanged-file retry time it on that one clock (the retry read the wall clock, which is years past this fake
    one, and forced the file out in the pass that shut it down)."""
    s = _open(store_factory, fake_clock, destroy_mapped_file_interval_forcibly=1000, redelete_hanged_file_interval=1)
    store_factory.skip_check()
    _fill(s, 400)
    logs = _files(s, "commitlog")
    head = os.path.join(s.root, "commitlog", logs[0])
    _age_files(os.path.join(s.root, "commitlog"), 73 * HOUR, fake_clock())
    view = s.get_commit_log_data(0)
    s.execute_delete_files_manually()
    assert s.clean_files()[0] == 0 and os.path.exists(head)
    fake_clock.advance(999)
    assert s.clean_files()[0] == 0 and os.path.exists(head)
    fake_clock.advance(1)
    assert s.clean_files()[0] == len(logs) - 1 and not os.path.exists(head)
    assert bytes(view.buffer[:4]) == bytes(view.buffer[:4])     # the view still reads its mapping
    view.release()


def test_a_held_consume_queue_file_is_forced_out_on_the_store_clock(store_factory, fake_clock):
    """A consume-queue file a reader holds (``queue_units``) is kept by the passes that would delete it until
    60 s have passed on the store's clock since the first of them (its files read the wall clock, so no
    movement of the store's clock forced it out)."""
    s = _open(store_factory, fake_clock)
    store_factory.skip_check()
    _fill(s, 400)
    folder = os.path.join(s.root, "consumequeue", "TopicTest", "0")
    first = os.path.join(folder, sorted(os.listdir(folder))[0])
    units = s.queue_units("TopicTest", 0, 0)

    def a_pass_past_more_files():
        _fill(s, 200)                               # the commit log's min offset moves at each pass
        _age_files(os.path.join(s.root, "commitlog"), 73 * HOUR, fake_clock())
        s.execute_delete_files_manually()
        before = s.get_min_phy_offset()
        s.clean_files()
        assert s.get_min_phy_offset() > before

    a_pass_past_more_files()
    assert os.path.exists(first)
    fake_clock.advance(59_999)
    a_pass_past_more_files()
    assert os.path.exists(first)
    fake_clock.advance(1)
    a_pass_past_more_files()
    assert not os.path.exists(first)
    assert len(units) == 64
    del units


def test_files_younger_than_the_reserved_time_stay(store_factory, fake_clock):
    s = _open(store_factory, fake_clock)
    _fill(s, 300)
    logs = _files(s, "commitlog")
    _age_files(os.path.join(s.root, "commitlog"), 71 * HOUR, fake_clock())
    s.execute_delete_files_manually()
    assert s.clean_files() == (0, 0)
    assert _files(s, "commitlog") == logs
    store_factory.expect_messages(300)


def test_batch_limit_and_the_delete_hour(store_factory, fake_clock):
    hour = time.localtime(fake_clock() / 1000).tm_hour
    s = _open(store_factory, fake_clock, delete_when="%d;%d" % ((hour + 5) % 24, hour), delete_file_batch_max=2)
    store_factory.skip_check()
    _fill(s, 400)
    logs = _files(s, "commitlog")
    _age_files(os.path.join(s.root, "commitlog"), 100 * HOUR, fake_clock())
    assert s.clean_files()[0] == 2                  # the hour is in delete_when; two files a pass
    assert _files(s, "commitlog") == logs[2:]
    assert s.clean_files()[0] == 2
    assert _files(s, "commitlog") == logs[4:]


def test_disk_pressure_marks_the_disk_full_and_deletes_unexpired_files(store_factory, fake_clock):
    usage = {"ratio": 0.5}
    s = _open(store_factory, fake_clock, disk_usage=lambda path: usage["ratio"])
    store_factory.skip_check()
    _fill(s, 400)
    logs = _files(s, "commitlog")
    assert s.clean_files() == (0, 0)
    assert not s.running_flags.is_disk_full()

    usage["ratio"] = 0.95                            # over the warning level (0.90)
    deleted, _ = s.clean_files()
    assert s.running_flags.is_disk_full()
    assert s.running_flags.get_flag_bits() & (1 << 4)
    assert deleted == len(logs) - 1                  # cleanImmediately ignores the expiry
    r = s.put_message(make_message(1))
    assert r.status == PutMessageStatus.SERVICE_NOT_AVAILABLE

    usage["ratio"] = 0.80                            # over disk_max_used_space_ratio (75 %), not critical
    s.clean_files()
    assert not s.running_flags.is_disk_full()
    assert s.put_message(make_message(2)).status == PutMessageStatus.PUT_OK


def test_forcibly_ratio_without_clean_file_forcibly_keeps_unexpired_files(store_factory, fake_clock):
    s = _open(store_factory, fake_clock, disk_usage=lambda path: 0.87, clean_file_forcibly_enable=False)
    _fill(s, 300)
    logs = _files(s, "commitlog")
    assert s.clean_files() == (0, 0)                 # space says delete, but only expired files may go
    assert _files(s, "commitlog") == logs
    assert not s.running_flags.is_disk_full()        # 0.87 is under the warning level
    store_factory.expect_messages(300)


def test_index_files_below_the_min_offset_are_deleted(store_factory, fake_clock):
    # a tiny index so that it rolls: 8 slots, 40 entries a file
    s = _open(store_factory, fake_clock, max_hash_slot_num=8, max_index_num=40)
    store_factory.skip_check()
    for i in range(400):
        fake_clock.advance(1)
        s.put_message(make_message(i, body_size=1000))
    s.flush()
    before = _files(s, "index")
    assert len(before) > 3
    _age_files(os.path.join(s.root, "commitlog"), 80 * HOUR, fake_clock())
    s.execute_delete_files_manually()
    s.clean_files()
    after = _files(s, "index")
    assert after and len(after) < len(before) and after[-1] == before[-1]
    # what is left still answers for the messages that are left
    last = s.look_message_by_offset(s.get_commit_log_offset_in_queue("TopicTest", 0, 399))
    found = s.query_message("TopicTest", last.keys[0])
    assert [m.commit_log_offset for m in found.messages] == [last.commit_log_offset]


def _expire_old_queue(s, fake_clock):
    """100 messages in queue Old/0, then 300 in New/0; the commit-log files aged and cleaned: every message of
    Old/0 is below the log's min offset."""
    _fill(s, 100, topic="Old")
    _fill(s, 300, topic="New")
    _age_files(os.path.join(s.root, "commitlog"), 80 * HOUR, fake_clock())
    s.execute_delete_files_manually()
    s.clean_files()
    assert s.get_min_phy_offset() > s.get_commit_log_offset_in_queue("Old", 0, 99)


def test_clean_expired_consumer_queue_drops_queues_below_the_min_offset(store_factory, fake_clock):
    s = _open(store_factory, fake_clock)
    store_factory.skip_check()
    _expire_old_queue(s, fake_clock)
    assert s.clean_expired_consumer_queue() == [("Old", 0)]
    assert ("Old", 0) not in s.get_topic_queue_table()
    assert not os.path.exists(os.path.join(s.root, "consumequeue", "Old", "0"))
    assert s.get_message("g", "Old", 0, 0).status == GetMessageStatus.NO_MESSAGE_IN_QUEUE
    assert s.get_max_offset_in_queue("New", 0) == 300
    assert s.clean_expired_consumer_queue() == []


@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
def test_clean_expired_consumer_queue_keeps_a_queue_put_into_after_its_look(store_factory, fake_clock, monkeypatch,
                                                                             flush):
    # RocketMQ's look and destroy leave a window: a message put into the queue in between is acknowledged,
    # then hidden with the queue (not found by queue until a restart). The put is made right after the look.
    import threading

    from pystore import FlushDiskType
    from pystore.queue.consume_queue import ConsumeQueue

    s = _open(store_factory, fake_clock, flush_disk_type=FlushDiskType[flush])
    _expire_old_queue(s, fake_clock)
    looked = ConsumeQueue.get_last_offset
    late: list = []

    def look_then_put(self):  # type: ignore[no-untyped-def]
        last = looked(self)
        if self.topic == "Old" and not late:
            t = threading.Thread(target=lambda: late.append(s.put_message(make_message(7, topic="Old", body_size=100))))
            t.start()
            t.join(60)
            assert late, "the put waited for the cleaner"
        return last

    monkeypatch.setattr(ConsumeQueue, "get_last_offset", look_then_put)
    assert s.clean_expired_consumer_queue() == []
    monkeypatch.setattr(ConsumeQueue, "get_last_offset", looked)
    r = late[0]
    assert r.status == PutMessageStatus.PUT_OK and r.append_message_result.logics_offset == 100
    deadline = time.monotonic() + 60                        # SYNC_FLUSH: dispatch follows the flushed end
    while s.get_max_offset_in_queue("Old", 0) < 101 and time.monotonic() < deadline:
        time.sleep(0.01)
    got = s.get_message("g", "Old", 0, 100)
    assert got.status == GetMessageStatus.FOUND
    assert [m.commit_log_offset for m in got.messages] == [r.append_message_result.wrote_offset]
    # once every message of the queue is below the min offset again, the queue goes
    _fill(s, 300, topic="New")
    _age_files(os.path.join(s.root, "commitlog"), 80 * HOUR, fake_clock())
    s.execute_delete_files_manually()
    s.clean_files()
    assert s.get_min_phy_offset() > r.append_message_result.wrote_offset
    assert s.clean_expired_consumer_queue() == [("Old", 0)]
    store_factory.skip_check()


def test_clean_expired_consumer_queue_keeps_a_queue_whose_put_is_dispatched_while_it_looks(store_factory, fake_clock,
                                                                                          monkeypatch):
    # SYNC_FLUSH: dispatch follows the flushes, without the put lock. A message the log counted but had not
    # dispatched goes into the queue while the cleaner reads its last unit: that unit was not the last.
    import threading

    from pystore import FlushDiskType
    from pystore.queue.consume_queue import ConsumeQueue

    s = _open(store_factory, fake_clock, flush_disk_type=FlushDiskType.SYNC_FLUSH)
    _expire_old_queue(s, fake_clock)
    service = s._writer.flush_service
    dispatch = service.after_flush
    gate, held = threading.Event(), threading.Event()

    def gated(flushed):  # type: ignore[no-untyped-def]
        if not gate.is_set():
            held.set()
            gate.wait(60)
        return dispatch(flushed)

    monkeypatch.setattr(service, "after_flush", gated)
    late: list = []
    put = threading.Thread(target=lambda: late.append(s.put_message(make_message(7, topic="Old", body_size=100))))
    put.start()
    assert held.wait(60)                                    # appended and counted, flushed, not dispatched
    looked = ConsumeQueue.get_last_offset
    seen: list = []

    def look(self):  # type: ignore[no-untyped-def]
        last = looked(self)
        if self.topic == "Old":
            seen.append(last)
            if len(seen) == 2:                              # the look under the put lock: dispatch runs now
                gate.set()
                deadline = time.monotonic() + 60
                while self.get_max_offset_in_queue() < 101 and time.monotonic() < deadline:
                    time.sleep(0.001)
        return last

    monkeypatch.setattr(ConsumeQueue, "get_last_offset", look)
    assert s.clean_expired_consumer_queue() == []
    monkeypatch.setattr(ConsumeQueue, "get_last_offset", looked)
    gate.set()
    put.join(60)
    r = late[0]
    assert r.status == PutMessageStatus.PUT_OK and r.append_message_result.logics_offset == 100
    got = s.get_message("g", "Old", 0, 100)
    assert got.status == GetMessageStatus.FOUND
    assert [m.commit_log_offset for m in got.messages] == [r.append_message_result.wrote_offset]
    store_factory.skip_check()


def test_clean_unused_topic_waits_for_a_put_that_runs_python_while_it_rolls_a_file(store_factory, monkeypatch):
    # A put holds the cell it took for the length of the put, and a roll without a file made ahead calls
    # Python, which may hand the GIL to the cleaner: a queue forgotten then (any queue) left the put without
    # its cell. The cleaner now waits for the put lock.
    import threading

    from pystore.log.commitlog import CommitLog

    s = store_factory(mapped_file_size_commit_log=SMALL_FILE)
    assert s.put_message(make_message(0, topic="Gone")).status == PutMessageStatus.PUT_OK
    cl = s._commitlog
    roll_file = cl.roll_file
    locking, cleaned = threading.Event(), threading.Event()
    removed: list = []
    real_put_lock = CommitLog.put_lock

    def put_lock(self):  # type: ignore[no-untyped-def]
        if threading.current_thread() is cleaner:
            locking.set()
        return real_put_lock.__get__(self)

    def clean() -> None:
        removed.append(s.clean_unused_topic({"Keep"}))
        cleaned.set()

    cleaner = threading.Thread(target=clean)

    def roll(next_offset):  # type: ignore[no-untyped-def]
        if next_offset > 0 and not cleaner.is_alive() and not cleaned.is_set():
            cleaner.start()                                 # the cleaner runs while the put is in Python
            deadline = time.monotonic() + 60
            while not (locking.is_set() or cleaned.is_set()) and time.monotonic() < deadline:
                time.sleep(0.001)
            time.sleep(0.01)                                # the cleaner on its way into the lock, or done
        return roll_file(next_offset)

    monkeypatch.setattr(CommitLog, "put_lock", property(put_lock))
    monkeypatch.setattr(cl, "roll_file", roll)
    results = [s.put_message(make_message(i, topic="Keep", body_size=1000)) for i in range(200)]
    cleaner.join(60)
    assert removed == [[("Gone", 0)]]
    assert [r.status for r in results] == [PutMessageStatus.PUT_OK] * 200
    assert [r.append_message_result.logics_offset for r in results] == list(range(200))
    s.flush()
    units = list(iter_consume_queue(os.path.join(s.root, "consumequeue", "Keep", "0")))
    assert [u[0] for u in units] == [r.append_message_result.wrote_offset for r in results]
    store_factory.expect_messages(201)


def test_clean_unused_topic_leaves_no_put_bound_to_the_queue_it_destroys(store_factory, monkeypatch):
    # A put into the topic between forgetting its cell and removing its queue made a new cell bound to the
    # queue about to be destroyed: every later put into the topic was acknowledged into no queue. The put
    # now waits for the cleaner and starts a fresh queue.
    import threading

    from pystore.queue.queue_store import ConsumeQueueStore

    s = store_factory(mapped_file_size_commit_log=SMALL_FILE)
    for i in range(5):
        assert s.put_message(make_message(i, topic="T")).status == PutMessageStatus.PUT_OK
    remove = ConsumeQueueStore.remove
    during: list = []
    put = None

    def racing_remove(self, topic, queue_id):  # type: ignore[no-untyped-def]
        nonlocal put
        if put is None:
            put = threading.Thread(target=lambda: during.append(s.put_message(make_message(100, topic="T"))))
            put.start()
            put.join(0.5)                                   # done at once where nothing holds it off
        return remove(self, topic, queue_id)

    monkeypatch.setattr(ConsumeQueueStore, "remove", racing_remove)
    assert s.clean_unused_topic({"Other"}) == [("T", 0)]
    monkeypatch.setattr(ConsumeQueueStore, "remove", remove)
    put.join(60)
    later = [s.put_message(make_message(200 + i, topic="T")) for i in range(3)]
    assert during[0].append_message_result.logics_offset == 0
    assert [r.append_message_result.logics_offset for r in later] == [1, 2, 3]
    for r in during + later:
        got = s.get_message("g", "T", 0, r.append_message_result.logics_offset, 1)
        assert got.status == GetMessageStatus.FOUND
        assert [m.commit_log_offset for m in got.messages] == [r.append_message_result.wrote_offset]
    store_factory.skip_check()


@pytest.mark.parametrize("how", ["unused", "expired"])
def test_whole_queue_cleanups_keep_the_timer_queue_and_later_timers_are_delivered(store_factory, fake_clock, how):
    # The timer store reads the timer topic's queue on from the offset it reached: destroyed and started again
    # at 0, the queue would hold every later timer where the store never looks (acknowledged, never delivered).
    from pystore import Message
    from pystore.timer import TIMER_TOPIC

    s = _open(store_factory, fake_clock, timer_wheel_enable=True)
    for i in range(5):
        assert s.put_message(Message("Orders", b"early %d" % i, delay_ms=2000)).is_ok()
    deadline = time.monotonic() + 60                        # a liveness bound: the timer threads deliver
    while s.get_max_offset_in_queue("Orders", 0) < 5 and time.monotonic() < deadline:
        fake_clock.advance(1000)
        time.sleep(0.01)
    assert s.get_max_offset_in_queue("Orders", 0) == 5
    if how == "expired":
        _fill(s, 300, topic="New")
        _age_files(os.path.join(s.root, "commitlog"), 80 * HOUR, fake_clock())
        s.execute_delete_files_manually()
        s.clean_files()
        assert s.get_min_phy_offset() > s.get_commit_log_offset_in_queue(TIMER_TOPIC, 0, 4)
        assert (TIMER_TOPIC, 0) not in s.clean_expired_consumer_queue()
    else:
        assert (TIMER_TOPIC, 0) not in s.clean_unused_topic({"Orders", "New"})
    assert s.get_max_offset_in_queue(TIMER_TOPIC, 0) >= 5
    orders = s.get_max_offset_in_queue("Orders", 0)        # 0 when its expired queue went too
    assert s.put_message(Message("Orders", b"late", delay_ms=2000)).is_ok()
    deadline = time.monotonic() + 60
    while s.get_max_offset_in_queue("Orders", 0) <= orders and time.monotonic() < deadline:
        fake_clock.advance(1000)
        time.sleep(0.01)
    got = s.get_message("g", "Orders", 0, orders, 1)
    assert got.status == GetMessageStatus.FOUND and got.messages[0].body == b"late"
    store_factory.skip_check()


def test_clean_unused_topic_keeps_listed_and_system_topics(store_factory, fake_clock):
    s = _open(store_factory, fake_clock)
    for t in ("A", "B", "C"):
        _fill(s, 5, topic=t, body_size=10)
    removed = s.clean_unused_topic({"B"})
    assert sorted(removed) == [("A", 0), ("C", 0)]
    assert sorted(s.get_topic_queue_table()) == [("B", 0)]
    assert _files(s, "consumequeue") == ["B"]
    # the commit log is untouched and a new put to a removed topic starts a fresh queue
    assert s.get_max_phy_offset() > 0
    r = s.put_message(make_message(0, topic="A", body_size=10))
    assert r.append_message_result.logics_offset == 0
    s.flush()
    units = list(iter_consume_queue(os.path.join(s.root, "consumequeue", "A", "0")))
    assert len(units) == 1 and units[0][0] == r.append_message_result.wrote_offset
    # the queue the last put went to, removed: the next put to it starts fresh too (the put path remembers
    # the last put's queue)
    assert s.clean_unused_topic({"B"}) == [("A", 0)]
    r = s.put_message(make_message(0, topic="A", body_size=10))
    assert r.append_message_result.logics_offset == 0
    assert s.get_topic_queue_table()[("A", 0)] == 1
    with pytest.raises(TypeError):
        s.clean_unused_topic("B")
    store_factory.expect_messages(17)


def test_cleaning_needs_a_started_writable_store(store_factory, fake_clock):
    s = _open(store_factory, fake_clock)
    _fill(s, 3, body_size=10)
    ro = store_factory(read_only=True)
    with pytest.raises(StoreError):
        ro.execute_delete_files_manually()
    with pytest.raises(StoreError):
        ro.clean_unused_topic(set())
    s.shutdown()
    with pytest.raises(StoreError):
        s.clean_expired_consumer_queue()


def test_the_service_runs_passes_on_its_own(store_factory, fake_clock):
    s = _open(store_factory, fake_clock, clean_resource_interval=20)
    store_factory.skip_check()
    _fill(s, 300)
    logs = _files(s, "commitlog")
    _age_files(os.path.join(s.root, "commitlog"), 80 * HOUR, fake_clock())
    s.execute_delete_files_manually()
    deadline = time.monotonic() + 60
    # a pass deletes the files first and updates the queue (its min offset) at the end of the pass
    while ((_files(s, "commitlog") != logs[-1:] or s.get_min_phy_offset() != int(logs[-1]))
           and time.monotonic() < deadline):
        time.sleep(0.02)
    assert _files(s, "commitlog") == logs[-1:]
    assert SMALL_FILE * (len(logs) - 1) == s.get_min_phy_offset()


def test_file_reserved_time_zero_expires_every_file_but_the_current(store_factory, fake_clock):
    """``file_reserved_time=0`` (broker.conf ``fileReservedTime=0``) is RocketMQ's "every file but the one being
    written has expired": accepted (it was refused as out of range) and a manual pass deletes them all at once,
    with no ageing of the files."""
    from pystore.config import StoreConfig

    assert StoreConfig.from_properties("fileReservedTime=0").file_reserved_time == 0
    s = _open(store_factory, fake_clock, file_reserved_time=0)
    store_factory.skip_check()
    _fill(s, 400)
    logs = _files(s, "commitlog")
    assert len(logs) >= 5
    _age_files(os.path.join(s.root, "commitlog"), 0, fake_clock())     # written "now" by the store's clock
    s.execute_delete_files_manually()
    deleted, _ = s.clean_files()
    assert deleted == len(logs) - 1
    assert _files(s, "commitlog") == logs[-1:]
