# cython: language_level=3
"""What a put returns: ``PutMessageResult`` and ``AppendMessageResult`` (docs/format.md §6.5).

``PutMessageResult.is_ok()`` follows RocketMQ: true iff an append happened with status ``PUT_OK``,
whatever the put status says afterwards (a ``FLUSH_DISK_TIMEOUT`` message *is* in the commit log).
The offset message id (docs/format.md §1.8) is formatted only when asked for; a batch's ids are its
messages' ids joined by commas.

Both classes are immutable and thread-safe.
"""

cimport cython
from libc.stdint cimport int32_t, int64_t


from pystore.status import AppendMessageStatus, PutMessageStatus

cdef object _APPEND_OK = AppendMessageStatus.PUT_OK
cdef object _PUT_OK = PutMessageStatus.PUT_OK


def _offset_msg_id(bytes store_host, long long offset):
    return (store_host + offset.to_bytes(8, "big", signed=True)).hex().upper()


@cython.final
@cython.no_gc           # holds only enums, bytes and str: it can never be part of a reference cycle
@cython.freelist(32)
cdef class AppendMessageResult:
    """``status, wrote_offset, wrote_bytes, msg_id, store_timestamp, logics_offset`` (the queue offset),
    ``msg_num``."""

    def __init__(self, status, long long wrote_offset=0, int wrote_bytes=0, msg_id=None,
                 long long store_timestamp=0, long long logics_offset=0, int msg_num=1):
        self.status = AppendMessageStatus(status)
        self.wrote_offset = wrote_offset
        self.wrote_bytes = wrote_bytes
        self._msg_id = msg_id
        self.store_timestamp = store_timestamp
        self.logics_offset = logics_offset
        self.msg_num = msg_num

    @property
    def msg_id(self):
        cdef int64_t off
        if self._msg_id is None and self._store_host is not None:
            if self._batch is None:
                self._msg_id = _offset_msg_id(self._store_host, self.wrote_offset)
            else:
                ids = []
                off = self.wrote_offset
                for size in memoryview(self._batch).cast("i"):      # record sizes taken at put time
                    ids.append(_offset_msg_id(self._store_host, off))
                    off += size
                self._msg_id = ",".join(ids)
        return self._msg_id

    def is_ok(self):
        return self.status is _APPEND_OK

    def __repr__(self):
        return ("AppendMessageResult(status=%s, wrote_offset=%d, wrote_bytes=%d, msg_id=%r, store_timestamp=%d, "
                "logics_offset=%d, msg_num=%d)" % (self.status.name, self.wrote_offset, self.wrote_bytes,
                                                   self.msg_id, self.store_timestamp, self.logics_offset,
                                                   self.msg_num))


@cython.final
@cython.no_gc           # the same, plus its AppendMessageResult: no cycle, so no GC tracking per put
@cython.freelist(64)
cdef class PutMessageResult:
    """``status`` (a ``PutMessageStatus``) and ``append_message_result`` (``None`` when nothing was
    appended)."""

    def __init__(self, status, append_message_result=None):
        self.status = PutMessageStatus(status)
        if append_message_result is not None:
            if not isinstance(append_message_result, AppendMessageResult):
                raise TypeError("append_message_result must be an AppendMessageResult")
            self._amr = append_message_result
            self._appended = True

    @property
    def append_message_result(self):
        cdef AppendMessageResult a
        if self._amr is None and self._appended:
            a = AppendMessageResult.__new__(AppendMessageResult)
            a.status = _APPEND_OK
            a.wrote_offset = self._wrote_offset
            a.wrote_bytes = self._wrote_bytes
            a.store_timestamp = self._store_ts
            a.logics_offset = self._logics_offset
            a.msg_num = self._msg_num
            a._store_host = self._store_host
            a._store_flag = self._store_flag
            a._batch = self._batch
            self._amr = a
        return self._amr

    def is_ok(self):
        if not self._appended:
            return False
        if self._amr is not None:
            return self._amr.status is _APPEND_OK
        return True

    @property
    def reason(self):
        """Why the put did not fully succeed, in words (``None`` for ``PUT_OK``): for a refused message, the
        check it failed (bad topic, body over ``max_message_size``, properties too long, a record larger than a
        commit-log file ...), in the put path's order; otherwise what the status means. The same words as
        ``pystore put`` and the Spark writer give (``pystore.log.refusal``)."""
        if self.status is _PUT_OK:
            return None
        from pystore.log.refusal import refusal_reason_of
        what, config = self._refused if self._refused is not None else (None, None)
        return refusal_reason_of(what, config, self.status)

    def with_status(self, status):
        """The same append with another put status (a flush or replication outcome)."""
        cdef PutMessageResult r = PutMessageResult.__new__(PutMessageResult)
        r.status = PutMessageStatus(status)
        r._amr = self._amr
        r._appended = self._appended
        r._wrote_offset = self._wrote_offset
        r._wrote_bytes = self._wrote_bytes
        r._store_ts = self._store_ts
        r._logics_offset = self._logics_offset
        r._msg_num = self._msg_num
        r._store_host = self._store_host
        r._store_flag = self._store_flag
        r._batch = self._batch
        return r

    @property
    def wrote_offset(self):
        """Shortcut: where the append began (-1 when nothing was appended)."""
        return self._wrote_offset if self._appended else -1

    @property
    def next_offset(self):
        """Commit-log offset just after the appended bytes (what a flush must reach)."""
        return self._wrote_offset + self._wrote_bytes if self._appended else -1

    def __repr__(self):
        return "PutMessageResult(status=%s, append_message_result=%r)" % (self.status.name,
                                                                          self.append_message_result)


cdef PutMessageResult put_failed(object status):
    cdef PutMessageResult r = PutMessageResult.__new__(PutMessageResult)
    r.status = status
    return r


cdef PutMessageResult put_ok(int64_t wrote_offset, int32_t wrote_bytes, int64_t store_ts, int64_t logics_offset,
                             int32_t msg_num, bytes store_host, int32_t store_flag, object batch):
    cdef PutMessageResult r = PutMessageResult.__new__(PutMessageResult)
    r.status = _PUT_OK
    r._appended = True
    r._wrote_offset = wrote_offset
    r._wrote_bytes = wrote_bytes
    r._store_ts = store_ts
    r._logics_offset = logics_offset
    r._msg_num = msg_num
    r._store_host = store_host
    r._store_flag = store_flag
    r._batch = batch
    return r
