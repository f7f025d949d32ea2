"""The wake-up word (``pystore.system._notify.WakeWord``; docs/format.md §15): register / notify / unregister on the
state word of a shared mapping, as the writer and the waiters of other processes see it (two ``WakeWord``
objects on one mapping stand for two processes). The ``wakeup`` file and real reader processes:
test_consumer_wake.py."""

from __future__ import annotations

import mmap
import struct
import threading
import time

import pytest

from pystore.system._notify import HAVE_FUTEX, WakeWord

OFFSET = 16                      # the state word's place in the wake file; the flags word is the 4 bytes before
ONE_WAITER = 1 << 32
SLEEPING = 1 << 63


@pytest.fixture
def buf():
    m = mmap.mmap(-1, 64)        # page-aligned, like the file's mapping
    yield m
    m.close()


def raw(buf) -> int:
    return struct.unpack_from("=Q", buf, OFFSET)[0]


def set_raw(buf, value: int) -> None:
    struct.pack_into("=Q", buf, OFFSET, value)


@pytest.mark.parametrize("offset", [0, 3, 60, 64])
def test_a_word_that_does_not_fit_the_buffer_is_refused(buf, offset):
    with pytest.raises(ValueError, match="does not fit"):
        WakeWord(buf, offset)


def test_a_misaligned_word_is_refused(buf):
    with pytest.raises(ValueError, match="aligned"):
        WakeWord(buf, 12)


def test_a_new_word_is_all_zero_and_a_notify_without_waiters_writes_nothing(buf):
    w = WakeWord(buf, OFFSET)
    assert (w.seq, w.waiters, w.sleeping, w.flags) == (0, 0, False, 0)
    before = bytes(buf)
    assert w.notify() is False
    assert bytes(buf) == before


def test_register_counts_a_waiter_in_the_high_half_and_returns_the_seq(buf):
    w = WakeWord(buf, OFFSET)
    set_raw(buf, 41)
    assert w.register() == 41
    assert w.register() == 41
    assert raw(buf) == 2 * ONE_WAITER + 41
    assert w.waiters == 2 and w.seq == 41


def test_notify_bumps_the_seq_and_takes_every_registration(buf):
    writer, waiter = WakeWord(buf, OFFSET), WakeWord(buf, OFFSET)
    seen = waiter.register()
    waiter.register()
    assert writer.notify() is True
    assert raw(buf) == seen + 1                      # (seq + 1, no waiters, not sleeping)
    assert writer.notify() is False                   # nobody registered since
    assert writer.seq == seen + 1


def test_unregister_takes_back_only_a_registration_the_writer_did_not_take(buf):
    writer, a, b = WakeWord(buf, OFFSET), WakeWord(buf, OFFSET), WakeWord(buf, OFFSET)
    seen_a = a.register()
    b.register()
    a.unregister(seen_a)                              # seq unchanged: a takes back its own count
    assert writer.waiters == 1
    writer.notify()                                   # takes b's
    seen_b2 = b.register()                            # b registers again, at the new seq
    a.unregister(seen_a)                              # stale seq: the writer's swap already took a's count
    assert writer.waiters == 1
    b.unregister(seen_b2)
    assert raw(buf) == seen_a + 1


def test_the_last_unregister_clears_sleeping(buf):
    w = WakeWord(buf, OFFSET)
    seen = w.register()
    w.register()
    assert w.wait(seen, 0, 0) == 0                    # no time left: marks itself sleeping, times out at once
    assert w.sleeping
    w.unregister(seen)
    assert w.sleeping and w.waiters == 1
    w.unregister(seen)
    assert not w.sleeping and w.waiters == 0


def test_a_waiter_killed_while_registered_is_cleared_by_the_next_notify(buf):
    writer, dead = WakeWord(buf, OFFSET), WakeWord(buf, OFFSET)
    dead.register()
    del dead                                          # never unregisters
    assert writer.waiters == 1
    assert writer.notify() is True
    assert writer.waiters == 0


def test_the_seq_wraps_at_two_to_the_32(buf):
    w = WakeWord(buf, OFFSET)
    set_raw(buf, 0xFFFFFFFF)
    assert w.register() == 0xFFFFFFFF
    assert w.notify() is True
    assert raw(buf) == 0 and w.seq == 0


def test_wait_returns_at_once_when_the_seq_already_moved(buf):
    w = WakeWord(buf, OFFSET)
    seen = w.register()
    w.notify()
    assert w.wait(seen, 1000.0, 60_000.0) in (1, -2)


@pytest.mark.skipif(not HAVE_FUTEX, reason="waits sleep on a Linux futex")
def test_a_sleeping_waiter_in_another_thread_is_woken_by_notify(buf):
    writer, waiter = WakeWord(buf, OFFSET), WakeWord(buf, OFFSET)
    got = []
    seen = waiter.register()
    t = threading.Thread(target=lambda: got.append(waiter.wait(seen, 0, 120_000.0)))
    t.start()
    end = time.monotonic() + 60
    while not writer.sleeping and time.monotonic() < end:          # the waiter is in (or entering) the futex
        time.sleep(0.001)
    assert writer.sleeping
    assert writer.notify() is True
    t.join(60)
    assert not t.is_alive()
    assert got == [1]
    assert raw(buf) == seen + 1                        # the wake-up took the registration and the sleeping bit


def test_the_flags_word_before_the_state_word_says_whether_waiters_fence(buf):
    writer, waiter = WakeWord(buf, OFFSET), WakeWord(buf, OFFSET)
    light = writer.claim_writer()
    assert waiter.flags == struct.unpack_from("=I", buf, OFFSET - 4)[0] == int(light)
    if light:
        assert waiter.register() >= 0                 # this process can issue the barrier the writer asked for
        assert waiter.waiters == 1
    else:
        struct.pack_into("=I", buf, OFFSET - 4, 1)     # a writer elsewhere asked for a barrier this process lacks
        assert waiter.register() == -1
        assert waiter.waiters == 0                    # nothing left registered: the waiter polls
