# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The Spark data source's planning helpers, run on the driver: :func:`split_points` (record boundaries of
a commit-log file, from the record headers, without CRC and without decoding), :func:`queue_boundaries` (the
records a consume queue points at below given offsets, by binary search: a big store is cut without walking
all its records), :func:`walk_to` (the first record at or after an offset, from a record before it),
:func:`record_size_at` (whether a record starts there) and :func:`queue_bounds` (a consume queue's min and
max offsets from its files, by binary search). The executors decode what these plan with ``_arrow``.

They read read-only mappings and hold no lock: safe on a live store (a record's size is published last, so
a non-zero size means a whole record).
"""

from libc.stdint cimport INT64_MAX, int32_t, int64_t

from pystore.format._bytes cimport get_i32, get_i64, load_i32_acquire
from pystore.format._codec cimport CQ_FILLER_SIZE, CQ_STORE_UNIT_SIZE, REC_BAD_LENGTH, REC_END, RecordView, check_record
from pystore.log._mapped_file cimport MappedFile

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


cdef int64_t _written_units(MappedFile mf) noexcept:
    """The units a consume-queue file holds: up to its first empty unit (units are written in order, so a
    binary search finds it)."""
    cdef int64_t lo = 0, hi = mf.file_size // UNIT, mid
    while lo < hi:
        mid = (lo + hi) >> 1
        if load_i32_acquire(mf.base + mid * UNIT + 8) != 0:
            lo = mid + 1
        else:
            hi = mid
    return lo


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
        last_units = _written_units(last)
        max_off = (last.file_from_offset + last_units * UNIT) // UNIT
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


def queue_boundaries(list cq_paths, const int64_t[::1] xs, int64_t[::1] below):
    """Record boundaries a consume queue knows of below each commit-log offset of ``xs`` (ascending): the
    largest offset below it at which one of the queue's units points, kept in ``below`` where higher than
    what ``below`` holds (-1: nothing yet). Returns the end of the last unit's record (-1: no unit). Binary
    searches per file (a queue's units are written in commit-log order; fillers lead a queue, empty units
    trail its last file): only where a planner starts walking the records, after checking the record
    there, and each reader checks that its walk lands on the planner's cuts."""
    cdef MappedFile mf
    cdef int64_t lo, hi, mid, x, n_units, phy, end = -1, last = -1
    cdef int32_t size
    cdef const unsigned char *p
    cdef Py_ssize_t k, j = 0, nx = xs.shape[0]
    if below.shape[0] != nx:
        raise ValueError("xs and below differ in length (%d, %d)" % (nx, below.shape[0]))
    for k in range(len(cq_paths)):
        mf = MappedFile(cq_paths[k], -1, read_only=True)
        try:
            n_units = _written_units(mf)
            if n_units == 0:
                continue
            while j < nx:
                x = xs[j]
                lo = 0
                hi = n_units
                while lo < hi:               # the first real unit pointing at or above x
                    mid = (lo + hi) >> 1
                    p = mf.base + mid * UNIT
                    if get_i32(p + 8) != FILLER and get_i64(p) >= x:
                        hi = mid
                    else:
                        lo = mid + 1
                if lo > 0 and get_i32(mf.base + (lo - 1) * UNIT + 8) != FILLER:
                    phy = get_i64(mf.base + (lo - 1) * UNIT)
                    if phy > below[j]:
                        below[j] = phy
                elif lo == 0 and last > below[j]:
                    below[j] = last
                if lo == n_units:
                    break                    # beyond this file: the next file's units
                j += 1
            p = mf.base + (n_units - 1) * UNIT
            size = get_i32(p + 8)
            phy = get_i64(p)
            if size != FILLER and size > 0 and 0 <= phy <= INT64_MAX - size:
                end = phy + size
                last = phy
        finally:
            mf.close()
    while j < nx:                            # past every unit: the last one is below them
        if last > below[j]:
            below[j] = last
        j += 1
    return end


def walk_to(MappedFile mf, long long pos, long long target):
    """From the record boundary ``pos`` of ``mf``, the first record boundary at or after ``target``, by
    walking record headers (no CRC); where the records stop if they stop first (a BLANK, zeros, damage)."""
    cdef RecordView v
    cdef int32_t r
    cdef int64_t limit = mf.file_size
    mf.check_mapped()
    if target > limit:
        target = limit
    while pos < target:
        r = check_record(mf.base + pos, limit - pos, False, &v)
        if r <= 0:
            break
        pos += r
    return pos


def record_size_at(MappedFile mf, long long pos):
    """The size of a whole record at ``pos`` of ``mf`` whose PHYSICALOFFSET field is ``pos`` itself (header
    checked, no CRC), or a result <= 0: no record starts there. The offset field tells a record apart from
    record bytes carried inside another's body (a copied record names where it was first stored)."""
    cdef RecordView v
    cdef int32_t r
    mf.check_mapped()
    if pos < 0 or pos >= mf.file_size:
        return REC_END
    r = check_record(mf.base + pos, mf.file_size - pos, False, &v)
    if r > 0 and v.phy_offset != mf.file_from_offset + pos:
        return REC_BAD_LENGTH
    return r
