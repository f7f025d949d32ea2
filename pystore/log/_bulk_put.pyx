# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The column put (``columns.put_columns``): many bodies of one topic and queue, sharing one template message
(topic, queue, properties, born time and host), stored by one compiled call without a Python object per body.

Input: the bodies as one values buffer (uint8) and ``n + 1`` int64 offsets into it (``put_bodies``), or a
tuple of ``bytes`` read where they are (``put_bytes``); optionally a tags and a keys column of UTF-8 texts
(values, offsets, validity), written as each message's TAGS and KEYS before the template's properties, as
``Message`` orders them. The messages go in *chunks*: one put-lock hold each, at most ``CHUNK_BYTES`` of
records and never past the end of a commit-log file. A chunk follows the put protocol every put shares
(``CommitLogCore._room_refusal`` before the lock, ``_enter`` and ``_exit`` around its hold, ``_finish``
after): under the lock, one clock read (the store time of its records), the queue offset, the file with room
for its first message or batch (END_OF_FILE blank and roll), then as many more as fit and the blocks
reserved; then the records are encoded straight into the mapping with the GIL released
(the first in full, the others copied from it with their own fields patched in, as ``put_messages`` does for
a batch built from bodies), the write position published record by record, and the consume-queue units,
index entries and wake-ups handed to the store's dispatcher as one run (``Dispatcher.dispatch_run``, or
``dispatch_each`` when tags and properties differ from record to record). After the lock: the statistics,
the flush wake-up and pre-fault (``CommitLogCore._after_append``) and the flush/replica waits (``after_put``)
once per chunk.

Placement is that of the same messages put one by one (``batch`` False: a record goes to the next file when
it and the 8-byte blank do not fit) or as RocketMQ batches (``batch`` True: consecutive messages up to the max
message size, and a file less its blank, each batch wholly in one file). The checks are the put path's, in its
order: store not writeable (SERVICE_NOT_AVAILABLE), the properties (the template's: PROPERTIES_SIZE_EXCEEDED /
MESSAGE_ILLEGAL; a message's own too long: PROPERTIES_SIZE_EXCEEDED), a body over the max message size or a
record larger than a file (MESSAGE_ILLEGAL), the page cache busy (OS_PAGE_CACHE_BUSY), no file
(CREATE_MAPPED_FILE_FAILED). A refusal stops the put at that message: nothing after it is stored.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_GET_SIZE
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE
from cpython.object cimport PyObject
from libc.stdint cimport int16_t, int32_t, int64_t, uint32_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy, memset

from pystore.format._bytes cimport body_crc32, mono_coarse_ns, put_i16, store_i32_release
from pystore.format._codec cimport END_FILE_MIN_BLANK_LENGTH, encode_with_body, like_head_body, like_tail, message_length
from pystore.log._commitlog cimport REFUSE_NONE, CommitLogCore, QueueCell, refusal_status
from pystore.format._jstring cimport java_hash_utf8
from pystore.log._mapped_file cimport MappedFile
from pystore.message._message cimport MAX_PROPERTIES_BYTES, Message
from pystore.log._results cimport PutMessageResult, put_ok

cdef extern from "crc32.h":
    uint32_t ps_copy_crc32(unsigned char *dst, const unsigned char *src, size_t n) noexcept nogil
    int ps_crc_force(int level) noexcept nogil

import logging
import os

from pystore.status import PutMessageStatus

log = logging.getLogger(__name__)

cdef object ST_PUT_OK = PutMessageStatus.PUT_OK
cdef object ST_SERVICE_NOT_AVAILABLE = PutMessageStatus.SERVICE_NOT_AVAILABLE
cdef object ST_MESSAGE_ILLEGAL = PutMessageStatus.MESSAGE_ILLEGAL
cdef object ST_PROPERTIES_SIZE_EXCEEDED = PutMessageStatus.PROPERTIES_SIZE_EXCEEDED
cdef object ST_CREATE_MAPPED_FILE_FAILED = PutMessageStatus.CREATE_MAPPED_FILE_FAILED

# A chunk's records: one lock hold, one store time, one dispatch run, one wait. Small enough that another
# putter waits little for the lock and that the pre-fault worker (asked after each chunk) keeps ahead of the
# writer; large enough that the per-chunk work (lock, clock, waits, Python calls) is noise next to the copy.
CHUNK_BYTES = 1 << 20

cdef struct Bodies:
    const unsigned char **ptrs
    int64_t *lens
    int32_t *sizes          # the record size of each body (a body over the max size counts as empty)
    # with a tags or keys column (NULL without): each message's tag and keys (UTF-8, length 0: none), its
    # properties' length and its tags code
    const unsigned char **tag_ptrs
    int32_t *tag_lens
    const unsigned char **key_ptrs
    int32_t *key_lens
    int32_t *props_lens
    int64_t *tags_codes


cdef inline Py_ssize_t _unit_end(const int32_t *sizes, const int64_t *lens, const int32_t *props_lens,
                                 Py_ssize_t i, Py_ssize_t n, bint batch, int64_t cap, int64_t max_body,
                                 int64_t *total) noexcept nogil:
    """The end of the put unit that starts at message ``i`` (a message alone, or the batch ``columns`` makes
    there: consecutive messages whose records add up to at most ``cap``; a body over ``max_body`` goes alone)
    and its bytes in ``total``. A batch holding a message whose properties are too long (``props_lens``, when
    the messages have their own) is refused as a whole and put again message by message, so its units are
    single messages."""
    cdef Py_ssize_t j = i + 1, k
    cdef int64_t t = sizes[i]
    if batch and lens[i] <= max_body:
        while j < n and t + sizes[j] <= cap and lens[j] <= max_body:
            t += sizes[j]
            j += 1
        if props_lens != NULL:
            for k in range(i, j):
                if props_lens[k] > MAX_PROPERTIES_BYTES:
                    j = i + 1
                    t = sizes[i]
                    break
    total[0] = t
    return j


cdef inline int64_t _batch_cap(int64_t max_body, int64_t file_size) noexcept nogil:
    """The most record bytes a batch holds: RocketMQ's cap on a batch (the max message size), and a file less
    the room its END_OF_FILE blank keeps."""
    return min(max_body, file_size - END_FILE_MIN_BLANK_LENGTH)


def batch_ends(const int32_t[::1] sizes not None, const int64_t[::1] lens not None, long long max_message_size,
               long long file_size):
    """The batches a ``batch=True`` column put stores (``_unit_end``'s rule, for the messages' record
    ``sizes`` and body ``lens``), as the list of each batch's end index. ``columns._chunks`` cuts the
    ``MessageBatch``es of the put through ``Message``s by it, so both paths batch alike."""
    cdef Py_ssize_t n = sizes.shape[0], i = 0
    cdef int64_t total
    cdef int64_t cap = _batch_cap(max_message_size, file_size)
    cdef list ends = []
    if lens.shape[0] != n:
        raise ValueError("%d sizes for %d bodies" % (n, lens.shape[0]))
    while i < n:
        i = _unit_end(&sizes[0], &lens[0], NULL, i, n, True, cap, max_message_size, &total)
        ends.append(i)
    return ends


cdef inline unsigned char *_prop(unsigned char *q, const char *name, const unsigned char *v, int32_t n) noexcept nogil:
    """``name \x01 value \x02`` (``name`` 4 ASCII letters and its \x01) at ``q``; returns its end."""
    if n <= 0:
        return q
    memcpy(q, name, 5)
    memcpy(q + 5, v, n)
    q[5 + n] = 2
    return q + n + 6


cdef inline void _tail_each(unsigned char *q, const unsigned char *topic_src, int32_t topic_part,
                            const Bodies *b, Py_ssize_t k, const unsigned char *shared,
                            int32_t shared_len) noexcept nogil:
    """The bytes of record ``k`` after its body when the messages have their own properties: topic (copied
    from ``topic_src``, None when already in place), properties length, TAGS and KEYS from their columns, then
    the properties every message shares (the order ``Message`` stores them in)."""
    if topic_src != NULL:
        memcpy(q, topic_src, topic_part)
    q += topic_part
    put_i16(q, <int16_t>b.props_lens[k])
    q += 2
    if b.tag_lens != NULL:
        q = _prop(q, "TAGS\x01", b.tag_ptrs[k], b.tag_lens[k])
    if b.key_lens != NULL:
        q = _prop(q, "KEYS\x01", b.key_ptrs[k], b.key_lens[k])
    memcpy(q, shared, shared_len)


cdef int _alloc(Bodies *b, Py_ssize_t n) except -1:
    memset(b, 0, sizeof(Bodies))
    b.ptrs = <const unsigned char **>malloc(n * sizeof(void *))
    b.lens = <int64_t *>malloc(n * sizeof(int64_t))
    b.sizes = <int32_t *>malloc(n * sizeof(int32_t))
    if b.ptrs == NULL or b.lens == NULL or b.sizes == NULL:
        _free(b)
        raise MemoryError()
    return 0


cdef void _free(Bodies *b) noexcept:
    free(b.ptrs)
    free(b.lens)
    free(b.sizes)
    free(b.tag_ptrs)
    free(b.tag_lens)
    free(b.key_ptrs)
    free(b.key_lens)
    free(b.props_lens)
    free(b.tags_codes)
    memset(b, 0, sizeof(Bodies))


cdef int _text(object col, Py_ssize_t n, const unsigned char ***ptrs, int32_t **lens, str name) except -1:
    """A tags or keys column, ``(values uint8, offsets int64 (n + 1), valid uint8 or None)`` as UTF-8 text,
    into a pointer and a length per message (0 for a null or empty entry: no such property)."""
    cdef const unsigned char[::1] values = col[0]
    cdef const int64_t[::1] offsets = col[1]
    cdef const unsigned char[::1] valid
    cdef const unsigned char *vals
    cdef Py_ssize_t k
    cdef int64_t ln
    cdef bint has_valid = col[2] is not None
    if has_valid:
        valid = col[2]
        if valid.shape[0] < n:
            raise ValueError("%s: %d validity entries for %d messages" % (name, valid.shape[0], n))
    if offsets.shape[0] != n + 1:
        raise ValueError("%s: %d offsets for %d messages" % (name, offsets.shape[0], n))
    if offsets[0] < 0 or offsets[n] > values.shape[0]:
        raise ValueError("%s: the offsets run outside the values (%d bytes)" % (name, values.shape[0]))
    vals = &values[0] if values.shape[0] > 0 else <const unsigned char *>""
    ptrs[0] = <const unsigned char **>malloc(n * sizeof(void *))
    lens[0] = <int32_t *>malloc(n * sizeof(int32_t))
    if ptrs[0] == NULL or lens[0] == NULL:
        raise MemoryError()
    for k in range(n):
        ln = offsets[k + 1] - offsets[k]
        if ln < 0:
            raise ValueError("%s: the offsets must rise" % name)
        if has_valid and not valid[k]:
            ln = 0
        ptrs[0][k] = vals + offsets[k]
        # a text this long makes the properties too long (a refusal): its length only has to say so
        lens[0][k] = <int32_t>(ln if ln <= MAX_PROPERTIES_BYTES else MAX_PROPERTIES_BYTES + 1)
    return 0


cdef int _texts(Bodies *b, Py_ssize_t n, object tags, object keys, Message tmpl) except -1:
    """The per-message properties of a put with a tags or keys column: texts, lengths, tags codes."""
    cdef Py_ssize_t k
    cdef int64_t pl
    cdef int32_t shared = <int32_t>PyBytes_GET_SIZE(tmpl._props_b)
    if tags is None and keys is None:
        return 0
    if tags is not None:
        _text(tags, n, &b.tag_ptrs, &b.tag_lens, "tags")
    if keys is not None:
        _text(keys, n, &b.key_ptrs, &b.key_lens, "keys")
    b.props_lens = <int32_t *>malloc(n * sizeof(int32_t))
    b.tags_codes = <int64_t *>malloc(n * sizeof(int64_t))
    if b.props_lens == NULL or b.tags_codes == NULL:
        raise MemoryError()
    with nogil:
        for k in range(n):
            pl = shared
            b.tags_codes[k] = tmpl._tags_code
            if b.tag_lens != NULL and b.tag_lens[k] > 0:
                pl += b.tag_lens[k] + 6
                b.tags_codes[k] = java_hash_utf8(b.tag_ptrs[k], b.tag_lens[k])
            if b.key_lens != NULL and b.key_lens[k] > 0:
                pl += b.key_lens[k] + 6
            b.props_lens[k] = <int32_t>(pl if pl <= 2 * MAX_PROPERTIES_BYTES else 2 * MAX_PROPERTIES_BYTES)
    return 0


cdef int _check_out(Py_ssize_t n, int64_t[::1] queue_offsets, int64_t[::1] commit_log_offsets,
                    int64_t[::1] store_timestamps) except -1:
    if queue_offsets.shape[0] < n or commit_log_offsets.shape[0] < n or store_timestamps.shape[0] < n:
        raise ValueError("the output arrays hold fewer than %d entries" % n)
    return 0


def _copy_crc32(unsigned char[::1] dst, Py_ssize_t at, const unsigned char[::1] src, int level=-1):
    """Tests only: copy ``src`` into ``dst`` at ``at`` as the column put copies a body into the mapping, and
    return zlib's crc32 of it (not masked). ``level``: the CRC path to use (0 zlib, 1 PCLMULQDQ, 2 VPCLMULQDQ;
    at most what the CPU runs; -1 the CPU's), for this call only."""
    cdef int before = -1
    cdef uint32_t c
    if at < 0 or at + src.shape[0] > dst.shape[0]:
        raise ValueError("%d bytes at %d do not fit in %d" % (src.shape[0], at, dst.shape[0]))
    if src.shape[0] == 0:
        return 0
    if level >= 0:
        before = ps_crc_force(level)
    try:
        c = ps_copy_crc32(&dst[at], &src[0], <size_t>src.shape[0])
    finally:
        if before >= 0:
            ps_crc_force(before)
    return c


def put_bodies(CommitLogCore cl not None, Message tmpl not None, const unsigned char[::1] values,
               const int64_t[::1] offsets, bint batch, long long born_ts, int64_t[::1] queue_offsets,
               int64_t[::1] commit_log_offsets, int64_t[::1] store_timestamps, tags=None, keys=None,
               int64_t chunk_bytes=CHUNK_BYTES):
    """Store the bodies ``values[offsets[i]:offsets[i + 1]]`` as messages like ``tmpl`` (born at ``born_ts``),
    filling the output arrays (length ``len(offsets) - 1``) for the messages stored. Returns ``(status,
    count, waited)``: the refusal that stopped the put (or PUT_OK), how many messages were stored (a prefix),
    and the first status other than PUT_OK that a wait gave a stored chunk (FLUSH_DISK_TIMEOUT ...), else
    PUT_OK. The offsets must rise (the caller checked); ``tmpl`` must have no delay level and not be
    transactional, which the put path treats apart.

    ``tags``, ``keys``: None, or a column of UTF-8 texts ``(values, offsets, valid)`` (uint8 values, n + 1
    int64 offsets, uint8 validity or None) holding no separator (\\x01, \\x02; the caller checked): each
    message's TAGS and KEYS, stored before the template's properties, which must then have no TAGS (KEYS)
    of their own."""
    cdef Py_ssize_t n = offsets.shape[0] - 1, k
    cdef const unsigned char *vals
    cdef const int64_t *offs = &offsets[0]
    cdef Bodies b
    if n <= 0:
        return ST_PUT_OK, 0, ST_PUT_OK
    _check_out(n, queue_offsets, commit_log_offsets, store_timestamps)
    if offs[0] < 0 or offs[n] > values.shape[0]:
        raise ValueError("the offsets run outside the values (%d bytes)" % values.shape[0])
    vals = &values[0] if values.shape[0] > 0 else <const unsigned char *>""
    _alloc(&b, n)
    try:
        with nogil:
            for k in range(n):
                b.ptrs[k] = vals + offs[k]
                b.lens[k] = offs[k + 1] - offs[k]
        _texts(&b, n, tags, keys, tmpl)
        return _put(cl, tmpl, &b, n, batch, born_ts, queue_offsets, commit_log_offsets, store_timestamps,
                    chunk_bytes)
    finally:
        _free(&b)


def put_bytes(CommitLogCore cl not None, Message tmpl not None, tuple bodies not None, bint batch, long long born_ts,
              int64_t[::1] queue_offsets, int64_t[::1] commit_log_offsets, int64_t[::1] store_timestamps,
              tags=None, keys=None, int64_t chunk_bytes=CHUNK_BYTES):
    """``put_bodies`` for a tuple of ``bytes`` (read where they are: the tuple holds them while the records are
    copied without the GIL). ``TypeError`` for an item that is not ``bytes``."""
    cdef Py_ssize_t n = PyTuple_GET_SIZE(bodies), k
    cdef PyObject *item
    cdef Bodies b
    if n <= 0:
        return ST_PUT_OK, 0, ST_PUT_OK
    _check_out(n, queue_offsets, commit_log_offsets, store_timestamps)
    _alloc(&b, n)
    try:
        for k in range(n):
            item = PyTuple_GET_ITEM(bodies, k)
            if not PyBytes_CheckExact(<object>item):
                raise TypeError("body %d is a %s, not bytes" % (k, type(<object>item).__name__))
            b.ptrs[k] = <const unsigned char *>PyBytes_AS_STRING(<object>item)
            b.lens[k] = PyBytes_GET_SIZE(<object>item)
        _texts(&b, n, tags, keys, tmpl)
        return _put(cl, tmpl, &b, n, batch, born_ts, queue_offsets, commit_log_offsets, store_timestamps,
                    chunk_bytes)
    finally:
        _free(&b)


cdef object _put(CommitLogCore cl, Message tmpl, Bodies *b, Py_ssize_t n, bint batch, int64_t born_ts,
                 int64_t[::1] queue_offsets, int64_t[::1] commit_log_offsets, int64_t[::1] store_timestamps,
                 int64_t chunk_bytes):
    cdef Py_ssize_t i = 0, j, k, unit_end, end
    cdef int64_t max_body = cl.max_message_size, file_size = cl.file_size
    cdef int64_t cap = _batch_cap(max_body, file_size)
    cdef int64_t total, acc, pos, first_phy, qoff = 0, ts = 0, t0, blen, room, phy
    cdef int32_t base_len, tail_len, body_pos, first_body_len, size
    cdef int32_t *sizes = b.sizes
    cdef const int64_t *lens = b.lens
    cdef const unsigned char **ptrs = b.ptrs
    cdef unsigned char *first
    cdef unsigned char *dst
    cdef int32_t store_flag = cl.store_flag
    cdef const unsigned char *host = <const unsigned char *>PyBytes_AS_STRING(cl.store_host_b)
    cdef QueueCell cell
    cdef MappedFile mf
    cdef object status = ST_PUT_OK, waited = ST_PUT_OK, failed = None
    cdef int code
    cdef PutMessageResult r
    cdef const int32_t *props_lens = b.props_lens           # NULL: every message has the template's properties
    cdef int32_t shared_len = <int32_t>PyBytes_GET_SIZE(tmpl._props_b)
    cdef const unsigned char *shared = <const unsigned char *>PyBytes_AS_STRING(tmpl._props_b)
    cdef int32_t topic_part = (2 if tmpl._version == 2 else 1) + <int32_t>PyBytes_GET_SIZE(tmpl._topic_b)
    cdef bint keyed = tmpl._has_keys or b.key_lens != NULL
    base_len = message_length(tmpl, store_flag) - <int32_t>PyBytes_GET_SIZE(tmpl._body)
    tail_len = topic_part + 2 + shared_len
    body_pos = base_len - tail_len
    with nogil:
        for k in range(n):
            # a body too big for a record of int32 sizes is refused by the max message size anyway
            sizes[k] = base_len + <int32_t>(lens[k] if lens[k] <= max_body else 0)
            if props_lens != NULL:
                sizes[k] += props_lens[k] - shared_len
    while i < n:
        if not cl.writeable:
            failed = ST_SERVICE_NOT_AVAILABLE
            break
        if tmpl._illegal:
            failed = ST_PROPERTIES_SIZE_EXCEEDED if tmpl._illegal == 2 else ST_MESSAGE_ILLEGAL
            break
        if props_lens != NULL and props_lens[i] > MAX_PROPERTIES_BYTES:
            failed = ST_PROPERTIES_SIZE_EXCEEDED
            break
        if lens[i] > max_body:
            failed = ST_MESSAGE_ILLEGAL
            break
        unit_end = _unit_end(sizes, lens, props_lens, i, n, batch, cap, max_body, &total)
        code = cl._room_refusal(total)
        if code != REFUSE_NONE:
            failed = refusal_status(code)
            break
        t0 = mono_coarse_ns()
        try:
            # the file with room for the chunk's first unit (a message, or a batch); more are added below
            mf = cl._enter(tmpl, total, False)
            ts = cl.begin_time_in_lock
            cell = cl.last_cell
            qoff = cell.next_offset
            if mf is None:
                failed = ST_CREATE_MAPPED_FILE_FAILED
                break
            pos = mf.wrote
            # as many more units as fit in this file (with the blank) and in the chunk
            room = file_size - pos - END_FILE_MIN_BLANK_LENGTH
            acc = total
            end = unit_end
            while end < n:
                if lens[end] > max_body or (props_lens != NULL and props_lens[end] > MAX_PROPERTIES_BYTES):
                    break
                j = _unit_end(sizes, lens, props_lens, end, n, batch, cap, max_body, &total)
                if acc + total > room or acc + total > chunk_bytes:
                    break
                acc += total
                end = j
            if mf.reserve(pos, pos + acc + END_FILE_MIN_BLANK_LENGTH) != 0:
                log.error("%s: cannot allocate %d bytes at %d: %s", mf.file_name, acc, pos,
                          os.strerror(mf.reserve_errno))
                failed = ST_CREATE_MAPPED_FILE_FAILED
                break
            first_phy = mf.file_from_offset + pos
            cl._reserve(first_phy + acc)
            first = mf.write_base + pos
            first_body_len = <int32_t>lens[i]
            # the first record in full (its CRC from the caller's buffer: another thread changing it meanwhile
            # changes only what is stored, never a size), the others copied from it without the GIL. With
            # properties of their own, the first is written with TOTALSIZE 0 (no record yet, to a reader or
            # recovery), its properties put in, and then its size
            encode_with_body(first, tmpl, <const char *>ptrs[i], first_body_len,
                             body_crc32(ptrs[i], first_body_len), 0 if props_lens != NULL else sizes[i], qoff,
                             first_phy, born_ts, ts, host, store_flag, False)
            if props_lens != NULL:
                _tail_each(first + body_pos + first_body_len, NULL, topic_part, b, i, shared, shared_len)
                store_i32_release(first, sizes[i])
            mf.publish(pos + sizes[i])
            with nogil:
                dst = first + sizes[i]
                for k in range(i + 1, end):
                    size = sizes[k]
                    blen = lens[k]
                    like_head_body(dst, first, body_pos, ptrs[k], blen, qoff + k - i,
                                   mf.file_from_offset + (dst - mf.write_base), born_ts)
                    if props_lens != NULL:
                        _tail_each(dst + body_pos + blen, first + body_pos + first_body_len, topic_part, b, k,
                                   shared, shared_len)
                        store_i32_release(dst, size)
                    else:
                        like_tail(dst, first, body_pos, first_body_len, tail_len, blen, size)
                    dst += size
                    # published record by record: a concurrent reader sees a growing prefix
                    mf.publish(dst - mf.write_base)
            mf.store_timestamp = ts
            cell.next_offset = qoff + (end - i)
            if cl.dispatcher is not None:
                if props_lens != NULL:
                    cl.dispatcher.dispatch_each(cell, tmpl, first, first_phy, sizes + i, props_lens + i,
                                                b.tags_codes + i, end - i, ts, qoff, keyed)
                else:
                    cl.dispatcher.dispatch_run(cell, tmpl, first_phy, sizes + i, end - i, ts, qoff)
        finally:
            cl._exit()
        # the put path counts one put per message, or per batch
        if batch:
            k = i
            j = 0
            while k < end:
                k = _unit_end(sizes, lens, props_lens, k, n, batch, cap, max_body, &total)
                j += 1
            cl.put_times_total += j - 1
        else:
            cl.put_times_total += end - i - 1
        phy = first_phy
        for k in range(i, end):
            queue_offsets[k] = qoff + k - i
            commit_log_offsets[k] = phy
            store_timestamps[k] = ts
            phy += sizes[k]
        cl._finish(t0, acc, mf)
        if cl.after_put is not None:
            r = cl.after_put(put_ok(first_phy, <int32_t>acc, ts, qoff, <int32_t>(end - i), cl.store_host_b,
                                    store_flag, None), tmpl)
            if r.status is not ST_PUT_OK and waited is ST_PUT_OK:
                waited = r.status
        i = end
    if failed is not None:
        cl.put_failed_times += 1
        status = failed
    return status, i, waited
