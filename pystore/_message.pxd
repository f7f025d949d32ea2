# cython: language_level=3
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int32_t, int64_t, uint32_t

from pystore._record cimport RecordView


cdef inline str utf8_text(const unsigned char *p, Py_ssize_t n):
    """Stored UTF-8 (a record's topic, properties, tags) as a str, read as Java's replacing decoder reads it:
    invalid bytes become U+FFFD, never an exception."""
    return PyUnicode_DecodeUTF8(<const char *>p, n, "replace")


cdef int64_t java_hash_utf8(const unsigned char *p, Py_ssize_t n) noexcept nogil
cdef uint32_t java_hash_utf8_from(uint32_t h, const unsigned char *p, Py_ssize_t n) noexcept nogil
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
    cdef int _refresh_with(self, tuple entry) except -1
    cdef int _mutable(self) except -1
    cdef int _set_body(self, object body) except -1
    cdef dict _build_props(self, tags, keys, int delay_level, bint wait, properties)
    cdef int32_t body_crc(self) noexcept


cdef class MessageBatch:
    cdef tuple _messages              # the messages (a tuple: the put reads them through borrowed references,
                                      # so nothing may swap one); None for a batch built from bodies
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
    cdef int32_t _base                # where the record starts in _raw; the positions in _v are from there
    cdef RecordView _v                # the record's decoded header (check_record's view of it)
    cdef object _body                 # the body, copied out when the message is made (a member slot: ``body``)
    cdef bint _split                  # _raw holds the record without its body (a big body is copied once)
    cdef object _topic, _properties, _born_host, _store_host   # decoded on first access

    cdef dict _props(self)
    cdef _detach(self)
    cdef int32_t _after_body(self) noexcept


cdef Message copy_message(Message src, bint own_properties)
