# cython: language_level=3
"""Interface of ``pystore.columns._arrow_schema``: what ``_arrow.BatchBuilder`` asks of its columns once a builder or a
batch — the buffers they write, the per-row buffers' sizes, the built batch described for Arrow."""
from libc.stdint cimport int64_t, uint32_t, uint64_t

from pystore.columns._arrow_decode cimport Dec
from pystore.columns._arrow_export cimport ps_batch


# the buffers columns ``cols`` (bits ``1 << C_*``) write (bits ``1 << B_*``)
cdef uint64_t buffers_of(uint32_t cols) noexcept
# the bytes buffer ``i`` takes for ``r`` rows when it is a per-row one; 0 for the others
cdef int64_t row_bytes(int i, int64_t r) noexcept nogil
# fill ``e`` with the ArrowArrays of the ``n`` rows in ``d``'s buffers: columns ``col_ids``, in that order
cdef int describe(Dec *d, const int *col_ids, int n_cols, ps_batch *e, int64_t n) except -1
