"""What ``_read`` shares with ``_queue_reader``: the outcome codes, the caps, the result and the one read."""

cimport cython
from libc.stdint cimport int32_t, int64_t

from pystore.read._sink cimport RecordSink
from pystore.queue._units cimport ConsumeQueueCore

# get_message's outcomes, as C codes: the scan's (SCAN_*), then those decided before any scan (GM_*) ...
cdef enum:
    SCAN_FOUND = 0
    SCAN_NO_MATCHED = 1
    SCAN_WAS_REMOVING = 2
    GM_NO_MESSAGE_IN_QUEUE = 3
    GM_OFFSET_TOO_SMALL = 4
    GM_OFFSET_OVERFLOW_ONE = 5
    GM_OFFSET_OVERFLOW_BADLY = 6
    GM_OFFSET_FOUND_NULL = 7


@cython.final
cdef class ReadLimits:
    cdef public int64_t bytes_in_memory
    cdef public int32_t count_in_memory
    cdef public int64_t bytes_in_disk
    cdef public int32_t count_in_disk
    cdef public int64_t memory_window      # commit-log distance from the end still considered in memory
    cdef public bint check_crc             # check_crc_on_read: each served record's body CRC is checked


@cython.final
cdef class GetMessageResult:
    cdef public object status
    cdef public object next_begin_offset
    cdef public object min_offset
    cdef public object max_offset
    cdef public list messages
    cdef public object buffer_total_size
    cdef public bint suggest_pulling_from_slave


cdef tuple STATUSES
cdef GetMessageResult _result(object status, int64_t next_offset, int64_t min_o, int64_t max_o, list msgs,
                              int64_t total, bint suggest)
cdef GetMessageResult _read_queue(ConsumeQueueCore cq, int64_t offset, int64_t max_msg_nums, list cl_files,
                                  int64_t cl_file_size, ReadLimits lim, object tag_codes, object tag_names,
                                  object filt, bint keep_offset, object cl_queue=*, RecordSink sink=*)
