# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The Spark data source's planning helpers, run on the driver: :func:`split_points` (record boundaries of
a commit-log file, from the record headers, without CRC and without decoding) and :func:`queue_bounds` (a
consume queue's min and max offsets from its files, by binary search). The executors decode what these
plan with ``_arrow``.

Both read read-only mappings and hold no lock: safe on a live store (a record's size is published last, so
a non-zero size means a whole record).
"""

from libc.stdint cimport int32_t, int64_t

from pystore._bytes cimport get_i32, get_i64, load_i32_acquire
from pystore._codec cimport CQ_FILLER_SIZE, CQ_STORE_UNIT_SIZE, REC_END, RecordView, check_record
from pystore._mapped_file cimport MappedFile

cdef int32_t FILLER = CQ_FILLER_SIZE
cdef int32_t UNIT = CQ_STORE_UNIT_SIZE


def split_points(MappedFile mf, long long chunk):
    """Record boundaries of a commit-log file about every ``chunk`` bytes, found by walking record headers
    (no CRC, nothing decoded): ``(starts, data_end, stop_code)``. ``starts`` begins with 0; ``data_end`` is
    where the walk stopped (the blank, the end of written data, or a damaged record: ``stop_code``)."""
    cdef RecordView v
    cdef int32_t r = REC_END
    cdef int64_t pos = 0, last = 0, limit = mf.file_size
    cdef list starts = [0]
    mf.check_mapped()
    if chunk <= 0:
        chunk = limit + 1
    while pos < limit:
        r = check_record(mf.base + pos, limit - pos, False, &v)
        if r <= 0:
            break
        pos += r
        if pos - last >= chunk and pos < limit:
            starts.append(pos)
            last = pos
    if pos >= limit:
        r = REC_END
    if len(starts) > 1 and starts[len(starts) - 1] == pos:
        starts.pop()
    return (starts, pos, r)


def queue_bounds(list cq_paths, long long cl_min):
    """``(min_offset, max_offset)`` of a consume queue from its files (sorted by name): max is the number
    of units ever written, min the first unit whose message is at or above commit-log offset ``cl_min``
    (fillers skipped); ``(0, 0)`` without files. Binary searches; units are written in order. Only the
    last file and the first files up to the min are mapped (Spark polls this for every queue)."""
    cdef MappedFile mf, last = None
    cdef int64_t lo, hi, mid, max_off, min_off, n_units, last_units = 0
    cdef Py_ssize_t k, n = len(cq_paths)
    cdef const unsigned char *p
    while n > 0:                             # the last non-empty file
        last = MappedFile(cq_paths[n - 1], -1, read_only=True)
        if last.file_size >= UNIT:
            break
        last.close()
        last = None
        n -= 1
    if last is None:
        return (0, 0)
    try:
        lo = 0
        hi = last.file_size // UNIT
        while lo < hi:                       # first empty unit of the last file
            mid = (lo + hi) >> 1
            p = last.base + mid * UNIT
            if load_i32_acquire(p + 8) != 0:
                lo = mid + 1
            else:
                hi = mid
        last_units = lo
        max_off = (last.file_from_offset + lo * UNIT) // UNIT
        min_off = max_off
        for k in range(n):
            mf = last if k == n - 1 else MappedFile(cq_paths[k], -1, read_only=True)
            try:
                n_units = mf.file_size // UNIT if k < n - 1 else last_units
                lo = 0
                hi = n_units
                while lo < hi:               # first real unit pointing at or above cl_min
                    mid = (lo + hi) >> 1
                    p = mf.base + mid * UNIT
                    if get_i32(p + 8) != FILLER and get_i32(p + 8) != 0 and get_i64(p) >= cl_min:
                        hi = mid
                    else:
                        lo = mid + 1
                if lo < n_units:
                    min_off = (mf.file_from_offset + lo * UNIT) // UNIT
                    break
            finally:
                if mf is not last:
                    mf.close()
        return (min_off, max_off)
    finally:
        last.close()
