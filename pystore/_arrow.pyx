# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Commit-log records straight into Arrow columns (the Spark data source's decoder, API.md "Spark").

A :class:`BatchBuilder` collects pointers to whole records (from a commit-log file range, or through a
consume queue's units), then builds one ``pyarrow.RecordBatch`` in two C passes:

1. sizing: each accepted record adds its byte counts (topic, body, tags, keys, properties, hosts, id);
2. filling: every column's buffers (validity where needed, int32 offsets and data for strings and
   binaries, list/map offsets, fixed-width values) are allocated once with ``pyarrow.allocate_buffer``
   and written in C loops; arrays are then wrapped with ``pyarrow.Array.from_buffers``.

No Python object is made per row. Strings are UTF-8 with invalid sequences replaced by U+FFFD (maximal
subparts, as Java and Python do), so Arrow always gets valid UTF-8. The properties map follows RocketMQ
5.x's decoder (an item needs a name and a value; the last duplicate wins); ``keys`` is the ``KEYS``
property split on spaces (empty tokens dropped); ``tags`` is null without a ``TAGS`` property. Hosts are
``address:port`` (IPv6 ``[address]:port``, compressed like ``ipaddress``); ``msg_id`` is the offset
message id (FORMAT.md §1.8); timestamps are microseconds since the epoch, UTC.

Also here, for the driver: :func:`split_points` (record boundaries of a commit-log file, from the record
headers, without CRC and without decoding) and :func:`queue_bounds` (a consume queue's min and max
offsets from its files, by binary search).

Everything reads read-only mappings and holds no lock: safe on a live store (a record's size is published
last, so a non-zero size means a whole record).
"""

cimport cython
from libc.stdint cimport INT64_MAX, INT64_MIN, int32_t, int64_t, uint8_t, uint16_t, uint64_t, uintptr_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcmp, memcpy, memset

from pystore._bytes cimport body_crc32, get_i32, get_i64, load_i32_acquire
from pystore._codec cimport (REC_BLANK, REC_END, REC_BAD_CRC, STOREHOSTADDRESS_V6_FLAG, RecordView,
                             check_record)
from pystore._mapped_file cimport MappedFile

import logging
import os

import pyarrow as pa

from pystore._codec import REASONS
from pystore.errors import StoreCorruptedError

log = logging.getLogger(__name__)

cdef int32_t FILLER = 0x7FFFFFFF
cdef int32_t UNIT = 20
cdef int32_t MAX_ITEMS = 16384          # properties of <= 32767 bytes hold at most ~8192 items

#: Column order of the data source (API.md "Spark").
COLUMNS = ("topic", "queue_id", "queue_offset", "commit_log_offset", "store_size", "body", "tags", "keys",
           "properties", "flag", "sys_flag", "born_timestamp", "store_timestamp", "born_host", "store_host",
           "reconsume_times", "prepared_transaction_offset", "body_crc", "msg_id")


# ----------------------------------------------------------------------------------------------------
# UTF-8 with replacement, hosts, ids
# ----------------------------------------------------------------------------------------------------

cdef Py_ssize_t utf8_fix(const unsigned char *p, Py_ssize_t n, unsigned char *dst) noexcept nogil:
    """Copy ``p[:n]`` to ``dst`` (when not NULL) with every invalid sequence replaced by U+FFFD (maximal
    subparts); return the output length (``n`` for valid input)."""
    cdef Py_ssize_t i = 0, o = 0, s
    cdef unsigned char c, lo, hi
    cdef int need, k
    while i < n:
        c = p[i]
        if c < 0x80:
            if dst != NULL:
                dst[o] = c
            o += 1
            i += 1
            continue
        lo = 0x80
        hi = 0xBF
        if 0xC2 <= c <= 0xDF:
            need = 1
        elif 0xE0 <= c <= 0xEF:
            need = 2
            if c == 0xE0:
                lo = 0xA0
            elif c == 0xED:
                hi = 0x9F
        elif 0xF0 <= c <= 0xF4:
            need = 3
            if c == 0xF0:
                lo = 0x90
            elif c == 0xF4:
                hi = 0x8F
        else:
            need = -1
        s = i
        i += 1
        k = 0
        if need > 0:
            while k < need:
                if i >= n or p[i] < lo or p[i] > hi:
                    break
                lo = 0x80
                hi = 0xBF
                i += 1
                k += 1
        if need > 0 and k == need:
            if dst != NULL:
                memcpy(dst + o, p + s, i - s)
            o += i - s
        else:
            if dst != NULL:
                dst[o] = 0xEF
                dst[o + 1] = 0xBF
                dst[o + 2] = 0xBD
            o += 3
    return o


cdef inline int fmt_int(char *out, int64_t v) noexcept nogil:
    """Decimal text of ``v``; returns its length."""
    cdef char tmp[24]
    cdef int n = 0, o = 0
    cdef uint64_t u
    if v < 0:
        out[0] = b'-'
        o = 1
        u = <uint64_t>(-(v + 1)) + 1
    else:
        u = <uint64_t>v
    while True:
        tmp[n] = <char>(48 + u % 10)
        n += 1
        u //= 10
        if u == 0:
            break
    while n > 0:
        n -= 1
        out[o] = tmp[n]
        o += 1
    return o


cdef inline int fmt_hex16(char *out, uint16_t v) noexcept nogil:
    """Lower-case hex of ``v`` without leading zeros (``ipaddress`` style)."""
    cdef const char *digits = b"0123456789abcdef"
    cdef int o = 0, shift = 12
    cdef bint started = False
    cdef int d
    while shift >= 0:
        d = (v >> shift) & 0xF
        if d != 0 or started or shift == 0:
            out[o] = digits[d]
            o += 1
            started = True
        shift -= 4
    return o


cdef int fmt_host(const unsigned char *h, int32_t hlen, char *out) noexcept nogil:
    """``a.b.c.d:port`` or ``[v6]:port`` (``out`` holds >= 64 bytes); returns the length."""
    cdef int o = 0, i, best = -1, best_len = 0, cur = -1, cur_len = 0
    cdef uint16_t hx[8]
    if hlen == 8:
        for i in range(4):
            o += fmt_int(out + o, h[i])
            out[o] = b'.' if i < 3 else b':'
            o += 1
        o += fmt_int(out + o, get_i32(h + 4))
        return o
    for i in range(8):
        hx[i] = <uint16_t>((h[2 * i] << 8) | h[2 * i + 1])
        if hx[i] == 0:
            if cur < 0:
                cur = i
                cur_len = 0
            cur_len += 1
            if cur_len > best_len:
                best = cur
                best_len = cur_len
        else:
            cur = -1
    if best_len < 2:
        best = -1
        best_len = 0
    out[0] = b'['
    o = 1
    i = 0
    while i < 8:
        if i == best:
            out[o] = b':'
            out[o + 1] = b':'
            o += 2
            i += best_len
            continue
        if i > 0 and not (best >= 0 and i == best + best_len):
            out[o] = b':'
            o += 1
        o += fmt_hex16(out + o, hx[i])
        i += 1
    out[o] = b']'
    out[o + 1] = b':'
    o += 2
    o += fmt_int(out + o, get_i32(h + 16))
    return o


cdef inline void fmt_id(unsigned char *out, const unsigned char *host, int32_t hlen, int64_t phy) noexcept nogil:
    """Offset message id: upper-case hex of the store host bytes then the commit-log offset."""
    cdef const char *digits = b"0123456789ABCDEF"
    cdef int i
    cdef uint64_t u = <uint64_t>phy
    for i in range(hlen):
        out[2 * i] = digits[host[i] >> 4]
        out[2 * i + 1] = digits[host[i] & 0xF]
    out += 2 * hlen
    for i in range(8):
        out[2 * (7 - i)] = digits[(u >> 4) & 0xF]
        out[2 * (7 - i) + 1] = digits[u & 0xF]
        u >>= 8


cdef int32_t parse_props(const unsigned char *p, int32_t n, int32_t *items) noexcept nogil:
    """Split a properties string into ``(name_pos, name_len, value_pos, value_len)`` items (RocketMQ 5.x:
    kept iff the name and the value are non-empty; the last duplicate of a name wins)."""
    cdef int32_t cnt = 0, start = 0, end, sep, i, j, k
    cdef bint dup
    while start < n:
        end = start
        while end < n and p[end] != 2:
            end += 1
        sep = start
        while sep < end and p[sep] != 1:
            sep += 1
        if sep > start and sep < end - 1 and cnt < MAX_ITEMS:
            items[4 * cnt] = start
            items[4 * cnt + 1] = sep - start
            items[4 * cnt + 2] = sep + 1
            items[4 * cnt + 3] = end - sep - 1
            cnt += 1
        start = end + 1
    if cnt > 1:
        k = 0
        for i in range(cnt):
            dup = False
            for j in range(i + 1, cnt):
                if items[4 * i + 1] == items[4 * j + 1] and \
                        memcmp(p + items[4 * i], p + items[4 * j], items[4 * i + 1]) == 0:
                    dup = True
                    break
            if not dup:
                if k != i:
                    memcpy(items + 4 * k, items + 4 * i, 4 * sizeof(int32_t))
                k += 1
        cnt = k
    return cnt


cdef inline int32_t find_item(const unsigned char *p, const int32_t *items, int32_t cnt, const char *name,
                              int32_t name_len) noexcept nogil:
    cdef int32_t i
    for i in range(cnt):
        if items[4 * i + 1] == name_len and memcmp(p + items[4 * i], name, name_len) == 0:
            return i
    return -1


cdef inline int64_t ms_to_us(int64_t ms) noexcept nogil:
    if ms > INT64_MAX // 1000:
        return INT64_MAX
    if ms < INT64_MIN // 1000:
        return INT64_MIN
    return ms * 1000


cdef inline unsigned char *buf_ptr(object buf):
    return <unsigned char *><uintptr_t>buf.address


# ----------------------------------------------------------------------------------------------------
# The batch builder
# ----------------------------------------------------------------------------------------------------

@cython.final
cdef class BatchBuilder:
    """Accepts records (pointers into mapped files the caller keeps open) and builds RecordBatches.

    ``BatchBuilder(schema, verify_crc=True, topics=None, queue_id=-1, start_ms=None, end_ms=None,
    max_rows=65536, max_bytes=64 MiB)``: ``schema`` is the exact ``pyarrow.Schema`` to produce (the
    data source's, with Spark's field types); the filters keep records of one of ``topics`` (a list of
    str), of ``queue_id`` (>= 0), stored in ``[start_ms, end_ms)``.
    """
    cdef object schema
    cdef readonly bint verify_crc
    cdef int32_t queue_id
    cdef int64_t start_ms, end_ms
    cdef list topics
    cdef int n_topics
    cdef const unsigned char **topic_ptr
    cdef int32_t *topic_len
    cdef readonly int64_t max_rows, max_bytes
    # pass-1 state
    cdef const unsigned char **recs
    cdef int64_t cap
    cdef readonly int64_t rows
    cdef int64_t topic_b, body_b, tags_b, tags_nulls, n_keys, keys_b, n_items, pk_b, pv_b, bh_b, sh_b, id_b
    cdef int64_t var_b
    cdef int32_t *items
    cdef readonly int64_t rows_total

    def __cinit__(self):
        self.recs = NULL
        self.items = NULL
        self.topic_ptr = NULL
        self.topic_len = NULL

    def __init__(self, schema, bint verify_crc=True, topics=None, int queue_id=-1, start_ms=None, end_ms=None,
                 long long max_rows=65536, long long max_bytes=64 << 20):
        cdef int i
        if list(schema.names) != list(COLUMNS):
            raise ValueError("the Arrow schema must have the columns %s in this order" % (COLUMNS,))
        self.schema = schema
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
        self.max_rows = max(1, max_rows)
        self.max_bytes = max(1, max_bytes)
        self.cap = 1024
        self.recs = <const unsigned char **>malloc(self.cap * sizeof(void *))
        self.items = <int32_t *>malloc(4 * MAX_ITEMS * sizeof(int32_t))
        if self.recs == NULL or self.items == NULL:
            raise MemoryError()
        self._reset()

    def __dealloc__(self):
        free(self.recs)
        free(self.items)
        free(self.topic_ptr)
        free(self.topic_len)

    cdef void _reset(self) noexcept:
        self.rows = 0
        self.topic_b = self.body_b = self.tags_b = self.tags_nulls = 0
        self.n_keys = self.keys_b = self.n_items = self.pk_b = self.pv_b = 0
        self.bh_b = self.sh_b = self.id_b = self.var_b = 0

    cdef inline bint full(self) noexcept:
        return self.rows >= self.max_rows or self.var_b >= self.max_bytes

    cdef inline bint wanted(self, const unsigned char *p, RecordView *v) noexcept nogil:
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

    cdef int add(self, const unsigned char *p, RecordView *v) except -1:
        """Size one accepted record (pass 1)."""
        cdef int32_t cnt, i, t, s, e
        cdef int64_t before = self.topic_b + self.body_b + self.tags_b + self.keys_b + self.pk_b + self.pv_b
        cdef const unsigned char *props = p + v.props_pos
        cdef char tmp[64]
        cdef const unsigned char **grown
        if self.rows == self.cap:
            grown = <const unsigned char **>realloc(self.recs, 2 * self.cap * sizeof(void *))
            if grown == NULL:
                raise MemoryError()
            self.recs = grown
            self.cap *= 2
        self.recs[self.rows] = p
        self.rows += 1
        self.topic_b += utf8_fix(p + v.topic_pos, v.topic_len, NULL)
        self.body_b += v.body_len
        cnt = parse_props(props, v.props_len, self.items)
        self.n_items += cnt
        for i in range(cnt):
            self.pk_b += utf8_fix(props + self.items[4 * i], self.items[4 * i + 1], NULL)
            self.pv_b += utf8_fix(props + self.items[4 * i + 2], self.items[4 * i + 3], NULL)
        i = find_item(props, self.items, cnt, "TAGS", 4)
        if i >= 0:
            self.tags_b += utf8_fix(props + self.items[4 * i + 2], self.items[4 * i + 3], NULL)
        else:
            self.tags_nulls += 1
        i = find_item(props, self.items, cnt, "KEYS", 4)
        if i >= 0:
            s = self.items[4 * i + 2]
            e = s + self.items[4 * i + 3]
            t = s
            while t <= e:
                if t == e or props[t] == 32:
                    if t > s:
                        self.n_keys += 1
                        self.keys_b += utf8_fix(props + s, t - s, NULL)
                    s = t + 1
                t += 1
        self.bh_b += fmt_host(p + v.born_host_pos, v.born_host_len, tmp)
        self.sh_b += fmt_host(p + v.store_host_pos, v.store_host_len, tmp)
        self.id_b += 2 * (v.store_host_len + 8)
        self.var_b += (self.topic_b + self.body_b + self.tags_b + self.keys_b + self.pk_b + self.pv_b) - before + 128
        return 0

    cdef int check_crc(self, const unsigned char *p, RecordView *v, str path, int64_t offset) except -1:
        if self.verify_crc and v.body_len > 0 and body_crc32(p + v.body_pos, v.body_len) != v.body_crc:
            raise StoreCorruptedError(path, offset, REASONS.get(REC_BAD_CRC))
        return 0

    def build(self):
        """The RecordBatch of the records added since the last build (pass 2); None when there are none."""
        cdef int64_t n = self.rows, r
        cdef RecordView v
        cdef const unsigned char *p
        cdef const unsigned char *props
        cdef int32_t cnt, i, t, s, e, k
        cdef char tmp[64]
        if n == 0:
            return None
        alloc = pa.allocate_buffer
        b_topic_o = alloc(4 * (n + 1)); b_topic = alloc(self.topic_b)
        b_qid = alloc(4 * n); b_qoff = alloc(8 * n); b_clo = alloc(8 * n); b_size = alloc(4 * n)
        b_body_o = alloc(4 * (n + 1)); b_body = alloc(self.body_b)
        b_tags_v = alloc((n + 7) // 8) if self.tags_nulls else None
        b_tags_o = alloc(4 * (n + 1)); b_tags = alloc(self.tags_b)
        b_keys_lo = alloc(4 * (n + 1)); b_keys_o = alloc(4 * (self.n_keys + 1)); b_keys = alloc(self.keys_b)
        b_map_o = alloc(4 * (n + 1))
        b_pk_o = alloc(4 * (self.n_items + 1)); b_pk = alloc(self.pk_b)
        b_pv_o = alloc(4 * (self.n_items + 1)); b_pv = alloc(self.pv_b)
        b_flag = alloc(4 * n); b_sys = alloc(4 * n); b_born = alloc(8 * n); b_store = alloc(8 * n)
        b_bh_o = alloc(4 * (n + 1)); b_bh = alloc(self.bh_b)
        b_sh_o = alloc(4 * (n + 1)); b_sh = alloc(self.sh_b)
        b_rc = alloc(4 * n); b_prep = alloc(8 * n); b_crc = alloc(4 * n)
        b_id_o = alloc(4 * (n + 1)); b_id = alloc(self.id_b)

        cdef int32_t *topic_o = <int32_t *>buf_ptr(b_topic_o)
        cdef unsigned char *topic_d = buf_ptr(b_topic)
        cdef int32_t *qid = <int32_t *>buf_ptr(b_qid)
        cdef int64_t *qoff = <int64_t *>buf_ptr(b_qoff)
        cdef int64_t *clo = <int64_t *>buf_ptr(b_clo)
        cdef int32_t *size = <int32_t *>buf_ptr(b_size)
        cdef int32_t *body_o = <int32_t *>buf_ptr(b_body_o)
        cdef unsigned char *body_d = buf_ptr(b_body)
        cdef uint8_t *tags_v = <uint8_t *>buf_ptr(b_tags_v) if b_tags_v is not None else NULL
        cdef int32_t *tags_o = <int32_t *>buf_ptr(b_tags_o)
        cdef unsigned char *tags_d = buf_ptr(b_tags)
        cdef int32_t *keys_lo = <int32_t *>buf_ptr(b_keys_lo)
        cdef int32_t *keys_o = <int32_t *>buf_ptr(b_keys_o)
        cdef unsigned char *keys_d = buf_ptr(b_keys)
        cdef int32_t *map_o = <int32_t *>buf_ptr(b_map_o)
        cdef int32_t *pk_o = <int32_t *>buf_ptr(b_pk_o)
        cdef unsigned char *pk_d = buf_ptr(b_pk)
        cdef int32_t *pv_o = <int32_t *>buf_ptr(b_pv_o)
        cdef unsigned char *pv_d = buf_ptr(b_pv)
        cdef int32_t *flag = <int32_t *>buf_ptr(b_flag)
        cdef int32_t *sysf = <int32_t *>buf_ptr(b_sys)
        cdef int64_t *born = <int64_t *>buf_ptr(b_born)
        cdef int64_t *store = <int64_t *>buf_ptr(b_store)
        cdef int32_t *bh_o = <int32_t *>buf_ptr(b_bh_o)
        cdef unsigned char *bh_d = buf_ptr(b_bh)
        cdef int32_t *sh_o = <int32_t *>buf_ptr(b_sh_o)
        cdef unsigned char *sh_d = buf_ptr(b_sh)
        cdef int32_t *rc = <int32_t *>buf_ptr(b_rc)
        cdef int64_t *prep = <int64_t *>buf_ptr(b_prep)
        cdef int32_t *crc = <int32_t *>buf_ptr(b_crc)
        cdef int32_t *id_o = <int32_t *>buf_ptr(b_id_o)
        cdef unsigned char *id_d = buf_ptr(b_id)
        cdef int32_t o_topic = 0, o_body = 0, o_tags = 0, o_keys = 0, o_kd = 0, o_items = 0, o_pk = 0, o_pv = 0
        cdef int32_t o_bh = 0, o_sh = 0, o_id = 0
        cdef int32_t *items = self.items

        if tags_v != NULL:
            memset(tags_v, 0, (n + 7) // 8)
        topic_o[0] = body_o[0] = tags_o[0] = keys_lo[0] = keys_o[0] = map_o[0] = 0
        pk_o[0] = pv_o[0] = bh_o[0] = sh_o[0] = id_o[0] = 0
        with nogil:
            for r in range(n):
                p = self.recs[r]
                check_record(p, load_i32_acquire(p), False, &v)
                props = p + v.props_pos
                o_topic += utf8_fix(p + v.topic_pos, v.topic_len, topic_d + o_topic)
                topic_o[r + 1] = o_topic
                qid[r] = v.queue_id
                qoff[r] = v.queue_offset
                clo[r] = v.phy_offset
                size[r] = v.total_size
                memcpy(body_d + o_body, p + v.body_pos, v.body_len)
                o_body += v.body_len
                body_o[r + 1] = o_body
                cnt = parse_props(props, v.props_len, items)
                for i in range(cnt):
                    o_pk += utf8_fix(props + items[4 * i], items[4 * i + 1], pk_d + o_pk)
                    pk_o[o_items + 1] = o_pk
                    o_pv += utf8_fix(props + items[4 * i + 2], items[4 * i + 3], pv_d + o_pv)
                    pv_o[o_items + 1] = o_pv
                    o_items += 1
                map_o[r + 1] = o_items
                i = find_item(props, items, cnt, "TAGS", 4)
                if i >= 0:
                    o_tags += utf8_fix(props + items[4 * i + 2], items[4 * i + 3], tags_d + o_tags)
                    if tags_v != NULL:
                        tags_v[r >> 3] |= <uint8_t>(1 << (r & 7))
                tags_o[r + 1] = o_tags
                i = find_item(props, items, cnt, "KEYS", 4)
                if i >= 0:
                    s = items[4 * i + 2]
                    e = s + items[4 * i + 3]
                    t = s
                    while t <= e:
                        if t == e or props[t] == 32:
                            if t > s:
                                o_kd += utf8_fix(props + s, t - s, keys_d + o_kd)
                                o_keys += 1
                                keys_o[o_keys] = o_kd
                            s = t + 1
                        t += 1
                keys_lo[r + 1] = o_keys
                flag[r] = v.flag
                sysf[r] = v.sys_flag
                born[r] = ms_to_us(v.born_ts)
                store[r] = ms_to_us(v.store_ts)
                k = fmt_host(p + v.born_host_pos, v.born_host_len, tmp)
                memcpy(bh_d + o_bh, tmp, k)
                o_bh += k
                bh_o[r + 1] = o_bh
                k = fmt_host(p + v.store_host_pos, v.store_host_len, tmp)
                memcpy(sh_d + o_sh, tmp, k)
                o_sh += k
                sh_o[r + 1] = o_sh
                rc[r] = v.reconsume_times
                prep[r] = v.prepared_tx_offset
                crc[r] = v.body_crc
                fmt_id(id_d + o_id, p + v.store_host_pos, v.store_host_len, v.phy_offset)
                o_id += 2 * (v.store_host_len + 8)
                id_o[r + 1] = o_id

        nulls = self.tags_nulls
        items_n = self.n_items
        keys_n = self.n_keys
        self._reset()
        self.rows_total += n
        sch = self.schema
        fa = pa.Array.from_buffers
        ty = [f.type for f in sch]
        kt = ty[7]
        mt = ty[8]
        keys_child = fa(kt.value_type, keys_n, [None, b_keys_o, b_keys])
        entries_t = mt.key_field, mt.item_field
        pk = fa(mt.key_type, items_n, [None, b_pk_o, b_pk])
        pv = fa(mt.item_type, items_n, [None, b_pv_o, b_pv])
        entries = pa.StructArray.from_arrays([pk, pv], fields=list(entries_t))
        cols = [
            fa(ty[0], n, [None, b_topic_o, b_topic]),
            fa(ty[1], n, [None, b_qid]),
            fa(ty[2], n, [None, b_qoff]),
            fa(ty[3], n, [None, b_clo]),
            fa(ty[4], n, [None, b_size]),
            fa(ty[5], n, [None, b_body_o, b_body]),
            fa(ty[6], n, [b_tags_v, b_tags_o, b_tags], null_count=nulls),
            fa(kt, n, [None, b_keys_lo], children=[keys_child]),
            fa(mt, n, [None, b_map_o], children=[entries]),
            fa(ty[9], n, [None, b_flag]),
            fa(ty[10], n, [None, b_sys]),
            fa(ty[11], n, [None, b_born]),
            fa(ty[12], n, [None, b_store]),
            fa(ty[13], n, [None, b_bh_o, b_bh]),
            fa(ty[14], n, [None, b_sh_o, b_sh]),
            fa(ty[15], n, [None, b_rc]),
            fa(ty[16], n, [None, b_prep]),
            fa(ty[17], n, [None, b_crc]),
            fa(ty[18], n, [None, b_id_o, b_id]),
        ]
        return pa.RecordBatch.from_arrays(cols, schema=sch)


# ----------------------------------------------------------------------------------------------------
# Sources: a commit-log file range, a consume queue's offset range
# ----------------------------------------------------------------------------------------------------

def scan_file(BatchBuilder b, MappedFile mf, long long pos, long long end=-1):
    """Add the records of ``mf`` from ``pos`` (a record boundary) until ``end`` (a record boundary; -1:
    the end-of-file blank or the end of written data), until ``b`` is full.

    Returns ``(next_pos, done)``. A damaged record, or (with ``verify_crc``) a wrong body CRC, raises
    ``StoreCorruptedError`` naming the file and the record's absolute offset."""
    cdef RecordView v
    cdef int32_t r
    cdef int64_t limit = mf.file_size
    cdef const unsigned char *base = mf.base
    cdef const unsigned char *p
    mf.check_mapped()
    if end < 0 or end > limit:
        end = limit
    while pos < end:
        if b.full():
            return (pos, False)
        p = base + pos
        r = check_record(p, limit - pos, False, &v)
        if r <= 0:
            if r == REC_BLANK or r == REC_END:
                return (pos, True)
            raise StoreCorruptedError(mf.file_name, mf.file_from_offset + pos, REASONS.get(r, "damaged record"))
        if b.wanted(p, &v):
            b.check_crc(p, &v, mf.file_name, mf.file_from_offset + pos)
            b.add(p, &v)
        pos += r
    return (pos, True)


def split_points(MappedFile mf, long long chunk):
    """Record boundaries of a commit-log file about every ``chunk`` bytes, found by walking record headers
    (no CRC, nothing decoded): ``(starts, data_end, stop_code)``. ``starts`` begins with 0; ``data_end`` is
    where the walk stopped (the blank, the end of written data, or a damaged record: ``stop_code``)."""
    cdef RecordView v
    cdef int32_t r = REC_END
    cdef int64_t pos = 0, last = 0, limit = mf.file_size
    cdef list starts = [0]
    mf.check_mapped()
    if chunk <= 0:
        chunk = limit + 1
    while pos < limit:
        r = check_record(mf.base + pos, limit - pos, False, &v)
        if r <= 0:
            break
        pos += r
        if pos - last >= chunk and pos < limit:
            starts.append(pos)
            last = pos
    if pos >= limit:
        r = REC_END
    if len(starts) > 1 and starts[len(starts) - 1] == pos:
        starts.pop()
    return (starts, pos, r)


cdef inline const unsigned char *_unit(list files, int64_t fsize, int64_t first_from, int64_t index,
                                       int *state):
    """The unit of queue offset ``index``: state 0 found, 1 below the first file (deleted), 2 past the last."""
    cdef int64_t byte = index * UNIT
    cdef Py_ssize_t fi
    cdef MappedFile mf
    if byte < first_from:
        state[0] = 1
        return NULL
    fi = (byte - first_from) // fsize
    if fi >= len(files):
        state[0] = 2
        return NULL
    mf = <MappedFile>files[fi]
    if mf.base == NULL or (byte - first_from) - fi * fsize + UNIT > mf.file_size:
        state[0] = 2
        return NULL
    state[0] = 0
    return mf.base + (byte - first_from - fi * fsize)


@cython.final
cdef class QueueReader:
    """One consume queue and the commit log it points into, both mapped read-only:
    ``QueueReader(topic, queue_id, cq_paths, cl_paths)`` (paths sorted by their 20-digit names)."""
    cdef readonly str topic
    cdef bytes topic_b
    cdef readonly int queue_id
    cdef list cq
    cdef int64_t cq_size, cq_first
    cdef list cl
    cdef int64_t *cl_from
    cdef int64_t *cl_size
    cdef Py_ssize_t n_cl
    cdef readonly int64_t lost

    def __cinit__(self):
        self.cl_from = NULL
        self.cl_size = NULL

    def __init__(self, str topic, int queue_id, list cq_paths, list cl_paths):
        cdef Py_ssize_t i
        cdef MappedFile mf
        self.topic = topic
        self.topic_b = topic.encode("utf-8")
        self.queue_id = queue_id
        self.cq = [MappedFile(p, -1, read_only=True) for p in cq_paths]
        self.cq = [m for m in self.cq if (<MappedFile>m).file_size > 0]
        self.cq_size = (<MappedFile>self.cq[0]).file_size if self.cq else 1
        self.cq_first = (<MappedFile>self.cq[0]).file_from_offset if self.cq else 0
        self.cl = [MappedFile(p, -1, read_only=True) for p in cl_paths]
        self.n_cl = len(self.cl)
        self.cl_from = <int64_t *>malloc((self.n_cl + 1) * sizeof(int64_t))
        self.cl_size = <int64_t *>malloc((self.n_cl + 1) * sizeof(int64_t))
        if self.cl_from == NULL or self.cl_size == NULL:
            raise MemoryError()
        for i in range(self.n_cl):
            mf = <MappedFile>self.cl[i]
            self.cl_from[i] = mf.file_from_offset
            self.cl_size[i] = mf.file_size

    def __dealloc__(self):
        free(self.cl_from)
        free(self.cl_size)

    cdef Py_ssize_t _cl_index(self, int64_t phy) noexcept:
        cdef Py_ssize_t lo = 0, hi = self.n_cl - 1, mid
        if self.n_cl == 0 or phy < self.cl_from[0]:
            return -1
        while lo < hi:
            mid = (lo + hi + 1) >> 1
            if self.cl_from[mid] <= phy:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def scan(self, BatchBuilder b, long long start, long long end):
        """Add the messages of queue offsets ``[start, end)`` until ``b`` is full: ``(next_offset, done)``.

        ``done`` is also set when the queue ends before ``end``. Units whose message was deleted (the
        consume-queue file, or the commit-log file, is gone) are counted in ``lost`` and skipped."""
        cdef int64_t i = start, phy, rel
        cdef int32_t usize, r
        cdef int state = 0
        cdef const unsigned char *u
        cdef const unsigned char *p
        cdef Py_ssize_t ci
        cdef MappedFile mf
        cdef RecordView v
        while i < end:
            if b.full():
                return (i, False)
            u = _unit(self.cq, self.cq_size, self.cq_first, i, &state)
            if state == 1:
                self.lost += min(end, self.cq_first // UNIT) - i
                i = min(end, self.cq_first // UNIT)
                continue
            if state == 2:
                return (i, True)
            usize = load_i32_acquire(u + 8)
            phy = get_i64(u)
            if usize == 0 or phy < 0:
                return (i, True)            # the end of written units
            i += 1
            if usize == FILLER:
                continue
            ci = self._cl_index(phy)
            if ci < 0:
                self.lost += 1
                continue
            mf = <MappedFile>self.cl[ci]
            rel = phy - self.cl_from[ci]
            if rel + usize > mf.file_size or mf.base == NULL:
                raise StoreCorruptedError(mf.file_name, phy, "consume queue %s/%d unit %d points past the "
                                          "commit log's end" % (self.topic, self.queue_id, i - 1))
            p = mf.base + rel
            r = check_record(p, mf.file_size - rel, False, &v)
            if r <= 0:
                raise StoreCorruptedError(mf.file_name, phy, REASONS.get(r, "damaged record"))
            if r != usize or v.phy_offset != phy or v.queue_id != self.queue_id or \
                    v.topic_len != len(self.topic_b) or \
                    memcmp(p + v.topic_pos, <const char *>self.topic_b, v.topic_len) != 0:
                raise StoreCorruptedError(mf.file_name, phy, "consume queue %s/%d unit %d does not match the "
                                          "record it points at" % (self.topic, self.queue_id, i - 1))
            if b.wanted(p, &v):
                b.check_crc(p, &v, mf.file_name, phy)
                b.add(p, &v)
        return (i, True)


def queue_bounds(list cq_paths, long long cl_min):
    """``(min_offset, max_offset)`` of a consume queue from its files (sorted by name): max is the number
    of units ever written, min the first unit whose message is at or above commit-log offset ``cl_min``
    (fillers skipped); ``(0, 0)`` without files. Binary searches; units are written in order."""
    cdef list files = []
    cdef MappedFile mf, last
    cdef int64_t lo, hi, mid, max_off, min_off, n_units, k, last_units
    cdef const unsigned char *p
    for path in cq_paths:
        mf = MappedFile(path, -1, read_only=True)
        if mf.file_size >= UNIT:
            files.append(mf)
    if not files:
        return (0, 0)
    last = <MappedFile>files[len(files) - 1]
    lo = 0
    hi = last.file_size // UNIT
    while lo < hi:                           # first empty unit of the last file
        mid = (lo + hi) >> 1
        p = last.base + mid * UNIT
        if load_i32_acquire(p + 8) != 0:
            lo = mid + 1
        else:
            hi = mid
    last_units = lo
    max_off = (last.file_from_offset + lo * UNIT) // UNIT
    min_off = max_off
    for k in range(len(files)):
        mf = <MappedFile>files[k]
        n_units = mf.file_size // UNIT if k < len(files) - 1 else last_units
        lo = 0
        hi = n_units
        while lo < hi:                       # first real unit pointing at or above cl_min
            mid = (lo + hi) >> 1
            p = mf.base + mid * UNIT
            if get_i32(p + 8) != FILLER and get_i32(p + 8) != 0 and get_i64(p) >= cl_min:
                hi = mid
            else:
                lo = mid + 1
        if lo < n_units:
            min_off = (mf.file_from_offset + lo * UNIT) // UNIT
            break
    return (min_off, max_off)
