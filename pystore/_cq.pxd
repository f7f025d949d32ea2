# cython: language_level=3
from libc.stdint cimport int32_t, int64_t

from pystore._codec cimport CQ_STORE_UNIT_SIZE, RecordView
from pystore._commitlog cimport Dispatcher, QueueCell
from pystore._mapped_file cimport MappedFile
from pystore._message cimport Message

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
    cdef bytearray ts_samples                  # (phy i64, store time i64) of units 0, K, 2K ... (time search)
    cdef int64_t pf_lead                       # how far ahead its file is pre-faulted (grows to 1 MiB)
    cdef public int64_t repaired               # units recovery's re-dispatch rewrote (repair_unit)

    cdef int put_unit(self, int64_t phy, int32_t size, int64_t tags_code, int64_t cq_offset) except -1
    cdef int put_units(self, int64_t phy, const int32_t *sizes, Py_ssize_t n, int64_t tags_code,
                       int64_t cq_offset) except -1
    cdef MappedFile _file_for(self, int64_t expect)
    cdef int repair_unit(self, int64_t phy, int32_t size, int64_t tags_code, int64_t cq_offset, list cl_files,
                         int64_t cl_file_size) except -1


cdef class QueueDispatcher(Dispatcher):
    cdef public object cell_factory            # (topic, queue_id) -> QueueCell with its consume queue
    cdef public object create_queue            # (topic, queue_id) -> ConsumeQueue
    cdef public object index                   # IndexService, or None
    cdef int64_t delay_ms[64]
    cdef int32_t max_level
    cdef public int64_t last_store_ts
    cdef public str schedule_topic
    cdef public object gaps                    # recovery: (topic, queue id) -> where the walk found it behind
    cdef bytes _last_topic
    cdef int32_t _last_qid
    cdef object _last_cell

    cdef int64_t _deliver_time(self, int64_t level, int64_t store_ts) noexcept
    cdef ConsumeQueueCore _queue_of(self, QueueCell cell)
    cdef int _index(self, QueueCell cell, Message msg, int64_t phy_offset, int64_t store_ts) except -1
    cdef QueueCell _cell(self, const unsigned char *rec, RecordView *v)
