# cython: language_level=3
"""What a put checks of its messages, before the lock and again under it: why a message is refused (``REFUSE_*``,
turned into a status by ``_commitlog.refusal_status``), whether a message still has the size it was checked with
(another thread may change it while the put waits), and whether a batch's messages were built alike (so that
records after the first are copied from it). Declarations only, no module: inlined into the put paths."""
from cpython.object cimport PyObject
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE
from libc.stdint cimport int32_t, int64_t
from libc.string cimport memcmp

from pystore.format._bytes cimport bytes_data, bytes_size
from pystore.format._codec cimport TRANSACTION_NOT_TYPE, TRANSACTION_TYPE_MASK, enters_queue, message_length
from pystore.message._message cimport Message


# why a put refuses (the statuses are PutMessageStatus members: ``_commitlog.refusal_status``)
cdef enum:
    REFUSE_NONE = 0
    REFUSE_ILLEGAL = 1          # MESSAGE_ILLEGAL
    REFUSE_PROPERTIES = 2       # PROPERTIES_SIZE_EXCEEDED
    REFUSE_BUSY = 3             # OS_PAGE_CACHE_BUSY


# A put reserves room for a record before it takes the lock and, under it, may wait (for the lock, for a new
# file) with the GIL released. Another thread that changes the message meanwhile (its body, properties,
# topic) would make the record longer than its room: the put is refused instead (MESSAGE_ILLEGAL).
cdef inline bint unchanged(Message m, int32_t total, str tq_key, bint enters, int32_t store_flag) noexcept:
    return (message_length(m, store_flag) == total and enters_queue(m._sys_flag) == enters
            and (m._tq_key is tq_key or m._tq_key == tq_key))


cdef inline int32_t tail_length(Message m) noexcept:
    """The bytes of ``m``'s record after its body: topic and properties with their lengths."""
    return ((2 if m._version == 2 else 1) + <int32_t>bytes_size(<PyObject *>m._topic_b) + 2
            + <int32_t>bytes_size(<PyObject *>m._props_b))


cdef inline bint same_bytes(PyObject *a, PyObject *b) noexcept:
    return a == b or (bytes_size(a) == bytes_size(b) and memcmp(bytes_data(a), bytes_data(b), bytes_size(a)) == 0)


cdef inline bint built_alike(Message m, Message m0) noexcept:
    """Whether ``m``'s record equals ``m0``'s but for the fields ``encode_like`` patches (both of one batch:
    one topic and queue). Messages built by one line of code share their encoded topic, properties and host."""
    return (m._flag == m0._flag and m._sys_flag == m0._sys_flag and m._reconsume_times == m0._reconsume_times
            and m._prepared_transaction_offset == m0._prepared_transaction_offset and m._version == m0._version
            and same_bytes(<PyObject *>m._topic_b, <PyObject *>m0._topic_b)
            and same_bytes(<PyObject *>m._props_b, <PyObject *>m0._props_b)
            and same_bytes(<PyObject *>m._born_host_b, <PyObject *>m0._born_host_b))


cdef inline int own_refusal(Message m, int64_t max_size) noexcept:
    """Why every put refuses a message, REFUSE_NONE if it may go in: properties and topic legal, body within
    ``max_size``."""
    if m._illegal:
        return REFUSE_PROPERTIES if m._illegal == 2 else REFUSE_ILLEGAL
    if bytes_size(<PyObject *>m._body) > max_size:
        return REFUSE_ILLEGAL
    return REFUSE_NONE


cdef inline int batch_refusal(Message m, str tq_key, int64_t max_size) noexcept:
    """Why a batch refuses this message of it (or its template, for ``from_bodies``), REFUSE_NONE if it may go
    in: ``own_refusal``'s checks, then no delay, not transactional, and the batch's topic and queue (keys of
    one topic and queue are one interned object, so the compare is by identity first)."""
    cdef int code = own_refusal(m, max_size)
    if code != REFUSE_NONE:
        return code
    if (m._delay_level > 0 or (m._sys_flag & TRANSACTION_TYPE_MASK) != TRANSACTION_NOT_TYPE
            or not (m._tq_key is tq_key or m._tq_key == tq_key)):
        return REFUSE_ILLEGAL
    return REFUSE_NONE


cdef inline int32_t crc_of(Message m) noexcept:
    """``m.body_crc()`` without the call when the CRC is known (it always is on the put path: the checks before
    the lock computed it)."""
    return m._body_crc if m._crc_known else m.body_crc()


cdef inline bint batch_unchanged(tuple ms, int32_t *sizes, str tq_key, int64_t max_size, int32_t store_flag) noexcept:
    """Whether every message of the batch still has the size and verdict it was checked with before the lock
    (another thread may change a message while this one waits for the lock)."""
    cdef Py_ssize_t i
    cdef PyObject *mp
    for i in range(PyTuple_GET_SIZE(ms)):
        mp = PyTuple_GET_ITEM(ms, i)
        if message_length(<Message>mp, store_flag) != sizes[i] or batch_refusal(<Message>mp, tq_key, max_size):
            return False
    return True
