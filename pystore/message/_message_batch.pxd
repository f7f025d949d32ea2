# cython: language_level=3
from libc.stdint cimport int32_t, int64_t

from pystore.message._message cimport Message


cdef class MessageBatch:
    # the messages (a tuple: the put reads them through borrowed references, so nothing may swap one); None
    # for a batch built from bodies
    cdef tuple _messages
    # from_bodies: the bodies (bytes; a tuple, so nothing can swap one while a put reads it), sharing
    # everything else ...
    cdef tuple _bodies
    cdef Message _template            # ... with this message (its own body empty; shared, never changed) ...
    cdef int64_t _born_ts             # ... but for the born time, the batch's own
    cdef str _topic
    cdef int32_t _queue_id
    cdef str _tq_key

    cdef list _materialize(self)
