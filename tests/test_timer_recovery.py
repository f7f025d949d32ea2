"""Timer recovery across a crash (pystore.timer.timer_store, RocketMQ ``TimerMessageStore.recover``): a real writer
process puts timer messages, delivers some of them and is SIGKILLed; a new process opens the store and delivers the
rest. No timer is lost, and none whose slot the checkpoint counted as read is delivered again (the ones read after
the last checkpoint may be: delivery is at least once, as RocketMQ's).

The writer runs on the real clock (the timers are a few seconds long), so this test takes about ten seconds.
"""

from __future__ import annotations

import collections
import time

from writer_procs import kill, read_line

from pystore import Message
from pystore.config import FlushDiskType
from pystore.engine.store import MessageStore
from pystore.timer import TIMER_TOPIC, TimerCheckpoint, checkpoint_path

N = 40

WRITER = r"""
import sys, time
from pystore import Message
from pystore.engine.store import MessageStore
root, n = sys.argv[1], int(sys.argv[2])
store = MessageStore.open(root, mapped_file_size_commit_log=1 << 20, timer_flush_interval_ms=100)
for i in range(n):
    # due from 1 s to 5 s from now, spread over the ticks
    r = store.put_message(Message("TopicTest", b"%d" % i, delay_ms=1000 + i * 100, properties={"UNIQ_KEY": "k%d" % i}))
    assert r.is_ok(), r
print("PUT", flush=True)
time.sleep(600)
"""


def _bodies(store: MessageStore) -> list:
    out = []
    offset = 0
    while True:
        res = store.get_message("g", "TopicTest", 0, offset, 64)
        if res is None or not res.messages:
            return out
        out += list(res.messages)
        offset += len(res.messages)


def test_sigkill_then_recover_loses_no_timer(procs, tmp_path, store_factory):
    root = tmp_path / "store"
    p = procs.start(str(root), str(N), script=WRITER)
    read_line(p, "PUT", timeout=60)
    time.sleep(2.5)              # some delivered, some pending, several checkpoints written
    kill(p)
    cp = TimerCheckpoint(checkpoint_path(str(root)), read_only=True)
    read_at_kill = cp.last_read_time_ms
    assert read_at_kill > 0 and cp.last_timer_queue_offset > 0
    before = {m.body for m in _bodies(store_factory("store", read_only=True))}
    assert 0 < len(before) < N, "the kill is meant to land between deliveries"

    store = store_factory("store", mapped_file_size_commit_log=1 << 20)
    deadline = time.monotonic() + 30
    while True:
        stats = store.timer_stats()
        got = _bodies(store)
        if stats["pending"] == 0 and len({m.body for m in got}) == N:
            break
        assert time.monotonic() < deadline, (stats, len(got))
        time.sleep(0.1)
    counts = collections.Counter(m.body for m in got)
    assert set(counts) == {b"%d" % i for i in range(N)}           # none lost
    for m in got:
        if counts[m.body] > 1:
            # delivered twice: only a slot read after the last checkpoint before the kill
            assert int(m.properties["TIMER_OUT_MS"]) >= read_at_kill, (m.body, read_at_kill)
    # the recovered store enqueued nothing twice: its timer queue holds the N puts only (no roll)
    assert store.get_max_offset_in_queue(TIMER_TOPIC, 0) == N


def test_the_checkpoint_never_counts_a_delivery_the_commit_log_has_not_flushed(store_factory, fake_clock):
    """``lastReadTimeMs`` says a slot's messages were delivered: a crash must not take those deliveries back, or they
    are lost for good (the slot is never read again). The timer store's flush makes the commit log durable up to the
    deliveries first (before the fix an ASYNC_FLUSH store wrote the checkpoint while the delivered messages were only
    in the page cache: a power cut lost them; tests/powerloss/test_timer_powerloss.py)."""
    # the commit log's own flush never runs in this test: 10 s between flushes of at least 1024 dirty pages, and the
    # thorough flush is on the fake clock, which stays within a few seconds
    store = store_factory(clock=fake_clock, flush_disk_type=FlushDiskType.ASYNC_FLUSH, timer_precision_ms=100,
                          flush_interval_commit_log=10_000, flush_commit_log_least_pages=1024,
                          timer_flush_interval_ms=20)
    t0 = fake_clock.now
    assert store.put_message(Message("TopicTest", b"due", delay_ms=500)).is_ok()
    # in the wheel before its time comes: delivered by the dequeue of its slot, whose read the checkpoint counts (an
    # enqueue that found it due would deliver it at once, and the checkpoint's queue offset would count it instead)
    ts = store.timer_message_store
    deadline = time.monotonic() + 20
    while ts.curr_queue_offset < 1:
        assert time.monotonic() < deadline, "not enqueued"
        time.sleep(0.01)
    fake_clock.now = t0 + 1000
    deadline = time.monotonic() + 20
    while True:
        got = _bodies(store)
        cp = TimerCheckpoint(checkpoint_path(store.root), read_only=True)
        if got and cp.last_read_time_ms > int(got[0].properties["TIMER_OUT_MS"]):
            break
        assert time.monotonic() < deadline, "not delivered and checkpointed"
        time.sleep(0.02)
    (m,) = got
    # the checkpoint on disk counts the slot as read: the delivery is on disk too
    assert store._commitlog.queue.flushed_where >= m.commit_log_offset + m.store_size


def test_a_power_cut_after_a_roll_whose_next_file_stayed_empty(store_factory, fake_clock):
    """The enqueue rolls the timer log (the blank closes the full file, the next one is made) and hands back to
    Python; a flush that comes before the next unit syncs the full file and writes a checkpoint whose flushed
    position is the next file's start, while the next file, with nothing in it to flush, was never synced. A power
    cut then leaves it empty (its size never reached the disk; tests/powerloss, the strict model). Recovery goes on
    at that file's start, as RocketMQ does: before, it ended the log at the blank, below the flushed position, and
    refused the store. Nothing is enqueued twice, though the checkpoint's queue offset is older than the log's
    units: the log's last unit, before the blank, is found in the timer queue; and every timer is delivered once."""
    from pystore.timer.timer_log import UNIT_SIZE, offset_for_last_unit

    file_size = 4096
    opts = dict(clock=fake_clock, timer_precision_ms=100, mapped_file_size_timer_log=file_size,
                timer_flush_interval_ms=20)
    store = store_factory("store", **opts)
    per_file = offset_for_last_unit(file_size) // UNIT_SIZE + 1
    for i in range(per_file):
        assert store.put_message(Message("TopicTest", b"%d" % i, delay_ms=60_000 + i * 100)).is_ok()
    ts = store.timer_message_store
    deadline = time.monotonic() + 20
    while ts.curr_queue_offset < per_file:
        assert time.monotonic() < deadline, "not enqueued"
        time.sleep(0.01)
    assert ts.timer_log.max_offset == per_file * UNIT_SIZE      # the first file full, not rolled yet
    ts._roll_timer_log()
    ts.flush()
    root = store_factory.path("store")
    assert TimerCheckpoint(checkpoint_path(str(root)), read_only=True).last_timer_log_flush_pos == file_size
    store.shutdown()
    first, second = root / "timerlog" / ("%020d" % 0), root / "timerlog" / ("%020d" % file_size)
    with open(second, "wb"):
        pass                                    # its size never reached the disk
    # and the checkpoint older than the units the log holds (its queue offset 10 units back)
    cp = TimerCheckpoint(checkpoint_path(str(root)))
    cp.last_timer_queue_offset = cp.master_timer_queue_offset = per_file - 10
    cp.flush()
    blank = first.read_bytes()[per_file * UNIT_SIZE:]

    store = store_factory("store", **opts)
    ts = store.timer_message_store
    assert ts.timer_log.max_offset == file_size
    assert first.read_bytes()[per_file * UNIT_SIZE:] == blank
    assert ts.curr_queue_offset == per_file
    assert store.timer_stats()["pending"] == per_file
    # a timer put now goes to the next file, which the enqueue makes
    assert store.put_message(Message("TopicTest", b"after", delay_ms=30_000)).is_ok()
    deadline = time.monotonic() + 20
    while ts.timer_log.max_offset != file_size + UNIT_SIZE:
        assert time.monotonic() < deadline, ts.timer_log
        time.sleep(0.01)
    fake_clock.advance(60_000 + per_file * 100 + 1000)
    want = sorted([b"%d" % i for i in range(per_file)] + [b"after"])
    deadline = time.monotonic() + 30
    while len(got := _bodies(store)) < len(want):
        assert time.monotonic() < deadline, (store.timer_stats(), len(got))
        time.sleep(0.05)
    time.sleep(0.3)
    assert sorted(m.body for m in _bodies(store)) == want
