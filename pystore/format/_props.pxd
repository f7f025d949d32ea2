# cython: language_level=3
"""The properties string (docs/format.md §1.7). Its one splitter, ``next_prop``, is inline: the Arrow decoder
(``_textfmt.parse_props``) runs it on every record without the GIL, ``props_from_utf8`` builds from it the
dict that ``MessageExt.properties`` and ``string_to_properties`` return, ``_codec.find_properties`` (TAGS for
tags codes and filters) and ``_index.find_keys`` (KEYS and UNIQ_KEY for the index) look up names in its items:
every reader of a record sees the same properties. ``find_byte`` looks for a byte eight
at a time (the decoder splits ``KEYS`` with it), and so does ``next_prop`` for both separators at once."""
from libc.stdint cimport int32_t, uint64_t
from libc.string cimport memcpy


cdef extern from *:
    """
    static inline int ps_ctz64(unsigned long long x) { return __builtin_ctzll(x); }
    static inline int ps_little_endian(void) { return __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__; }
    """
    int ctz64 "ps_ctz64"(uint64_t x) noexcept nogil
    bint is_little_endian "ps_little_endian"() noexcept nogil


cdef inline Py_ssize_t find_byte(const unsigned char *p, Py_ssize_t i, Py_ssize_t n, unsigned char c) noexcept nogil:
    """The place of the first byte ``c`` in ``p[i:n]`` (``n`` when there is none), eight bytes at a time: in
    ``w = word ^ c...c`` a byte is zero where ``c`` is, and ``(w - 0x01...01) & ~w & 0x80...80`` marks the first
    zero byte exactly (a borrow only marks bytes above it), the lowest mark on a little-endian load."""
    cdef uint64_t w, t, pat = <uint64_t>c * <uint64_t>0x0101010101010101
    if is_little_endian():
        while i + 8 <= n:
            memcpy(&w, p + i, 8)
            w ^= pat
            t = (w - <uint64_t>0x0101010101010101) & ~w & <uint64_t>0x8080808080808080
            if t:
                return i + (ctz64(t) >> 3)
            i += 8
    while i < n and p[i] != c:
        i += 1
    return i


cdef inline uint64_t _zero_bytes(uint64_t w) noexcept nogil:
    """Marks (0x80) at least at the lowest zero byte of ``w`` and exactly there below any other mark: a borrow
    only marks bytes above the first zero one."""
    return (w - <uint64_t>0x0101010101010101) & ~w & <uint64_t>0x8080808080808080


cdef inline bint next_prop(const unsigned char *p, Py_ssize_t n, Py_ssize_t *at,
                           Py_ssize_t *item) noexcept nogil:
    """The next item of the properties string ``p[:n]``, from ``at[0]`` on, that RocketMQ's decoder
    (``MessageDecoder.string2messageProperties``) keeps: a non-empty name before the item's first \\x01 and a
    non-empty value after it. Sets ``item`` to (name_pos, name_len, value_pos, value_len) and moves ``at[0]``
    past the item; False when no item is left. A name may repeat: RocketMQ puts every item into a HashMap, so
    its last value wins, and each caller merges repeats that way.

    One pass finds an item's end (its \\x02) and its first \\x01, eight bytes at a time (the last eight of a
    string of eight bytes or more, shifted past what was read, for its tail)."""
    cdef Py_ssize_t start = at[0], end, sep, k
    cdef uint64_t w, m1, m2
    while start < n:
        end = start
        sep = -1
        if is_little_endian() and n >= 8:
            while True:
                if end + 8 <= n:
                    memcpy(&w, p + end, 8)
                    k = 8
                else:
                    # the string's last eight bytes, those before ``end`` shifted out (zeros: neither separator)
                    memcpy(&w, p + n - 8, 8)
                    k = n - end
                    w >>= 8 * (8 - k)
                m2 = _zero_bytes(w ^ <uint64_t>0x0202020202020202)
                if k < 8:
                    m2 &= (<uint64_t>1 << (8 * k)) - 1
                if sep < 0:
                    m1 = _zero_bytes(w ^ <uint64_t>0x0101010101010101)
                    if k < 8:
                        m1 &= (<uint64_t>1 << (8 * k)) - 1
                    # (a \x01 past the item's end makes ``sep`` lie past it: no name, as when there is none)
                    if m1:
                        sep = end + (ctz64(m1) >> 3)
                if m2:
                    end += ctz64(m2) >> 3
                    break
                end += k
                if end >= n:
                    break
        else:
            while end < n and p[end] != 2:
                if sep < 0 and p[end] == 1:
                    sep = end
                end += 1
        if sep < 0:
            sep = end
        if sep > start and sep < end - 1:
            item[0] = start
            item[1] = sep - start
            item[2] = sep + 1
            item[3] = end - sep - 1
            at[0] = end + 1
            return True
        start = end + 1
    at[0] = start
    return False


cpdef str properties_to_string(dict props)
cpdef dict string_to_properties(str s)
cdef dict props_from_utf8(const unsigned char *p, Py_ssize_t n, const char *errors)
cdef int check_text(str s, str what, object name) except -1
cdef int check_prop(object k, object v) except -1
cdef int32_t delay_level_of(object d)
