# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Consume queues searched by store time: ``queue_offset_by_time`` (``get_offset_in_queue_by_time``) and
``pickup_store_timestamp``. A unit holds no time: each probe reads the store time of the record it points at.
Store times never decrease along a queue, so a search is a binary search over its units, first over a sparse
in-memory sample of them (``ConsumeQueueCore.ts_samples``)."""

from cpython.bytearray cimport PyByteArray_AS_STRING
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from libc.stdint cimport INT64_MIN, int32_t, int64_t

from pystore.format._bytes cimport get_i32, get_i64, put_i64
from pystore.format._codec cimport CQ_STORE_UNIT_SIZE, RecordView, check_record
from pystore.log._files cimport files_of, find_file
from pystore.log._mapped_file cimport MappedFile
from pystore.queue._units cimport ConsumeQueueCore, unit_ptr, unit_valid


cdef int64_t _store_ts_at(list files, int64_t file_size, int64_t phy, int32_t size) noexcept:
    """Store time of the record at ``phy``, or INT64_MIN when it is not (or no longer) readable."""
    cdef MappedFile f = find_file(files, file_size, phy)
    cdef RecordView v
    cdef int64_t pos, rp
    if f is None or f.base == NULL or not f.available:
        return INT64_MIN
    pos = phy - f.file_from_offset
    rp = f.read_position()
    if pos < 0 or pos >= rp:
        return INT64_MIN
    if check_record(f.base + pos, rp - pos, False, &v) <= 0:
        return INT64_MIN
    return v.store_ts


def pickup_store_timestamp(list cl_files, long long cl_file_size, long long phy, int size=0):
    """RocketMQ ``pickupStoreTimestamp``: the store time at ``phy``, -1 if it is not readable."""
    cdef int64_t t = _store_ts_at(cl_files, cl_file_size, phy, size)
    return -1 if t == INT64_MIN else t


cdef inline int64_t _by_time_result(int64_t first, int64_t min_index, bint lower) noexcept:
    if lower:
        return first
    return first - 1 if first > min_index else 0


cdef inline bint _matches(int64_t t, int64_t timestamp, bint lower) noexcept:
    return (t >= timestamp) if lower else (t > timestamp)


cdef int64_t _first_matching(list cq_files, int64_t cq_file_size, int64_t lo, int64_t hi, list cl_files,
                             int64_t cl_file_size, int64_t timestamp, bint lower):
    """Binary search: the first unit in ``[lo, hi)`` stored at or after (lower) / after (upper) ``timestamp``,
    or ``hi``. Store times never decrease along a queue; units whose record is gone count as oldest."""
    cdef int64_t mid, t
    cdef const unsigned char *p
    while lo < hi:
        mid = (lo + hi) >> 1
        p = unit_ptr(cq_files, cq_file_size, mid)
        t = INT64_MIN if p == NULL else _store_ts_at(cl_files, cl_file_size, get_i64(p), get_i32(p + 8))
        if _matches(t, timestamp, lower):
            hi = mid
        else:
            lo = mid + 1
    return lo


# Time-search samples: the store time of every SAMPLE_UNITS-th unit, kept per queue, so that a search over
# millions of units binary-searches a small in-memory array first and probes the mapped files (a cache
# and TLB miss per probe in the queue and one in the commit log) only inside one window. A sample holds
# the unit's commit-log offset too: a record deleted since it was taken counts as gone, as a live probe
# would see it. Units never change once written, except when recovery cuts a queue (forget_time_samples).
DEF SAMPLE_SHIFT = 8
DEF SAMPLE_UNITS = 256


cdef int64_t _extend_samples(ConsumeQueueCore cq, list cq_files, int64_t cq_file_size, int64_t upto,
                             int64_t min_index, list cl_files, int64_t cl_file_size):
    """Sample units up to index ``upto`` (inclusive) where readable; returns the number of samples."""
    cdef bytearray buf = cq.ts_samples
    cdef int64_t n, j, unit, ts, phy
    cdef const unsigned char *p
    cdef unsigned char rec[16]
    if buf is None:
        buf = bytearray()
        cq.ts_samples = buf
    n = len(buf) // 16
    j = n
    while (j << SAMPLE_SHIFT) <= upto:
        unit = j << SAMPLE_SHIFT
        p = unit_ptr(cq_files, cq_file_size, unit)
        if p == NULL or not unit_valid(p):
            break
        phy = get_i64(p)
        ts = _store_ts_at(cl_files, cl_file_size, phy, get_i32(p + 8))
        if ts == INT64_MIN and unit >= min_index:
            break                                 # not readable yet (a reader behind the writer): no sample
        put_i64(rec, phy)
        put_i64(rec + 8, ts)
        buf.extend((<char *>rec)[:16])
        j += 1
    return j


cdef inline int64_t _sample_ts(const unsigned char *samples, int64_t j, list cl_files, int64_t cl_file_size):
    cdef int64_t phy = get_i64(samples + j * 16)
    cdef MappedFile f = find_file(cl_files, cl_file_size, phy)
    if f is None or f.base == NULL or not f.available:
        return INT64_MIN
    return get_i64(samples + j * 16 + 8)


def queue_offset_by_time(ConsumeQueueCore cq, list cl_files, long long cl_file_size, long long timestamp,
                         bint lower):
    """``get_offset_in_queue_by_time`` on one consume queue in one call, through the queue's time samples:
    5.x ``getOffsetInQueueByTime``, LOWER = the first offset stored at or after ``timestamp`` (the queue's
    end when none is), UPPER = the last offset stored at or before it (0 when none is); units whose record
    is gone count as older than anything."""
    cdef list files = files_of(cq.queue)
    cdef int64_t cq_size = cq.queue.mapped_file_size
    cdef Py_ssize_t n = PyList_GET_SIZE(files)
    cdef MappedFile last
    cdef int64_t min_o, max_o = 0, js, je, lo_j, hi_j, mid, first, nsamples
    cdef const unsigned char *samples
    if n > 0:
        last = <MappedFile>PyList_GET_ITEM(files, n - 1)
        max_o = (last.file_from_offset + last.read_position()) // CQ_STORE_UNIT_SIZE
    min_o = cq.min_logic_offset // CQ_STORE_UNIT_SIZE
    if max_o <= min_o:
        return 0
    js = (min_o + SAMPLE_UNITS - 1) >> SAMPLE_SHIFT
    je = (max_o - 1) >> SAMPLE_SHIFT
    if je - js < 4:
        first = _first_matching(files, cq_size, min_o, max_o, cl_files, cl_file_size, timestamp, lower)
        return _by_time_result(first, min_o, lower)
    nsamples = _extend_samples(cq, files, cq_size, max_o - 1, min_o, cl_files, cl_file_size)
    if nsamples - 1 < je:
        je = nsamples - 1
    if je < js:
        first = _first_matching(files, cq_size, min_o, max_o, cl_files, cl_file_size, timestamp, lower)
        return _by_time_result(first, min_o, lower)
    samples = <const unsigned char *>PyByteArray_AS_STRING(cq.ts_samples)
    lo_j, hi_j = js, je + 1
    while lo_j < hi_j:
        mid = (lo_j + hi_j) >> 1
        if _matches(_sample_ts(samples, mid, cl_files, cl_file_size), timestamp, lower):
            hi_j = mid
        else:
            lo_j = mid + 1
    # the first matching unit lies after the last non-matching sample and at or before the first matching one
    if lo_j == js:
        first = _first_matching(files, cq_size, min_o, js << SAMPLE_SHIFT, cl_files, cl_file_size, timestamp,
                                lower)
    elif lo_j > je:
        first = _first_matching(files, cq_size, (je << SAMPLE_SHIFT) + 1, max_o, cl_files, cl_file_size,
                                timestamp, lower)
    else:
        first = _first_matching(files, cq_size, ((lo_j - 1) << SAMPLE_SHIFT) + 1, lo_j << SAMPLE_SHIFT, cl_files,
                                cl_file_size, timestamp, lower)
    return _by_time_result(first, min_o, lower)
