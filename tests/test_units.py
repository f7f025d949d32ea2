"""The scans of one consume-queue file (``pystore.queue._units``; docs/format.md §2): units as
``(commit_log_offset, size, tags_code)``, fillers skipped, the end of a queue inside a file, the recovery walk,
the walk bounded by the commit log's end, the ``correctMinOffset`` binary search, and lookups by queue offset.
Files are built here with ``struct`` (``>qiq`` units, the filler ``(0, 0x7FFFFFFF, 0)``). The consume queue
built on these (``ConsumeQueueCore`` under ``consume_queue.ConsumeQueue``): test_consume_queue.py."""

from __future__ import annotations

import struct

import pytest

from pystore.log._mapped_file import MappedFile
from pystore.queue._units import (
          FILLER_SIZE,
          UNIT_SIZE,
          UnitIterator,
          find_file,
          first_unit_at_or_above,
          iter_units,
          next_valid_unit,
          read_unit,
          record_bytes,
          recover_units,
          unit_at,
          units_below,
      )

UNIT = struct.Struct(">qiq")
FILLER = (0, 0x7FFFFFFF, 0)
FILE_UNITS = 10
FILE = FILE_UNITS * 20


def cq_file(tmp_path, base_index: int, units) -> MappedFile:
    """A consume-queue file of ``FILE_UNITS`` units starting at queue offset ``base_index``."""
    path = tmp_path / ("%020d" % (base_index * 20))
    data = b"".join(UNIT.pack(*u) for u in units)
    path.write_bytes(data + bytes(FILE - len(data)))
    return MappedFile(str(path), FILE, read_only=True, from_offset=base_index * 20)


@pytest.fixture
def files(tmp_path):
    made = []

    def make(base_index, units):
        mf = cq_file(tmp_path, base_index, units)
        made.append(mf)
        return mf

    yield make
    for mf in made:
        mf.close()


REAL = [(100 * i, 50 + i, 7 * i - 3) for i in range(4)]


def test_the_layout_constants():
    assert (UNIT_SIZE, FILLER_SIZE) == (20, 0x7FFFFFFF)


def test_read_unit_and_its_bounds(files):
    mf = files(0, REAL)
    assert [read_unit(mf, 20 * i) for i in range(4)] == REAL
    assert read_unit(mf, 80) == (0, 0, 0)                     # an empty unit reads as zeros
    for pos in (-20, FILE - 19, FILE):
        with pytest.raises(ValueError):
            read_unit(mf, pos)


def test_iter_units_skips_fillers_and_marks_an_end_inside_the_file(files):
    mf = files(0, [FILLER, FILLER] + REAL)
    assert list(iter_units(mf)) == REAL + [None]
    it = UnitIterator(mf, 40)
    assert list(it) == REAL and it.ended
    assert list(it) == []                                       # stays ended


def test_a_full_file_has_no_end_mark(files):
    full = [(10 * i, 5, 0) for i in range(FILE_UNITS)]
    mf = files(0, full)
    it = iter_units(mf)
    assert list(it) == full and not it.ended


def test_recover_units_walks_valid_units_and_reports_the_logs_end(files):
    mf = files(0, [FILLER] + REAL + [(-1, 5, 0), (999, 5, 0)])   # a damaged unit, then one after it
    assert recover_units(mf) == (20 * 5, REAL[-1][0] + REAL[-1][1])
    assert recover_units(mf, 20 * 6) == (20 * 7, 999 + 5)
    only_fillers = files(FILE_UNITS, [FILLER, FILLER])
    assert recover_units(only_fillers) == (40, -1)


def test_next_valid_unit(files):
    mf = files(0, [(0, 0, 0), (-5, 3, 0), (40, 3, 0)])
    assert next_valid_unit(mf, 0) == 40
    assert next_valid_unit(mf, 60) == -1


def test_units_below_stops_at_a_record_past_the_logs_end(files):
    mf = files(0, [FILLER] + REAL)
    end_of = [u[0] + u[1] for u in REAL]
    assert units_below(mf, end_of[-1]) == (20 * 5, end_of[-1])
    assert units_below(mf, end_of[1]) == (20 * 3, end_of[1])
    assert units_below(mf, end_of[1] + 1) == (20 * 3, end_of[1])   # the next record starts below but ends past
    assert units_below(mf, 0) == (20, -1)                           # only the filler


def test_first_unit_at_or_above(files):
    mf = files(0, [FILLER, FILLER] + REAL)
    end = 20 * 6
    assert first_unit_at_or_above(mf, 0, end, 0) == 40              # fillers count as below
    assert first_unit_at_or_above(mf, 0, end, 101) == 40 + 2 * 20
    assert first_unit_at_or_above(mf, 0, end, 200) == 40 + 2 * 20
    assert first_unit_at_or_above(mf, 0, end, 301) == end
    assert first_unit_at_or_above(mf, 60, end, 0) == 60


def test_lookups_by_queue_offset_across_files(files):
    a = files(0, [(i, 1, i) for i in range(FILE_UNITS)])
    b = files(FILE_UNITS, [(100 + i, 1, i) for i in range(3)])
    assert unit_at([a, b], FILE, 4) == (4, 1, 4)
    assert unit_at([a, b], FILE, FILE_UNITS + 2) == (102, 1, 2)
    assert unit_at([a, b], FILE, FILE_UNITS + 3) is None            # written up to here
    assert unit_at([a, b], FILE, 5 * FILE_UNITS) is None
    assert find_file([a, b], FILE, FILE + 20) is b and find_file([a, b], FILE, 0) is a
    assert find_file([a, b], FILE, 2 * FILE) is None
    with pytest.raises(ValueError):
        find_file([a, b], 0, 0)


def _sparse_cq_file(tmp_path, size: int, units_at: dict[int, tuple[int, int, int]]) -> MappedFile:
    """A consume-queue file of ``size`` bytes that is a hole except for the units written at the given byte
    positions (each write makes its block data to the file system)."""
    path = tmp_path / ("%020d" % 0)
    with open(path, "wb") as f:
        f.truncate(size)
        for pos, unit in units_at.items():
            f.seek(pos)
            f.write(UNIT.pack(*unit))
    return MappedFile(str(path), size, read_only=True, from_offset=0)


@pytest.mark.parametrize("pos", [0, 20, 4080, 4096 * 37 + 4, 4096 * 100 - 20, 4096 * 150 - 8])
def test_next_valid_unit_finds_a_unit_past_holes(tmp_path, pos):
    """The search skips what the file system reports as holes (reading them would fault a zeroed page in
    for each 4 KiB): a valid unit anywhere after them is still found, also one that starts in the block
    before its data (a unit spanning two blocks: 4096 is not a multiple of 20)."""
    size = 4096 * 150
    pos -= pos % 20                     # units sit at multiples of 20
    mf = _sparse_cq_file(tmp_path, size, {pos: (1234, 56, 7)})
    try:
        assert next_valid_unit(mf, 0) == pos
        assert next_valid_unit(mf, pos) == pos
        assert next_valid_unit(mf, pos + 20) == -1
    finally:
        mf.close()


def test_next_valid_unit_in_a_sparse_file_reports_the_first_of_several(tmp_path):
    size = 4096 * 64
    units = {4096 * 10 + 20 * 3 - 4096 * 10 % 20: (1, 2, 3), 4096 * 40 - 4096 * 40 % 20: (4, 5, 6)}
    first, second = sorted(units)
    mf = _sparse_cq_file(tmp_path, size, units)
    try:
        assert next_valid_unit(mf, 0) == first
        assert next_valid_unit(mf, first + 20) == second
        assert next_valid_unit(mf, second + 20) == -1
        assert mf.next_data_offset(0) <= first and mf.next_data_offset(second + 4096) == -1
    finally:
        mf.close()


def test_next_valid_unit_finds_a_unit_whose_first_bytes_lie_in_a_hole(tmp_path):
    """A unit at 12,280 has its commit-log offset in block 2 and its size and tags code in block 3. With only
    block 3 written, the offset reads 0 from the hole and the unit is valid: the search must start from the
    unit that the data begins inside, not from the first whole unit after it."""
    size = 4096 * 8
    u = 4096 * 3 - 8
    assert u % 20 == 0
    path = tmp_path / ("%020d" % 0)
    with open(path, "wb") as f:
        f.truncate(size)
        f.seek(u + 8)
        f.write(struct.pack(">iq", 56, 7))
    mf = MappedFile(str(path), size, read_only=True, from_offset=0)
    try:
        assert read_unit(mf, u) == (0, 56, 7)
        assert next_valid_unit(mf, 0) == u
    finally:
        mf.close()


def test_record_bytes_counts_the_records_whole_units_point_at_but_fillers():
    """``record_bytes``: the records a run of units points at and their bytes (what sizes a page's buffers),
    fillers (and anything above the bound) left out, a partial unit at the end ignored."""
    units = b"".join(struct.pack(">qiq", phy, size, 0) for phy, size in
                     [(0, 2**31 - 1), (0, 200), (200, 333), (533, 2**30), (2**30 + 533, 2**30 + 1)])
    assert record_bytes(units, 2**30) == (3, 200 + 333 + 2**30)
    assert record_bytes(units, 300) == (1, 200)
    assert record_bytes(units + b"\x00" * 19, 2**30) == (3, 200 + 333 + 2**30)
    assert record_bytes(b"", 2**30) == (0, 0)
    assert record_bytes(units[:19], 2**30) == (0, 0)
