# cython: language_level=3
"""``MessageBatch``: several messages of one topic and queue, put as one RocketMQ batch (consecutive queue
offsets, one lock hold, one commit-log file). A batch holds ``Message`` objects, or (``from_bodies``) bodies
that share one frozen template ``Message``: the put encodes each record straight from its body, so appending
many payloads one holds as ``bytes`` makes no ``Message`` per body.
"""

cimport cython
from cpython.bytes cimport PyBytes_CheckExact
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.object cimport PyObject
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_New, PyTuple_SET_ITEM
from libc.stdint cimport INT32_MAX, INT32_MIN, int32_t, int64_t

cdef extern from *:
    """
    /* Ask for the first lines of a bytes object (its header, which the batch's tuple writes when it takes a
       reference, and up to 192 bytes of its data, which the put's copy reads): bodies a caller built long ago
       are not in the cache, and fetched one after another each costs a full memory latency. */
    static inline void ps_prefetch_object(const void *o) {
        const char *p = (const char *)o;
        __builtin_prefetch(p, 1, 3);
        __builtin_prefetch(p + 64, 0, 3);
        __builtin_prefetch(p + 128, 0, 3);
        __builtin_prefetch(p + 192, 0, 3);
    }
    """
    void prefetch_object "ps_prefetch_object"(const void *o) noexcept nogil

from pystore.format._args cimport int_arg
from pystore.format._bytes cimport now_ms
from pystore.message._message cimport Message, as_body


_DEFAULT_BORN_HOST = ("127.0.0.1", 0)
cdef Message _last_plain = None


cdef Message _plain_template(str topic, int queue_id):
    """The template of ``from_bodies(topic, bodies, queue_id=...)`` with nothing else given: the last one built
    for this topic and queue (a full ``Message`` is ~0.2 us, a fixed cost of every batch). Batches share it:
    templates never leave their batch, nothing changes them, and a batch keeps its own born time."""
    global _last_plain
    cdef Message last = _last_plain
    if last is None or last._queue_id != queue_id or not (last._topic is topic or last._topic == topic):
        last = Message(topic, b"", None, None, 0, None, queue_id, 0, True, None, _DEFAULT_BORN_HOST)
        last._frozen = True
        _last_plain = last
    return last


cdef tuple _bytes_tuple(list bodies):
    """``tuple(bodies)`` and the check that every item is ``bytes`` in one walk over the bodies (the common call:
    a list of bytes); None when one is not (the caller converts them). The bodies are all asked for first, so
    that their misses overlap: a list a caller built long ago is not in the cache."""
    cdef Py_ssize_t i, n = PyList_GET_SIZE(bodies)
    cdef tuple t = PyTuple_New(n)
    cdef PyObject *b
    for i in range(n):
        prefetch_object(<const void *>PyList_GET_ITEM(bodies, i))
    for i in range(n):
        b = PyList_GET_ITEM(bodies, i)
        if not PyBytes_CheckExact(<object>b):
            return None         # the items set so far are released with the tuple; the rest are NULL
        Py_INCREF(<object>b)
        PyTuple_SET_ITEM(t, i, <object>b)
    return t


@cython.final
@cython.freelist(8)       # one per from_bodies: reuse the memory of the last ones dropped
cdef class MessageBatch:
    """Several messages of one topic and queue, stored as one RocketMQ batch: consecutive queue offsets,
    one lock hold, never split across two commit-log files. Inner messages keep their own born host,
    born time, flag and reconsume times."""

    def __init__(self, messages):
        cdef list ms = list(messages)
        if not ms:
            raise ValueError("a MessageBatch needs at least one message")
        for m in ms:
            if not isinstance(m, Message):
                raise TypeError("a MessageBatch holds Message objects, got %s" % type(m).__name__)
        first = <Message>ms[0]
        for m in ms:
            if (<Message>m)._topic != first._topic:
                raise ValueError("all messages of a batch must have one topic (%r != %r)"
                                 % ((<Message>m)._topic, first._topic))
            if (<Message>m)._queue_id != first._queue_id:
                raise ValueError("all messages of a batch must have one queue id (%d != %d)"
                                 % ((<Message>m)._queue_id, first._queue_id))
        self._messages = tuple(ms)
        self._topic = first._topic
        self._queue_id = first._queue_id
        self._tq_key = first._tq_key

    @staticmethod
    def from_bodies(topic, bodies, tags=None, keys=None, flag=0, properties=None, queue_id=0,
                    born_timestamp=None, born_host=_DEFAULT_BORN_HOST):
        """A batch of ``bodies`` (bytes or buffers) that share everything else: topic, queue, tags, keys,
        flag, properties, born time and host, as ``Message`` takes them. Stored exactly as the same batch of
        ``Message`` objects would be, but no ``Message`` is made per body: the put encodes each record
        straight from its body (the way to append many payloads one holds as ``bytes``)."""
        cdef Message t
        cdef int64_t born
        if (tags is None and keys is None and type(flag) is int and flag == 0 and properties is None
                and born_timestamp is None and born_host is _DEFAULT_BORN_HOST and type(topic) is str):
            t = _plain_template(<str>topic, <int32_t>int_arg(queue_id, "queue_id", INT32_MIN, INT32_MAX))
            born = now_ms()
        else:
            # positional: Cython parses them without a keyword dict
            t = Message(topic, b"", tags, keys, flag, properties, queue_id, 0, True, born_timestamp, born_host)
            t._frozen = True
            born = t._born_timestamp
        cdef tuple bs = None
        cdef Py_ssize_t i
        cdef MessageBatch batch
        if type(bodies) is list:
            bs = _bytes_tuple(<list>bodies)
        if bs is None:
            # a tuple: the put reads the bodies through borrowed references, some without the GIL
            bs = tuple(bodies)
            for i in range(len(bs)):
                if type(<object>PyTuple_GET_ITEM(bs, i)) is not bytes:
                    bs = tuple([as_body(b) for b in bs])
                    break
        if not bs:
            raise ValueError("a MessageBatch needs at least one message")
        batch = MessageBatch.__new__(MessageBatch)
        batch._bodies = bs
        batch._template = t
        batch._born_ts = born
        batch._topic = t._topic
        batch._queue_id = t._queue_id
        batch._tq_key = t._tq_key
        return batch

    cdef list _materialize(self):
        """The batch's messages (made from the template and bodies for a batch built from bodies)."""
        cdef Message t = self._template
        if self._bodies is None:
            return list(self._messages)
        return [Message(t._topic, b, flag=t._flag, properties=t._props, queue_id=t._queue_id,
                        born_timestamp=self._born_ts, born_host=t._born_host) for b in self._bodies]

    @property
    def messages(self):
        return list(self._materialize())

    @property
    def wait_store_msg_ok(self):
        """The batch's (its first message's): RocketMQ waits for a batch unless that says ``WAIT=false``."""
        return (self._template if self._bodies is not None else <Message>self._messages[0]).wait_store_msg_ok

    @property
    def topic(self):
        return self._topic

    @property
    def queue_id(self):
        return self._queue_id

    def __len__(self):
        return len(self._messages if self._bodies is None else self._bodies)

    def __iter__(self):
        return iter(self._materialize())

    def __reduce__(self):
        return (MessageBatch, (self._materialize(),))

    def __repr__(self):
        return "MessageBatch(topic=%r, queue_id=%d, %d messages)" % (self._topic, self._queue_id, len(self))
