"""Power cuts of a store delivering timer messages (issue 38; docs/powerloss.md, "Timers"): a writer process puts
RocketMQ 5 timer messages (``deliver_at_ms`` / ``delay_ms``, due 0.4 to 2 s later, a 100 ms tick) into a store on the
power-cut layer while its timer services enqueue them into 4 KiB timer-log files (which roll several times a second),
deliver them to their topics and write ``config/timercheck`` every 50 ms. The writer is killed (at a seeded random
moment, or at a named point of the timer store: ``timer.delivered``, ``timer.flushed``, ``timer.checkpoint``, the
``n``-th time, ``n`` seeded), the power is cut (``drop`` and ``torn``), and on each folder the cut leaves:

* the checkpoint the cut kept is read raw: ``lastReadTimeMs`` (R) and ``lastTimerQueueOffset`` (Q). A timer message
  whose timer-queue offset is below Q was enqueued before that checkpoint, and one whose slot (its ``TIMER_OUT_MS``)
  is below R too was delivered before it (read from its slot, or put at once by the enqueue when already due): the
  checkpoint *says it was delivered*;
* the store is reopened in this process with its timer services on the real clock (a ``StoreCorruptedError`` fails
  the test: the timer files must survive a cut), and the test waits until every timer is due and nothing is pending;
* then every message of the real topics is read and checked:

  - each is a message the writer put, intact (body, topic, queue), with ``TIMER_ENQUEUE_MS`` and ``TIMER_DEQUEUE_MS``,
    delivered no earlier than its deliver time (less the precision);
  - every durably acknowledged timer (SYNC_FLUSH: every ack; ASYNC_FLUSH: below the flushed offset its put saw) is
    delivered at least once;
  - a message the checkpoint says was delivered is there exactly once: its delivery survived the cut (the checkpoint
    never claims what the cut took back) and it is not delivered again;
  - other duplicates (slots after R, read again: at least once, as RocketMQ) are counted and printed.

The seed is printed; ``PYSTORE_POWERLOSS_SEED=N`` replays a run.
"""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass
from pathlib import Path

import crash_writer as cw  # tests/ is on sys.path (tests/conftest.py)
import pytest
from writer_procs import read_line

from .powercut import durable, seeded, stop_writer

pytestmark = pytest.mark.powerloss

FILE = 65536
TOPICS = cw.TOPICS[:2]
QUEUES = 2
P = 100                     # timer_precision_ms: ten ticks a second
#: the store's timer settings, for the writer and the reopened store: 4 KiB timer-log files (78 units each) roll
#: several times a second; the timer log, wheel and checkpoint are flushed every 50 ms
TIMER_OPTIONS = {"timer_precision_ms": P, "mapped_file_size_timer_log": 4096, "timer_flush_interval_ms": 50}
WRITER_OPTIONS = {"flush_interval_commit_log": 200, "flush_commit_log_least_pages": 1}
#: a timer's delay, ms
DELAY = (400, 2000)
#: the named points of the timer store (pystore.system.crashpoint) and the range of n (the n-th arrival)
NAMED = {"timer.delivered": (2, 12), "timer.flushed": (5, 40), "timer.checkpoint": (5, 40)}

TIMER_WRITER = r'''
import os, random, sys, time
import crash_writer as cw
from pystore import Message
from pystore.config import FlushDiskType
root, ack, seed, mode = sys.argv[1:5]
rng = random.Random(int(seed))
flush = FlushDiskType.SYNC_FLUSH if mode == "sync" else FlushDiskType.ASYNC_FLUSH
store = cw.open_store(root, %(file)d, flush_disk_type=flush, **%(options)r)
flushed_of = store._commitlog.queue
print("READY", flush=True)
fd = os.open(ack, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
topics = %(topics)r
lo, hi = %(delay)r
for i in range(10**7):
    t, qid = rng.randrange(len(topics)), rng.randrange(%(queues)d)
    body = cw.make_body(i, topics[t], qid, rng.randint(0, 200))
    now = time.time_ns() // 1000000
    delay = rng.randint(lo, hi)
    if i %% 2:
        m = Message(topics[t], body, keys="k%%d" %% i, queue_id=qid, deliver_at_ms=now + delay)
    else:
        m = Message(topics[t], body, keys="k%%d" %% i, queue_id=qid, delay_ms=delay)
    r = store.put_message(m)
    a = r.append_message_result
    # "<idx> <offset> <size> <flushed> <topic> <queue> <timer-queue offset> <deliver ms> <status>" after the put
    # returned (the store computes the deliver time of delay_ms from its own clock, read after "now")
    os.write(fd, b"%%d %%d %%d %%d %%d %%d %%d %%d %%s\n" %% (i, a.wrote_offset if a else -1, a.wrote_bytes if a else 0,
             flushed_of.flushed_where, t, qid, a.logics_offset if a else -1, now + delay, r.status.name.encode()))
    time.sleep(0.001)
''' % {"file": FILE, "options": {**TIMER_OPTIONS, **WRITER_OPTIONS}, "topics": TOPICS, "queues": QUEUES,
       "delay": DELAY}


@dataclass(frozen=True)
class Put:
    idx: int
    offset: int
    size: int
    flushed: int        # the commit log's flushed offset when the put returned
    topic: str
    queue_id: int
    timer_offset: int   # its offset in rmq_sys_wheel_timer queue 0
    deliver_ms: int     # when it is due (at or before the store's own deliver time)
    status: str

    @property
    def slot_ms(self) -> int:
        """Its wheel slot: ``TIMER_OUT_MS`` as the put side rounds it (timer_put.round_deliver_ms)."""
        return self.deliver_ms - P if self.deliver_ms % P == 0 else self.deliver_ms // P * P


def read_puts(path: Path) -> list[Put]:
    """The whole lines of the writer's log (a line cut by the kill is ignored)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    out = []
    for line in data.split(b"\n")[:-1]:
        p = line.split()
        if len(p) == 9:
            n = [int(x) for x in p[:8]]
            out.append(Put(n[0], n[1], n[2], n[3], TOPICS[n[4]], n[5], n[6], n[7], p[8].decode()))
    return out


@pytest.mark.parametrize("model", ["journal", "strict"])
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_timer_writer_power_cut(powercut, procs, tmp_path, model, mode):
    rng = seeded()
    # the three named points over the module's four tests (each test one; the fourth a seeded one of them)
    index = ["sync-journal", "sync-strict", "async-journal", "async-strict"].index("%s-%s" % (mode, model))
    named = sorted(NAMED)[index if index < len(NAMED) else rng.randrange(len(NAMED))]
    for point in ("random", named):
        fs = powercut(model)
        log_path = tmp_path / ("puts-%s" % point)
        crash = None
        if point != "random":
            crash = "%s:%d" % (point, rng.randint(*NAMED[point]))
        p = procs.start(str(fs.mount / "store"), str(log_path), str(rng.randrange(1 << 30)), mode,
                        env=fs.writer_env(), script=TIMER_WRITER, crashpoint=crash)
        read_line(p, "READY", 60.0)
        when = stop_writer(p, rng, "at %s" % crash if crash else None, (0.8, 2.5), 60.0)
        puts = read_puts(log_path)
        acks = [a for a in puts if a.status == "PUT_OK"]
        assert acks, "%s: the writer acknowledged nothing before it was killed" % when
        promised = durable(acks, mode)
        cuts = [(crash_mode, fs.crash(mode=crash_mode, seed=rng.randrange(1 << 30))) for crash_mode in ("drop", "torn")]
        fs.close()
        check_cuts(cuts, puts, acks, promised, "%s %s %s" % (model, mode, when))


def check_cuts(cuts: list[tuple[str, Path]], puts: list[Put], acks: list[Put], promised: list[Put], what: str) -> None:
    """Reopen every folder the cuts left (all at once: their timers come due together), wait for every timer, check
    what was delivered (the module docstring)."""
    from pystore.timer import TimerCheckpoint, checkpoint_path

    said = {}
    stores = []
    try:
        for crash_mode, out in cuts:
            root = out / "store"
            cp = TimerCheckpoint(checkpoint_path(str(root)), read_only=True)
            said[crash_mode] = (cp.last_read_time_ms, cp.last_timer_queue_offset)
            stores.append((crash_mode, cw.open_store(root, FILE, **TIMER_OPTIONS)))
        due = max(a.deliver_ms for a in puts) + 3 * P
        deadline = time.monotonic() + 60
        for crash_mode, store in stores:
            while time.time_ns() // 1_000_000 < due or store.timer_stats()["pending"] > 0:
                assert time.monotonic() < deadline, "%s %s: timers still pending after 60 s: %s" % (
                    what, crash_mode, store.timer_stats())
                time.sleep(0.05)
        for crash_mode, store in stores:
            read_time, queue_offset = said[crash_mode]
            check_delivered(store, puts, acks, promised, read_time, queue_offset, "%s %s" % (what, crash_mode))
    finally:
        for _, store in stores:
            store.shutdown()


def check_delivered(store, puts: list[Put], acks: list[Put], promised: list[Put], read_time: int, queue_offset: int,
                    what: str) -> None:
    from pystore.status import GetMessageStatus
    from pystore.timer import TIMER_DEQUEUE_MS, TIMER_ENQUEUE_MS, TIMER_OUT_MS

    by_idx = {a.idx: a for a in puts}
    last = max(by_idx)
    counts: collections.Counter[int] = collections.Counter()
    for topic in TOPICS:
        for qid in range(QUEUES):
            offset, hi = store.get_min_offset_in_queue(topic, qid), store.get_max_offset_in_queue(topic, qid)
            while offset < hi:
                r = store.get_message("timer-check", topic, qid, offset, 32)
                assert r.status == GetMessageStatus.FOUND, (what, topic, qid, offset, r)
                for m in r.messages:
                    idx = cw.check_message(m)           # intact, at its own topic and queue
                    put = by_idx.get(idx)
                    assert put is not None or idx == last + 1, (
                        "%s: message %d delivered, which the writer never put" % (what, idx))
                    props = m.properties
                    assert TIMER_ENQUEUE_MS in props and TIMER_DEQUEUE_MS in props, (what, idx, props)
                    due = put.deliver_ms if put is not None else int(props[TIMER_OUT_MS])
                    dequeued = int(props[TIMER_DEQUEUE_MS])
                    assert dequeued >= due - P and m.store_timestamp >= due - P, (
                        "%s: message %d due at %d delivered at %d (stored %d)" % (what, idx, due, dequeued,
                                                                                   m.store_timestamp))
                    counts[idx] += 1
                offset = r.next_begin_offset
    lost = [a for a in promised if counts[a.idx] == 0]
    assert not lost, "%s: %d of %d durably acknowledged timers never delivered, first %s" % (
        what, len(lost), len(promised), lost[0])
    # the checkpoint's word: enqueued before it (queue offset below Q) and its slot read before it (below R)
    said = [a for a in acks if a.timer_offset < queue_offset and a.slot_ms < read_time]
    wrong = [(a, counts[a.idx]) for a in said if counts[a.idx] != 1]
    assert not wrong, ("%s: %d timers the checkpoint (lastReadTimeMs %d, lastTimerQueueOffset %d) says were delivered "
                       "are delivered %s times, first %s" % (what, len(wrong), read_time, queue_offset,
                                                             sorted({n for _, n in wrong}), wrong[0][0]))
    dups = {i: n for i, n in counts.items() if n > 1}
    print("%s: %d puts, %d acked, %d durable, %d delivered (%d the checkpoint says before the cut: read time %d, "
          "queue offset %d); duplicates %d (%d extra deliveries); acked but not durable and lost %d"
          % (what, len(puts), len(acks), len(promised), len(counts), len(said), read_time, queue_offset, len(dups),
             sum(dups.values()) - len(dups), sum(1 for a in acks if counts[a.idx] == 0)))
