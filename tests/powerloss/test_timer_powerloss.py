"""Power cuts of a store delivering timer messages (issue 38; docs/powerloss.md, "Timers"): writer processes put
RocketMQ 5 timer messages (``deliver_at_ms`` / ``delay_ms``, a 100 ms tick) into a store on the power-cut layer while
its timer services enqueue them into 4 KiB timer-log files (which roll several times a second), deliver them to their
topics and write ``config/timercheck`` every 50 ms. The roll window (``timer_roll_window_slots``) is 8 ticks: a
timer due 0.4 to 0.65 s later waits in its slot, one due 0.9 to 2.5 s later is rolled (re-put into the timer queue with
``TIMER_ROLL_TIMES`` one higher, enqueued again) one to three times before it is delivered. Some timers put with
``deliver_at_ms`` are cancelled by a delete marker (``TIMER_DEL_UNIQKEY``, due at the same time) put at a random
moment from right after the timer to 300 ms before its time.

Two rounds: one writer (SYNC_FLUSH and ASYNC_FLUSH, both metadata models), and three processes sharing the store
(``shared_writers``, SYNC_FLUSH, both models: the first leads and runs the timer services). The writers are killed
(at a seeded random moment, or the one writer or the leader at a named point of the timer store: ``timer.delivered``,
``timer.flushed``, ``timer.checkpoint``, the ``n``-th time, ``n`` seeded; after the leader's death a follower takes
over the timer store and delivers for 0.8 to 1.5 s, from when it says it leads, before the others are killed), the
power is cut (``drop`` and
``torn``), and on each folder the cut leaves:

* the checkpoint the cut kept is read raw: ``lastReadTimeMs`` (R) and ``lastTimerQueueOffset`` (Q);
* the store is reopened in this process with its timer services on the real clock (a ``StoreCorruptedError`` fails
  the test: the timer files must survive a cut), and the test waits until every timer is due, every slot read and
  nothing is pending;
* then every message of the real topics (the deliveries) and of the timer queue (``rmq_sys_wheel_timer`` queue 0:
  each put timer, each rolled copy, each delete marker) is read. A delivery whose store time is before the cut was
  made by the killed writers (and survived the cut), a later one by the reopened store: *after recovery*.

What is required:

* each delivery is a timer a writer put, intact (body, topic, queue, key), with ``TIMER_ENQUEUE_MS`` and
  ``TIMER_DEQUEUE_MS``, no earlier than its deliver time (less the precision); no delete marker is ever delivered;
* every durably acknowledged timer (SYNC_FLUSH: every ack; ASYNC_FLUSH: below the flushed offset its put saw) that
  no cancel was put for is delivered at least once;
* rolls as RocketMQ sets them: a delivery's ``TIMER_ROLL_TIMES`` is absent (not rolled) or ``k`` >= 1, and the timer
  queue holds the copies of its chain, depth 0 (the put) to ``k``, each with the put's ``TIMER_OUT_MS``,
  ``REAL_TOPIC`` and ``REAL_QID``; ``k`` is within what the delay allows (each roll moves at least half a window
  on); a timer the checkpoint says was delivered (below) and due more than a window plus 1 s after its put was
  rolled at least once;
* **the checkpoint's word.** A copy of a timer below Q was enqueued before the checkpoint; if it is the deepest copy
  the timer ever has (no copy one roll deeper exists anywhere in the timer queue: its unit was not a roll) and its
  slot (``TIMER_OUT_MS``, the same for every copy) is below R, its final slot was read before the checkpoint (or it
  was delivered at once by the enqueue): the checkpoint *says it was delivered* (or cancelled). Such a timer is
  never delivered after recovery, and (one writer, or no takeover) is there exactly once, unless a cancel was put
  for it (then at most once). A rolled timer's copies have queue offsets of their own, so the rule follows the
  chain: the put's queue offset below Q says only that the first unit was enqueued;
* **cancels.** RocketMQ's rule: the delete marker is enqueued into the slot of its time, which is the timer's slot;
  reading the slot collects its markers and drops each message whose ``REAL_TOPIC+UNIQ_KEY`` one names. A marker
  enqueued after that slot was read is due on arrival and dropped (``doPut`` refuses a due marker): the message
  was delivered, the cancel came too late. So the check requires: a timer whose cancel was durably acknowledged
  and which has no delivery from before the cut is not delivered after recovery either. It cannot require more:
  a timer delivered before the cut (its marker was enqueued after its slot was read, or its slot was read before
  the marker's unit; the writer puts each cancel at least 300 ms before the time, so this takes an enqueue 300 ms
  late, or a leader takeover) may be delivered again after recovery when its slot is read again (at least once); a
  cancel whose put was not acknowledged, or (ASYNC_FLUSH) not flushed, may be lost with the cut, and its timer then
  delivered; and a timer with a cancel is never required to be delivered. This holds also for a timer due
  before the reopened store caught up (its enqueue through what the timer queue held at its open, its read time at
  the tick of its open): the enqueue keeps a timer and its marker in one slot read (docs/powerloss.md, "Timers").
  A durably cancelled timer delivered after recovery only fails the test (asserted at the end of each test,
  after every other check of every cut);
* other duplicates (slots after R, read again: at least once, as RocketMQ; a takeover's re-read slots) are counted
  and printed, not failed.

The seed is printed; ``PYSTORE_POWERLOSS_SEED=N`` replays a run's choices (the kill moments are on the real clock).
"""

from __future__ import annotations

import collections
import select
import time
from dataclasses import dataclass, field
from pathlib import Path

import crash_writer as cw  # tests/ is on sys.path (tests/conftest.py)
import pytest
from writer_procs import kill, read_line, wait_killed_by_crashpoint

from .powercut import durable, seeded, stop_writer

pytestmark = pytest.mark.powerloss

FILE = 65536
TOPICS = cw.TOPICS[:2]
QUEUES = 2
P = 100                     # timer_precision_ms: ten ticks a second
ROLL_SLOTS = 8              # timer_roll_window_slots: a timer due 0.8 s or more after its enqueue is rolled
#: the store's timer settings, for the writers and the reopened store: 4 KiB timer-log files (78 units each) roll
#: several times a second; the timer log, wheel and checkpoint are flushed every 50 ms; an 8-tick roll window
TIMER_OPTIONS = {"timer_precision_ms": P, "mapped_file_size_timer_log": 4096, "timer_flush_interval_ms": 50,
                 "timer_roll_window_slots": ROLL_SLOTS}
WRITER_OPTIONS = {"flush_interval_commit_log": 200, "flush_commit_log_least_pages": 1}
#: a timer's delay, ms: short ones wait in their slot, long ones roll (LONG_SHARE of the puts)
SHORT, LONG, LONG_SHARE = (400, 650), (900, 2500), 0.7
#: the share of the deliver_at_ms timers that get a cancel, put at least CANCEL_LEAD ms before their time
CANCEL_SHARE, CANCEL_LEAD = 0.3, 300
#: the named points of the timer store (pystore.system.crashpoint) and the range of n (the n-th arrival)
NAMED = {"timer.delivered": (2, 12), "timer.flushed": (5, 40), "timer.checkpoint": (5, 40)}
#: the writers of the shared round (each its own idx range: who * 10**7 + i); the first leads
SHARED = (1, 2, 3)
IDX_STRIDE = 10**7

TIMER_WRITER = r'''
import bisect, os, random, sys, time
import crash_writer as cw
from pystore import Message
from pystore.config import FlushDiskType
root, ack, seed, mode, who = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
rng = random.Random(seed)
flush = FlushDiskType.SYNC_FLUSH if mode == "sync" else FlushDiskType.ASYNC_FLUSH
# who 0: the one writer; 1, 2, 3: processes sharing the store (SYNC_FLUSH: every ack is durable, no flushed offset)
store = cw.open_store(root, %(file)d, flush_disk_type=flush, shared_writers=who > 0, **%(options)r)
queue = store._commitlog.queue if who == 0 else None
print("READY", flush=True)
fd = os.open(ack, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
topics = %(topics)r
short, long, long_share = %(short)r, %(long)r, %(long_share)r
cancels = []            # (when to put it, idx, topic, deliver ms), by time


def log(kind, idx, r, t, qid, deliver, now):
    # "<kind> <idx> <offset> <size> <flushed> <topic> <queue> <timer-queue offset> <deliver ms> <status> <ms before
    # the put>" after the put returned (kind T a timer, C its cancel; the store computes the deliver time of
    # delay_ms from its own clock, read after "now")
    a = r.append_message_result
    os.write(fd, b"%%s %%d %%d %%d %%d %%d %%d %%d %%d %%s %%d\n" %% (
        kind, idx, a.wrote_offset if a else -1, a.wrote_bytes if a else 0, queue.flushed_where if queue else 0, t,
        qid, a.logics_offset if a else -1, deliver, r.status.name.encode(), now))


i = 0
leading = False
while True:
    now = time.time_ns() // 1000000
    if cancels and cancels[0][0] <= now:
        _, idx, t, deliver = cancels.pop(0)
        os.write(fd, b"X %%d\n" %% idx)      # before the put: its record may survive without its line
        r = store.put_message(Message(topics[t], b"cancel %%d" %% idx, deliver_at_ms=deliver,
                                      properties={"TIMER_DEL_UNIQKEY": "%%s+u%%d" %% (topics[t], idx)}))
        log(b"C", idx, r, t, 0, deliver, now)
        continue
    idx = who * %(stride)d + i
    t, qid = rng.randrange(len(topics)), rng.randrange(%(queues)d)
    body = cw.make_body(idx, topics[t], qid, rng.randint(0, 200))
    delay = rng.randint(*(long if rng.random() < long_share else short))
    props = {"UNIQ_KEY": "u%%d" %% idx}
    if i %% 2:
        m = Message(topics[t], body, keys="k%%d" %% idx, queue_id=qid, deliver_at_ms=now + delay, properties=props)
    else:
        m = Message(topics[t], body, keys="k%%d" %% idx, queue_id=qid, delay_ms=delay, properties=props)
    r = store.put_message(m)
    log(b"T", idx, r, t, qid, now + delay, now)
    if who > 1 and not leading and i %% 16 == 0 and store.writer_info().get("leader"):
        leading = True
        print("LEADING", flush=True)        # a follower took the services over (the test times its pause from here)
    if i %% 2 and r.status.name == "PUT_OK" and rng.random() < %(cancel_share)r:
        at = now + rng.randint(0, delay - %(lead)d)
        bisect.insort(cancels, (at, idx, t, now + delay))
    i += 1
    time.sleep(0.001)
''' % {"file": FILE, "options": {**TIMER_OPTIONS, **WRITER_OPTIONS}, "topics": TOPICS, "queues": QUEUES,
       "short": SHORT, "long": LONG, "long_share": LONG_SHARE, "cancel_share": CANCEL_SHARE, "lead": CANCEL_LEAD,
       "stride": IDX_STRIDE}


@dataclass(frozen=True)
class Put:
    kind: str           # "T" a timer, "C" the cancel of timer idx
    idx: int
    offset: int
    size: int
    flushed: int        # the commit log's flushed offset when the put returned (one writer)
    topic: str
    queue_id: int
    timer_offset: int   # its offset in rmq_sys_wheel_timer queue 0
    deliver_ms: int     # when it is due (at or before the store's own deliver time)
    status: str
    put_ms: int         # the clock before the put

    @property
    def ok(self) -> bool:
        return self.status == "PUT_OK"


@dataclass
class WriterLog:
    """What the writers' logs say (whole lines only: a line cut by the kill is ignored)."""
    timers: dict[int, Put] = field(default_factory=dict)
    cancels: dict[int, Put] = field(default_factory=dict)       # by the idx of the timer they cancel
    cancel_tried: set[int] = field(default_factory=set)         # idx of every timer a cancel was put for (or begun)
    last: dict[int, int] = field(default_factory=dict)          # the highest idx each writer logged

    def unlogged_ok(self, idx: int) -> bool:
        """A timer a writer was putting when it was killed: its record may be there without its line."""
        who = idx // IDX_STRIDE
        return idx == self.last.get(who, who * IDX_STRIDE - 1) + 1

    def acks(self) -> list[Put]:
        return [p for p in (*self.timers.values(), *self.cancels.values()) if p.ok]


def read_logs(paths: list[Path]) -> WriterLog:
    out = WriterLog()
    for path in paths:
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            continue
        for line in data.split(b"\n")[:-1]:
            p = line.split()
            if len(p) == 2 and p[0] == b"X":
                out.cancel_tried.add(int(p[1]))
            elif len(p) == 11 and p[0] in (b"T", b"C"):
                n = [int(x) for x in p[1:9]]
                put = Put(p[0].decode(), n[0], n[1], n[2], n[3], TOPICS[n[4]], n[5], n[6], n[7], p[9].decode(),
                          int(p[10]))
                if put.kind == "T":
                    out.timers[put.idx] = put
                    who = put.idx // IDX_STRIDE
                    out.last[who] = max(out.last.get(who, -1), put.idx)
                else:
                    out.cancels[put.idx] = put
    return out


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@pytest.mark.parametrize("model", ["journal", "strict"])
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_timer_writer_power_cut(powercut, procs, tmp_path, model, mode):
    rng = seeded()
    # the three named points over the module's four tests (each test one; the fourth a seeded one of them)
    index = ["sync-journal", "sync-strict", "async-journal", "async-strict"].index("%s-%s" % (mode, model))
    named = sorted(NAMED)[index if index < len(NAMED) else rng.randrange(len(NAMED))]
    tally = Tally()
    for point in ("random", named):
        fs = powercut(model)
        log_path = tmp_path / ("puts-%s" % point)
        crash = None
        if point != "random":
            crash = "%s:%d" % (point, rng.randint(*NAMED[point]))
        p = procs.start(str(fs.mount / "store"), str(log_path), str(rng.randrange(1 << 30)), mode, "0",
                        env=fs.writer_env(), script=TIMER_WRITER, crashpoint=crash)
        read_line(p, "READY", 60.0)
        when = stop_writer(p, rng, "at %s" % crash if crash else None, (0.8, 2.5), 60.0)
        cut_ms = now_ms()
        log = read_logs([log_path])
        assert any(a.kind == "T" for a in log.acks()), "%s: the writer acknowledged nothing before it was killed" % when
        cuts = [(crash_mode, fs.crash(mode=crash_mode, seed=rng.randrange(1 << 30))) for crash_mode in ("drop", "torn")]
        fs.close()
        check_cuts(cuts, log, mode, "%s %s %s" % (model, mode, when), cut_ms, tally)
    tally.check_exercised()


@pytest.mark.parametrize("model", ["journal", "strict"])
def test_shared_timer_writers_power_cut(powercut, procs, tmp_path, model):
    """Three processes put timers into one store opened with ``shared_writers`` (SYNC_FLUSH); the first leads and
    runs the timer services. Cut once with all three running (killed at a seeded moment), once after the leader
    was killed at a named point of its timer store and a follower took over (it recovers the timer store from the
    files the leader left, as after a crash, and delivers from there) and ran 0.8 to 1.5 s once it led. Same checks as one
    writer's (the module docstring); after a takeover a timer may be delivered twice before the cut (the new
    leader reads again the slots after the dead leader's last checkpoint), so there "exactly once" is "never again
    after recovery"."""
    rng = seeded()
    named = sorted(NAMED)[rng.randrange(len(NAMED))]
    tally = Tally()
    for point in ("random", named):
        fs = powercut(model)
        logs = [tmp_path / ("puts-%s-%d" % (point, who)) for who in SHARED]
        crash = "%s:%d" % (point, rng.randint(*NAMED[point])) if point != "random" else None
        ps = []
        for who, log_path in zip(SHARED, logs):
            ps.append(procs.start(str(fs.mount / "store"), str(log_path), str(rng.randrange(1 << 30)), "sync",
                                  str(who), env=fs.writer_env(), script=TIMER_WRITER,
                                  crashpoint=crash if who == SHARED[0] else None))
            read_line(ps[-1], "READY", 60.0)        # one after the other: the first recovers and leads
        leader_dead = None
        if crash is None:
            pause = rng.uniform(0.8, 2.5)
            time.sleep(pause)
            when = "at %.2f s" % pause
        else:
            wait_killed_by_crashpoint(ps[0], 60.0)
            leader_dead = now_ms()
            # the pause runs from the takeover, not from the death: on a loaded machine (the suite's other worker)
            # the survivor may take a second or more to lead, and a cut before it delivered tests nothing of it
            took = _wait_leading(ps[1:], 60.0)
            pause = rng.uniform(0.8, 1.5)
            time.sleep(pause)
            when = "leader at %s, a follower led %.2f s later, the others cut %.2f s after that" % (crash, took, pause)
        for p in ps[1:] if crash else ps:
            kill(p)
        cut_ms = now_ms()
        log = read_logs(logs)
        acked_by = {a.idx // IDX_STRIDE for a in log.acks() if a.kind == "T"}
        assert acked_by == set(SHARED), "%s: writers %s acknowledged nothing" % (when, set(SHARED) - acked_by)
        cuts = [(crash_mode, fs.crash(mode=crash_mode, seed=rng.randrange(1 << 30))) for crash_mode in ("drop", "torn")]
        fs.close()
        check_cuts(cuts, log, "sync", "shared %s %s" % (model, when), cut_ms, tally, leader_dead=leader_dead)
    assert tally.taken_over > 0, "the follower that took over delivered no timer before the cut"
    tally.check_exercised()


def _wait_leading(ps: list, timeout: float) -> float:
    """Wait until one of the writer processes ``ps`` says it leads (``LEADING``); the seconds it took."""
    t0 = time.monotonic()
    streams = {p.stdout: p for p in ps}
    while time.monotonic() - t0 < timeout:
        ready, _, _ = select.select(list(streams), [], [], max(0.0, timeout - (time.monotonic() - t0)))
        for stream in ready:
            line = stream.readline().decode()
            if line.startswith("LEADING"):
                return time.monotonic() - t0
            if not line:
                streams.pop(stream)         # ended: kill() at the cut says why
        if not streams:
            break
    pytest.fail("no follower led within %.0f s of the leader's death" % timeout)


# -- the checks (the module docstring) ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Delivery:
    """A message of a real topic."""
    idx: int
    stored_ms: int
    dequeue_ms: int
    rolls: int              # TIMER_ROLL_TIMES (0: absent)


@dataclass(frozen=True)
class Copy:
    """A message of the timer queue: a put timer (rolls 0), a rolled copy, or a delete marker."""
    offset: int
    idx: int
    rolls: int
    out_ms: int             # TIMER_OUT_MS: the slot of its time
    real: tuple[str, int]   # REAL_TOPIC, REAL_QID
    marker: bool


@dataclass
class Tally:
    """What a test's cuts exercised, for ``check_exercised``."""
    max_rolls: int = 0
    cancelled: int = 0
    #: timers a follower that took over delivered before the cut (-1: no takeover)
    taken_over: int = -1
    #: the cancel check's failures, asserted once every cut of the test was checked (so that the other checks run
    #: on each of them)
    broken_cancels: list[str] = field(default_factory=list)

    def check_exercised(self) -> None:
        assert not self.broken_cancels, "\n".join(self.broken_cancels)
        assert self.max_rolls >= 2, "no timer was delivered after two rolls: the round tests no roll"
        assert self.cancelled > 0, "no cancel took effect: the round tests no cancel"


def check_cuts(cuts: list[tuple[str, Path]], log: WriterLog, mode: str, what: str, cut_ms: int, tally: Tally,
               leader_dead: int | None = None) -> None:
    """Reopen every folder the cuts left (all at once: their timers come due together), wait for every timer, check
    what was delivered (the module docstring). ``cut_ms``: the clock once every writer was dead; ``leader_dead``:
    when the leader died, if a follower took over before the cut."""
    from pystore.timer import TimerCheckpoint, checkpoint_path

    said = {}
    stores = []
    try:
        for crash_mode, out in cuts:
            root = out / "store"
            cp = TimerCheckpoint(checkpoint_path(str(root)), read_only=True)
            said[crash_mode] = (cp.last_read_time_ms, cp.last_timer_queue_offset)
            stores.append((crash_mode, cw.open_store(root, FILE, **TIMER_OPTIONS), now_ms()))
        caught = caught_up(stores)
        stores = [(crash_mode, store) for crash_mode, store, _ in stores]
        due = max(p.deliver_ms for p in (*log.timers.values(), *log.cancels.values())) + 3 * P
        deadline = time.monotonic() + 60
        for crash_mode, store in stores:
            while not settled(store, due):
                assert time.monotonic() < deadline, "%s %s: timers still pending after 60 s: %s" % (
                    what, crash_mode, store.timer_stats())
                time.sleep(0.05)
        for crash_mode, store in stores:
            read_time, queue_offset = said[crash_mode]
            check_delivered(store, log, mode, read_time, queue_offset, cut_ms, leader_dead, tally,
                            "%s %s" % (what, crash_mode), caught[crash_mode])
    finally:
        for _, store in stores:
            store.shutdown()


def caught_up(stores: list) -> dict[str, int]:
    """When each reopened store had caught up: its enqueue through what the timer queue held at its open, and its
    read time at the tick of its open (the clock then, ms). A timer due before that is taken by the catch-up, where a
    cancel can come too late (the module docstring, "cancels")."""
    from pystore.timer import TIMER_TOPIC

    want = {crash_mode: (store.get_max_offset_in_queue(TIMER_TOPIC, 0), opened // P * P)
            for crash_mode, store, opened in stores}
    caught: dict[str, int] = {}
    deadline = time.monotonic() + 60
    while len(caught) < len(stores):
        assert time.monotonic() < deadline, "the reopened stores did not catch up in 60 s"
        for crash_mode, store, _ in stores:
            ts = store.timer_message_store
            offset, tick = want[crash_mode]
            if crash_mode not in caught and (not ts.opened or (ts.curr_queue_offset >= offset
                                                               and ts.curr_read_time_ms >= tick)):
                caught[crash_mode] = now_ms()
        time.sleep(0.005)
    return caught


def settled(store, due: int) -> bool:
    """Every timer is due, every slot up to then read, every unit of the timer queue enqueued and none pending (a
    delete marker whose message is not in its slot counts -1 there, so ``pending`` alone could read 0 early). A store
    whose cut kept no timer message has no timer files, and nothing to read."""
    s = store.timer_stats()
    read = s["read_time_ms"] >= due or not store.timer_message_store.opened
    return now_ms() >= due and read and s["enqueue_behind"] == 0 and s["pending"] <= 0


def read_queue(store, topic: str, qid: int):
    from pystore.status import GetMessageStatus

    offset, hi = store.get_min_offset_in_queue(topic, qid), store.get_max_offset_in_queue(topic, qid)
    while offset < hi:
        r = store.get_message("timer-check", topic, qid, offset, 64)
        assert r.status == GetMessageStatus.FOUND, (topic, qid, offset, r)
        yield from r.messages
        offset = r.next_begin_offset


def read_deliveries(store, log: WriterLog, what: str) -> dict[int, list[Delivery]]:
    """Every message of the real topics, checked intact and on time, by timer."""
    from pystore.timer import TIMER_DEQUEUE_MS, TIMER_ENQUEUE_MS, TIMER_OUT_MS, TIMER_ROLL_TIMES

    out: dict[int, list[Delivery]] = collections.defaultdict(list)
    for topic in TOPICS:
        for qid in range(QUEUES):
            for m in read_queue(store, topic, qid):
                assert not m.body.startswith(b"cancel "), "%s: a delete marker (%r) was delivered to %s" % (
                    what, m.body, topic)
                idx = cw.check_message(m)           # intact, at its own topic and queue
                put = log.timers.get(idx)
                assert put is not None or log.unlogged_ok(idx), (
                    "%s: message %d delivered, which no writer put" % (what, idx))
                props = m.properties
                assert TIMER_ENQUEUE_MS in props and TIMER_DEQUEUE_MS in props, (what, idx, props)
                due = put.deliver_ms if put is not None else int(props[TIMER_OUT_MS])
                dequeued = int(props[TIMER_DEQUEUE_MS])
                assert dequeued >= due - P and m.store_timestamp >= due - P, (
                    "%s: message %d due at %d delivered at %d (stored %d)" % (what, idx, due, dequeued,
                                                                               m.store_timestamp))
                rolls = int(props.get(TIMER_ROLL_TIMES, "0"))
                assert (TIMER_ROLL_TIMES not in props) or rolls >= 1, (what, idx, props)
                out[idx].append(Delivery(idx, m.store_timestamp, dequeued, rolls))
    return out


def read_timer_queue(store, what: str) -> tuple[dict[int, list[Copy]], dict[int, list[Copy]]]:
    """The timer queue's copies by timer, and its delete markers by the timer they cancel."""
    from pystore.message.constants import MessageConst
    from pystore.timer import TIMER_DELETE_UNIQUE_KEY, TIMER_OUT_MS, TIMER_ROLL_TIMES, TIMER_TOPIC

    copies: dict[int, list[Copy]] = collections.defaultdict(list)
    markers: dict[int, list[Copy]] = collections.defaultdict(list)
    for m in read_queue(store, TIMER_TOPIC, 0):
        props = m.properties
        real = (props[MessageConst.REAL_TOPIC], int(props[MessageConst.REAL_QID]))
        marker = m.body.startswith(b"cancel ")
        if marker:
            idx = int(m.body.split()[1])
            assert props[TIMER_DELETE_UNIQUE_KEY] == "%s+u%d" % (real[0], idx), (what, props)
        else:
            idx, topic, qid, _ = cw.parse_body(m.body)
            assert real == (topic, qid), "%s: timer %d's copy at %d: REAL_TOPIC/QID %s" % (what, idx, m.queue_offset,
                                                                                          real)
            assert props[MessageConst.UNIQ_KEY] == "u%d" % idx, (what, idx, props)
        c = Copy(m.queue_offset, idx, int(props.get(TIMER_ROLL_TIMES, "0")), int(props[TIMER_OUT_MS]), real, marker)
        (markers if marker else copies)[idx].append(c)
    return copies, markers


def says_delivered(chain: list[Copy], queue_offset: int, read_time: int) -> bool:
    """The checkpoint (R ``read_time``, Q ``queue_offset``) says the timer of ``chain`` (its copies in the timer queue)
    was delivered or cancelled: its deepest copy below Q was enqueued before the checkpoint and is the deepest it
    has anywhere (no roll followed it: a roll before the checkpoint left its copy in the flushed commit log, one
    after it happens again after recovery), and its slot is below R."""
    below = [c.rolls for c in chain if c.offset < queue_offset]
    return bool(below) and chain[0].out_ms < read_time and max(below) == max(c.rolls for c in chain)


def check_delivered(store, log: WriterLog, mode: str, read_time: int, queue_offset: int, cut_ms: int,
                    leader_dead: int | None, tally: Tally, what: str, caught_ms: int) -> None:
    acks = log.acks()
    promised = {(a.kind, a.idx) for a in durable(acks, mode)}
    got = read_deliveries(store, log, what)
    copies, markers = read_timer_queue(store, what)
    before = {idx: [d for d in ds if d.stored_ms <= cut_ms] for idx, ds in got.items()}
    after = {idx: [d for d in ds if d.stored_ms > cut_ms] for idx, ds in got.items()}

    # every durable timer without a cancel, delivered
    lost = [p for p in log.timers.values() if ("T", p.idx) in promised and p.idx not in log.cancel_tried
            and not got.get(p.idx)]
    assert not lost, "%s: %d of %d durably acknowledged timers never delivered, first %s" % (
        what, len(lost), len(promised), lost[0])

    # the timer queue: each put at its queue offset, the chains of rolled copies whole and consistent
    for p in log.timers.values():
        if ("T", p.idx) in promised:
            at = [c.rolls for c in copies.get(p.idx, []) if c.offset == p.timer_offset]
            assert at == [0], "%s: timer %d is not at its timer-queue offset %d (%s)" % (what, p.idx, p.timer_offset,
                                                                                          copies.get(p.idx))
    for idx, chain in copies.items():
        depths = {c.rolls for c in chain}
        assert depths == set(range(max(depths) + 1)), "%s: timer %d's rolled copies %s" % (what, idx, chain)
        assert len({(c.out_ms, c.real) for c in chain}) == 1, "%s: timer %d's copies differ: %s" % (what, idx, chain)
    window = ROLL_SLOTS * P
    for idx, ds in got.items():
        depths = {c.rolls for c in copies.get(idx, [])}
        put = log.timers.get(idx)
        for d in ds:
            assert d.rolls in depths, "%s: timer %d delivered with TIMER_ROLL_TIMES %d, its copies %s" % (
                what, idx, d.rolls, copies.get(idx))
            if put is not None:
                # each roll lands at least half a window after the write time it was enqueued at
                most = (put.deliver_ms - put.put_ms + 1000) // (ROLL_SLOTS // 2 * P)
                assert d.rolls <= most, "%s: timer %d (due %d ms after its put) rolled %d times" % (
                    what, idx, put.deliver_ms - put.put_ms, d.rolls)

    # the checkpoint's word
    said = {idx for idx, chain in copies.items() if says_delivered(chain, queue_offset, read_time)}
    again = [(idx, after[idx]) for idx in said if after.get(idx)]
    assert not again, ("%s: %d timers the checkpoint (lastReadTimeMs %d, lastTimerQueueOffset %d) says were delivered "
                       "are delivered again after recovery, first %s" % (what, len(again), read_time, queue_offset,
                                                                          again[0]))
    wrong = []
    for idx in said:
        n = len(before.get(idx, []))
        if idx in log.cancel_tried:
            if n > 1 and leader_dead is None:
                wrong.append((idx, n))
        elif n == 0 or (n > 1 and leader_dead is None):
            wrong.append((idx, n))
    assert not wrong, ("%s: %d timers the checkpoint (lastReadTimeMs %d, lastTimerQueueOffset %d) says were delivered "
                       "are delivered %s times before the cut, first %s" % (
                           what, len(wrong), read_time, queue_offset, sorted({n for _, n in wrong}), wrong[0]))
    unrolled = [idx for idx in said if idx in log.timers and got.get(idx)
                and log.timers[idx].deliver_ms - log.timers[idx].put_ms >= window + 1000
                and max(d.rolls for d in got[idx]) == 0]
    assert not unrolled, "%s: %d timers due more than a roll window later were never rolled, first %s" % (
        what, len(unrolled), log.timers[unrolled[0]])

    # cancels: a durable cancel of a timer not delivered before the cut keeps it from being delivered after recovery
    durable_cancels = [c for c in log.cancels.values() if ("C", c.idx) in promised]
    broken_all = [(c, after[c.idx]) for c in durable_cancels if not before.get(c.idx) and after.get(c.idx)]
    # every one of them fails, also a timer due before the reopened store caught up (the enqueue keeps a timer and
    # its marker in one slot read); those are counted apart in the report
    broken = broken_all
    caught_late = [b for b in broken_all if copies[b[0].idx][0].out_ms < caught_ms + P]
    if broken:
        c, ds = broken[0]
        rolled_broken = sum(1 for b, _ in broken if max(x.rolls for x in copies[b.idx]) > 0)
        late_ms = [d.stored_ms - copies[b.idx][0].out_ms for b, bd in broken for d in bd]
        tally.broken_cancels.append(
            "%s: %d of %d durably acknowledged cancels did not keep their timer from being delivered after recovery "
            "(it had no delivery before the cut; %d of them rolled timers; delivered %d to %d ms after their slot); "
            "first: the cancel %s; the timer delivered %s; its copies in the timer queue %s; its markers %s "
            "(checkpoint: lastReadTimeMs %d, lastTimerQueueOffset %d; cut at %d)" % (
                what, len(broken), len(durable_cancels), rolled_broken, min(late_ms), max(late_ms), c, ds,
                copies.get(c.idx), markers.get(c.idx), read_time, queue_offset, cut_ms))
    cancelled = sum(1 for c in durable_cancels if not got.get(c.idx))
    late = sum(1 for c in durable_cancels if before.get(c.idx))

    rolled = [max(d.rolls for d in ds) for ds in got.values() if ds]
    tally.max_rolls = max(tally.max_rolls, max(rolled, default=0))
    tally.cancelled += cancelled
    dups = {i: len(ds) for i, ds in got.items() if len(ds) > 1}
    takeover = ""
    if leader_dead is not None:
        n = sum(1 for ds in got.values() for d in ds if leader_dead < d.stored_ms <= cut_ms)
        takeover = "; %d delivered by the new leader before the cut" % n
        tally.taken_over = max(tally.taken_over, n)
    print("%s: %d puts, %d acked, %d durable, %d delivered (%d the checkpoint says before the cut, %d of them rolled: "
          "read time %d, queue offset %d); %d delivered rolled (at most %d times); cancels %d put, %d durable, %d took effect, "
          "%d too late (delivered before the cut), %d broken (delivered after recovery only), %d delivered by the "
          "catch-up (of the broken, due before the reopened store caught up); duplicates %d (%d extra "
          "deliveries); acked but not durable and lost %d%s"
          % (what, len(log.timers), sum(1 for a in acks if a.kind == "T"),
             sum(1 for k, _ in promised if k == "T"), len(got), len(said),
             sum(1 for idx in said if max(c.rolls for c in copies[idx]) > 0), read_time, queue_offset,
             sum(1 for r in rolled if r), max(rolled, default=0), len(log.cancels), len(durable_cancels), cancelled,
             late, len(broken), len(caught_late), len(dups), sum(dups.values()) - len(dups),
             sum(1 for p in log.timers.values() if p.ok and p.idx not in log.cancel_tried and not got.get(p.idx)),
             takeover))


# a writer that enqueues timers past its last timer checkpoint, then dies without a sync
KILLED_TIMER_WRITER = r'''
import os, signal, sys, time
import crash_writer as cw
from pystore import Message
from pystore.config import FlushDiskType
store = cw.open_store(sys.argv[1], 1 << 20, flush_disk_type=FlushDiskType.SYNC_FLUSH, timer_flush_interval_ms=3_600_000,
                      mapped_file_size_timer_log=1 << 20)
ts = store.timer_message_store
assert store.put_message(Message("Orders", b"first", delay_ms=3_600_000)).is_ok()
deadline = time.monotonic() + 60
while ts.curr_queue_offset < 1 and time.monotonic() < deadline:
    time.sleep(0.01)
ts.flush()                                            # the last checkpoint: one unit
for i in range(2000):                                 # ~100 KB of units past it, in the page cache only
    assert store.put_message(Message("Orders", b"t%d" % i, delay_ms=3_600_000)).is_ok()
while ts.curr_queue_offset < 2001 and time.monotonic() < deadline:
    time.sleep(0.01)
print("enqueued", ts.curr_queue_offset, ts.timer_log.max_offset, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
'''


@pytest.mark.parametrize("model", ["journal", "strict"])
def test_a_timer_log_recovered_after_a_kill_is_synced_before_its_checkpoint_counts_it(powercut, procs, model):
    # The timer log's files load as flushed to their ends; the units a killed writer appended after its last
    # checkpoint are only in the page cache. The recovering process must sync them before its checkpoint counts
    # them: a cut after that checkpoint left zeros below its flushed position, and the store refused to open.
    from pystore.config import FlushDiskType
    from pystore.errors import StoreCorruptedError

    fs = powercut(model)
    root = fs.mount / "store"
    p = procs.start(str(root), script=KILLED_TIMER_WRITER, env=fs.writer_env())
    words = read_line(p, "enqueued", timeout=120).split()
    end = int(words[2])
    p.wait()
    store = cw.open_store(root, 1 << 20, flush_disk_type=FlushDiskType.SYNC_FLUSH, timer_flush_interval_ms=3_600_000,
                          mapped_file_size_timer_log=1 << 20)
    try:
        ts = store.timer_message_store
        assert ts is not None and ts.timer_log.max_offset == end
        ts.flush()                                            # what the flush thread does first: its checkpoint
        assert ts.checkpoint.last_timer_log_flush_pos == end
        out = fs.crash(mode="drop")
    finally:
        store.shutdown()                                      # after the cut: changes nothing on its disk
    try:
        reopened = cw.open_store(out / "store", 1 << 20, mapped_file_size_timer_log=1 << 20)
    except StoreCorruptedError as e:
        pytest.fail("the cut left the timer log short of its checkpoint: %s" % e)
    try:
        assert reopened.timer_message_store is not None
        assert reopened.timer_message_store.timer_log.max_offset >= end
    finally:
        reopened.shutdown()
