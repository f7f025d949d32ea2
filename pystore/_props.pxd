# cython: language_level=3
from libc.stdint cimport int32_t

cpdef str properties_to_string(dict props)
cpdef dict string_to_properties(str s)
cdef int check_text(str s, str what, object name) except -1
cdef int check_prop(object k, object v) except -1
cdef int32_t delay_level_of(object d)
