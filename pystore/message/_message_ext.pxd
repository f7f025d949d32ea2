# cython: language_level=3
from libc.stdint cimport int32_t

from pystore.format._record cimport RecordView


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
