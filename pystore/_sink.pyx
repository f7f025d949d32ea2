# cython: language_level=3
"""``RecordSink``: the base of what takes the records a consume-queue scan accepts, as checked record views
into mapped files (``_read``'s scan, ``get_columns``). A subclass copies what it keeps before ``add`` returns:
the record's file may be released right after. Its own module so that the reader needs no pyarrow: the Arrow
``BatchBuilder`` subclasses it in ``_arrow``.
"""

from pystore._record cimport RecordView


cdef class RecordSink:
    """Takes one accepted record at a time (``add``, C only); the base class refuses them."""

    cdef int add(self, const unsigned char *p, RecordView *v) except -1:
        raise NotImplementedError("%s takes no records" % type(self).__name__)
