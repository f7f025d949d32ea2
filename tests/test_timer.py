"""RocketMQ 5 timer messages through the store (pystore.timer: timer_put, timer_store, timer_services): the put-side
rewrite and its refusals, the bytes of the timer log, wheel and checkpoint, delivery at the due time on the
injected clock, cancel, roll, past timers, delay levels beside timers, reopening with pending timers, damage.

Time is a ``fake_clock``; the timer threads run and read it, so tests move the clock and wait until the timer
store has caught up with it (``caught_up``), then look at what is in which queue.
"""

from __future__ import annotations

import os
import struct
import time

import pytest
from conftest import BORN_BASE

from pystore import Message, MessageBatch, PutMessageStatus
from pystore.errors import StoreCorruptedError, StoreError
from pystore.format._jstring import java_string_hash
from pystore.timer import MAGIC_DEFAULT, MAGIC_DELETE, MAGIC_ROLL, TIMER_TOPIC, TimerCheckpoint, checkpoint_path
from pystore.timer.timer_put import round_deliver_ms

P = 1000              # timer_precision_ms
T0 = BORN_BASE        # the fake clock's start, on a tick
UNIT = struct.Struct(">iqiqiqiiq")
SLOT = struct.Struct(">qqqii")
SLOTS = 2 * 7 * 86400


def wait_for(cond, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met within %ss" % timeout
        time.sleep(0.02)


def caught_up(store, clock) -> None:
    """Wait until the timer store enqueued every unit of its queue and read every slot before the clock's tick."""
    ts = store.timer_message_store

    def done() -> bool:
        if ts is None or not ts.opened:
            cq_max = store.get_max_offset_in_queue(TIMER_TOPIC, 0)
            return cq_max == 0
        return (ts.curr_queue_offset >= store.get_max_offset_in_queue(TIMER_TOPIC, 0)
                and ts.curr_read_time_ms >= clock.now // P * P)
    wait_for(done)


def delivered(store, topic: str = "TopicTest", queue_id: int = 0) -> list:
    res = store.get_message("g", topic, queue_id, 0, 64)
    return list(res.messages) if res is not None and res.messages else []


def read_units(root: str) -> list[tuple]:
    data = open(os.path.join(root, "timerlog", "%020d" % 0), "rb").read()
    out = []
    for at in range(0, len(data) - 52 + 1, 52):
        u = UNIT.unpack_from(data, at)
        if u[0] != 52:
            break
        out.append(u)
    return out


def read_slot(root: str, time_ms: int) -> tuple:
    with open(os.path.join(root, "timerwheel"), "rb") as f:
        f.seek((time_ms // P) % SLOTS * 32)
        return SLOT.unpack(f.read(32))


@pytest.fixture
def store(store_factory, fake_clock):
    return store_factory(clock=fake_clock)


# -- put side ------------------------------------------------------------------------------------------------


def test_timer_put_is_stored_in_the_timer_topic(store, fake_clock):
    msg = Message("TopicTest", b"hello", queue_id=3, delay_ms=3500, properties={"UNIQ_KEY": "u1"})
    res = store.put_message(msg)
    assert res.status is PutMessageStatus.PUT_OK and res.reason is None
    # the caller's message is untouched
    assert (msg.topic, msg.queue_id, msg.get_property("TIMER_OUT_MS")) == ("TopicTest", 3, None)
    stored = store.look_message_by_offset(0)
    assert (stored.topic, stored.queue_id) == (TIMER_TOPIC, 0)
    props = stored.properties
    assert props["TIMER_OUT_MS"] == str(T0 + 3000)       # T0 + 3500 rounded down to the tick
    assert (props["REAL_TOPIC"], props["REAL_QID"], props["TIMER_DELAY_MS"]) == ("TopicTest", "3", "3500")
    assert store.get_max_offset_in_queue("TopicTest", 3) == 0


@pytest.mark.parametrize(("deliver", "rounded"), [(T0 + 5000, T0 + 4000), (T0 + 5001, T0 + 5000),
                                                  (T0 + 5999, T0 + 5000)])
def test_deliver_time_is_rounded_as_rocketmq(store, deliver, rounded):
    assert round_deliver_ms(deliver, P) == rounded
    assert store.put_message(Message("TopicTest", b"x", deliver_at_ms=deliver)).is_ok()
    assert store.look_message_by_offset(0).properties["TIMER_OUT_MS"] == str(rounded)


@pytest.mark.parametrize(("props", "why"), [
    ({"TIMER_DELAY_SEC": "259201"}, "more than timer_max_delay_sec"),
    ({"TIMER_DELAY_MS": str(259_200_001)}, "more than timer_max_delay_sec"),
    ({"TIMER_DELIVER_MS": str(T0 + 259_200_001)}, "more than timer_max_delay_sec"),
    # RocketMQ #5376 / #10872: seconds whose milliseconds overflow a Java long must not wrap into the past
    ({"TIMER_DELAY_SEC": str(2**62)}, "more than timer_max_delay_sec"),
    ({"TIMER_DELAY_SEC": str(2**63)}, "fits 64 bits"),
    ({"TIMER_DELAY_MS": "-5"}, "negative"),
    ({"TIMER_DELIVER_MS": "-1"}, "negative"),
    ({"TIMER_DELAY_SEC": "1.5"}, "decimal integer"),
    ({"TIMER_DELAY_MS": "soon"}, "decimal integer"),
    ({"TIMER_DELAY_SEC": "1", "TIMER_DELAY_MS": "5"}, "one timer delay per message"),
    ({"TIMER_DELIVER_MS": str(T0 + 5000), "TIMER_DELAY_MS": "5"}, "one timer delay per message"),
    ({"TIMER_DELIVER_MS": str(T0 - 1), "TIMER_DEL_UNIQKEY": "TopicTest+u1"}, "not in the future"),
])
def test_bad_timer_is_refused_with_a_reason(store, props, why):
    res = store.put_message(Message("TopicTest", b"x", properties=props))
    assert res.status is PutMessageStatus.WHEEL_TIMER_MSG_ILLEGAL
    assert why in res.reason
    assert store.get_max_phy_offset() == 0


def test_timer_when_the_wheel_is_off_is_refused(store_factory, fake_clock):
    store = store_factory(clock=fake_clock, timer_wheel_enable=False)
    res = store.put_message(Message("TopicTest", b"x", delay_ms=5000))
    assert res.status is PutMessageStatus.WHEEL_TIMER_NOT_ENABLE
    assert "timer_wheel_enable is off" in res.reason
    assert store.timer_message_store is None
    # an ordinary message is untouched by it
    assert store.put_message(Message("TopicTest", b"y")).is_ok()


def test_flow_control_over_the_slot_limit(store_factory, fake_clock):
    store = store_factory(clock=fake_clock, timer_congest_num_each_slot=2)
    for _ in range(4):      # twice the limit: refused (between the limit and twice it, from 1.5 times on)
        assert store.put_message(Message("TopicTest", b"x", delay_ms=9000)).is_ok()
    caught_up(store, fake_clock)
    res = store.put_message(Message("TopicTest", b"x", delay_ms=9000))
    assert res.status is PutMessageStatus.WHEEL_TIMER_FLOW_CONTROL
    assert "timer_congest_num_each_slot" in res.reason


def test_delay_level_wins_and_clears_the_timer_properties(store, fake_clock):
    assert store.put_message(Message("TopicTest", b"x", delay_time_level=1, delay_ms=60_000)).is_ok()
    stored = store.look_message_by_offset(0)
    assert stored.topic == "SCHEDULE_TOPIC_XXXX"
    assert "TIMER_DELAY_MS" not in stored.properties and "TIMER_OUT_MS" not in stored.properties


@pytest.mark.parametrize("props", [{"TIMER_DELIVER_MS": str(T0 - 10_000)}, {"TIMER_DELAY_SEC": "0"},
                                   {"TIMER_DELIVER_MS": "0"}])
def test_past_timer_is_delivered_at_once(store, props):
    assert store.put_message(Message("TopicTest", b"x", properties=props)).is_ok()
    got = delivered(store)
    assert len(got) == 1 and "TIMER_OUT_MS" not in got[0].properties


def test_batch_timer_properties_are_ignored_as_rocketmq(store):
    batch = MessageBatch([Message("TopicTest", b"a", delay_ms=60_000), Message("TopicTest", b"b", delay_ms=60_000)])
    assert store.put_messages(batch).is_ok()
    assert [m.body for m in delivered(store)] == [b"a", b"b"]
    assert store.get_max_offset_in_queue(TIMER_TOPIC, 0) == 0


def test_message_helpers():
    assert Message("T", b"x", deliver_at_ms=5).properties == {"TIMER_DELIVER_MS": "5"}
    assert Message("T", b"x", delay_ms=0, properties={"TIMER_DELAY_MS": "9"}).properties == {"TIMER_DELAY_MS": "0"}
    with pytest.raises(ValueError, match="one of them"):
        Message("T", b"x", deliver_at_ms=5, delay_ms=5)
    with pytest.raises(ValueError, match="delay_ms"):
        Message("T", b"x", delay_ms=-1)
    with pytest.raises(TypeError, match="deliver_at_ms"):
        Message("T", b"x", deliver_at_ms=1.0)
    with pytest.raises(TypeError, match="delay_ms"):
        Message("T", b"x", delay_ms=True)


# -- delivery ------------------------------------------------------------------------------------------------


def test_delivery_at_the_due_time_with_rocketmq_properties(store, fake_clock):
    deliver = T0 + 3500
    assert store.put_message(Message("TopicTest", b"hello", queue_id=2, deliver_at_ms=deliver, flag=7)).is_ok()
    caught_up(store, fake_clock)
    fake_clock.now = deliver - 1
    caught_up(store, fake_clock)
    assert delivered(store, queue_id=2) == []
    assert store.timer_stats()["pending"] == 1
    fake_clock.now = deliver + P            # the latest it may come: one tick after its time
    caught_up(store, fake_clock)
    (got,) = delivered(store, queue_id=2)
    assert (got.topic, got.queue_id, got.body, got.flag) == ("TopicTest", 2, b"hello", 7)
    props = got.properties
    assert "REAL_TOPIC" not in props and "REAL_QID" not in props
    assert props["TIMER_OUT_MS"] == str(T0 + 3000)
    assert props["TIMER_ENQUEUE_MS"] == str(T0)           # the wheel's write time when it was enqueued
    assert deliver <= int(props["TIMER_DEQUEUE_MS"]) <= deliver + P
    assert "TIMER_ROLL_TIMES" not in props
    assert store.timer_stats()["pending"] == 0


def test_the_threads_wait_no_later_than_the_next_tick_and_a_tick_wakes_the_dequeue(store, fake_clock):
    """Idle, the enqueue and dequeue threads wait RocketMQ's ``100 * precision / 1000`` ms but never past the next
    tick, and the enqueue's move of the write time at a tick wakes the dequeue thread: a slot is read as it falls
    due (delivery lateness within the precision, not up to two idle waits past it)."""
    assert store.put_message(Message("TopicTest", b"x", delay_ms=5000)).is_ok()
    caught_up(store, fake_clock)
    tms = store.timer_message_store
    fake_clock.now = T0 + 250
    assert tms.idle_wait_ms() == 100
    fake_clock.now = T0 + 960
    assert tms.idle_wait_ms() == 40.5
    woke = []
    tms.wake_dequeue, wake = (lambda: woke.append(fake_clock.now)), tms.wake_dequeue
    try:
        tms.maybe_move_write_time()
        assert woke == []                   # the same tick: nothing new to read
        fake_clock.now = T0 + P
        tms.maybe_move_write_time()
        tms.maybe_move_write_time()
        assert woke and set(woke) == {T0 + P} and tms.curr_write_time_ms == T0 + P   # (a thread may move it first)
    finally:
        tms.wake_dequeue = wake


def test_bytes_on_disk_after_puts(store, fake_clock):
    for i in range(2):
        assert store.put_message(Message("TopicTest", b"m%d" % i, delay_ms=5000)).is_ok()
    sizes = [store.look_message_by_offset(0).store_size]
    sizes.append(store.look_message_by_offset(sizes[0]).store_size)
    caught_up(store, fake_clock)
    store.timer_message_store.flush()
    root = store.root
    due = T0 + 4000
    h = java_string_hash("TopicTest")
    assert read_units(root) == [(52, -1, MAGIC_DEFAULT, T0, 4000, 0, sizes[0], h, 0),
                                (52, 0, MAGIC_DEFAULT, T0, 4000, sizes[0], sizes[1], h, 0)]
    assert read_slot(root, due) == (due // P, 0, 52, 2, 0)
    assert os.path.getsize(os.path.join(root, "timerwheel")) == SLOTS * 32
    cp = TimerCheckpoint(checkpoint_path(root), read_only=True)
    assert (cp.last_timer_log_flush_pos, cp.last_timer_queue_offset, cp.master_timer_queue_offset) == (104, 2, 2)
    assert cp.last_read_time_ms == T0
    raw = open(checkpoint_path(root), "rb").read()
    assert len(raw) == 4096 and raw[:32] == struct.pack(">qqqq", T0, 104, 2, 2)
    stats = store.timer_stats()
    assert (stats["pending"], stats["next_due_ms"], stats["lag_ms"]) == (2, due + P, 0)


def test_cancel_by_delete_marker(store, fake_clock):
    deliver = T0 + 5000
    for key in ("u1", "u2"):
        assert store.put_message(Message("TopicTest", key.encode(), deliver_at_ms=deliver,
                                         properties={"UNIQ_KEY": key})).is_ok()
    marker = Message("TopicTest", b"0", deliver_at_ms=deliver, properties={"TIMER_DEL_UNIQKEY": "TopicTest+u1"})
    assert store.put_message(marker).is_ok()
    caught_up(store, fake_clock)
    store.timer_message_store.flush()
    assert [u[2] for u in read_units(store.root)] == [MAGIC_DEFAULT, MAGIC_DEFAULT, MAGIC_DEFAULT | MAGIC_DELETE]
    assert read_slot(store.root, deliver - P)[3] == 1      # two messages, one marker
    fake_clock.now = deliver + P
    caught_up(store, fake_clock)
    assert [m.body for m in delivered(store)] == [b"u2"]
    assert store.timer_stats()["cancels_unmatched"] == 0


def test_a_cancel_of_an_unknown_key_is_stored_and_said_to_cancel_nothing(store, fake_clock, caplog):
    """A delete marker whose key no timer of its tick carries: the put succeeds (it cannot know), and when its
    slot is read it cancels nothing, which the log says and ``timer_stats`` counts; the timer beside it is
    delivered."""
    deliver = T0 + 5000
    assert store.put_message(Message("TopicTest", b"u2", deliver_at_ms=deliver, properties={"UNIQ_KEY": "u2"})).is_ok()
    marker = Message("TopicTest", b"0", deliver_at_ms=deliver, properties={"TIMER_DEL_UNIQKEY": "TopicTest+nobody"})
    assert store.put_message(marker).is_ok()
    caught_up(store, fake_clock)
    caplog.set_level("INFO", logger="pystore.timer.timer_store")
    fake_clock.now = deliver + P
    caught_up(store, fake_clock)
    assert [m.body for m in delivered(store)] == [b"u2"]
    assert store.timer_stats()["cancels_unmatched"] == 1
    assert any("TopicTest+nobody" in r.getMessage() and "cancelled nothing" in r.getMessage() for r in caplog.records)


def _two_timers(store, deliver: int) -> None:
    """Two timers due at ``deliver``: u1 and u2."""
    for key in ("u1", "u2"):
        assert store.put_message(Message("TopicTest", key.encode(), deliver_at_ms=deliver,
                                         properties={"UNIQ_KEY": key})).is_ok()


def _cancel_u1(store, deliver: int) -> None:
    """The delete marker of u1 (due at ``deliver``)."""
    marker = Message("TopicTest", b"0", deliver_at_ms=deliver, properties={"TIMER_DEL_UNIQKEY": "TopicTest+u1"})
    assert store.put_message(marker).is_ok()


def _cancelled_pair(store, deliver: int) -> None:
    """Two timers due at ``deliver`` (u1, u2) and the delete marker of u1."""
    _two_timers(store, deliver)
    _cancel_u1(store, deliver)


def _reopened_after(store_factory, fake_clock, now: int, **overrides):
    """The store reopened at ``now`` and caught up: its deliveries to TopicTest once u2 is among them."""
    fake_clock.now = now
    store = store_factory(clock=fake_clock, **overrides)
    caught_up(store, fake_clock)
    wait_for(lambda: b"u2" in [m.body for m in delivered(store)])
    caught_up(store, fake_clock)
    return store, delivered(store)


@pytest.mark.parametrize("case", ["rolled", "short, not enqueued before the close", "marker enqueued after the close"])
def test_a_cancel_holds_when_the_reopened_store_catches_up_past_its_time(store_factory, fake_clock, case):
    """A timer and its delete marker, the store shut down cleanly before the timer's slot (or its roll slot) and
    opened again after its time. The reopened store catches up: it reads the slots from the checkpoint's read
    time to now and enqueues what the timer queue holds (the puts after the checkpoint, the rolled copies it puts
    again). Before the fix a copy that reached the enqueue after its time was delivered at once and a marker's
    was dropped (``TIMER_ROLL_TIMES`` 1 for a rolled one): the cancel was lost, although a store kept running
    kept it. Now a copy due in a slot not read yet goes into that slot, and no slot is read before the enqueue
    has taken in what the timer queue holds for it."""
    window = {"timer_roll_window_slots": 10} if case == "rolled" else {}
    store = store_factory(clock=fake_clock, **window)
    if case == "rolled":
        deliver = T0 + 30_500               # two windows past the write time: both rolled into T0 + 10 s
        _cancelled_pair(store, deliver)
        caught_up(store, fake_clock)
        store.timer_message_store.flush()
        assert [u[2] & MAGIC_ROLL for u in read_units(store.root)] == [MAGIC_ROLL] * 3
    else:
        deliver = T0 + 5000
        # a timer enqueued first, so that the store has its files and its checkpoint a read time
        assert store.put_message(Message("TopicTest", b"first", deliver_at_ms=T0 + 2000)).is_ok()
        caught_up(store, fake_clock)
        if case.startswith("short"):
            store.config.timer_stop_enqueue = True     # the three stay in the timer queue
            _cancelled_pair(store, deliver)
        else:
            # the enqueue takes the two timers before the close, the marker waits in the timer queue
            _two_timers(store, deliver)
            caught_up(store, fake_clock)
            store.config.timer_stop_enqueue = True
            _cancel_u1(store, deliver)
            assert store.timer_message_store.curr_queue_offset == store.get_max_offset_in_queue(TIMER_TOPIC, 0) - 1
    store.shutdown()
    store, got = _reopened_after(store_factory, fake_clock, deliver + 2 * P, **window)
    bodies = sorted(m.body for m in got)
    if case == "rolled":
        assert bodies == [b"u2"]
        assert got[0].properties["TIMER_ROLL_TIMES"] == "1"
    else:
        assert bodies == [b"first", b"u2"]
    # the marker went through the slot, not through the "reached delivery" drop
    assert all("TIMER_DEL_UNIQKEY" not in m.properties for m in got)


def test_a_marker_enqueued_after_its_time_cancels_its_timer_whose_slot_is_not_read(store_factory, fake_clock):
    """The enqueue takes the timer before its time and its delete marker after it, while the dequeue has not read
    the slot yet (a backlog: the dequeue waits for the enqueue). The marker goes into the timer's slot, not
    delivered-or-dropped at once, and the timer is cancelled."""
    store = store_factory(clock=fake_clock)
    ts = store.timer_message_store
    deliver = T0 + 5000
    _two_timers(store, deliver)
    caught_up(store, fake_clock)
    store.config.timer_stop_dequeue = True
    store.config.timer_stop_enqueue = True
    _cancel_u1(store, deliver)
    fake_clock.now = deliver + 2 * P
    ts.maybe_move_write_time()              # the write time past the slot, the marker not enqueued yet
    store.config.timer_stop_enqueue = False
    ts.note_timer_put()
    wait_for(lambda: ts.curr_queue_offset >= store.get_max_offset_in_queue(TIMER_TOPIC, 0))
    assert delivered(store) == []
    store.config.timer_stop_dequeue = False
    caught_up(store, fake_clock)
    wait_for(lambda: delivered(store) != [])
    caught_up(store, fake_clock)
    assert [m.body for m in delivered(store)] == [b"u2"]


def test_roll_past_the_window_and_deliver_later(store_factory, fake_clock):
    store = store_factory(clock=fake_clock, timer_roll_window_slots=10)
    deliver = T0 + 30_500
    assert store.put_message(Message("TopicTest", b"far", deliver_at_ms=deliver)).is_ok()
    caught_up(store, fake_clock)
    store.timer_message_store.flush()
    (unit,) = read_units(store.root)
    # 30 s is two windows past the write time: the unit waits at the window's end, then is put again
    assert unit[2] == MAGIC_DEFAULT | MAGIC_ROLL and unit[4] == 10_000
    for step in range(1, 40):
        fake_clock.now = T0 + step * 1000
        caught_up(store, fake_clock)
    (got,) = delivered(store)
    assert got.body == b"far"
    assert int(got.properties["TIMER_ROLL_TIMES"]) >= 1
    assert deliver <= int(got.properties["TIMER_DEQUEUE_MS"]) <= deliver + P
    # the rolled copies went back through the timer topic
    assert store.get_max_offset_in_queue(TIMER_TOPIC, 0) == 1 + int(got.properties["TIMER_ROLL_TIMES"])


def test_delay_levels_keep_working_beside_timers(store, fake_clock):
    assert store.put_message(Message("TopicTest", b"level", delay_time_level=1)).is_ok()
    assert store.put_message(Message("TopicTest", b"timer", delay_ms=2000)).is_ok()
    caught_up(store, fake_clock)
    fake_clock.advance(3000)
    caught_up(store, fake_clock)
    store.schedule_message_service.deliver_once()
    wait_for(lambda: sorted(m.body for m in delivered(store)) == [b"level", b"timer"])


def test_reopen_with_pending_timers(store_factory, fake_clock):
    store = store_factory(clock=fake_clock)
    for i in range(5):
        assert store.put_message(Message("TopicTest", b"%d" % i, delay_ms=10_000 + i * 1000)).is_ok()
    caught_up(store, fake_clock)
    store.shutdown()
    store = store_factory(clock=fake_clock)
    assert store.timer_stats()["pending"] == 5
    fake_clock.advance(12_000)
    caught_up(store, fake_clock)
    assert [m.body for m in delivered(store)] == [b"0", b"1", b"2"]
    fake_clock.advance(10_000)
    caught_up(store, fake_clock)
    assert [m.body for m in delivered(store)] == [b"0", b"1", b"2", b"3", b"4"]


def test_store_without_timers_has_no_timer_files(store):
    assert store.put_message(Message("TopicTest", b"x")).is_ok()
    store.shutdown()
    assert not {"timerwheel", "timerlog"} & set(os.listdir(store.root))
    assert store.timer_stats() == {"pending": 0, "next_due_ms": None, "lag_ms": 0, "checkpoint": None,
                                   "files": {"timerwheel": None, "timerlog": [], "timercheck": None}}


# -- damage ------------------------------------------------------------------------------------------------


@pytest.mark.no_verify
def test_a_slot_past_the_timer_log_is_refused(store_factory, fake_clock):
    store = store_factory(clock=fake_clock)
    assert store.put_message(Message("TopicTest", b"x", delay_ms=5000)).is_ok()
    caught_up(store, fake_clock)
    store.shutdown()
    wheel = os.path.join(store.root, "timerwheel")
    other = T0 + 60_000
    at = (other // P) % SLOTS * 32
    with open(wheel, "r+b") as f:
        f.seek(at)
        f.write(SLOT.pack(other // P, 0, 52 * 100, 1, 0))
    store_factory.skip_check()
    with pytest.raises((StoreCorruptedError, StoreError)) as info:
        store_factory(clock=fake_clock)
    err = info.value if isinstance(info.value, StoreCorruptedError) else info.value.__cause__
    assert isinstance(err, StoreCorruptedError)
    assert (err.path, err.offset) == (wheel, at)


@pytest.mark.no_verify
def test_timer_log_cut_below_the_checkpoint_is_refused(store_factory, fake_clock):
    store = store_factory(clock=fake_clock)
    for _ in range(2):
        assert store.put_message(Message("TopicTest", b"x", delay_ms=5000)).is_ok()
    caught_up(store, fake_clock)
    store.shutdown()
    path = os.path.join(store.root, "timerlog", "%020d" % 0)
    with open(path, "r+b") as f:
        f.seek(52)
        f.write(bytes(52))
    store_factory.skip_check()
    with pytest.raises((StoreCorruptedError, StoreError)) as info:
        store_factory(clock=fake_clock)
    err = info.value if isinstance(info.value, StoreCorruptedError) else info.value.__cause__
    assert isinstance(err, StoreCorruptedError)
    assert err.offset == 52


def test_a_timer_whose_record_only_the_archive_holds_is_delivered(store_factory, fake_clock, tmp_path):
    """With an archive, local retention may delete the commit-log file of a timer message still waiting (a timer
    waits up to ``timer_max_delay_sec``): the dequeue reads it from the archive and delivers it, body and all."""
    archive = (tmp_path / "archive").as_uri()
    store = store_factory(clock=fake_clock, archive_uri=archive, archive_interval_ms=3_600_000, archive_on_seal=False,
                          archive_local_retention_bytes=1)
    deliver = T0 + 60_000
    assert store.put_message(Message("TopicTest", b"wait for me", queue_id=1, deliver_at_ms=deliver)).is_ok()
    caught_up(store, fake_clock)
    for i in range(600):        # several commit-log files, so that the timer's file is sealed, archived and cleaned
        assert store.put_message(Message("Filler", b"f" * 400)).is_ok()
    store.flush()
    store._cq_store.flush(0)
    store._parts.archive.service.run_once()
    store.clean_files()
    archived = store.timer_message_store.look(0)
    assert store.get_min_phy_offset() > 0 and archived is not None      # local no more; the archive has it
    assert store._commitlog.look_message_by_offset(0) is None
    fake_clock.now = deliver + P
    caught_up(store, fake_clock)
    (got,) = delivered(store, queue_id=1)
    assert got.body == b"wait for me" and got.properties["TIMER_OUT_MS"] == str(deliver - P)


@pytest.mark.no_verify
def test_a_unit_whose_message_a_crash_took_back_is_cut(store_factory, fake_clock):
    """A power cut can keep a timer-log unit written after the last checkpoint and take back the commit-log record it
    points at (ASYNC_FLUSH: the enqueue reads what is not flushed yet). The next put reuses that offset; the unit would
    deliver that message in its own slot, early (before the fix: B, due at +20 s, came out at +6 s). Recovery now cuts
    the timer log at such a unit."""
    store = store_factory(clock=fake_clock)
    assert store.put_message(Message("TopicTest", b"plain")).is_ok()
    r = store.put_message(Message("TopicTest", b"A", delay_ms=5000))
    assert r.is_ok()
    lost = r.append_message_result.wrote_offset
    caught_up(store, fake_clock)
    store.shutdown()
    # the crash: the record of A gone from the commit log, its unit kept past the checkpoint's flushed position
    path = os.path.join(store.root, "commitlog", "%020d" % 0)
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.seek(lost)
        f.write(bytes(size - lost))
    cp = TimerCheckpoint(checkpoint_path(store.root))
    cp.last_timer_log_flush_pos = 0
    cp.flush()
    with open(os.path.join(store.root, "timerwheel"), "r+b") as f:      # the wheel last flushed before A's unit
        f.seek(round_deliver_ms(T0 + 5000, P) // P % SLOTS * 32)
        f.write(bytes(32))
    open(os.path.join(store.root, "abort"), "wb").close()
    store_factory.skip_check()
    store = store_factory(clock=fake_clock)
    r = store.put_message(Message("TopicTest", b"B", delay_ms=20_000))
    assert r.is_ok() and r.append_message_result.wrote_offset == lost
    caught_up(store, fake_clock)
    fake_clock.advance(6000)
    caught_up(store, fake_clock)
    assert [m.body for m in delivered(store)] == [b"plain"]
    fake_clock.advance(15_000)
    caught_up(store, fake_clock)
    assert [m.body for m in delivered(store)] == [b"plain", b"B"]


def test_a_slot_due_while_the_store_takes_no_puts_waits_for_it(store, fake_clock):
    """Between the start of the timer threads and the store taking puts, and between the store's last put and the
    threads' stop at shutdown, a delivery is refused with SERVICE_NOT_AVAILABLE. Before the fix the dequeue tried three
    times, dropped the message and moved past its slot (the checkpoint at close then counted it delivered: a timer
    lost on a clean restart). Now the slot stays unread and is read again once the store takes puts."""
    ts = store.timer_message_store
    assert store.put_message(Message("TopicTest", b"due", delay_ms=3000)).is_ok()
    caught_up(store, fake_clock)
    refused = []
    put = ts.put

    def counting(msg):
        r = put(msg)
        if r.status == PutMessageStatus.SERVICE_NOT_AVAILABLE:
            refused.append(msg.topic)
        return r

    ts.put = counting
    store._commitlog.writeable = False          # what a starting or stopping store answers
    fake_clock.advance(4000)
    wait_for(lambda: len(refused) >= 5)         # tried again and again, never given up
    assert delivered(store) == [] and ts.curr_read_time_ms <= T0 + 2000
    store._commitlog.writeable = True
    caught_up(store, fake_clock)
    assert [m.body for m in delivered(store)] == [b"due"]
