# cython: language_level=3
from libc.stdint cimport int64_t


cpdef bint is_file_name(str name)
# the start offset a file's name gives (0 for a name ``is_file_name`` refuses)
cdef int64_t name_offset(str name)
