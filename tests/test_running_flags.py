"""The store's running flags (``pystore.system.running_flags``, docs/format.md §9.4; RocketMQ ``RunningFlags``): which
bits make the store unwriteable or unreadable, what the ``get_and_make_*`` calls return, and the listeners."""

from __future__ import annotations

import threading

import pytest

from pystore.system.running_flags import RunningFlags

F = RunningFlags


def test_a_new_store_is_readable_and_writeable():
    flags = RunningFlags()
    assert flags.get_flag_bits() == 0
    assert flags.is_readable() and flags.is_writeable() and flags.is_cq_writeable()
    assert not flags.is_disk_full() and not flags.is_logics_queue_error() and not flags.is_index_file_error()
    assert repr(flags) == "RunningFlags(OK)"


def test_the_bits_are_rocketmqs():
    assert (F.NOT_READABLE_BIT, F.NOT_WRITEABLE_BIT, F.WRITE_LOGICS_QUEUE_ERROR_BIT, F.WRITE_INDEX_FILE_ERROR_BIT,
            F.DISK_FULL_BIT) == (1, 2, 4, 8, 16)


@pytest.mark.parametrize("make, bit, cq_writeable", [
    ("get_and_make_not_writeable", F.NOT_WRITEABLE_BIT, False),
    ("make_logics_queue_error", F.WRITE_LOGICS_QUEUE_ERROR_BIT, False),
    ("make_index_file_error", F.WRITE_INDEX_FILE_ERROR_BIT, False),
    ("get_and_make_disk_full", F.DISK_FULL_BIT, True),          # a full disk still takes consume-queue units
])
def test_each_error_bit_stops_writes_and_only_disk_full_spares_the_consume_queues(make, bit, cq_writeable):
    flags = RunningFlags()
    getattr(flags, make)()
    assert flags.get_flag_bits() == bit
    assert not flags.is_writeable()
    assert flags.is_cq_writeable() is cq_writeable
    assert flags.is_readable()


def test_not_readable_leaves_writes_alone():
    flags = RunningFlags()
    assert flags.get_and_make_not_readable() is True             # it was readable
    assert flags.get_and_make_not_readable() is False            # already not
    assert not flags.is_readable() and flags.is_writeable()
    assert repr(flags) == "RunningFlags(NOT_READABLE)"


def test_disk_full_and_ok_say_whether_the_bit_was_clear_before():
    flags = RunningFlags()
    assert flags.get_and_make_disk_full() is True
    assert flags.get_and_make_disk_full() is False
    assert flags.is_disk_full()
    assert flags.get_and_make_disk_ok() is False                 # it was full
    assert flags.get_and_make_disk_ok() is True
    assert flags.get_flag_bits() == 0


def test_clearing_one_error_keeps_the_others():
    flags = RunningFlags()
    flags.make_logics_queue_error()
    flags.make_index_file_error()
    flags.get_and_make_disk_full()
    flags.clear_logics_queue_error()
    assert flags.get_flag_bits() == F.WRITE_INDEX_FILE_ERROR_BIT | F.DISK_FULL_BIT
    assert repr(flags) == "RunningFlags(WRITE_INDEX_FILE_ERROR|DISK_FULL)"
    flags.get_and_make_disk_ok()
    assert not flags.is_writeable() and not flags.is_cq_writeable()      # the index error still stands


def test_make_writeable_clears_only_not_writeable():
    flags = RunningFlags()
    flags.get_and_make_not_writeable()
    flags.get_and_make_disk_full()
    flags.get_and_make_writeable()
    assert flags.get_flag_bits() == F.DISK_FULL_BIT
    flags.get_and_make_not_readable()
    flags.get_and_make_readable()
    assert flags.is_readable()


def test_make_readable_and_writeable_say_whether_the_store_already_was():
    flags = RunningFlags()
    assert flags.get_and_make_readable() is True                 # it was readable already
    assert flags.get_and_make_writeable() is True
    flags.get_and_make_not_readable()
    flags.get_and_make_not_writeable()
    assert flags.get_and_make_readable() is False
    assert flags.get_and_make_writeable() is False


def test_listeners_run_on_each_change_and_not_on_a_no_op():
    flags = RunningFlags()
    seen: list[int] = []
    flags.add_listener(lambda: seen.append(flags.get_flag_bits()))
    flags.get_and_make_disk_full()
    flags.get_and_make_disk_full()                               # no change: no call
    flags.make_index_file_error()
    flags.get_and_make_disk_ok()
    assert seen == [F.DISK_FULL_BIT, F.DISK_FULL_BIT | F.WRITE_INDEX_FILE_ERROR_BIT, F.WRITE_INDEX_FILE_ERROR_BIT]


def test_a_listener_may_read_the_flags_without_deadlock():
    """Listeners run outside the lock: one that changes the flags itself does not hang."""
    flags = RunningFlags()
    calls = []

    def listener():
        calls.append(flags.is_writeable())
        if len(calls) == 1:
            flags.make_index_file_error()

    flags.add_listener(listener)
    t = threading.Thread(target=flags.get_and_make_disk_full)
    t.start()
    t.join(30)
    assert not t.is_alive()
    assert calls == [False, False]
    assert flags.get_flag_bits() == F.DISK_FULL_BIT | F.WRITE_INDEX_FILE_ERROR_BIT


def test_concurrent_changes_lose_no_bit():
    flags = RunningFlags()
    bits = [F.NOT_WRITEABLE_BIT, F.WRITE_LOGICS_QUEUE_ERROR_BIT, F.WRITE_INDEX_FILE_ERROR_BIT, F.DISK_FULL_BIT]
    makers = [flags.get_and_make_not_writeable, flags.make_logics_queue_error, flags.make_index_file_error,
              flags.get_and_make_disk_full]

    def flip(i):
        for _ in range(2000):
            flags.get_and_make_not_readable()
            flags.get_and_make_readable()
        makers[i]()

    threads = [threading.Thread(target=flip, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert flags.get_flag_bits() & ~F.NOT_READABLE_BIT == sum(bits)
