# cython: language_level=3
"""What ``_units`` shares with the modules that read and write units (``_read``, ``_timesearch``, ``_dispatch``):
``ConsumeQueueCore`` and the per-unit tests, inlined because the scans run them on every unit."""
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from libc.stdint cimport int32_t, int64_t
from libc.string cimport memcmp

from pystore.format._bytes cimport get_i32, get_i64, load_i32_acquire
from pystore.format._codec cimport CQ_FILLER_SIZE, CQ_STORE_UNIT_SIZE, REC_END, RecordView
from pystore.log cimport _files
from pystore.log._mapped_file cimport MappedFile


cdef class ConsumeQueueCore:
    cdef readonly str topic
    cdef readonly bytes topic_utf8             # the topic as records store it (checked on each read)
    cdef readonly int32_t queue_id
    cdef readonly int64_t file_size
    cdef public object queue                   # MappedFileQueue of this queue's files
    cdef MappedFile last
    cdef public int64_t max_physic_offset      # end of the last unit's record (phy + size)
    cdef public int64_t min_logic_offset       # byte offset of the queue's first valid unit
    cdef public int64_t last_store_ts          # store time of the last message built in
    cdef public object on_error                # called with a message when a unit cannot be written
    cdef bytearray ts_samples                  # (phy i64, store time i64) of units 0, K, 2K ... (_timesearch)
    cdef int64_t pf_lead                       # how far ahead its file is pre-faulted (grows to 1 MiB)
    cdef public int64_t repaired               # units recovery's re-dispatch rewrote (repair_unit)
    # the next file, made ahead by the flush service in the store's ready folder (``offer_ready``); the roll
    # renames it into the queue's folder and publishes it in C (``_take_ready``) under the file list's lock
    cdef readonly MappedFile ready
    cdef bytes ready_from                      # its path in the ready folder
    cdef bytes ready_to                        # its path in the queue's folder
    cdef str ready_name                        # ``ready_to`` as the file's name once taken
    cdef readonly int64_t ready_rolls          # rolls that took the ready file (the others asked Python)

    cdef int put_unit(self, int64_t phy, int32_t size, int64_t tags_code, int64_t cq_offset) except -1
    cdef int put_units(self, int64_t phy, const int32_t *sizes, Py_ssize_t n, int64_t tags_code,
                       int64_t cq_offset) except -1
    cdef MappedFile _file_for(self, int64_t expect)
    cdef MappedFile _take_ready(self, int64_t file_offset)
    cdef int repair_unit(self, int64_t phy, int32_t size, int64_t tags_code, int64_t cq_offset, list cl_files,
                         int64_t cl_file_size) except -1


cdef inline bint unit_valid(const unsigned char *p) noexcept nogil:
    """RocketMQ's recovery rule: ``phyOffset >= 0 && size > 0`` (filler units count as valid)."""
    return get_i64(p) >= 0 and load_i32_acquire(p + 8) > 0


cdef inline bint is_filler(const unsigned char *p) noexcept nogil:
    """The filler unit ``(0, CQ_FILLER_SIZE, 0)`` that pads a queue's first file before its first unit."""
    return get_i32(p + 8) == CQ_FILLER_SIZE and get_i64(p) == 0


cdef inline const unsigned char *unit_ptr(list cq_files, int64_t cq_file_size, int64_t index):
    """The unit of queue offset ``index`` in the queue files ``cq_files``, or NULL when no mapped file holds it."""
    cdef MappedFile f = _files.find_file(cq_files, cq_file_size, index * CQ_STORE_UNIT_SIZE)
    if f is None or f.base == NULL:
        return NULL
    return f.base + (index * CQ_STORE_UNIT_SIZE - f.file_from_offset)


cdef enum:
    DAMAGE_NONE = 0
    DAMAGE_RECORD = 1       # no valid record where the unit points (bad magic, lengths or CRC)
    DAMAGE_MISMATCH = 2     # a valid record, but not the unit's: another size, place, topic, queue or offset


cdef inline int unit_damage(int32_t r, RecordView *v, const unsigned char *rec, int64_t phy, int32_t size,
                            ConsumeQueueCore cq, int64_t queue_offset) noexcept:
    """Is the record at ``rec`` (checked into ``v`` with result ``r``) the one the unit of ``queue_offset``
    names? A swapped or misplaced file, or a unit written over, shows here rather than as a wrong message. The
    read path's test of what it serves, and recovery's of a unit it would rewrite."""
    cdef Py_ssize_t tl
    if r <= 0:
        return DAMAGE_RECORD if r != REC_END or size > 0 else DAMAGE_NONE
    if v.total_size != size or v.phy_offset != phy:
        return DAMAGE_MISMATCH
    if cq is not None:
        tl = PyBytes_GET_SIZE(cq.topic_utf8)
        if (v.queue_id != cq.queue_id or v.queue_offset != queue_offset or v.topic_len != tl
                or memcmp(rec + v.topic_pos, PyBytes_AS_STRING(cq.topic_utf8), tl) != 0):
            return DAMAGE_MISMATCH
    return DAMAGE_NONE
