# cython: language_level=3
"""Interface of ``pystore.columns._arrow``: the ``BatchBuilder`` (records into Arrow column buffers) as its sources in
``_arrow_source`` drive it — ``full``, ``wanted``, ``check_crc``, ``add`` per record; the two tests are inline
here so that a source's loop calls no function for them. The decoding state it holds (``Dec``, a C struct, so
that a window of deferred records can be decoded by the decode worker without the GIL), its column buffers and
columns are ``_arrow_decode.pxd``'s."""
from libc.stdint cimport int32_t, int64_t
from libc.string cimport memcmp

from pystore.columns._arrow_decode cimport (
            ALL_COLS, B_BH, B_BH_O, B_BODY, B_BODY_O, B_BORN, B_CLO, B_CRC, B_FLAG, B_ID, B_ID_O, B_KEYS, B_KEYS_LO, B_KEYS_O,
            B_MAP_O, B_PK, B_PK_O, B_PREP, B_PV, B_PV_O, B_QID, B_QOFF, B_RC, B_SH, B_SH_O, B_SIZE, B_STORE, B_SYS, B_TAGS,
            B_TAGS_O, B_TAGS_V, B_TOPIC, B_TOPIC_O, N_BUFS, N_COLS, PART_ALL, PART_REST, PROPS_COLS, TEXT_COLS, Buf, Dec, Job,
            on)
from pystore.format._record cimport RecordView
from pystore.read._sink cimport Pending, RecordSink


# final in _arrow.pyx only: declared final here, Cython (3.x) takes the class's ``add`` for an override of a final
# method. Other modules so call ``add`` and ``check_crc`` through the vtable (once a record, next to ``add``'s work).
cdef class BatchBuilder(RecordSink):
    cdef object schema
    # the schema's columns, by number (C_*), in its order
    cdef int n_cols
    cdef int col_ids[N_COLS]
    cdef readonly bint verify_crc
    cdef int32_t queue_id
    cdef int64_t start_ms, end_ms
    cdef list topics
    cdef int n_topics
    cdef const unsigned char **topic_ptr
    cdef int32_t *topic_len
    cdef readonly int64_t max_rows, max_bytes
    cdef int64_t last_n[N_BUFS]          # each buffer's size in the last batch built
    cdef Dec d
    cdef list pybufs                    # the pyarrow ResizableBuffer behind each variable-length Buf
    cdef object rows_block              # the pyarrow Buffer holding the per-row ones (row_bytes)
    cdef readonly int64_t rows_total
    # deferred records (RecordSink.begin): two windows, one filled by the scan while the worker decodes the other
    cdef Pending *wins[2]
    cdef int fill                        # the window being filled (from ``next``, up to ``window_end``)
    cdef bint defer_crc, cut_found
    cdef bint busy                       # ``job`` is with the worker
    # the page decodes text columns: the scan's thread copies each window's bodies (with their CRCs) itself and
    # the worker builds the rest of the window's columns (``_fill_split``), which balances the two threads
    cdef bint split
    cdef Job job
    cdef int64_t good, good_bytes, good_phy          # deferred records decoded so far

    cdef int _grow(self, int i, int64_t need) except -1
    cdef int _rows_block(self, int64_t r, bint keep) except -1
    cdef int _spend(self) except -1
    cdef int _more_rows(self) except -1
    cdef int _room(self, int64_t n, int64_t body, int64_t topic, int64_t props) except -1
    cdef int _room_one(self, int64_t m, int64_t pm) except -1
    cdef int _start(self) except -1
    cdef void _empty(self) noexcept
    cdef int _wait(self) except -1
    cdef int _done(self, Job *j) except -1
    cdef int _decode_fill(self, bint worker) except -1
    cdef int _fill_split(self, Pending *q, int64_t n) except -1
    cdef int _room_rest(self, int64_t n, int64_t topic, int64_t props) except -1
    cdef int check_crc(self, const unsigned char *p, RecordView *v, str path, int64_t offset) except -1
    cdef int add(self, const unsigned char *p, RecordView *v) except -1

    cdef inline bint full(self) noexcept:
        """The batch is full: ``max_rows`` rows, or ``max_bytes`` bytes of variable-length data."""
        cdef Buf *b = self.d.bufs
        cdef int64_t var = (b[B_BODY].n + b[B_PK].n + b[B_PV].n + b[B_KEYS].n + b[B_TAGS].n + b[B_TOPIC].n)
        return self.d.rows >= self.max_rows or var >= self.max_bytes

    cdef inline bint wanted(self, const unsigned char *p, RecordView *v) noexcept nogil:
        """The record passes the filters (queue, store time, topics)."""
        cdef int i
        if self.queue_id >= 0 and v.queue_id != self.queue_id:
            return False
        if v.store_ts < self.start_ms or v.store_ts >= self.end_ms:
            return False
        if self.n_topics:
            for i in range(self.n_topics):
                if self.topic_len[i] == v.topic_len and memcmp(self.topic_ptr[i], p + v.topic_pos, v.topic_len) == 0:
                    return True
            return False
        return True
