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
