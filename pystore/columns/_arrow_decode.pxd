# cython: language_level=3
"""Interface of ``pystore.columns._arrow_decode``: the column buffers and decoding state of ``_arrow.BatchBuilder`` (``Dec``, a
        C struct, so that a window of deferred records can be decoded by the decode worker without the GIL), and the entry
points of the row encoders: ``decode_row`` once a record (``BatchBuilder.add``), the others once a window."""
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t

from pystore.format._record cimport RecordView
from pystore.read._sink cimport Pending


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
    # still has free at least, less what the records added since may have taken (``fits``)
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


# Append one accepted record to the columns asked for, its body copied; the caller made room (``fits``).
cdef void decode_row(Dec *d, const unsigned char *p, RecordView *v) noexcept nogil
# A window of deferred records (a ``Job``, PART_ALL) decoded in order, up to the first whose body CRC is wrong
# (with ``crc``); run by the decode worker or the scan's thread.
cdef void decode_job(void *arg) noexcept nogil
# The first part of a split window, in the scan's thread: the bodies placed and their CRCs checked (``j.done``).
cdef void place_bodies(Job *j) noexcept nogil
# The second part of a split window (PART_REST): every column but the body, rows ``row0`` on.
cdef void rest_job(void *arg) noexcept nogil
# Room for ``n`` more records of ``body``, ``topic`` and ``props`` bytes in all in every buffer they write
# (whatever their text becomes: see ``BatchBuilder._room``).
cdef bint fits(Dec *d, int64_t n, int64_t body, int64_t topic, int64_t props) noexcept nogil
