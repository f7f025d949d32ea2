# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Commit-log records straight into Arrow columns (the Spark data source's decoder, docs/api.md "Spark").

A :class:`BatchBuilder` decodes whole records (fed by ``_arrow_source``'s readers of a commit-log file range or
a consume queue's units, or by ``get_message``'s scan as a ``RecordSink``) in one C pass straight into the
column buffers of a ``pyarrow.RecordBatch`` (those of its schema's columns, any of ``COLUMNS`` in any order:
a column not asked for costs nothing): validity where needed, int32 offsets and data for strings and
binaries, list/map offsets, fixed-width values.
The buffers come from Arrow's memory pool (``pyarrow.allocate_buffer``: freed batches' memory is reused
rather than faulted in afresh): the per-row ones (fixed-width values, row offsets, validity) share one
allocation sized for the batch's rows; the variable-length ones grow by doubling and start at the size the
last batch reached. At the end of a batch they go to Arrow without a copy through its C data interface
(one ``RecordBatch._import_from_c`` of ``ArrowArray`` structs pointing into them, ``_arrow_export.pxd``;
releasing the batch drops the buffers). No Python object is made per row.

This module is the builder itself: its buffers and their room, the windows of deferred records a scan fills
and their hand-off, the built batch. The rest is by concept: the columns, the check of a schema and the
batch's description for Arrow are ``_arrow_schema``; the row encoders (a record's fields into the buffers, in
C without the GIL; the text of strings, hosts, properties, message ids) ``_arrow_decode``; the decode worker
thread and its hand-off and back-off protocol ``_decode_worker`` (``decode_worker`` and
``decode_worker_state`` re-exported here); the sources (a file range, a consume queue) ``_arrow_source``; the
driver's planning helpers (where to split a file, a queue's bounds) ``_arrow_plan``. The builder's fields and
the per-record tests its sources call inline are declared in ``_arrow.pxd``.
"""

cimport cython
from cpython.ref cimport Py_INCREF, PyObject
from libc.stdint cimport INT64_MAX, INT64_MIN, int32_t, int64_t, uint32_t, uintptr_t
from libc.stdlib cimport calloc, free, malloc
from libc.string cimport memcpy, memset

from pystore.columns._arrow_decode cimport decode_job, decode_row, fits, place_bodies, rest_job
from pystore.columns._arrow_export cimport ps_batch, ps_release_batch
from pystore.columns._arrow_schema cimport buffers_of, describe, row_bytes
from pystore.format._bytes cimport body_crc32
from pystore.format._codec cimport REC_BAD_CRC
from pystore.columns._decode_worker cimport dw_acquire, dw_on, dw_post, dw_release, dw_wait
from pystore.format._record cimport RecordView
from pystore.read._sink cimport Pending
from pystore.columns._textfmt cimport MAX_ITEMS

import logging

import pyarrow as pa

# ``COLUMNS``, ``decode_worker`` and ``decode_worker_state`` are re-exported: ``pystore.columns._arrow`` names them (docs/api.md)
from pystore.columns._arrow_schema import COLUMNS, schema_columns  # no-cython-lint
from pystore.format._codec import REASONS
from pystore.columns._decode_worker import decode_worker, decode_worker_state  # no-cython-lint
from pystore.errors import StoreCorruptedError

log = logging.getLogger(__name__)

# the last schema a BatchBuilder was made with, checked: its columns (C_*, in its order) and whether its
# timestamps are milliseconds
cdef object _last_schema = None
cdef tuple _last_ids = ()
cdef bint _last_ts_ms = False

# zeros: what a buffer not yet needed points at (an empty list's or map's one offset, an empty data buffer)
cdef int64_t ZEROS[8]
memset(ZEROS, 0, sizeof(ZEROS))


# the windows of the last builder freed, for the next one to take (with the GIL): a builder per page, and
# windows of this size malloc'd and freed each time cost more than a small page's decoding (the heap's top
# grown and trimmed, its pages faulted in afresh)
cdef Pending *_spare_wins[2]
_spare_wins[0] = _spare_wins[1] = NULL

# records in a window of deferred ones: the worker takes a window once the scan has filled it, so a page of
# fewer records than a window holds is decoded in the scan's thread alone
cdef enum:
    WINDOW = 2048


# ----------------------------------------------------------------------------------------------------
# The batch builder
# ----------------------------------------------------------------------------------------------------

@cython.final
cdef class BatchBuilder(RecordSink):
    """Decodes accepted records (pointers into mapped files the caller keeps open) into column buffers
    and hands them to Arrow as RecordBatches. As a ``RecordSink`` it takes the records ``get_message``'s
    scan serves (``get_columns``): the same decoder for Spark and the column API. It takes them deferred:
    the scan checks their structure, the builder their body CRC as it copies each body, a window at a time
    (unless ``decode_worker(False)``, on the decode worker while the scan fills the next window).

    ``BatchBuilder(schema, verify_crc=True, topics=None, queue_id=-1, start_ms=None, end_ms=None,
    max_rows=32768, max_bytes=64 MiB)``: ``schema`` is the exact ``pyarrow.Schema`` to produce: the data
    source's (``COLUMNS``, with Spark's field types) or any of its columns in any order (a projection: the work
    of the others is skipped, no properties parse without tags, keys or properties, no host text without a
    host column, ...; a record's structure and, with ``verify_crc`` or a deferring scan's check, its body CRC
    are checked all the same); the filters keep records of one of ``topics`` (a list of
    str), of ``queue_id`` (>= 0), stored in ``[start_ms, end_ms)``. A batch is full at ``max_rows`` rows
    or ``max_bytes`` bytes of variable-length data (what ``scan_file`` and ``QueueReader.scan`` stop at; a
    sink fed past ``max_rows`` grows). Timestamps are microseconds, or milliseconds when the schema's
    timestamp type is (the export's schema).
    """

    def __cinit__(self):
        self.topic_ptr = NULL
        self.topic_len = NULL
        memset(&self.d, 0, sizeof(Dec))
        memset(self.last_n, 0, sizeof(self.last_n))
        self.d.born_cache.id_high = self.d.store_cache.id_high = -1
        self.d.topic_cache.raw_len = -1
        self.wins[0] = self.wins[1] = NULL

    def __init__(self, schema, bint verify_crc=True, topics=None, int queue_id=-1, start_ms=None, end_ms=None,
                 long long max_rows=32768, long long max_bytes=64 << 20):
        cdef int i
        cdef uint32_t cols = 0
        global _last_schema, _last_ids, _last_ts_ms
        if schema is not _last_schema:
            # looked at once per schema object: pyarrow makes a Python object per field asked for
            _last_ids, _last_ts_ms = schema_columns(schema)
            _last_schema = schema
        self.schema = schema
        self.d.ts_ms = _last_ts_ms
        self.n_cols = len(_last_ids)
        for i in range(self.n_cols):
            self.col_ids[i] = _last_ids[i]
            cols |= 1u << self.col_ids[i]
        self.d.cols = cols
        self.d.every = cols == ALL_COLS
        self.d.on = buffers_of(cols)
        self.verify_crc = verify_crc
        self.queue_id = queue_id
        self.start_ms = INT64_MIN if start_ms is None else start_ms
        self.end_ms = INT64_MAX if end_ms is None else end_ms
        self.topics = [t.encode("utf-8") for t in topics] if topics else []
        self.n_topics = len(self.topics)
        if self.n_topics:
            self.topic_ptr = <const unsigned char **>malloc(self.n_topics * sizeof(void *))
            self.topic_len = <int32_t *>malloc(self.n_topics * sizeof(int32_t))
            if self.topic_ptr == NULL or self.topic_len == NULL:
                raise MemoryError()
            for i in range(self.n_topics):
                self.topic_ptr[i] = <const unsigned char *><bytes>self.topics[i]
                self.topic_len[i] = len(<bytes>self.topics[i])
        self.max_rows = max(1, min(max_rows, 1 << 24))
        self.max_bytes = max(1, min(max_bytes, 1 << 30))
        self.d.items = <int32_t *>malloc(4 * MAX_ITEMS * sizeof(int32_t))
        if self.d.items == NULL:
            raise MemoryError()
        self.pybufs = [None] * N_BUFS
        self._start()

    @property
    def rows(self):
        """The rows added since the last build."""
        return self.d.rows

    cdef int _grow(self, int i, int64_t need) except -1:
        """Room for ``need`` bytes in buffer ``i`` (doubling; a pool allocation, so freed batches' memory
        is reused instead of faulting fresh pages in)."""
        cdef Buf *b = &self.d.bufs[i]
        cdef int64_t cap = b.cap * 2 if b.cap else 4096
        while cap < need:
            cap *= 2
        # a fresh buffer with what the old one held copied over: a resize would copy its whole capacity
        buf = pa.allocate_buffer(cap, resizable=True)
        if b.n > 0:
            memcpy(<void *><uintptr_t>buf.address, b.p, b.n)
        self.pybufs[i] = buf
        b.p = <unsigned char *><uintptr_t>buf.address
        b.cap = cap
        return 0

    cdef int _rows_block(self, int64_t r, bint keep) except -1:
        """The per-row buffers (``row_bytes``) for ``r`` rows, in one allocation; with ``keep`` their contents
        so far are copied over (more rows for the batch under way), the tags' validity zeroed past them."""
        cdef int64_t total = 0, off = 0, size
        cdef int i
        cdef Buf *b
        cdef unsigned char *base
        for i in range(N_BUFS):
            if on(&self.d, i):
                total += (row_bytes(i, r) + 63) & ~63
        block = pa.allocate_buffer(total)
        base = <unsigned char *><uintptr_t>block.address
        for i in range(N_BUFS):
            size = row_bytes(i, r)
            if size == 0 or not on(&self.d, i):
                continue
            b = &self.d.bufs[i]
            if keep and b.cap > 0:
                memcpy(base + off, b.p, b.cap)
            if i == B_TAGS_V:
                memset(base + off + (b.cap if keep else 0), 0, size - (b.cap if keep else 0))
            b.p = base + off
            b.cap = size
            off += (size + 63) & ~63
        self.rows_block = block
        return 0

    cdef int _spend(self) except -1:
        """No buffers: the last batch owns them; an ``add`` now raises (through ``_more_rows``)."""
        cdef int i
        self.d.rows = 0
        self.d.cap_rows = -1
        self.d.spare = self.d.pspare = 0
        self.rows_block = None
        for i in range(N_BUFS):
            self.pybufs[i] = None
            self.d.bufs[i].p = NULL
            self.d.bufs[i].n = 0
            self.d.bufs[i].cap = 0
        return 0

    cdef int _more_rows(self) except -1:
        """Room for twice the rows in the per-row buffers (a sink fed past ``max_rows``)."""
        if self.d.cap_rows < 0:
            raise ValueError("this BatchBuilder built its last batch (build(again=False))")
        self._rows_block(2 * self.d.cap_rows, True)
        self.d.bufs[B_TAGS_V].n = self.d.bufs[B_TAGS_V].cap
        self.d.cap_rows *= 2
        return 0

    cdef int _room(self, int64_t n, int64_t body, int64_t topic, int64_t props) except -1:
        """Room for ``n`` more records of ``body`` body, ``topic`` topic and ``props`` properties bytes in all,
        whatever their text becomes (``_arrow_decode`` then writes without a test): invalid UTF-8 grows at most 3x, a
        host's text and a message id take at most 48 bytes, a properties string of ``k`` bytes holds at most
        ``k`` items or keys; copies of a cached text may write up to 64 bytes past their end."""
        # records decoded by windows do not keep ``spare``: the next ``add`` finds it anew
        self.d.spare = self.d.pspare = 0
        if fits(&self.d, n, body, topic, props):
            return 0
        while self.d.rows + n > self.d.cap_rows:
            self._more_rows()
        res(self, B_BODY, body)
        return self._room_rest(n, topic, props)

    cdef int _room_one(self, int64_t m, int64_t pm) except -1:
        """Room for one more row and ``m`` free bytes in every main buffer, ``pm`` in every properties' one
        (with room for some rows more, up to 64 KiB: ``add`` then rarely comes here), then ``spare`` and
        ``pspare`` anew: the least any of them has free."""
        cdef Buf *b = self.d.bufs
        cdef int64_t spare = INT64_MAX, pspare = INT64_MAX
        cdef int i
        if self.d.rows >= self.d.cap_rows:
            self._more_rows()
        m += min(63 * m, 65536)
        pm += min(63 * pm, 65536)
        for i in (B_BODY, B_TOPIC, B_BH, B_SH, B_ID):
            if on(&self.d, i):
                res(self, i, m)
                spare = min(spare, b[i].cap - b[i].n)
        for i in (B_TAGS, B_KEYS, B_PK, B_PV, B_KEYS_O, B_PK_O, B_PV_O):
            if on(&self.d, i):
                if pm > 0:
                    res(self, i, pm)
                pspare = min(pspare, b[i].cap - b[i].n)
        self.d.spare = spare
        self.d.pspare = pspare
        return 0

    def reserve(self, long long rows, long long body_bytes, long long topic_bytes=0):
        """Room for ``rows`` more rows with ``body_bytes`` of bodies and ``topic_bytes`` of topics (a page
        whose size is known up front grows no buffer, so nothing is copied on the way)."""
        self._room(max(rows, 0), max(body_bytes, 0), max(topic_bytes, 0), 0)

    def __dealloc__(self):
        self.settle()
        free(self.d.items)
        free(self.topic_ptr)
        free(self.topic_len)
        if _spare_wins[0] == NULL:
            # kept for the next builder (the settled windows are no longer read)
            _spare_wins[0], _spare_wins[1] = self.wins[0], self.wins[1]
        else:
            free(self.wins[0])
            free(self.wins[1])

    cdef int _start(self) except -1:
        """Fresh buffers for the next batch: the per-row ones sized for ``max_rows`` at once, the others at the
        size the last batch reached (batches alike grow none); those the last batch left empty (tags, keys,
        properties) point at zeros until a row needs them."""
        cdef int64_t r = self.max_rows
        cdef int i
        cdef Buf *b = self.d.bufs
        self.d.rows = 0
        self.d.cap_rows = r
        self.d.spare = self.d.pspare = 0
        self.d.tags_nulls = self.d.n_keys = self.d.n_items = 0
        for i in range(N_BUFS):
            self.pybufs[i] = None
            b[i].p = <unsigned char *>ZEROS
            b[i].n = 0
            b[i].cap = 0
        for i in (B_TOPIC, B_BODY, B_BH, B_SH, B_ID):
            if on(&self.d, i):
                self._grow(i, max(64, self.last_n[i] + self.last_n[i] // 8))
        for i in (B_TAGS, B_KEYS, B_PK, B_PV):
            if self.last_n[i] > 0 and on(&self.d, i):
                self._grow(i, self.last_n[i] + self.last_n[i] // 8)
        # the offsets of the keys' and properties' items: their first, 0, stands in ZEROS until then
        for i in (B_KEYS_O, B_PK_O, B_PV_O):
            b[i].n = 4
            if self.last_n[i] > 4 and on(&self.d, i):
                self._grow(i, self.last_n[i] + self.last_n[i] // 8)
        self._rows_block(r, False)
        for i in (B_TOPIC_O, B_BODY_O, B_TAGS_O, B_KEYS_LO, B_MAP_O, B_BH_O, B_SH_O, B_ID_O):
            if on(&self.d, i):
                (<int32_t *>b[i].p)[0] = 0
            b[i].n = 4
        b[B_TAGS_V].n = b[B_TAGS_V].cap
        return 0

    cdef int check_crc(self, const unsigned char *p, RecordView *v, str path, int64_t offset) except -1:
        if self.verify_crc and v.body_len > 0 and body_crc32(p + v.body_pos, v.body_len) != v.body_crc:
            raise StoreCorruptedError(path, offset, REASONS.get(REC_BAD_CRC))
        return 0

    cdef int add(self, const unsigned char *p, RecordView *v) except -1:
        """Append one accepted record to every column."""
        # the most any one buffer takes for this record (see _room), of the main and of the properties' buffers
        cdef int64_t m = max(<int64_t>v.body_len, 3 * <int64_t>v.topic_len + 32, 112)
        cdef int64_t pm = 4 * <int64_t>v.props_len + 4 if v.props_len > 0 else 0
        if self.d.rows >= self.d.cap_rows or m > self.d.spare or pm > self.d.pspare:
            self._room_one(m, pm)
        self.d.spare -= m
        self.d.pspare -= pm
        decode_row(&self.d, p, v)
        return 0

    # -- deferred records (RecordSink) ---------------------------------------------------------------

    cdef bint begin(self, bint check_crc) except -1:
        if self.d.cap_rows < 0:
            raise ValueError("this BatchBuilder built its last batch (build(again=False))")
        if self.wins[0] == NULL:
            if _spare_wins[0] != NULL:
                self.wins[0], self.wins[1] = _spare_wins[0], _spare_wins[1]
                _spare_wins[0] = _spare_wins[1] = NULL
            else:
                self.wins[0] = <Pending *>malloc(WINDOW * sizeof(Pending))
                self.wins[1] = <Pending *>malloc(WINDOW * sizeof(Pending))
            if self.wins[0] == NULL or self.wins[1] == NULL:
                raise MemoryError()
        self.settle()
        self.defer_crc = check_crc
        self.cut_found = False
        self.good = self.good_bytes = 0
        self.good_phy = -1
        self.split = self.d.every or (self.d.cols & TEXT_COLS) != 0
        return True

    cdef int hand_off(self) except -1:
        return self._decode_fill(True)

    cdef int finish(self) except -1:
        if self._wait() or self.cut_found:
            return 1
        return self._decode_fill(False)

    cdef int settle(self) noexcept:
        if self.busy:
            with nogil:
                dw_wait()
                dw_release()
            self.busy = False
        self._empty()
        return 0

    cdef void _empty(self) noexcept:
        """No record in the window being filled."""
        self.next = self.wins[self.fill]
        self.window_end = self.next + WINDOW if self.next != NULL else NULL

    cdef int _wait(self) except -1:
        """The window with the worker decoded (1 when it ended at a wrong CRC: ``cut``)."""
        if not self.busy:
            return 0
        with nogil:
            dw_wait()
            dw_release()
        self.busy = False
        return self._done(&self.job)

    cdef int _done(self, Job *j) except -1:
        """Account for a decoded window (1 when it ended at a wrong CRC: ``cut`` says where); nothing for the rest
        of a split window (``_fill_split`` accounted for it when it placed the bodies)."""
        if j.part == PART_REST:
            return 0
        self.good += j.done
        self.good_bytes += j.done_bytes
        if j.done > 0:
            self.good_phy = j.recs[j.done - 1].v.phy_offset
        if j.done < j.n:
            self.cut_found = True
            self.cut.good = self.good
            self.cut.good_bytes = self.good_bytes
            self.cut.last_phy = self.good_phy
            self.cut.bad = j.recs[j.done]
            self._empty()
            return 1
        return 0

    cdef int _decode_fill(self, bint worker) except -1:
        """Decode the window being filled: by the worker (``worker``, when it is free and the last window it
        had was decoded whole) while the scan fills the other window, else here. A page with text columns
        splits the window between the threads instead (``_fill_split``) while the worker is on."""
        cdef Job *j = &self.job
        cdef Pending *q = self.wins[self.fill]
        cdef int64_t i, n, body = 0, topic = 0, props = 0
        if self.cut_found:
            return 1
        n = self.next - q
        if worker and self.split and n > 0 and dw_on():
            return self._fill_split(q, n)
        if self._wait() or self.cut_found:
            return 1
        if n == 0:
            return 0
        for i in range(n):
            body += q[i].v.body_len
            topic += q[i].v.topic_len
            props += q[i].v.props_len
        self._room(n, body, topic, props)
        j.d = &self.d
        j.recs = q
        j.n = n
        j.crc = self.defer_crc
        j.part = PART_ALL
        if worker and dw_acquire():
            self.busy = True
            self.fill ^= 1
            self._empty()
            dw_post(decode_job, j)
            return 0
        self._empty()
        decode_job(j)
        return self._done(j)

    cdef int _fill_split(self, Pending *q, int64_t n) except -1:
        """``_decode_fill`` for a page with text columns: copy the window's bodies with their CRCs here (up to
        the first wrong one: the ``cut``), while the worker may still be building the last window's other
        columns, then hand this window's other columns to the worker (or build them here when it is not free)
        and fill the other window. Only the scan's thread touches the body buffer meanwhile; the per-row
        buffers, which the worker writes too, grow only once it is done."""
        cdef Job *j = &self.job
        cdef Job sb
        cdef int64_t i, k, body = 0, topic = 0, props = 0, body_n
        cdef bint cut_before
        if self.busy and j.part != PART_REST:
            # a whole window posted while this page's windows were not split (``decode_worker`` turned on
            # meanwhile, by another thread): it writes the body buffer and the rows too, so it must be done first
            if self._wait():
                return 1
        if self.d.rows + n > self.d.cap_rows:
            if self._wait():
                return 1
            while self.d.rows + n > self.d.cap_rows:
                self._more_rows()
        for i in range(n):
            body += q[i].v.body_len
        self.d.spare = self.d.pspare = 0
        res(self, B_BODY, body)
        sb.d = &self.d
        sb.recs = q
        sb.n = n
        sb.crc = self.defer_crc
        sb.part = PART_ALL
        sb.row0 = self.d.rows
        body_n = self.d.bufs[B_BODY].n
        with nogil:
            place_bodies(&sb)
        k = sb.done
        # the bodies placed are not rows until the rest is handed on: on any way out before that, the builder
        # stays as it was before this window
        try:
            cut_before = self._wait()
            if not cut_before and k > 0:
                for i in range(k):
                    topic += q[i].v.topic_len
                    props += q[i].v.props_len
                self._room_rest(k, topic, props)
        except BaseException:
            self.d.bufs[B_BODY].n = body_n
            raise
        if cut_before:
            self.d.bufs[B_BODY].n = body_n
            return 1
        if k > 0:
            j.d = &self.d
            j.recs = q
            j.n = k
            j.crc = False
            j.part = PART_REST
            j.row0 = self.d.rows
            self.d.rows += k
            self.good += k
            self.good_bytes += sb.done_bytes
            self.good_phy = q[k - 1].v.phy_offset
        if k < n:
            self.cut_found = True
            self.cut.good = self.good
            self.cut.good_bytes = self.good_bytes
            self.cut.last_phy = self.good_phy
            self.cut.bad = q[k]
        if k > 0 and dw_acquire():
            self.busy = True
            self.fill ^= 1
            self._empty()
            dw_post(rest_job, j)
        else:
            self._empty()
            if k > 0:
                rest_job(j)
        return 1 if k < n else 0

    cdef int _room_rest(self, int64_t n, int64_t topic, int64_t props) except -1:
        """``_room`` for the columns but the body of ``n`` rows the per-row buffers already have room for."""
        cdef int i
        res(self, B_TOPIC, 3 * topic + 32)
        res(self, B_BH, 48 * n + 64)
        res(self, B_SH, 48 * n + 64)
        res(self, B_ID, 48 * n + 64)
        if props > 0 and self.d.cols & PROPS_COLS:
            for i in (B_TAGS, B_KEYS, B_PK, B_PV):
                res(self, i, 3 * props)
            for i in (B_KEYS_O, B_PK_O, B_PV_O):
                res(self, i, 4 * (props + n))
        return 0

    def build(self, bint again=True):
        """The RecordBatch of the records added since the last build; None when there are none. With
        ``again=False`` no buffers are made for a next batch: the builder is spent (a caller's last batch)."""
        cdef int64_t n = self.d.rows
        cdef int i
        cdef Buf *b = self.d.bufs
        cdef ps_batch *e
        self.settle()
        if n == 0:
            return None
        for i in (B_QID, B_SIZE, B_FLAG, B_SYS, B_RC, B_CRC):
            b[i].n = 4 * n
        for i in (B_QOFF, B_CLO, B_BORN, B_STORE, B_PREP):
            b[i].n = 8 * n
        for i in (B_TOPIC_O, B_BODY_O, B_TAGS_O, B_KEYS_LO, B_MAP_O, B_BH_O, B_SH_O, B_ID_O):
            b[i].n = 4 * (n + 1)
        b[B_TAGS_V].n = (n + 7) // 8
        for i in range(N_BUFS):
            self.last_n[i] = b[i].n
        self.rows_total += n
        e = <ps_batch *>calloc(1, sizeof(ps_batch))
        if e == NULL:
            raise MemoryError()
        # the columns point into these buffers: the batch holds them until Arrow releases it
        keep = list(self.pybufs)
        keep.append(self.rows_block)
        Py_INCREF(keep)
        e.keep = <PyObject *>keep
        try:
            try:
                describe(&self.d, self.col_ids, self.n_cols, e, n)
            finally:
                # the batch's own release (``describe`` gave every array the children's)
                e.a[0].release = ps_release_batch
                e.a[0].private_data = e
            if again:
                self._start()
            else:
                self._spend()
            return pa.RecordBatch._import_from_c(<uintptr_t>&e.a[0], self.schema)
        finally:
            if e.a[0].release != NULL:     # not taken (an error): released here
                e.a[0].release(&e.a[0])


cdef inline int res(BatchBuilder self, int i, int64_t extra) except -1:
    if on(&self.d, i) and self.d.bufs[i].n + extra > self.d.bufs[i].cap:
        self._grow(i, self.d.bufs[i].n + extra)
    return 0
