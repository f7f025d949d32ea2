# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Consume-queue units (docs/format.md §2): the compiled half of a consume queue (``ConsumeQueueCore``: write a
unit, a run of units, recovery's repair of one), and the scans of a queue file that loading, recovery,
cleanup and the tools run.

    0        8         12             20
    +--------+---------+--------------+
    | phyOff | size    | tagsCode     |   big-endian, 20 bytes
    | int64  | int32   | int64        |
    +--------+---------+--------------+

Queue offset *i* is the unit at byte ``i * 20`` of the queue's logical space; the file holding it is named
by the byte offset of its first unit. ``tagsCode`` is Java ``String.hashCode`` of the tags (0 without),
or, in ``SCHEDULE_TOPIC_XXXX``, the time the delayed message is due. A filler unit ``(0, 2**31-1, 0)``
pads a queue's first file when it starts at a non-zero offset.

Not checksummed: recovery rebuilds units from the commit log. A unit's size is written last, so a reader
(another process too) that sees a non-zero size sees the whole unit. One writer per queue (the put path
under the put lock, or the dispatch service: ``_dispatch``); readers see whole units only (``_read``,
``_timesearch``).
"""

cimport cython
from cpython.bytes cimport PyBytes_AS_STRING
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from libc.stdint cimport int32_t, int64_t

from pystore.format._bytes cimport get_i32, get_i64, put_i64, store_i32_release
from pystore.format._codec cimport CQ_FILLER_SIZE, CQ_STORE_UNIT_SIZE, RecordView, check_record
from pystore.log._mapped_file cimport MappedFile
from pystore.log._put_lock cimport PutMessageLock

import logging
import os

log = logging.getLogger(__name__)

UNIT_SIZE = CQ_STORE_UNIT_SIZE
FILLER_SIZE = CQ_FILLER_SIZE
cdef int32_t FILLER = CQ_FILLER_SIZE
# How far ahead of its writer a consume-queue file is pre-faulted (MappedFile._prefault asks for up to twice
# the lead once the writer is within the lead of what was asked): a queue starts at 64 KiB (3,276 units) and
# doubles its lead each time it used the previous one up, to at most 1 MiB. The worker zero-fills a new page
# of a sparse queue file in ~5 us at idle priority: a 64 KiB lead is used up in half a millisecond at 7 M
# puts/s, before the worker gets there, and the putting thread took ~1,100 of those faults per 320 k puts
# (~200 with 1 MiB). The lead grows with the units written, not with their rate: a queue that has written
# little keeps the short lead, so few zero pages are dirtied (and later written to
# disk) for it.
cdef int64_t CQ_PREFAULT_FIRST_LEAD = 65536
cdef int64_t CQ_PREFAULT_MAX_LEAD = 1024 * 1024


cdef extern from *:
    """
    #include <errno.h>
    #include <fcntl.h>
    #include <stdio.h>
    #include <sys/syscall.h>
    #include <unistd.h>
    /* rename that refuses to replace an existing file (renameat2 RENAME_NOREPLACE, through syscall(2): glibc
       before 2.28 has no wrapper); 0 or an errno (EINVAL where the file system cannot refuse atomically) */
    static int ps_rename_noreplace(const char *from, const char *to) {
    #ifdef SYS_renameat2
        return syscall(SYS_renameat2, AT_FDCWD, from, AT_FDCWD, to, 1 /* RENAME_NOREPLACE */) == 0 ? 0 : errno;
    #else
        (void)from; (void)to;
        return ENOSYS;
    #endif
    }
    """
    int ps_rename_noreplace(const char *from_path, const char *to_path) noexcept nogil


cdef inline void write_unit(unsigned char *p, int64_t phy, int32_t size, int64_t tags) noexcept nogil:
    put_i64(p, phy)
    put_i64(p + 12, tags)
    store_i32_release(p + 8, size)


cdef inline void _prefault_ahead(ConsumeQueueCore cq, MappedFile mf) noexcept:
    """Keep the prefault worker ahead of this queue's writer (see CQ_PREFAULT_FIRST_LEAD)."""
    if mf.wrote + cq.pf_lead > mf.warmed:
        # the writer used up the last lead: twice as much this time (not on a file's first request)
        if mf.warmed > 0 and cq.pf_lead < CQ_PREFAULT_MAX_LEAD:
            cq.pf_lead *= 2
        mf._prefault(mf.wrote, cq.pf_lead)


cdef bint _record_claims(ConsumeQueueCore cq, list cl_files, int64_t cl_file_size, int64_t phy, int32_t size,
                         int64_t queue_offset):
    """Is there a whole record of ``size`` bytes at commit-log offset ``phy`` that is the unit's: stored for
    that offset, of ``cq``'s topic and queue id, at ``queue_offset`` (``unit_damage``, the read path's test)?"""
    cdef MappedFile f
    cdef RecordView v
    cdef int64_t pos
    cdef const unsigned char *rec
    if phy < 0 or size <= 0:
        return False
    f = _files.find_file(cl_files, cl_file_size, phy)
    if f is None or f.base == NULL:
        return False
    pos = phy - f.file_from_offset
    if pos + size > f.read_position():
        return False
    rec = f.base + pos
    return unit_damage(check_record(rec, size, False, &v), &v, rec, phy, size, cq, queue_offset) == DAMAGE_NONE


cdef class ConsumeQueueCore:
    """The compiled half of a consume queue, held by the Python half (``consume_queue.ConsumeQueue.core``)."""

    def __init__(self, str topic, int queue_id, long long file_size, queue):
        if file_size <= 0 or file_size % CQ_STORE_UNIT_SIZE:
            raise ValueError("consume-queue file size must be a positive multiple of %d, got %d"
                             % (CQ_STORE_UNIT_SIZE, file_size))
        self.topic = topic
        self.topic_utf8 = topic.encode("utf-8", "surrogatepass")
        self.queue_id = queue_id
        self.file_size = file_size
        self.queue = queue
        self.pf_lead = CQ_PREFAULT_FIRST_LEAD

    @property
    def last_file(self):
        return self.last

    @last_file.setter
    def last_file(self, MappedFile mf):
        self.last = mf

    cdef MappedFile _file_for(self, int64_t expect):
        cdef object mf = self._take_ready(expect - expect % self.file_size)
        if mf is None:
            mf = self.queue.get_last_mapped_file(expect, True)     # no ready file: Python makes one
        if mf is None:
            return None
        self.last = <MappedFile>mf
        return self.last

    cdef MappedFile _take_ready(self, int64_t file_offset):
        """The ready file when it is the one starting at ``file_offset`` and the queue's files end, full,
        right before it: renamed into the queue's folder and appended to the file list (copy-on-write, under its
        lock, as ``MappedFileQueue.create_file`` does), or None. A ready file that does not fit stays where it is
        for the flush service to delete; one whose rename fails (the folder went away, the name is taken, the
        file system cannot refuse a replacing rename) is left to it too, and the roll asks Python."""
        cdef MappedFile r = self.ready
        cdef MappedFile tail
        cdef PutMessageLock lock
        cdef list files
        cdef int rc
        cdef const char *src
        cdef const char *dst
        if r is None or r.file_from_offset != file_offset:
            return None
        lock = <PutMessageLock?>self.queue._lock
        lock.lock()
        try:
            r = self.ready
            files = self.queue._files
            if r is None or r.file_from_offset != file_offset or PyList_GET_SIZE(files) == 0:
                return None
            tail = <MappedFile>PyList_GET_ITEM(files, PyList_GET_SIZE(files) - 1)
            if tail.file_from_offset + self.file_size != file_offset or tail.wrote < tail.file_size:
                return None
            src, dst = PyBytes_AS_STRING(self.ready_from), PyBytes_AS_STRING(self.ready_to)
            with nogil:         # the lock's waiters wait without the GIL (PutMessageLock.lock)
                rc = ps_rename_noreplace(src, dst)
            if rc != 0:
                log.warning("consume queue %s/%d: cannot move the ready file %s to %s (%s); making the file "
                            "in place", self.topic, self.queue_id, self.ready_from, self.ready_to, os.strerror(rc))
                return None
            r.file_name = self.ready_name
            self.ready = None
            self.queue._files = files + [r]
            self.ready_rolls += 1
            return r
        finally:
            lock.unlock()

    def offer_ready(self, MappedFile mf not None, str path not None):
        """(The flush service.) Hand over ``mf``, the queue's next file made in the ready folder, to be
        renamed to ``path`` (in the queue's folder) by the roll that needs it. Refused while one is held."""
        cdef PutMessageLock lock = <PutMessageLock?>self.queue._lock
        lock.lock()
        try:
            if self.ready is not None:
                raise ValueError("consume queue %s/%d holds a ready file already" % (self.topic, self.queue_id))
            self.ready_from = os.fsencode(mf.file_name)
            self.ready_to = os.fsencode(path)
            self.ready_name = path
            self.ready = mf
        finally:
            lock.unlock()

    def take_back_ready(self):
        """(The flush service, closing, and every path that deletes the queue's files.) The ready file,
        no longer offered (the caller deletes it), or None."""
        cdef PutMessageLock lock = <PutMessageLock?>self.queue._lock
        cdef MappedFile r
        lock.lock()
        try:
            r, self.ready = self.ready, None
            return r
        finally:
            lock.unlock()

    cdef int put_unit(self, int64_t phy, int32_t size, int64_t tags_code, int64_t cq_offset) except -1:
        """RocketMQ ``putMessagePositionInfo``: a unit already built (by offset) is accepted and ignored."""
        cdef int64_t expect = cq_offset * CQ_STORE_UNIT_SIZE
        cdef int64_t cur, pos, p
        cdef MappedFile mf
        if phy + size <= self.max_physic_offset:
            return 0
        mf = self.last
        if mf is None or mf.wrote >= mf.file_size:
            if mf is not None:
                mf.settle()
            mf = self._file_for(expect)
            if mf is None:
                if self.on_error is not None:
                    self.on_error("cannot create a consume-queue file for %s/%d at %d"
                                  % (self.topic, self.queue_id, expect))
                return 0
            if mf.first_create_in_queue and cq_offset != 0 and mf.wrote == 0:
                # the queue's first file starts mid-file: fill the units before with fillers
                pos = expect - mf.file_from_offset
                p = 0
                while p < pos:
                    write_unit(mf.write_base + p, 0, FILLER, 0)
                    p += CQ_STORE_UNIT_SIZE
                mf.reset_to(pos)
                self.min_logic_offset = expect
        cur = mf.file_from_offset + mf.wrote
        if expect < cur:
            return 0                                    # built before (re-dispatch after recovery)
        if expect > cur:
            log.warning("[BUG] consume queue %s/%d: unit for offset %d lands at %d (a gap)", self.topic,
                        self.queue_id, cq_offset, cur // CQ_STORE_UNIT_SIZE)
        _prefault_ahead(self, mf)
        write_unit(mf.write_base + mf.wrote, phy, size, tags_code)
        mf.advance(CQ_STORE_UNIT_SIZE)
        self.max_physic_offset = phy + size
        return 0

    cdef int put_units(self, int64_t phy, const int32_t *sizes, Py_ssize_t n, int64_t tags_code,
                       int64_t cq_offset) except -1:
        """``put_unit`` for ``n`` records that follow each other in the commit log from ``phy`` (record i is
        ``sizes[i]`` bytes, queue offset ``cq_offset + i``, all with one tags code). Where the units land right
        at the end of the open file and none was built before, they are written in one run; anything else
        (a new or full file, a re-dispatch, a gap) goes unit by unit through ``put_unit``."""
        cdef Py_ssize_t i = 0, j, k
        cdef MappedFile mf
        cdef unsigned char *p
        while i < n:
            mf = self.last
            if (mf is not None and phy >= self.max_physic_offset
                    and mf.file_from_offset + mf.wrote == (cq_offset + i) * CQ_STORE_UNIT_SIZE):
                k = (mf.file_size - mf.wrote) // CQ_STORE_UNIT_SIZE
                if k > n - i:
                    k = n - i
                if k > 0:
                    _prefault_ahead(self, mf)
                    p = mf.write_base + mf.wrote
                    for j in range(k):
                        write_unit(p, phy, sizes[i + j], tags_code)
                        phy += sizes[i + j]
                        p += CQ_STORE_UNIT_SIZE
                    mf.advance(k * CQ_STORE_UNIT_SIZE)
                    self.max_physic_offset = phy
                    i += k
                    continue
            self.put_unit(phy, sizes[i], tags_code, cq_offset + i)
            phy += sizes[i]
            i += 1
        return 0

    cdef int repair_unit(self, int64_t phy, int32_t size, int64_t tags_code, int64_t cq_offset, list cl_files,
                         int64_t cl_file_size) except -1:
        """Recovery's re-dispatch, for a record whose unit was built before: the unit must say what the
        record says. A power cut leaves the pages of a queue file that were never flushed as zeros (a whole
        file of them when the queue ran files ahead of its flusher), or a unit torn across a sector (offset
        and size kept, tags code lost: a consumer filtering on tags would never get the message); recovery
        trusts the units below a queue's end, so these would hide acknowledged messages. Such a unit is
        rewritten from the record, and its page is flushed again (``flushed`` moves back to it). RocketMQ
        skips every unit below the queue's end (``putMessagePositionInfo``). A unit that points elsewhere at a
        whole record claiming this queue and offset is kept: two records claim the place, and the one being
        dispatched may be the one with a damaged header (its queue id or offset is not covered by the body
        CRC); the read path checks what it serves. Returns 1 if it rewrote."""
        cdef int64_t at = cq_offset * CQ_STORE_UNIT_SIZE
        cdef int64_t pos
        cdef MappedFile f
        cdef unsigned char *p
        if self.last is None or at >= self.last.file_from_offset + self.last.wrote or at < self.min_logic_offset:
            return 0
        f = _files.find_file(_files.files_of(self.queue), self.last.file_size, at)     # the files' size, kept from disk
        if f is None or f.base == NULL or f.read_only or f.write_base != f.base:
            return 0
        pos = at - f.file_from_offset
        if pos + CQ_STORE_UNIT_SIZE > f.wrote:
            return 0
        p = f.base + pos
        if get_i64(p) == phy and get_i32(p + 8) == size and get_i64(p + 12) == tags_code:
            return 0
        if get_i64(p) != phy and _record_claims(self, cl_files, cl_file_size, get_i64(p), get_i32(p + 8), cq_offset):
            log.warning("consume queue %s/%d: queue offset %d is claimed by the records at %d and at %d; the unit "
                        "keeps the first (a record's header is damaged: `pystore verify` checks the log)", self.topic,
                        self.queue_id, cq_offset, get_i64(p), phy)
            return 0
        if self.repaired == 0:
            log.warning("consume queue %s/%d: unit %d says (%d, %d, %d), its record (%d, %d, %d): rewritten from the "
                        "commit log (a page lost or torn by a power cut)", self.topic, self.queue_id, cq_offset,
                        get_i64(p), get_i32(p + 8), get_i64(p + 12), phy, size, tags_code)
        write_unit(p, phy, size, tags_code)
        f.unflush_from(pos)
        if f is self.last and pos + CQ_STORE_UNIT_SIZE == f.wrote:
            # the queue's high-water mark came from the unit replaced: later records must not look built
            self.max_physic_offset = phy + size
        self.repaired += 1
        return 1

    def put_message_position_info(self, long long phy, int size, long long tags_code, long long cq_offset):
        """Append one unit (Python face of the dispatch write, for tests and tools)."""
        self.put_unit(phy, size, tags_code, cq_offset)

    def get_max_offset_in_queue(self):
        return self.queue.get_max_offset() // CQ_STORE_UNIT_SIZE

    def forget_time_samples(self):
        """Drop the time-search samples (units were cut or rewritten: recovery, truncation, destroy)."""
        self.ts_samples = None

    def get_min_offset_in_queue(self):
        return self.min_logic_offset // CQ_STORE_UNIT_SIZE


# ----------------------------------------------------------------------------------------------------
# Unit helpers over one mapped file
# ----------------------------------------------------------------------------------------------------

def read_unit(MappedFile mf, long long pos):
    """``(commit_log_offset, size, tags_code)`` of the unit at ``pos``."""
    mf.check_mapped()
    if pos < 0 or pos + CQ_STORE_UNIT_SIZE > mf.file_size:
        raise ValueError("no unit at %d in %s" % (pos, mf.file_name))
    return (get_i64(mf.base + pos), get_i32(mf.base + pos + 8), get_i64(mf.base + pos + 12))


def recover_units(MappedFile mf, long long start=0):
    """Walk valid units from ``start``: ``(end_position, max_physic_end)``; max_physic_end is -1 when no
    real (non-filler) unit was seen."""
    cdef int64_t pos = start, mx = -1, phy
    cdef int32_t size
    mf.check_mapped()
    with nogil:
        while pos + CQ_STORE_UNIT_SIZE <= mf.file_size and unit_valid(mf.base + pos):
            phy = get_i64(mf.base + pos)
            size = get_i32(mf.base + pos + 8)
            if size != FILLER:
                mx = phy + size
            pos += CQ_STORE_UNIT_SIZE
    return (pos, mx)


def next_valid_unit(MappedFile mf, long long start):
    """Position of the first valid unit at or after ``start`` in ``mf`` (fillers count), or -1: a valid unit
    after an invalid one is damage, since one writer writes a queue's units in order. What the file system
    reports as holes reads as zeros, never a valid unit, so only its data is read: a queue file is mostly a
    hole past its last unit, and reading the hole would fault a zeroed page in for every 4 KiB of it."""
    cdef int64_t pos = start, found = -1, data, hole
    mf.check_mapped()
    with nogil:
        while pos + CQ_STORE_UNIT_SIZE <= mf.file_size:
            data = mf.data_extent(pos, &hole)
            if data < 0:
                break
            if data > pos:      # from the unit the data starts in: its first bytes may lie in the hole
                pos += (data - pos) // CQ_STORE_UNIT_SIZE * CQ_STORE_UNIT_SIZE
            while pos < hole and pos + CQ_STORE_UNIT_SIZE <= mf.file_size:
                if unit_valid(mf.base + pos):
                    found = pos
                    break
                pos += CQ_STORE_UNIT_SIZE
            if found >= 0:
                break
    return found


def units_below(MappedFile mf, long long phy_limit):
    """Position after the last valid unit whose record ends at or below ``phy_limit`` (the walk stops at the
    first unit whose record does not: one starting past the log's end, or, damaged, running past it; or at
    an invalid unit): ``(position, max_physic_end)``."""
    cdef int64_t pos = 0, mx = -1, phy
    cdef int32_t size
    mf.check_mapped()
    while pos + CQ_STORE_UNIT_SIZE <= mf.file_size and unit_valid(mf.base + pos):
        phy = get_i64(mf.base + pos)
        size = get_i32(mf.base + pos + 8)
        if size != FILLER and (phy >= phy_limit or phy + size > phy_limit):
            break
        if size != FILLER:
            mx = phy + size
        pos += CQ_STORE_UNIT_SIZE
    return (pos, mx)


def record_bytes(const unsigned char[::1] units not None, long long max_record):
    """The records that whole units in ``units`` (a run of them, as bytes) point at, but for those whose size
    is above ``max_record`` (fillers): ``(count, bytes)``. For sizing a page's buffers before it is read."""
    cdef Py_ssize_t pos = 0, end = units.shape[0] - CQ_STORE_UNIT_SIZE
    cdef int64_t count = 0, total = 0
    cdef int32_t size
    with nogil:
        while pos <= end:
            size = get_i32(&units[pos] + 8)
            if size <= max_record:
                count += 1
                total += size
            pos += CQ_STORE_UNIT_SIZE
    return (count, total)


def first_unit_at_or_above(MappedFile mf, long long low_pos, long long high_pos, long long min_phy):
    """Binary search (5.x ``correctMinOffset``): the first position in ``[low_pos, high_pos)`` whose unit points
    at or above ``min_phy`` (fillers count as below), or ``high_pos``."""
    cdef int64_t lo = low_pos // CQ_STORE_UNIT_SIZE, hi = high_pos // CQ_STORE_UNIT_SIZE, mid
    cdef const unsigned char *p
    mf.check_mapped()
    while lo < hi:
        mid = (lo + hi) >> 1
        p = mf.base + mid * CQ_STORE_UNIT_SIZE
        # below: a filler (0, FILLER, 0), or a message's unit pointing below ``min_phy``. A unit that is neither
        # (FILLER's size elsewhere, a negative offset or size) is damage that a read reports: never a reason
        # to move the min offset past it (nor past the good units before it)
        if not (is_filler(p) or (0 <= get_i64(p) < min_phy and 0 < get_i32(p + 8) != FILLER)):
            hi = mid
        else:
            lo = mid + 1
    return lo * CQ_STORE_UNIT_SIZE


@cython.final
cdef class UnitIterator:
    """Units of one consume-queue file from ``start``, as tuples; fillers skipped; stops at the first
    empty or invalid unit (``ended`` tells whether it stopped before the file's end). With ``mark_end``,
    a stop before the file's end yields one ``None`` first (``iter_units``)."""
    cdef MappedFile mf
    cdef int64_t pos
    cdef readonly bint ended
    cdef bint mark_end

    def __init__(self, MappedFile mf not None, long long start=0, bint mark_end=False):
        mf.check_mapped()
        self.mf = mf
        self.pos = start
        self.mark_end = mark_end

    def __iter__(self):
        return self

    def __next__(self):
        cdef const unsigned char *p
        cdef const unsigned char *base = self.mf.base
        cdef int64_t pos = self.pos, limit = self.mf.file_size - CQ_STORE_UNIT_SIZE
        cdef int32_t size
        if base == NULL:
            self.mf.check_mapped()
        while pos <= limit:
            p = base + pos
            if not unit_valid(p):
                self.pos = limit + CQ_STORE_UNIT_SIZE
                if self.ended:
                    raise StopIteration
                self.ended = True
                if self.mark_end:
                    return None
                raise StopIteration
            pos += CQ_STORE_UNIT_SIZE
            size = get_i32(p + 8)
            if size == FILLER and get_i64(p) == 0:
                continue
            self.pos = pos
            return (get_i64(p), size, get_i64(p + 12))
        self.pos = pos
        raise StopIteration


def iter_units(MappedFile mf):
    """Yield the units of a file, then ``None`` if the queue ends inside it."""
    return UnitIterator(mf, 0, True)


def find_file(list files not None, long long file_size, long long offset):
    """The file of ``files`` (in offset order, ``file_size`` bytes each) holding ``offset``, or None: the
    lookup behind ``MappedFileQueue.find_mapped_file_by_offset``, in one C call (``_files.find_file``)."""
    if file_size <= 0:
        raise ValueError("file_size must be positive")
    return _files.find_file(files, file_size, offset)


def unit_at(list cq_files, long long cq_file_size, long long index):
    """The unit of queue offset ``index`` or None."""
    cdef const unsigned char *p = unit_ptr(cq_files, cq_file_size, index)
    if p == NULL or not unit_valid(p):
        return None
    return (get_i64(p), get_i32(p + 8), get_i64(p + 12))
