# cython: language_level=3
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int32_t, int64_t, uint32_t


cdef inline str utf8_text(const unsigned char *p, Py_ssize_t n):
    """Stored UTF-8 (a record's topic, properties, tags) as a str, read as Java's replacing decoder reads it:
    invalid bytes become U+FFFD, never an exception."""
    return PyUnicode_DecodeUTF8(<const char *>p, n, "replace")


cdef int64_t java_hash_utf8(const unsigned char *p, Py_ssize_t n) noexcept nogil
cdef uint32_t java_hash_utf8_from(uint32_t h, const unsigned char *p, Py_ssize_t n) noexcept nogil
cdef int32_t java_hash_str(str s) except? -1
