# cython: language_level=3
"""Interface of ``pystore._arrow``: the ``BatchBuilder`` (records into Arrow column buffers) as its sources in
``_arrow_source`` drive it — ``full``, ``wanted``, ``check_crc``, ``add`` per record; the two tests are inline
here so that a source's loop calls no function for them. The decoding state is a C struct (``Dec``) so that a
window of deferred records (``RecordSink``) can be decoded by the decode worker without the GIL."""
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t
from libc.string cimport memcmp

from pystore._record cimport RecordView
from pystore._sink cimport Pending, RecordSink


# a growable column buffer from Arrow's memory pool
cdef struct Buf:
    unsigned char *p
    int64_t n
    int64_t cap


cdef struct HostCache:
    unsigned char raw[20]
    int32_t raw_len
    char text[64]
    int text_len
    # the offset message id of the last row with this store host (docs/format.md §1.8): the host's hex then the
    # offset's; rows whose offsets share all but the low 16 bits rewrite only the last four digits
    unsigned char id[64]
    int64_t id_high                     # the offset >> 16 ``id`` holds, -1 for none


cdef struct TextCache:
    # the last topic added, as stored and as written (valid UTF-8): a page's rows mostly share one
    int32_t raw_len                     # -1: none
    int32_t text_len
    unsigned char raw[256]
    unsigned char text[800]


# column buffers
cdef enum:
    B_TOPIC_O, B_TOPIC, B_QID, B_QOFF, B_CLO, B_SIZE, B_BODY_O, B_BODY, B_TAGS_V, B_TAGS_O, B_TAGS,
    B_KEYS_LO, B_KEYS_O, B_KEYS, B_MAP_O, B_PK_O, B_PK, B_PV_O, B_PV, B_FLAG, B_SYS, B_BORN, B_STORE,
    B_BH_O, B_BH, B_SH_O, B_SH, B_RC, B_PREP, B_CRC, B_ID_O, B_ID, N_BUFS


# the columns, as numbered in ``COLUMNS`` (the full schema's order)
cdef enum:
    C_TOPIC, C_QID, C_QOFF, C_CLO, C_SIZE, C_BODY, C_TAGS, C_KEYS, C_PROPS, C_FLAG, C_SYS, C_BORN, C_STORE,
    C_BH, C_SH, C_RC, C_PREP, C_CRC, C_ID, N_COLS

cdef enum:
    ALL_COLS = (1 << N_COLS) - 1
    # the columns one parse of the properties gives
    PROPS_COLS = (1 << C_TAGS) | (1 << C_KEYS) | (1 << C_PROPS)
    # the columns that need the store host read (its text, or the message id's hex of it)
    STORE_HOST_COLS = (1 << C_SH) | (1 << C_ID)
    # the fixed-width columns but queue_offset, and the text ones
    FIXED_COLS = ((1 << C_QID) | (1 << C_CLO) | (1 << C_SIZE) | (1 << C_FLAG) | (1 << C_SYS) | (1 << C_BORN)
                  | (1 << C_STORE) | (1 << C_RC) | (1 << C_PREP) | (1 << C_CRC))
    TEXT_COLS = PROPS_COLS | (1 << C_TOPIC) | (1 << C_BH) | (1 << C_SH) | (1 << C_ID)


# what decoding writes: the column buffers, the row and item counts, the caches of the last host and topic
cdef struct Dec:
    Buf bufs[N_BUFS]
    # the columns asked for (bit ``1 << C_*``; all of them: ``every``) and the buffers they write
    # (bit ``1 << B_*``): a buffer outside ``on`` is never written, grown nor given room
    uint32_t cols
    uint64_t on
    bint every
    int64_t rows
    int64_t cap_rows                     # the rows the per-row buffers have room for
    int64_t tags_nulls, n_keys, n_items
    int32_t *items                       # parse_props' scratch
    HostCache born_cache, store_cache
    TextCache topic_cache
    bint ts_ms                           # timestamps stay milliseconds (else microseconds)
    # bytes every buffer a record writes (``spare``: body, topic, hosts, id; ``pspare``: the properties' ones)
    # still has free at least, less what the records added since may have taken (``_fits``)
    int64_t spare, pspare


# a window of deferred records for the decode worker (or this thread): ``done`` of its ``n`` were decoded (fewer
# when a body CRC was wrong), ``done_bytes`` their record bytes
cdef struct Job:
    Dec *d
    Pending *recs
    int64_t n
    bint crc
    int64_t done
    int64_t done_bytes
    # PART_ALL: decode the records whole (rows from ``d.rows``), checking their body CRCs; PART_REST: every
    # column but the body for rows ``row0`` on, whose bodies the scan's thread placed and checked (``split``)
    int part
    int64_t row0


cdef enum:
    PART_ALL = 0
    PART_REST = 1


cdef inline bint on(Dec *d, int i) noexcept nogil:
    """Buffer ``i`` is written (a column asked for needs it)."""
    return (d.on >> i) & 1


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
    cdef object rows_block              # the pyarrow Buffer holding the per-row ones (_row_bytes)
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
