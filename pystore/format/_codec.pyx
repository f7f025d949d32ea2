# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The commit-log record: encode in place, check, decode, scan (docs/format.md §1).

Layout (big-endian; offsets for an IPv4 born host, add 12 after field 10 for IPv6, 12 more after
field 12 for an IPv6 store host)::

     0  TOTALSIZE            int32   whole record, this field included
     4  MAGICCODE            int32   0xDAA320A7 (V1) | 0xDAA320AB (V2) | 0xCBD43194 (BLANK)
     8  BODYCRC              int32   crc32(body) & 0x7FFFFFFF
    12  QUEUEID              int32
    16  FLAG                 int32
    20  QUEUEOFFSET          int64   index in the consume queue
    28  PHYSICALOFFSET       int64   absolute commit-log offset of this record
    36  SYSFLAG              int32   0x10 born host is IPv6, 0x20 store host is IPv6, 0xC tx type
    40  BORNTIMESTAMP        int64
    48  BORNHOST             4+4 | 16+4 bytes (address, port)
    56  STORETIMESTAMP       int64
    64  STOREHOSTADDRESS     4+4 | 16+4 bytes
    72  RECONSUMETIMES       int32
    76  PREPAREDTXOFFSET     int64
    84  BODYLENGTH + BODY    int32 + n
        TOPICLENGTH + TOPIC  int8 (V1) | int16 (V2) + t, UTF-8
        PROPLENGTH + PROPS   int16 + p, "name\\x01value\\x02..." UTF-8

    fixed part, V1, both hosts IPv4: 91 bytes + body + topic + properties

End-of-file blank: TOTALSIZE = the bytes left in the file, MAGIC = BLANK; only these 8 bytes are
written and readers never look past them. Only the body is checksummed; recovery checks it when
``check_crc_on_recover`` is set.

Writers store TOTALSIZE last, after a release fence, so a reader (another thread, or another process
mapping the same file) that sees a non-zero size sees the whole record.

Thread-safety: every function here works on memory the caller owns or has pinned; none keeps state.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t
from libc.string cimport memchr, memcmp, memcpy

from pystore.format._bytes cimport (body_crc32, crc_built, crc_force, crc_level, get_i32, get_i64,
                                    load_i32_acquire, ps_fast_crc32, put_i16, put_i32, put_i64)
from pystore.format._bytes cimport store_i32_release
from pystore.format._hosts cimport encode_host
from pystore.format._jstring cimport java_hash_utf8
from pystore.message._message cimport Message
from pystore.message._message_ext cimport MessageExt
from pystore.format._props cimport next_prop
from pystore.format._record cimport AT_BORNHOST, AT_MAGIC, AT_SYSFLAG, AT_TOTALSIZE, MIN_RECORD_SIZE

from pystore.errors import StoreCorruptedError

# Python-visible names of the constants and of the check results.
MAGIC_CODE_V1 = MESSAGE_MAGIC_CODE
MAGIC_CODE_V2 = MESSAGE_MAGIC_CODE_V2
BLANK_CODE = BLANK_MAGIC_CODE
MIN_BLANK = END_FILE_MIN_BLANK_LENGTH
#: a consume-queue unit's size (docs/format.md §2.1): the one constant, for Python (``_units.UNIT_SIZE`` is it too)
UNIT_SIZE = CQ_STORE_UNIT_SIZE
RECORD_BLANK = REC_BLANK
RECORD_END = REC_END
RECORD_SHORT = REC_SHORT
RECORD_BAD_MAGIC = REC_BAD_MAGIC
RECORD_BAD_LENGTH = REC_BAD_LENGTH
RECORD_BAD_CRC = REC_BAD_CRC

# Offsets of fixed fields (the same for every variant up to BORNHOST; _record.pxd holds them).
POS_TOTALSIZE = AT_TOTALSIZE
POS_MAGIC = AT_MAGIC
POS_BODYCRC = AT_BODYCRC
POS_QUEUEID = AT_QUEUEID
POS_FLAG = AT_FLAG
POS_QUEUEOFFSET = AT_QUEUEOFFSET
POS_PHYSICALOFFSET = AT_PHYSICALOFFSET
POS_SYSFLAG = AT_SYSFLAG
POS_BORNTIMESTAMP = AT_BORNTIMESTAMP
POS_BORNHOST = AT_BORNHOST

REASONS = {
    REC_BLANK: "end-of-file blank",
    REC_END: "end of written data",
    REC_SHORT: "record runs past the end of the readable data (torn or half-written)",
    REC_BAD_MAGIC: "bad magic code",
    REC_BAD_LENGTH: "record field lengths disagree with its TOTALSIZE",
    REC_BAD_CRC: "body CRC mismatch",
}


_CRC_PATHS = ("zlib", "pclmulqdq", "vpclmulqdq")


def crc_implementation():
    """Which body-CRC path this CPU runs: ``"vpclmulqdq"`` (256-bit carry-less multiplication, bodies of 128
    bytes and more; 64 to 127 bytes take the next), ``"pclmulqdq"`` or ``"zlib"`` (diagnostics and tests)."""
    return _CRC_PATHS[crc_level()]


def crc_implementations_built():
    """The body-CRC paths this build has, slowest first (which of them runs depends on the CPU)."""
    return _CRC_PATHS[:crc_built() + 1]


def _force_crc_implementation(str name):
    """Tests only: make this module's CRC (``fast_body_crc``, ``body_crc`` and the record checks) take
    ``name``'s path or a slower one the CPU runs; returns the name of the path in use before."""
    return _CRC_PATHS[crc_force(_CRC_PATHS.index(name))]


def fast_body_crc(data):
    """``body_crc`` through the carry-less-multiplication CRC the record checks use (for tests)."""
    cdef const unsigned char[::1] b = memoryview(data).cast("B")
    if b.shape[0] == 0:
        return 0
    return <int32_t>(ps_fast_crc32(&b[0], b.shape[0]) & 0x7FFFFFFF)


def file_crc32(data):
    """The CRC32 (zlib's, all 32 bits) of ``data`` through the carry-less-multiplication CRC, without the GIL
    above 1 MiB: an archived object of a GiB is checked while other threads decode."""
    cdef const unsigned char[::1] b = memoryview(data).cast("B")
    cdef size_t n = b.shape[0]
    cdef uint32_t crc
    if n == 0:
        return 0
    if n < (1 << 20):
        return ps_fast_crc32(&b[0], n)
    with nogil:
        crc = ps_fast_crc32(&b[0], n)
    return crc


cdef void encode_message(unsigned char *dst, Message m, int32_t total, int64_t queue_offset, int64_t phy_offset,
                         int64_t store_ts, const unsigned char *store_host, int32_t store_flag,
                         bint release_gil) noexcept:
    """Write ``m`` as one record at ``dst`` (``total`` bytes, from ``message_length``); TOTALSIZE goes last.
    ``release_gil``: see ``encode_with_body``."""
    cdef bytes body = m._body           # held: another thread may replace m._body while a big body is copied
    encode_with_body(dst, m, PyBytes_AS_STRING(body), PyBytes_GET_SIZE(body), m.body_crc(), total,
                     queue_offset, phy_offset, m._born_timestamp, store_ts, store_host, store_flag, release_gil)


cdef void encode_with_body(unsigned char *dst, Message m, const char *body, Py_ssize_t body_len, int32_t body_crc,
                           int32_t total, int64_t queue_offset, int64_t phy_offset, int64_t born_ts,
                           int64_t store_ts, const unsigned char *store_host, int32_t store_flag,
                           bint release_gil) noexcept:
    """``encode_message`` with every field from ``m`` but the body, its CRC and the born time (a batch built
    from bodies shares one template message and has its own born time; ``total`` counts this body).

    ``release_gil``: copy a body of 256 KiB or more without the GIL, so other threads run meanwhile. Whatever
    they do to ``m`` then, the record is the message as it was on entry: the encoded topic, properties, host
    and version are taken (and held) before anything is written. The caller holds ``body`` and must not pass
    True when a later record's size depends on objects other threads can change (a batch of messages)."""
    cdef bytes born_host_b = m._born_host_b, topic_b = m._topic_b, props_b = m._props_b
    cdef int version = m._version
    cdef int32_t sys_flag = m._sys_flag | store_flag
    cdef int32_t bhl = <int32_t>PyBytes_GET_SIZE(born_host_b)
    cdef int32_t shl = IPV6_HOST_SIZE if store_flag else IPV4_HOST_SIZE
    cdef Py_ssize_t topic_len = PyBytes_GET_SIZE(topic_b)
    cdef Py_ssize_t props_len = PyBytes_GET_SIZE(props_b)
    cdef unsigned char *q
    put_i32(dst + AT_MAGIC, MESSAGE_MAGIC_CODE_V2 if version == 2 else MESSAGE_MAGIC_CODE)
    put_i32(dst + AT_BODYCRC, body_crc)
    put_i32(dst + AT_QUEUEID, m._queue_id)
    put_i32(dst + AT_FLAG, m._flag)
    put_i64(dst + AT_QUEUEOFFSET, queue_offset)
    put_i64(dst + AT_PHYSICALOFFSET, phy_offset)
    put_i32(dst + AT_SYSFLAG, sys_flag)
    put_i64(dst + AT_BORNTIMESTAMP, born_ts)
    memcpy(dst + AT_BORNHOST, PyBytes_AS_STRING(born_host_b), bhl)
    q = dst + AT_BORNHOST + bhl
    put_i64(q, store_ts)
    q += 8
    memcpy(q, store_host, shl)
    q += shl
    put_i32(q, m._reconsume_times)
    q += 4
    put_i64(q, m._prepared_transaction_offset)
    q += 8
    put_i32(q, <int32_t>body_len)
    q += 4
    _copy_body(q, body, body_len, release_gil)
    q += body_len
    if version == 2:
        put_i16(q, <short>topic_len)
        q += 2
    else:
        q[0] = <unsigned char>topic_len
        q += 1
    memcpy(q, PyBytes_AS_STRING(topic_b), topic_len)
    q += topic_len
    put_i16(q, <short>props_len)
    q += 2
    memcpy(q, PyBytes_AS_STRING(props_b), props_len)
    store_i32_release(dst, total)


cdef void write_blank(unsigned char *dst, int32_t max_blank) noexcept nogil:
    put_i32(dst + AT_MAGIC, BLANK_MAGIC_CODE)
    store_i32_release(dst, max_blank)


cdef int32_t check_record(const unsigned char *p, int64_t remaining, bint check_crc,
                          RecordView *v) noexcept nogil:
    """Is there a whole, valid record at ``p``? Its size, or a REC_* code (RocketMQ's
    ``checkMessageAndReturnSize``, with corruption and a clean end told apart)."""
    cdef int32_t total, magic, bhl, shl, pos
    if remaining < 8:
        return REC_END
    total = load_i32_acquire(p)
    if total == 0:
        return REC_END
    magic = get_i32(p + AT_MAGIC)
    v.total_size = total
    v.magic = magic
    if magic == BLANK_MAGIC_CODE:
        return REC_BLANK
    if magic != MESSAGE_MAGIC_CODE and magic != MESSAGE_MAGIC_CODE_V2:
        return REC_BAD_MAGIC
    if total < MIN_RECORD_SIZE:
        return REC_BAD_LENGTH
    if total > remaining:
        return REC_SHORT
    read_unit_fields(p, v)
    read_other_fixed(p, v)
    v.sys_flag = get_i32(p + AT_SYSFLAG)
    bhl = host_len(v.sys_flag, BORNHOST_V6_FLAG)
    shl = host_len(v.sys_flag, STOREHOSTADDRESS_V6_FLAG)
    # the fields up to BODYLENGTH, whose places depend on the hosts' sizes
    if total < AT_BORNHOST + bhl + 8 + shl + 4 + 8:
        return REC_BAD_LENGTH
    v.born_host_pos = AT_BORNHOST
    v.born_host_len = bhl
    pos = AT_BORNHOST + bhl
    v.store_ts = get_i64(p + pos)
    pos += 8
    v.store_host_pos = pos
    v.store_host_len = shl
    pos += shl
    v.reconsume_times = get_i32(p + pos)
    pos += 4
    v.prepared_tx_offset = get_i64(p + pos)
    pos += 8
    # From here every length comes from the record: each is checked against TOTALSIZE before it is used.
    pos = check_lengths(p, total, pos, magic == MESSAGE_MAGIC_CODE_V2, v)
    if pos != 0:
        return pos
    if check_crc and v.body_len > 0:
        if <int32_t>(ps_fast_crc32(p + v.body_pos, v.body_len) & 0x7FFFFFFF) != v.body_crc:
            return REC_BAD_CRC
    return total


cdef bint find_property(const unsigned char *props, int32_t n, const char *name, int32_t name_len,
                        int32_t *vpos, int32_t *vlen) noexcept nogil:
    """Find ``name`` in a properties string with RocketMQ 5.x's decoding rules (an item needs a name and
    a non-empty value; the last duplicate wins, as in the Java HashMap it is decoded into)."""
    return find_properties(props, n, name, name_len, vpos, vlen, NULL, 0, NULL, NULL) & 1


cdef int find_properties(const unsigned char *props, int32_t n, const char *name1, int32_t len1,
                         int32_t *vpos1, int32_t *vlen1, const char *name2, int32_t len2, int32_t *vpos2,
                         int32_t *vlen2) noexcept nogil:
    """``find_property`` of two names in one pass (``name2`` NULL: one): bit 0 set when ``name1`` was found,
    bit 1 when ``name2`` was. The items are those of the one splitter, ``_props.next_prop``."""
    cdef Py_ssize_t at = 0
    cdef Py_ssize_t item[4]
    cdef int found = 0
    while next_prop(props, n, &at, item):
        if item[1] == len1 and memcmp(props + item[0], name1, len1) == 0:
            vpos1[0] = <int32_t>item[2]
            vlen1[0] = <int32_t>item[3]
            found |= 1
        elif name2 != NULL and item[1] == len2 and memcmp(props + item[0], name2, len2) == 0:
            vpos2[0] = <int32_t>item[2]
            vlen2[0] = <int32_t>item[3]
            found |= 2
    return found


cdef int64_t tags_code_of(const unsigned char *rec, RecordView *v) noexcept nogil:
    """The consume-queue tags code of a checked record: Java hashCode of TAGS, 0 without tags."""
    cdef int32_t vp = 0, vl = 0
    if v.props_len > 0 and find_property(rec + v.props_pos, v.props_len, "TAGS", 4, &vp, &vl):
        return java_hash_utf8(rec + v.props_pos + vp, vl)
    return 0


cdef inline MessageExt _new_ext(bytes raw, int32_t base, RecordView *v, bytes body, bint split):
    cdef MessageExt e = MessageExt.__new__(MessageExt)
    e._raw = raw
    e._base = base
    e._v = v[0]
    e._body = body
    e._split = split
    return e


cdef MessageExt make_ext(const unsigned char *p, RecordView *v):
    """A ``MessageExt`` with its own copy of the checked record at ``p``. A body of ``SPLIT_BODY`` bytes or more
    is copied once, into the body; the rest of the record goes into ``raw`` (which puts the record together
    again when asked): a reader that skips big bodies does not pay for copying them twice."""
    cdef bytes rest
    cdef int32_t head, tail
    if v.body_len < SPLIT_BODY:
        return make_ext_shared(PyBytes_FromStringAndSize(<const char *>p, v.total_size), 0, v)
    head = v.body_pos
    tail = v.total_size - v.body_pos - v.body_len
    rest = PyBytes_FromStringAndSize(NULL, head + tail)
    memcpy(PyBytes_AS_STRING(rest), p, head)
    memcpy(PyBytes_AS_STRING(rest) + head, p + head + v.body_len, tail)
    return _new_ext(rest, 0, v, PyBytes_FromStringAndSize(<const char *>p + v.body_pos, v.body_len), True)


cdef MessageExt make_ext_shared(bytes buf, int32_t base, RecordView *v):
    """A ``MessageExt`` of the checked record that starts ``base`` bytes into ``buf`` (a copy it may share
    with the records next to it)."""
    return _new_ext(buf, base, v, PyBytes_FromStringAndSize(PyBytes_AS_STRING(buf) + base + v.body_pos, v.body_len),
                    False)


cdef inline bint _topic_bytes_ok(const unsigned char *t, int32_t n) noexcept nogil:
    # A stored topic passed the put rules ([%|a-zA-Z0-9_-]); a NUL or a path separator in it is damage the
    # body CRC cannot see, and would otherwise become a consume-queue folder name.
    cdef int32_t i
    if n <= 0:
        return False
    for i in range(n):
        if t[i] == 0 or t[i] == 0x2F:
            return False
    return True


cdef void _tally(QueueTallyC *t, const unsigned char *rec, RecordView *v, int64_t phy) noexcept nogil:
    """Count the record at commit-log offset ``phy`` for its queue, if it enters one (not a prepared or
    rolled-back transaction record). Records of one queue come in runs, so the previous slot is tried first."""
    cdef const unsigned char *topic = rec + v.topic_pos
    cdef TallySlot *s
    cdef uint64_t h = 14695981039346656037ULL
    cdef int32_t i
    if not enters_queue(v.sys_flag) or t.overflow:
        return
    if t.last >= 0:
        s = &t.slots[t.last]
        if s.queue_id == v.queue_id and s.topic_len == v.topic_len and memcmp(s.topic, topic, v.topic_len) == 0:
            if v.queue_offset > s.max_queue_offset:
                s.max_queue_offset = v.queue_offset
            return
    if v.topic_len <= 0 or v.topic_len > TALLY_TOPIC_MAX:
        t.overflow = True
        return
    for i in range(v.topic_len):                  # FNV-1a over the topic, then the queue id
        h = (h ^ topic[i]) * 1099511628211ULL
    h = (h ^ <uint64_t><uint32_t>v.queue_id) * 1099511628211ULL
    i = <int32_t>(h & <uint64_t>t.mask)
    while True:
        s = &t.slots[i]
        if s.topic_len == 0:
            if (t.used + 1) * 4 > (t.mask + 1) * 3:
                t.overflow = True
                return
            t.used += 1
            s.hash = h
            s.queue_id = v.queue_id
            s.topic_len = v.topic_len
            memcpy(s.topic, topic, v.topic_len)
            s.first_phy = phy
            s.max_queue_offset = v.queue_offset
            break
        if s.hash == h and s.queue_id == v.queue_id and s.topic_len == v.topic_len \
                and memcmp(s.topic, topic, v.topic_len) == 0:
            if v.queue_offset > s.max_queue_offset:
                s.max_queue_offset = v.queue_offset
            break
        i = (i + 1) & t.mask
    t.last = i


cdef int64_t scan_records(const unsigned char *base, int64_t start, int64_t limit, bint check_crc,
                          int32_t *reason, int64_t *count, int64_t *last_store_ts,
                          QueueTallyC *tally) noexcept nogil:
    """Walk whole records from ``start``; return the end of the last valid one. ``reason`` tells why the
    walk stopped (REC_BLANK at the file's blank, REC_END at clean end, or the corruption found). With a
    ``tally``, each valid record is counted for its queue (see ``QueueTallyC``)."""
    cdef RecordView v
    cdef int64_t pos = start
    cdef int32_t r
    while True:
        r = check_record(base + pos, limit - pos, check_crc, &v)
        if r > 0 and check_crc and (base[pos + (v.props_pos + v.props_len if v.props_len > 0
                                                else v.topic_pos + v.topic_len) - 1] == 0
                                    or not _topic_bytes_ok(base + pos + v.topic_pos, v.topic_len)):
            # The last byte of the properties (0x02 as written) or, without properties, of the topic is
            # never zero: zeros there are a lost page (a power cut before the flush) with the header and the
            # body intact, which neither the sizes nor the body CRC can see. The record is torn.
            reason[0] = REC_SHORT
            return pos
        if r > 0:
            if tally != NULL:
                _tally(tally, base + pos, &v, tally.file_from + pos)
            pos += r
            count[0] += 1
            last_store_ts[0] = v.store_ts
            continue
        reason[0] = r
        return pos


cdef int64_t find_next_record(const unsigned char *base, int64_t start, int64_t magic_below, int64_t limit,
                              int64_t file_from) noexcept nogil:
    """The first position >= ``start`` holding a whole valid record (CRC checked, within ``limit``) that also
    names its own place (PHYSICALOFFSET == ``file_from`` + position) and whose magic code lies below
    ``magic_below``, or -1. Tells a torn tail (nothing valid after the damage) from damage in the middle of the
    log. The magic code's four bytes are never zero, so a caller that knows where the file holds data
    (``_records.find_valid_record_after``) looks for magic codes only there, while the records they start
    are checked against all of the file: the rest of a record may lie in blocks the file system reports as
    holes (zeros of its body in a sparse copy, a page lost to a power cut)."""
    cdef const unsigned char *p
    cdef const unsigned char *hit
    cdef int64_t pos = start
    cdef RecordView v
    if magic_below > limit:
        magic_below = limit
    while pos + 8 <= limit and pos + 8 <= magic_below:
        hit = <const unsigned char *>memchr(base + pos + 4, 0xDA, magic_below - pos - 4)
        if hit == NULL:
            return -1
        pos = (hit - base) - 4
        p = hit
        if (pos + 8 <= magic_below and pos + MIN_RECORD_SIZE <= limit and p[1] == 0xA3 and p[2] == 0x20
                and (p[3] == 0xA7 or p[3] == 0xAB)):
            if get_i64(base + pos + AT_PHYSICALOFFSET) == file_from + pos and check_record(base + pos, limit - pos, True, &v) > 0:
                return pos
        pos += 1
    return -1


# ----------------------------------------------------------------------------------------------
# Python face, for tools and tests
# ----------------------------------------------------------------------------------------------

def body_crc(data):
    """RocketMQ's body CRC of ``data``: ``crc32(data) & 0x7FFFFFFF``."""
    cdef const unsigned char[::1] b = memoryview(data).cast("B")
    if b.shape[0] == 0:
        return 0
    return body_crc32(&b[0], b.shape[0])


def calc_msg_length(int version, int sys_flag, int body_len, int topic_len, int props_len):
    """RocketMQ's ``calMsgLength(version, sysFlag, bodyLength, topicLength, propertiesLength)``."""
    return cal_msg_length(version, sys_flag, body_len, topic_len, props_len)


def record_length(Message msg, store_host=("127.0.0.1", 10911)):
    """The size of ``msg`` stored with this store host."""
    cdef bint v6 = False
    encode_host(store_host, &v6)
    return message_length(msg, STOREHOSTADDRESS_V6_FLAG if v6 else 0)


def encode_record(Message msg, long long queue_offset=0, long long commit_log_offset=0,
                  long long store_timestamp=0, store_host=("127.0.0.1", 10911)):
    """``msg`` as the bytes of one stored record (for tests and tools; the store encodes in place)."""
    cdef bint v6 = False
    cdef bytes sh = encode_host(store_host, &v6)
    cdef int32_t flag = STOREHOSTADDRESS_V6_FLAG if v6 else 0
    cdef int32_t n = message_length(msg, flag)
    cdef bytes out
    if len(msg._props_b) > 32767 or len(msg._topic_b) > (32767 if msg._version == 2 else 255):
        raise ValueError("the record format cannot hold this message (topic of %d bytes, properties of %d)"
                         % (len(msg._topic_b), len(msg._props_b)))
    out = PyBytes_FromStringAndSize(NULL, n)
    encode_message(<unsigned char *>PyBytes_AS_STRING(out), msg, n, queue_offset, commit_log_offset,
                   store_timestamp, <const unsigned char *>PyBytes_AS_STRING(sh), flag, False)
    return out


def check_record_at(data, Py_ssize_t offset=0, bint verify_crc=True):
    """The size of the valid record at ``offset``, or a negative/zero ``RECORD_*`` code."""
    cdef const unsigned char[::1] b = memoryview(data).cast("B")
    cdef RecordView v
    if offset < 0 or offset > b.shape[0]:
        raise IndexError("offset %d outside a buffer of %d bytes" % (offset, b.shape[0]))
    if offset == b.shape[0]:
        return REC_END
    return check_record(&b[offset], b.shape[0] - offset, verify_crc, &v)


def decode_record(data, Py_ssize_t offset=0, bint verify_crc=False, str source="<buffer>",
                  long long base_offset=0):
    """Decode the record at ``offset`` into a ``MessageExt``; raises ``StoreCorruptedError`` naming
    ``source`` and ``base_offset + offset`` if there is no valid record there."""
    cdef const unsigned char[::1] b = memoryview(data).cast("B")
    cdef RecordView v
    cdef int32_t r
    if offset < 0 or offset >= b.shape[0]:
        raise StoreCorruptedError(source, base_offset + offset, REASONS[REC_END])
    r = check_record(&b[offset], b.shape[0] - offset, verify_crc, &v)
    if r <= 0:
        raise StoreCorruptedError(source, base_offset + offset, REASONS[r])
    return make_ext(&b[offset], &v)


def scan(data, Py_ssize_t start=0, end=None, bint verify_crc=True):
    """Walk records from ``start``: ``(valid_end, reason, count, last_store_timestamp)``.

    ``reason`` is ``RECORD_BLANK``, ``RECORD_END`` or the corruption that stopped the walk. The walk runs
    without the GIL."""
    cdef const unsigned char[::1] b = memoryview(data).cast("B")
    cdef int64_t limit = b.shape[0] if end is None else min(<int64_t>end, <int64_t>b.shape[0])
    cdef int32_t reason = REC_END
    cdef int64_t count = 0, last_ts = -1, pos
    if start < 0 or start > limit:
        raise IndexError("start %d outside [0, %d]" % (start, limit))
    if limit == 0:
        return (0, REC_END, 0, -1)
    with nogil:
        pos = scan_records(&b[0], start, limit, verify_crc, &reason, &count, &last_ts, NULL)
    return (pos, reason, count, last_ts)


def tags_code(data, Py_ssize_t offset=0):
    """The tags code (Java hashCode of TAGS) of the record at ``offset``."""
    cdef const unsigned char[::1] b = memoryview(data).cast("B")
    cdef RecordView v
    cdef int32_t r
    if offset < 0 or offset >= b.shape[0]:
        raise IndexError("offset %d outside a buffer of %d bytes" % (offset, b.shape[0]))
    r = check_record(&b[offset], b.shape[0] - offset, False, &v)
    if r <= 0:
        raise ValueError(REASONS[r])
    return tags_code_of(&b[offset], &v)
