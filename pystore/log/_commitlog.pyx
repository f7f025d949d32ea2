# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The put path: checks, the put lock, queue offsets, encode into the last commit-log file, roll.

One call per message (``put_message``) or per batch (``put_messages``) does everything in C (docs/format.md §1.11,
4.x order): refuse what must be refused with a status; take the put lock; stamp the store time (the lock time); take
the queue offset from the topic-queue table (so a failed append never burns one); encode straight into the mapped
file; if the record and an 8-byte blank do not fit, write the blank (END_OF_FILE), roll to the next file and encode
there; a batch never spans two files. The single put, the batch put (``_batch_put``) and the column put
(``_bulk_put``) share one protocol for the refusals, the lock, the store time, the cell and the file with room
(``_room_refusal``, ``_enter``, ``_exit``, ``_finish``, inline in ``_commitlog.pxd``; the messages' checks inline
from ``_put_checks.pxd``) and keep only their own checks and encoding. Under the lock the record is also handed to
the inline dispatcher (consume queue, index) when there is one. Afterwards the flush service is woken (a C flag
keeps that to one Python call per flush cycle) and, if set, the ``after_put`` hook decides the final status (group
commit, replication).

Policy stays in Python (``commitlog.CommitLog``, which holds this core as its ``core``): the hooks it and the wiring
set say where the next file comes from (``roll_file``), what happens after a put (``after_put``), delay-level
rewriting (``delay_rewrite``), RocketMQ 5's timer transform (``timer_rewrite``, called only for a message with a
timer property, before the delay rewrite as ``HookUtils.handleScheduleMessage`` orders them; batches never call it,
as RocketMQ's hook skips a ``MessageExtBatch``; the store's own, ``pystore.timer._timer_put.TimerPut``, is called
through a C pointer that module registers, ``set_timer_rewrite``), whether the store is writeable.

Thread-safety: all methods may be called from any thread. The put lock (``_put_lock``) is RocketMQ's spin lock by
default (an atomic flag; a waiter yields the GIL after a few spins, so a holder that released the GIL to copy a big
body can finish) or a mutex (``use_reentrant_lock_when_put_message``).
"""

cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from libc.stdint cimport int32_t, int64_t
from libc.string cimport memcmp

from pystore.format._bytes cimport mono_coarse_ns, pinned_cpu, now_ms, store_i64_release
from pystore.format._codec cimport (BIG_BODY, END_FILE_MIN_BLANK_LENGTH, REC_BLANK, STOREHOSTADDRESS_V6_FLAG,
                                    RecordView, check_record, encode_message, enters_queue, message_length,
                                    write_blank)
from pystore.format._jstring cimport utf8_text
from pystore.log._mapped_file cimport MappedFile, prefault_follow_cpu
from pystore.system._notify cimport ps_notify
from pystore.format._hosts cimport encode_host
from pystore.message._message cimport Message, copy_message
from pystore.message._message_batch cimport MessageBatch
from pystore.log._put_lock cimport PutMessageLock
from pystore.log._shared_lock cimport SharedLock
from pystore.log._put_checks cimport own_refusal, unchanged
from pystore.log._results cimport PutMessageResult, put_failed, put_ok

cdef extern from "<errno.h>" nogil:
    int EBUSY

cdef extern from "_notify.h" nogil:
    void cpu_relax "ps_cpu_relax"() noexcept      # a pause between tries of a lock (the wake word's, shared)

cdef enum:
    LOCK_SPINS = 200        # tries of the writers' append lock before waiting on it (about 2-8 us of pause)

cdef extern from "<signal.h>" nogil:
    int kill(int pid, int sig)
    int SIGKILL

cdef extern from "<unistd.h>" nogil:
    int getpid()

import logging
import os

from pystore.errors import StoreCorruptedError, StoreError
from pystore.status import PutMessageStatus
from pystore.system.crashpoint import nth as crash_nth

log = logging.getLogger(__name__)

cdef object ST_SERVICE_NOT_AVAILABLE = PutMessageStatus.SERVICE_NOT_AVAILABLE
cdef object ST_MESSAGE_ILLEGAL = PutMessageStatus.MESSAGE_ILLEGAL
cdef object ST_PROPERTIES_SIZE_EXCEEDED = PutMessageStatus.PROPERTIES_SIZE_EXCEEDED
cdef object ST_OS_PAGE_CACHE_BUSY = PutMessageStatus.OS_PAGE_CACHE_BUSY
cdef object ST_CREATE_MAPPED_FILE_FAILED = PutMessageStatus.CREATE_MAPPED_FILE_FAILED
cdef object ST_UNKNOWN_ERROR = PutMessageStatus.UNKNOWN_ERROR

# how far ahead of the writer a commit-log file is pre-faulted (MappedFile.prefault_ahead): warmed files too, as the
# kernel write-protects a warmed file's zeros when it writes them back; a file with a window uses half of it instead
cdef int64_t CL_PREFAULT_LEAD = 2 * 1024 * 1024

# RocketMQ's put-latency buckets (ms upper bounds, exclusive): [<=0] [0,10) [10,50) ... [10s,)
cdef int64_t[12] _BUCKET_MS = [1, 10, 50, 100, 200, 500, 1000, 2000, 3000, 4000, 5000, 10000]
# the shared append's crash points (pystore.system.crashpoint): the arrival that kills (0: not armed)
cdef int64_t _crash_reserved = crash_nth("shared.reserved")
cdef int64_t _crash_copied = crash_nth("shared.copied")
cdef int64_t _crash_catching = crash_nth("shared.catching_up")


cdef inline void _crash_at(int64_t *countdown) noexcept nogil:
    if countdown[0] > 0:
        countdown[0] -= 1
        if countdown[0] == 0:
            kill(getpid(), SIGKILL)


BUCKET_NAMES = ("<=0ms", "0~10ms", "10~50ms", "50~100ms", "100~200ms", "200~500ms", "500ms~1s", "1~2s", "2~3s",
                "3~4s", "4~5s", "5~10s", "10s~")


@cython.final
cdef class QueueCell:
    def __init__(self, str topic, int queue_id, long long next_offset=0):
        self.topic = topic
        self.queue_id = queue_id
        self.next_offset = next_offset
        self.slot = SLOT_UNKNOWN

    def __repr__(self):
        return "QueueCell(%r, %d, next_offset=%d)" % (self.topic, self.queue_id, self.next_offset)


cdef class Dispatcher:
    cdef void prepare(self, Message msg) noexcept:
        """A record of ``msg`` is about to be appended (a single put, under the put lock): work its dispatch
        will need may start now, to overlap the append."""
        pass

    cdef int dispatch(self, QueueCell cell, Message msg, int64_t phy_offset, int32_t size, int64_t store_ts,
                      int64_t queue_offset) except -1:
        return 0

    cdef int dispatch_run(self, QueueCell cell, Message msg, int64_t phy_offset, const int32_t *sizes, Py_ssize_t n,
                          int64_t store_ts, int64_t queue_offset) except -1:
        """``dispatch`` for ``n`` consecutive records that share ``msg``'s topic, queue and properties (a batch
        built from bodies, or a batch of messages with one tags code and type and no keys): record i is
        ``sizes[i]`` bytes and takes queue offset ``queue_offset + i``."""
        cdef Py_ssize_t i
        for i in range(n):
            self.dispatch(cell, msg, phy_offset, sizes[i], store_ts, queue_offset + i)
            phy_offset += sizes[i]
        return 0

    cdef int dispatch_each(self, QueueCell cell, Message msg, const unsigned char *rec, int64_t phy_offset,
                           const int32_t *sizes, const int32_t *props_lens, const int64_t *tags_codes, Py_ssize_t n,
                           int64_t store_ts, int64_t queue_offset, bint keyed) except -1:
        """``dispatch_run`` for ``n`` consecutive records of ``msg``'s topic, queue and type whose properties
        differ (the column put with a tags or keys column): record i starts at ``rec`` plus the sizes before
        it, ends with its ``props_lens[i]`` bytes of properties and has the tags code ``tags_codes[i]``;
        ``keyed``: whether any may have keys to index."""
        return 0

    cdef int dispatch_record(self, QueueCell cell, const unsigned char *rec, RecordView *v, int64_t phy_offset,
                             int64_t queue_offset) except -1:
        """A record written from another record's bytes rather than from a ``Message`` (the timer store's
        compiled delivery, ``pystore.timer._dequeue``), checked and described by ``v``: it enters its queue (no
        delay level, no transaction type) and takes queue offset ``queue_offset``."""
        return 0


# the batch put (``_batch_put.put_batch``), registered by that module when it is imported (at the end of this one)
cdef BatchPut _put_batch = NULL


cdef int set_batch_put(BatchPut put) except -1:
    global _put_batch
    _put_batch = put
    return 0


# the compiled timer transform and its type, registered by ``pystore.timer._timer_put`` when it is imported
cdef TimerRewrite _timer_fn = NULL
cdef type _timer_cls = None


cdef int set_timer_rewrite(TimerRewrite fn, type cls) except -1:
    global _timer_fn, _timer_cls
    _timer_fn = fn
    _timer_cls = cls
    return 0


cdef object refusal_status(int code):
    """The status of a refusal (``REFUSE_*``, _commitlog.pxd)."""
    if code == REFUSE_PROPERTIES:
        return ST_PROPERTIES_SIZE_EXCEEDED
    if code == REFUSE_BUSY:
        return ST_OS_PAGE_CACHE_BUSY
    return ST_MESSAGE_ILLEGAL


cdef PutMessageResult refused(CommitLogCore cl, object what, object status):
    """A refused put's result (counted as a failed put), which keeps what was refused and the store's
    configuration so that its ``reason`` can say why in words (computed only if asked: the refusal path makes
    no text)."""
    cdef PutMessageResult r = put_failed(status)
    cl.put_failed_times += 1
    r._refused = (what, cl.config)
    return r


cdef PutMessageResult _refused_because(CommitLogCore cl, object msg, tuple refusal):
    """A put the timer hook refused: ``refusal`` is (status, reason); the reason is kept in words, since it
    depends on the clock at the time of the put and cannot be derived again afterwards."""
    cdef PutMessageResult r = refused(cl, msg, refusal[0])
    r._refused = (refusal[1], cl.config)
    return r


@cython.final
cdef class RecentCells:
    def __cinit__(self):
        self.topics = [None] * RECENT_CELLS
        self.cells = [None] * RECENT_CELLS
        self.removed = -1

    cdef QueueCell get(self, CommitLogCore cl, const unsigned char *topic, int32_t n, int32_t queue_id):
        """The cell of ``topic`` (``n`` UTF-8 bytes) and ``queue_id``: from the slots, else the table's (a text
        and a key made, once per miss), which then takes the oldest slot."""
        cdef int i
        cdef bytes t
        if self.removed != cl.cells_removed:        # a cell left the table: the slots may hold it
            for i in range(RECENT_CELLS):
                self.topics[i] = None
            self.removed = cl.cells_removed
        for i in range(RECENT_CELLS):
            t = <bytes>self.topics[i]
            if (t is not None and self.queues[i] == queue_id and PyBytes_GET_SIZE(t) == n
                    and memcmp(PyBytes_AS_STRING(t), topic, n) == 0):
                return <QueueCell>self.cells[i]
        i = self.next
        self.next = (i + 1) % RECENT_CELLS
        self.cells[i] = cl.cell_of(utf8_text(topic, n), queue_id)
        self.topics[i] = PyBytes_FromStringAndSize(<const char *>topic, n)
        self.queues[i] = queue_id
        return <QueueCell>self.cells[i]


cdef class CommitLogCore:
    """The compiled half of the commit log, held by the Python half (``commitlog.CommitLog.core``)."""

    def __init__(self, long long file_size, store_host=("127.0.0.1", 10911), long long max_message_size=4194304,
                 bint reentrant_lock=False, long long os_page_cache_busy_timeout=1000):
        if file_size <= END_FILE_MIN_BLANK_LENGTH:
            raise ValueError("commit-log file size %d is too small" % file_size)
        self.file_size = file_size
        self.put_lock = PutMessageLock(reentrant_lock)
        self.table = {}
        self.catch = RecentCells()
        self.max_message_size = max_message_size
        self.os_page_cache_busy_timeout = os_page_cache_busy_timeout
        self.put_cpu = -1
        self.set_store_host(store_host)

    def set_store_host(self, host):
        cdef bint v6 = False
        self.store_host_b = encode_host(tuple(host), &v6)
        self.store_flag = STOREHOSTADDRESS_V6_FLAG if v6 else 0

    @property
    def last_file(self):
        return self.last

    @last_file.setter
    def last_file(self, MappedFile mf):
        self.last = mf

    @property
    def put_lock(self):
        return self.put_lock

    # -- topic-queue table ---------------------------------------------------------------------

    cdef int find_cell(self, Message m) except -1:
        """Make ``last_cell`` the cell of ``m``'s topic and queue (created when missing)."""
        # puts mostly repeat a topic and queue: one string compare (the same object when a template or a
        # message is reused) instead of a dict lookup. Cells are only added when missing or removed
        # (remove_cell forgets the last one), so the remembered cell is the table's.
        cdef str key = m._tq_key
        cdef object c
        if self.last_cell is None or not (key is self.last_key or key == self.last_key):
            c = self.table.get(key)
            if c is None:
                c = QueueCell(m._topic, m._queue_id, 0)
                self.table[key] = c
            self.last_key = key
            self.last_cell = <QueueCell>c
        if self.shared is not None:
            self._take_offset(self.last_cell)
        return 0

    cdef QueueCell cell_of(self, str topic, int32_t queue_id):
        """The cell of ``(topic, queue_id)``, created when missing."""
        cdef str key = "%s-%d" % (topic, queue_id)
        cdef object c = self.table.get(key)
        if c is None:
            c = QueueCell(topic, queue_id, 0)
            self.table[key] = c
        return <QueueCell>c

    def get_cell(self, str topic, int queue_id, bint create=True):
        if create:
            return self.cell_of(topic, queue_id)
        return self.table.get("%s-%d" % (topic, queue_id))

    def cells(self):
        return list(self.table.values())

    def remove_cell(self, str topic, int queue_id):
        """Forget a queue's cell (the cleaner's, under the put lock). The next put looks its cell up again
        (``last_key`` forgotten); ``last_cell`` keeps the old object, never None: the put paths read it as a
        typed cell after ``find_cell``, so a caller without the lock costs a put its queue, never memory."""
        self.last_key = None
        self.cells_removed += 1
        return self.table.pop("%s-%d" % (topic, queue_id), None)

    def get_topic_queue_table(self):
        """``{(topic, queue_id): next queue offset}``."""
        return {(c.topic, c.queue_id): c.next_offset for c in self.table.values()}

    # -- page-cache busy (docs/format.md §6.6) --------------------------------------------------------

    # Policy time: a put that has held the lock longer than os_page_cache_busy_timeout by the store's clock
    # (the C clock when none was injected) makes the others fail fast (pystore.system.service states the rule).

    def is_os_page_cache_busy(self):
        return self._page_cache_busy()

    cdef bint _page_cache_busy(self) except -1:
        cdef int64_t begin = self.begin_time_in_lock
        cdef int64_t diff = self._now() - begin
        return diff < 10000000 and diff > self.os_page_cache_busy_timeout

    def lock_time_mills(self):
        cdef int64_t begin = self.begin_time_in_lock
        cdef int64_t diff = self._now() - begin
        return diff if diff < 10000000 else 0

    # -- flush wake-up ----------------------------------------------------------------------------

    def clear_flush_notified(self):
        """The flush service calls this when it wakes, so the next put notifies it again."""
        store_i64_release(&self.flush_notified, 0)

    # -- putting -----------------------------------------------------------------------------------

    cdef MappedFile _roll(self, int64_t next_offset):
        """The next file: the ready one (``ready``, made ahead by the allocate service) when it starts at
        ``next_offset``, published into the log's file list here; else from Python policy (``roll_file``: the
        allocate service, waited for); None when it cannot be created."""
        cdef object mf
        cdef MappedFile r = self.ready
        cdef list files
        if r is not None and r.file_from_offset == next_offset and self.files_lock is not None:
            # the list is copy-on-write: readers keep the one they took; changes hold its lock (the cleaner
            # deletes old files under it). The ready file is taken only where the list ends; otherwise (it
            # cannot follow a list that changed) it is left to the allocate service, which drops it
            self.files_lock.lock()
            try:
                files = self.files_owner._files
                if PyList_GET_SIZE(files) > 0 and (<MappedFile>PyList_GET_ITEM(files, PyList_GET_SIZE(files) - 1)
                                                   ).file_from_offset + self.file_size == next_offset:
                    self.ready = None
                    self.files_owner._files = files + [r]
                    self.last = r
                    self.ready_rolls += 1
                    return r
            finally:
                self.files_lock.unlock()
        if self.roll_file is None:
            return None
        try:
            mf = self.roll_file(next_offset)
        except Exception:
            log.exception("creating the commit-log file at offset %d failed", next_offset)
            return None
        if mf is None:
            return None
        self.last = <MappedFile>mf
        return self.last

    cdef MappedFile _file_with_room(self, int64_t total):
        """Under the put lock: the file the next ``total`` bytes go into (docs/format.md §1.4). A full or missing
        last file rolls; when the rest of the file cannot hold them plus the blank, an 8-byte blank fills it
        (END_OF_FILE) and the next file is taken. None when a file cannot be created."""
        cdef MappedFile mf = self.last
        cdef int64_t pos
        if mf is None or mf.wrote >= mf.file_size:
            if mf is not None:
                mf.settle()
            mf = self._roll(0 if mf is None else mf.file_from_offset + mf.file_size)
            if mf is None:
                return None
        pos = mf.wrote
        if total + END_FILE_MIN_BLANK_LENGTH > mf.file_size - pos:
            self._reserve(mf.file_from_offset + mf.file_size + total)      # the blank, then the record
            write_blank(mf.write_base + pos, <int32_t>(mf.file_size - pos))
            mf.fill_to_end()
            mf.settle()
            mf = self._roll(mf.file_from_offset + mf.file_size)
            if mf is None:
                return None
            pos = mf.wrote
        # the blocks the record (and a blank after it) will take: a write into a hole of a full disk is SIGBUS
        if mf.reserve(pos, pos + total + END_FILE_MIN_BLANK_LENGTH) != 0:
            log.error("%s: cannot allocate %d bytes at %d: %s", mf.file_name, total, pos,
                      os.strerror(mf.reserve_errno))
            return None
        self._reserve(mf.file_from_offset + pos + total)
        if self.shared is not None:
            _crash_at(&_crash_reserved)
        return mf

    # -- several writer processes -------------------------------------------------------------------------

    cdef int64_t _end(self) noexcept:
        """Where this process's view of the log ends (0 before its first file)."""
        return 0 if self.last is None else self.last.file_from_offset + self.last.wrote

    cdef int _shared_enter(self) except -1:
        """Under the put lock: take the shared append lock (tried first; waited for without the GIL only when
        another process holds it), repair what a holder that died mid-put left (Python: once per death), then
        catch up on what the others appended."""
        cdef SharedLock lock = self.shared
        cdef int rc, _spin
        # a walk (of records the table does not cover) mostly before the shared lock, so that other writers need not
        # wait for this process to read; a jump is made under it only (reading the page's published end here too
        # would move its cache line from the holder once more a put)
        if self.walk_hint:
            self._follow_published()
        rc = lock.try_lock()
        if rc == EBUSY:
            with nogil:
                # a holder keeps the lock for a put (under a microsecond): spin before a futex wait (microseconds)
                for _spin in range(LOCK_SPINS):
                    cpu_relax()
                    rc = lock.try_lock()
                    if rc != EBUSY:
                        break
                if rc == EBUSY:
                    rc = lock.lock()
        if rc != 0:
            raise OSError(rc, "the writers' append lock: " + os.strerror(rc))
        if lock.torn():
            if self.shared_repair is None:
                raise StoreError("a writer died in the middle of a put and no repair is set")
            self.shared_repair()
        self._follow_published()
        self.shared_ready = True
        return 0

    cdef int _take_offset(self, QueueCell cell) except -1:
        """Under the append lock, for the put about to be made into ``cell``'s queue: its next offset from the
        writers' table (the slot looked up once per queue, added with this process's own offset when missing:
        right, as no writer put there since the table began, or, once it filled up, since every writer walks),
        noted in the page before anything is reserved, so that a repair gives it back if this process dies
        before it publishes."""
        cdef SharedLock lock = self.shared
        cdef bytes t
        cdef int64_t off
        if cell.slot == SLOT_UNKNOWN:
            t = cell.topic.encode("utf-8")
            cell.slot = lock.find_slot(<const unsigned char *>PyBytes_AS_STRING(t), PyBytes_GET_SIZE(t),
                                       cell.queue_id, cell.next_offset)
            if cell.slot < 0:
                cell.slot = SLOT_NONE
        if cell.slot >= 0:
            off = lock.slot_offset(cell.slot)
            lock.note(cell.slot, off)
            cell.next_offset = off
            self.held_cell = cell
        else:
            lock.note(-1, 0)
            self.held_cell = None
        return 0

    cdef int _follow_published(self) except -1:
        """Move this process's view of the log to the published end, with or without the shared lock: records
        below it are whole and never change (a repair zeroes only past it)."""
        cdef int64_t target = self.shared.published()
        if target != self._end():
            self._advance(target, -1)
        return 0

    cdef int _advance(self, int64_t target, int64_t stop_at) except -1:
        """Move this process's view of the log to ``target`` (read from the page before this call): the records
        from before the queue-offset table began, and those past where it filled up, are walked (their queues'
        offsets are known only from them); the rest is passed without reading (every queue put to there has its
        offset in the table). ``stop_at`` as ``_catch_up``'s (a walk in steps)."""
        cdef SharedLock lock = self.shared
        cdef int64_t table_from = lock.table_from()
        cdef int64_t walk_from = lock.walk_from()        # after ``target``: a set point is below it, or past it
        self.walk_hint = walk_from >= 0
        if self._end() < table_from:
            self._catch_up(target if target < table_from else table_from, stop_at)
            if self._end() < table_from or target <= table_from:
                return 0
        if walk_from < 0 or walk_from >= target:
            return self._jump(target)
        if self._end() < walk_from:
            self._jump(walk_from)
        return self._catch_up(target, stop_at)

    cdef int _jump(self, int64_t target) except -1:
        """Move this process's view of the log to ``target``, where whole records end, without reading them: the
        files the others filled are taken as full (each ends in the blank its roller wrote) and the files they
        made are mapped (``roll_file``, once each); the last file's store time is the page's (the last
        published record's)."""
        cdef MappedFile mf = self.last
        cdef int64_t start, end = self._end()
        if mf is None:
            mf = self._roll(0)
        while mf is not None:
            start = mf.file_from_offset
            if start + mf.wrote > target:
                raise StoreCorruptedError(mf.file_name, mf.wrote, "this writer's end %d is past the published end"
                                          " %d" % (start + mf.wrote, target))
            if target <= start + mf.file_size:
                if target == start + mf.file_size:
                    mf.fill_to_end()
                elif target > start + mf.wrote:
                    mf.publish(target - start)
                mf.store_timestamp = self.shared.published_ts()
                self.jumped += target - end
                _crash_at(&_crash_catching)
                return 0
            mf.fill_to_end()
            mf.settle()
            mf = self._roll(start + mf.file_size)
        raise StoreError("cannot map the commit-log file another writer made (offset %d)" % target)

    cdef void _shared_exit(self) noexcept:
        # what this hold wrote ends at this process's end (a failed put wrote nothing, or a whole blank and roll);
        # its queue's next offset goes into the table first (the repair of a death before the publish gives the
        # noted one back)
        cdef QueueCell cell = self.held_cell
        if cell is not None:
            self.held_cell = None
            self.shared.set_slot_offset(cell.slot, cell.next_offset)
        _crash_at(&_crash_copied)
        if self.shared_ready:
            self.shared_ready = False
            self.shared.publish_stamped(self._end(), 0 if self.last is None else self.last.store_timestamp)
        # else the hold failed before it could put (a repair or the catch-up raised): nothing to publish, and a
        # repair left to do stays for the next locker
        self.shared.unlock()

    cdef int _catch_up(self, int64_t target, int64_t stop_at=-1) except -1:
        """Walk the records other writers published after this process's end up to ``target`` (their headers,
        checked as recovery checks them, without the CRC), moving the files' write positions and the queue
        offsets of the records' queues on; files others made are mapped through ``roll_file`` (once each).
        A record that is not whole below the published end is damage: StoreCorruptedError. With ``stop_at``
        >= 0, the walk ends at the first record boundary at or past it (a long catch-up made in steps)."""
        cdef MappedFile mf = self.last
        cdef int64_t start, pos
        cdef int32_t r
        cdef RecordView v
        cdef const unsigned char *rec
        cdef QueueCell cell
        if mf is None:
            mf = self._roll(0)
        while mf is not None:
            start = mf.file_from_offset
            pos = mf.wrote
            if start + pos == target or 0 <= stop_at <= start + pos:
                return 0
            if start + pos > target:
                raise StoreCorruptedError(mf.file_name, pos, "this writer's end %d is past the published end %d"
                                          % (start + pos, target))
            if pos >= mf.file_size:
                mf.settle()
                mf = self._roll(start + mf.file_size)
                continue
            rec = mf.base + pos
            r = check_record(rec, min(mf.file_size, target - start) - pos, False, &v)
            if r == REC_BLANK:
                mf.fill_to_end()
                continue
            if r <= 0 or v.phy_offset != start + pos:
                raise StoreCorruptedError(mf.file_name, pos, "no whole record where another writer published one"
                                          " (check %d)" % r)
            if enters_queue(v.sys_flag):
                cell = self._catch_cell(rec, &v)
                if v.queue_offset >= cell.next_offset:
                    cell.next_offset = v.queue_offset + 1
            mf.publish(pos + r)
            mf.store_timestamp = v.store_ts
            self.caught_up += 1
            _crash_at(&_crash_catching)
        raise StoreError("cannot map the commit-log file another writer made (offset %d)" % target)

    cdef QueueCell _catch_cell(self, const unsigned char *rec, RecordView *v):
        """The cell of the walked record's topic and queue (several writers interleave their queues' records)."""
        return self.catch.get(self, rec + v.topic_pos, v.topic_len, v.queue_id)

    def share(self, SharedLock lock, repair):
        """Append under ``lock`` with other processes from now on (``repair()``: called under the lock when
        the last holder died mid-put); ``share(None, None)`` goes back to being the only writer."""
        cdef QueueCell cell
        self.put_lock.lock()
        try:
            self.shared = lock
            self.shared_repair = repair
            self.catch = RecentCells()
            self.held_cell = None
            self.walk_hint = True               # the first catch-up may be a walk: before the lock
            for cell in self.table.values():
                cell.slot = SLOT_UNKNOWN        # slots are looked up again in the table of the lock given
        finally:
            self.put_lock.unlock()

    def catch_up(self, long long step=-1, bint wait=True):
        """Catch up on the others' records up to the published end (a process that reads or flushes the log
        without putting): under this process's put lock only, as records below that end never change; returns
        where this process's view of the log now ends. With ``step`` >= 0, at most about ``step`` bytes of
        records are walked (to the first record boundary past them): a long catch-up in steps, between which
        other threads get the GIL. ``wait`` False: when the put lock is held (a put of this process is under
        way, and moves the view on itself), the view's end as it is, at once: a thread spinning for the put lock
        while the putting thread waits for the append lock without the GIL would then keep the GIL from it,
        holding the append lock, and every writer with it."""
        cdef int64_t end, target
        if self.shared is None:
            return self._end()
        if not wait:
            if not self.put_lock.try_lock():
                # not past the published end: the put under way may have written bytes it has not published
                end = self._end()
                target = self.shared.published()
                return end if end < target else target
        else:
            self.put_lock.lock()
        try:
            if step < 0:
                self._follow_published()
            else:
                target = self.shared.published()
                end = self._end()
                if target != end:
                    self._advance(target, end + step)
            end = self._end()
        finally:
            self.put_lock.unlock()
        return end

    cdef int _after_append(self, MappedFile mf) except -1:
        cdef int cpu
        # Keep pages ahead of the writer pre-faulted by the prefault worker (a page-table walk where they are
        # still writable; a no-op for transient-pool buffers).
        mf.prefault_ahead(mf.wrote, mf.window // 2 if mf.window >= 0 else CL_PREFAULT_LEAD)
        # Wake the flush (or commit) service once enough is dirty for it to act on: it flushes no less than
        # flush_commit_log_least_pages between its timed passes anyway. Waiting in C (_flush_wait), it is
        # woken through flush_word: a fence and, only while it sleeps, a FUTEX_WAKE; a Python service's
        # wake-up (an Event) would cost the putting thread the GIL each time (RocketMQ's Java one is free).
        if not self.flush_notified and mf.wrote - mf.flushed >= self.wake_bytes:
            if self.flush_wake_c:
                self.flush_notified = 1
                if self.follow_put_cpu:
                    cpu = pinned_cpu()
                    if cpu != self.put_cpu:
                        self.put_cpu = cpu
                        prefault_follow_cpu(cpu)
                ps_notify(&self.flush_word, 0)
            elif self.flush_wakeup is not None:
                self.flush_notified = 1
                self.flush_wakeup()
        return 0

    cdef int64_t _now(self):
        return now_ms() if self.clock is None else <int64_t>self.clock()

    def put_message(self, Message msg not None):
        """Append one message; returns a ``PutMessageResult`` (never raises for a bad message)."""
        return self._put(msg, True)

    def put_messages(self, MessageBatch batch not None):
        """Append a batch under one lock hold, in one file, with consecutive queue offsets."""
        return _put_batch(self, batch, True)

    def append_message(self, Message msg not None):
        """Like ``put_message`` without the ``after_put`` hook: the result of the append alone (async puts
        hand it to the flush service themselves)."""
        return self._put(msg, False)

    def append_messages(self, MessageBatch batch not None):
        return _put_batch(self, batch, False)

    cdef object _put(self, Message msg, bint run_after):
        cdef bint private = False
        cdef int32_t total
        cdef str tq_key
        cdef int64_t ts = 0, qoff = 0, phy = 0, pos, t0
        cdef QueueCell cell
        cdef MappedFile mf
        cdef bint enters
        cdef int code
        cdef object status = None
        cdef PutMessageResult result
        cdef object rewritten, hook
        if not self.writeable:
            return refused(self, msg, ST_SERVICE_NOT_AVAILABLE)
        code = own_refusal(msg, self.max_message_size)
        if code != REFUSE_NONE:
            return refused(self, msg, refusal_status(code))
        if msg._timer and self.timer_rewrite is not None and enters_queue(msg._sys_flag):
            hook = self.timer_rewrite
            if _timer_fn != NULL and type(hook) is _timer_cls:
                rewritten = _timer_fn(hook, msg)        # the compiled transform: no Python
            else:
                rewritten = hook(msg)
            if not isinstance(rewritten, Message):
                return _refused_because(self, msg, <tuple>rewritten)
            msg = <Message>rewritten
            code = own_refusal(msg, self.max_message_size)
            if code != REFUSE_NONE:
                return refused(self, msg, refusal_status(code))
        if msg._delay_level > 0 and self.delay_rewrite is not None and enters_queue(msg._sys_flag):
            msg = self.delay_rewrite(msg)
            code = own_refusal(msg, self.max_message_size)
            if code != REFUSE_NONE:
                return refused(self, msg, refusal_status(code))
        total = message_length(msg, self.store_flag)
        code = self._room_refusal(total)
        if code != REFUSE_NONE:
            return refused(self, msg, refusal_status(code))
        msg.body_crc()
        if PyBytes_GET_SIZE(msg._body) >= BIG_BODY:
            # its body is copied without the GIL, and other threads may change the message meanwhile: the
            # record, its unit and its index entries are made from a private copy, all of one state (only a
            # private copy is ever copied without the GIL: a body that grows big while the put waits for the
            # lock is copied with it held)
            msg = copy_message(msg, True)
            private = True
        enters = enters_queue(msg._sys_flag)
        tq_key = msg._tq_key
        t0 = mono_coarse_ns()
        try:
            mf = self._enter(msg, total, True)
            ts = self.begin_time_in_lock
            cell = self.last_cell
            if enters:
                qoff = cell.next_offset
            if mf is None:
                status = ST_CREATE_MAPPED_FILE_FAILED
            elif not unchanged(msg, total, tq_key, enters, self.store_flag):
                status = ST_MESSAGE_ILLEGAL
            else:
                pos = mf.wrote
                phy = mf.file_from_offset + pos
                encode_message(mf.write_base + pos, msg, total, qoff, phy, ts, <const unsigned char *>
                               PyBytes_AS_STRING(self.store_host_b), self.store_flag, private)
                mf.publish(pos + total)
                mf.store_timestamp = ts
                if enters:
                    cell.next_offset = qoff + 1
                if self.dispatcher is not None:     # PREPARED records are indexed, not queued
                    self.dispatcher.dispatch(cell, msg, phy, total, ts, qoff)
        finally:
            self._exit()
        if status is not None:
            return refused(self, msg, status)
        result = put_ok(phy, total, ts, qoff, 1, self.store_host_b, self.store_flag, None)
        self._finish(t0, total, mf)
        if run_after and self.after_put is not None:
            return self.after_put(result, msg)
        return result

    cdef void _account(self, int64_t t0, int64_t size) noexcept:
        # coarse clock (tick resolution): the statistics are RocketMQ's, in milliseconds
        cdef int64_t dt = mono_coarse_ns() - t0
        cdef int64_t ms = dt // 1000000
        cdef int i
        self.put_times_total += 1
        self.put_size_total += size
        if dt > self.put_max_ns:
            self.put_max_ns = dt
        if ms <= 0:
            self.buckets[0] += 1
            return
        for i in range(1, 12):
            if ms < _BUCKET_MS[i]:
                self.buckets[i] += 1
                return
        self.buckets[12] += 1

    # -- stats ----------------------------------------------------------------------------------------

    def put_latency_buckets(self):
        return {BUCKET_NAMES[i]: self.buckets[i] for i in range(13)}


# the batch put lives in its own module, which cimports this one: imported once this module's types exist
from pystore.log import _batch_put  # no-cython-lint (imported to register put_batch)
