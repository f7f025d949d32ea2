# cython: language_level=3
from libc.stdint cimport int32_t, int64_t

from pystore._mapped_file cimport MappedFile


cdef class IndexFileCore:
    cdef readonly MappedFile mapped_file
    cdef readonly int64_t hash_slot_num
    cdef readonly int64_t index_num
    cdef readonly int64_t begin_timestamp
    cdef readonly int64_t end_timestamp
    cdef readonly int64_t begin_phy_offset
    cdef readonly int64_t end_phy_offset
    cdef readonly int32_t hash_slot_count
    cdef readonly int32_t index_count
    cdef bint warned           # a broken chain was logged (once a file: a lookup may hit it every time)

    cdef void _store_header(self) noexcept
    cdef int _put_hash(self, int32_t h, int64_t phy_offset, int64_t store_timestamp) except -1
    cdef void _broken(self, int64_t pos, str what)


cdef class IndexFilesBase:
    cdef public list _files     # the index files, oldest first (a new list on every change)


cdef int index_message(IndexFilesBase service, const unsigned char *topic, Py_ssize_t topic_len,
                       const unsigned char *props, Py_ssize_t props_len, int64_t phy_offset, int64_t store_ts,
                       int32_t sys_flag) except -1
