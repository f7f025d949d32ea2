# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The row encoders of the Arrow decoder: one accepted record's fields appended to the column buffers of
``_arrow.BatchBuilder`` (``Dec``), in C without the GIL, so that the decode worker (``_decode_worker``) can run
them; the buffers have room already (``BatchBuilder._room``, tested by ``fits``), so nothing is tested per write.

Only the columns asked for are written (``Dec.cols``; all of them: ``every``, a constant in the loop's copy for
it). Strings are UTF-8 with invalid sequences replaced by U+FFFD (maximal subparts, as Java and Python do), so
Arrow always gets valid UTF-8. The properties map follows RocketMQ 5.x's decoder (an item needs a name and a
value; the last duplicate wins); ``keys`` is the ``KEYS`` property split on spaces (empty tokens dropped);
``tags`` is null without a ``TAGS`` property. Hosts are ``address:port`` (IPv6 ``[address]:port``, compressed
like ``ipaddress``), the last host and topic kept formatted; ``msg_id`` is the offset message id (docs/format.md
§1.8), written from a table of hex digit pairs; timestamps are microseconds since the epoch, UTC, or
milliseconds (``Dec.ts_ms``).

A window of deferred records (``decode_job``) copies its bodies with their CRCs a few at a time (the CRC is
checked up to the first wrong one); with text columns the window splits between two threads: the scan's thread
places the bodies (``place_bodies``) while the worker builds the other columns (``rest_job``). The text
formatting of fields (UTF-8 repair, hosts, numbers, properties items) is ``_textfmt.pxd``.
"""

from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t
from libc.string cimport memcmp, memcpy

from pystore.format._bytes cimport body_crc32
from pystore.format._record cimport RecordView
from pystore.read._sink cimport Pending, complete_plain, same_bytes
from pystore.format._props cimport find_byte
from pystore.columns._textfmt cimport fmt_host, ms_to_us, parse_props, utf8_fix

cdef extern from "crc32.h":
    uint32_t ps_copy_crc32(unsigned char *dst, const unsigned char *src, size_t n) noexcept nogil


cdef enum:
    # the bodies a window's decoding copies (and takes the CRC of) at a time
    CRC_GROUP = 4
    # how _decode finds the body: to copy, or copied already
    BODY_COPY = 0
    BODY_PLACED = 1


# two upper-case hex digits of each byte value: a message id is written two digits at a time
cdef unsigned char HEX_PAIRS[512]


cdef void _fill_hex_pairs():
    cdef const char *digits = b"0123456789ABCDEF"
    cdef int i
    for i in range(256):
        HEX_PAIRS[2 * i] = digits[i >> 4]
        HEX_PAIRS[2 * i + 1] = digits[i & 0xF]


_fill_hex_pairs()


cdef inline void hex_bytes(unsigned char *out, const unsigned char *p, int n) noexcept nogil:
    cdef int i
    for i in range(n):
        memcpy(out + 2 * i, &HEX_PAIRS[2 * p[i]], 2)


cdef inline void hex_i64(unsigned char *out, int64_t x) noexcept nogil:
    """The 16 hex digits of ``x`` as its big-endian bytes (an offset message id's tail)."""
    cdef uint64_t u = <uint64_t>x
    cdef int i
    for i in range(7, -1, -1):
        memcpy(out + 2 * i, &HEX_PAIRS[2 * (u & 0xFF)], 2)
        u >>= 8


# the property names ``TAGS`` and ``KEYS`` as the 4-byte words they are in a properties string
cdef uint32_t TAGS_WORD, KEYS_WORD
memcpy(&TAGS_WORD, <const char *>b"TAGS", 4)
memcpy(&KEYS_WORD, <const char *>b"KEYS", 4)


# ----------------------------------------------------------------------------------------------------
# Decoding: C on ``Dec`` without the GIL (the decode worker runs it), into buffers ``BatchBuilder._room`` made
# room in
# ----------------------------------------------------------------------------------------------------

cdef void decode_row(Dec *d, const unsigned char *p, RecordView *v) noexcept nogil:
    # one copy of the row's decoding for all the columns, one for some (``every`` a constant in each)
    if d.every:
        _decode(d, p, v, BODY_COPY, True)
    else:
        _decode(d, p, v, BODY_COPY, False)


cdef bint fits(Dec *d, int64_t n, int64_t body, int64_t topic, int64_t props) noexcept nogil:
    """``BatchBuilder._room`` has nothing to do (its bounds)."""
    cdef Buf *b = d.bufs
    cdef int64_t host = 48 * n + 64
    if not d.every:
        return _fits_some(d, n, body, topic, props)
    if (d.rows + n > d.cap_rows or b[B_BODY].n + body > b[B_BODY].cap
            or b[B_TOPIC].n + 3 * topic + 32 > b[B_TOPIC].cap or b[B_BH].n + host > b[B_BH].cap
            or b[B_SH].n + host > b[B_SH].cap or b[B_ID].n + host > b[B_ID].cap):
        return False
    return props <= 0 or _props_fit(b, n, props)


cdef bint _fits_some(Dec *d, int64_t n, int64_t body, int64_t topic, int64_t props) noexcept nogil:
    """``fits`` for a builder of some columns: only the buffers they write are tested."""
    cdef Buf *b = d.bufs
    cdef int64_t host = 48 * n + 64
    if d.rows + n > d.cap_rows:
        return False
    if on(d, B_BODY) and b[B_BODY].n + body > b[B_BODY].cap:
        return False
    if on(d, B_TOPIC) and b[B_TOPIC].n + 3 * topic + 32 > b[B_TOPIC].cap:
        return False
    if ((on(d, B_BH) and b[B_BH].n + host > b[B_BH].cap) or (on(d, B_SH) and b[B_SH].n + host > b[B_SH].cap)
            or (on(d, B_ID) and b[B_ID].n + host > b[B_ID].cap)):
        return False
    return props <= 0 or not on(d, B_PK) or _props_fit(b, n, props)


cdef inline bint _props_fit(Buf *b, int64_t n, int64_t props) noexcept nogil:
    """Room for ``n`` rows' ``props`` bytes of properties in the property, tags and keys buffers."""
    return not (b[B_TAGS].n + 3 * props > b[B_TAGS].cap or b[B_KEYS].n + 3 * props > b[B_KEYS].cap
                or b[B_PK].n + 3 * props > b[B_PK].cap or b[B_PV].n + 3 * props > b[B_PV].cap
                or b[B_KEYS_O].n + 4 * (props + n) > b[B_KEYS_O].cap
                or b[B_PK_O].n + 4 * (props + n) > b[B_PK_O].cap
                or b[B_PV_O].n + 4 * (props + n) > b[B_PV_O].cap)


cdef void decode_job(void *arg) noexcept nogil:
    """Decode a window of deferred records in order, up to the first whose body CRC is wrong (with ``crc``).

    With ``crc``, the bodies of ``CRC_GROUP`` records are copied into place and their CRCs taken one after the
    other before the group is decoded: a short body's CRC is a chain of dependent carry-less multiplications,
    and independent chains back to back run side by side in the CPU."""
    cdef Job *j = <Job *>arg
    # one copy of the loop for all the columns, one for some (``every`` a constant in each)
    if j.d.every:
        _decode_window(j, True, False)
    else:
        _decode_window(j, False, False)


cdef inline void _decode_window(Job *j, bint every, bint bodies) noexcept nogil:
    """``decode_job``'s loop (``bodies`` False: whole rows from ``d.rows``), and ``place_bodies``' (``bodies``:
    only the bodies, rows from ``j.row0``); both flags are constants where it is inlined."""
    cdef Dec *d = j.d
    cdef Buf *body = &d.bufs[B_BODY]
    cdef int64_t i = 0, k, g, off, nbytes = 0
    cdef Pending *q = j.recs
    cdef RecordView *v
    cdef uint32_t crcs[CRC_GROUP]
    cdef bint copy = every or on(d, B_BODY)
    cdef int how = BODY_PLACED if j.crc else BODY_COPY
    while i < j.n:
        g = min(<int64_t>CRC_GROUP, j.n - i)
        for k in range(g):
            complete_plain(q[i + k].rec, &q[i + k].v)
        if j.crc:
            off = body.n
            for k in range(g):
                v = &q[i + k].v
                if copy:
                    crcs[k] = ps_copy_crc32(body.p + off, q[i + k].rec + v.body_pos, v.body_len) & 0x7FFFFFFF
                else:
                    # no body column: the CRC is still checked, on the record itself
                    crcs[k] = <uint32_t>body_crc32(q[i + k].rec + v.body_pos, v.body_len)
                off += v.body_len
        for k in range(g):
            v = &q[i + k].v
            if j.crc and v.body_len > 0 and <int32_t>crcs[k] != v.body_crc:
                j.done = i + k
                j.done_bytes = nbytes
                return
            if bodies:
                _decode_body(d, q[i + k].rec, v, j.row0 + i + k, how, every)
            else:
                _decode(d, q[i + k].rec, v, how, every)
            nbytes += v.total_size
        i += g
    j.done = j.n
    j.done_bytes = nbytes


cdef inline void _decode(Dec *d, const unsigned char *p, RecordView *v, int body, bint every) noexcept nogil:
    """Append one accepted record to the columns asked for (``every``: all of them, the tests folded away by the
    compiler), its body copied (``BODY_COPY``) or there already (``BODY_PLACED``: ``decode_job`` copied it
    with its CRC)."""
    cdef int64_t r = d.rows
    _decode_body(d, p, v, r, body, every)
    _decode_rest(d, p, v, r, every)
    d.rows = r + 1


cdef inline void _decode_body(Dec *d, const unsigned char *p, RecordView *v, int64_t r, int body,
                              bint every) noexcept nogil:
    """Row ``r``'s body (``_decode``'s first part)."""
    cdef Buf *b = d.bufs
    if every or d.cols & (1 << C_BODY):
        if body == BODY_COPY:
            memcpy(b[B_BODY].p + b[B_BODY].n, p + v.body_pos, v.body_len)
        b[B_BODY].n += v.body_len
        (<int32_t *>b[B_BODY_O].p)[r + 1] = <int32_t>b[B_BODY].n


cdef inline void _decode_rest(Dec *d, const unsigned char *p, RecordView *v, int64_t r, bint every) noexcept nogil:
    """Row ``r``'s columns but the body (``_decode``'s second part; the worker's share of a split window)."""
    cdef Buf *b = d.bufs
    cdef int64_t phy = v.phy_offset
    cdef int32_t hl2
    cdef uint32_t cols = d.cols
    cdef HostCache *sc = &d.store_cache
    cdef unsigned char *dst
    # fixed-width columns (the others tested as a group first: a projection names few)
    if every or cols & (1 << C_QOFF):
        (<int64_t *>b[B_QOFF].p)[r] = v.queue_offset
    if every or cols & FIXED_COLS:
        if every or cols & (1 << C_QID):
            (<int32_t *>b[B_QID].p)[r] = v.queue_id
        if every or cols & (1 << C_CLO):
            (<int64_t *>b[B_CLO].p)[r] = phy
        if every or cols & (1 << C_SIZE):
            (<int32_t *>b[B_SIZE].p)[r] = v.total_size
        if every or cols & (1 << C_FLAG):
            (<int32_t *>b[B_FLAG].p)[r] = v.flag
        if every or cols & (1 << C_SYS):
            (<int32_t *>b[B_SYS].p)[r] = v.sys_flag
        if every or cols & (1 << C_BORN):
            (<int64_t *>b[B_BORN].p)[r] = v.born_ts if d.ts_ms else ms_to_us(v.born_ts)
        if every or cols & (1 << C_STORE):
            (<int64_t *>b[B_STORE].p)[r] = v.store_ts if d.ts_ms else ms_to_us(v.store_ts)
        if every or cols & (1 << C_RC):
            (<int32_t *>b[B_RC].p)[r] = v.reconsume_times
        if every or cols & (1 << C_PREP):
            (<int64_t *>b[B_PREP].p)[r] = v.prepared_tx_offset
        if every or cols & (1 << C_CRC):
            (<int32_t *>b[B_CRC].p)[r] = v.body_crc
    if every or cols & TEXT_COLS:
        if every or cols & (1 << C_TOPIC):
            put_topic(d, p + v.topic_pos, v.topic_len)
            (<int32_t *>b[B_TOPIC_O].p)[r + 1] = <int32_t>b[B_TOPIC].n
        # properties map, then TAGS and KEYS from it (a record without properties has none of them)
        if every or cols & PROPS_COLS:
            if v.props_len > 0:
                add_props(d, r, p + v.props_pos, v.props_len)
            else:
                d.tags_nulls += 1
                (<int32_t *>b[B_MAP_O].p)[r + 1] = <int32_t>d.n_items
                (<int32_t *>b[B_TAGS_O].p)[r + 1] = <int32_t>b[B_TAGS].n
                (<int32_t *>b[B_KEYS_LO].p)[r + 1] = <int32_t>d.n_keys
        # hosts and the offset message id
        if every or cols & (1 << C_BH):
            put_host(d, &d.born_cache, B_BH, p + v.born_host_pos, v.born_host_len)
            (<int32_t *>b[B_BH_O].p)[r + 1] = <int32_t>b[B_BH].n
        if every or cols & STORE_HOST_COLS:
            host_cached(sc, p + v.store_host_pos, v.store_host_len)
        if every or cols & (1 << C_SH):
            put_host_text(&b[B_SH], sc)
            (<int32_t *>b[B_SH_O].p)[r + 1] = <int32_t>b[B_SH].n
        if every or cols & (1 << C_ID):
            # the offset message id (docs/format.md §1.8): the store host's hex, kept with its text, then the
            # offset's, of which only the last four digits change between rows whose offsets differ in the low 16
            # bits only
            hl2 = 2 * sc.raw_len
            if (phy >> 16) != sc.id_high:
                hex_i64(sc.id + hl2, phy)
                sc.id_high = phy >> 16
            dst = b[B_ID].p + b[B_ID].n
            if hl2 == 16:
                memcpy(dst, sc.id, 32)
            else:
                memcpy(dst, sc.id, 64)
            memcpy(dst + hl2 + 12, &HEX_PAIRS[2 * ((phy >> 8) & 0xFF)], 2)
            memcpy(dst + hl2 + 14, &HEX_PAIRS[2 * (phy & 0xFF)], 2)
            b[B_ID].n += hl2 + 16
            (<int32_t *>b[B_ID_O].p)[r + 1] = <int32_t>b[B_ID].n


cdef void place_bodies(Job *j) noexcept nogil:
    """The first part of a split window (``BatchBuilder._fill_split``), in the scan's thread: each record's view
    completed, its body copied into place with its CRC taken (or the CRC alone without a body column), up to
    the first whose CRC is wrong (``j.done``), rows from ``j.row0``."""
    if j.d.every:
        _decode_window(j, True, True)
    else:
        _decode_window(j, False, True)


cdef void rest_job(void *arg) noexcept nogil:
    """The second part of a split window: every column but the body, rows ``row0`` on (the decode worker runs
    it, or the scan's thread when the worker is not free)."""
    cdef Job *j = <Job *>arg
    cdef int64_t i
    if j.d.every:
        for i in range(j.n):
            _decode_rest(j.d, j.recs[i].rec, &j.recs[i].v, j.row0 + i, True)
    else:
        for i in range(j.n):
            _decode_rest(j.d, j.recs[i].rec, &j.recs[i].v, j.row0 + i, False)


cdef void _add_props(Dec *d, int64_t r, const unsigned char *props, int32_t props_len) noexcept nogil:
    """Row ``r``'s properties map, tags and keys, from its properties string."""
    cdef Buf *b = d.bufs
    cdef int32_t *items = d.items
    cdef int32_t cnt, i, t, s, e, tags_at, keys_at
    cdef uint32_t word
    cnt = parse_props(props, props_len, items)
    for i in range(cnt):
        put_utf8(&b[B_PK], props + items[4 * i], items[4 * i + 1])
        put_utf8(&b[B_PV], props + items[4 * i + 2], items[4 * i + 3])
        d.n_items += 1
        (<int32_t *>b[B_PK_O].p)[d.n_items] = <int32_t>b[B_PK].n
        (<int32_t *>b[B_PV_O].p)[d.n_items] = <int32_t>b[B_PV].n
    b[B_PK_O].n += 4 * cnt
    b[B_PV_O].n += 4 * cnt
    (<int32_t *>b[B_MAP_O].p)[r + 1] = <int32_t>d.n_items
    # TAGS and KEYS in one pass over the items, names compared as one 4-byte word
    tags_at = keys_at = -1
    for i in range(cnt):
        if items[4 * i + 1] == 4:
            memcpy(&word, props + items[4 * i], 4)
            if word == TAGS_WORD:
                tags_at = i
            elif word == KEYS_WORD:
                keys_at = i
    if tags_at >= 0:
        put_utf8(&b[B_TAGS], props + items[4 * tags_at + 2], items[4 * tags_at + 3])
        b[B_TAGS_V].p[r >> 3] |= <unsigned char>(1 << (r & 7))
    else:
        d.tags_nulls += 1
    (<int32_t *>b[B_TAGS_O].p)[r + 1] = <int32_t>b[B_TAGS].n
    if keys_at >= 0:
        # the value split on spaces, empty tokens dropped
        s = items[4 * keys_at + 2]
        e = s + items[4 * keys_at + 3]
        while s < e:
            t = <int32_t>find_byte(props, s, e, 32)
            if t > s:
                put_utf8(&b[B_KEYS], props + s, t - s)
                d.n_keys += 1
                (<int32_t *>b[B_KEYS_O].p)[d.n_keys] = <int32_t>b[B_KEYS].n
                b[B_KEYS_O].n += 4
            s = t + 1
    (<int32_t *>b[B_KEYS_LO].p)[r + 1] = <int32_t>d.n_keys


# ``_add_props`` called through a pointer: the compiler then keeps it out of ``_decode``, whose rows without
# properties run faster without it inline
cdef void (*add_props)(Dec *, int64_t, const unsigned char *, int32_t) noexcept nogil
add_props = _add_props


cdef inline void put_utf8(Buf *b, const unsigned char *p, int32_t n) noexcept nogil:
    """Append ``p[:n]`` to ``b`` as valid UTF-8 (valid text is copied as is). A short ASCII text (the usual
    property) is tested and copied as two overlapping words; the room ``_room`` made (3 bytes a byte) holds
    them."""
    cdef uint64_t x, y
    cdef uint32_t a, c
    cdef unsigned char *d = b.p + b.n
    if 8 <= n <= 16:
        memcpy(&x, p, 8)
        memcpy(&y, p + n - 8, 8)
        if ((x | y) & <uint64_t>0x8080808080808080) == 0:
            memcpy(d, &x, 8)
            memcpy(d + n - 8, &y, 8)
            b.n += n
            return
    elif 4 <= n < 8:
        memcpy(&a, p, 4)
        memcpy(&c, p + n - 4, 4)
        if ((a | c) & <uint32_t>0x80808080) == 0:
            memcpy(d, &a, 4)
            memcpy(d + n - 4, &c, 4)
            b.n += n
            return
    b.n += utf8_fix(p, n, d)


cdef void _new_host(HostCache *c, const unsigned char *h, int32_t hlen) noexcept nogil:
    c.text_len = fmt_host(h, hlen, c.text)
    hex_bytes(c.id, h, hlen)
    c.id_high = -1
    memcpy(c.raw, h, hlen)
    c.raw_len = hlen


cdef inline void host_cached(HostCache *c, const unsigned char *h, int32_t hlen) noexcept nogil:
    """``c`` holds host ``h`` (rows mostly repeat a host: the last one formatted is kept)."""
    cdef uint64_t x, y
    if hlen == 8 and c.raw_len == 8:
        memcpy(&x, h, 8)
        memcpy(&y, c.raw, 8)
        if x != y:
            _new_host(c, h, hlen)
    elif hlen != c.raw_len or memcmp(c.raw, h, hlen) != 0:
        _new_host(c, h, hlen)


cdef inline void put_host(Dec *d, HostCache *c, int i, const unsigned char *h, int32_t hlen) noexcept nogil:
    """Append the text of host ``h``."""
    host_cached(c, h, hlen)
    put_host_text(&d.bufs[i], c)


cdef inline void put_host_text(Buf *b, HostCache *c) noexcept nogil:
    """Append the text of the host ``c`` holds."""
    # a fixed-size copy (vector moves, no call) of the text and what follows it in the cache
    if c.text_len <= 32:
        memcpy(b.p + b.n, c.text, 32)
    else:
        memcpy(b.p + b.n, c.text, 64)
    b.n += c.text_len


cdef inline void put_topic(Dec *d, const unsigned char *t, int32_t n) noexcept nogil:
    """Append topic ``t[:n]`` as valid UTF-8: a repeat of the last topic is copied from the cache."""
    cdef TextCache *c = &d.topic_cache
    cdef Buf *b = &d.bufs[B_TOPIC]
    if n > <int32_t>sizeof(c.raw):
        # longer than the cache holds (a V2 record's topic may be): written as it comes
        b.n += utf8_fix(t, n, b.p + b.n)
        c.raw_len = -1
        return
    if n != c.raw_len or not same_bytes(c.raw, t, n):
        memcpy(c.raw, t, n)
        c.raw_len = n
        c.text_len = <int32_t>utf8_fix(t, n, c.text)
    if c.text_len <= 32:
        memcpy(b.p + b.n, c.text, 32)
    else:
        memcpy(b.p + b.n, c.text, c.text_len)
    b.n += c.text_len
