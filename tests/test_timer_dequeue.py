"""The compiled dequeue of the timer store (pystore.timer._dequeue) against the Python path it stands for
(``TimerDelivery._dequeue_python``: ``TimerLog.walk``, then ``convert`` and the store's put per unit).

Two stores take the same timer messages under one fake clock and deliver the same slots, one through the compiled
walk and delivery, the other through Python alone; every byte of their commit logs and consume queues must be the
same. The slots mix what the delivery meets: plain messages of several topics and queues with tags, keys and
properties (``TIMER_ENQUEUE_MS``/``TIMER_DEQUEUE_MS`` already set, non-ASCII values, ``WAIT``), empty bodies,
flags, reconsume times, cancelled messages and their delete markers, rolled ones (re-put, delivered later), ones
already due when enqueued, slots read late (several at once), and units the compiled run hands to Python (an IPv6
born host, a ``REAL_QID`` only Python's ``int`` reads, a topic of more than 127 characters). The commit-log files
are small, so deliveries roll files; under ASYNC_FLUSH (the delivery dispatches its records), SYNC_FLUSH (the
reput does) and with the transient store pool.

Then: a damaged slot is refused with the file and offset; a store that takes no puts keeps its slot; the
deliveries of a leader of several writers continue another writer's queue offsets; ``stats_from_files`` sums the
slots ``occupied`` lists.
"""

from __future__ import annotations

import os
import struct
import time

import pytest
from conftest import BORN_BASE

from pystore import Message
from pystore.config import FlushDiskType
from pystore.errors import StoreCorruptedError
from pystore.timer import TIMER_TOPIC
from pystore.timer.timer_services import TimerServices
from pystore.timer.timer_stats import stats_from_files
from pystore.timer.timer_store import NotTakingPuts
from pystore.timer.timer_wheel import DEFAULT_SLOTS_TOTAL, TimerWheel

P = 1000
T0 = BORN_BASE                # the fake clock's start, on a tick
ROLL_SLOTS = 10               # a 10 s roll window
TOPICS = ["A", "TopicB", "Orders_2"]
CL_FILE = 16 * 1024         # commit-log files: the deliveries roll several
LONG_TOPIC = "L" * 130        # a V2 record's topic: Python's delivery


def wait_for(cond, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met within %ss" % timeout
        time.sleep(0.005)


def drained(store) -> bool:
    ts = store.timer_message_store
    store.flush()               # the transient pool: records are read and dispatched once committed
    if ts.flush_commitlog is not None:
        # SYNC_FLUSH: the records are dispatched by the reput once the group commit flushed them
        ts.flush_commitlog(store.get_max_phy_offset())
    return store.dispatch_behind_bytes() == 0 and ts.curr_queue_offset >= store.get_max_offset_in_queue(TIMER_TOPIC, 0)


def stop_dequeue_thread(store) -> None:
    """The test reads the slots itself, so that both stores put their deliveries in one order."""
    for s in store._services:
        if isinstance(s, TimerServices):
            s.threads[2].shutdown(True)


def stop_timer_threads(store) -> None:
    """Every thread of the timer store stopped: the test runs its enqueue, dequeue and flush itself."""
    for s in store._services:
        if isinstance(s, TimerServices):
            for t in s.threads:
                t.shutdown(True)


def specs() -> list[Message]:
    out = []
    born = BORN_BASE - 5000
    for i in range(150):
        topic = TOPICS[i % 3]
        at = T0 + 3000 + (i % 4) * 1000              # four slots
        kw: dict = dict(queue_id=i % 4, born_timestamp=born + i, deliver_at_ms=at)
        props = {"UNIQ_KEY": "u%d" % i}
        if i % 5 == 0:
            props["colour"] = "grün %d" % i
        if i % 7 == 0:
            props["TIMER_ENQUEUE_MS"] = "1"             # replaced in place
        if i % 11 == 0:
            props["TIMER_DEQUEUE_MS"] = "2"
        if i % 13 == 0:
            kw["wait_store_msg_ok"] = False
        if i % 17 == 0:
            kw["flag"] = 7
            kw["reconsume_times"] = 3
        if i % 19 == 0:
            kw["deliver_at_ms"] = T0 + 3000 + 25_000     # past the window: rolled, delivered later
        body = b"" if i % 23 == 0 else b"body %d " % i * (1 + i % 9)
        out.append(Message(topic, body, tags="t%d" % (i % 3) if i % 2 else None,
                           keys=["k%d" % i, "x%d" % (i % 5)] if i % 3 else None, properties=props, **kw))
    # delete markers, in the slots of the messages they cancel
    for i in (4, 20, 41, 77):
        out.append(Message(TOPICS[i % 3], b"", born_timestamp=born, deliver_at_ms=T0 + 3000 + (i % 4) * 1000,
                           properties={"TIMER_DEL_UNIQKEY": "%s+u%d" % (TOPICS[i % 3], i)}))
    # what the compiled run hands to Python, among the others
    out.append(Message("A", b"v6", born_timestamp=born, born_host=("::1", 9), deliver_at_ms=T0 + 4000))
    out.append(Message(LONG_TOPIC, b"long", born_timestamp=born, deliver_at_ms=T0 + 4000))
    out.append(Message(TIMER_TOPIC, b"plus", born_timestamp=born, properties={
        "TIMER_OUT_MS": str(T0 + 4000), "REAL_TOPIC": "TopicB", "REAL_QID": "+1", "UNIQ_KEY": "plus"}))
    # already due when it is enqueued: delivered by the enqueue
    out.append(Message(TIMER_TOPIC, b"due", born_timestamp=born, properties={
        "TIMER_OUT_MS": str(T0 - 5000), "REAL_TOPIC": "A", "REAL_QID": "2"}))
    return out


def run(store_factory, fake_clock, name: str, compiled: bool, flush: FlushDiskType, pool: bool = False):
    fake_clock.now = T0
    store = store_factory(name, clock=fake_clock, timer_stop_enqueue=True, timer_roll_window_slots=ROLL_SLOTS,
                          mapped_file_size_commit_log=CL_FILE, flush_disk_type=flush,
                          transient_store_pool_enable=pool, transient_store_pool_size=4)
    stop_dequeue_thread(store)
    ts = store.timer_message_store
    calls = {"deliver": 0, "python": 0}
    if not compiled:
        ts._compiled_delivery = lambda: False
    deliver = ts._deliver

    def counted(*a):
        calls["python"] += 1
        deliver(*a)

    ts._deliver = counted
    for m in specs():
        r = store.put_message(m)
        assert r.is_ok(), (r.status, r.reason)
    store.config.timer_stop_enqueue = False
    ts.note_timer_put()
    wait_for(lambda: drained(store))
    assert ts.opened
    if compiled:
        walker = ts._walker

        class Counting:
            def __getattr__(self, name):
                return getattr(walker, name)

            def deliver(self, *a):
                got = walker.deliver(*a)
                calls["deliver"] += got[2]
                return got

        ts._walker = Counting()
    # the slots: two read on time, the others late (two at once), then the rolled messages' slots
    for now in (T0 + 4000, T0 + 5000, T0 + 8000, T0 + 20_000, T0 + 30_000, T0 + 40_000):
        fake_clock.now = now
        ts.maybe_move_write_time()
        wait_for(lambda: drained(store))
        while ts.dequeue() != -1:
            wait_for(lambda: drained(store))
    return store, calls


def files_of(root: str, sub: str) -> dict[str, bytes]:
    out = {}
    base = os.path.join(root, sub)
    for dp, _, fs in os.walk(base):
        for f in fs:
            with open(os.path.join(dp, f), "rb") as fh:
                out[os.path.relpath(os.path.join(dp, f), base)] = fh.read()
    return out


@pytest.mark.parametrize("flush, pool", [(FlushDiskType.ASYNC_FLUSH, False), (FlushDiskType.SYNC_FLUSH, False),
                                         (FlushDiskType.ASYNC_FLUSH, True)])
def test_compiled_delivery_writes_what_the_python_path_writes(store_factory, fake_clock, flush, pool):
    """ASYNC_FLUSH: the deliveries' units and index entries are written by the delivery (``dispatch_record``);
    SYNC_FLUSH: by the reput behind the group commit; with the transient pool the records are written into its
    buffers and read once committed."""
    py, py_calls = run(store_factory, fake_clock, "python", False, flush, pool)
    c, c_calls = run(store_factory, fake_clock, "compiled", True, flush, pool)
    for store in (py, c):
        wait_for(lambda s=store: drained(s))
    # most went through the compiled run; Python took the rolled re-puts, the cancelled, the odd three and the due
    assert c_calls["deliver"] >= 110
    assert c_calls["python"] <= 30 < py_calls["python"]
    # the commit logs up to their ends (the allocate service makes the next file ahead when it gets to it)
    end = py.get_max_phy_offset()
    assert c.get_max_phy_offset() == end > 4 * CL_FILE
    logs = [b"".join(v for _, v in sorted(files_of(s.root, "commitlog").items()))[:end] for s in (py, c)]
    for at in range(0, end, 4096):
        assert logs[0][at:at + 4096] == logs[1][at:at + 4096], at
    queues = files_of(py.root, "consumequeue"), files_of(c.root, "consumequeue")
    assert sorted(queues[0]) == sorted(queues[1])
    for name in queues[0]:
        assert queues[0][name] == queues[1][name], name
    # every message that was not cancelled reached its topic, with the properties convert gives it
    delivered = {}
    for store in (py, c):
        got = []
        for topic in TOPICS + [LONG_TOPIC]:
            for q in range(4):
                res = store.get_message("g", topic, q, 0, 256)
                got += [(topic, q, m.body, m.properties) for m in (res.messages or [])]
        delivered[store.root] = got
    a, b = delivered[py.root], delivered[c.root]
    assert a == b
    assert len(a) == 150 - 4 + 4
    for topic, q, body, props in a:
        assert "REAL_TOPIC" not in props and "REAL_QID" not in props and props["TIMER_DEQUEUE_MS"].isdigit()
    assert {p.get("UNIQ_KEY") for *_, p in a}.isdisjoint({"u4", "u20", "u41", "u77"})
    # the index entries of the deliveries (the builder follows the log: queried once it has them)
    for topic, key, n in (("Orders_2", "k8", 1), ("TopicB", "x3", 10)):
        for store in (py, c):
            wait_for(lambda s=store, t=topic, k=key, n=n: len(s.query_message(t, k, max_num=64).messages) >= n)
        assert sorted(m.commit_log_offset for m in py.query_message(topic, key, max_num=64).messages) == sorted(
            m.commit_log_offset for m in c.query_message(topic, key, max_num=64).messages)


def _five_enqueued(store_factory, fake_clock):
    """A store at T0 whose dequeue thread is stopped, with five timers due at T0 + 3 s enqueued."""
    fake_clock.now = T0
    store = store_factory(clock=fake_clock, timer_stop_enqueue=True)
    stop_dequeue_thread(store)
    ts = store.timer_message_store
    for i in range(5):
        assert store.put_message(Message("A", b"%d" % i, deliver_at_ms=T0 + 3000)).is_ok()
    store.config.timer_stop_enqueue = False
    ts.note_timer_put()
    wait_for(lambda: drained(store))
    return store, ts


@pytest.mark.no_verify
def test_a_damaged_unit_in_the_slot_is_refused_with_its_place(store_factory, fake_clock):
    store, ts = _five_enqueued(store_factory, fake_clock)
    store_factory.skip_check()
    # the third unit's prevPos points forward: the walk cannot trust the list
    tl = ts.timer_log
    mf = tl.queue.files[0]
    mf.write_at(2 * 52 + 4, struct.pack(">q", 4 * 52))
    fake_clock.now = T0 + 4000
    ts.maybe_move_write_time()
    with pytest.raises(StoreCorruptedError) as e:
        while ts.dequeue() != -1:
            pass
    assert e.value.offset == 2 * 52 and "prevPos" in str(e.value)
    assert store.get_max_offset_in_queue("A", 0) == 0


def test_a_slot_due_while_the_store_takes_no_puts_waits_for_it(store_factory, fake_clock):
    store, ts = _five_enqueued(store_factory, fake_clock)
    fake_clock.now = T0 + 4000
    ts.maybe_move_write_time()
    store._commitlog.writeable = False
    with pytest.raises(NotTakingPuts):
        while ts.dequeue() != -1:
            pass
    assert ts.curr_read_time_ms <= T0 + 2000 and store.get_max_offset_in_queue("A", 0) == 0
    store._commitlog.writeable = True
    while ts.dequeue() != -1:
        pass
    assert store.get_max_offset_in_queue("A", 0) == 5


def test_stats_from_files_sum_the_slots_that_occupied_lists(store_factory, fake_clock):
    """``stats_from_files`` (a store whose timer store does not run here) sums the wheel in C (``wheel_pending``):
    the same pending count and next due time as the slots ``TimerWheel.occupied`` lists."""
    fake_clock.now = T0
    store = store_factory(clock=fake_clock)
    for i in range(12):
        assert store.put_message(Message("A", b"%d" % i, deliver_at_ms=T0 + 3000 + i % 4 * 5000,
                                         properties={"UNIQ_KEY": "u%d" % i})).is_ok()
    assert store.put_message(Message("A", b"", deliver_at_ms=T0 + 8000,
                                     properties={"TIMER_DEL_UNIQKEY": "A+u1"})).is_ok()
    ts = store.timer_message_store
    wait_for(lambda: drained(store))
    ts.flush()
    got = stats_from_files(store.root, P, fake_clock.now)
    wheel = TimerWheel(os.path.join(store.root, "timerwheel"), DEFAULT_SLOTS_TOTAL, P, read_only=True)
    try:
        slots = wheel.occupied(got["checkpoint"]["last_read_time_ms"])
    finally:
        wheel.close(flush=False)
    assert got["pending"] == sum(s.num for s in slots) == 12 - 1 and len(slots) == 4     # a delete marker counts -1
    assert got["next_due_ms"] == min(s.time_ms for s in slots if s.num > 0) + P == T0 + 3000


def test_deliveries_share_a_log_with_another_writer(tmp_path):
    """Several writers (``shared_writers``): the leader's compiled delivery takes the writers' append lock as a put
    does, so its deliveries and another writer's puts to the same queue get continuous queue offsets, each once."""
    from pystore import MessageStore

    root = str(tmp_path / "store")
    geometry = {"mapped_file_size_commit_log": 64 * 1024, "mapped_file_size_consume_queue": 20 * 64}
    with MessageStore.open(root, shared_writers=True, **geometry) as leader, \
            MessageStore.open(root, shared_writers=True, **geometry) as follower:
        assert leader.writer_info()["leader"] and leader.timer_message_store is not None
        due = (int(time.time() * 1000) // 1000 + 2) * 1000
        for i in range(600):
            assert leader.put_message(Message("T", b"timer %d" % i, deliver_at_ms=due)).is_ok()
        ts = leader.timer_message_store
        wait_for(lambda: ts.opened and ts.curr_queue_offset == 600)      # (the leader's follow dispatches)
        walked = []
        walker = ts._walker
        assert walker is not None

        class Counting:
            def __getattr__(self, name):
                return getattr(walker, name)

            def deliver(self, *a):
                got = walker.deliver(*a)
                walked.append(got[2])
                return got

        ts._walker = Counting()
        # the other writer puts until the timers' slot is read: the delivery first catches up on its records
        puts = 0
        while ts.curr_read_time_ms < due:
            assert follower.put_message(Message("T", b"plain %d" % puts)).is_ok()
            puts += 1
            time.sleep(0.001)
            assert time.time() * 1000 < due + 20_000
        wait_for(lambda: leader.get_max_offset_in_queue("T", 0) >= 600 + puts)
        bodies = []
        offset = 0
        while True:
            r = leader.get_message("G", "T", 0, offset, 256)
            if not r.messages:
                break
            bodies += [(m.queue_offset, m.body) for m in r.messages]
            offset = r.next_begin_offset
        assert [q for q, _ in bodies] == list(range(600 + puts))
        assert sorted(b for _, b in bodies) == sorted([b"timer %d" % i for i in range(600)]
                                                       + [b"plain %d" % i for i in range(puts)])
        assert sum(walked) == 600 and puts > 100


def test_the_timer_checkpoint_waits_for_deliveries_still_in_a_pool_buffer(store_factory, fake_clock):
    # With the transient pool a delivery lands in a pool buffer (process memory) and reaches the file when the
    # commit service copies it. The checkpoint written after a slot's deliveries must find them durable, not
    # only what the commit service had copied: a kill before its next pass lost the deliveries, and recovery
    # never read their slot again (acknowledged timers, never delivered).
    import threading

    from pystore.log.flush import CommitRealTimeService

    fake_clock.now = T0
    store = store_factory(clock=fake_clock, flush_disk_type=FlushDiskType.ASYNC_FLUSH, transient_store_pool_enable=True,
                          transient_store_pool_size=4)
    stop_timer_threads(store)                               # the test runs the timer store's steps itself
    ts = store.timer_message_store
    commit = next(s for s in store._services if isinstance(s, CommitRealTimeService))
    for i in range(3):
        assert store.put_message(Message("Orders", b"timer %d" % i, deliver_at_ms=T0 + 2500,
                                         properties={"UNIQ_KEY": "u%d" % i})).is_ok()
    fake_clock.now = T0 + 1000                              # the commit service's thorough pass copies them
    wait_for(lambda: store.get_max_offset_in_queue(TIMER_TOPIC, 0) == 3)
    while ts.enqueue():
        pass
    ts.flush()
    hold = threading.Event()
    copy = commit._commit

    def held(least: int) -> bool:                           # the commit service's next pass: after the check
        hold.wait(60)
        return copy(least)

    commit._commit = held
    try:
        fake_clock.now = T0 + 3100
        ts.enqueue()
        while ts.dequeue() != -1:                           # the slot's three deliveries, into the pool
            pass
        q = store._commitlog.queue
        wrote = q.get_max_wrote_position()
        assert wrote > store._commitlog.get_max_offset()   # not copied into the file yet
        ts.flush()
        assert q.flushed_where >= wrote                     # durable before the checkpoint counted the slot read
        assert ts.checkpoint.last_read_time_ms > T0 + 2000
        wait_for(lambda: store.get_max_offset_in_queue("Orders", 0) == 3)    # and dispatched
    finally:
        hold.set()
    got = store.get_message("g", "Orders", 0, 0, 32)
    assert sorted(m.body for m in got.messages) == [b"timer 0", b"timer 1", b"timer 2"]


def test_the_dequeue_reads_no_slot_while_the_first_open_recovers(store_factory, fake_clock):
    # The timer files open with the first timer message, in the enqueue thread; the wheel is set before the
    # recovery sets the read time. A dequeue in that window read a slot from the stale read time, and its move
    # of the read time came after the recovery's: the tick of the open was skipped with a timer due in it.
    fake_clock.now = T0 + 300
    store = store_factory(clock=fake_clock)
    stop_timer_threads(store)                               # the test runs the timer store's steps itself
    ts = store.timer_message_store
    assert not ts.opened
    fake_clock.now = T0 + 5300
    ts.enqueue()                                            # an idle pass: the write time moves, not the read time
    seen: list = []
    recover = ts._recover

    def dequeue_in_the_window(*args):  # type: ignore[no-untyped-def]
        seen.append(ts.dequeue())                           # the dequeue thread, with the wheel set already
        return recover(*args)

    ts._recover = dequeue_in_the_window
    assert store.put_message(Message("Orders", b"first timer", delay_ms=200,
                                     properties={"UNIQ_KEY": "m1"})).is_ok()
    while ts.enqueue():
        pass
    assert seen == [-1] and ts.opened
    fake_clock.now = T0 + 8000
    for _ in range(1000):
        if not ts.enqueue() and ts.dequeue() == -1:
            break
    wait_for(lambda: store.get_max_offset_in_queue("Orders", 0) == 1)
    got = store.get_message("g", "Orders", 0, 0, 1)
    assert [m.body for m in got.messages] == [b"first timer"]
