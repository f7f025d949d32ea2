# cython: language_level=3
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t

from pystore.format._codec cimport END_FILE_MIN_BLANK_LENGTH, RecordView
from pystore.log._mapped_file cimport MappedFile
from pystore.message._message cimport Message
from pystore.log._put_lock cimport PutMessageLock
from pystore.log._shared_lock cimport SharedLock
from pystore.log._put_checks cimport REFUSE_BUSY, REFUSE_ILLEGAL, REFUSE_NONE, REFUSE_PROPERTIES
from pystore.log._results cimport PutMessageResult


cdef enum:
    RECENT_CELLS = 8            # cells a walk over records remembers (RecentCells.queues' length)
    SLOT_UNKNOWN = -1           # QueueCell.slot
    SLOT_NONE = -2

cdef object refusal_status(int code)


cdef class QueueCell:
    """One (topic, queue id): the next queue offset to assign and, once dispatch exists, its consume queue."""
    cdef readonly str topic
    cdef readonly int32_t queue_id
    cdef public int64_t next_offset
    cdef public object consume_queue
    # several writers: its slot in their queue-offset table (SLOT_UNKNOWN until a put looks it up; SLOT_NONE:
    # not in the table, its offset kept by walking the others' records)
    cdef int32_t slot


cdef class Dispatcher:
    """Inline dispatch hook: called under the put lock for every appended record that enters a queue."""
    cdef void prepare(self, Message msg) noexcept
    cdef int dispatch(self, QueueCell cell, Message msg, int64_t phy_offset, int32_t size, int64_t store_ts,
                      int64_t queue_offset) except -1
    cdef int dispatch_run(self, QueueCell cell, Message msg, int64_t phy_offset, const int32_t *sizes, Py_ssize_t n,
                          int64_t store_ts, int64_t queue_offset) except -1
    cdef int dispatch_each(self, QueueCell cell, Message msg, const unsigned char *rec, int64_t phy_offset,
                           const int32_t *sizes, const int32_t *props_lens, const int64_t *tags_codes, Py_ssize_t n,
                           int64_t store_ts, int64_t queue_offset, bint keyed) except -1
    cdef int dispatch_record(self, QueueCell cell, const unsigned char *rec, RecordView *v, int64_t phy_offset,
                             int64_t queue_offset) except -1


cdef class RecentCells


cdef class CommitLogCore:
    cdef PutMessageLock put_lock
    cdef MappedFile last
    cdef readonly int64_t file_size
    cdef dict table
    cdef str last_key                 # the cell of the last put's topic-queue key, reused while the key repeats
    cdef QueueCell last_cell
    # bumped by remove_cell: whoever remembers cells (the reput's table, _dispatch) forgets them when it moves
    cdef readonly int64_t cells_removed
    cdef bytes store_host_b
    cdef int32_t store_flag
    cdef public int64_t max_message_size
    cdef public bint writeable
    cdef int64_t begin_time_in_lock
    cdef public int64_t os_page_cache_busy_timeout
    cdef public object roll_file
    # the roll's ready file: the next commit-log file, made ahead by the allocate service (which sets it, and
    # takes it back, under its own lock), taken by ``_roll`` in C when it starts where the log goes on.
    # ``files_owner`` holds the log's file list (``_files``) and ``files_lock`` (a reentrant PutMessageLock)
    # guards its changes: the roll publishes the file there without calling Python
    cdef public MappedFile ready
    cdef public object files_owner
    cdef public PutMessageLock files_lock
    cdef readonly int64_t ready_rolls       # rolls that took the ready file (the others called ``roll_file``)
    cdef public object after_put
    cdef public object delay_rewrite
    # RocketMQ 5's timer transform: called only for a message with a timer property (Message._timer); returns the
    # message to store, or (status, reason) to refuse it. The compiled one (pystore.timer._timer_put.TimerPut) is
    # called through the C pointer its module registers (set_timer_rewrite), any other object as a Python callable
    cdef public object timer_rewrite
    cdef public object flush_wakeup
    cdef int64_t flush_notified       # the flush service was woken since it last looked (cleared by it)
    # The flush service's wake-up when it waits in C (``_flush_wait``): _notify's state word, in this process's
    # memory, and its flags word (0: the put path fences before it looks for a waiter). flush_wake_c: puts
    # wake the service through it rather than by calling flush_wakeup.
    cdef uint64_t flush_word
    cdef uint32_t flush_flags
    cdef public bint flush_wake_c
    # the CPU the thread that last woke the flush service is pinned to (-1: none, or not pinned), where the
    # store's service threads that follow the puts go when ``follow_put_cpu`` is set
    cdef public int put_cpu
    cdef public bint follow_put_cpu
    cdef public long long wake_bytes
    cdef public Dispatcher dispatcher
    cdef public object clock
    # the store's configuration (StoreConfig, or None): read only by a refused put's ``reason``
    cdef public object config
    cdef readonly int64_t put_times_total
    cdef readonly int64_t put_size_total
    cdef readonly int64_t put_failed_times
    cdef readonly int64_t put_max_ns
    cdef int64_t buckets[13]
    # Several writer processes (``CommitLog.share``): the append lock they share, taken inside the put lock;
    # under it, this process first moves its view of the log to the others' published end (``_advance``: past
    # their records unread, their queues' offsets being in the lock's table; walked in C where the table does
    # not hold them, ``_catch_up``), and ``shared_repair`` (Python, only after a holder died mid-put) mends the
    # torn bytes. None: this process is the log's only writer.
    cdef readonly SharedLock shared
    cdef public object shared_repair
    cdef readonly int64_t caught_up         # records of other writers walked by ``_catch_up``
    cdef readonly int64_t jumped            # bytes of other writers' records passed by ``_jump`` (not read)
    # the cell whose offset this hold of the append lock took from the table (written back at ``_shared_exit``)
    cdef QueueCell held_cell
    # this hold of the append lock got past its repair and catch-up: what it wrote is published at its end
    cdef bint shared_ready
    # the last catch-up found the writers walking (``walk from`` set): the next one starts before the lock
    cdef bint walk_hint
    # the catch-up walk's recent cells (``_catch_cell``)
    # ``cells_removed`` when the slots were filled (a removed cell empties them)
    cdef RecentCells catch

    cdef int find_cell(self, Message m) except -1
    cdef QueueCell cell_of(self, str topic, int32_t queue_id)
    cdef bint _page_cache_busy(self) except -1

    # -- the put protocol, shared by the single put, the batch put and the column put's chunks --------------
    # Before the lock: SERVICE_NOT_AVAILABLE when not ``writeable``, the put's own checks of its messages, then
    # ``_room_refusal``. Under it: ``try: mf = _enter(...) ... finally: _exit()``. After it: ``_finish`` (and
    # the ``after_put`` hook). Each put keeps its specifics: a batch never spans two files, a column put goes
    # in chunks (as many as fit in the file and the chunk after ``_enter`` found one).

    cdef inline int _room_refusal(self, int64_t total) except -1:
        """The last checks before the lock, for ``total`` bytes of records: the page cache busy (a put has held
        the lock too long: fail fast), then more than a file can hold with its END_OF_FILE blank."""
        if self.begin_time_in_lock != 0 and self._page_cache_busy():
            return REFUSE_BUSY
        if total + END_FILE_MIN_BLANK_LENGTH > self.file_size:
            return REFUSE_ILLEGAL
        return REFUSE_NONE

    cdef inline MappedFile _enter(self, Message m, int64_t total, bint prepare):
        """Take the put lock and what every put needs under it: the dispatcher's ``prepare(m)`` (``prepare``:
        a single put, whose dispatch work may overlap its append), one clock read that is the store time and
        the lock time (``begin_time_in_lock``, RocketMQ's beginLockTimestamp: the page-cache-busy check runs
        on the store's clock, a test's fake one included), the cell of ``m``'s topic and queue (``last_cell``
        on return) and the file with room for ``total`` bytes (None: CREATE_MAPPED_FILE_FAILED). The lock is
        taken first and taking it cannot fail, so the caller's ``try``/``finally: _exit()`` around this call
        releases it whatever is raised after."""
        self.put_lock.lock()
        if self.shared is not None:
            self._shared_enter()        # raises (the caller's ``finally`` runs ``_exit``) when it cannot be had
        if prepare and self.dispatcher is not None:
            self.dispatcher.prepare(m)
        self.begin_time_in_lock = self._now()
        self.find_cell(m)
        return self._file_with_room(total)

    cdef inline void _exit(self) noexcept:
        self.begin_time_in_lock = 0
        if self.shared is not None and self.shared.held:
            self._shared_exit()
        self.put_lock.unlock()

    cdef inline void _reserve(self, int64_t end) noexcept:
        """Before bytes up to log offset ``end`` are written under the lock: other writers repair them if this
        process dies before ``_exit`` publishes them."""
        if self.shared is not None:
            self.shared.reserve(end)

    cdef inline int _finish(self, int64_t t0, int64_t size, MappedFile mf) except -1:
        """After the lock, for a put that stored ``size`` bytes into ``mf`` (``t0``: before the lock): the
        statistics, then the pre-fault and the flush wake-up."""
        self._account(t0, size)
        self._after_append(mf)
        return 0

    cdef int _shared_enter(self) except -1
    cdef void _shared_exit(self) noexcept
    cdef int _take_offset(self, QueueCell cell) except -1
    cdef int _follow_published(self) except -1
    cdef int _advance(self, int64_t target, int64_t stop_at) except -1
    cdef int _jump(self, int64_t target) except -1
    cdef int _catch_up(self, int64_t target, int64_t stop_at=*) except -1
    cdef QueueCell _catch_cell(self, const unsigned char *rec, RecordView *v)
    cdef int64_t _end(self) noexcept
    cdef int64_t _now(self)
    cdef void _account(self, int64_t t0, int64_t size) noexcept
    cdef MappedFile _roll(self, int64_t next_offset)
    cdef MappedFile _file_with_room(self, int64_t total)
    cdef int _after_append(self, MappedFile mf) except -1
    cdef object _put(self, Message msg, bint run_after)


cdef class RecentCells:
    """The cells of the last ``RECENT_CELLS`` (topic, queue id) pairs a walk over records met (several writers, or
    a timer slot's deliveries, interleave a few queues): a record's cell found without making its topic's text
    (``get``); a miss asks the table (``CommitLogCore.cell_of``). Emptied when a cell left the table."""
    cdef list topics                  # UTF-8 bytes, or None
    cdef int32_t queues[8]
    cdef list cells
    cdef int next
    cdef int64_t removed              # the table's ``cells_removed`` when the slots were filled

    cdef QueueCell get(self, CommitLogCore cl, const unsigned char *topic, int32_t n, int32_t queue_id)


# the batch put (``_batch_put.put_batch``): ``put_messages``/``append_messages`` call it through this pointer, which
# that module sets when it is imported
ctypedef object (*BatchPut)(CommitLogCore cl, object batch, bint run_after)
cdef int set_batch_put(BatchPut put) except -1
# a refused put's result, counted as a failed put (its ``reason`` computed only if asked)
cdef PutMessageResult refused(CommitLogCore cl, object what, object status)
# the compiled timer transform (``_timer_put.TimerPut``): ``_put`` calls a ``timer_rewrite`` of type ``cls`` through
# ``fn``, without Python; that module registers both when it is imported (``log`` never imports ``timer``)
ctypedef object (*TimerRewrite)(object hook, Message msg)
cdef int set_timer_rewrite(TimerRewrite fn, type cls) except -1
