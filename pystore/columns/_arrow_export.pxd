# cython: language_level=3
"""Arrow's C data interface as ``_arrow`` hands a built batch over: one import call, no Python call per column.
The ArrowArrays of a batch and its columns live in one ``ps_batch`` block (``arrow_export.h``, with their
release, which drops the pyarrow buffers the columns point into), taken in order by ``_array``; ``_arrow``'s
builder points them at its buffers."""
from cpython.ref cimport PyObject
from libc.stdint cimport int64_t

cdef extern from "arrow_export.h":
    struct ArrowArray:
        int64_t length
        int64_t null_count
        int64_t offset
        int64_t n_buffers
        int64_t n_children
        const void **buffers
        ArrowArray **children
        ArrowArray *dictionary
        void (*release)(ArrowArray *) noexcept nogil
        void *private_data
    enum: PS_ARRAYS
    ctypedef struct ps_batch:
        ArrowArray a[PS_ARRAYS]
        ArrowArray *kids[PS_ARRAYS]
        const void *bufs[3 * PS_ARRAYS]
        PyObject *keep
    void ps_release_kid(ArrowArray *a) noexcept nogil
    void ps_release_batch(ArrowArray *a) noexcept nogil


cdef struct Exporting:
    ps_batch *e
    int arrays
    int kids
    int bufs


cdef inline ArrowArray *_array(Exporting *x, int64_t length, int64_t nulls, int n_buffers,
                               int n_children) noexcept:
    """The next ArrowArray of the block, with room for its buffer and child pointers (filled by the caller)."""
    cdef ArrowArray *a = &x.e.a[x.arrays]
    x.arrays += 1
    a.length = length
    a.null_count = nulls
    a.offset = 0
    a.n_buffers = n_buffers
    a.n_children = n_children
    a.buffers = &x.e.bufs[x.bufs]
    x.bufs += n_buffers
    a.children = &x.e.kids[x.kids] if n_children else NULL
    x.kids += n_children
    a.dictionary = NULL
    a.release = ps_release_kid
    a.private_data = NULL
    return a
