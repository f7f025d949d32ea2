# cython: language_level=3
from libc.stdint cimport int64_t, uintptr_t

from pystore.format._bytes cimport load_i64_acquire, store_i64_release

cdef extern from *:
    """
    #include <sys/mman.h>
    #ifndef MADV_POPULATE_WRITE
    #define MADV_POPULATE_WRITE 23
    #endif
    """
    int MADV_POPULATE_WRITE             # Linux 5.14+ (older headers lack the name; older kernels refuse it)

cdef enum:
    PAGE = 4096                         # the page the files' arithmetic rounds to (``OS_PAGE_SIZE``)


cdef extern from *:
    """
    /* the writer's address, for the prefault worker to start past (a relaxed store: it is only a hint) */
    #define ps_pf_publish(slot, addr) __atomic_store_n((slot), (uintptr_t)(addr), __ATOMIC_RELAXED)
    """
    void ps_pf_publish(uintptr_t *slot, void *addr) noexcept nogil


cdef class MappedFile:
    cdef readonly str file_name
    cdef readonly int64_t file_from_offset
    cdef readonly int64_t file_size
    cdef unsigned char *base            # the mapping (NULL once unmapped, or for an empty file)
    cdef unsigned char *write_base      # where appends go: the mapping, or a transient-pool buffer
    cdef int fd
    cdef int64_t wrote
    cdef int64_t committed
    cdef int64_t flushed
    cdef int ref_count
    cdef int exports                    # buffer views handed out and not yet released
    cdef int pins                       # holds taken by readers and not yet released (forcing never drops them)
    cdef bint available
    cdef bint cleanup_over
    cdef bint unmap_pending
    cdef readonly bint read_only
    cdef int64_t first_shutdown_ms
    cdef public int64_t store_timestamp
    cdef public bint first_create_in_queue
    cdef bint fresh                     # written page by page (read-ahead off) until settle()
    cdef int64_t warmed                 # [0, warmed) pre-faulted, or asked of the prefault worker
    cdef int64_t reserved               # blocks allocated (fallocate) below this, from where writing resumed
    cdef public int64_t window          # bytes allocated and pre-faulted ahead of the writer (<0: whole file)
    cdef int reserve_errno              # why the last allocation failed (0: it did not)
    cdef uintptr_t *pf_cursor           # where the writer is, for the prefault worker (ps_pf_publish)
    cdef object pool_buffer             # the transient-pool buffer object while attached
    cdef object pool                    # where it goes back

    # -- positions --------------------------------------------------------------------------------------
    # ``wrote``, ``committed`` and ``flushed`` are assigned only by MappedFile's own methods: the inline ones
    # below (named for the event that moves them), ``commit``/``flush``/``sync_nogil`` and ``set_positions``.
    # Every other module, compiled or Python, calls these instead of assigning a field.

    cdef inline void publish(self, int64_t pos) noexcept nogil:
        """The writer made whole records of ``[wrote, pos)``: readers may see them (a release store, paired
        with ``read_position_acquire``)."""
        store_i64_release(&self.wrote, pos)

    cdef inline void advance(self, int64_t n) noexcept nogil:
        """``publish`` of ``n`` bytes appended at the write position (consume-queue units)."""
        store_i64_release(&self.wrote, self.wrote + n)

    cdef inline void fill_to_end(self) noexcept nogil:
        """The rest of the file was written as a blank (END_OF_FILE): nothing more goes in."""
        store_i64_release(&self.wrote, self.file_size)

    cdef inline void reset_to(self, int64_t pos) noexcept nogil:
        """Loading, recovery and truncation (and units written before a queue's first): the file holds
        ``[0, pos)``, written, committed and flushed. ``set_positions`` is its checked Python face."""
        self.wrote = self.committed = self.flushed = pos

    cdef inline void followed_to(self, int64_t pos) noexcept nogil:
        """Another process writes this file and a reader saw whole data up to ``pos`` (the live follow):
        this process never writes or flushes it, so its three positions are what it has seen."""
        self.wrote = self.committed = self.flushed = pos

    cpdef void unflush_from(self, int64_t pos) noexcept

    cdef inline int64_t read_position(self) noexcept nogil:
        # what readers see: ``wrote`` without a transient pool buffer, ``committed`` with one
        return self.wrote if self.write_base == self.base else self.committed

    cdef inline int64_t read_position_acquire(self) noexcept nogil:
        # ``read_position`` for a thread without the GIL beside the writer (acquire: the bytes below it are whole)
        return load_i64_acquire(&self.wrote) if self.write_base == self.base else load_i64_acquire(&self.committed)

    cdef int check_mapped(self) except -1
    cdef void settle(self) noexcept
    cdef void _prefault(self, int64_t pos, int64_t lead) noexcept nogil
    cdef bint prefault_range(self, int64_t start, int64_t end) noexcept nogil

    cdef int _reserve(self, int64_t pos, int64_t end) noexcept nogil

    cdef inline int reserve(self, int64_t pos, int64_t end) noexcept nogil:
        """Before writing ``[pos, end)`` through the mapping: 0 once its blocks are allocated, else the errno
        of the failed allocation (a write there could raise SIGBUS)."""
        if end <= self.reserved:
            return 0
        return self._reserve(pos, end)

    cdef inline void prefault_ahead(self, int64_t pos, int64_t lead) noexcept nogil:
        """Writers call this after each append; it asks for more only within ``lead`` of what was asked
        (``lead`` is capped at half the file's window)."""
        ps_pf_publish(self.pf_cursor, self.base + pos)
        if self.window >= 0 and 2 * lead > self.window:
            lead = self.window // 2
        if pos + lead > self.warmed:
            self._prefault(pos, lead)
    cdef void _close_fd(self) noexcept
    cdef int64_t data_extent(self, int64_t pos, int64_t *hole) noexcept nogil
    cdef void _page_by_page(self, int64_t pos) noexcept
    cdef int _check_pos(self, int64_t v) except -1
    cdef bint _able_to_flush(self, int least_pages) noexcept nogil
    cdef int sync_nogil(self, int least_pages) noexcept nogil
    cdef bint c_hold(self) noexcept
    cdef bint pin(self) noexcept
    cdef void unpin(self) noexcept
    cdef void c_release(self) noexcept
    cdef void _cleanup(self) noexcept
    cdef void _unmap(self) noexcept
    cdef void _maybe_unmap(self) noexcept
    cdef void _drop_ref(self) noexcept


# The process's prefault worker (prefault_worker.h, included by _mapped_file.pyx alone: its thread, ring and
# counters are static there, one set per module that includes it).
# the CPU it moves to before each request (a pinned put thread's; -1: its own set)
cdef void prefault_follow_cpu(int cpu) noexcept nogil
# its loop over [addr, addr + length) run in the calling thread, past the writer at *cursor (within [lo, hi)):
# 0, or -1 with errno set; the bytes populated and left to the writer are added to *done and *skipped
cdef int prefault_populate(void *addr, size_t length, void *lo, void *hi, uintptr_t *cursor,
                           unsigned long long *done, unsigned long long *skipped) noexcept nogil


cdef struct PrefaultCounters:
    unsigned long long done_bytes       # bytes populated
    unsigned long long skipped          # bytes of requests left to a writer that had reached them first
    unsigned long long dropped          # requests dropped (the ring full, or the worker taking one)
    unsigned long long failed           # requests whose madvise failed
    unsigned long pending               # requests queued or running now
    bint supported                      # not found lacking (no MADV_POPULATE_WRITE, or no thread could start)

# what it did in this process (``_warm.prefault_stats`` is its Python face)
cdef PrefaultCounters prefault_counters() noexcept nogil
