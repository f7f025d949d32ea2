"""The compiled enqueue of the timer store (pystore.timer._enqueue) against an independent model of RocketMQ's
``doEnqueue``: the bytes of every ``timerlog/`` file and of ``timerwheel``, the checkpoint and the pending counts
after a backlog of mixed timer messages (plain, rolled past the window by both halving rules, delete markers,
several real topics, already due, an odd ``TIMER_OUT_MS`` that only Python's ``int`` reads, timer-log files that
roll), and units of the timer queue that point at garbage, past the log, or at a record without ``TIMER_OUT_MS``
(logged and skipped, nothing written for them).

The model computes every expected byte with ``struct`` from what was put (the records' ``TIMER_OUT_MS`` as the put
side rewrote them, their commit-log offsets and sizes); it shares no code with the store's enqueue.
"""

from __future__ import annotations

import logging
import os
import random
import struct
import time

import pytest
from conftest import BORN_BASE

from pystore import Message
from pystore.timer import TIMER_TOPIC, TimerCheckpoint, checkpoint_path
from pystore.timer._enqueue import wheel_pending

P = 1000                      # timer_precision_ms
T0 = BORN_BASE                # the fake clock's start, on a tick
W = T0 + 10_000               # the wheel's write time when the backlog is enqueued
ROLL_SLOTS = 10               # timer_roll_window_slots: a 10 s window
TL_FILE = 300                 # mapped_file_size_timer_log: five units, then a 40-byte blank
SLOTS = 2 * 7 * 86400
UNIT = struct.Struct(">iqiqiqiiq")
SLOT = struct.Struct(">qqqii")
BLANK = struct.Struct(">iqi")
BLANK_MAGIC = -875286124
DEFAULT, ROLL, DELETE = 1, 2, 4
NEVER_ENQUEUED = (1 << 63) - 1
TOPICS = ["A", "Top", "TopicB", "TopicForTimers_0123"]     # hashed 1, 3, 6 and 19 characters at a time


def java_hash(s: str) -> int:
    """Java ``String.hashCode``: over UTF-16 code units, wrapping at 32 bits, signed."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


class Model:
    """``doEnqueue`` and ``TimerLog.append`` by the book, into bytearrays."""

    def __init__(self, write_ms: int) -> None:
        self.write = write_ms
        self.files: list[bytearray] = []
        self.at = TL_FILE            # no file yet: the first unit makes one
        self.slots: dict[int, list[int]] = {}     # tick -> [tick, first, last, num, magic]
        self.due: list[int] = []
        self.magics: list[int] = []

    @property
    def end(self) -> int:
        return (len(self.files) - 1) * TL_FILE + self.at if self.files else 0

    def enqueue(self, phy: int, size: int, out_ms: int, real_topic: str | None, delete: bool) -> None:
        write, window = self.write, ROLL_SLOTS * P
        delayed, magic = out_ms, DEFAULT
        if delayed < write:
            self.due.append(phy)
            return
        if delayed - write >= window:
            magic |= ROLL
            delayed = write + (ROLL_SLOTS // 2 * P if delayed - write - window < ROLL_SLOTS // 3 * P else window)
        if delete:
            magic |= DELETE
        self.magics.append(magic)
        if TL_FILE - self.at < 52 + 16:
            if self.files:
                room = TL_FILE - self.at
                BLANK.pack_into(self.files[-1], self.at, room, 0, BLANK_MAGIC)
            self.files.append(bytearray(TL_FILE))
            self.at = 0
        pos = (len(self.files) - 1) * TL_FILE + self.at
        tick = delayed // P
        slot = self.slots.get(tick, [tick, -1, -1, 0, 0])
        UNIT.pack_into(self.files[-1], self.at, 52, slot[2], magic, write, delayed - write, phy, size,
                       0 if real_topic is None else java_hash(real_topic), 0)
        self.at += 52
        self.slots[tick] = [tick, pos if slot[1] == -1 else slot[1], pos, slot[3] + (-1 if delete else 1), slot[4]]

    def wheel(self) -> bytes:
        out = bytearray(SLOTS * 32)
        for tick, slot in self.slots.items():
            SLOT.pack_into(out, tick % SLOTS * 32, *slot)
        return bytes(out)


def wait_for(cond, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met within %ss" % timeout
        time.sleep(0.01)


def put_backlog(store, specs) -> list[tuple[int, int, str, str | None, bool]]:
    """Put each spec with the enqueue stopped: (phy, size, TIMER_OUT_MS as stored, REAL_TOPIC, delete)."""
    out = []
    for spec in specs:
        r = store.put_message(spec)
        assert r.is_ok(), (r.status, r.reason)
        res = r.append_message_result
        stored = store.look_message_by_offset(res.wrote_offset)
        assert stored.topic == TIMER_TOPIC
        props = stored.properties
        out.append((res.wrote_offset, res.wrote_bytes, props.get("TIMER_OUT_MS"), props.get("REAL_TOPIC"),
                    "TIMER_DEL_UNIQKEY" in props))
    return out


def drain(store, fake_clock) -> list[int]:
    """Move the write time to W, turn the enqueue on and wait until it has read the whole timer queue; the queue
    offsets of the units that went through Python's per-unit path (``_enqueue_one``), not the compiled run."""
    ts = store.timer_message_store
    by_python: list[int] = []
    one = ts._enqueue_one

    def counted(phy: int, size: int, queue_offset: int) -> None:
        by_python.append(queue_offset)
        one(phy, size, queue_offset)

    ts._enqueue_one = counted
    fake_clock.now = W
    ts.maybe_move_write_time()
    assert ts.curr_write_time_ms == W
    store.config.timer_stop_enqueue = False
    ts.note_timer_put()
    wait_for(lambda: ts.curr_queue_offset >= store.get_max_offset_in_queue(TIMER_TOPIC, 0))
    ts.flush()
    del ts._enqueue_one
    return by_python


def check_files(store, model: Model, units: int) -> None:
    root = store.root
    folder = os.path.join(root, "timerlog")
    names = sorted(os.listdir(folder))
    assert names == ["%020d" % (i * TL_FILE) for i in range(len(model.files))]
    for name, want in zip(names, model.files):
        with open(os.path.join(folder, name), "rb") as f:
            assert f.read() == bytes(want), name
    with open(os.path.join(root, "timerwheel"), "rb") as f:
        assert f.read() == model.wheel()
    cp = TimerCheckpoint(checkpoint_path(root), read_only=True)
    assert (cp.last_timer_log_flush_pos, cp.last_timer_queue_offset) == (model.end, units)
    ts = store.timer_message_store
    nums = [s[3] for s in model.slots.values()]
    stats = store.timer_stats()
    assert stats["pending"] == sum(nums) and stats["enqueue_behind"] == 0
    first = min(t for t, s in model.slots.items() if s[3] > 0) * P
    assert stats["next_due_ms"] == ts.next_due_ms() == first + P
    for tick, slot in model.slots.items():
        assert ts.slot_num(tick * P) == slot[3]


def mixed_specs(rng: random.Random) -> list[Message]:
    specs = []
    for i in range(120):
        topic = TOPICS[i % len(TOPICS)]
        kind = rng.choice(["plain", "plain", "plain", "due", "near_roll", "far_roll", "delete", "delete_far"])
        if kind == "due":
            at = T0 + rng.randrange(1500, 10_000)
        elif kind == "near_roll":                    # past the window by less than a third of it: W + window / 2
            at = W + 10_000 + rng.randrange(1000, 3000)
        elif kind in ("far_roll", "delete_far"):     # further: W + window
            at = W + 10_000 + rng.randrange(4000, 60_000)
        else:
            at = W + rng.randrange(0, 9000)
        props = {"UNIQ_KEY": "u%d" % i}
        if kind.startswith("delete"):
            props = {"TIMER_DEL_UNIQKEY": "%s+u%d" % (topic, rng.randrange(i + 1))}
        specs.append(Message(topic, b"m%d" % i, queue_id=i % 3, deliver_at_ms=at, properties=props))
    return specs


def test_a_backlog_is_enqueued_byte_for_byte_as_rocketmq(store_factory, fake_clock):
    store = store_factory(clock=fake_clock, timer_stop_enqueue=True, timer_roll_window_slots=ROLL_SLOTS,
                          mapped_file_size_timer_log=TL_FILE)
    rng = random.Random(38)
    specs = mixed_specs(rng)
    # a TIMER_OUT_MS that only Python's int reads (the compiled run hands it back), and one with a leading zero
    odd = [("+%d" % (W + 4000), "TopicB"), ("0%d" % (W + 4000), "A")]
    for out, topic in odd:
        specs.insert(rng.randrange(len(specs)), Message(TIMER_TOPIC, b"odd", queue_id=0, properties={
            "TIMER_OUT_MS": out, "REAL_TOPIC": topic, "REAL_QID": "0"}))
    put = put_backlog(store, specs)
    assert store.get_max_offset_in_queue(TIMER_TOPIC, 0) == len(specs)
    model = Model(W)
    for phy, size, out, topic, delete in put:
        model.enqueue(phy, size, int(out), topic, delete)
    magics = set(model.magics)
    assert {DEFAULT, DEFAULT | ROLL, DEFAULT | DELETE, DEFAULT | ROLL | DELETE} <= magics
    assert len(model.files) >= 10 and model.due
    by_python = drain(store, fake_clock)
    check_files(store, model, len(specs))
    # only the due ones and the odd TIMER_OUT_MS went through Python; every other unit was the compiled run's
    assert len(by_python) == len(model.due) + 1
    # the due ones went straight to their topics, never enqueued
    wait_for(lambda: sum(store.get_max_offset_in_queue(t, q) for t in TOPICS for q in range(3)) == len(model.due))
    got = []
    for t in TOPICS:
        for q in range(3):
            res = store.get_message("g", t, q, 0, 64)
            got += list(res.messages) if res is not None and res.messages else []
    assert all(m.properties["TIMER_ENQUEUE_MS"] == str(NEVER_ENQUEUED) for m in got)


def test_a_second_backlog_links_into_the_slots_of_the_first(store_factory, fake_clock):
    # two drains: the second run's units link back (prevPos) to the first's, across a file roll
    store = store_factory(clock=fake_clock, timer_stop_enqueue=True, timer_roll_window_slots=ROLL_SLOTS,
                          mapped_file_size_timer_log=TL_FILE)
    first = [Message("A", b"%d" % i, deliver_at_ms=W + 2000 + i % 3 * 1000) for i in range(7)]
    put = put_backlog(store, first)
    drain(store, fake_clock)
    store.config.timer_stop_enqueue = True
    second = [Message("Top", b"%d" % i, deliver_at_ms=W + 2000 + i % 4 * 1000) for i in range(9)]
    put += put_backlog(store, second)
    model = Model(W)
    for phy, size, out, topic, delete in put:
        model.enqueue(phy, size, int(out), topic, delete)
    drain(store, fake_clock)
    check_files(store, model, len(put))


@pytest.mark.no_verify
def test_damaged_units_of_the_timer_queue_are_logged_and_skipped(store_factory, fake_clock, caplog):
    store = store_factory(clock=fake_clock, timer_stop_enqueue=True, timer_roll_window_slots=ROLL_SLOTS,
                          mapped_file_size_timer_log=TL_FILE)
    specs = [Message(TOPICS[i % 4], b"m%d" % i, deliver_at_ms=W + 1000 + i * 100) for i in range(12)]
    # a record of the timer topic without TIMER_OUT_MS
    specs.insert(5, Message(TIMER_TOPIC, b"no timer", queue_id=0, properties={"REAL_TOPIC": "A", "REAL_QID": "0"}))
    put = put_backlog(store, specs)
    cq = os.path.join(store.root, "consumequeue", TIMER_TOPIC, "0", "%020d" % 0)
    bad = {2: put[2][0] + 7, 8: 1 << 40}            # inside a record; far past the commit log's end
    with open(cq, "r+b") as f:
        for i, phy in bad.items():
            f.seek(i * 20)
            f.write(struct.pack(">q", phy))
    store_factory.skip_check()
    model = Model(W)
    for i, (phy, size, out, topic, delete) in enumerate(put):
        if i not in bad and out is not None:
            model.enqueue(phy, size, int(out), topic, delete)
    with caplog.at_level(logging.ERROR, logger="pystore.timer.timer_store"):
        assert drain(store, fake_clock) == [2, 5, 8]
    check_files(store, model, len(put))
    logged = [r.getMessage() for r in caplog.records if r.name == "pystore.timer.timer_store"]
    assert len(logged) == 3, logged
    assert any("no valid TIMER_OUT_MS" in m and "offset 5" in m for m in logged)
    for i, phy in bad.items():
        assert any("queue offset %d: no readable message at commit-log offset %d" % (i, phy) in m for m in logged)


def test_wheel_pending_sums_the_slots_that_hold_their_own_time():
    wheel = bytearray(SLOTS * 32)
    slots_total = SLOTS // 2
    SLOT.pack_into(wheel, (T0 // P) % SLOTS * 32, T0 // P, 0, 0, -1, 0)           # a delete marker's slot
    SLOT.pack_into(wheel, (T0 // P + 5) % SLOTS * 32, T0 // P + 5, 52, 104, 2, 0)
    SLOT.pack_into(wheel, (T0 // P + 9) % SLOTS * 32, T0 // P + 9 - SLOTS, 0, 0, 7, 0)   # a slot of another turn
    assert wheel_pending(wheel, slots_total, P, T0, T0 + 20 * P) == (1, T0 + 5 * P)
    assert wheel_pending(wheel, slots_total, P, T0 + P, T0 + 20 * P) == (2, T0 + 5 * P)
    assert wheel_pending(wheel, slots_total, P, T0 + 6 * P, T0 + 20 * P) == (0, -1)
    assert wheel_pending(wheel, slots_total, P, T0, T0 - 1) == (0, -1)
    with pytest.raises(ValueError):
        wheel_pending(bytes(64), slots_total, P, T0, T0)
