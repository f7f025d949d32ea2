# cython: language_level=3
"""What ``_dequeue`` shares: ``SlotWalk``, the compiled dequeue of one timer store (a due slot's units walked, and
their delivery into the commit log in runs)."""
from libc.stdint cimport int32_t, int64_t

from pystore.format._record cimport RecordView
from pystore.log._commitlog cimport CommitLogCore, QueueCell, RecentCells


# One unit of the slot walked: what its delivery needs.
cdef struct DUnit:
    int64_t phy                  # commitLogOffset
    int64_t write_ms             # writeTimeMs (TIMER_ENQUEUE_MS of the delivery)
    int32_t size                 # msgSize
    int32_t magic


# The properties of a timer record as the delivery rewrites them (``_props_pass``): where the values it needs are
# (relative to the properties string; -1 without one) and the length of the string it writes.
cdef struct PropsInfo:
    int32_t topic_pos            # REAL_TOPIC's value
    int32_t topic_len
    int32_t qid_pos              # REAL_QID's value
    int32_t qid_len
    int32_t uniq_pos             # UNIQ_KEY's value
    int32_t uniq_len
    bint out_ms                  # TIMER_OUT_MS is set
    bint enq                     # TIMER_ENQUEUE_MS is set (its value is replaced in place)
    bint deq                     # TIMER_DEQUEUE_MS is set (likewise)


# One delivery of a chunk, worked out before the put lock.
cdef struct Plan:
    Py_ssize_t idx               # the unit's index in the walk
    const unsigned char *rec     # the timer record (in the chunk's held commit-log file)
    RecordView v                 # its checked header
    PropsInfo pi
    int32_t qid                  # REAL_QID
    int32_t sys_flag             # the delivery's sys flag (the host bits the store's)
    int32_t props_len            # the delivery's properties
    int32_t total                # the delivery's record size


cdef class SlotWalk:
    cdef DUnit *units                      # the slot's units, oldest first
    cdef Py_ssize_t n
    cdef Py_ssize_t cap
    cdef Plan *plans                       # one chunk's deliveries
    cdef Py_ssize_t n_plans
    cdef int64_t put_bytes                 # what the last ``_put`` wrote
    cdef readonly int64_t file_size        # the timer log's file size
    cdef readonly int64_t precision_ms
    cdef readonly Py_ssize_t deletes       # delete markers among the units (MAGIC_DELETE without MAGIC_ROLL)
    # the cells of the last topics and queues delivered to (a topic's text and the table's key made once a miss)
    cdef RecentCells cells

    cdef int _grow(self) except -1
    cdef Py_ssize_t _walk(self, const unsigned char **bases, const int64_t *froms, const int64_t *limits,
                          Py_ssize_t nf, int64_t last_pos, int64_t min_offset, int64_t end,
                          int64_t want) noexcept nogil
    cdef Py_ssize_t _plan(self, Py_ssize_t i, Py_ssize_t end, const unsigned char *base, int64_t cl_from,
                          int64_t cl_file_size, int64_t cl_read, bint check_crc, int32_t deq_len,
                          int64_t max_body, int32_t store_flag, int *why) noexcept nogil
    cdef Py_ssize_t _put(self, CommitLogCore cl, const unsigned char *deq, int32_t deq_len,
                         Py_ssize_t first) except -1
