# cython: language_level=3
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int32_t, int64_t, uint32_t


cdef inline str utf8_text(const unsigned char *p, Py_ssize_t n):
    """Stored UTF-8 (a record's topic, properties, tags) as a str, read as Java's replacing decoder reads it:
    invalid bytes become U+FFFD, never an exception."""
    return PyUnicode_DecodeUTF8(<const char *>p, n, "replace")


cdef inline int utf8_lead(unsigned char c, unsigned char *lo, unsigned char *hi) noexcept nogil:
    """How many continuation bytes the UTF-8 lead byte ``c`` (>= 0x80) takes, or -1 when none may follow it (a
    lone continuation byte, an overlong or out-of-range lead); ``lo[0]``..``hi[0]`` bound the first
    continuation byte, the others lie in 0x80..0xBF. The one table of well-formed UTF-8 (Unicode's Table 3-7),
    for the hash below and for the Arrow decoder's replacing copy (``_textfmt.utf8_fix``)."""
    lo[0] = 0x80
    hi[0] = 0xBF
    if 0xC2 <= c <= 0xDF:
        return 1
    if 0xE0 <= c <= 0xEF:
        if c == 0xE0:
            lo[0] = 0xA0
        elif c == 0xED:
            hi[0] = 0x9F
        return 2
    if 0xF0 <= c <= 0xF4:
        if c == 0xF0:
            lo[0] = 0x90
        elif c == 0xF4:
            hi[0] = 0x8F
        return 3
    return -1


cdef int64_t java_hash_utf8(const unsigned char *p, Py_ssize_t n) noexcept nogil
cdef uint32_t java_hash_utf8_from(uint32_t h, const unsigned char *p, Py_ssize_t n) noexcept nogil
cdef int32_t java_hash_str(str s) except? -1
