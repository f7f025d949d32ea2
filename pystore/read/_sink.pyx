# cython: language_level=3
"""``RecordSink``: the base of what takes the records a consume-queue scan accepts, as checked record views
into mapped files (``_read``'s scan, ``get_columns``). A subclass copies what it keeps before ``add`` returns,
or, deferring (``begin``), before ``finish`` returns: the scan releases a record's file only after ``finish``.
Its own module so that the reader needs no pyarrow: the Arrow ``BatchBuilder`` subclasses it in ``_arrow``.
"""

from pystore.format._record cimport RecordView


cdef class RecordSink:
    """Takes one accepted record at a time (``add``, C only); the base class refuses them and defers none."""

    cdef int add(self, const unsigned char *p, RecordView *v) except -1:
        raise NotImplementedError("%s takes no records" % type(self).__name__)

    cdef bint begin(self, bint check_crc) except -1:
        """Will this sink take the scan's records deferred (``next``, ``commit``, ``finish``), checking their body
        CRC itself when ``check_crc``? Then ``next`` is where the scan checks its next record into. The base class:
        no, each goes to ``add``."""
        return False

    cdef int hand_off(self) except -1:
        """``commit`` filled the window (``next`` reached ``window_end``): make room for more, as ``commit``."""
        return 0

    cdef int finish(self) except -1:
        """Every committed record decoded (none is read after this returns): 0, or 1 with ``cut`` set."""
        return 0

    cdef int settle(self) noexcept:
        """No record is being read any longer (a scan ending on an error): what is pending is dropped."""
        return 0
