# cython: language_level=3
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t
from libc.string cimport memcpy

from cpython.object cimport PyObject

from pystore.format._bytes cimport bytes_size, get_i16, get_i32, get_i64, put_i32, put_i64, store_i32_release

cdef extern from "crc32.h":
    uint32_t ps_copy_crc32(unsigned char *dst, const unsigned char *src, size_t n) noexcept nogil

from pystore.message._message cimport Message
from pystore.message._message_ext cimport MessageExt
from pystore.format._record cimport (AT_BODYCRC, AT_BORNTIMESTAMP, AT_FLAG, AT_PHYSICALOFFSET, AT_QUEUEID, AT_QUEUEOFFSET,
                                     IPV4_HOST_SIZE, IPV6_HOST_SIZE, PLAIN_AT_BODY, RecordView)

cdef enum:
    MESSAGE_MAGIC_CODE = -626843481       # 0xDAA320A7, V1: 1-byte topic length
    MESSAGE_MAGIC_CODE_V2 = -626843477    # 0xDAA320AB, V2: 2-byte topic length
    BLANK_MAGIC_CODE = -875286124         # 0xCBD43194, end-of-file blank
    END_FILE_MIN_BLANK_LENGTH = 8
    BORNHOST_V6_FLAG = 0x10
    STOREHOSTADDRESS_V6_FLAG = 0x20
    TRANSACTION_TYPE_MASK = 0xC
    TRANSACTION_NOT_TYPE = 0x0
    TRANSACTION_PREPARED_TYPE = 0x4
    TRANSACTION_COMMIT_TYPE = 0x8
    TRANSACTION_ROLLBACK_TYPE = 0xC
    CQ_STORE_UNIT_SIZE = 20               # a consume-queue unit: phy offset i64, size i32, tags code i64
    CQ_FILLER_SIZE = 0x7FFFFFFF           # the size of a filler unit (0, CQ_FILLER_SIZE, 0)
    BIG_BODY = 262144                     # a body this big is copied into the log without the GIL
    SPLIT_BODY = 4096                     # a MessageExt of a body this big keeps the rest of its record apart

# check_record results: a positive record size, or one of these.
cdef enum:
    REC_BLANK = 0          # BLANK magic: the rest of the file is unused
    REC_END = -1           # zero size (or no room for a header): the end of written data
    REC_SHORT = -2         # the announced size runs past the readable end: a torn or half-written record
    REC_BAD_MAGIC = -3
    REC_BAD_LENGTH = -4    # the field lengths disagree with TOTALSIZE
    REC_BAD_CRC = -5


cdef void encode_message(unsigned char *dst, Message m, int32_t total, int64_t queue_offset, int64_t phy_offset,
                         int64_t store_ts, const unsigned char *store_host, int32_t store_flag,
                         bint release_gil) noexcept
cdef void encode_with_body(unsigned char *dst, Message m, const char *body, Py_ssize_t body_len, int32_t body_crc,
                           int32_t total, int64_t queue_offset, int64_t phy_offset, int64_t born_ts,
                           int64_t store_ts, const unsigned char *store_host, int32_t store_flag,
                           bint release_gil) noexcept
cdef void write_blank(unsigned char *dst, int32_t max_blank) noexcept nogil
cdef int32_t check_record(const unsigned char *p, int64_t remaining, bint check_crc,
                          RecordView *v) noexcept nogil
cdef bint find_property(const unsigned char *props, int32_t n, const char *name, int32_t name_len,
                        int32_t *vpos, int32_t *vlen) noexcept nogil
cdef int find_properties(const unsigned char *props, int32_t n, const char *name1, int32_t len1,
                         int32_t *vpos1, int32_t *vlen1, const char *name2, int32_t len2, int32_t *vpos2,
                         int32_t *vlen2) noexcept nogil
cdef int64_t tags_code_of(const unsigned char *rec, RecordView *v) noexcept nogil
cdef MessageExt make_ext(const unsigned char *p, RecordView *v)
cdef MessageExt make_ext_shared(bytes buf, int32_t base, RecordView *v)
cdef int64_t find_next_record(const unsigned char *base, int64_t start, int64_t magic_below, int64_t limit,
                              int64_t file_from) noexcept nogil


# What a recovery walk saw of each queue (topic, queue id) in the records it passed: where the first of
# them lies and the highest queue offset. Open addressing over a fixed table; a topic longer than a slot
# holds, or a table three-quarters full, sets ``overflow`` (the caller then cannot rely on it).
cdef enum:
    TALLY_TOPIC_MAX = 256

cdef struct TallySlot:
    int64_t first_phy
    int64_t max_queue_offset
    uint64_t hash
    int32_t queue_id
    int32_t topic_len            # 0: a free slot
    unsigned char topic[256]

cdef struct QueueTallyC:
    TallySlot *slots
    int32_t mask                 # slots - 1 (a power of two)
    int32_t used
    int32_t last                 # the slot of the previous record, or -1
    bint overflow
    int64_t file_from            # the commit-log offset of byte 0 of the buffer walked


cdef int64_t scan_records(const unsigned char *base, int64_t start, int64_t limit, bint check_crc,
                          int32_t *reason, int64_t *count, int64_t *last_store_ts,
                          QueueTallyC *tally) noexcept nogil


cdef inline bint enters_queue(int32_t sys_flag) noexcept nogil:
    """Does a record of this sys flag get a consume-queue unit? Plain and committed transaction messages
    do; prepared and rolled-back ones do not (RocketMQ's dispatch rule)."""
    cdef int32_t t = sys_flag & TRANSACTION_TYPE_MASK
    return t == TRANSACTION_NOT_TYPE or t == TRANSACTION_COMMIT_TYPE


# Inline: called once per record of a batch, from the commit log's put loop.

cdef inline int32_t host_len(int32_t sys_flag, int32_t bit) noexcept nogil:
    return IPV6_HOST_SIZE if (sys_flag & bit) else IPV4_HOST_SIZE


# The one header reader, in parts (inline: the page scan, ``_read._check_plain_part``, runs them on every
# record it serves, with the plain record's places as constants): ``check_record`` runs them all.

cdef inline void read_unit_fields(const unsigned char *p, RecordView *v) noexcept nogil:
    """The fields a consume-queue unit's record is checked against: queue id, queue offset, physical offset."""
    v.queue_id = get_i32(p + AT_QUEUEID)
    v.queue_offset = get_i64(p + AT_QUEUEOFFSET)
    v.phy_offset = get_i64(p + AT_PHYSICALOFFSET)


cdef inline void read_other_fixed(const unsigned char *p, RecordView *v) noexcept nogil:
    """The other fields at the same place in every record: body CRC, flag, born time."""
    v.body_crc = get_i32(p + AT_BODYCRC)
    v.flag = get_i32(p + AT_FLAG)
    v.born_ts = get_i64(p + AT_BORNTIMESTAMP)


cdef inline int32_t check_lengths(const unsigned char *p, int32_t total, int32_t pos, bint v2,
                                  RecordView *v) noexcept nogil:
    """The record's variable part, from its BODYLENGTH field at ``pos``: body, topic (a 2-byte length in a V2
    record, ``v2``, else one byte) and properties, each length checked against TOTALSIZE before it is used and
    the last ending exactly at ``total``. 0 with ``v``'s positions set, or REC_BAD_LENGTH."""
    cdef int32_t n
    if pos + 4 > total:
        return REC_BAD_LENGTH
    n = get_i32(p + pos)
    pos += 4
    if n < 0 or n > total - pos:
        return REC_BAD_LENGTH
    v.body_pos = pos
    v.body_len = n
    pos += n
    if v2:
        if pos + 2 > total:
            return REC_BAD_LENGTH
        n = get_i16(p + pos)
        pos += 2
    else:
        if pos + 1 > total:
            return REC_BAD_LENGTH
        n = p[pos]
        pos += 1
    if n < 0 or n > total - pos:
        return REC_BAD_LENGTH
    v.topic_pos = pos
    v.topic_len = n
    pos += n
    if pos + 2 > total:
        return REC_BAD_LENGTH
    n = get_i16(p + pos)
    pos += 2
    if n < 0 or n != total - pos:
        return REC_BAD_LENGTH
    v.props_pos = pos
    v.props_len = n
    return 0


cdef inline int32_t cal_msg_length(int version, int32_t sys_flag, int32_t body_len, int32_t topic_len,
                                   int32_t props_len) noexcept nogil:
    """RocketMQ's ``calMsgLength``: the record size for these field sizes."""
    return (4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8
            + host_len(sys_flag, BORNHOST_V6_FLAG)
            + 8
            + host_len(sys_flag, STOREHOSTADDRESS_V6_FLAG)
            + 4 + 8
            + 4 + body_len
            + (2 if version == 2 else 1) + topic_len
            + 2 + props_len)


cdef inline int32_t message_length(Message m, int32_t store_sys_flag) noexcept:
    """The size of ``m``'s record in a store whose host flag is ``store_sys_flag``."""
    return cal_msg_length(m._version, m._sys_flag | store_sys_flag, <int32_t>bytes_size(<PyObject *>m._body),
                          <int32_t>bytes_size(<PyObject *>m._topic_b), <int32_t>bytes_size(<PyObject *>m._props_b))


cdef inline void _copy_body(unsigned char *dst, const char *body, Py_ssize_t n, bint release_gil) noexcept:
    """Copy a record's body; one of ``BIG_BODY`` bytes or more without the GIL when the caller allows it (other
    threads run meanwhile)."""
    if n >= BIG_BODY and release_gil:
        with nogil:
            memcpy(dst, body, n)
    else:
        memcpy(dst, body, n)


cdef inline void _copy_short(unsigned char *dst, const unsigned char *src, int32_t n) noexcept nogil:
    """``memcpy`` for the few bytes after a body (a short topic, no properties: 8 to 16 bytes), without a call
    into libc: two 8-byte moves that overlap, each of a constant size the compiler inlines. Nothing is written
    outside ``[dst, dst + n)``: a reader may already look at the bytes just after a record."""
    if 8 <= n <= 16:
        memcpy(dst, src, 8)
        memcpy(dst + n - 8, src + n - 8, 8)
    else:
        memcpy(dst, src, n)


cdef inline void like_head(unsigned char *dst, const unsigned char *first, int32_t body_pos, int32_t body_crc,
                           Py_ssize_t body_len, int64_t queue_offset, int64_t phy_offset,
                           int64_t born_ts) noexcept nogil:
    """``encode_like`` up to the body: the header copied from ``first`` with this record's fields patched in
    (the column put, ``_bulk_put``, runs it without the GIL and copies the body itself)."""
    if body_pos == PLAIN_AT_BODY:
        memcpy(dst + 4, first + 4, PLAIN_AT_BODY - 4)   # both hosts IPv4: a constant size, inlined by the compiler
    else:
        memcpy(dst + 4, first + 4, body_pos - 4)
    put_i32(dst + AT_BODYCRC, body_crc)
    put_i64(dst + AT_QUEUEOFFSET, queue_offset)
    put_i64(dst + AT_PHYSICALOFFSET, phy_offset)
    put_i64(dst + AT_BORNTIMESTAMP, born_ts)
    put_i32(dst + body_pos - 4, <int32_t>body_len)


cdef inline void like_head_body(unsigned char *dst, const unsigned char *first, int32_t body_pos,
                                const unsigned char *body, Py_ssize_t body_len, int64_t queue_offset,
                                int64_t phy_offset, int64_t born_ts) noexcept nogil:
    """``like_head`` and the body, for a body whose CRC is not known yet (a batch built from bodies, the column
    put): the body copied and its CRC folded in one pass (``ps_copy_crc32``), so it is read once, and the CRC is
    that of the bytes stored whatever another thread does to the source meanwhile. Tail and TOTALSIZE are the
    caller's (``like_tail``, or the column put's own properties)."""
    cdef int32_t crc = <int32_t>(ps_copy_crc32(dst + body_pos, body, <size_t>body_len) & 0x7FFFFFFF)
    like_head(dst, first, body_pos, crc, body_len, queue_offset, phy_offset, born_ts)


cdef inline void like_tail(unsigned char *dst, const unsigned char *first, int32_t body_pos, int32_t first_body_len,
                           int32_t tail_len, Py_ssize_t body_len, int32_t total) noexcept nogil:
    """``encode_like`` after the body: the tail copied from ``first``, then TOTALSIZE, stored last."""
    _copy_short(dst + body_pos + body_len, first + body_pos + first_body_len, tail_len)
    store_i32_release(dst, total)


cdef inline void encode_like(unsigned char *dst, const unsigned char *first, int32_t body_pos, int32_t first_body_len,
                             int32_t tail_len, const char *body, Py_ssize_t body_len, int32_t body_crc, int32_t total,
                             int64_t queue_offset, int64_t phy_offset, int64_t born_ts, bint release_gil) noexcept:
    """A record of a batch copied from the batch's first record ``first`` (just written, so in cache), for a
    message that shares every field with the first but TOTALSIZE, BODYCRC, QUEUEOFFSET, PHYSICALOFFSET,
    BORNTIMESTAMP, BODYLENGTH and the body (a batch built from bodies; a batch of messages built alike).
    ``body_pos`` is where bodies start, ``tail_len`` the bytes after them (topic and properties with their
    lengths). One copy of the header and five patched fields instead of a dozen fields and five copies;
    TOTALSIZE is not copied but stored last, as ``encode_with_body`` does (and ``release_gil`` means what it
    means there)."""
    like_head(dst, first, body_pos, body_crc, body_len, queue_offset, phy_offset, born_ts)
    _copy_body(dst + body_pos, body, body_len, release_gil)
    like_tail(dst, first, body_pos, first_body_len, tail_len, body_len, total)
