# cython: language_level=3
from libc.stdint cimport int32_t, int64_t

cdef enum:
    # a record's properties length is a 2-byte field: the longest properties string a put stores
    # (docs/format.md "pystore's choices": size limits)
    MAX_PROPERTIES_BYTES = 32767


cdef class Message:
    cdef str _topic
    cdef bytes _body
    cdef dict _props                  # stored properties, in stored order
    cdef int32_t _queue_id
    cdef int32_t _flag
    cdef int32_t _sys_flag            # without the host bits, which the encoder derives
    cdef int32_t _reconsume_times
    cdef int64_t _born_timestamp
    cdef int64_t _prepared_transaction_offset
    cdef tuple _born_host
    # what the encoder needs, computed once per change
    cdef bytes _topic_b
    cdef bytes _props_b
    cdef bytes _born_host_b
    cdef str _tq_key
    cdef int32_t _body_crc
    cdef bint _crc_known
    cdef int _illegal                 # 0 ok, 1 MESSAGE_ILLEGAL, 2 PROPERTIES_SIZE_EXCEEDED
    cdef int _version                 # 1 or 2 (topic longer than 127 characters)
    cdef int64_t _tags_code
    cdef int32_t _delay_level
    cdef bint _timer                  # a RocketMQ 5 timer property is set: the put path calls its timer hook
    cdef bint _has_keys               # KEYS or UNIQ_KEY present: the index wants it
    cdef bint _frozen                 # a from_bodies template: every setter refuses

    cdef int _refresh(self) except -1
    cdef int _refresh_with(self, tuple entry) except -1
    cdef int _mutable(self) except -1
    cdef int _set_body(self, object body) except -1
    cdef dict _build_props(self, tags, keys, int delay_level, bint wait, properties)
    cdef int32_t body_crc(self) noexcept


cdef Message copy_message(Message src, bint own_properties)
cdef bytes as_body(object body)
