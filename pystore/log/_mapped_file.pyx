# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# Over 600 lines: 585 are one cdef class (MappedFile; Cython keeps a class in one module); its off-put-path parts are in _warm.
"""One memory-mapped store file with RocketMQ's positions and reference counting (docs/format.md §5.1, §5.2).

A file is named by the absolute offset of its first byte (20 decimal digits) and mapped whole::

    0             flushed        committed        wrote                         file_size
    |== on disk ===|== in the file =|== in the pool ==|...... free (zeros) ........|
                   (page cache)     (transient buffer, only with the store pool)

* ``wrote``: bytes appended (into the mapping, or into a transient-pool buffer when one is attached);
* ``committed``: bytes copied from that buffer into the file (= ``wrote`` without a pool);
* ``flushed``: bytes forced to disk by ``msync``/``fdatasync`` (without the GIL); readers see ``read_position``.

The file is the only owner of these positions: other modules move them through methods named for the event
(``publish``/``advance`` after an append, ``fill_to_end`` after an END_OF_FILE blank, ``reset_to`` on loading,
recovery and truncation, ``followed_to`` for a file another process writes, ``unflush_from`` after a rewrite
below ``flushed``; inline in ``_mapped_file.pxd``; ``set_positions`` and ``claim_flushed`` from Python), and
never assign a field; the Python properties are read-only.

Page faults are kept off the writer's thread: a flush unmaps the whole pages it is about to write back
(``_unmap_whole_pages``: no per-page TLB shootdown on the writer's core), and a small C thread pre-faults the
pages just ahead of each writer (``prefault_ahead``), warmed files included, since the kernel write-protects a
warmed file's zeros when it writes them back. A file flushed a few KiB at a time (consume queues, the commit
log) is mapped without read-ahead while it is written (``_warm.write_page_by_page``), so its page cache stays
in single pages and a flush writes no more than what was written. What is done to a file's pages off the put
path (``warm``, ``write_page_by_page``, the worker's loop run in the caller's thread, the worker's counters)
is in ``_warm``; the put path's calls (``prefault_ahead``, ``reserve``, ``settle``) stay here.

Disk blocks: a new file has its full size but, with a ``window`` (the store's ``prefault_window_bytes``), only
its first page allocated (``posix_fallocate``); the rest is a hole until the writer nears it. Before writing,
writers ``reserve`` what they write (the commit log's put path; Python writers through ``ensure_reserved``),
and each pre-fault request (``prefault_ahead``, capped at the window) allocates the blocks it covers first, so
a file holds what was written plus at most the window (a page more), and a full disk fails the put (or the
creation: ``CREATE_MAPPED_FILE_FAILED``) instead of raising SIGBUS on a write into a hole. ``window=-1``
allocates the whole file at creation (RocketMQ's way; also what ``_warm.warm`` does). ``preallocate=False``
leaves a new file a hole (the index: 420 MB by default, mostly never written, as RocketMQ's own index files
are sparse; its owner checks the free space before creating it).

Lifetime (RocketMQ's ReferenceResource): the owner holds one reference; readers ``hold()`` and ``release()``
around each access. ``shutdown`` drops the owner's reference and refuses new holds; the file is cleaned up
when the count reaches zero, or when ``destroy`` forces it after ``interval_forcibly`` ms. The time is the
caller's (``now``, its owner's injected clock: the file reads no clock, so the first shutdown and the one that
forces are measured on one clock); ``close`` forces at once, without a time. Forcing deletes the
file, but the *mapping* goes only when no reader hold and no buffer view (``SelectMappedBufferResult``, in
``_mapped_view``) remains: pins are counted apart from RocketMQ's reference count, so no reader, iterator or
view can ever touch unmapped memory.

Thread-safety: positions and counts are plain fields guarded by the GIL; the put lock (``_put_lock``, taken by
``_commitlog``) serialises appends. The GIL is released only around msync/fdatasync and pre-faulting, and by
the commit log's flush service, which flushes its newest file without the GIL (``sync_nogil``): ``flushed``
only ever moves up (a compare-and-swap), whoever flushes."""

cimport cython
from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.errno cimport errno
from libc.stdint cimport int64_t
from libc.string cimport memcpy, memset
from posix.fcntl cimport O_CREAT, O_RDONLY, O_RDWR, open as c_open
from posix.mman cimport MAP_FAILED, MAP_SHARED, MS_SYNC, PROT_READ, PROT_WRITE, madvise, mmap, msync, munmap
from posix.stat cimport fstat, struct_stat
from posix.unistd cimport close as c_close

from pystore.format._bytes cimport advance_i64, ps_cpu_follow
from pystore.log._file_names cimport name_offset
from pystore.log._mapped_view cimport SelectMappedBufferResult

import os

from pystore.errors import StoreClosedError

cdef extern from "<fcntl.h>" nogil:
    int posix_fallocate(int fd, long offset, long length)
    int fallocate(int fd, int mode, long offset, long length)
    int FALLOC_FL_ZERO_RANGE
    int FALLOC_FL_PUNCH_HOLE
    int FALLOC_FL_KEEP_SIZE

cdef extern from "<unistd.h>" nogil:
    long lseek(int fd, long offset, int whence)
    int SEEK_DATA
    int SEEK_HOLE

cdef extern from "<unistd.h>" nogil:
    int fdatasync(int fd)
    int ftruncate(int fd, long length)
    long sysconf(int name)
    int _SC_PAGESIZE

cdef extern from *:
    """
    #include <sys/mman.h>
    #ifndef MADV_WILLNEED
    #define MADV_WILLNEED 3
    #endif
    """
    int MADV_WILLNEED
    int MADV_RANDOM
    int MADV_NORMAL
    int MADV_DONTNEED

cdef extern from "prefault_worker.h":
    int prefault_request "ps_pf_request"(void *addr, size_t length, void *lo, void *hi,
                                         uintptr_t *cursor) noexcept nogil
    uintptr_t *ps_pf_slot() noexcept nogil
    void ps_pf_follow(int cpu) noexcept nogil
    unsigned long ps_pf_pending() noexcept nogil
    ctypedef struct ps_pf_req:
        char *addr
        size_t len
        char *lo
        char *hi
        uintptr_t *cursor
    int ps_pf_populate(const ps_pf_req *r, unsigned long long *done, unsigned long long *skipped,
                       ps_cpu_follow *follow) noexcept nogil
    unsigned long long ps_pf_done_bytes, ps_pf_dropped, ps_pf_failed, ps_pf_skipped
    int ps_pf_unsupported


# The prefault worker's state is static in its header: this module is its one includer, and the others reach it
# through the three functions below (declared in the .pxd: ``_commitlog`` the first, ``_warm`` the other two).

cdef void prefault_follow_cpu(int cpu) noexcept nogil:
    ps_pf_follow(cpu)


cdef int prefault_populate(void *addr, size_t length, void *lo, void *hi, uintptr_t *cursor,
                           unsigned long long *done, unsigned long long *skipped) noexcept nogil:
    cdef ps_pf_req r
    r.addr = <char *>addr
    r.len = length
    r.lo = <char *>lo
    r.hi = <char *>hi
    r.cursor = cursor
    return ps_pf_populate(&r, done, skipped, NULL)


cdef PrefaultCounters prefault_counters() noexcept nogil:
    cdef PrefaultCounters c
    c.pending = ps_pf_pending()
    c.done_bytes = ps_pf_done_bytes
    c.skipped = ps_pf_skipped
    c.dropped = ps_pf_dropped
    c.failed = ps_pf_failed
    c.supported = not ps_pf_unsupported
    return c


OS_PAGE_SIZE = PAGE


cdef inline void _unmap_whole_pages(unsigned char *base, int64_t start, int64_t end) noexcept nogil:
    """Drop this process's page-table entries for the whole pages of ``[start, end)`` (``start`` page-aligned;
    the page holding ``end`` is kept: a writer may still fill it) before they are written back.

    Writing back a page mapped writable makes the kernel write-protect it one entry at a time, each change a
    TLB-shootdown interrupt to every core of this process: the putting thread would be interrupted once per
    page flushed. Unmapping first costs one batched shootdown. Nothing is lost on a shared file mapping: the
    dirty state moves to the page cache, which the msync that follows writes out, and a later access maps the
    page again (a minor fault: only the index, which writes hash slots anywhere in its file, takes one)."""
    cdef int64_t stop = end // PAGE * PAGE
    if stop > start:
        madvise(base + start, <size_t>(stop - start), MADV_DONTNEED)


def punch_hole(int fd, long long offset, long long length):
    """Give back the blocks of ``[offset, offset + length)`` of the file open as ``fd`` (its size kept): reads
    there see zeros again. For the archive's sparse copies, whose evicted ranges must free their disk; the
    caller aligns the span to whole blocks (a partial block is zeroed, not freed, which would zero a neighbour's
    bytes). Raises OSError when the file system cannot punch holes."""
    cdef int rc = 0
    if offset < 0 or length < 0:
        raise ValueError("bad span: offset %d, length %d" % (offset, length))
    if length == 0:
        return
    with nogil:
        if fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, offset, length) != 0:
            rc = errno
    if rc != 0:
        raise OSError(rc, "cannot punch a hole of %d bytes at %d: %s" % (length, offset, os.strerror(rc)))


cdef inline int64_t _page_up(int64_t n) noexcept nogil:
    return (n + PAGE - 1) // PAGE * PAGE


@cython.final
cdef void _shutdown(MappedFile mf, int64_t interval_forcibly, int64_t now, bint force) noexcept:
    """``MappedFile.shutdown``; ``force`` overrides the readers' references whatever the time (``close``)."""
    if mf.available:
        mf.available = False
        mf.first_shutdown_ms = now
        mf._drop_ref()
    elif mf.ref_count > 0 and (force or now - mf.first_shutdown_ms >= interval_forcibly):
        mf.ref_count = -1000 - mf.ref_count
        mf._drop_ref()


cdef class MappedFile:
    """A store file mapped whole: ``MappedFile(path, file_size=-1, read_only=False, create=False)``.

    ``file_size=-1`` maps the file at its size on disk (reading a foreign store); otherwise a file that
    exists must have exactly that size, and ``create=True`` makes a missing one.
    """

    def __cinit__(self):
        self.fd = -1
        self.base = NULL
        self.write_base = NULL
        self.ref_count = 1
        self.available = True
        self.pf_cursor = ps_pf_slot()
        ps_pf_publish(self.pf_cursor, NULL)     # no writer here yet (the slot may hold an old file's)

    def __init__(self, str path, long long file_size=-1, bint read_only=False, bint create=False,
                 from_offset=None, bint preallocate=True, bint fresh_random=False, long long window=-1):
        cdef struct_stat st
        cdef int flags
        cdef bytes bpath = os.fsencode(path)
        cdef int rc
        cdef void *m
        cdef bint fresh = False
        self.file_name = path
        self.read_only = read_only
        self.window = window
        self.file_from_offset = name_offset(os.path.basename(path)) if from_offset is None else from_offset
        flags = O_RDONLY if read_only else (O_RDWR | (O_CREAT if create else 0))
        self.fd = c_open(bpath, flags | 0o2000000, 0o644)     # O_CLOEXEC
        if self.fd < 0:
            raise OSError(errno, os.strerror(errno), path)
        if fstat(self.fd, &st) != 0:
            raise OSError(errno, os.strerror(errno), path)
        if file_size < 0:
            file_size = st.st_size
        elif st.st_size != file_size:
            if st.st_size == 0 and create and not read_only:
                fresh = fresh_random
                with nogil:
                    rc = 0 if ftruncate(self.fd, file_size) == 0 else errno
                    if rc == 0 and preallocate:
                        # the first page (the whole file without a window): a full disk fails the creation
                        self.reserved = file_size if window < 0 or file_size <= PAGE else PAGE
                        rc = posix_fallocate(self.fd, 0, self.reserved)
                if rc != 0:
                    self._close_fd()
                    try:
                        os.unlink(path)
                    except OSError:
                        pass
                    raise OSError(rc, "cannot allocate %d bytes: %s" % (file_size, os.strerror(rc)), path)
            else:
                self._close_fd()
                raise ValueError("%s is %d bytes, expected %d" % (path, st.st_size, file_size))
        self.file_size = file_size
        if file_size > 0:
            m = mmap(NULL, file_size, PROT_READ if read_only else PROT_READ | PROT_WRITE, MAP_SHARED, self.fd, 0)
            if m == MAP_FAILED:
                self._close_fd()
                raise OSError(errno, "mmap failed: %s" % os.strerror(errno), path)
            self.base = <unsigned char *>m
            if fresh:
                # Nothing in a new file is worth reading ahead, and a fault's read-ahead would zero a large
                # window of it at once on the writer's thread (milliseconds for a new consume queue's first
                # unit). Faults take one page each until the file is full (settle()). For files written
                # slowly relative to their pages (consume queues), and for the commit log, whose flushes would
                # otherwise write whole large folios (see ``_warm.write_page_by_page``).
                self._page_by_page(0)
        self.write_base = self.base
        self.wrote = self.committed = self.flushed = 0

    cdef void _close_fd(self) noexcept:
        if self.fd >= 0:
            c_close(self.fd)
            self.fd = -1

    def __dealloc__(self):
        if self.base != NULL:
            munmap(self.base, self.file_size)
            self.base = NULL
        if self.fd >= 0:
            c_close(self.fd)
            self.fd = -1

    cdef int check_mapped(self) except -1:
        if self.base == NULL and self.file_size > 0:
            raise StoreClosedError("%s is no longer mapped" % self.file_name)
        return 0

    # -- positions ---------------------------------------------------------------------------

    @property
    def wrote_position(self):
        return self.wrote

    @property
    def committed_position(self):
        return self.committed

    @property
    def flushed_position(self):
        return self.flushed

    cpdef void unflush_from(self, int64_t pos) noexcept:
        """The bytes from ``pos`` on were rewritten below the flushed position (a repaired unit, index slots):
        the next flush syncs again from ``pos``'s page."""
        if self.flushed > pos:
            self.flushed = pos - pos % PAGE

    def claim_flushed(self, long long pos):
        """Count ``[0, pos)`` as flushed without a sync (the broken build's flush, ``SKIP_GROUP_COMMIT_FSYNC``);
        the flushed position only moves up."""
        self._check_pos(pos)
        if pos > self.flushed:
            self.flushed = pos

    @property
    def prefaulted_position(self):
        """``[0, prefaulted_position)`` was pre-faulted, or asked of the prefault worker (diagnostics)."""
        return self.warmed

    def set_positions(self, long long pos):
        """Set wrote, committed and flushed to ``pos`` (loading and truncation)."""
        self._check_pos(pos)
        self.wrote = self.committed = self.flushed = pos

    cdef int _check_pos(self, int64_t v) except -1:
        if v < 0 or v > self.file_size:
            raise ValueError("position %d outside [0, %d] of %s" % (v, self.file_size, self.file_name))
        return 0

    @property
    def read_position(self):
        return self.read_position()

    def is_full(self):
        return self.wrote == self.file_size

    @property
    def max_offset(self):
        """Absolute offset of the end of readable data in this file."""
        return self.file_from_offset + self.read_position()

    # -- reference counting (RocketMQ ReferenceResource) ---------------------------------------

    cdef bint c_hold(self) noexcept:
        if self.available and (self.base != NULL or self.file_size == 0):
            self.ref_count += 1
            if self.ref_count > 1:
                self.pins += 1
                return True
            self.ref_count -= 1
        return False

    cdef void c_release(self) noexcept:
        """A reader's release."""
        if self.pins > 0:
            self.pins -= 1
        self._drop_ref()
        self._maybe_unmap()

    cdef bint pin(self) noexcept:
        """Keep the mapping while a service thread works in it without the GIL, perhaps for seconds (the flush
        service's and the index builder's waits): unlike ``c_hold`` it takes no reference, so the file's
        reference count still says who reads it, and its shutdown and cleanup go on; only the unmap waits for
        ``unpin``. False when the file is shut down or not mapped. Called with the GIL, like ``unpin``."""
        if self.available and self.base != NULL:
            self.pins += 1
            return True
        return False

    cdef void unpin(self) noexcept:
        if self.pins > 0:
            self.pins -= 1
        self._maybe_unmap()

    cdef void _drop_ref(self) noexcept:
        self.ref_count -= 1
        if self.ref_count > 0:
            return
        self._cleanup()

    cdef void _cleanup(self) noexcept:
        if self.cleanup_over:
            return
        self.cleanup_over = True
        if self.pool_buffer is not None:
            try:
                self.pool.return_buffer(self.pool_buffer)
            except BaseException:
                pass
            self.pool_buffer = None
        self.write_base = NULL
        self.unmap_pending = True
        self._maybe_unmap()

    cdef void _maybe_unmap(self) noexcept:
        if self.unmap_pending and self.exports == 0 and self.pins == 0:
            self._unmap()

    cdef void _unmap(self) noexcept:
        self.unmap_pending = False
        if self.base != NULL:
            munmap(self.base, self.file_size)
            self.base = NULL

    def hold(self):
        """Take a reference for reading; False once the file is shutting down."""
        return self.c_hold()

    def release(self):
        self.c_release()

    @property
    def available(self):
        return self.available

    @property
    def ref_count(self):
        return self.ref_count

    def is_cleanup_over(self):
        return self.ref_count <= 0 and self.cleanup_over

    def shutdown(self, long long interval_forcibly, long long now):
        """Stop handing out references and drop the owner's; ``interval_forcibly`` ms after the first shutdown,
        force it (the readers' references are overridden). ``now``: epoch ms on the owner's injected clock, the
        one every shutdown of this file is given (a file reads no clock of its own)."""
        _shutdown(self, interval_forcibly, now, False)

    def destroy(self, long long interval_forcibly, long long now):
        """Shut down and, once no reader holds the file, close and delete it. True when deleted. ``now`` as
        for ``shutdown``."""
        _shutdown(self, interval_forcibly, now, False)
        if not self.is_cleanup_over():
            return False
        self._close_fd()
        try:
            os.unlink(self.file_name)
        except FileNotFoundError:
            pass
        return True

    def close(self):
        """Unmap and close without deleting (the store's shutdown): readers' references are overridden at once,
        whatever the time."""
        _shutdown(self, 0, 0, True)
        if not self.is_cleanup_over():
            _shutdown(self, 0, 0, True)
        self._close_fd()

    # -- writing -------------------------------------------------------------------------------

    def append_message(self, data):
        """Append raw bytes (consume-queue units, index entries, replicated commit log). False if they
        do not fit. Bytes that fill the file end its writing: ``settle``."""
        cdef const unsigned char[::1] b = memoryview(data).cast("B")
        cdef Py_ssize_t n = b.shape[0]
        cdef int64_t pos = self.wrote
        self.check_mapped()
        if self.read_only:
            raise StoreClosedError("%s is mapped read-only" % self.file_name)
        if pos + n > self.file_size:
            return False
        if n:
            if self.write_base == self.base:
                self.ensure_reserved(pos, pos + n)
            memcpy(self.write_base + pos, &b[0], n)
        self.wrote = pos + n
        if self.wrote == self.file_size:
            self.settle()
        return True

    def write_at(self, long long pos, data):
        """Write raw bytes at ``pos`` without moving positions (index headers and slots)."""
        cdef const unsigned char[::1] b = memoryview(data).cast("B")
        cdef Py_ssize_t n = b.shape[0]
        self.check_mapped()
        if self.read_only:
            raise StoreClosedError("%s is mapped read-only" % self.file_name)
        if pos < 0 or pos + n > self.file_size:
            raise ValueError("write of %d bytes at %d outside %s" % (n, pos, self.file_name))
        if n:
            memcpy(self.base + pos, &b[0], n)

    def zero_from(self, long long pos):
        """Zero the file from ``pos`` to its end, so nothing stale follows a truncation point, and give the
        blocks past ``pos``'s page back (``fallocate(FALLOC_FL_PUNCH_HOLE)``: reads there see zeros, mapped
        pages refault as zeros; the writer allocates them again through ``reserve``). Falls back to
        ``FALLOC_FL_ZERO_RANGE``, then to writing zeros through the mapping."""
        cdef int rc
        cdef int64_t keep = _page_up(pos)
        self.check_mapped()
        if self.read_only or pos >= self.file_size:
            return
        self._check_pos(pos)
        if keep > self.file_size:
            keep = self.file_size
        with nogil:
            if keep > pos:
                memset(self.base + pos, 0, keep - pos)      # the page holding pos keeps its data before pos
            rc = 0
            if keep < self.file_size:
                rc = fallocate(self.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, keep,
                               self.file_size - keep)
                if rc != 0:
                    rc = fallocate(self.fd, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, keep,
                                   self.file_size - keep)
                if rc != 0:
                    memset(self.base + keep, 0, self.file_size - keep)
        if rc == 0:
            if self.reserved > keep:
                self.reserved = keep
            if self.warmed > keep:
                self.warmed = keep

    def next_data_offset(self, long long pos):
        """The first offset >= ``pos`` the file system holds data for (``SEEK_DATA``), or -1 if only
        holes follow. Where the file system cannot tell, ``pos`` itself."""
        cdef int64_t hole, r
        with nogil:
            r = self.data_extent(pos, &hole)
        return r

    cdef int64_t data_extent(self, int64_t pos, int64_t *hole) noexcept nogil:
        """The first offset >= ``pos`` the file system holds data for, or -1 if only holes follow; ``hole``
        gets where that data ends (the next hole, or the file's size). Where the file system cannot tell
        (no descriptor, no ``SEEK_DATA``), ``pos`` and the file's size: all of it counts as data."""
        cdef long r
        hole[0] = self.file_size
        if pos >= self.file_size:
            return -1
        r = lseek(self.fd, pos, SEEK_DATA)
        if r < 0:
            return -1 if errno == 6 else pos          # ENXIO: no data after pos
        if r >= self.file_size:
            return -1
        pos = r
        r = lseek(self.fd, pos, SEEK_HOLE)
        if 0 <= r < self.file_size:
            hole[0] = r
        return pos

    # -- flushing ------------------------------------------------------------------------------

    def is_able_to_flush(self, int least_pages):
        return self._able_to_flush(least_pages)

    cdef bint _able_to_flush(self, int least_pages) noexcept nogil:
        cdef int64_t flushed = self.flushed, write = self.read_position()
        if self.wrote == self.file_size and write > flushed:
            return True
        if least_pages > 0:
            return (write // PAGE - flushed // PAGE) >= least_pages
        return write > flushed

    def flush(self, int least_pages=0):
        """Force what readers can see to disk when at least ``least_pages`` pages are dirty (or the file
        is full); returns the flushed position. The msync runs without the GIL."""
        cdef int err = 0
        if self._able_to_flush(least_pages):
            if self.c_hold():
                with nogil:
                    err = self.sync_nogil(least_pages)
                self.c_release()
                if err != 0:
                    raise OSError(err, "flush of %s failed: %s" % (self.file_name, os.strerror(err)))
            # A file that cannot be held (being shut down or deleted) keeps its flushed position: RocketMQ
            # moves it to the read position unsynced, and a checkpoint written after would claim bytes no
            # sync made durable (what a power cut then loses).
        return self.flushed

    cdef int sync_nogil(self, int least_pages) noexcept nogil:
        """``flush``'s work, for a caller that holds the file (``c_hold``) and may not hold the GIL (the flush
        service's wait, ``_flush_wait``): 0, or the errno of the failed sync. Two threads may flush one file
        at once (that wait and a user's ``flush``): each syncs what it saw and ``flushed`` only moves up."""
        cdef int64_t value, start
        cdef int rc = 0
        if not self._able_to_flush(least_pages):
            return 0
        value = self.read_position()
        start = (self.flushed // PAGE) * PAGE
        if self.write_base != self.base:
            rc = fdatasync(self.fd)
        elif value > start:
            _unmap_whole_pages(self.base, start, value)
            rc = msync(self.base + start, value - start, MS_SYNC)
        if rc != 0:
            return errno
        advance_i64(&self.flushed, value)
        return 0

    def is_able_to_commit(self, int least_pages):
        cdef int64_t c = self.committed, w = self.wrote
        if self.wrote == self.file_size and w > c:
            return True
        if least_pages > 0:
            return (w // PAGE - c // PAGE) >= least_pages
        return w > c

    def commit(self, int least_pages=0):
        """Copy what was appended into the transient-pool buffer into the file; returns the committed
        position. Without a pool buffer it is the wrote position."""
        cdef int64_t c, w
        if self.write_base == self.base or self.pool_buffer is None:
            self.committed = self.wrote
            return self.wrote
        if self.is_able_to_commit(least_pages) and self.c_hold():
            c = self.committed
            w = self.wrote
            if w > c:
                try:
                    self.ensure_reserved(c, w)
                except OSError:
                    self.c_release()
                    raise
                with nogil:
                    memcpy(self.base + c, self.write_base + c, w - c)
                self.committed = w
            self.c_release()
        if self.committed == self.file_size and self.pool_buffer is not None:
            # the whole file is in the mapping now: give the buffer back and write straight through
            self.pool.return_buffer(self.pool_buffer)
            self.pool_buffer = None
            self.write_base = self.base
        return self.committed

    def attach_pool_buffer(self, pool, buffer, unsigned char[::1] view):
        """Route appends into ``buffer`` (a transient-pool buffer of the file's size) until committed."""
        if view.shape[0] < self.file_size:
            raise ValueError("pool buffer of %d bytes for a file of %d" % (view.shape[0], self.file_size))
        self.pool = pool
        self.pool_buffer = buffer
        self.write_base = &view[0]

    @property
    def has_pool_buffer(self):
        return self.pool_buffer is not None

    cdef void _page_by_page(self, int64_t pos) noexcept:
        cdef int64_t start = pos // PAGE * PAGE
        if self.base != NULL and start < self.file_size:
            madvise(self.base + start, <size_t>(self.file_size - start), MADV_RANDOM)
            self.fresh = True

    cdef void settle(self) noexcept:
        """The writer is done with a file it created (or was told to write page by page): back to normal
        read-ahead for its readers. The put path calls it when it leaves a full file; ``append_message`` (a
        slave's replication), when the bytes it appends fill one."""
        if self.fresh:
            self.fresh = False
            if self.base != NULL:
                madvise(self.base, self.file_size, MADV_NORMAL)

    cdef void _prefault(self, int64_t pos, int64_t lead) noexcept nogil:
        """Ask the prefault worker for ``[warmed, pos + 2 * lead)`` (``prefault_ahead``, inline in the .pxd,
        calls this once the writer at ``pos`` is within ``lead`` bytes of what was asked for before), after
        allocating the blocks there (``reserve``). ``2 * lead`` is capped at the file's window.

        A file written a little at a time through its mapping (the commit log without
        ``warm_mapped_file_enable``; consume queues, 20 bytes a unit) otherwise takes two page faults per
        page on the writer's thread: the read fault that maps the page and the write fault that dirties it.
        The worker takes them on another core, in bulk. Nothing here waits: a page the worker has not
        reached yet faults as it did without it."""
        cdef int64_t start = self.warmed if self.warmed > pos else pos, end
        if self.base == NULL or self.read_only:
            self.warmed = self.file_size        # nothing to pre-fault: ask no more
            return
        if start >= self.file_size:
            return
        if self.window >= 0 and 2 * lead > self.window:
            lead = self.window // 2
        start = start // PAGE * PAGE
        end = _page_up(pos + 2 * lead)
        if end > self.file_size:
            end = self.file_size
        if self.reserve(pos, end) != 0:
            # a full disk: populating holes would only fail; asked again at the next append
            if end > self.reserved:
                end = self.reserved if self.reserved > start else start
        if self.write_base != self.base:
            # a pool buffer takes the writes (the commit copies them into the mapping): blocks, no pages
            if end > self.warmed:
                self.warmed = end
            return
        if end > start:
            prefault_request(self.base + start, <size_t>(end - start), self.base, self.base + self.file_size,
                             self.pf_cursor)
            self.warmed = end

    cdef bint prefault_range(self, int64_t start, int64_t end) noexcept nogil:
        """Ask the prefault worker for ``[start, end)`` whatever the window, for a writer that writes all over a
        range (the index's hash slots). No blocks are allocated first: the range's owner checks the free space
        (the index does when it makes a file). False when nothing was queued (the worker's ring full or busy,
        or no worker): the caller may ask again later."""
        if self.base == NULL or self.read_only or self.write_base != self.base:
            return False
        start = start // PAGE * PAGE
        end = _page_up(end)
        if end > self.file_size:
            end = self.file_size
        if end <= start or not prefault_request(self.base + start, <size_t>(end - start), self.base,
                                                self.base + self.file_size, self.pf_cursor):
            return False
        if start <= self.warmed < end:
            self.warmed = end
        return True

    cdef int _reserve(self, int64_t pos, int64_t end) noexcept nogil:
        """``reserve``'s slow path: allocate ``[max(reserved, pos), end)`` with ``posix_fallocate`` (to the
        end of the file without a window). Below ``pos`` the writer has written already, and a writer that
        goes back (the index's hash slots) writes into a sparse file."""
        cdef int64_t start = self.reserved if self.reserved > pos else pos
        cdef int64_t target = _page_up(end) if self.window >= 0 else self.file_size
        cdef int rc
        if target > self.file_size:
            target = self.file_size
        start = start // PAGE * PAGE
        if self.fd < 0 or self.read_only or target <= start:
            return 0
        # a caller holding the GIL keeps it: allocating a window is short, and the put path runs this under the
        # put lock, where handing the GIL to another thread could cost it a whole switch interval to get it back
        # (the index builder's follow calls it without the GIL)
        rc = posix_fallocate(self.fd, start, target - start)
        self.reserve_errno = rc
        if rc == 0:
            self.reserved = target
        return rc

    @property
    def reserved_position(self):
        """``[0, reserved_position)`` has its blocks allocated, or was written before this mapping existed
        (diagnostics and tests; a loaded file starts at 0 and allocates from where its writer resumes)."""
        return self.reserved

    def ensure_reserved(self, long long pos, long long end):
        """``reserve`` for Python writers: raise ``OSError`` when the blocks of ``[pos, end)`` cannot be
        allocated (a write through the mapping there could raise SIGBUS on a full disk)."""
        cdef int rc = self.reserve(pos, end)
        if rc != 0:
            raise OSError(rc, "cannot allocate %d bytes at %d: %s" % (end - pos, pos, os.strerror(rc)),
                          self.file_name)

    # -- reading -------------------------------------------------------------------------------

    def read(self, long long pos, long long size):
        """A copy of ``size`` bytes at ``pos`` (must be below the read position)."""
        cdef int64_t rp = self.read_position()
        self.check_mapped()
        if pos < 0 or size < 0 or pos + size > rp:
            raise ValueError("read of %d bytes at %d beyond the readable %d of %s" % (size, pos, rp,
                                                                                      self.file_name))
        return PyBytes_FromStringAndSize(<const char *>self.base + pos, size)

    def read_any(self, long long pos, long long size):
        """A copy of ``size`` bytes at ``pos``, anywhere in the file (recovery and tools)."""
        self.check_mapped()
        if pos < 0 or size < 0 or pos + size > self.file_size:
            raise ValueError("read of %d bytes at %d outside %s" % (size, pos, self.file_name))
        return PyBytes_FromStringAndSize(<const char *>self.base + pos, size)

    def select_mapped_buffer(self, long long pos, long long size=-1):
        """A read-only view of ``[pos, pos+size)`` (``size=-1``: to the read position) that holds this
        file until released; None if the range is not readable or the file is going away."""
        cdef int64_t rp = self.read_position()
        cdef SelectMappedBufferResult r
        if size < 0:
            size = rp - pos
        if pos < 0 or size <= 0 or pos + size > rp or self.base == NULL:
            return None
        if not self.c_hold():
            return None
        r = SelectMappedBufferResult.__new__(SelectMappedBufferResult)
        r.mf = self
        r.pos = pos
        r.start_offset = self.file_from_offset + pos
        r.size = size
        return r

    def __repr__(self):
        return "MappedFile(%r, size=%d, wrote=%d, committed=%d, flushed=%d, refs=%d%s)" % (
            self.file_name, self.file_size, self.wrote, self.committed, self.flushed, self.ref_count,
            "" if self.available else ", shut down")
