# cython: language_level=3
# Text of record fields written straight into Arrow buffers, in C without the GIL: UTF-8 with invalid
# sequences replaced by U+FFFD (maximal subparts, as Java and Python replace them), decimal and hex numbers,
# hosts as ``address:port`` (IPv6 ``[address]:port``, compressed like ``ipaddress``), the items of a
# properties string (split by ``_props.next_prop``, as ``MessageExt.properties`` splits it), milliseconds as
# microseconds.
# Inline: each is called per record (or per field) by the Arrow decoder's loop.
from libc.stdint cimport INT64_MAX, INT64_MIN, int32_t, int64_t, uint16_t, uint64_t
from libc.string cimport memcmp, memcpy

from pystore.format._bytes cimport fmt_int, get_i32
from pystore.format._jstring cimport utf8_lead
from pystore.format._props cimport next_prop

cdef enum:
    MAX_ITEMS = 16384          # properties of <= 32767 bytes hold at most ~8192 items


cdef inline Py_ssize_t utf8_fix(const unsigned char *p, Py_ssize_t n, unsigned char *dst) noexcept nogil:
    """Copy ``p[:n]`` to ``dst`` (when not NULL) with every invalid sequence replaced by U+FFFD (maximal
    subparts); return the output length (``n`` for valid input)."""
    cdef Py_ssize_t i = 0, o = 0, s
    cdef unsigned char c, lo, hi
    cdef int need, k
    cdef uint64_t w
    while i < n:
        if i + 8 <= n:                   # eight ASCII bytes at a time
            memcpy(&w, p + i, 8)
            if (w & 0x8080808080808080ULL) == 0:
                if dst != NULL:
                    memcpy(dst + o, p + i, 8)
                i += 8
                o += 8
                continue
        c = p[i]
        if c < 0x80:
            if dst != NULL:
                dst[o] = c
            o += 1
            i += 1
            continue
        need = utf8_lead(c, &lo, &hi)
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


cdef inline int fmt_host(const unsigned char *h, int32_t hlen, char *out) noexcept nogil:
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


cdef inline int32_t parse_props(const unsigned char *p, int32_t n, int32_t *items) noexcept nogil:
    """The items of a properties string as ``(name_pos, name_len, value_pos, value_len)``, split by
    ``_props.next_prop``. A name that repeats keeps its first place and takes its last value, as in the dict
    ``MessageExt.properties`` makes of the same string (RocketMQ's HashMap keeps the last value)."""
    cdef int32_t cnt = 0, j
    cdef Py_ssize_t at = 0
    cdef Py_ssize_t it[4]
    cdef bint seen
    while cnt < MAX_ITEMS and next_prop(p, n, &at, it):
        seen = False
        for j in range(cnt):
            if items[4 * j + 1] == it[1] and memcmp(p + items[4 * j], p + it[0], <size_t>it[1]) == 0:
                items[4 * j + 2] = <int32_t>it[2]
                items[4 * j + 3] = <int32_t>it[3]
                seen = True
                break
        if not seen:
            items[4 * cnt] = <int32_t>it[0]
            items[4 * cnt + 1] = <int32_t>it[1]
            items[4 * cnt + 2] = <int32_t>it[2]
            items[4 * cnt + 3] = <int32_t>it[3]
            cnt += 1
    return cnt


cdef inline int64_t ms_to_us(int64_t ms) noexcept nogil:
    if ms > INT64_MAX // 1000:
        return INT64_MAX
    if ms < INT64_MIN // 1000:
        return INT64_MIN
    return ms * 1000
