# cython: language_level=3
"""The append lock that several writer processes of one store share, and their queue-offset table, in a small
mapped state file (``pystore.log.shared_state`` opens the file and decides who initialises it).

::

    0        8        12        16           24              32             40          44          48
    | magic  | version | lock    | generation | published end | reserved end | holder pid | leader pid |
    | PYSTSW01| u32 (2)| kind u32| i64        | i64           | i64          | i32        | i32        |

    48             56             64             72               80          84          88           96
    | locked at ns | acquisitions | published ts | dispatched end | queue slots | slots used | table from | walk from |
    | i64 (coarse) | i64          | i64 (ms)     | i64            | u32         | u32        | i64        | i64 (-1)   |

    104         108    112          120        128                       192          200    4000 4001 4002  4096
    | undo slot | zero | undo offset | undo at   | pthread_mutex_t (<= 64)  | recoveries | zero | byte locks | ...
    | i32 (-1)  |      | i64         | i64       | robust, process-shared   | i64        |      |            |

(A put writes the first two 64-byte lines, the mutex's and its queue's slot; ``recoveries`` changes only when a
holder died.)

    4096 + 320 * i: queue slot i (``queue slots`` of them)
    | next offset i64 | queue id i32 | topic length u16 (0: free) | zero u16 | topic (256) | zero (48) |

Native byte order: only processes of this machine map the file, and a sole opener rewrites it before anyone
else may use it. The bytes at 4000-4002 hold no data: processes lock them (open-file-description ``fcntl``
locks, which the kernel releases when a process dies): 4000, the dead-man byte (shared while open); 4001,
the append lock where no robust mutex can be had; 4002, the services' leader.

The lock is a robust process-shared pthread mutex (LMDB's choice: 16-17 ns uncontended here): when its
holder dies, the next locker gets it at once (``EOWNERDEAD``), never a live holder's. Where the mutex cannot
be made robust and shared, an OFD lock on byte 4001 (1.3-1.6 us). Either way the page itself says whether a
put was in progress when its holder died: a holder sets ``reserved end`` before it writes a record and
``published end`` after (``reserve``/``publish``, inline in ``_shared_lock.pxd``), so a locker that finds
them apart knows the bytes between may be torn and repairs them before it writes (``needs_repair``,
``repaired``). The mutex is marked consistent as soon as it is taken from a dead owner: the repair's state
lives in the page, so a repairer that dies as well leaves the next locker the same repair to do.

**The queue-offset table** gives every put the next offset of its queue whichever process made the last one,
without reading the others' records: an open-addressed hash table (FNV-1a of the topic's bytes and the queue
id, probed linearly) of ``queue slots`` slots, filled under the lock, never emptied while the file lives
(the next sole opener starts an empty one, from the log's recovered end: ``table from``). A put takes its
slot's offset under the lock and notes it (``undo slot``, ``undo offset``, ``undo at``: the published end when
noted) before it reserves; it stores the new offset just before it publishes. A repair of a holder that died
between puts the noted offset back when ``undo at`` is the published end it repairs to. Once three quarters
of the slots are used, a queue not in the table is not added: ``walk from`` is set to the published end, and
from there every writer walks the others' records for such queues (as every writer did before the table).
``queue slots`` 0: no table, every writer walks from ``table from``.
"""

import os

from cpython.buffer cimport PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t
from libc.string cimport memcmp, memcpy, memset

from pystore.format._bytes cimport load_i64_acquire, mono_coarse_ns, store_i64_release

cdef extern from "<pthread.h>" nogil:
    ctypedef struct pthread_mutexattr_t:
        pass
    int pthread_mutexattr_init(pthread_mutexattr_t *)
    int pthread_mutexattr_destroy(pthread_mutexattr_t *)
    int pthread_mutexattr_setpshared(pthread_mutexattr_t *, int)
    int pthread_mutexattr_setrobust(pthread_mutexattr_t *, int)
    int pthread_mutex_init(pthread_mutex_t *, const pthread_mutexattr_t *)
    int pthread_mutex_lock(pthread_mutex_t *)
    int pthread_mutex_trylock(pthread_mutex_t *)
    int pthread_mutex_unlock(pthread_mutex_t *)
    int pthread_mutex_consistent(pthread_mutex_t *)
    int PTHREAD_PROCESS_SHARED
    int PTHREAD_MUTEX_ROBUST

cdef extern from *:
    void __atomic_thread_fence(int order) noexcept nogil
    int __ATOMIC_RELEASE

cdef extern from "<errno.h>" nogil:
    int errno
    int EOWNERDEAD
    int ENOTRECOVERABLE
    int EINTR
    int EBUSY
    int EAGAIN
    int EACCES

cdef extern from *:
    """
    #include <fcntl.h>
    #include <unistd.h>
    /* An open-file-description lock on one byte of ``fd``: F_WRLCK, F_RDLCK or F_UNLCK; ``wait``: block. */
    static int ps_ofd_lock(int fd, int type, long start, int wait) {
        struct flock fl;
        memset(&fl, 0, sizeof fl);
        fl.l_type = (short)type;
        fl.l_whence = SEEK_SET;
        fl.l_start = start;
        fl.l_len = 1;
        return fcntl(fd, wait ? F_OFD_SETLKW : F_OFD_SETLK, &fl);
    }
    """
    int ofd_lock "ps_ofd_lock"(int fd, int type, long start, int wait) noexcept nogil
    int F_WRLCK
    int F_RDLCK
    int F_UNLCK
    int getpid() noexcept nogil

MAGIC = b"PYSTSW01"
VERSION = 2
ROBUST_MUTEX = LOCK_ROBUST_MUTEX
OFD = LOCK_OFD
DEAD_MAN = DEAD_MAN_BYTE
APPEND_BYTE = APPEND_LOCK_BYTE
LEADER = LEADER_BYTE
PAGE_SIZE = PAGE_SIZE_BYTES
SLOT_SIZE = QUEUE_SLOT_BYTES
MAX_TOPIC = MAX_SLOT_TOPIC
KIND_NAMES = {LOCK_ROBUST_MUTEX: "robust-mutex", LOCK_OFD: "ofd"}

# what a detached ``SharedLock`` points at: zeros, never locked
cdef ps_shared_page _detached
memset(&_detached, 0, sizeof(ps_shared_page))


def ofd_try_lock(int fd, long start, bint exclusive):
    """Take an OFD lock on byte ``start`` of ``fd`` without waiting: True, or False when another open file
    holds a conflicting one. Raises ``OSError`` for anything else (a file system without these locks)."""
    if ofd_lock(fd, F_WRLCK if exclusive else F_RDLCK, start, 0) == 0:
        return True
    e = errno
    if e in (11, 13):           # EAGAIN, EACCES: held elsewhere
        return False
    raise OSError(e, os.strerror(e))


def ofd_wait_lock(int fd, long start, bint exclusive):
    """Take an OFD lock on byte ``start``, waiting (without the GIL) while another open file holds one."""
    cdef int rc, e = 0
    cdef int kind = F_WRLCK if exclusive else F_RDLCK
    while True:
        with nogil:
            rc = ofd_lock(fd, kind, start, 1)
            if rc != 0:
                e = errno
        if rc == 0:
            return
        if e != EINTR:
            raise OSError(e, os.strerror(e))


def ofd_unlock(int fd, long start):
    ofd_lock(fd, F_UNLCK, start, 0)


cdef class SharedLock:
    """The append lock over a mapped state page (``buffer``: a writable mapping of the state file ``fd``,
    ``PAGE_SIZE`` bytes at least). The page is initialised by ``init_page`` (only by an opener that is alone:
    ``shared_state``), else taken as it is after a check of its magic and version (``check_page``)."""

    def __cinit__(self, object buffer not None, int fd):
        # the export is kept until this object goes: the mapping cannot be closed under ``page``
        PyObject_GetBuffer(buffer, &self._view, PyBUF_WRITABLE)
        self._viewing = True
        if self._view.len < PAGE_SIZE_BYTES:
            raise ValueError("the state page needs %d bytes, the mapping has %d" % (PAGE_SIZE_BYTES, self._view.len))
        self.page = <ps_shared_page *>self._view.buf
        self.slots = NULL
        self.nslots = 0
        self._buffer = buffer
        self.fd = fd
        self.kind = 0
        self.held = False
        self.pid = getpid()

    def __dealloc__(self):
        if self._viewing:
            PyBuffer_Release(&self._view)

    def detach(self):
        """Let go of the mapping (so that it can be closed): the lock must not be held. Afterwards the object
        reads as an empty page and refuses to lock."""
        if self.held:
            raise RuntimeError("the append lock is held: release it first")
        if self._viewing:
            PyBuffer_Release(&self._view)
            self._viewing = False
        self.page = &_detached
        self.slots = NULL
        self.nslots = 0
        self.kind = 0
        self._buffer = None

    # -- the page -----------------------------------------------------------------------------------------

    def init_page(self, long long published_end, bint prefer_mutex=True, unsigned int queue_slots=0):
        """Write a fresh page (the caller is alone: it holds the dead-man byte exclusively): magic, version,
        both ends at ``published_end``, an empty queue-offset table of ``queue_slots`` slots that starts there
        (the mapping must hold them, zeroed: the caller truncates the file to the page and grows it), and the
        lock: a robust process-shared mutex, or, when one cannot be made (or ``prefer_mutex`` is False), the OFD
        lock. Returns the kind chosen."""
        cdef pthread_mutexattr_t attr
        cdef int rc = -1
        if self._view.len < PAGE_SIZE_BYTES + <Py_ssize_t>queue_slots * QUEUE_SLOT_BYTES:
            raise ValueError("a table of %d queue slots needs %d bytes after the page, the mapping has %d"
                             % (queue_slots, queue_slots * QUEUE_SLOT_BYTES, self._view.len - PAGE_SIZE_BYTES))
        memset(self.page, 0, sizeof(ps_shared_page))
        self.page.version = VERSION
        self.page.published_end = published_end
        self.page.reserved_end = published_end
        self.page.dispatched_end = published_end
        self.page.queue_slots = queue_slots
        self.page.table_from = published_end
        self.page.walk_from = -1 if queue_slots > 0 else published_end
        self.page.undo_slot = -1
        if prefer_mutex:
            pthread_mutexattr_init(&attr)
            rc = pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED)
            if rc == 0:
                rc = pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST)
            if rc == 0:
                rc = pthread_mutex_init(&self.page.mutex, &attr)
            pthread_mutexattr_destroy(&attr)
        self.page.lock_kind = LOCK_ROBUST_MUTEX if rc == 0 else LOCK_OFD
        self.kind = self.page.lock_kind
        self._map_table()
        # the magic last: a writer that dies before leaves a page others take for blank, not for whole
        __atomic_thread_fence(__ATOMIC_RELEASE)
        memcpy(self.page.magic, b"PYSTSW01", 8)
        return self.kind

    def check_page(self, bint table=True):
        """Take a page another process initialised: None when it is one this version knows, else why not.
        ``table``: the mapping must hold the page's queue-offset table too (False: a copy of the page alone,
        for reading its fields)."""
        if memcmp(self.page.magic, b"PYSTSW01", 8) != 0:
            return "not a pystore writers' state page (magic %r)" % bytes(self.page.magic[:8])
        if self.page.version != VERSION:
            return "a writers' state page of layout %d (this pystore knows %d)" % (self.page.version, VERSION)
        if self.page.lock_kind not in (LOCK_ROBUST_MUTEX, LOCK_OFD):
            return "a writers' state page with an unknown lock kind %d" % self.page.lock_kind
        if table and self._view.len < PAGE_SIZE_BYTES + <Py_ssize_t>self.page.queue_slots * QUEUE_SLOT_BYTES:
            return "the writers' state file is %d bytes, its table of %d queue slots needs %d" % (
                self._view.len, self.page.queue_slots, PAGE_SIZE_BYTES + self.page.queue_slots * QUEUE_SLOT_BYTES)
        self.kind = self.page.lock_kind
        if table:
            self._map_table()
        return None

    cdef void _map_table(self) noexcept:
        self.nslots = self.page.queue_slots
        self.slots = <ps_queue_slot *>(<unsigned char *>self._view.buf + PAGE_SIZE_BYTES) if self.nslots else NULL

    # -- the queue-offset table ---------------------------------------------------------------------------

    cdef int32_t find_slot(self, const unsigned char *topic, Py_ssize_t n, int32_t queue_id,
                           int64_t initial) noexcept nogil:
        """Under the lock: the index of the slot of ``(topic, queue_id)`` (``n`` bytes of topic), added with
        ``initial`` as its next offset when missing; -1 when it is not in the table and will not be (no table,
        the table three quarters full, or a topic too long for a slot), and then ``walk from`` is set (at the
        published end, when it was not yet): the caller's own offsets for that queue are right only if every
        writer walks from there."""
        cdef uint64_t h = 14695981039346656037ULL
        cdef Py_ssize_t i
        cdef uint32_t _probe, at
        cdef ps_queue_slot *s
        cdef unsigned char qb[4]
        if self.nslots > 0 and 0 < n <= MAX_SLOT_TOPIC:
            for i in range(n):
                h = (h ^ topic[i]) * 1099511628211ULL
            memcpy(qb, &queue_id, 4)
            for i in range(4):
                h = (h ^ qb[i]) * 1099511628211ULL
            at = <uint32_t>(h % self.nslots)
            for _probe in range(self.nslots):
                s = &self.slots[at]
                if s.topic_len == 0:
                    if self.page.walk_from >= 0 or self.page.queue_slots_used >= self.nslots // 4 * 3:
                        break
                    # the topic and the offset first, its length last: a holder that dies before leaves a free slot
                    s.next_offset = initial
                    s.queue_id = queue_id
                    memcpy(s.topic, topic, <size_t>n)
                    s.topic_len = <uint16_t>n
                    self.page.queue_slots_used += 1
                    return <int32_t>at
                if s.topic_len == n and s.queue_id == queue_id and memcmp(s.topic, topic, <size_t>n) == 0:
                    return <int32_t>at
                at = at + 1 if at + 1 < self.nslots else 0
        if self.page.walk_from < 0:
            store_i64_release(&self.page.walk_from, self.page.published_end)
        return -1

    def slot_of(self, str topic, int queue_id):
        """Under the lock (tests, diagnostics): ``find_slot`` of ``topic``, adding it at offset 0 when missing."""
        cdef bytes t = topic.encode("utf-8")
        self._require_held()
        return self.find_slot(<const unsigned char *>t, len(t), queue_id, 0)

    def queue_offsets(self):
        """``{(topic, queue_id): next offset}`` of every queue in the table (a read of the slots, no lock)."""
        cdef uint32_t i
        cdef ps_queue_slot *s
        out = {}
        for i in range(self.nslots):
            s = &self.slots[i]
            if 0 < s.topic_len <= MAX_SLOT_TOPIC:
                out[((<char *>s.topic)[:s.topic_len].decode("utf-8", "replace"), s.queue_id)] = s.next_offset
        return out

    # -- the lock -----------------------------------------------------------------------------------------

    cdef int try_lock(self) noexcept nogil:
        """``lock`` without waiting: 0, ``EBUSY`` while another holds it, or ``lock``'s errors. The put path
        tries first and waits without the GIL only when the lock is held."""
        return self._take(False)

    cdef int lock(self) noexcept nogil:
        """Take the lock, waiting as long as a live holder keeps it (a dead one's passes at once). 0, or an
        errno (``ENOTRECOVERABLE``: a mutex left inconsistent, which only a sole opener's re-initialisation
        mends). Call without the GIL when others may hold it."""
        return self._take(True)

    cdef int _take(self, bint wait) noexcept nogil:
        cdef int rc
        if self.kind == LOCK_ROBUST_MUTEX:
            rc = pthread_mutex_lock(&self.page.mutex) if wait else pthread_mutex_trylock(&self.page.mutex)
            if rc == EOWNERDEAD:
                # the holder died: whatever it left half done, ``reserved_end`` says; the mutex is usable again
                self.page.recoveries += 1
                rc = pthread_mutex_consistent(&self.page.mutex)
            if rc != 0:
                return rc
        else:
            while ofd_lock(self.fd, F_WRLCK, APPEND_LOCK_BYTE, wait) != 0:
                if errno == EAGAIN or errno == EACCES:
                    return EBUSY
                if errno != EINTR:
                    return errno
        self.held = True
        self.page.holder_pid = self.pid     # getpid() is a system call in glibc 2.25+: read once
        # the coarse clock (a tick's resolution, a fraction of the fine one's cost): a hold is reported stuck after
        # seconds, and this is read at every lock
        self.page.locked_at_ns = mono_coarse_ns()
        self.page.acquisitions += 1
        return 0

    cdef void unlock(self) noexcept nogil:
        self.page.holder_pid = 0
        self.page.locked_at_ns = 0
        self.held = False
        if self.kind == LOCK_ROBUST_MUTEX:
            pthread_mutex_unlock(&self.page.mutex)
        else:
            ofd_lock(self.fd, F_UNLCK, APPEND_LOCK_BYTE, 0)

    def acquire(self):
        """``lock`` for Python (waits without the GIL); raises ``OSError`` when the lock cannot be had."""
        cdef int rc
        if self.kind == 0:
            raise RuntimeError("the state page is neither initialised nor checked, or was detached")
        if self.held:
            raise RuntimeError("the append lock is held by this object already")
        with nogil:
            rc = self.lock()
        if rc != 0:
            raise OSError(rc, "the writers' append lock: " + os.strerror(rc))

    def release(self):
        if not self.held:
            raise RuntimeError("the append lock is not held")
        self.unlock()

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc):
        self.release()

    # -- under the lock: the ends -----------------------------------------------------------------------

    def needs_repair(self):
        """Under the lock: ``(published_end, reserved_end)`` when the last holder died between reserving and
        publishing (the bytes between may be torn), else None."""
        cdef int64_t p = load_i64_acquire(&self.page.published_end)
        cdef int64_t r = load_i64_acquire(&self.page.reserved_end)
        return None if p == r else (p, r)

    def repaired(self, long long end):
        """Under the lock, once the torn bytes are gone: both ends at ``end`` (where whole records end now),
        the offset the dead put had taken from its queue's slot given back, and a new generation (each repair
        is one)."""
        cdef int32_t u = self.page.undo_slot
        self._require_held()
        # the put that died had taken its queue's offset: given back, if it was taken in the put repaired now
        if 0 <= u < <int32_t>self.nslots and self.page.undo_at == end:
            self.slots[u].next_offset = self.page.undo_offset
        self.page.generation += 1
        self.publish(end)

    def reserve_end(self, long long end):
        self._require_held()
        self.reserve(end)

    def publish_end(self, long long end):
        self._require_held()
        self.publish(end)

    cdef int _require_held(self) except -1:
        if not self.held:
            raise RuntimeError("the append lock is not held")
        return 0

    # -- what others see ----------------------------------------------------------------------------------

    @property
    def published_end(self):
        return load_i64_acquire(&self.page.published_end)

    @property
    def reserved_end(self):
        return load_i64_acquire(&self.page.reserved_end)

    @property
    def generation(self):
        return self.page.generation

    @property
    def holder_pid(self):
        return self.page.holder_pid

    @property
    def held_for_ns(self):
        """How long the present holder has held the lock (0: nobody holds it)."""
        cdef int64_t at = self.page.locked_at_ns
        return 0 if at == 0 or self.page.holder_pid == 0 else max(0, mono_coarse_ns() - at)

    @property
    def acquisitions(self):
        return self.page.acquisitions

    @property
    def recoveries(self):
        """How many times a locker took the mutex from a dead holder."""
        return self.page.recoveries

    @property
    def dispatched_end(self):
        """Where the services' leader has dispatched the log to: every record below it has its consume-queue
        unit (a process that joins reads the queues' ends after this, and walks the log from here)."""
        return load_i64_acquire(&self.page.dispatched_end)

    @dispatched_end.setter
    def dispatched_end(self, long long end):
        store_i64_release(&self.page.dispatched_end, end)

    @property
    def leader_pid(self):
        return self.page.leader_pid

    @leader_pid.setter
    def leader_pid(self, int pid):
        self.page.leader_pid = pid

    @property
    def queue_slots(self):
        return self.page.queue_slots

    @property
    def queue_slots_used(self):
        return self.page.queue_slots_used

    @property
    def table_from(self):
        return self.page.table_from

    @property
    def walk_from(self):
        return load_i64_acquire(&self.page.walk_from)

    @property
    def kind_name(self):
        return KIND_NAMES.get(self.kind, "none")
