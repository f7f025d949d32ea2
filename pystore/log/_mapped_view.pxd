# cython: language_level=3
from libc.stdint cimport int64_t

from pystore.log._mapped_file cimport MappedFile


cdef class SelectMappedBufferResult:
    cdef MappedFile mf
    cdef readonly int64_t start_offset
    cdef readonly int64_t size
    cdef int64_t pos
    cdef bint released
    cdef object _view
    cdef int exports
