# cython: language_level=3
"""Strings as Java sees them: ``String.hashCode`` over UTF-16 code units, of a ``str`` or straight
from stored UTF-8 bytes (docs/format.md §2.2, §14), and (in ``_jstring.pxd``) the replacing UTF-8 decoder
every stored string is read with. The consume queue's tags codes and the hash index's slots are these
hashes: one definition here.
"""

from cpython.unicode cimport (Py_UCS1, Py_UCS2, PyUnicode_1BYTE_KIND, PyUnicode_2BYTE_KIND, PyUnicode_DATA,
                              PyUnicode_GET_LENGTH, PyUnicode_KIND)
from libc.stdint cimport int32_t, int64_t, uint32_t
from libc.string cimport memcpy

# 31**k modulo 2**32: four ASCII bytes folded into the hash at once (the same sum the byte loop makes)
cdef enum:
    _P1 = 31
    _P2 = 961
    _P3 = 29791
    _P4 = 923521


cdef int64_t java_hash_utf8(const unsigned char *p, Py_ssize_t n) noexcept nogil:
    """``String.hashCode`` of the string these UTF-8 bytes decode to (invalid bytes → U+FFFD, maximal
    subparts as Java and Python replace them), sign-extended to 64 bits as the consume queue stores it."""
    return <int64_t>(<int32_t>java_hash_utf8_from(0, p, n))


cdef inline uint32_t _fold_code_point(uint32_t h, uint32_t cp) noexcept nogil:
    """``h`` going on over one code point as Java holds it: its UTF-16 code unit, or its surrogate pair."""
    if cp >= 0x10000:
        cp -= 0x10000
        h = 31 * h + (0xD800 + (cp >> 10))
        return 31 * h + (0xDC00 + (cp & 0x3FF))
    return 31 * h + cp


cdef uint32_t java_hash_utf8_from(uint32_t h, const unsigned char *p, Py_ssize_t n) noexcept nogil:
    """``java_hash_utf8`` going on from the hash ``h`` of a string before these bytes: the hash of the
    concatenation (``topic + "#" + key`` without building it), each part decoded on its own."""
    cdef Py_ssize_t i = 0
    cdef unsigned char c, lo, hi
    cdef uint32_t cp
    cdef int need, k
    cdef uint32_t w
    while i < n:
        # keys and topics are mostly ASCII: a word without a high bit is four code units
        while i + 4 <= n:
            memcpy(&w, p + i, 4)
            if w & <uint32_t>0x80808080:
                break
            h = h * _P4 + p[i] * _P3 + p[i + 1] * _P2 + p[i + 2] * _P1 + p[i + 3]
            i += 4
        if i >= n:
            break
        c = p[i]
        if c < 0x80:
            h = 31 * h + c
            i += 1
            continue
        need = utf8_lead(c, &lo, &hi)
        if need < 0:
            h = 31 * h + 0xFFFD
            i += 1
            continue
        cp = c & (0x7F >> (need + 1))        # the lead byte's payload: 5, 4 or 3 bits
        i += 1
        k = 0
        while k < need:
            if i >= n or p[i] < lo or p[i] > hi:
                break
            cp = (cp << 6) | (p[i] & 0x3F)
            lo = 0x80
            hi = 0xBF
            i += 1
            k += 1
        if k < need:
            h = 31 * h + 0xFFFD          # one replacement for the maximal valid prefix
            continue
        h = _fold_code_point(h, cp)
    return h


cdef int32_t java_hash_str(str s) except? -1:
    """Java ``String.hashCode`` of a Python string, over its UTF-16 code units (lone surrogates included).
    Read from the string's own storage (PEP 393): one- and two-byte kinds are their code units already; a
    four-byte kind splits each character above U+FFFF into its surrogate pair, as UTF-16 does."""
    cdef Py_ssize_t i, n = PyUnicode_GET_LENGTH(s)
    cdef unsigned int kind = PyUnicode_KIND(s)
    cdef void *data = PyUnicode_DATA(s)
    cdef const Py_UCS1 *p1
    cdef const Py_UCS2 *p2
    cdef const Py_UCS4 *p4
    cdef uint32_t h = 0
    if kind == PyUnicode_1BYTE_KIND:
        p1 = <const Py_UCS1 *>data
        i = 0
        while i + 4 <= n:
            h = h * _P4 + p1[i] * _P3 + p1[i + 1] * _P2 + p1[i + 2] * _P1 + p1[i + 3]
            i += 4
        while i < n:
            h = 31 * h + p1[i]
            i += 1
    elif kind == PyUnicode_2BYTE_KIND:
        p2 = <const Py_UCS2 *>data
        for i in range(n):
            h = 31 * h + p2[i]
    else:
        p4 = <const Py_UCS4 *>data
        for i in range(n):
            h = _fold_code_point(h, p4[i])
    return <int32_t>h


def java_string_hash(s):
    """Java's ``String.hashCode`` of ``s`` (a ``str``), as a signed 32-bit int."""
    if not isinstance(s, str):
        raise TypeError("expected str, got %s" % type(s).__name__)
    return java_hash_str(s)
