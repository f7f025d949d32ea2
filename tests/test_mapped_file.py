"""MappedFile (docs/format.md §5.1, §5.2; RocketMQ MappedFileTest). The view ``select_mapped_buffer`` returns
(``SelectMappedBufferResult``) is tested in test_mapped_view.py."""

from __future__ import annotations

import os
import time

import pytest
from conftest import MAPPED_FILE_SIZE
from smaps import mapped_ranges, read_ahead_off, requires_visible_advice, resident_pages

from pystore.errors import StoreClosedError, StoreError
from pystore.log._file_names import is_file_name, offset_to_file_name
from pystore.log._mapped_file import OS_PAGE_SIZE, MappedFile
from pystore.log._warm import populate_past_writer, prefault_stats, warm, write_page_by_page

PAGE = OS_PAGE_SIZE
SIZE = MAPPED_FILE_SIZE  # the size of the ``mf`` fixture's file (conftest)


# -- creation --------------------------------------------------------------------------------------


def test_page_size_is_rocketmq_os_page_size():
    assert OS_PAGE_SIZE == 4096


def test_create_makes_a_full_size_allocated_file(tmp_path):
    p = str(tmp_path / "00000000000000032768")
    f = MappedFile(p, SIZE, create=True)
    try:
        st = os.stat(p)
        assert st.st_size == SIZE
        assert st.st_blocks * 512 >= SIZE          # posix_fallocate: blocks reserved, not a sparse file
        assert f.file_size == SIZE
        assert f.file_name == p
        assert f.file_from_offset == 32768         # from the 20-digit name
        assert (f.wrote_position, f.committed_position, f.flushed_position) == (0, 0, 0)
        assert f.read_position == 0
        assert not f.is_full()
        assert not f.read_only
        assert f.available and f.ref_count == 1
        assert f.read_any(0, SIZE) == bytes(SIZE)
    finally:
        f.close()


def test_from_offset_overrides_the_name(tmp_path):
    f = MappedFile(str(tmp_path / "data"), PAGE, create=True, from_offset=123)
    try:
        assert f.file_from_offset == 123
    finally:
        f.close()


def test_missing_file_without_create_raises(path):
    with pytest.raises(FileNotFoundError):
        MappedFile(path, SIZE)
    assert not os.path.exists(path)


def test_empty_existing_file_is_extended_when_creating(path):
    open(path, "wb").close()
    f = MappedFile(path, SIZE, create=True)
    try:
        assert os.path.getsize(path) == SIZE
    finally:
        f.close()


@pytest.mark.parametrize("create", [False, True])
def test_size_mismatch_raises_value_error_and_leaves_the_file(path, create):
    with open(path, "wb") as fh:
        fh.write(b"\x01" * 100)
    with pytest.raises(ValueError, match="100 bytes, expected %d" % SIZE):
        MappedFile(path, SIZE, create=create)
    with open(path, "rb") as fh:
        assert fh.read() == b"\x01" * 100


def test_size_minus_one_maps_the_file_at_its_size(path):
    with open(path, "wb") as fh:
        fh.write(b"\x07" * 300)
    f = MappedFile(path, -1, read_only=True)
    try:
        assert f.file_size == 300
        assert f.read_any(0, 300) == b"\x07" * 300
    finally:
        f.close()


def test_is_file_name():
    """The one test of a data file's name: ``offset_to_file_name``'s 20 ASCII digits, nothing else."""
    assert is_file_name(offset_to_file_name(0)) and is_file_name(offset_to_file_name(2**63 - 1))
    for name in ("0" * 19, "0" * 21, "0" * 19 + "a", "\u00b2" * 20, "\uff10" * 20, "-" + "0" * 19, ""):
        assert not is_file_name(name), name


def test_offset_to_file_name():
    assert offset_to_file_name(0) == "00000000000000000000"
    assert offset_to_file_name(1073741824) == "00000000001073741824"
    assert offset_to_file_name(2**63 - 1) == "09223372036854775807"
    with pytest.raises(ValueError):
        offset_to_file_name(-1)


# -- read-ahead advice (write_page_by_page) --------------------------------------------------------


@requires_visible_advice
def test_a_fresh_random_file_is_mapped_page_by_page_whole(tmp_path):
    p = str(tmp_path / "00000000000000000000")
    f = MappedFile(p, SIZE, create=True, fresh_random=True)
    try:
        assert mapped_ranges(p) == [(0, SIZE, True)]
    finally:
        f.close()


@requires_visible_advice
def test_a_file_is_mapped_with_read_ahead_by_default(mf, path):
    assert mapped_ranges(path) == [(0, SIZE, False)]


@requires_visible_advice
def test_write_page_by_page_turns_read_ahead_off_from_the_page_holding_pos(mf, path):
    write_page_by_page(mf, 3 * PAGE + 100)
    assert mapped_ranges(path) == [(0, 3 * PAGE, False), (3 * PAGE, SIZE, True)]
    # the part before stays as it was; asking again from 0 covers the whole file
    assert not read_ahead_off(path, 3 * PAGE - 1) and read_ahead_off(path, 3 * PAGE)
    write_page_by_page(mf)
    assert mapped_ranges(path) == [(0, SIZE, True)]


@requires_visible_advice
def test_write_page_by_page_at_or_past_the_end_or_read_only_changes_nothing(mf, path):
    write_page_by_page(mf, SIZE)
    write_page_by_page(mf, SIZE + PAGE)
    assert mapped_ranges(path) == [(0, SIZE, False)]
    ro = MappedFile(path, SIZE, read_only=True)
    try:
        write_page_by_page(ro, 0)
        # two mappings of the file now, neither advised
        assert mapped_ranges(path) == [(0, SIZE, False), (0, SIZE, False)]
    finally:
        ro.close()


# -- pre-faulting past the writer (the prefault worker's loop) -------------------------------------------

KIB = 1024
MIB = 1024 * KIB
GAP = 64 * KIB          # the worker starts a piece this far past a writer that has come that close


def populate_supported() -> bool:
    """MADV_POPULATE_WRITE is Linux 5.14+."""
    return os.uname().sysname == "Linux" and tuple(int(x) for x in os.uname().release.split(".")[:2]) >= (5, 14)


needs_populate = pytest.mark.skipif(not populate_supported(), reason="MADV_POPULATE_WRITE needs Linux 5.14+")


@pytest.fixture
def cold(tmp_path):
    """A new 4 MiB file written page by page, none of its pages in memory yet."""
    # the prefault worker may still hold a request of an earlier test's file, now unmapped: were this file
    # mapped where that one was, the request would fault its pages in
    deadline = time.monotonic() + 60
    while prefault_stats()["pending"] and time.monotonic() < deadline:
        time.sleep(0.01)
    p = str(tmp_path / "00000000000000000000")
    f = MappedFile(p, 4 * MIB, create=True, fresh_random=True)
    assert not any(resident_pages(p))
    yield p, f
    f.close()


def resident_bytes(path: str, start: int, end: int) -> int:
    return PAGE * sum(resident_pages(path)[start // PAGE:end // PAGE])


@needs_populate
def test_the_prefault_loop_starts_past_a_writer_inside_its_range(cold):
    p, f = cold
    writer = MIB + 100
    past = (writer + GAP + PAGE - 1) // PAGE * PAGE          # the page boundary after writer + GAP
    assert populate_past_writer(f, 0, 4 * MIB, writer) == (4 * MIB - past, past)
    assert resident_bytes(p, 0, past) == 0                    # left to the writer: not faulted by the loop
    assert resident_bytes(p, past, 4 * MIB) == 4 * MIB - past
    assert f.read_any(0, 4 * MIB) == bytes(4 * MIB)            # populating never changes a byte


@needs_populate
@pytest.mark.parametrize("writer, populated, skipped", [
    (-1, 2 * MIB, 0),                   # no writer: all of it
    (0, 2 * MIB, 0),                    # a writer further back than the gap: all of it
    (MIB - GAP, 2 * MIB, 0),            # just the gap back
    (MIB - GAP + 1, 2 * MIB - PAGE, PAGE),
    (MIB, 2 * MIB - GAP, GAP),          # a writer at the start: from the gap past it
    (2 * MIB, MIB - GAP, MIB + GAP),    # in the middle
    (3 * MIB, 0, 2 * MIB),              # a writer already past the range: none of it
    (4 * MIB - 1, 0, 2 * MIB),
])
def test_the_prefault_loop_by_where_the_writer_is(cold, writer, populated, skipped):
    p, f = cold
    assert populate_past_writer(f, MIB, 3 * MIB, writer) == (populated, skipped)
    assert resident_bytes(p, MIB, 3 * MIB) == populated
    assert resident_bytes(p, 0, MIB) == resident_bytes(p, 3 * MIB, 4 * MIB) == 0


@needs_populate
def test_a_new_file_has_no_writer_published(cold):
    p, f = cold
    assert populate_past_writer(f, 0, MIB) == (MIB, 0)        # writer_at=None: where its writer said it was
    assert resident_bytes(p, 0, MIB) == MIB


@needs_populate
def test_the_prefault_loop_refuses_bad_ranges(cold, path):
    p, f = cold
    for start, end in [(-PAGE, PAGE), (PAGE, 0), (0, 4 * MIB + PAGE), (100, PAGE)]:
        with pytest.raises(ValueError):
            populate_past_writer(f, start, end, -1)
    f.close()
    with pytest.raises(StoreClosedError):
        populate_past_writer(f, 0, PAGE, -1)


def test_write_page_by_page_on_a_closed_file_raises(path):
    f = MappedFile(path, SIZE, create=True)
    f.close()
    with pytest.raises(StoreClosedError):
        write_page_by_page(f, 0)


# -- appending and positions -----------------------------------------------------------------------


def test_append_until_full(mf):
    chunk = bytes(range(100))
    n = SIZE // 100
    for i in range(n):
        assert mf.append_message(chunk) is True
        assert mf.wrote_position == (i + 1) * 100
    assert mf.append_message(chunk) is False           # 100 more do not fit
    assert mf.wrote_position == n * 100
    rest = SIZE - n * 100
    assert mf.append_message(b"\xee" * (rest + 1)) is False
    assert mf.append_message(b"\xee" * rest) is True
    assert mf.is_full()
    assert mf.read_position == SIZE
    assert mf.read(0, SIZE) == chunk * n + b"\xee" * rest
    assert mf.append_message(b"x") is False


def test_append_accepts_any_buffer(mf):
    assert mf.append_message(bytearray(b"ab"))
    assert mf.append_message(memoryview(b"cd"))
    assert mf.read(0, 4) == b"abcd"


def test_appended_bytes_reach_the_file(mf, path):
    mf.append_message(b"persisted")
    mf.flush(0)
    with open(path, "rb") as fh:
        assert fh.read(9) == b"persisted"


def test_read_is_limited_to_the_read_position(mf):
    mf.append_message(b"0123456789")
    assert mf.read(2, 3) == b"234"
    assert mf.read(10, 0) == b""
    with pytest.raises(ValueError):
        mf.read(5, 6)
    with pytest.raises(ValueError):
        mf.read(-1, 1)
    assert mf.read_any(SIZE - 4, 4) == bytes(4)
    with pytest.raises(ValueError):
        mf.read_any(SIZE - 4, 5)


def test_write_at_does_not_move_positions(mf):
    mf.write_at(100, b"abc")
    assert mf.wrote_position == 0
    assert mf.read_any(100, 3) == b"abc"
    mf.write_at(SIZE - 3, b"xyz")
    with pytest.raises(ValueError):
        mf.write_at(SIZE - 2, b"xyz")
    with pytest.raises(ValueError):
        mf.write_at(-1, b"x")


@pytest.mark.parametrize("attr", ["wrote_position", "committed_position", "flushed_position"])
def test_positions_are_read_only(mf, attr):
    """Positions move only through MappedFile's own methods (named for the event), never by assignment."""
    with pytest.raises(AttributeError):
        setattr(mf, attr, 0)


def test_claim_flushed_moves_up_only_and_is_bounded(mf):
    mf.set_positions(2 * PAGE)
    mf.claim_flushed(PAGE)
    assert mf.flushed_position == 2 * PAGE
    mf.set_positions(100)
    mf.claim_flushed(PAGE + 1)
    assert mf.flushed_position == PAGE + 1
    for bad in (-1, SIZE + 1):
        with pytest.raises(ValueError):
            mf.claim_flushed(bad)
    assert mf.flushed_position == PAGE + 1


def test_unflush_from_goes_back_to_the_page_and_never_up(mf):
    mf.set_positions(3 * PAGE)
    mf.unflush_from(PAGE + 100)
    assert mf.flushed_position == PAGE
    mf.unflush_from(2 * PAGE)
    assert mf.flushed_position == PAGE
    mf.unflush_from(0)
    assert (mf.flushed_position, mf.wrote_position) == (0, 3 * PAGE)


def test_set_positions_bounds(mf):
    mf.set_positions(1234)
    assert (mf.wrote_position, mf.committed_position, mf.flushed_position) == (1234, 1234, 1234)
    for bad in (-1, SIZE + 1):
        with pytest.raises(ValueError):
            mf.set_positions(bad)
        assert (mf.wrote_position, mf.committed_position, mf.flushed_position) == (1234, 1234, 1234)
    mf.set_positions(SIZE)
    assert mf.is_full()
    assert mf.max_offset == mf.file_from_offset + SIZE


# -- flushing (docs/format.md §5.1 isAbleToFlush) -------------------------------------------------------


@pytest.mark.parametrize(
    "flushed, wrote, least_pages, able",
    [
        (0, 0, 0, False),
        (0, 1, 0, True),
        (100, 100, 0, False),
        (0, PAGE - 1, 1, False),           # not one whole page yet
        (0, PAGE, 1, True),
        (PAGE - 1, PAGE, 1, True),          # page numbers, not bytes: 1 - 0 >= 1
        (PAGE, 2 * PAGE - 1, 1, False),
        (4000, 2 * PAGE + 100, 2, True),    # 2 - 0 >= 2
        (4000, 2 * PAGE + 100, 3, False),
        (0, 3 * PAGE + 100, 4, False),
        (0, 4 * PAGE, 4, True),
        (0, SIZE, 100, True),               # a full file is always able when anything is unflushed
        (SIZE, SIZE, 0, False),
        (SIZE - 1, SIZE, 100, True),
    ],
)
def test_is_able_to_flush(mf, flushed, wrote, least_pages, able):
    mf.set_positions(flushed)
    mf.append_message(bytes(wrote - flushed))
    assert mf.is_able_to_flush(least_pages) is able


def test_flush_of_a_file_being_shut_down_does_not_claim_unsynced_bytes(mf):
    """A file that can no longer be held (shut down for deletion or close) is not synced, and its flushed
    position stays where the last sync left it. RocketMQ moves it to the read position anyway, and the
    checkpoint written after would claim bytes no sync made durable (lost by a power cut)."""
    mf.append_message(b"a" * 100)
    assert mf.flush(0) == 100
    mf.append_message(b"b" * 100)
    mf.shutdown(0, now=0)
    assert mf.flush(0) == 100 and mf.flushed_position == 100


def test_flush_least_pages(mf):
    mf.append_message(b"a" * (3 * PAGE + 100))
    assert mf.flush(4) == 0                          # three dirty pages: not enough
    assert mf.flushed_position == 0
    assert mf.flush(3) == 3 * PAGE + 100
    assert mf.flushed_position == 3 * PAGE + 100
    mf.append_message(b"b" * (4 * PAGE - 101))       # up to 7 * PAGE - 1: 6 - 3 = 3 pages
    assert mf.flush(4) == 3 * PAGE + 100
    assert mf.flush(3) == 7 * PAGE - 1
    assert mf.flush(0) == 7 * PAGE - 1               # nothing new: unchanged
    mf.append_message(b"c")                          # 7 * PAGE: one more page boundary
    assert mf.flush(2) == 7 * PAGE - 1
    assert mf.flush(0) == 7 * PAGE
    mf.append_message(b"d" * PAGE)                   # full
    assert mf.is_full()
    assert mf.flush(1000) == SIZE


def _mapping_start(path: str) -> int:
    """The address this process maps ``path`` at (from /proc/self/maps)."""
    real = os.path.realpath(path)
    with open("/proc/self/maps") as f:
        for line in f:
            if line.rstrip("\n").endswith(" " + real):
                return int(line.split("-", 1)[0], 16)
    raise AssertionError("%s is not mapped" % path)


def _pagemap(addr: int) -> int:
    with open("/proc/self/pagemap", "rb") as f:
        f.seek(addr // PAGE * 8)
        return int.from_bytes(f.read(8), "little")


def _mapped(start: int, pages: int) -> list[bool]:
    """Which of ``pages`` pages from ``start`` have a page-table entry in this process (pagemap bit 63)."""
    return [bool(_pagemap(start + i * PAGE) >> 63) for i in range(pages)]


KPF_DIRTY = 1 << 4


def _page_dirty(addr: int) -> bool:
    """Whether the page cache page mapped at ``addr`` is dirty (/proc/kpageflags; needs CAP_SYS_ADMIN)."""
    entry = _pagemap(addr)
    pfn = entry & ((1 << 55) - 1)
    if not entry >> 63 or pfn == 0:
        pytest.skip("pagemap shows no frame numbers here (needs CAP_SYS_ADMIN)")
    try:
        with open("/proc/kpageflags", "rb") as f:
            f.seek(pfn * 8)
            return bool(int.from_bytes(f.read(8), "little") & KPF_DIRTY)
    except OSError:
        pytest.skip("/proc/kpageflags is not readable here")


@pytest.mark.skipif(not os.path.exists("/proc/self/pagemap"), reason="Linux /proc/self/pagemap")
def test_flush_unmaps_the_whole_pages_it_writes_back(mf, path):
    # the flush drops this process's page-table entries for whole written pages before msync (no per-page
    # TLB shootdown on the writer's core): their bytes stay in the file and the mapping, the last page stays
    data = bytes(range(256)) * (3 * PAGE // 256) + b"tail" * 100          # three pages and 400 bytes
    mf.append_message(data)
    start = _mapping_start(path)
    assert _mapped(start, 4) == [True, True, True, True]                   # the writes mapped them
    assert mf.flush(0) == len(data)
    assert _mapped(start, 4) == [False, False, False, True]               # the page holding the end stays
    assert mf.read(0, len(data)) == data                                   # maps them again, same bytes
    with open(path, "rb") as f:
        assert f.read(len(data)) == data
    mf.append_message(b"more")                                             # the writer goes on in that page
    assert mf.flush(0) == len(data) + 4
    assert _mapped(start, 4)[3]
    assert mf.read(len(data), 4) == b"more"


@pytest.mark.skipif(not os.path.exists("/proc/kpageflags"), reason="Linux /proc/kpageflags")
def test_flush_writes_back_the_pages_it_unmapped(mf, path, tmp_path):
    # the pages left the page tables dirty; the msync after must still write them out: once flushed, the page
    # cache holds them clean (a flush that skipped unmapped pages would leave them dirty)
    import mmap

    control = str(tmp_path / "control")                                    # what this file system does
    with open(control, "wb") as f:
        f.truncate(PAGE)
    with open(control, "r+b") as f, mmap.mmap(f.fileno(), PAGE) as m:
        m[0:5] = b"dirty"
        if not _page_dirty(_mapping_start(control)):
            pytest.skip("pages written through a mapping are not reported dirty here")
        m.flush()
        if _page_dirty(_mapping_start(control)):
            pytest.skip("this file system keeps synced pages dirty (tmpfs)")
    data = b"x" * (2 * PAGE) + b"y" * 10
    mf.append_message(data)
    start = _mapping_start(path)
    assert _page_dirty(start) and _page_dirty(start + PAGE)
    assert mf.flush(0) == len(data)
    assert mf.read(0, len(data)) == data                                   # map them again to look
    assert not _page_dirty(start) and not _page_dirty(start + PAGE)


def test_flush_returns_flushed_position_without_work(mf):
    assert mf.flush(0) == 0
    assert mf.flush(4) == 0


# -- the reference count -------------------------------------------------------------------------


def test_hold_release_and_shutdown_counts(mf, fake_clock):
    assert mf.hold() and mf.hold()
    assert mf.ref_count == 3
    mf.release()
    t0 = fake_clock()
    mf.shutdown(1000, now=t0)
    assert not mf.available and mf.ref_count == 1 and not mf.is_cleanup_over()
    mf.shutdown(1000, now=t0 + 999)                   # not yet forcible
    assert mf.ref_count == 1 and not mf.is_cleanup_over()
    assert mf.destroy(1000, now=t0 + 999) is False
    assert os.path.exists(mf.file_name)
    mf.shutdown(1000, now=t0 + 1000)                  # forced
    assert mf.is_cleanup_over()
    assert mf.destroy(1000, now=t0 + 1000) is True
    assert not os.path.exists(mf.file_name)


def test_destroy_waits_for_readers_then_deletes(mf, fake_clock):
    mf.append_message(b"x" * 10)
    r = mf.select_mapped_buffer(0)
    t0 = fake_clock()
    assert mf.destroy(60_000, now=t0) is False
    assert os.path.exists(mf.file_name)
    assert mf.destroy(60_000, now=t0 + 59_999) is False
    r.release()
    assert mf.destroy(60_000, now=t0 + 60_000) is True
    assert not os.path.exists(mf.file_name)


# -- use after close (py-lmdb crash_test style) ----------------------------------------------------


RAISING_AFTER_CLOSE = [
    ("read", lambda f: f.read(0, 1)),
    ("read_any", lambda f: f.read_any(0, 1)),
    ("append_message", lambda f: f.append_message(b"x")),
    ("write_at", lambda f: f.write_at(0, b"x")),
    ("zero_from", lambda f: f.zero_from(0)),
    ("warm", warm),
]


@pytest.mark.parametrize("method, call", RAISING_AFTER_CLOSE, ids=[m for m, _ in RAISING_AFTER_CLOSE])
@pytest.mark.parametrize("how", ["close", "destroy", "forced_destroy"])
def test_use_after_close_raises(path, method, call, how):
    f = MappedFile(path, SIZE, create=True)
    f.append_message(b"abc")
    if how == "close":
        f.close()
    elif how == "destroy":
        assert f.destroy(0, now=0)
    else:
        held = f.select_mapped_buffer(0)
        f.destroy(0, now=0)
        assert f.destroy(0, now=0)
        held.release()
    with pytest.raises(StoreClosedError) as ei:
        call(f)
    assert isinstance(ei.value, StoreError)


def test_closed_file_refuses_references(path):
    f = MappedFile(path, SIZE, create=True)
    f.append_message(b"abc")
    f.close()
    assert f.hold() is False
    assert f.select_mapped_buffer(0) is None
    assert f.select_mapped_buffer(0, 1) is None
    assert not f.available
    assert f.is_cleanup_over()
    # a flush that cannot hold the file never touches memory, and (unlike RocketMQ, which records the read
    # position) claims nothing it did not sync
    assert f.flush(0) == 0
    assert f.commit(0) == 3
    assert os.path.exists(path)                       # close keeps the file
    f.close()                                         # idempotent
    assert os.path.getsize(path) == SIZE


# -- read-only mappings ----------------------------------------------------------------------------


def test_read_only_mapping_refuses_writes(path):
    w = MappedFile(path, SIZE, create=True)
    w.append_message(b"original")
    w.flush(0)
    w.close()
    f = MappedFile(path, SIZE, read_only=True)
    try:
        assert f.read_only
        f.set_positions(8)
        assert f.read(0, 8) == b"original"
        with pytest.raises(StoreError):
            f.append_message(b"x")
        with pytest.raises(StoreError):
            f.write_at(0, b"X")
        f.zero_from(0)                                # a no-op on a read-only mapping
        warm(f)
        assert f.read(0, 8) == b"original"
        assert f.wrote_position == 8
        with f.select_mapped_buffer(0) as r:
            assert r.buffer.readonly
            assert bytes(r.buffer) == b"original"
    finally:
        f.close()
    with open(path, "rb") as fh:
        assert fh.read(8) == b"original"


def test_read_only_open_of_a_missing_file_raises(path):
    with pytest.raises(FileNotFoundError):
        MappedFile(path, SIZE, read_only=True)
    assert not os.path.exists(path)


# -- zero_from -------------------------------------------------------------------------------------


def test_zero_from(mf, path):
    mf.append_message(b"\xff" * SIZE)
    mf.zero_from(PAGE + 100)
    assert mf.read_any(0, PAGE + 100) == b"\xff" * (PAGE + 100)
    assert mf.read_any(PAGE + 100, SIZE - PAGE - 100) == bytes(SIZE - PAGE - 100)
    mf.flush(0)
    with open(path, "rb") as fh:
        disk = fh.read()
    assert disk == b"\xff" * (PAGE + 100) + bytes(SIZE - PAGE - 100)
    assert os.path.getsize(path) == SIZE              # the file keeps its size
    mf.zero_from(SIZE)                                # nothing to do
    mf.zero_from(SIZE + 10)
    with pytest.raises(ValueError):
        mf.zero_from(-1)
    assert mf.read_any(0, 4) == b"\xff" * 4


def test_zero_from_unaligned_start(mf):
    mf.append_message(bytes(range(256)) * (SIZE // 256))
    mf.zero_from(77)
    assert mf.read_any(0, 77) == bytes(range(77))
    assert mf.read_any(77, SIZE - 77) == bytes(SIZE - 77)


# -- disk blocks: allocated a window at a time -----------------------------------------------------


def _allocated(path) -> int:
    return os.stat(path).st_blocks * 512


def _data_end(path) -> int:
    """Where the first hole of the file starts (its size if it has none): data written, not blocks only
    allocated (ext4 reports those as a hole)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.lseek(fd, 0, os.SEEK_HOLE)
    finally:
        os.close(fd)


def test_a_file_with_a_window_is_created_with_one_page_allocated(sparse_tmp):
    p = str(sparse_tmp / "00000000000000000000")
    f = MappedFile(p, 256 * PAGE, create=True, window=16 * PAGE)
    try:
        assert os.path.getsize(p) == 256 * PAGE            # full size: recovery and readers rely on it
        assert f.reserved_position == PAGE == _allocated(p)
        assert f.window == 16 * PAGE
    finally:
        f.close()


def test_a_file_smaller_than_a_page_keeps_its_size(tmp_path):
    p = str(tmp_path / "00000000000000000000")
    f = MappedFile(p, 100, create=True, window=16 * PAGE)
    try:
        assert os.path.getsize(p) == 100 and f.reserved_position == 100
        assert f.append_message(b"z" * 100) and f.is_full()
        assert os.path.getsize(p) == 100
    finally:
        f.close()


def test_without_a_window_the_whole_file_is_allocated(sparse_tmp):
    p = str(sparse_tmp / "00000000000000000000")
    f = MappedFile(p, 256 * PAGE, create=True)
    try:
        assert f.window == -1
        assert f.reserved_position == 256 * PAGE <= _allocated(p)
        f.ensure_reserved(PAGE, 2 * PAGE)                   # nothing left to allocate
        assert f.reserved_position == 256 * PAGE
    finally:
        f.close()


def test_ensure_reserved_allocates_from_the_writer_to_the_end_asked(sparse_tmp):
    p = str(sparse_tmp / "00000000000000000000")
    f = MappedFile(p, 256 * PAGE, create=True, window=16 * PAGE)
    try:
        f.ensure_reserved(0, 3 * PAGE + 1)
        assert f.reserved_position == 4 * PAGE == _allocated(p)
        f.ensure_reserved(PAGE, 2 * PAGE)                   # already allocated: nothing changes
        assert f.reserved_position == 4 * PAGE == _allocated(p)
        # a writer that resumes further on (a loaded file) allocates from where it is, not from 0
        f.ensure_reserved(100 * PAGE + 10, 101 * PAGE)
        assert f.reserved_position == 101 * PAGE
        assert _allocated(p) == 5 * PAGE
    finally:
        f.close()


def test_append_message_allocates_what_it_writes(sparse_tmp):
    p = str(sparse_tmp / "00000000000000000000")
    f = MappedFile(p, 256 * PAGE, create=True, window=16 * PAGE)
    try:
        assert f.append_message(b"\x01" * (5 * PAGE + 7))
        assert f.reserved_position == 6 * PAGE
        f.flush(0)
        assert _allocated(p) == 6 * PAGE == _data_end(p)
        assert f.read(5 * PAGE, 7) == b"\x01" * 7
    finally:
        f.close()


def test_warm_allocates_the_whole_file(sparse_tmp):
    p = str(sparse_tmp / "00000000000000000000")
    f = MappedFile(p, 64 * PAGE, create=True, window=4 * PAGE)
    try:
        warm(f)
        assert f.reserved_position == 64 * PAGE <= _allocated(p)
    finally:
        f.close()


def test_zero_from_gives_the_blocks_past_its_page_back(sparse_tmp):
    p = str(sparse_tmp / "00000000000000000000")
    f = MappedFile(p, 64 * PAGE, create=True, window=4 * PAGE)
    try:
        f.append_message(b"\xff" * (64 * PAGE))
        f.flush(0)
        assert _allocated(p) >= 64 * PAGE
        f.zero_from(PAGE + 100)
        assert f.read_any(0, PAGE + 100) == b"\xff" * (PAGE + 100)
        assert f.read_any(PAGE + 100, 63 * PAGE - 100) == bytes(63 * PAGE - 100)
        assert f.reserved_position == 2 * PAGE == _data_end(p)
        assert _allocated(p) == 2 * PAGE
        f.set_positions(PAGE + 100)
        assert f.append_message(b"\x02" * (2 * PAGE))         # allocates again what it writes
        assert f.reserved_position == 4 * PAGE
        assert f.read(PAGE + 100, 2 * PAGE) == b"\x02" * (2 * PAGE)
    finally:
        f.close()
