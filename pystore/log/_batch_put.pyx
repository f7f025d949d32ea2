# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The batch put (``CommitLogCore.put_messages`` / ``append_messages``): a ``MessageBatch`` appended under one
put-lock hold, wholly in one commit-log file, with consecutive queue offsets (RocketMQ's batch: each message
its own record, as ``put_message`` would store it).

It follows the put protocol every put shares (``_commitlog.pxd``: the refusals before the lock, ``_enter`` and
``_exit`` around the hold, ``_finish`` after) and keeps its own checks and encoding:

    batch of messages     each message checked (``batch_refusal``) and its CRC taken before the lock; under it,
                          the first record encoded in full and every message built like it (same topic,
                          properties, hosts, flags) copied from it with its own fields patched in, any other
                          encoded in full; the GIL kept throughout (another thread could change a message)
    from_bodies           the template checked once; under the lock, the first record in full and the others
                          copied from it with their bodies and CRCs folded in (``_like_first``, the column put's
                          writer), without the GIL when the batch is large (the template is frozen and the
                          tuple of bodies immutable)

Records are published one by one (a concurrent reader sees a growing prefix); the consume-queue units go to
the inline dispatcher as one run when the records share tags code, flag and keys, else one by one.

The module registers ``put_batch`` with ``_commitlog`` when it is imported (``set_batch_put``); ``_commitlog``
imports it at the end of its own import, so a ``CommitLogCore`` always has it.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.tuple cimport PyTuple_GET_ITEM
from cpython.object cimport PyObject
from libc.stdint cimport int32_t, int64_t

from pystore.format._bytes cimport body_crc32, bytes_data, bytes_size, mono_coarse_ns
from pystore.format._codec cimport (BIG_BODY, encode_like, encode_message, encode_with_body, like_head_body, like_tail,
                                    message_length)
from pystore.log._commitlog cimport REFUSE_NONE, CommitLogCore, QueueCell, refused, refusal_status, set_batch_put
from pystore.log._mapped_file cimport MappedFile
from pystore.log._put_checks cimport batch_refusal, batch_unchanged, built_alike, crc_of, tail_length
from pystore.log._results cimport PutMessageResult, put_ok
from pystore.message._message cimport Message
from pystore.message._message_batch cimport MessageBatch

from pystore.status import PutMessageStatus

cdef extern from *:
    """
    /* A prefetch for writing (PREFETCHW where the build targets it, else a plain prefetch, which brings the line in
       as well) */
    static inline void ps_prefetch_write(const void *p) { __builtin_prefetch(p, 1, 3); }
    """
    void prefetch_write "ps_prefetch_write"(const void *p) noexcept nogil

cdef enum:
    PTR_STACK = 256     # a batch from bodies of up to this many keeps its body pointers on the stack

cdef object ST_SERVICE_NOT_AVAILABLE = PutMessageStatus.SERVICE_NOT_AVAILABLE
cdef object ST_MESSAGE_ILLEGAL = PutMessageStatus.MESSAGE_ILLEGAL
cdef object ST_CREATE_MAPPED_FILE_FAILED = PutMessageStatus.CREATE_MAPPED_FILE_FAILED


cdef void _like_first(MappedFile mf, const unsigned char *first, int32_t body_pos, int32_t first_body_len,
                      int32_t tail_len, const unsigned char **bodies, const int32_t *sizes, Py_ssize_t n,
                      int64_t qoff, int64_t born_ts) noexcept nogil:
    """Records 1 to ``n - 1`` of a batch built from bodies, after its first (``first``, at the write position
    less ``sizes[0]``): each copied from the first with its own fields patched in and its body copied with its CRC
    folded in (``like_head_body``, the column put's writer), published record by record so that a concurrent
    reader sees a growing prefix."""
    cdef unsigned char *dst = <unsigned char *>first + sizes[0]
    cdef Py_ssize_t i
    cdef int32_t blen, base_len = sizes[0] - first_body_len
    for i in range(1, n):
        blen = sizes[i] - base_len
        # the lines two records ahead, for writing: a fresh line of the mapping is read from memory before it is
        # written, and asked for here it arrives while this record and the next are written
        prefetch_write(dst + 512)
        prefetch_write(dst + 576)
        prefetch_write(dst + 640)
        prefetch_write(dst + 704)
        like_head_body(dst, first, body_pos, bodies[i], blen, qoff + i, mf.file_from_offset + (dst - mf.write_base),
                       born_ts)
        like_tail(dst, first, body_pos, first_body_len, tail_len, blen, sizes[i])
        dst += sizes[i]
        mf.publish(dst - mf.write_base)


cdef object put_batch(CommitLogCore cl, object batch_obj, bint run_after):
    """The batch put: the whole batch under one lock hold, in one file, with consecutive queue offsets (see the
    module's docstring)."""
    cdef MessageBatch batch = <MessageBatch>batch_obj
    cdef tuple ms = batch._messages
    cdef tuple bodies = batch._bodies
    cdef Message tmpl = batch._template
    cdef Py_ssize_t i, n
    cdef int64_t total = 0, ts, qoff, phy, pos, first_phy = 0, t0
    cdef int32_t size, base_len = 0, body_pos, tail_len, first_body_len
    cdef unsigned char *first
    cdef Message m0
    cdef bint one_run = False
    cdef QueueCell cell
    cdef MappedFile mf
    cdef object status = None
    cdef PutMessageResult result
    cdef bytes sizes, ptrs = None
    cdef int32_t *size_arr
    cdef const unsigned char **ptr_arr = NULL
    cdef const unsigned char *ptr_stack[PTR_STACK]
    cdef PyObject *bp
    cdef PyObject *mp
    # held: another thread could re-run the batch's __init__ while this put waits for the lock
    cdef str tq_key = batch._tq_key
    cdef int code
    if not cl.writeable:
        return refused(cl, batch, ST_SERVICE_NOT_AVAILABLE)
    n = len(ms) if bodies is None else len(bodies)
    sizes = PyBytes_FromStringAndSize(NULL, n * 4)
    size_arr = <int32_t *>PyBytes_AS_STRING(sizes)
    if bodies is None:
        # the messages are the batch's own tuple: read through borrowed references (no reference counting)
        for i in range(n):
            mp = PyTuple_GET_ITEM(ms, i)
            code = batch_refusal(<Message>mp, tq_key, cl.max_message_size)
            if code != REFUSE_NONE:
                return refused(cl, batch, refusal_status(code))
            size_arr[i] = message_length(<Message>mp, cl.store_flag)
            total += size_arr[i]
            crc_of(<Message>mp)                  # computed now, outside the lock, and kept by the message
    else:
        # from_bodies: the template's checks once, then each body's length (no Message per body; the CRCs
        # are folded into the copies, under the lock)
        code = batch_refusal(tmpl, tq_key, cl.max_message_size)
        if code != REFUSE_NONE:
            return refused(cl, batch, refusal_status(code))
        base_len = message_length(tmpl, cl.store_flag) - <int32_t>PyBytes_GET_SIZE(tmpl._body)
        if n <= PTR_STACK:
            ptr_arr = ptr_stack
        else:
            ptrs = PyBytes_FromStringAndSize(NULL, n * sizeof(void *))
            ptr_arr = <const unsigned char **>PyBytes_AS_STRING(ptrs)
        # the bodies are the batch's own tuple of bytes (from_bodies made it): it keeps them alive, and nothing
        # can replace one while they are read through borrowed pointers (some copies run without the GIL)
        for i in range(n):
            bp = PyTuple_GET_ITEM(bodies, i)
            if bytes_size(bp) > cl.max_message_size:
                return refused(cl, batch, ST_MESSAGE_ILLEGAL)
            size_arr[i] = base_len + <int32_t>bytes_size(bp)
            total += size_arr[i]
            ptr_arr[i] = <const unsigned char *>bytes_data(bp)
    code = cl._room_refusal(total)
    if code != REFUSE_NONE:
        return refused(cl, batch, refusal_status(code))
    t0 = mono_coarse_ns()
    try:
        # the whole batch goes into the one file _enter finds room in
        mf = cl._enter(<Message>ms[0] if bodies is None else tmpl, total, False)
        ts = cl.begin_time_in_lock
        cell = cl.last_cell
        qoff = cell.next_offset
        if mf is None:
            status = ST_CREATE_MAPPED_FILE_FAILED
        elif bodies is None and not batch_unchanged(ms, size_arr, tq_key, cl.max_message_size,
                                                    cl.store_flag):
            status = ST_MESSAGE_ILLEGAL
        else:
            pos = mf.wrote
            first_phy = mf.file_from_offset + pos
            if bodies is None:
                # the first record in full; a message built like it (same topic, properties, hosts and
                # flags) is copied from it with its own fields patched in, any other encoded in full
                m0 = <Message>ms[0]
                first = mf.write_base + pos
                # the GIL is kept throughout (release_gil False): every size was checked before this loop, and
                # another thread changing a later message while a big body is copied would make it overrun
                encode_message(first, m0, size_arr[0], qoff, first_phy, ts,
                               <const unsigned char *>PyBytes_AS_STRING(cl.store_host_b), cl.store_flag, False)
                pos += size_arr[0]
                mf.publish(pos)
                first_body_len = <int32_t>PyBytes_GET_SIZE(m0._body)
                tail_len = tail_length(m0)
                body_pos = size_arr[0] - first_body_len - tail_len
                one_run = not m0._has_keys
                for i in range(1, n):
                    mp = PyTuple_GET_ITEM(ms, i)
                    if built_alike(<Message>mp, m0):
                        bp = <PyObject *>(<Message>mp)._body
                        encode_like(mf.write_base + pos, first, body_pos, first_body_len, tail_len,
                                    bytes_data(bp), bytes_size(bp), crc_of(<Message>mp), size_arr[i], qoff + i,
                                    mf.file_from_offset + pos, (<Message>mp)._born_timestamp, False)
                    else:
                        encode_message(mf.write_base + pos, <Message>mp, size_arr[i], qoff + i,
                                       mf.file_from_offset + pos, ts,
                                       <const unsigned char *>PyBytes_AS_STRING(cl.store_host_b),
                                       cl.store_flag, False)
                    if one_run and ((<Message>mp)._has_keys or (<Message>mp)._tags_code != m0._tags_code
                                    or (<Message>mp)._sys_flag != m0._sys_flag):
                        one_run = False
                    pos += size_arr[i]
                    # publish record by record, so a concurrent reader sees a growing prefix
                    mf.publish(pos)
            else:
                # the first record in full, the others copied from it with their own fields patched in;
                # every record shares the template's topic and properties, so the units go in as one run
                m0 = tmpl
                one_run = True
                first = mf.write_base + pos
                first_body_len = size_arr[0] - base_len
                # the template is frozen and the tuple of bodies immutable: no other thread can change them
                encode_with_body(first, tmpl, <const char *>ptr_arr[0], first_body_len,
                                 body_crc32(ptr_arr[0], first_body_len), size_arr[0], qoff, first_phy,
                                 batch._born_ts, ts, <const unsigned char *>PyBytes_AS_STRING(cl.store_host_b),
                                 cl.store_flag, True)
                mf.publish(pos + size_arr[0])
                tail_len = tail_length(tmpl)
                body_pos = base_len - tail_len
                if total >= BIG_BODY:
                    # nothing the copies read can change (see above): other threads run meanwhile
                    with nogil:
                        _like_first(mf, first, body_pos, first_body_len, tail_len, ptr_arr, size_arr, n, qoff,
                                    batch._born_ts)
                else:
                    _like_first(mf, first, body_pos, first_body_len, tail_len, ptr_arr, size_arr, n, qoff,
                                batch._born_ts)
            mf.store_timestamp = ts
            cell.next_offset = qoff + n
            if cl.dispatcher is not None:
                if one_run:
                    # one tags code and type and no keys (or the template's): the units go in as one run
                    cl.dispatcher.dispatch_run(cell, m0, first_phy, size_arr, n, ts, qoff)
                else:
                    phy = first_phy
                    for i in range(n):
                        size = size_arr[i]
                        cl.dispatcher.dispatch(cell, <Message>PyTuple_GET_ITEM(ms, i), phy, size, ts, qoff + i)
                        phy += size
    finally:
        cl._exit()
    if status is not None:
        return refused(cl, batch, status)
    result = put_ok(first_phy, <int32_t>total, ts, qoff, <int32_t>n, cl.store_host_b, cl.store_flag, sizes)
    cl._finish(t0, total, mf)
    if run_after and cl.after_put is not None:
        return cl.after_put(result, batch)
    return result


set_batch_put(put_batch)
