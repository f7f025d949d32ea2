# cython: language_level=3
"""The append lock of several writer processes (``_shared_lock.pyx``): its page's fields and the inline
operations the put path uses while it holds the lock."""

from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t

from pystore.format._bytes cimport load_i64_acquire, store_i64_release


cdef extern from "<pthread.h>" nogil:
    ctypedef struct pthread_mutex_t:
        pass


cdef extern from *:
    """
    #include <pthread.h>
    #include <stddef.h>
    #include <stdint.h>
    /* The state page (docs/format.md, "The writers' state page"): native byte order, since only processes
       of this machine map it, and a sole opener rewrites it. */
    typedef struct {
        char magic[8];
        uint32_t version;
        uint32_t lock_kind;
        int64_t generation;
        int64_t published_end;
        int64_t reserved_end;
        int32_t holder_pid;
        int32_t leader_pid;
        int64_t locked_at_ns;
        int64_t acquisitions;
        int64_t recoveries;
        int64_t dispatched_end;
        unsigned char _pad[48];
        pthread_mutex_t mutex;
    } ps_shared_page;
    _Static_assert(offsetof(ps_shared_page, mutex) == 128, "the mutex's place in the page");
    _Static_assert(sizeof(ps_shared_page) <= 256, "the page's fields fit their 256 bytes");
    """
    ctypedef struct ps_shared_page:
        char magic[8]
        uint32_t version
        uint32_t lock_kind
        int64_t generation
        int64_t published_end
        int64_t reserved_end
        int32_t holder_pid
        int32_t leader_pid
        int64_t locked_at_ns
        int64_t acquisitions
        int64_t recoveries
        int64_t dispatched_end
        pthread_mutex_t mutex


cdef enum:
    LOCK_ROBUST_MUTEX = 1
    LOCK_OFD = 2
    # bytes of the state file locked with open-file-description locks (kernel-released when the process dies)
    DEAD_MAN_BYTE = 4000        # shared while a process has the store open; exclusive: the opener is alone
    APPEND_LOCK_BYTE = 4001     # the append lock itself where no robust mutex is available
    LEADER_BYTE = 4002          # the services' leader
    PAGE_SIZE_BYTES = 4096


cdef class SharedLock:
    cdef ps_shared_page *page
    cdef object _buffer         # the mapping ``page`` points into
    cdef Py_buffer _view        # its export, held while this object lives (the mapping cannot close under it)
    cdef bint _viewing
    cdef int fd                 # the state file (OFD locks)
    cdef readonly int kind      # LOCK_ROBUST_MUTEX or LOCK_OFD
    cdef bint held
    cdef int pid                # this process's (the holder's pid written at each lock)

    cdef int try_lock(self) noexcept nogil
    cdef int lock(self) noexcept nogil
    cdef int _take(self, bint wait) noexcept nogil
    cdef void unlock(self) noexcept nogil
    cdef int _require_held(self) except -1

    cdef inline void reserve(self, int64_t end) noexcept nogil:
        """Under the lock, before the bytes of ``[published_end, end)`` are written: a holder that dies
        from here on leaves ``reserved_end`` past ``published_end``, which the next locker repairs."""
        store_i64_release(&self.page.reserved_end, end)

    cdef inline void publish(self, int64_t end) noexcept nogil:
        """Under the lock, once ``[published_end, end)`` holds whole records: other processes may read them."""
        store_i64_release(&self.page.published_end, end)
        store_i64_release(&self.page.reserved_end, end)

    cdef inline int64_t published(self) noexcept nogil:
        return load_i64_acquire(&self.page.published_end)

    cdef inline bint torn(self) noexcept nogil:
        """Under the lock: the last holder died between ``reserve`` and ``publish`` (``needs_repair``)."""
        return load_i64_acquire(&self.page.reserved_end) != load_i64_acquire(&self.page.published_end)
