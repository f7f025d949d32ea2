# cython: language_level=3
"""The append lock of several writer processes (``_shared_lock.pyx``): its page's fields and the inline
operations the put path uses while it holds the lock."""

from libc.stdint cimport int32_t, int64_t, uint16_t, uint32_t, uint64_t

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
        int64_t published_ts;
        int64_t dispatched_end;
        uint32_t queue_slots;
        uint32_t queue_slots_used;
        int64_t table_from;
        int64_t walk_from;
        int32_t undo_slot;
        uint32_t _zero;
        int64_t undo_offset;
        int64_t undo_at;
        union {                         /* 40 bytes on x86-64 glibc, 48 on AArch64: room for either */
            pthread_mutex_t mutex;
            unsigned char _mutex_room[64];
        };
        int64_t recoveries;
    } ps_shared_page;
    _Static_assert(offsetof(ps_shared_page, queue_slots) == 80, "the table's fields' place in the page");
    _Static_assert(offsetof(ps_shared_page, mutex) == 128, "the mutex's place in the page");
    _Static_assert(sizeof(pthread_mutex_t) <= 64, "the mutex fits its 64 bytes");
    _Static_assert(offsetof(ps_shared_page, published_ts) == 64, "the published end's time's place in the page");
    _Static_assert(offsetof(ps_shared_page, recoveries) == 192, "the recoveries' place in the page");
    _Static_assert(sizeof(ps_shared_page) <= 256, "the page's fields fit their 256 bytes");
    /* A slot of the writers' queue-offset table, which follows the page in the file: a (topic, queue id) and the
       next queue offset a put there takes. Free while topic_len is 0. */
    typedef struct {
        int64_t next_offset;
        int32_t queue_id;
        uint16_t topic_len;
        uint16_t _zero;
        unsigned char topic[256];
        unsigned char _pad[48];
    } ps_queue_slot;
    _Static_assert(sizeof(ps_queue_slot) == 320, "a slot is 320 bytes");
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
        int64_t published_ts
        int64_t dispatched_end
        uint32_t queue_slots
        uint32_t queue_slots_used
        int64_t table_from
        int64_t walk_from
        int32_t undo_slot
        int64_t undo_offset
        int64_t undo_at
        pthread_mutex_t mutex
        int64_t recoveries

    ctypedef struct ps_queue_slot:
        int64_t next_offset
        int32_t queue_id
        uint16_t topic_len
        unsigned char topic[256]


cdef enum:
    LOCK_ROBUST_MUTEX = 1
    LOCK_OFD = 2
    # bytes of the state file locked with open-file-description locks (kernel-released when the process dies)
    DEAD_MAN_BYTE = 4000        # shared while a process has the store open; exclusive: the opener is alone
    APPEND_LOCK_BYTE = 4001     # the append lock itself where no robust mutex is available
    LEADER_BYTE = 4002          # the services' leader
    PAGE_SIZE_BYTES = 4096
    QUEUE_SLOT_BYTES = 320      # sizeof(ps_queue_slot)
    MAX_SLOT_TOPIC = 255        # the longest topic a slot holds (the longest a put accepts)


cdef class SharedLock:
    cdef ps_shared_page *page
    cdef object _buffer         # the mapping ``page`` points into
    cdef Py_buffer _view        # its export, held while this object lives (the mapping cannot close under it)
    cdef bint _viewing
    cdef int fd                 # the state file (OFD locks)
    cdef readonly int kind      # LOCK_ROBUST_MUTEX or LOCK_OFD
    cdef bint held
    cdef int pid                # this process's (the holder's pid written at each lock)
    # the queue-offset table after the page (``queue_slots`` of them; NULL and 0 in a copy of the page alone)
    cdef ps_queue_slot *slots
    cdef readonly uint32_t nslots

    cdef int try_lock(self) noexcept nogil
    cdef int lock(self) noexcept nogil
    cdef int _take(self, bint wait) noexcept nogil
    cdef void unlock(self) noexcept nogil
    cdef int _require_held(self) except -1
    cdef void _map_table(self) noexcept
    cdef int32_t find_slot(self, const unsigned char *topic, Py_ssize_t n, int32_t queue_id,
                           int64_t initial) noexcept nogil

    cdef inline void reserve(self, int64_t end) noexcept nogil:
        """Under the lock, before the bytes of ``[published_end, end)`` are written: a holder that dies
        from here on leaves ``reserved_end`` past ``published_end``, which the next locker repairs."""
        store_i64_release(&self.page.reserved_end, end)

    cdef inline void publish(self, int64_t end) noexcept nogil:
        """Under the lock, once ``[published_end, end)`` holds whole records: other processes may read them.
        The undo note goes after (a holder that dies between leaves a note a repair would not take: its
        ``undo_at`` is behind the published end)."""
        store_i64_release(&self.page.published_end, end)
        store_i64_release(&self.page.reserved_end, end)
        self.page.undo_slot = -1

    cdef inline void publish_stamped(self, int64_t end, int64_t store_ts) noexcept nogil:
        """``publish``, with the store time of the last record below ``end`` (what a process whose view of the
        log jumps to ``end`` takes as its last file's time)."""
        self.page.published_ts = store_ts
        self.publish(end)

    cdef inline int64_t published_ts(self) noexcept nogil:
        return self.page.published_ts

    # -- the queue-offset table ---------------------------------------------------------------------------
    # Under the lock, a put reads its queue's next offset from its slot (``find_slot`` once per queue and
    # process), notes the slot and that offset (``note``) before it reserves anything, and stores the new
    # offset there just before it publishes. A holder that dies between leaves the published end behind the
    # reserved end, and the repair puts the noted offset back (``repaired``).

    cdef inline int64_t slot_offset(self, int32_t index) noexcept nogil:
        return self.slots[index].next_offset

    cdef inline void set_slot_offset(self, int32_t index, int64_t offset) noexcept nogil:
        self.slots[index].next_offset = offset

    cdef inline void note(self, int32_t index, int64_t offset) noexcept nogil:
        """Under the lock, before the put reserves: slot ``index`` (-1: none) held ``offset`` when the hold began."""
        self.page.undo_slot = index
        self.page.undo_offset = offset
        self.page.undo_at = self.page.published_end

    cdef inline int64_t table_from(self) noexcept nogil:
        """The published end when the page was written: every queue put to since is in the table (until it
        filled up) or was walked by every writer (after)."""
        return self.page.table_from

    cdef inline int64_t walk_from(self) noexcept nogil:
        """Where the table filled up (-1: it has not): from this offset on, every writer walks the others'
        records for the queues outside the table. Read after ``published()``: a published end past it was
        published after it was set."""
        return load_i64_acquire(&self.page.walk_from)

    cdef inline int64_t published(self) noexcept nogil:
        return load_i64_acquire(&self.page.published_end)

    cdef inline bint torn(self) noexcept nogil:
        """Under the lock: the last holder died between ``reserve`` and ``publish`` (``needs_repair``)."""
        return load_i64_acquire(&self.page.reserved_end) != load_i64_acquire(&self.page.published_end)
