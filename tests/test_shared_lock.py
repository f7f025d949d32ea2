"""The writers' append lock and its state page (``pystore.log._shared_lock``, ``pystore.log.shared_state``), with
real processes: mutual exclusion across processes, a holder killed with SIGKILL (the next locker gets the lock at
once and is told what to repair), a live holder never broken into, the sole opener's fresh page, a page of an
unknown layout refused. Both lock kinds: the robust process-shared mutex and the OFD lock."""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from pystore.log._shared_lock import DEAD_MAN, MAGIC, OFD, ROBUST_MUTEX, SharedLock
from pystore.log.shared_state import FILE_NAME, SharedState, SharedStateError, describe

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="OFD locks and robust mutexes: Linux")

KINDS = pytest.mark.parametrize("prefer_mutex", [True, False], ids=["robust-mutex", "ofd"])


def child(root, prefer_mutex: bool, body: str) -> subprocess.Popen:
    """A process that opens the page under ``root`` and runs ``body`` with ``lock`` (its ``SharedLock``) and
    ``say`` (a line to the parent) in scope."""
    code = textwrap.dedent("""
        import sys, time
        from pystore.log.shared_state import SharedState
        def say(s):
            print(s, flush=True)
        state = SharedState(sys.argv[1], prefer_mutex=sys.argv[2] == "1")
        lock = state.open()
    """) + textwrap.dedent(body)
    return subprocess.Popen([sys.executable, "-c", code, str(root), "1" if prefer_mutex else "0"],
                            stdout=subprocess.PIPE, text=True)


def holder(root, prefer_mutex: bool, then: str = "") -> subprocess.Popen:
    """A process that takes the lock, runs ``then`` (one line) holding it and sleeps (until killed)."""
    p = child(root, prefer_mutex, "lock.acquire()\n%s\nsay(\"holding\")\ntime.sleep(600)\n" % then)
    expect(p, "holding")
    return p


def kill(p: subprocess.Popen) -> None:
    p.send_signal(signal.SIGKILL)
    p.wait(30)


def expect(p: subprocess.Popen, line: str) -> None:
    got = p.stdout.readline().strip()
    assert got == line, (got, p.poll())


@KINDS
def test_the_first_opener_writes_the_page_and_the_next_takes_it(tmp_path, prefer_mutex):
    a = SharedState(str(tmp_path), prefer_mutex)
    lock = a.open(1234)
    assert a.first and lock.kind == (ROBUST_MUTEX if prefer_mutex else OFD)
    assert lock.published_end == lock.reserved_end == 1234 and lock.generation == 0
    raw = (tmp_path / FILE_NAME).read_bytes()
    assert raw[:8] == MAGIC and len(raw) == 4096 + 16384 * 320      # the page, then the queue-offset table
    b = SharedState(str(tmp_path), prefer_mutex)
    lock_b = b.open(0)                  # not alone: the page is taken as it is, the end too
    assert not b.first and lock_b.published_end == 1234 and lock_b.kind == lock.kind
    assert not a.alone()
    b.close()
    assert a.alone()
    a.close()


@KINDS
def test_the_page_holds_its_fields_where_the_format_says(tmp_path, prefer_mutex):
    # docs/format.md §16, byte by byte (machine order: little-endian here), read back by ``describe`` too
    state = SharedState(str(tmp_path), prefer_mutex)
    lock = state.open(1000)
    with lock:
        lock.reserve_end(1300)
        lock.publish_end(1300)
        lock.dispatched_end = 1200
        lock.leader_pid = 4242
        raw = (tmp_path / FILE_NAME).read_bytes()
        assert struct.unpack_from("<8sII", raw, 0) == (MAGIC, 2, ROBUST_MUTEX if prefer_mutex else OFD)
        generation, published, reserved, holder, leader = struct.unpack_from("<qqqii", raw, 16)
        assert (generation, published, reserved, holder, leader) == (0, 1300, 1300, os.getpid(), 4242)
        locked_at, acquisitions, published_ts, dispatched = struct.unpack_from("<qqqq", raw, 48)
        assert 0 < locked_at <= time.monotonic_ns() and acquisitions >= 1 and published_ts == 0 and dispatched == 1200
        # the table: 16384 slots, none used, begun at the end the page was written with, not filled up
        assert struct.unpack_from("<IIqqi", raw, 80) == (16384, 0, 1000, -1, -1)
        assert struct.unpack_from("<q", raw, 112)[0] == 0 and raw[168:192] == bytes(24)     # the mutex's room
        assert struct.unpack_from("<q", raw, 192)[0] == 0 and raw[200:4000] == bytes(3800)  # no recovery
        assert len(raw) == 4096 + 16384 * 320 and raw[4096:] == bytes(16384 * 320)
        page = describe(str(tmp_path))
        assert page is not None and page["holder_pid"] == os.getpid() and page["held_for_s"] >= 0
        assert (page["published_end"], page["reserved_end"], page["dispatched_end"], page["leader_pid"],
                page["generation"], page["lock"]) == (1300, 1300, 1200, 4242, 0, lock.kind_name)
    assert describe(str(tmp_path))["holder_pid"] == 0
    state.close()
    (tmp_path / FILE_NAME).write_bytes(b"PYSTSW99" + bytes(4088))
    assert describe(str(tmp_path)) is None              # a page this version does not know: nothing to show


def test_a_queue_slot_holds_its_queue_where_the_format_says(tmp_path):
    """docs/format.md §16: slot i at 4096 + 320 i, found again by the same (topic, queue id), another queue's
    elsewhere; a put's offset noted before it reserves is given back by the repair of its death."""
    state = SharedState(str(tmp_path), queue_slots=64)
    lock = state.open(500)
    try:
        with lock:
            i = lock.slot_of("Orders", 3)
            assert lock.slot_of("Orders", 3) == i and lock.slot_of("Orders", 2) != i
            raw = (tmp_path / FILE_NAME).read_bytes()
            offset, queue_id, topic_len = struct.unpack_from("<qiH", raw, 4096 + 320 * i)
            assert (offset, queue_id, topic_len) == (0, 3, 6) and raw[4096 + 320 * i + 16:][:6] == b"Orders"
            assert lock.queue_offsets() == {("Orders", 3): 0, ("Orders", 2): 0}
            assert lock.queue_slots_used == 2 and lock.walk_from == -1 and lock.table_from == 500
    finally:
        state.close()


def test_a_full_table_takes_no_more_queues_and_says_from_where_to_walk(tmp_path):
    state = SharedState(str(tmp_path), queue_slots=8)
    lock = state.open(0)
    try:
        with lock:
            found = [lock.slot_of("T", q) for q in range(6)]
            assert all(i >= 0 for i in found) and len(set(found)) == 6 and lock.walk_from == -1
            lock.publish_end(4321)
            assert lock.slot_of("T", 6) == -1           # three quarters used: not added
            assert lock.walk_from == 4321 and lock.queue_slots_used == 6
            assert lock.slot_of("T", 2) == found[2]     # what is in it is still found
            lock.publish_end(9999)
            assert lock.slot_of("U", 0) == -1 and lock.walk_from == 4321    # set once
    finally:
        state.close()
    none = SharedState(str(tmp_path / "none"), queue_slots=0)
    os.mkdir(tmp_path / "none")
    lock = none.open(77)
    try:
        assert lock.walk_from == 77 and os.path.getsize(tmp_path / "none" / FILE_NAME) == 4096
        with lock:
            assert lock.slot_of("T", 0) == -1
    finally:
        none.close()


def test_a_blank_page_left_by_a_dead_first_opener_is_written_by_the_next(tmp_path):
    """A sole opener that dies while it writes the page (its magic cleared, the rest not yet written) leaves it
    blank: a process that opens after takes it as no page and writes one, never an old page over a cut table."""
    first = SharedState(str(tmp_path))
    first.open(100).acquire()
    first.lock.slot_of("Orders", 0)
    first.lock.release()
    first.close()
    fd = os.open(tmp_path / FILE_NAME, os.O_RDWR)
    try:
        os.pwrite(fd, bytes(8), 0)              # what a death right after the clearing leaves
    finally:
        os.close(fd)
    again = SharedState(str(tmp_path))
    lock = again.open(200)
    try:
        assert again.first and lock.published_end == 200 and lock.queue_offsets() == {}
    finally:
        again.close()


def test_a_joiner_that_finds_the_page_blank_waits_for_it_to_be_written(tmp_path):
    """A process holds the store open over a blank page (as if its writer had just died): a joiner does not take
    it, and gives up with a clear error when nobody writes it."""
    import pystore.log.shared_state as shared_state

    (tmp_path / FILE_NAME).write_bytes(bytes(4096))
    fd = os.open(tmp_path / FILE_NAME, os.O_RDWR)
    try:
        from pystore.log._shared_lock import ofd_try_lock
        assert ofd_try_lock(fd, DEAD_MAN, False)        # someone has it open: the joiner is not alone
        old = shared_state._BLANK_PAGE_WAIT_S
        shared_state._BLANK_PAGE_WAIT_S = 0.2
        try:
            with pytest.raises(SharedStateError, match="blank"):
                SharedState(str(tmp_path)).open(0)
        finally:
            shared_state._BLANK_PAGE_WAIT_S = old
    finally:
        os.close(fd)


@KINDS
def test_processes_take_turns_under_the_lock(tmp_path, prefer_mutex):
    """Three processes add 1 to the published end 3000 times each, read-modify-write under the lock: not one
    update is lost."""
    first = SharedState(str(tmp_path), prefer_mutex)
    first.open(0)
    n = 3000
    procs = [child(tmp_path, prefer_mutex, """
        say("ready")
        sys.stdin = None
        for _ in range(%d):
            with lock:
                end = lock.published_end
                lock.reserve_end(end + 1)
                lock.publish_end(end + 1)
        say("done")
    """ % n) for _ in range(3)]
    for p in procs:
        expect(p, "ready")
        expect(p, "done")
        assert p.wait(60) == 0
    assert first.lock.published_end == 3 * n and first.lock.needs_repair() is None
    assert first.lock.acquisitions == 3 * n
    first.close()


@KINDS
def test_a_holder_killed_mid_put_hands_the_lock_over_at_once_with_its_repair(tmp_path, prefer_mutex):
    first = SharedState(str(tmp_path), prefer_mutex)
    lock = first.open(4096)
    p = holder(tmp_path, prefer_mutex, "lock.reserve_end(lock.published_end + 300)")    # a put in progress
    time.sleep(0.05)        # the taking time is read from the coarse clock: a tick (1-10 ms) must pass
    assert lock.holder_pid == p.pid and lock.held_for_ns > 0
    kill(p)
    t = time.monotonic()
    lock.acquire()
    waited = time.monotonic() - t
    try:
        assert waited < 1.0
        assert lock.needs_repair() == (4096, 4396)
        if prefer_mutex:
            assert lock.recoveries == 1
        lock.repaired(4096)
        assert lock.needs_repair() is None and lock.generation == 1
        assert lock.published_end == lock.reserved_end == 4096
    finally:
        lock.release()
    # the lock works on: another process takes it and gives it back
    q = child(tmp_path, prefer_mutex, """
        with lock:
            lock.publish_end(5000)
        say("ok")
    """)
    expect(q, "ok")
    assert q.wait(30) == 0 and lock.published_end == 5000
    first.close()


@KINDS
def test_a_holder_killed_between_puts_leaves_nothing_to_repair(tmp_path, prefer_mutex):
    first = SharedState(str(tmp_path), prefer_mutex)
    lock = first.open(0)
    kill(holder(tmp_path, prefer_mutex, "lock.reserve_end(100); lock.publish_end(100)"))
    with lock:
        assert lock.needs_repair() is None and lock.published_end == 100
    first.close()


@KINDS
def test_a_live_holder_is_never_broken_into(tmp_path, prefer_mutex):
    first = SharedState(str(tmp_path), prefer_mutex)
    lock = first.open(0)
    p = holder(tmp_path, prefer_mutex)
    got = threading.Event()

    def take() -> None:
        lock.acquire()
        got.set()

    t = threading.Thread(target=take, daemon=True)
    t.start()
    assert not got.wait(0.5)                # waits as long as the holder lives
    assert lock.holder_pid == p.pid and lock.held_for_ns >= 400_000_000
    kill(p)
    assert got.wait(10)
    lock.release()
    first.close()


@KINDS
def test_the_next_sole_opener_writes_a_fresh_page(tmp_path, prefer_mutex):
    """Every process gone (one of them killed holding the lock): the next opener is alone and starts over from
    the end it recovered, whatever the page held."""
    kill(holder(tmp_path, prefer_mutex, "lock.reserve_end(999)"))
    s = SharedState(str(tmp_path), prefer_mutex)
    lock = s.open(777)
    assert s.first and lock.published_end == lock.reserved_end == 777 and lock.holder_pid == 0
    with lock:
        assert lock.needs_repair() is None
    s.close()


def test_a_page_of_an_unknown_layout_is_refused(tmp_path):
    first = SharedState(str(tmp_path))
    first.open(0)
    fd = os.open(tmp_path / FILE_NAME, os.O_RDWR)
    try:
        os.pwrite(fd, (99).to_bytes(4, sys.byteorder), 8)
    finally:
        os.close(fd)
    with pytest.raises(SharedStateError, match="layout 99"):
        SharedState(str(tmp_path)).open(0)
    first.close()


def test_the_lock_refuses_misuse(tmp_path):
    s = SharedState(str(tmp_path))
    lock = s.open(0)
    with pytest.raises(RuntimeError):
        lock.release()
    with pytest.raises(RuntimeError):
        lock.publish_end(5)
    with lock:
        with pytest.raises(RuntimeError):
            lock.acquire()
    with pytest.raises(ValueError):
        SharedLock(bytearray(100), -1)
    s.close()
    assert DEAD_MAN == 4000
