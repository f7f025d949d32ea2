# cython: language_level=3
"""Which file of a log (the commit log, or one consume queue) holds a byte offset: the one lookup every compiled
reader uses, header-only and inlined (the scans call it per record or unit). ``_units.find_file`` is its Python
face, behind ``MappedFileQueue.find_mapped_file_by_offset``; ``files_of`` reads a log's list. Declarations only,
no module."""
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from libc.stdint cimport int64_t

from pystore.log._mapped_file cimport MappedFile


cdef inline MappedFile find_file(list files, int64_t file_size, int64_t offset):
    """The file of ``files`` (a snapshot of a log's list, in offset order, ``file_size`` bytes each) that holds
    ``offset``, or None. Found by its place from the first file's offset; a list with a gap (a file removed from
    its middle) is binary-searched."""
    cdef Py_ssize_t n = PyList_GET_SIZE(files), lo = 0, hi, mid
    cdef int64_t idx
    cdef MappedFile f
    if n == 0:
        return None
    idx = offset // file_size - (<MappedFile>PyList_GET_ITEM(files, 0)).file_from_offset // file_size
    if 0 <= idx < n:
        f = <MappedFile>PyList_GET_ITEM(files, idx)
        if f.file_from_offset <= offset < f.file_from_offset + file_size:
            return f
    hi = n
    while lo < hi:                  # the first file starting after ``offset``
        mid = (lo + hi) >> 1
        if (<MappedFile>PyList_GET_ITEM(files, mid)).file_from_offset <= offset:
            lo = mid + 1
        else:
            hi = mid
    if lo == 0:
        return None
    f = <MappedFile>PyList_GET_ITEM(files, lo - 1)
    return f if offset < f.file_from_offset + file_size else None


cdef inline list files_of(object queue):
    """``queue.files`` of a ``MappedFileQueue`` without running its property's Python code (the list is replaced
    whole, never changed in place: the one read is a snapshot, as the property's is)."""
    return <list>queue._files
