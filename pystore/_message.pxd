# cython: language_level=3
from libc.stdint cimport int32_t, int64_t


cdef int64_t java_hash_utf8(const unsigned char *p, Py_ssize_t n) noexcept nogil
cdef int32_t java_hash_str(str s) except? -1
cdef bytes encode_host(object host, bint *is_v6)
cdef tuple decode_host(const unsigned char *p, int n)


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
    cdef bint _has_keys               # KEYS or UNIQ_KEY present: the index wants it
    cdef bint _frozen                 # a from_bodies template: every setter refuses

    cdef int _refresh(self) except -1
    cdef int _mutable(self) except -1
    cdef int _set_body(self, object body) except -1
    cdef dict _build_props(self, tags, keys, int delay_level, bint wait, properties)
    cdef int32_t body_crc(self) noexcept


cdef class MessageBatch:
    cdef list _messages               # the messages; None for a batch built from bodies
    cdef tuple _bodies                # from_bodies: the bodies (bytes; a tuple, so nothing can swap one while a
                                      # put reads it), sharing everything else ...
    cdef Message _template            # ... with this message (its own body empty; shared, never changed) ...
    cdef int64_t _born_ts             # ... but for the born time, the batch's own
    cdef str _topic
    cdef int32_t _queue_id
    cdef str _tq_key

    cdef list _materialize(self)


cdef class MessageExt:
    cdef bytes _raw                   # a private copy of the record, or of a run of records it shares
    cdef int32_t _base                # where the record starts in _raw; every _*_pos below is absolute in _raw
    cdef readonly int32_t store_size
    cdef readonly int32_t body_crc
    cdef readonly int32_t queue_id
    cdef readonly int32_t flag
    cdef readonly int64_t queue_offset
    cdef readonly int64_t commit_log_offset
    cdef readonly int32_t sys_flag
    cdef readonly int64_t born_timestamp
    cdef readonly int64_t store_timestamp
    cdef readonly int32_t reconsume_times
    cdef readonly int64_t prepared_transaction_offset
    cdef readonly int32_t magic_code
    cdef int32_t _born_host_pos, _born_host_len, _store_host_pos, _store_host_len
    cdef int32_t _body_pos, _body_len, _topic_pos, _topic_len, _props_pos, _props_len
    cdef object _topic, _body, _properties, _born_host, _store_host

    cdef dict _props(self)
    cdef _detach(self)


cdef Message copy_message(Message src, bint own_properties)
