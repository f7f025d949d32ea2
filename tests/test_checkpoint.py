"""The store folder's small files (``pystore.engine.checkpoint``): the checkpoint's bytes and its trust rule, its
timed writes on the store's clock, the ``abort`` marker and the writer's ``lock``.

The checkpoint is what abnormal recovery starts from, so a wrong byte here means recovery starts too late
(losing nothing only because of the damage guard) or a checkpoint that cannot be trusted is trusted."""

from __future__ import annotations

import logging
import os
import struct
import subprocess
import sys

import pytest
from conftest import FakeClock

from pystore import Message
from pystore.engine.checkpoint import (
    CHECKPOINT_FILE_SIZE,
    AbortFile,
    StoreCheckpoint,
    StoreLock,
    writer_holds_lock,
)
from pystore.errors import StoreLockedError

NOW = 1_700_000_000_000
DAY = 86_400_000


def write_raw(path, *values: int, size: int = CHECKPOINT_FILE_SIZE) -> None:
    data = struct.pack(">%dq" % len(values), *values)
    with open(path, "wb") as f:
        f.write(data + bytes(max(0, size - len(data))))


def test_layout_is_five_big_endian_longs_in_a_4096_byte_file(tmp_path):
    path = str(tmp_path / "checkpoint")
    cp = StoreCheckpoint(path, clock=FakeClock(NOW))
    cp.physic_msg_timestamp = NOW - 10
    cp.logics_msg_timestamp = NOW - 20
    cp.index_msg_timestamp = NOW - 30
    cp.master_flushed_offset = 123456789
    cp.confirm_phy_offset = 987654321
    cp.flush()
    data = open(path, "rb").read()
    assert len(data) == CHECKPOINT_FILE_SIZE
    assert struct.unpack_from(">qqqqq", data) == (NOW - 10, NOW - 20, NOW - 30, 123456789, 987654321)
    assert data[40:] == bytes(CHECKPOINT_FILE_SIZE - 40)


def test_a_file_written_by_another_writer_is_read_back(tmp_path):
    """Fields in RocketMQ's order (physic, logics, index, masterFlushedOffset, confirmPhyOffset)."""
    path = str(tmp_path / "checkpoint")
    write_raw(path, NOW - 1, NOW - 2, NOW - 3, 4, 5)
    cp = StoreCheckpoint(path, read_only=True, clock=FakeClock(NOW))
    assert cp.trusted
    assert (cp.physic_msg_timestamp, cp.logics_msg_timestamp, cp.index_msg_timestamp,
            cp.master_flushed_offset, cp.confirm_phy_offset) == (NOW - 1, NOW - 2, NOW - 3, 4, 5)


def test_a_4_x_checkpoint_of_24_bytes_is_untrusted_not_misread(tmp_path):
    """Shorter than the 40 bytes of the layout: every time reads as 0 (recovery from the first file)."""
    path = str(tmp_path / "checkpoint")
    write_raw(path, NOW - 1, NOW - 2, NOW - 3, size=24)
    cp = StoreCheckpoint(path, read_only=True, clock=FakeClock(NOW))
    assert not cp.trusted
    assert cp.min_timestamp() == 0 and cp.min_timestamp_index() == 0


@pytest.mark.parametrize(
    "values, trusted",
    [
        ((NOW, NOW, NOW, 0, 0), True),
        ((NOW + DAY, NOW, NOW, 0, 0), True),          # a clock a little behind the writer's is allowed a day
        ((NOW + DAY + 1, NOW, NOW, 0, 0), False),      # past that, the time is impossible
        ((NOW, NOW, NOW + DAY + 1, 0, 0), False),
        ((NOW, -1, NOW, 0, 0), False),
        ((NOW, NOW, NOW, -5, 0), False),               # a negative offset too
        ((NOW, NOW, NOW, 0, 2**62), True),             # offsets have no time horizon
    ],
)
def test_impossible_values_make_the_whole_checkpoint_untrusted(tmp_path, values, trusted):
    path = str(tmp_path / "checkpoint")
    write_raw(path, *values)
    cp = StoreCheckpoint(path, read_only=True, clock=FakeClock(NOW))
    assert cp.trusted is trusted
    if not trusted:
        assert (cp.physic_msg_timestamp, cp.logics_msg_timestamp, cp.index_msg_timestamp,
                cp.master_flushed_offset, cp.confirm_phy_offset) == (0, 0, 0, 0, 0)


def test_min_timestamp_is_rocketmqs(tmp_path):
    cp = StoreCheckpoint(str(tmp_path / "checkpoint"), clock=FakeClock(NOW))
    cp.physic_msg_timestamp = NOW
    cp.logics_msg_timestamp = NOW - 500
    cp.index_msg_timestamp = NOW - 10_000
    assert cp.min_timestamp() == NOW - 500 - 3000
    assert cp.min_timestamp_index() == NOW - 10_000
    cp.logics_msg_timestamp = 2999
    assert cp.min_timestamp() == 0                     # never negative


def test_missing_file_reads_as_zeros_and_is_created_by_the_first_write(tmp_path):
    path = str(tmp_path / "checkpoint")
    cp = StoreCheckpoint(path, clock=FakeClock(NOW))
    assert cp.trusted and cp.min_timestamp() == 0
    assert not os.path.exists(path)
    cp.physic_msg_timestamp = NOW
    assert not os.path.exists(path)                    # no auto flush configured: only an explicit write
    cp.flush()
    assert struct.unpack_from(">q", open(path, "rb").read())[0] == NOW


def test_read_only_never_writes(tmp_path):
    path = str(tmp_path / "checkpoint")
    write_raw(path, NOW - 1, NOW - 1, NOW - 1, 0, 0)
    before = open(path, "rb").read()
    cp = StoreCheckpoint(path, read_only=True, auto_flush_ms=1, clock=FakeClock(NOW))
    cp.physic_msg_timestamp = NOW
    cp.flush()
    assert open(path, "rb").read() == before


def test_auto_flush_writes_a_change_once_the_interval_has_passed(tmp_path):
    path = str(tmp_path / "checkpoint")
    clock = FakeClock(NOW)
    cp = StoreCheckpoint(path, auto_flush_ms=1000, clock=clock)
    cp.physic_msg_timestamp = NOW                      # never written before: due at once
    assert struct.unpack_from(">q", open(path, "rb").read())[0] == NOW
    clock.advance(999)
    cp.physic_msg_timestamp = NOW + 1
    assert struct.unpack_from(">q", open(path, "rb").read())[0] == NOW      # not yet due
    clock.advance(1)
    cp.logics_msg_timestamp = cp.logics_msg_timestamp  # an unchanged value still writes the pending change
    assert struct.unpack_from(">q", open(path, "rb").read())[0] == NOW + 1


def test_a_clock_that_went_back_writes_at_once(tmp_path):
    """Waiting for the clock to catch up would leave the file older than the data after a crash."""
    path = str(tmp_path / "checkpoint")
    clock = FakeClock(NOW)
    cp = StoreCheckpoint(path, auto_flush_ms=1000, clock=clock)
    cp.physic_msg_timestamp = NOW
    clock.set(NOW - 60_000)
    cp.physic_msg_timestamp = NOW + 5
    assert struct.unpack_from(">q", open(path, "rb").read())[0] == NOW + 5


def test_a_failed_timed_write_is_logged_not_raised_into_the_setter(tmp_path, caplog):
    """The setters are called by the flush services: a write failure must not kill them."""
    folder = tmp_path / "gone"
    folder.mkdir()
    path = str(folder / "checkpoint")
    cp = StoreCheckpoint(path, auto_flush_ms=1, clock=FakeClock(NOW))
    folder.rmdir()
    with caplog.at_level(logging.ERROR, logger="pystore.engine.checkpoint"):
        cp.physic_msg_timestamp = NOW
    assert "writing the checkpoint" in caplog.text
    with pytest.raises(OSError):
        cp.flush()                                     # an explicit write does raise


def test_abort_marker_holds_the_pid_and_removal_is_idempotent(tmp_path):
    a = AbortFile(str(tmp_path / "abort"))
    assert not a.exists()
    a.create()
    assert a.exists()
    assert open(a.path, "rb").read() == str(os.getpid()).encode()
    a.remove()
    assert not a.exists()
    a.remove()


def test_lock_is_exclusive_within_a_process_and_reusable_after_release(tmp_path):
    path = str(tmp_path / "lock")
    first, second = StoreLock(path), StoreLock(path)
    first.acquire()
    first.acquire()                                    # taking it again is a no-op
    assert first.held and writer_holds_lock(path) is True
    with pytest.raises(StoreLockedError) as ei:
        second.acquire()
    assert ei.value.path == path and not second.held
    first.release()
    assert writer_holds_lock(path) is False
    second.acquire()
    assert second.held
    second.release()


def test_lock_held_by_another_process(tmp_path):
    path = str(tmp_path / "lock")
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import fcntl, os, sys\n"
         "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)\n"
         "fcntl.flock(fd, fcntl.LOCK_EX)\n"
         "print('held', flush=True)\n"
         "sys.stdin.read()\n", path],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        assert writer_holds_lock(path) is True
        with pytest.raises(StoreLockedError):
            StoreLock(path).acquire()
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    lock = StoreLock(path)
    lock.acquire()                                     # the holder's exit released it
    lock.release()


def test_writer_holds_lock_cannot_tell_without_the_file(tmp_path):
    assert writer_holds_lock(str(tmp_path / "nothing")) is None


def test_a_new_store_has_a_durable_checkpoint_before_its_first_put(store_factory):
    """A new store writes its checkpoint (all zeros: nothing flushed yet) when it opens: a crash before the
    first timed write, then a power cut, must not leave an empty file that recovery cannot trust (a log that
    lost an unflushed middle would then be refused instead of cut at the loss)."""
    store = store_factory()
    path = store.config.checkpoint_path()
    with open(path, "rb") as f:
        data = f.read()
    assert len(data) == 4096 and data == bytes(4096)
    reader = StoreCheckpoint(path, read_only=True)
    assert reader.trusted and reader.physic_msg_timestamp == 0


def test_an_existing_store_without_a_checkpoint_is_not_given_a_zero_one(store_factory):
    """A log with data but no checkpoint file (deleted): zeros would claim nothing of that data was flushed,
    so the open writes none; the flush service writes real values when it next flushes."""
    store = store_factory()
    store.put_message(Message("T", b"x"))
    path = store.config.checkpoint_path()
    store.shutdown()
    os.unlink(path)
    store_factory()
    if os.path.exists(path):
        assert StoreCheckpoint(path, read_only=True).physic_msg_timestamp > 0
