"""A read-only store's compiled get (``_queue_reader.QueueReader`` with ``live``): it follows the live writer in C
(``follow_live``) and answers exactly as the Python get (``StoreReads.get_message``, which follows in full) on
the same store states: appends within a file, a file roll of the queue and of the commit log, a writer restart;
a unit whose record is not whole is never served; ``wait_message`` (the compiled long-polling get, and the
consumer of one fixed queue over it) returns what arrives and its timeout's answer.

The writer lives in this process (its files are mapped shared, so the reader sees each append as another
process would); "the Python path" is a second read-only store's ``StoreReads.get_message`` called directly.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import pytest
from conftest import make_message

from pystore import GetMessageStatus
from pystore.errors import StoreCorruptedError
from pystore.read.arrival import Arrivals
from pystore.read.store_reads import StoreReads

TOPIC = "TopicTest"
CQ_UNITS = 10


class Fallbacks:
    """Counts the gets the compiled reader hands to the Python method."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        real = StoreReads.get_message

        def counting(reads: StoreReads, *args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return real(reads, *args, **kwargs)
        monkeypatch.setattr(StoreReads, "get_message", counting)


def _answer(r: Any) -> tuple[Any, ...]:
    return (r.status, r.next_begin_offset, r.min_offset, r.max_offset,
            [(m.queue_offset, m.commit_log_offset, m.body) for m in r.messages])


def _get(store: Any, offset: int, n: int = 32, topic: str = TOPIC) -> Any:
    try:
        return _answer(store.get_message("g", topic, 0, offset, n))
    except StoreCorruptedError as e:
        return ("damage", e.path, e.offset)


def _py_get(store: Any, offset: int, n: int = 32, topic: str = TOPIC) -> Any:
    try:
        return _answer(StoreReads.get_message(store._reads, "g", topic, 0, offset, n))
    except StoreCorruptedError as e:
        return ("damage", e.path, e.offset)


def _same(ro: Any, py: Any, upto: int, n: int = 32) -> None:
    """The compiled and the Python get agree at every offset up to ``upto``, from the end backwards (the end
    first: that is where the compiled reader follows)."""
    for off in range(upto, -1, -1):
        assert _get(ro, off, n) == _py_get(py, off, n), off


@pytest.fixture
def pair(store_factory: Any) -> tuple[Any, Any, Any]:
    """A writer (queue files of ``CQ_UNITS`` units) with one message, and two read-only stores on it."""
    w = store_factory(mapped_file_size_consume_queue=CQ_UNITS * 20)
    assert w.put_message(make_message(0)).is_ok()
    ro = store_factory(read_only=True, mapped_file_size_consume_queue=CQ_UNITS * 20)
    py = store_factory(read_only=True, mapped_file_size_consume_queue=CQ_UNITS * 20)
    return w, ro, py


def test_a_get_at_the_end_follows_in_c_within_a_file(pair, monkeypatch):
    w, ro, py = pair
    assert ro._gets is ro._reader
    assert _get(ro, 0) == _py_get(py, 0)
    fb = Fallbacks(monkeypatch)
    for i in range(1, 5):
        assert w.put_message(make_message(i)).is_ok()
        r = ro.get_message("g", TOPIC, 0, i, 32)
        assert r.status is GetMessageStatus.FOUND and [m.queue_offset for m in r.messages] == [i]
        assert ro.get_message("g", TOPIC, 0, i + 1, 32).status is GetMessageStatus.OFFSET_OVERFLOW_ONE
    # the units and records of the 4 puts were each followed without the Python get
    assert fb.calls == 0
    # while a Python follow is under way (another thread's, its GIL released) the get is the Python one's
    ro._parts.following += 1
    try:
        assert w.put_message(make_message(5)).is_ok()
        assert [m.queue_offset for m in ro.get_message("g", TOPIC, 0, 5, 32).messages] == [5]
        assert fb.calls == 1
    finally:
        ro._parts.following -= 1
    monkeypatch.undo()
    _same(ro, py, 7)


def test_a_roll_of_the_queue_and_of_the_commit_log_while_following(pair, monkeypatch):
    w, ro, py = pair
    fb = Fallbacks(monkeypatch)
    big = b"b" * 3000            # the 64 KiB commit-log files roll every ~21 messages, the queue's every 10
    sent = 1
    for _ in range(60):
        assert w.put_message(make_message(sent, body=big)).is_ok()
        r = ro.get_message("g", TOPIC, 0, sent, 32)
        assert [m.queue_offset for m in r.messages] == [sent], (sent, r)
        assert r.messages[0].body == big
        sent += 1
    # a new file (of the queue or the log) is the Python follow's: it ran at the rolls only
    assert 0 < fb.calls < 20
    assert len(w._commitlog.queue.files) >= 3
    monkeypatch.undo()
    _same(ro, py, sent + 1)
    _same(ro, py, sent + 1, n=5)


@pytest.mark.parametrize("python_get", [False, True])
def test_a_follow_that_fills_the_queues_file_goes_on_in_the_next(pair, python_get):
    """The units after the one seen filled the queue's last file and went on in a new one, all in one commit-log
    file: the follow's walk of the units ends at the full file, which does not mean it saw them all (a get
    past it once answered OFFSET_OVERFLOW_BADLY with the first file's end as the queue's end)."""
    w, ro, py = pair
    for i in range(1, CQ_UNITS + 5):
        assert w.put_message(make_message(i)).is_ok()
    get = _py_get if python_get else _get
    r = get(py if python_get else ro, CQ_UNITS + 2)
    assert r[0] is GetMessageStatus.FOUND and [m[0] for m in r[4]] == [CQ_UNITS + 2, CQ_UNITS + 3, CQ_UNITS + 4]
    assert r[3] == CQ_UNITS + 5


def test_a_writer_restart_while_following(pair, store_factory):
    w, ro, py = pair
    for i in range(1, 4):
        assert w.put_message(make_message(i)).is_ok()
    assert [m.queue_offset for m in ro.get_message("g", TOPIC, 0, 1, 32).messages] == [1, 2, 3]
    w.shutdown()
    w2 = store_factory(mapped_file_size_consume_queue=CQ_UNITS * 20)
    for i in range(4, 8):
        assert w2.put_message(make_message(i)).is_ok()
    r = ro.get_message("g", TOPIC, 0, 4, 32)
    assert r.status is GetMessageStatus.FOUND and [m.queue_offset for m in r.messages] == [4, 5, 6, 7]
    _same(ro, py, 9)
    store_factory.expect_messages(8)


def _record_of(w: Any, offset: int) -> tuple[str, int, bytes]:
    """(commit-log file, position in it, bytes) of the record of queue offset ``offset`` of ``w``."""
    m = w.get_message("g", TOPIC, 0, offset, 1).messages[0]
    mf = w._commitlog.queue.find_mapped_file_by_offset(m.commit_log_offset)
    pos = m.commit_log_offset - mf.file_from_offset
    with open(mf.file_name, "rb") as f:
        f.seek(pos)
        data = f.read(m.store_size)
    return mf.file_name, pos, data


def _write(path: str, pos: int, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, data, pos)
    finally:
        os.close(fd)


def test_a_record_seen_before_its_unit_is_served_once_the_unit_is(pair, monkeypatch):
    """The writer's order: record, then unit. The record alone is nothing to a reader; with its unit the
    compiled get serves it, having scanned the commit log after the units."""
    w, ro, py = pair
    assert w.put_message(make_message(1)).is_ok()
    # the queue's unit 1 not written yet: the writer is between the record and the unit
    cq = w._cq_store.find(TOPIC, 0)
    unit_file = cq.queue.files[0].file_name
    with open(unit_file, "rb") as f:
        f.seek(20)
        unit = f.read(20)
    _write(unit_file, 20, bytes(20))
    fb = Fallbacks(monkeypatch)
    assert _get(ro, 1)[0] is GetMessageStatus.OFFSET_OVERFLOW_ONE
    _write(unit_file, 20, unit)
    r = ro.get_message("g", TOPIC, 0, 1, 32)
    assert r.status is GetMessageStatus.FOUND and [m.queue_offset for m in r.messages] == [1]
    assert fb.calls == 0
    monkeypatch.undo()
    _same(ro, py, 3)


def test_a_unit_whose_record_is_not_whole_is_never_served(pair, monkeypatch):
    """A unit visible before its record is whole is not what a writer does: both gets refuse it (damage),
    never a message, until the record is whole; a torn record (its body not all there) the same."""
    w, ro, py = pair
    assert w.put_message(make_message(1)).is_ok()
    path, pos, data = _record_of(w, 1)
    _write(path, pos, bytes(len(data)))                    # the unit is there, its record not
    unit_file = w._cq_store.find(TOPIC, 0).queue.files[0].file_name
    for store, get in ((ro, _get), (py, _py_get)):
        assert get(store, 1) == ("damage", unit_file, 20)     # the unit points past what was written
    assert _get(ro, 1) == _py_get(py, 1)
    _write(path, pos, data[:40] + bytes(len(data) - 40))   # torn: the header, not the body
    for store, get in ((ro, _get), (py, _py_get)):
        a = get(store, 1)
        assert a[0] == "damage" and a[1] in (path, unit_file), a
    assert _get(ro, 1) == _py_get(py, 1)
    _write(path, pos, data)                                # whole now
    assert [x[0] for x in _get(ro, 1)[4]] == [1]
    _same(ro, py, 3)


def _put_later(w: Any, i: int, delay: float) -> threading.Thread:
    def put() -> None:
        time.sleep(delay)
        assert w.put_message(make_message(i)).is_ok()
    t = threading.Thread(target=put)
    t.start()
    return t


@pytest.mark.parametrize("spin_us", [0, 300])
def test_the_compiled_wait_returns_what_arrives_and_its_timeouts_answer(pair, spin_us):
    w, ro, _ = pair
    wake = ro._reads.arrivals()._wake_word()
    assert wake is not None
    # nothing arrives: the last get's answer, after the timeout
    r = ro._reader.wait_message(wake, TOPIC, 0, 1, 32, spin_us, 50)
    assert r.status is GetMessageStatus.OFFSET_OVERFLOW_ONE
    assert wake.waiters == 0
    # something arrives while it waits
    t = _put_later(w, 1, 0.05)
    r = ro._reader.wait_message(wake, TOPIC, 0, 1, 32, spin_us, 10_000)
    t.join()
    assert r.status is GetMessageStatus.FOUND and [m.queue_offset for m in r.messages] == [1]
    # a queue that does not exist yet, then does: the Python get follows it inside the wait
    t = _put_later(w, 0, 0.05)
    other = make_message(0, topic="Other")
    t2 = threading.Thread(target=lambda: (time.sleep(0.1), w.put_message(other)))
    t2.start()
    r = ro._reader.wait_message(wake, "Other", 0, 0, 32, spin_us, 10_000)
    t.join()
    t2.join()
    assert r.status is GetMessageStatus.FOUND and [m.topic for m in r.messages] == ["Other"]
    # a get with timeout_ms on the store waits the same way
    t = _put_later(w, 3, 0.05)
    r = ro.get_message("g", TOPIC, 0, 3, 32, timeout_ms=10_000)
    t.join()
    assert r.status is GetMessageStatus.FOUND and [m.queue_offset for m in r.messages] == [3]


def test_a_consumer_of_one_queue_waits_in_c(pair, monkeypatch):
    w, ro, _ = pair

    def no(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the consumer of one queue waited in Python")
    monkeypatch.setattr(Arrivals, "wait_for", no)
    c = ro.consumer("g", TOPIC, queue_ids=[0], auto_commit=False, spin_us=200)
    assert [m.queue_offset for m in c.poll(1000)] == [0]
    assert c.poll(20) == []
    t = _put_later(w, 1, 0.05)
    assert [m.queue_offset for m in c.poll(10_000)] == [1]
    t.join()
    t = _put_later(w, 2, 0.05)
    assert next(iter(c)).queue_offset == 2
    t.join()
    assert c.positions == {0: 3}


def test_a_wait_woken_by_another_queue_still_gets_its_own(pair):
    """Puts to another topic wake the waiter for nothing (the wake word is the store's); it then looks at its
    queue without registering for a while, and still returns its own message, put among them."""
    w, ro, _ = pair
    wake = ro._reads.arrivals()._wake_word()
    assert w.put_message(make_message(0, topic="Busy")).is_ok()
    done: list[Any] = []

    def others() -> None:
        for i in range(1, 200):
            w.put_message(make_message(i, topic="Busy"))
            if i == 100:
                w.put_message(make_message(1))
            time.sleep(0.0005)
        done.append(True)
    t = threading.Thread(target=others)
    t.start()
    r = ro._reader.wait_message(wake, TOPIC, 0, 1, 32, 0, 10_000)
    t.join()
    assert done and r.status is GetMessageStatus.FOUND and [m.queue_offset for m in r.messages] == [1]
    assert wake.waiters == 0


def test_a_reader_far_behind_follows_in_python(store_factory, monkeypatch):
    """More than a MiB of the log to scan is the Python follow's (its scan lets other threads run); the
    answer is the same."""
    size = 4 << 20
    w = store_factory(mapped_file_size_commit_log=size)
    assert w.put_message(make_message(0)).is_ok()
    ro = store_factory(read_only=True, mapped_file_size_commit_log=size)
    py = store_factory(read_only=True, mapped_file_size_commit_log=size)
    assert [m.queue_offset for m in ro.get_message("g", TOPIC, 0, 0, 32).messages] == [0]
    fb = Fallbacks(monkeypatch)
    body = b"f" * 4000
    for i in range(1, 301):                # 1.2 MB after what the reader saw
        assert w.put_message(make_message(i, body=body)).is_ok()
    r = ro.get_message("g", TOPIC, 0, 1, 32)
    assert fb.calls == 1 and [m.queue_offset for m in r.messages] == list(range(1, 33))
    # caught up: the next put is followed in C again
    assert w.put_message(make_message(301)).is_ok()
    assert [m.queue_offset for m in ro.get_message("g", TOPIC, 0, 301, 32).messages] == [301]
    assert fb.calls == 1
    monkeypatch.undo()
    for off in (302, 301, 300, 299, 100, 1, 0):           # the end first: both follow there
        assert _get(ro, off) == _py_get(py, off), off


def test_the_refresh_follows_a_reader_far_behind_in_place(store_factory, monkeypatch):
    """The Python get's quick follow (``StoreParts._follow_in_place``) is the compiled one without its cap on the
    log scanned: a reader more than a MiB behind within one file is followed in place, with no folder listing
    (the full follow, ``ConsumeQueueStore.refresh_queue_read_only``, is only for new files and damage)."""
    size = 4 << 20
    w = store_factory(mapped_file_size_commit_log=size)
    assert w.put_message(make_message(0)).is_ok()
    ro = store_factory(read_only=True, mapped_file_size_commit_log=size)
    py = store_factory(read_only=True, mapped_file_size_commit_log=size)
    assert [m.queue_offset for m in ro.get_message("g", TOPIC, 0, 0, 32).messages] == [0]
    for i in range(1, 301):                # 1.2 MB after what the reader saw
        assert w.put_message(make_message(i, body=b"f" * 4000)).is_ok()
    listings = []
    cq_store = ro._reads.parts.cq_store
    real = type(cq_store).refresh_queue_read_only
    monkeypatch.setattr(cq_store, "refresh_queue_read_only", lambda *a: listings.append(a) or real(cq_store, *a))
    assert [m.queue_offset for m in ro.get_message("g", TOPIC, 0, 1, 32).messages] == list(range(1, 33))
    assert listings == []
    assert ro._reads.parts.commitlog.get_max_offset() == w.get_max_phy_offset()
    assert ro.get_topic_queue_table()[(TOPIC, 0)] == 301          # the queue's cell follows what it sees
    monkeypatch.undo()
    for off in (301, 300, 100, 1, 0):
        assert _get(ro, off) == _py_get(py, off), off


# -- the tail's fast case (``QueueReader._next_at_end``) ------------------------------------------------------

_FIELDS = ("store_size", "body_crc", "queue_id", "flag", "queue_offset", "commit_log_offset", "sys_flag",
           "born_timestamp", "store_timestamp", "reconsume_times", "prepared_transaction_offset", "magic_code",
           "raw", "topic", "body", "properties", "tags", "keys", "born_host", "store_host", "msg_id")


def _whole(r: Any) -> tuple[Any, ...]:
    """All of a get's answer, every field of every message."""
    return (r.status, r.next_begin_offset, r.min_offset, r.max_offset, r.buffer_total_size,
            r.suggest_pulling_from_slave, [tuple(getattr(m, f) for f in _FIELDS) for m in r.messages])


def test_the_tails_fast_case_answers_as_the_python_get(pair, monkeypatch):
    """A get at the end seen, with the one unit the writer just wrote there, is answered from that unit and
    its record alone (``tail_reads`` counts it), with every field the Python get gives on the same state; its
    record may lie at the commit log's end seen or below it (another queue's get followed past it). Two new
    units, a unit of another topic between, are the general read's, with the same answers."""
    w, ro, py = pair
    reader = ro._reader
    assert [m.queue_offset for m in ro.get_message("g", TOPIC, 0, 0, 32).messages] == [0]
    fb = Fallbacks(monkeypatch)
    for i in range(1, 6):
        assert w.put_message(make_message(i, body_size=100 + 37 * i, keys=["k%d" % i, "x"])).is_ok()
        before = reader.tail_reads
        r = ro.get_message("g", TOPIC, 0, i, 32)
        assert reader.tail_reads == before + 1
        monkeypatch.undo()
        assert _whole(r) == _whole(StoreReads.get_message(py._reads, "g", TOPIC, 0, i, 32)), i
        fb = Fallbacks(monkeypatch)
    assert fb.calls == 0
    # the record below the commit log's end seen: a get of another topic put after it followed past it
    assert w.put_message(make_message(6)).is_ok()
    assert w.put_message(make_message(0, topic="Other")).is_ok()
    assert ro.get_message("g", "Other", 0, 0, 32).status is GetMessageStatus.FOUND
    before = reader.tail_reads
    r = ro.get_message("g", TOPIC, 0, 6, 32)
    assert reader.tail_reads == before + 1
    monkeypatch.undo()
    assert _whole(r) == _whole(StoreReads.get_message(py._reads, "g", TOPIC, 0, 6, 32))
    # two new units: a page, the general read's (the same answer as the Python get), with one message asked
    # for too
    for i in (7, 8):
        assert w.put_message(make_message(i)).is_ok()
    before = reader.tail_reads
    for n in (1, 32):
        r = ro.get_message("g", TOPIC, 0, 7, n)
        assert _whole(r) == _whole(StoreReads.get_message(py._reads, "g", TOPIC, 0, 7, n))
    assert [m.queue_offset for m in r.messages] == [7, 8] and reader.tail_reads == before
    _same(ro, py, 10)


def test_a_unit_being_written_is_not_served_by_the_fast_case(pair):
    """The writer stores a unit's size last (release), after its commit-log offset and tags code: a unit whose
    offset is there but whose size is not yet is nothing, for the fast case and for the spin on the unit;
    once the size is there the fast case serves it."""
    w, ro, py = pair
    assert ro.get_message("g", TOPIC, 0, 0, 32).status is GetMessageStatus.FOUND
    assert w.put_message(make_message(1)).is_ok()
    unit_file = w._cq_store.find(TOPIC, 0).queue.files[0].file_name
    with open(unit_file, "rb") as f:
        f.seek(20)
        unit = f.read(20)
    _write(unit_file, 28, bytes(4))                        # offset and tags code written, the size not yet
    before = ro._reader.tail_reads
    assert _get(ro, 1)[0] is GetMessageStatus.OFFSET_OVERFLOW_ONE
    wake = ro._reads.arrivals()._wake_word()
    r = ro._reader.wait_message(wake, TOPIC, 0, 1, 32, 2000, 30)      # spins on the unit, then sleeps
    assert r.status is GetMessageStatus.OFFSET_OVERFLOW_ONE and wake.waiters == 0
    _write(unit_file, 20, unit)
    r = ro._reader.wait_message(wake, TOPIC, 0, 1, 32, 2000, 10_000)
    assert [m.queue_offset for m in r.messages] == [1] and ro._reader.tail_reads == before + 1
    _same(ro, py, 3)


def test_a_spinning_wait_watches_the_unit_and_leaves_the_wake_word_alone(pair):
    """A wait with ``spin_us`` spins on the place of the queue's next unit: it does not register in the wake
    word (the writer pays nothing for it, its seq never moves) and returns the message as soon as the unit
    is written, through the fast case."""
    w, ro, _ = pair
    wake = ro._reads.arrivals()._wake_word()
    assert ro.get_message("g", TOPIC, 0, 0, 32).status is GetMessageStatus.FOUND
    seq = wake.seq
    seen: list[int] = []

    def watch() -> None:
        # the writer's view of the word while the reader spins: never a registration
        while len(seen) < 5:
            seen.append(wake.waiters)
            time.sleep(0.005)
    before = ro._reader.tail_reads
    for i in range(1, 4):
        t = _put_later(w, i, 0.03)
        s = threading.Thread(target=watch)
        s.start()
        r = ro._reader.wait_message(wake, TOPIC, 0, i, 32, 5_000_000, 10_000)
        t.join()
        s.join()
        assert r.status is GetMessageStatus.FOUND and [m.queue_offset for m in r.messages] == [i]
        assert set(seen) == {0}
        seen.clear()
    assert wake.seq == seq and ro._reader.tail_reads == before + 3


def test_a_spinning_wait_across_file_rolls(pair):
    """The queue's files hold ``CQ_UNITS`` units and the commit log's roll every ~21 messages: a spinning wait
    at a full queue file has no place to watch (the next unit goes to a new file) and waits on the wake word,
    and a unit whose record is in a new commit-log file is the general read's; every message arrives, in
    order, with the Python get's answer."""
    w, ro, py = pair
    wake = ro._reads.arrivals()._wake_word()
    big = b"r" * 3000
    assert ro.get_message("g", TOPIC, 0, 0, 32).status is GetMessageStatus.FOUND
    for i in range(1, 45):
        t = threading.Thread(target=lambda i=i: (time.sleep(0.002), w.put_message(make_message(i, body=big))))
        t.start()
        r = ro._reader.wait_message(wake, TOPIC, 0, i, 32, 3000, 10_000)
        t.join()
        assert [m.queue_offset for m in r.messages] == [i], (i, r)
        assert r.messages[0].body == big
    assert len(w._commitlog.queue.files) >= 2 and len(w._cq_store.find(TOPIC, 0).queue.files) >= 4
    _same(ro, py, 46)
