"""Reading records out of commit-log files (``pystore.log._records``; docs/format.md §1.2): one message by its
offset (``read_message``, ``message_at``), the iterator over a file, the recovery walk and its per-queue tally,
the search for the next valid record, a file's first store time. Damage is ``StoreCorruptedError`` with the
file and the absolute offset; a record that does not name its own place is never served as the message
there."""

from __future__ import annotations

import pytest
from conftest import BORN_BASE, SMALL_FILE, make_message

from pystore.errors import StoreCorruptedError
from pystore.format._codec import RECORD_END, encode_record
from pystore.log._mapped_file import MappedFile
from pystore.log._records import (
    RecordIterator,
    find_valid_record_after,
    first_store_timestamp,
    message_at,
    read_message,
    scan_file,
)

TS = 1_700_000_000_000


def write_log(path: str, n: int, base: int = 0, encoded_base: int | None = None) -> tuple[MappedFile, list[int]]:
    """A commit-log file at ``base`` holding ``n`` records (each encoded for ``encoded_base`` + its position,
    ``base`` unless told); the file and the records' positions in it."""
    encoded_base = base if encoded_base is None else encoded_base
    mf = MappedFile(path, SMALL_FILE, create=True, from_offset=base)
    positions = []
    pos = 0
    for i in range(n):
        rec = encode_record(make_message(i, body=b"body-%d" % i * (1 + i)), i, encoded_base + pos, TS + i)
        assert mf.append_message(rec)
        positions.append(pos)
        pos += len(rec)
    return mf, positions


@pytest.fixture
def log(tmp_path):
    mf, positions = write_log(str(tmp_path / ("%020d" % 0)), 5)
    yield mf, positions
    mf.close()


def test_read_message_at_each_record(log):
    mf, positions = log
    for i, pos in enumerate(positions):
        m = read_message(mf, pos, True, True)
        assert (m.body, m.queue_offset, m.commit_log_offset, m.store_timestamp) == (
            b"body-%d" % i * (1 + i), i, pos, TS + i)
    assert mf.ref_count == 1                                 # each read gave its hold back


def test_read_message_where_no_record_starts_is_none(log):
    mf, positions = log
    for pos in (positions[1] + 1, positions[1] - 4, mf.read_position, mf.read_position + 100, -1):
        assert read_message(mf, pos) is None


def test_a_record_that_names_another_place_is_not_served_strictly(tmp_path):
    mf, positions = write_log(str(tmp_path / ("%020d" % SMALL_FILE)), 2, base=SMALL_FILE, encoded_base=0)
    try:
        assert read_message(mf, positions[1], False, False).commit_log_offset == positions[1]
        assert read_message(mf, positions[1], True, True) is None
        assert message_at([mf], SMALL_FILE, SMALL_FILE + positions[1]) is None
        with pytest.raises(StoreCorruptedError) as e:
            list(RecordIterator(mf, 0, True))
        assert e.value.offset == SMALL_FILE
    finally:
        mf.close()


def test_a_record_whose_crc_fails(log):
    mf, positions = log
    m = read_message(mf, positions[2])
    raw = mf.read(positions[2], m.store_size)
    at = positions[2] + raw.index(m.body)
    mf.write_at(at, bytes([raw[at - positions[2]] ^ 0xFF]))
    assert read_message(mf, positions[2], False, True).body != m.body          # unchecked: served as stored
    assert read_message(mf, positions[2], True, False) is None
    with pytest.raises(StoreCorruptedError) as e:
        read_message(mf, positions[2], True, True)
    assert e.value.offset == positions[2]
    it = RecordIterator(mf, 0, True)
    assert [x.queue_offset for x in (next(it), next(it))] == [0, 1]
    with pytest.raises(StoreCorruptedError) as e:
        next(it)
    assert e.value.offset == positions[2]
    assert mf.ref_count == 1


def test_the_iterator_walks_the_file_and_gives_its_hold_back(log):
    mf, positions = log
    it = RecordIterator(mf, positions[1], True)
    assert mf.ref_count == 2
    assert [m.queue_offset for m in it] == [1, 2, 3, 4]
    assert it.finished and it.stop_reason == RECORD_END and it.position == mf.read_position
    assert mf.ref_count == 1
    it2 = RecordIterator(mf, 0, True)
    next(it2)
    it2.close()
    assert mf.ref_count == 1
    with pytest.raises(StopIteration):
        next(it2)


def test_message_at_finds_the_file_that_holds_the_offset(tmp_path):
    a, pa = write_log(str(tmp_path / ("%020d" % 0)), 3)
    b, pb = write_log(str(tmp_path / ("%020d" % SMALL_FILE)), 3, base=SMALL_FILE)
    try:
        assert message_at([a, b], SMALL_FILE, pa[2]).queue_offset == 2
        assert message_at([a, b], SMALL_FILE, SMALL_FILE + pb[1]).commit_log_offset == SMALL_FILE + pb[1]
        assert message_at([a, b], SMALL_FILE, 2 * SMALL_FILE) is None
        assert message_at([], SMALL_FILE, 0) is None
        with pytest.raises(ValueError):
            message_at([a, b], 0, 0)
    finally:
        a.close()
        b.close()


def test_scan_file_reports_the_valid_end_count_and_last_time(log):
    mf, positions = log
    assert scan_file(mf) == (mf.read_position, RECORD_END, 5, TS + 4)
    end, _reason, count, last = scan_file(mf, positions[1], True, positions[3])
    assert (end, count, last) == (positions[3], 2, TS + 2)
    assert scan_file(mf, SMALL_FILE) == (SMALL_FILE, RECORD_END, 0, -1)


def test_find_valid_record_after(log):
    mf, positions = log
    assert find_valid_record_after(mf, 0) == 0
    assert find_valid_record_after(mf, 1) == positions[1]
    assert find_valid_record_after(mf, positions[4] + 1) == -1
    assert find_valid_record_after(mf, SMALL_FILE) == -1


def test_find_valid_record_after_reads_no_holes(tmp_path):
    """The search past a recovered end looks only where the file system reports data: a record written after
    128 MiB of holes is found, and the holes are not read (reading them puts a zeroed page in memory for every
    4 KiB: seconds and a gigabyte of page cache for a new 1 GiB file at each recovery). What is in memory
    afterwards is the written pages and the kernel's read-around of the one it faulted in (a few MiB)."""
    from smaps import resident_pages

    size = 256 << 20
    path = tmp_path / ("%020d" % 0)
    first = encode_record(make_message(0), 0, 0, TS)
    far_at = (128 << 20) + 100
    far = encode_record(make_message(1), 1, far_at, TS + 1)
    with open(path, "wb") as f:
        f.truncate(size)
        f.write(first)
        f.seek(far_at)
        f.write(far)
    mf = MappedFile(str(path), size, read_only=True, from_offset=0)
    try:
        assert find_valid_record_after(mf, 0) == 0
        assert find_valid_record_after(mf, len(first)) == far_at
        assert find_valid_record_after(mf, far_at + 1) == -1
        assert sum(resident_pages(str(path))) < 8192       # of 65,536
    finally:
        mf.close()


def punch(path: str, off: int, length: int) -> None:
    """Make ``[off, off + length)`` of ``path`` a hole, its bytes zeros (what a sparse copy makes of zero blocks)."""
    import ctypes
    import os

    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDWR)
    try:
        rc = libc.fallocate(fd, 3, ctypes.c_long(off), ctypes.c_long(length))   # KEEP_SIZE | PUNCH_HOLE
        assert rc == 0, os.strerror(ctypes.get_errno())
    finally:
        os.close(fd)


def test_record_spanning_a_hole_is_found(tmp_path):
    """A record whose all-zero body blocks are holes (a sparse copy: `cp --sparse=always`, `rsync -S`; ZFS
    with compression) is whole all the same: the search checks it against the file, not the data extent."""
    size = 1 << 20
    path = str(tmp_path / ("%020d" % 0))
    first = encode_record(make_message(0), 0, 0, TS)
    at = len(first)
    big = encode_record(make_message(1, body=bytes(64 << 10)), 1, at, TS + 1)   # 64 KiB of zeros in its body
    with open(path, "wb") as f:
        f.truncate(size)
        f.write(first)
        f.write(big)
    # what `cp --sparse=always` makes of it: the all-zero blocks inside the body become a hole
    punch(path, 8192, 32 << 10)
    with open(path, "rb") as f:
        assert f.read(at + len(big))[at:] == big          # the bytes are unchanged
    mf = MappedFile(path, size, read_only=True, from_offset=0)
    try:
        assert find_valid_record_after(mf, 1) == at       # the valid record after a damaged first one
    finally:
        mf.close()


def test_record_starting_in_the_last_bytes_of_a_hole_block_is_found(tmp_path):
    """A zeroed region (damage) then a valid record whose TOTALSIZE's leading zero bytes end a block: in a
    sparse copy that block is a hole, and the file's data starts two bytes into the record."""
    size = 1 << 20
    path = str(tmp_path / ("%020d" % 0))
    first = encode_record(make_message(0), 0, 0, TS)
    at = 8192 - 2
    rec = encode_record(make_message(1), 1, at, TS + 1)
    assert rec[:2] == b"\0\0"
    with open(path, "wb") as f:
        f.truncate(size)
        f.write(first)
        f.seek(at)
        f.write(rec)
    punch(path, 4096, 4096)                      # all zeros: what cp --sparse=always leaves as a hole
    with open(path, "rb") as f:
        f.seek(at)
        assert f.read(len(rec)) == rec
    mf = MappedFile(path, size, read_only=True, from_offset=0)
    try:
        assert find_valid_record_after(mf, len(first)) == at
    finally:
        mf.close()


def test_first_store_timestamp(log, tmp_path):
    mf, _ = log
    assert first_store_timestamp(mf) == TS
    empty = MappedFile(str(tmp_path / ("%020d" % SMALL_FILE)), SMALL_FILE, create=True, from_offset=SMALL_FILE)
    try:
        assert first_store_timestamp(empty) == 0
    finally:
        empty.close()


# -- the recovery walk's tally of queues (moved from test_commitlog.py) -------------------------------------


def test_queue_tally_counts_each_queue_its_first_record_and_highest_offset(store_factory):
    """``scan_file(..., tally=)`` notes, per (topic, queue id) that enters a queue, the commit-log offset of
    its first record walked and the highest queue offset; prepared transaction records enter no queue."""
    from pystore.log._records import QueueTally, scan_file
    from pystore.message.constants import SysFlag

    store = store_factory()
    first: dict[tuple[str, int], int] = {}
    for i in range(30):
        key = ("T%d" % (i % 3), i % 2)
        r = store.put_message(make_message(i, topic=key[0], queue_id=key[1]))
        first.setdefault(key, r.append_message_result.wrote_offset)
    store.put_message(make_message(99, topic="Prepared", sys_flag=SysFlag.TRANSACTION_PREPARED_TYPE))
    tally = QueueTally()
    for mf in store._commitlog.queue.files:
        scan_file(mf, 0, True, -1, tally)
    assert not tally.overflow
    table = store.get_topic_queue_table()
    assert tally.queues() == {k: (first[k], table[k] - 1) for k in first}


def test_queue_tally_overflows_rather_than_guess(tmp_path):
    """More queues than the table holds, or a topic longer than a slot: ``overflow`` (recovery then walks
    from the start of its window instead of trusting the tally)."""
    from pystore.format._codec import encode_record
    from pystore.log._mapped_file import MappedFile
    from pystore.log._records import QueueTally, scan_file

    def walk(path, msgs, tally):
        data = b"".join(encode_record(m, 0, 0, BORN_BASE) for m in msgs)
        with open(path, "wb") as f:
            f.write(data + bytes(SMALL_FILE - len(data)))
        mf = MappedFile(str(path), SMALL_FILE, read_only=True, from_offset=0)
        try:
            scan_file(mf, 0, False, -1, tally)
        finally:
            mf.close()

    small = QueueTally(16)
    walk(tmp_path / "a", [make_message(i, queue_id=i) for i in range(13)], small)
    assert small.overflow
    big = QueueTally()
    walk(tmp_path / "b", [make_message(0, topic="t" * 300)], big)
    assert big.overflow
    ok = QueueTally(16)
    walk(tmp_path / "c", [make_message(i, queue_id=i) for i in range(12)], ok)
    assert not ok.overflow and len(ok.queues()) == 12
