# cython: language_level=3
"""Interface of ``pystore._sink``: where a reader's scan hands the records it accepts instead of making a
``MessageExt`` of each (the Arrow decoder's ``BatchBuilder`` is one)."""
from pystore._record cimport RecordView


cdef class RecordSink:
    cdef int add(self, const unsigned char *p, RecordView *v) except -1
