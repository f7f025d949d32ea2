# cython: language_level=3
"""Interface of ``pystore._sink``: where a reader's scan hands the records it accepts instead of making a
``MessageExt`` of each (the Arrow decoder's ``BatchBuilder`` is one), and ``same_bytes``, the short-string test
both sides run on every record (a record's topic against the queue's, against the last one decoded)."""
from libc.stdint cimport uint64_t
from libc.string cimport memcmp, memcpy

from pystore._record cimport RecordView


cdef class RecordSink:
    cdef int add(self, const unsigned char *p, RecordView *v) except -1


cdef inline bint same_bytes(const unsigned char *a, const unsigned char *b, Py_ssize_t n) noexcept nogil:
    """``a[:n] == b[:n]``, inline: topics are short, and a call to ``memcmp`` costs more than comparing them."""
    cdef uint64_t x, y
    cdef Py_ssize_t i = 0
    if n > 32:
        return memcmp(a, b, n) == 0
    while i + 8 <= n:
        memcpy(&x, a + i, 8)
        memcpy(&y, b + i, 8)
        if x != y:
            return False
        i += 8
    while i < n:
        if a[i] != b[i]:
            return False
        i += 1
    return True
