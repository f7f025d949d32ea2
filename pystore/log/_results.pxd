# cython: language_level=3
from libc.stdint cimport int32_t, int64_t


cdef class AppendMessageResult:
    cdef readonly object status
    cdef readonly int64_t wrote_offset
    cdef readonly int32_t wrote_bytes
    cdef readonly int64_t store_timestamp
    cdef readonly int64_t logics_offset
    cdef readonly int32_t msg_num
    cdef bytes _store_host
    cdef object _batch
    cdef int32_t _store_flag
    cdef str _msg_id


cdef class PutMessageResult:
    cdef readonly object status
    cdef AppendMessageResult _amr
    # the append's fields, kept inline so a put allocates one object; the AppendMessageResult is made on
    # first access
    cdef bint _appended
    cdef int64_t _wrote_offset
    cdef int32_t _wrote_bytes
    cdef int64_t _store_ts
    cdef int64_t _logics_offset
    cdef int32_t _msg_num
    cdef bytes _store_host
    cdef object _batch
    cdef int32_t _store_flag
    # a refused put: (the message or batch, the store's config), for ``reason``
    cdef public object _refused


cdef PutMessageResult put_failed(object status)
cdef PutMessageResult put_ok(int64_t wrote_offset, int32_t wrote_bytes, int64_t store_ts, int64_t logics_offset,
                             int32_t msg_num, bytes store_host, int32_t store_flag, object batch)
