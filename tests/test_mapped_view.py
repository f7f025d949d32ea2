"""The held view of a mapped file (``pystore.log._mapped_view.SelectMappedBufferResult``; docs/format.md §5.2;
RocketMQ ``SelectMappedBufferResult``, ``MappedFileTest.testSelectMappedBuffer``): what it shows, the hold it
keeps on its file until ``release()``, and exported buffers that outlive the release and the file."""

from __future__ import annotations

import gc
import io
import os

import pytest
from conftest import MAPPED_FILE_SIZE

from pystore.errors import StoreClosedError
from pystore.log._mapped_file import OS_PAGE_SIZE, MappedFile
from pystore.log._mapped_view import SelectMappedBufferResult

PAGE = OS_PAGE_SIZE
SIZE = MAPPED_FILE_SIZE  # the size of the ``mf`` fixture's file (conftest)


def test_select_mapped_buffer_views(mf):
    data = b"hello world, this is a mapped file"
    mf.append_message(data)
    r = mf.select_mapped_buffer(0)
    assert isinstance(r, SelectMappedBufferResult)
    assert r.start_offset == mf.file_from_offset
    assert r.size == len(data)
    assert r.buffer.readonly
    assert bytes(r.buffer) == data
    assert r.tobytes() == data
    assert r.mapped_file is mf
    assert mf.ref_count == 2
    r.release()
    assert mf.ref_count == 1
    r.release()                                      # idempotent
    assert mf.ref_count == 1

    with mf.select_mapped_buffer(6, 5) as part:
        assert part.start_offset == 6
        assert part.size == 5
        assert bytes(part.buffer) == b"world"
        assert mf.ref_count == 2
    assert mf.ref_count == 1

    # RocketMQ's selectMappedBuffer: nothing to read at the write position -> null
    assert mf.select_mapped_buffer(len(data)) is None


def test_select_mapped_buffer_start_offset_is_absolute(tmp_path):
    f = MappedFile(str(tmp_path / "00000000000000065536"), PAGE, create=True)
    try:
        f.append_message(b"0123456789")
        with f.select_mapped_buffer(4) as r:
            assert r.start_offset == 65536 + 4
            assert bytes(r.buffer) == b"456789"
    finally:
        f.close()


@pytest.mark.parametrize("pos, size", [(0, 11), (-1, 2), (5, 6), (11, -1), (20, 0)])
def test_select_mapped_buffer_out_of_range_is_none(mf, pos, size):
    mf.append_message(b"0123456789")
    assert mf.select_mapped_buffer(pos, size) is None
    assert mf.ref_count == 1                          # nothing held


def test_select_mapped_buffer_refuses_writable_views(mf):
    mf.append_message(b"abc")
    with mf.select_mapped_buffer(0) as r:
        with pytest.raises(TypeError):
            r.buffer[0] = 0x41
        with pytest.raises(TypeError):
            io.BytesIO(b"zz").readinto(r)              # asks for a writable buffer
        assert mf.read(0, 3) == b"abc"


def test_select_mapped_buffer_result_is_not_constructible():
    with pytest.raises(TypeError):
        SelectMappedBufferResult()


def test_released_result_refuses_its_buffer(mf):
    mf.append_message(b"abc")
    r = mf.select_mapped_buffer(0)
    r.release()
    with pytest.raises(StoreClosedError):
        r.buffer
    with pytest.raises(StoreClosedError):
        r.tobytes()
    with pytest.raises(StoreClosedError):
        memoryview(r)


def test_rocketmq_select_mapped_buffer_lifecycle(path):
    """RocketMQ MappedFileTest.testSelectMappedBuffer: read back, then the file stays until the last
    reference is released, and destroy succeeds."""
    f = MappedFile(path, SIZE, create=True)
    msg = b"Once, there was a chance for me!"
    assert f.append_message(msg)
    r = f.select_mapped_buffer(0)
    assert bytes(r.buffer) == msg

    f.shutdown(1000, now=0)
    assert not f.available
    assert f.select_mapped_buffer(0) is None
    assert f.hold() is False
    assert f.ref_count == 1                           # the result's reference
    assert not f.is_cleanup_over()
    assert bytes(r.buffer) == msg                     # still readable: it is held

    r.release()
    assert f.is_cleanup_over()
    assert f.destroy(1000, now=0) is True
    assert not os.path.exists(path)


def test_slice_of_a_view_outlives_release_and_destroy(path):
    """A view taken from ``buffer`` pins the mapping: readable after release and after the file is deleted."""
    f = MappedFile(path, SIZE, create=True)
    f.append_message(b"hello world")
    r = f.select_mapped_buffer(0)
    part = r.buffer[6:11]
    r.release()
    assert f.ref_count == 1                           # only the owner now; the view is not a reference
    assert f.destroy(0, now=0) is True
    assert not os.path.exists(path)
    assert bytes(part) == b"world"
    gc.collect()
    assert bytes(part) == b"world"
    part.release()


def test_raw_view_outlives_a_forced_destroy(path):
    f = MappedFile(path, SIZE, create=True)
    f.append_message(b"pinned bytes")
    r = f.select_mapped_buffer(0)
    view = memoryview(r)
    assert f.destroy(0, now=0) is False                      # held by r
    assert f.destroy(0, now=0) is True                       # forced: interval 0 has passed
    assert not os.path.exists(path)
    assert bytes(view) == b"pinned bytes"
    r.release()
    assert bytes(view) == b"pinned bytes"
    assert view.tobytes()[:6] == b"pinned"
    view.release()


def test_buffer_taken_before_a_forced_destroy_stays_readable(path):
    f = MappedFile(path, SIZE, create=True)
    f.append_message(b"abcdef")
    r = f.select_mapped_buffer(0)
    buf = r.buffer
    f.destroy(0, now=0)
    assert f.destroy(0, now=0) is True
    assert bytes(buf) == b"abcdef"
    assert bytes(r.buffer[2:4]) == b"cd"
    r.release()


def test_a_view_dropped_without_release_gives_its_hold_back(mf):
    mf.append_message(b"abc")
    r = mf.select_mapped_buffer(0)
    assert mf.ref_count == 2
    del r
    gc.collect()
    assert mf.ref_count == 1


def test_repr_says_where_and_whether_released(mf):
    mf.append_message(b"abcdef")
    r = mf.select_mapped_buffer(2, 3)
    assert repr(r) == "SelectMappedBufferResult(start_offset=2, size=3)"
    r.release()
    assert repr(r) == "SelectMappedBufferResult(start_offset=2, size=3, released)"
