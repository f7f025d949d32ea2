# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""A held, read-only view of part of a mapped file (RocketMQ's ``SelectMappedBufferResult``): what
``MappedFile.select_mapped_buffer`` returns, and ``MessageStore.get_commit_log_data`` with it.

The view holds its file (a reader's hold, ``MappedFile.c_hold``) until ``release()``, so the file is not
cleaned up under it. Every buffer exported from it (``memoryview(view)``, ``view.buffer`` and views taken
from those) counts as one of the file's ``exports``: the mapping outlives the view's release for as long as
one of them is alive, so no exported buffer ever points at unmapped memory.

Thread-safety: like ``MappedFile``, guarded by the GIL.
"""

cimport cython
from cpython.buffer cimport PyBUF_WRITABLE, PyBuffer_FillInfo

from pystore.errors import StoreClosedError


# ``buffer`` (a memoryview of the view) and the view refer to each other, so the cycle collector may be
# the one to free them. It must not clear ``mf`` first: releasing the memoryview then calls
# ``__releasebuffer__``, which needs the file to count the export back (it would write into None).
@cython.final
@cython.no_gc_clear
cdef class SelectMappedBufferResult:
    """A read-only window on a mapped file (RocketMQ ``SelectMappedBufferResult``): ``buffer`` is a
    ``memoryview``, ``start_offset`` its absolute offset and ``size`` its length. It holds the file until
    ``release()`` (or the end of a ``with`` block); views taken from ``buffer`` stay valid even after that,
    because they pin the mapping itself."""

    def __init__(self):
        raise TypeError("SelectMappedBufferResult comes from reads")

    def __getbuffer__(self, Py_buffer *buf, int flags):
        if self.released or self.mf.base == NULL:
            raise StoreClosedError("the mapped buffer was released")
        if flags & PyBUF_WRITABLE:
            raise BufferError("store data is read-only")
        PyBuffer_FillInfo(buf, self, <void *>(self.mf.base + self.pos), self.size, 1, flags)
        self.exports += 1
        self.mf.exports += 1

    def __releasebuffer__(self, Py_buffer *buf):
        self.exports -= 1
        self.mf.exports -= 1
        self.mf._maybe_unmap()

    @property
    def buffer(self):
        if self._view is None:
            if self.released:
                raise StoreClosedError("the mapped buffer was released")
            self._view = memoryview(self)
        return self._view

    @property
    def mapped_file(self):
        return self.mf

    def tobytes(self):
        return bytes(self.buffer)

    def release(self):
        if self.released:
            return
        self.released = True
        if self._view is not None:
            try:
                (<object>self._view).release()
            except BufferError:
                pass                  # something still exports it; the mapping stays pinned
            self._view = None
        self.mf.c_release()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()

    def __dealloc__(self):
        if not self.released and self.mf is not None:
            self.released = True
            self.mf.c_release()

    def __repr__(self):
        return "SelectMappedBufferResult(start_offset=%d, size=%d%s)" % (
            self.start_offset, self.size, ", released" if self.released else "")
