# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Consume-queue units (FORMAT.md §2): write, recover, scan, search by time; dispatch.

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
under the put lock, or the dispatch service); readers see whole units only.

Also here: ``QueueDispatcher``, which turns appended records into units (and index entries): inline from
the put path (ASYNC_FLUSH), or by walking the commit log (``reput``: recovery, SYNC_FLUSH after each group
commit, a store whose queues are missing); and the read-side scans behind ``get_message`` and
``get_offset_in_queue_by_time``, which run in C over the mapped files.
"""

cimport cython
from cpython.bytearray cimport PyByteArray_AS_STRING
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport INT64_MIN, int32_t, int64_t
from libc.string cimport memcmp

from pystore._bytes cimport get_i32, get_i64, load_i32_acquire, put_i64, store_i32_release
from pystore._codec cimport (BLANK_MAGIC_CODE, CQ_FILLER_SIZE, REC_BLANK, REC_END, SPLIT_BODY, RecordView,
                             check_record, enters_queue, find_property, make_ext, make_ext_shared, tags_code_of)
from pystore._commitlog cimport Dispatcher, QueueCell
from pystore._index cimport IndexFilesBase, index_message
from pystore._mapped_file cimport MappedFile
from pystore._message cimport Message, MessageExt, java_hash_utf8

import logging

from pystore._codec import REASONS as _REASONS
from pystore._commitlog import read_message
from pystore.errors import StoreCorruptedError

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

# get_message scan outcomes (mapped to GetMessageStatus in Python); C constants: the scan sets one per message
cdef enum:
    SCAN_FOUND = 0
    SCAN_NO_MATCHED = 1
    SCAN_WAS_REMOVING = 2


cdef inline void write_unit(unsigned char *p, int64_t phy, int32_t size, int64_t tags) noexcept nogil:
    put_i64(p, phy)
    put_i64(p + 12, tags)
    store_i32_release(p + 8, size)


cdef inline bint unit_valid(const unsigned char *p) noexcept nogil:
    """RocketMQ's recovery rule: ``phyOffset >= 0 && size > 0`` (filler units count as valid)."""
    return get_i64(p) >= 0 and load_i32_acquire(p + 8) > 0


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
    that offset, of ``cq``'s topic and queue id, at ``queue_offset`` (the read path's ``_unit_damage``)?"""
    cdef MappedFile f
    cdef RecordView v
    cdef int64_t pos
    cdef const unsigned char *rec
    if phy < 0 or size <= 0:
        return False
    f = _cl_file(cl_files, cl_file_size, phy)
    if f is None or f.base == NULL:
        return False
    pos = phy - f.file_from_offset
    if pos + size > f.read_position():
        return False
    rec = f.base + pos
    return _unit_damage(check_record(rec, size, False, &v), &v, rec, phy, size, cq, queue_offset) == DAMAGE_NONE


cdef class ConsumeQueueCore:
    """The compiled half of a consume queue (``consume_queue.ConsumeQueue`` is the Python half)."""

    def __init__(self, str topic, int queue_id, long long file_size, queue):
        if file_size <= 0 or file_size % CQ_STORE_UNIT_SIZE:
            raise ValueError("consume-queue file size must be a positive multiple of 20, got %d" % file_size)
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
        cdef object mf = self.queue.get_last_mapped_file(expect, True)
        if mf is None:
            return None
        self.last = <MappedFile>mf
        return self.last

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
                    self.on_error("cannot create a consume-queue file for %s/%d at %d" % (self.topic, self.queue_id,
                                                                                         expect))
                return 0
            if mf.first_create_in_queue and cq_offset != 0 and mf.wrote == 0:
                # the queue's first file starts mid-file: fill the units before with fillers
                pos = expect - mf.file_from_offset
                p = 0
                while p < pos:
                    write_unit(mf.write_base + p, 0, FILLER, 0)
                    p += CQ_STORE_UNIT_SIZE
                mf.wrote = mf.committed = mf.flushed = pos
                self.min_logic_offset = expect
        cur = mf.file_from_offset + mf.wrote
        if expect < cur:
            return 0                                    # built before (re-dispatch after recovery)
        if expect > cur:
            log.warning("[BUG] consume queue %s/%d: unit for offset %d lands at %d (a gap)", self.topic,
                        self.queue_id, cq_offset, cur // CQ_STORE_UNIT_SIZE)
        _prefault_ahead(self, mf)
        write_unit(mf.write_base + mf.wrote, phy, size, tags_code)
        mf.wrote += CQ_STORE_UNIT_SIZE
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
                    mf.wrote += k * CQ_STORE_UNIT_SIZE
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
        f = _cl_file(self.queue.files, self.last.file_size, at)     # the files' size, kept from disk
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
        if f.flushed > pos:
            f.flushed = pos - pos % 4096
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
    after an invalid one is damage, since one writer writes a queue's units in order."""
    cdef int64_t pos = start, found = -1
    mf.check_mapped()
    with nogil:
        while pos + CQ_STORE_UNIT_SIZE <= mf.file_size:
            if unit_valid(mf.base + pos):
                found = pos
                break
            pos += CQ_STORE_UNIT_SIZE
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
        if not ((get_i32(p + 8) == FILLER and get_i64(p) == 0)
                or (0 <= get_i64(p) < min_phy and 0 < get_i32(p + 8) != FILLER)):
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


# ----------------------------------------------------------------------------------------------------
# Commit-log access from C: locate a record through a snapshot of the file list
# ----------------------------------------------------------------------------------------------------

cdef inline MappedFile _cl_file(list files, int64_t file_size, int64_t phy):
    cdef Py_ssize_t n = PyList_GET_SIZE(files)
    cdef MappedFile first, f
    cdef int64_t idx
    if n == 0:
        return None
    first = <MappedFile>PyList_GET_ITEM(files, 0)
    idx = phy // file_size - first.file_from_offset // file_size
    if idx < 0 or idx >= n:
        return None
    f = <MappedFile>PyList_GET_ITEM(files, idx)
    if f.file_from_offset <= phy < f.file_from_offset + file_size:
        return f
    for i in range(n):
        f = <MappedFile>PyList_GET_ITEM(files, i)
        if f.file_from_offset <= phy < f.file_from_offset + file_size:
            return f
    return None


def find_file(list files not None, long long file_size, long long offset):
    """The file of ``files`` (in offset order, ``file_size`` bytes each) holding ``offset``, or None: the
    lookup behind ``MappedFileQueue.find_mapped_file_by_offset``, in one C call."""
    if file_size <= 0:
        raise ValueError("file_size must be positive")
    return _find_file(files, file_size, offset)


cdef MappedFile _find_file(list files, int64_t file_size, int64_t offset):
    cdef MappedFile f
    cdef Py_ssize_t i
    f = _cl_file(files, file_size, offset)
    if f is None:
        for i in range(PyList_GET_SIZE(files)):        # a list with a gap: scan it
            f = <MappedFile>PyList_GET_ITEM(files, i)
            if f.file_from_offset <= offset < f.file_from_offset + file_size:
                return f
        return None
    return f


cdef int64_t _store_ts_at(list files, int64_t file_size, int64_t phy, int32_t size) noexcept:
    """Store time of the record at ``phy``, or INT64_MIN when it is not (or no longer) readable."""
    cdef MappedFile f = _cl_file(files, file_size, phy)
    cdef RecordView v
    cdef int64_t pos, rp
    if f is None or f.base == NULL or not f.available:
        return INT64_MIN
    pos = phy - f.file_from_offset
    rp = f.read_position()
    if pos < 0 or pos >= rp:
        return INT64_MIN
    if check_record(f.base + pos, rp - pos, False, &v) <= 0:
        return INT64_MIN
    return v.store_ts


def pickup_store_timestamp(list cl_files, long long cl_file_size, long long phy, int size=0):
    """RocketMQ ``pickupStoreTimestamp``: the store time at ``phy``, -1 if it is not readable."""
    cdef int64_t t = _store_ts_at(cl_files, cl_file_size, phy, size)
    return -1 if t == INT64_MIN else t


cdef inline const unsigned char *_unit_ptr(list cq_files, int64_t cq_file_size, int64_t index):
    cdef MappedFile f = _cl_file(cq_files, cq_file_size, index * CQ_STORE_UNIT_SIZE)
    if f is None or f.base == NULL:
        return NULL
    return f.base + (index * CQ_STORE_UNIT_SIZE - f.file_from_offset)


def unit_at(list cq_files, long long cq_file_size, long long index):
    """The unit of queue offset ``index`` or None."""
    cdef const unsigned char *p = _unit_ptr(cq_files, cq_file_size, index)
    if p == NULL or not unit_valid(p):
        return None
    return (get_i64(p), get_i32(p + 8), get_i64(p + 12))


cdef int64_t _search_by_time(list cq_files, int64_t cq_file_size, int64_t min_index, int64_t max_index,
                             list cl_files, int64_t cl_file_size, int64_t timestamp, bint lower):
    cdef int64_t lo
    if max_index <= min_index:
        return 0
    lo = _first_matching(cq_files, cq_file_size, min_index, max_index, cl_files, cl_file_size, timestamp, lower)
    return _by_time_result(lo, min_index, lower)


cdef inline int64_t _by_time_result(int64_t first, int64_t min_index, bint lower) noexcept:
    if lower:
        return first
    return first - 1 if first > min_index else 0


cdef inline bint _matches(int64_t t, int64_t timestamp, bint lower) noexcept:
    return (t >= timestamp) if lower else (t > timestamp)


cdef int64_t _first_matching(list cq_files, int64_t cq_file_size, int64_t lo, int64_t hi, list cl_files,
                             int64_t cl_file_size, int64_t timestamp, bint lower):
    """Binary search: the first unit in ``[lo, hi)`` stored at or after (lower) / after (upper) ``timestamp``,
    or ``hi``. Store times never decrease along a queue; units whose record is gone count as oldest."""
    cdef int64_t mid, t
    cdef const unsigned char *p
    while lo < hi:
        mid = (lo + hi) >> 1
        p = _unit_ptr(cq_files, cq_file_size, mid)
        t = INT64_MIN if p == NULL else _store_ts_at(cl_files, cl_file_size, get_i64(p), get_i32(p + 8))
        if _matches(t, timestamp, lower):
            hi = mid
        else:
            lo = mid + 1
    return lo


# Time-search samples: the store time of every SAMPLE_UNITS-th unit, kept per queue, so that a search over
# millions of units binary-searches a small in-memory array first and probes the mapped files (a cache
# and TLB miss per probe in the queue and one in the commit log) only inside one window. A sample holds
# the unit's commit-log offset too: a record deleted since it was taken counts as gone, as a live probe
# would see it. Units never change once written, except when recovery cuts a queue (forget_time_samples).
DEF SAMPLE_SHIFT = 8
DEF SAMPLE_UNITS = 256


cdef int64_t _extend_samples(ConsumeQueueCore cq, list cq_files, int64_t cq_file_size, int64_t upto,
                             int64_t min_index, list cl_files, int64_t cl_file_size):
    """Sample units up to index ``upto`` (inclusive) where readable; returns the number of samples."""
    cdef bytearray buf = cq.ts_samples
    cdef int64_t n, j, unit, ts, phy
    cdef const unsigned char *p
    cdef unsigned char rec[16]
    if buf is None:
        buf = bytearray()
        cq.ts_samples = buf
    n = len(buf) // 16
    j = n
    while (j << SAMPLE_SHIFT) <= upto:
        unit = j << SAMPLE_SHIFT
        p = _unit_ptr(cq_files, cq_file_size, unit)
        if p == NULL or not unit_valid(p):
            break
        phy = get_i64(p)
        ts = _store_ts_at(cl_files, cl_file_size, phy, get_i32(p + 8))
        if ts == INT64_MIN and unit >= min_index:
            break                                 # not readable yet (a reader behind the writer): no sample
        put_i64(rec, phy)
        put_i64(rec + 8, ts)
        buf.extend((<char *>rec)[:16])
        j += 1
    return j


cdef inline int64_t _sample_ts(const unsigned char *samples, int64_t j, list cl_files, int64_t cl_file_size):
    cdef int64_t phy = get_i64(samples + j * 16)
    cdef MappedFile f = _cl_file(cl_files, cl_file_size, phy)
    if f is None or f.base == NULL or not f.available:
        return INT64_MIN
    return get_i64(samples + j * 16 + 8)


def queue_offset_by_time(ConsumeQueueCore cq, list cl_files, long long cl_file_size, long long timestamp,
                         bint lower):
    """``get_offset_in_queue_by_time`` on one consume queue in one call, through the queue's time samples:
    5.x ``getOffsetInQueueByTime``, LOWER = the first offset stored at or after ``timestamp`` (the queue's
    end when none is), UPPER = the last offset stored at or before it (0 when none is); units whose record
    is gone count as older than anything."""
    cdef list files = cq.queue.files
    cdef int64_t cq_size = cq.queue.mapped_file_size
    cdef Py_ssize_t n = PyList_GET_SIZE(files)
    cdef MappedFile last
    cdef int64_t min_o, max_o = 0, js, je, lo_j, hi_j, mid, first, nsamples
    cdef const unsigned char *samples
    if n > 0:
        last = <MappedFile>PyList_GET_ITEM(files, n - 1)
        max_o = (last.file_from_offset + last.read_position()) // CQ_STORE_UNIT_SIZE
    min_o = cq.min_logic_offset // CQ_STORE_UNIT_SIZE
    if max_o <= min_o:
        return 0
    js = (min_o + SAMPLE_UNITS - 1) >> SAMPLE_SHIFT
    je = (max_o - 1) >> SAMPLE_SHIFT
    if je - js < 4:
        first = _first_matching(files, cq_size, min_o, max_o, cl_files, cl_file_size, timestamp, lower)
        return _by_time_result(first, min_o, lower)
    nsamples = _extend_samples(cq, files, cq_size, max_o - 1, min_o, cl_files, cl_file_size)
    if nsamples - 1 < je:
        je = nsamples - 1
    if je < js:
        first = _first_matching(files, cq_size, min_o, max_o, cl_files, cl_file_size, timestamp, lower)
        return _by_time_result(first, min_o, lower)
    samples = <const unsigned char *>PyByteArray_AS_STRING(cq.ts_samples)
    lo_j, hi_j = js, je + 1
    while lo_j < hi_j:
        mid = (lo_j + hi_j) >> 1
        if _matches(_sample_ts(samples, mid, cl_files, cl_file_size), timestamp, lower):
            hi_j = mid
        else:
            lo_j = mid + 1
    # the first matching unit lies after the last non-matching sample and at or before the first matching one
    if lo_j == js:
        first = _first_matching(files, cq_size, min_o, js << SAMPLE_SHIFT, cl_files, cl_file_size, timestamp,
                                lower)
    elif lo_j > je:
        first = _first_matching(files, cq_size, (je << SAMPLE_SHIFT) + 1, max_o, cl_files, cl_file_size,
                                timestamp, lower)
    else:
        first = _first_matching(files, cq_size, ((lo_j - 1) << SAMPLE_SHIFT) + 1, lo_j << SAMPLE_SHIFT, cl_files,
                                cl_file_size, timestamp, lower)
    return _by_time_result(first, min_o, lower)


# ----------------------------------------------------------------------------------------------------
# get_message's scan
# ----------------------------------------------------------------------------------------------------

@cython.final
cdef class ReadLimits:
    """The transfer caps of one ``get_message`` (FORMAT.md §11.1 ``isTheBatchFull``)."""
    cdef public int64_t bytes_in_memory
    cdef public int32_t count_in_memory
    cdef public int64_t bytes_in_disk
    cdef public int32_t count_in_disk
    cdef public int64_t memory_window      # commit-log distance from the end still considered in memory
    cdef public bint check_crc             # check_crc_on_read: each served record's body CRC is checked

    def __init__(self, long long bytes_in_memory, int count_in_memory, long long bytes_in_disk, int count_in_disk,
                 long long memory_window, bint check_crc=True):
        self.check_crc = check_crc
        self.bytes_in_memory = bytes_in_memory
        self.count_in_memory = count_in_memory
        self.bytes_in_disk = bytes_in_disk
        self.count_in_disk = count_in_disk
        self.memory_window = memory_window


cdef inline bint _batch_full(ReadLimits lim, int32_t size, int32_t max_msg_nums, int64_t total, int32_t count,
                             bint in_disk) noexcept:
    if total == 0 or count == 0:
        return False
    if max_msg_nums <= count:
        return True
    if in_disk:
        return total + size > lim.bytes_in_disk or count > lim.count_in_disk - 1
    return total + size > lim.bytes_in_memory or count > lim.count_in_memory - 1


# the messages of one page that lie next to each other in a commit-log file share one copy, of at most this
# many records and bytes (a larger record gets its own): one allocation per run instead of one per message,
# and a kept message keeps at most this much of its neighbours alive
cdef enum:
    RUN_RECORDS = 64
    RUN_BYTES = 65536


cdef extern from *:
    """
    /* Ask for the first 256 bytes of a record a few units ahead of the one being read: the commit-log pages a
       page of messages spans are rarely in the cache, and the hardware prefetchers stop at each 4 KiB page. */
    static inline void ps_prefetch_record(const unsigned char *p, int n) {
        /* straight-line: a loop here cost ~30 instructions a message (callgrind) */
        if (n <= 0) return;
        __builtin_prefetch(p, 0, 3);
        if (n > 64) __builtin_prefetch(p + 64, 0, 3);
        if (n > 128) __builtin_prefetch(p + 128, 0, 3);
        if (n > 192) __builtin_prefetch(p + 192, 0, 3);
    }
    """
    void prefetch_record "ps_prefetch_record"(const unsigned char *p, int n) noexcept nogil

# how many units ahead of the one being read the scan prefetches the record of
cdef int64_t PREFETCH_UNITS = 4


cdef object _record_tags(const unsigned char *rec, RecordView *v):
    """The TAGS property of a checked record, as its ``MessageExt.tags`` would give it (None without one): a
    TagFilter's names are tested before a message is made."""
    cdef int32_t vp = 0, vl = 0
    if v.props_len > 0 and find_property(rec + v.props_pos, v.props_len, "TAGS", 4, &vp, &vl):
        return PyUnicode_DecodeUTF8(<const char *>rec + v.props_pos + vp, vl, "replace")
    return None


cdef enum:
    DAMAGE_NONE = 0
    DAMAGE_RECORD = 1       # no valid record where the unit points (bad magic, lengths or CRC)
    DAMAGE_MISMATCH = 2     # a valid record, but not the unit's: another size, place, topic, queue or offset


cdef inline int _unit_damage(int32_t r, RecordView *v, const unsigned char *rec, int64_t phy, int32_t size,
                             ConsumeQueueCore cq, int64_t queue_offset) noexcept:
    """Is the record at ``rec`` (checked into ``v`` with result ``r``) the one the unit of ``queue_offset``
    names? A swapped or misplaced file, or a unit written over, shows here rather than as a wrong message."""
    cdef Py_ssize_t tl
    if r <= 0:
        return DAMAGE_RECORD if r != REC_END or size > 0 else DAMAGE_NONE
    if v.total_size != size or v.phy_offset != phy:
        return DAMAGE_MISMATCH
    if cq is not None:
        tl = PyBytes_GET_SIZE(cq.topic_utf8)
        if (v.queue_id != cq.queue_id or v.queue_offset != queue_offset or v.topic_len != tl
                or memcmp(rec + v.topic_pos, PyBytes_AS_STRING(cq.topic_utf8), tl) != 0):
            return DAMAGE_MISMATCH
    return DAMAGE_NONE


cdef int _raise_damage(int damage, int32_t r, RecordView *v, MappedFile f, int64_t phy, int32_t size,
                       MappedFile cqf, int64_t pos, ConsumeQueueCore cq) except -1:
    cdef int64_t unit_at = cqf.file_from_offset + pos
    if damage == DAMAGE_RECORD:
        raise StoreCorruptedError(
            f.file_name, phy, "%s where the consume-queue unit at %d of %s points (%d bytes)"
            % (_REASONS.get(r, "no valid record"), unit_at, cqf.file_name, size))
    where = "" if cq is None else " of %s/%d" % (cq.topic, cq.queue_id)
    raise StoreCorruptedError(
        cqf.file_name, unit_at,
        "the consume-queue unit for queue offset %d%s points at commit-log offset %d (%d bytes), where the record "
        "is %d bytes of queue %d, queue offset %d, stored for offset %d: the queue or the commit log is damaged "
        "(`pystore recover` rebuilds the queues from the commit log)"
        % (unit_at // CQ_STORE_UNIT_SIZE, where, phy, size, v.total_size, v.queue_id, v.queue_offset, v.phy_offset))


cdef int _raise_past(MappedFile cqf, int64_t pos, int64_t phy, int32_t size, str what) except -1:
    """A unit at ``pos`` of ``cqf`` whose record would lie past ``what`` ends: damage, never a wait."""
    raise StoreCorruptedError(
        cqf.file_name, cqf.file_from_offset + pos,
        "the consume-queue unit for queue offset %d points at commit-log offset %d (%d bytes), past the end of %s "
        "(`pystore recover` rebuilds the queues from the commit log)"
        % ((cqf.file_from_offset + pos) // CQ_STORE_UNIT_SIZE, phy, size, what))


cdef int64_t _written_end(list files):
    """The end of what was written into the commit log ``files`` (its last file's write position): units
    pointing beyond it point at nothing."""
    cdef Py_ssize_t n = PyList_GET_SIZE(files)
    cdef MappedFile last
    if n == 0:
        return 0
    last = <MappedFile>PyList_GET_ITEM(files, n - 1)
    return last.file_from_offset + last.wrote


cdef int64_t _prev_unit_phy(ConsumeQueueCore cq, MappedFile cqf, int64_t pos):
    """The commit-log offset of the message unit just before the one at ``pos`` of ``cqf`` (in the file before,
    for a file's first unit), or -1 when there is none to read (a filler, an invalid unit, the queue's first)."""
    cdef const unsigned char *p = NULL
    cdef MappedFile prev = None
    cdef list files
    cdef Py_ssize_t i
    if pos >= CQ_STORE_UNIT_SIZE:
        p = cqf.base + pos - CQ_STORE_UNIT_SIZE
    elif cq is not None:
        files = cq.queue.files
        for i in range(1, PyList_GET_SIZE(files)):
            if <object>PyList_GET_ITEM(files, i) is cqf:
                prev = <MappedFile>PyList_GET_ITEM(files, i - 1)
                break
        # held while read: a cleaner may be removing the queue's old files
        if prev is None or prev.file_size < CQ_STORE_UNIT_SIZE or not prev.c_hold():
            return -1
        try:
            if prev.base == NULL:
                return -1
            p = prev.base + prev.file_size - prev.file_size % CQ_STORE_UNIT_SIZE - CQ_STORE_UNIT_SIZE
            return _unit_phy(p)
        finally:
            prev.c_release()
    return _unit_phy(p)


cdef inline int64_t _unit_phy(const unsigned char *p) noexcept:
    if p == NULL or not unit_valid(p) or (get_i64(p) == 0 and get_i32(p + 8) == FILLER):
        return -1
    return get_i64(p)


cdef int _emit_run(MappedFile f, int64_t start, int64_t end, RecordView *views, int64_t *starts, int n,
                   list out) except -1:
    cdef bytes buf = PyBytes_FromStringAndSize(<const char *>f.base + start, end - start)
    cdef int i
    for i in range(n):
        out.append(make_ext_shared(buf, <int32_t>(starts[i] - start), &views[i]))
    return 0


cdef int _scan(MappedFile cqf, int64_t start_pos, int64_t end_pos, list cl_files, int64_t cl_file_size,
               int64_t cl_max_offset, int32_t max_msg_nums, ReadLimits lim, object tag_codes, object tag_names,
               object filt, list out, int64_t *consumed, int64_t *total_out, int64_t *last_phy_out,
               ConsumeQueueCore cq=None, object cl_queue=None) except -1:
    """The scan behind ``get_message``; the caller holds ``cqf``. Each commit-log file is held while its
    records are read (a filter's Python code may let a cleaner run meanwhile).

    Every record served is checked against its unit (``_unit_damage``): size, place, topic, queue id and queue
    offset, and with ``lim.check_crc`` the body CRC. A mismatch is damage, never a message: the page ends
    before it, or, when it is the page's first unit, ``StoreCorruptedError`` names the file at fault."""
    cdef int64_t pos = start_pos, max_filter = <int64_t>max_msg_nums * CQ_STORE_UNIT_SIZE
    cdef int64_t phy, tags, total = 0, next_phy_file_start = INT64_MIN, last_phy = -1, rp, rpos = 0, limit, ahead
    cdef int32_t size, count = 0, r
    cdef int status = SCAN_NO_MATCHED
    cdef const unsigned char *p
    cdef MappedFile f, held = None
    cdef RecordView v
    cdef MessageExt msg
    cdef int64_t codes[16]
    cdef int ncodes = 0, k, damage
    cdef bint code_ok, in_disk
    # a page without a filter object builds its messages a run at a time (_emit_run); a TagFilter's tag names
    # are tested on the record itself
    cdef bint shared = filt is None
    # one spare view past the last: a record is checked straight into the slot after the run, and moved to the
    # first slot when it starts the next run
    cdef RecordView run_views[RUN_RECORDS + 1]
    cdef int64_t run_pos[RUN_RECORDS]
    cdef RecordView *vp = &v
    cdef int64_t run_start = 0, run_end = 0
    cdef int nrun = 0
    if max_filter < 16000:
        max_filter = 16000
    limit = min(end_pos, start_pos + max_filter)
    if tag_codes is not None:
        for c in tag_codes:
            if ncodes < 16:
                codes[ncodes] = c
            ncodes += 1
    try:
        while pos + CQ_STORE_UNIT_SIZE <= limit:
            p = cqf.base + pos
            if not unit_valid(p):
                # below the file's readable end every unit was written whole: an invalid one is damage
                if count == 0 and cq is not None:
                    raise StoreCorruptedError(cqf.file_name, cqf.file_from_offset + pos,
                                              "an empty or invalid consume-queue unit below the queue's end "
                                              "(`pystore recover` rebuilds the queues from the commit log)")
                break
            phy = get_i64(p)
            size = get_i32(p + 8)
            tags = get_i64(p + 12)
            if size == FILLER and phy == 0:
                pos += CQ_STORE_UNIT_SIZE
                continue
            if phy < next_phy_file_start:
                pos += CQ_STORE_UNIT_SIZE
                continue
            if phy + size > cl_max_offset:
                # past this call's view of the commit log: its file list was taken before the queue's (a put
                # that rolled to a new file meanwhile wrote units pointing into it). Not readable yet, never
                # skipped: the next call sees it. Unless it points past all the log ever written (``cl_queue``
                # given: its files now): then the unit is damage, and waiting would stall the consumer for good.
                if count == 0 and cl_queue is not None and phy + size > _written_end(cl_queue.files):
                    _raise_past(cqf, pos, phy, size, "the commit log")
                break
            in_disk = (cl_max_offset - phy) > lim.memory_window
            if _batch_full(lim, size, max_msg_nums, total, count, in_disk):
                break
            if tag_codes is not None:
                if ncodes <= 16:
                    code_ok = False
                    for k in range(ncodes):
                        if codes[k] == tags:
                            code_ok = True
                            break
                else:
                    code_ok = tags in tag_codes
                if not code_ok:
                    pos += CQ_STORE_UNIT_SIZE
                    continue
            elif filt is not None and not filt.is_matched_by_consume_queue(tags):
                pos += CQ_STORE_UNIT_SIZE
                continue
            if held is not None and held.file_from_offset <= phy < held.file_from_offset + cl_file_size:
                f = held                                    # the usual case: no division to find the file
            else:
                f = _cl_file(cl_files, cl_file_size, phy)
            if f is not held:
                if nrun > 0:
                    _emit_run(held, run_start, run_end, run_views, run_pos, nrun, out)
                    nrun = 0
                if held is not None:
                    held.c_release()
                    held = None
                if f is not None and f.c_hold():
                    held = f
            r = 0
            if held is not None and f.base != NULL:
                rpos = phy - f.file_from_offset
                rp = f.read_position()
                if rpos + size > rp:
                    # not readable yet (a reader behind the writer), unless the record would cross its file's
                    # end (records never do) or lie past what was written (``cl_queue``: units follow records)
                    if count == 0 and (rpos + size > f.file_size or (cl_queue is not None and rpos + size > f.wrote)):
                        _raise_past(cqf, pos, phy, size,
                                    "its file" if rpos + size > f.file_size else "what was written")
                    break
                if pos + (PREFETCH_UNITS + 1) * CQ_STORE_UNIT_SIZE <= limit:
                    ahead = get_i64(p + PREFETCH_UNITS * CQ_STORE_UNIT_SIZE) - f.file_from_offset
                    if 0 <= ahead < rp:
                        prefetch_record(f.base + ahead, <int>min(rp - ahead, 256))
                vp = &run_views[nrun] if shared else &v
                r = check_record(f.base + rpos, rp - rpos, lim.check_crc, vp)
                damage = _unit_damage(r, vp, f.base + rpos, phy, size, cq, (cqf.file_from_offset + pos)
                                      // CQ_STORE_UNIT_SIZE)
                if damage != DAMAGE_NONE:
                    if count > 0:
                        break               # the good messages before it first; the next read starts at it
                    _raise_damage(damage, r, vp, f, phy, size, cqf, pos, cq)
            if r <= 0:
                # the record's file is gone or going (deleted by the cleaner): RocketMQ's MESSAGE_WAS_REMOVING,
                # and the rest of that file is skipped. A cleaner removes only the log's oldest files, and a
                # queue's units point ever further into the log, so such units are a prefix of the queue: one
                # that follows a unit pointing further on is damage, never a message to pass over.
                if _prev_unit_phy(cq, cqf, pos) > phy:
                    if count > 0:
                        break
                    raise StoreCorruptedError(
                        cqf.file_name, cqf.file_from_offset + pos,
                        "the consume-queue unit for queue offset %d points at commit-log offset %d, before the "
                        "unit ahead of it, into a file no longer there (`pystore recover` rebuilds the queues "
                        "from the commit log)" % ((cqf.file_from_offset + pos) // CQ_STORE_UNIT_SIZE, phy))
                if count == 0:
                    status = SCAN_WAS_REMOVING
                next_phy_file_start = phy - phy % cl_file_size + cl_file_size
                pos += CQ_STORE_UNIT_SIZE
                continue
            if tag_names is not None and _record_tags(f.base + rpos, vp) not in tag_names:
                pos += CQ_STORE_UNIT_SIZE
                continue
            if shared and vp.body_len < SPLIT_BODY:
                if nrun > 0 and (nrun == RUN_RECORDS or rpos != run_end or run_end - run_start + size > RUN_BYTES):
                    _emit_run(held, run_start, run_end, run_views, run_pos, nrun, out)
                    run_views[0] = run_views[nrun]
                    nrun = 0
                if nrun == 0:
                    run_start = rpos
                run_pos[nrun] = rpos
                nrun += 1
                run_end = rpos + size
            else:
                # a filter object's message, or a big body (copied once: make_ext), after the run before it
                if nrun > 0:
                    _emit_run(held, run_start, run_end, run_views, run_pos, nrun, out)
                    nrun = 0
                msg = make_ext(f.base + rpos, vp)
                if filt is not None and not filt.is_matched_by_commit_log(msg):
                    pos += CQ_STORE_UNIT_SIZE
                    continue
                out.append(msg)
            total += size
            count += 1
            last_phy = phy
            status = SCAN_FOUND
            next_phy_file_start = INT64_MIN
            pos += CQ_STORE_UNIT_SIZE
        if nrun > 0:
            _emit_run(held, run_start, run_end, run_views, run_pos, nrun, out)
    finally:
        if held is not None:
            held.c_release()
    consumed[0] = (pos - start_pos) // CQ_STORE_UNIT_SIZE
    total_out[0] = total
    last_phy_out[0] = last_phy
    return status


@cython.final
cdef class GetMessageResult:
    """What ``get_message`` returns (API.md "Reading"): ``status, next_begin_offset, min_offset, max_offset,
    messages, message_count, buffer_total_size`` and ``suggest_pulling_from_slave`` (RocketMQ: the pull is
    far behind, in data no longer in memory). Compiled because every pull makes one; re-exported by
    ``pystore.results``."""
    cdef public object status
    cdef public object next_begin_offset
    cdef public object min_offset
    cdef public object max_offset
    cdef public list messages
    cdef public object buffer_total_size
    cdef public bint suggest_pulling_from_slave

    def __init__(self, status, next_begin_offset, min_offset, max_offset, messages=None, buffer_total_size=0,
                 suggest_pulling_from_slave=False):
        self.status = status
        self.next_begin_offset = next_begin_offset
        self.min_offset = min_offset
        self.max_offset = max_offset
        self.messages = messages if messages is not None else []
        self.buffer_total_size = buffer_total_size
        self.suggest_pulling_from_slave = suggest_pulling_from_slave

    @property
    def message_count(self):
        return len(self.messages)

    def __repr__(self):
        return ("GetMessageResult(status=%s, next_begin_offset=%d, min_offset=%d, max_offset=%d, message_count=%d, "
                "buffer_total_size=%d)" % (self.status.name, self.next_begin_offset, self.min_offset,
                                           self.max_offset, len(self.messages), self.buffer_total_size))


cdef inline GetMessageResult _result(object status, int64_t next_offset, int64_t min_o, int64_t max_o, list msgs,
                                     int64_t total, bint suggest):
    cdef GetMessageResult r = GetMessageResult.__new__(GetMessageResult)
    r.status = status
    r.next_begin_offset = next_offset
    r.min_offset = min_o
    r.max_offset = max_o
    r.messages = msgs
    r.buffer_total_size = total
    r.suggest_pulling_from_slave = suggest
    return r


# get_message outcomes decided before any scan (FORMAT.md §11.1); the scan's own are SCAN_*
cdef enum:
    GM_NO_MESSAGE_IN_QUEUE = 3
    GM_OFFSET_TOO_SMALL = 4
    GM_OFFSET_OVERFLOW_ONE = 5
    GM_OFFSET_OVERFLOW_BADLY = 6
    GM_OFFSET_FOUND_NULL = 7


def read_queue(ConsumeQueueCore cq, long long offset, long long max_msg_nums, list cl_files,
               long long cl_file_size, ReadLimits lim, object tag_codes, object tag_names, object filt,
               tuple statuses, bint keep_offset, object cl_queue=None):
    """``get_message`` on one consume queue: RocketMQ's decision table (FORMAT.md §11.1; empty queue, offset
    too small, one past the end, far past it, no unit buffer) then the scan, in one call, as a
    ``GetMessageResult``. ``statuses`` maps the SCAN_*/GM_* codes to ``GetMessageStatus``; ``keep_offset``
    is the slave's next-offset rule (``nextOffsetCorrection``)."""
    return _read_queue(cq, offset, max_msg_nums, cl_files, cl_file_size, lim, tag_codes, tag_names, filt, statuses,
                       keep_offset, cl_queue)


cdef GetMessageResult _read_queue(ConsumeQueueCore cq, int64_t offset, int64_t max_msg_nums, list cl_files,
                                  int64_t cl_file_size, ReadLimits lim, object tag_codes, object tag_names,
                                  object filt, tuple statuses, bint keep_offset, object cl_queue=None):
    cdef list files = cq.queue.files
    cdef int64_t cq_size = cq.queue.mapped_file_size
    cdef int64_t units = cq_size // CQ_STORE_UNIT_SIZE
    cdef Py_ssize_t n = PyList_GET_SIZE(files), ncl = PyList_GET_SIZE(cl_files)
    cdef int64_t min_o = cq.min_logic_offset // CQ_STORE_UNIT_SIZE, max_o = 0, pos, end, cl_max = 0
    cdef int64_t consumed = 0, total = 0, last_phy = -1
    cdef int32_t nums = 1 if max_msg_nums < 1 else (0x7FFFFFFF if max_msg_nums > 0x7FFFFFFF else max_msg_nums)
    cdef MappedFile last, mf
    cdef list out
    cdef int code
    if n > 0:
        last = <MappedFile>PyList_GET_ITEM(files, n - 1)
        max_o = (last.file_from_offset + last.read_position()) // CQ_STORE_UNIT_SIZE
    if max_o == 0:
        return _result(statuses[GM_NO_MESSAGE_IN_QUEUE], offset if keep_offset else 0, min_o, max_o, [], 0, False)
    if offset < min_o:
        return _result(statuses[GM_OFFSET_TOO_SMALL], offset if keep_offset else min_o, min_o, max_o, [], 0, False)
    if offset == max_o:
        return _result(statuses[GM_OFFSET_OVERFLOW_ONE], offset, min_o, max_o, [], 0, False)
    if offset > max_o:
        return _result(statuses[GM_OFFSET_OVERFLOW_BADLY], offset if keep_offset else max_o, min_o, max_o, [], 0,
                       False)
    mf = _cl_file(files, cq_size, offset * CQ_STORE_UNIT_SIZE)
    if mf is not None and mf.base != NULL:
        pos = offset * CQ_STORE_UNIT_SIZE - mf.file_from_offset
        end = mf.read_position()
        if pos >= end or not mf.c_hold():
            mf = None
    else:
        mf = None
    if mf is None:
        return _result(statuses[GM_OFFSET_FOUND_NULL], offset if keep_offset else offset + units - offset % units,
                       min_o, max_o, [], 0, False)
    if ncl > 0:
        last = <MappedFile>PyList_GET_ITEM(cl_files, ncl - 1)
        cl_max = last.file_from_offset + last.read_position()
    out = []
    try:
        code = _scan(mf, pos, end, cl_files, cl_file_size, cl_max, nums, lim, tag_codes, tag_names, filt, out,
                     &consumed, &total, &last_phy, cq, cl_queue)
    finally:
        mf.c_release()
    # the scan's next offset is never corrected, on a slave either (RocketMQ: offset + units visited)
    return _result(statuses[code], offset + consumed, min_o, max_o, out, total,
                   last_phy >= 0 and cl_max - last_phy > lim.memory_window)


# ----------------------------------------------------------------------------------------------------
# Dispatch
# ----------------------------------------------------------------------------------------------------

cdef int64_t _parse_int(const unsigned char *p, int32_t n) noexcept:
    cdef int64_t v = 0
    cdef int32_t i
    if n <= 0 or n > 9:
        return -1
    for i in range(n):
        if p[i] < 48 or p[i] > 57:
            return -1
        v = v * 10 + (p[i] - 48)
    return v


cdef inline bint _behind(ConsumeQueueCore cq, int64_t queue_offset, int64_t record_end):
    """Does the queue lack the unit of the record of ``queue_offset`` (ending at commit-log ``record_end``)?
    Past its end: a record beyond the queue's last one whose unit would not land right after it (units
    missing before it); a queue without files counts so unless the record is its first message ever
    (offset 0). Before its first file: its first files are gone (callers walk only records still in the
    log, whose units a cleaner never deletes)."""
    cdef MappedFile mf = cq.last
    cdef list files
    if mf is None:
        return queue_offset > 0
    files = cq.queue.files
    if PyList_GET_SIZE(files) > 0 and \
            queue_offset * CQ_STORE_UNIT_SIZE < (<MappedFile>PyList_GET_ITEM(files, 0)).file_from_offset:
        return True
    return record_end > cq.max_physic_offset and \
        queue_offset * CQ_STORE_UNIT_SIZE > mf.file_from_offset + mf.wrote


cdef int32_t _next_record(list cl_files, int64_t cl_file_size, int64_t *off, int64_t end_offset, RecordView *v,
                          const unsigned char **rec):
    """The walk of the commit log behind dispatch: from ``off[0]``, past file ends and blanks, to the next
    whole record that ends at or below ``end_offset`` (not wholly flushed yet otherwise). Its size, with
    ``rec`` and ``v`` filled and ``off[0]`` at it; or 0 when the walk stops there (the end, a file not mapped,
    or a record that cannot be read)."""
    cdef MappedFile f
    cdef int64_t pos, rp
    cdef int32_t r
    while off[0] < end_offset:
        f = _cl_file(cl_files, cl_file_size, off[0])
        if f is None or f.base == NULL:
            return 0
        pos = off[0] - f.file_from_offset
        rp = f.read_position()
        if pos >= rp:
            if rp == f.file_size:
                off[0] = f.file_from_offset + cl_file_size
                continue
            return 0
        rec[0] = f.base + pos
        r = check_record(rec[0], rp - pos, False, v)
        if r == REC_BLANK:
            off[0] = f.file_from_offset + cl_file_size
            continue
        if r <= 0 or off[0] + r > end_offset:
            return 0
        return r
    return 0


def queues_behind(list cl_files, long long cl_file_size, long long from_offset, long long end_offset,
                  dict queues, bint tails=True, long long stored_before=0, long long dispatched_end=0):
    """A reader's gap check (``recovery``), writing nothing: the ``(topic, queue id)``s of ``queues`` (a dict
    of ``ConsumeQueueCore`` by that key) with a record in ``[from_offset, end_offset)`` that lies past the
    queue's last unit (``_behind``). Returns ``(gaps, reached)``: the walk stops where a record cannot be
    read. A queue of a store shut down cleanly has a unit for each record of it; with ``tails`` False (a
    crashed writer's queues may lag its log at their end, never at their head) a record past a queue's end
    counts only when it was stored before ``stored_before`` (the checkpoint's time of the queues' flush) or
    ends at or below ``dispatched_end``: dispatch follows the log in order, so a crashed writer's queues lag
    it only as a common suffix, and a record before another queue's last unit had its unit built."""
    cdef int64_t off = from_offset
    cdef int32_t r
    cdef RecordView v
    cdef const unsigned char *rec = NULL
    cdef ConsumeQueueCore cq
    cdef set gaps = set()
    while True:
        r = _next_record(cl_files, cl_file_size, &off, end_offset, &v, &rec)
        if r <= 0:
            break
        if enters_queue(v.sys_flag):
            key = (PyUnicode_DecodeUTF8(<const char *>rec + v.topic_pos, v.topic_len, "replace"), v.queue_id)
            found = queues.get(key)
            if found is not None:
                cq = <ConsumeQueueCore>found
                if cq.last is None or PyList_GET_SIZE(cq.queue.files) == 0:
                    head = False
                    tail = True
                else:
                    head = v.queue_offset * CQ_STORE_UNIT_SIZE < \
                        (<MappedFile>PyList_GET_ITEM(cq.queue.files, 0)).file_from_offset
                    tail = off + r > cq.max_physic_offset and \
                        v.queue_offset * CQ_STORE_UNIT_SIZE >= cq.last.file_from_offset + cq.last.wrote
                if head or (tail and (tails or v.store_ts < stored_before or off + r <= dispatched_end)):
                    gaps.add(key)
        off += r
    return gaps, off


@cython.final
cdef class QueueDispatcher(Dispatcher):
    """Builds consume-queue units (and index entries) from appended records."""

    def __init__(self, cell_factory, create_queue, delay_levels=None, index=None,
                 str schedule_topic="SCHEDULE_TOPIC_XXXX"):
        self.cell_factory = cell_factory
        self.create_queue = create_queue
        self.index = index
        self.gaps = None
        self.schedule_topic = schedule_topic
        self.max_level = 0
        if delay_levels:
            for lvl, ms in delay_levels.items():
                if 1 <= lvl < 64:
                    self.delay_ms[lvl] = ms
                    if lvl > self.max_level:
                        self.max_level = lvl

    cdef int64_t _deliver_time(self, int64_t level, int64_t store_ts) noexcept:
        """FORMAT.md §2.2: the schedule topic's tags code is the time the message is due."""
        if level > self.max_level:
            level = self.max_level
        if level <= 0:
            return store_ts + 1000
        return store_ts + self.delay_ms[level]

    cdef int dispatch(self, QueueCell cell, Message msg, int64_t phy_offset, int32_t size, int64_t store_ts,
                      int64_t queue_offset) except -1:
        cdef ConsumeQueueCore cq
        cdef int64_t tags = msg._tags_code
        # every record reaches here (the index takes PREPARED ones too); only NOT/COMMIT enter a queue
        if enters_queue(msg._sys_flag):
            cq = self._queue_of(cell)
            if msg._delay_level > 0 and cell.topic == self.schedule_topic:
                tags = self._deliver_time(msg._delay_level, store_ts)
            cq.put_unit(phy_offset, size, tags, queue_offset)
            cq.last_store_ts = store_ts
        self.last_store_ts = store_ts
        self._index(cell, msg, phy_offset, store_ts)
        return 0

    cdef ConsumeQueueCore _queue_of(self, QueueCell cell):
        """The cell's consume queue, created on its first record."""
        if cell.consume_queue is None:
            cell.consume_queue = self.create_queue(cell.topic, cell.queue_id)
        return <ConsumeQueueCore>cell.consume_queue

    cdef int _index(self, QueueCell cell, Message msg, int64_t phy_offset, int64_t store_ts) except -1:
        """Index entries for the record of ``msg`` at ``phy_offset``, when it has keys (KEYS or UNIQ_KEY): from
        the topic and properties bytes the encoder wrote into it, as ``reput`` indexes a record."""
        if self.index is not None and msg._has_keys:
            index_message(<IndexFilesBase?>self.index,
                          <const unsigned char *>PyBytes_AS_STRING(msg._topic_b), PyBytes_GET_SIZE(msg._topic_b),
                          <const unsigned char *>PyBytes_AS_STRING(msg._props_b), PyBytes_GET_SIZE(msg._props_b),
                          phy_offset, store_ts, msg._sys_flag)
        return 0

    cdef int dispatch_run(self, QueueCell cell, Message msg, int64_t phy_offset, const int32_t *sizes, Py_ssize_t n,
                          int64_t store_ts, int64_t queue_offset) except -1:
        """A batch whose records share ``msg``'s topic, queue, tags code and type (built from bodies, or
        messages with one tags code and no keys; no delay and no transaction type: a batch refuses both): their
        units go in as one run. Index entries, when the batch has keys, are still one per record, as
        ``dispatch`` makes them."""
        cdef ConsumeQueueCore cq
        cdef Py_ssize_t i
        if not enters_queue(msg._sys_flag) or msg._delay_level > 0:
            return Dispatcher.dispatch_run(self, cell, msg, phy_offset, sizes, n, store_ts, queue_offset)
        cq = self._queue_of(cell)
        cq.put_units(phy_offset, sizes, n, msg._tags_code, queue_offset)
        cq.last_store_ts = store_ts
        self.last_store_ts = store_ts
        if self.index is not None and msg._has_keys:
            for i in range(n):
                self._index(cell, msg, phy_offset, store_ts)
                phy_offset += sizes[i]
        return 0

    cdef QueueCell _cell(self, const unsigned char *rec, RecordView *v):
        cdef bytes topic = rec[v.topic_pos:v.topic_pos + v.topic_len]
        if self._last_cell is not None and v.queue_id == self._last_qid and topic == self._last_topic:
            return <QueueCell>self._last_cell
        cell = self.cell_factory(topic.decode("utf-8", "replace"), v.queue_id)
        self._last_topic = topic
        self._last_qid = v.queue_id
        self._last_cell = cell
        return <QueueCell>cell

    def reput(self, list cl_files, long long cl_file_size, long long from_offset, long long end_offset):
        """Dispatch every record in ``[from_offset, end_offset)`` (RocketMQ ``ReputMessageService.doReput``);
        returns the offset reached: ``end_offset``, or where an unreadable record stopped the walk."""
        cdef int64_t off = from_offset, tags, level
        cdef int32_t r, vp = 0, vl = 0
        cdef bint gap
        cdef RecordView v
        cdef QueueCell cell
        cdef ConsumeQueueCore cq
        cdef const unsigned char *rec = NULL
        while True:
            r = _next_record(cl_files, cl_file_size, &off, end_offset, &v, &rec)
            if r <= 0:
                break
            if enters_queue(v.sys_flag):
                cell = self._cell(rec, &v)
                cq = <ConsumeQueueCore>cell.consume_queue
                tags = tags_code_of(rec, &v)
                if cell.topic == self.schedule_topic and v.props_len > 0 and \
                        find_property(rec + v.props_pos, v.props_len, "DELAY", 5, &vp, &vl):
                    level = _parse_int(rec + v.props_pos + vp, vl)
                    if level > 0:
                        tags = self._deliver_time(level, v.store_ts)
                gap = False
                if self.gaps is not None and _behind(cq, v.queue_offset, off + r):
                    # the queue lacks units before this record (files lost, or never written before a crash):
                    # recovery rebuilds it from the log's head; a unit here would sit at the wrong offset.
                    # Kept: where the first record past a queue with units was (-1: only an empty queue's)
                    gap = cq.last is not None
                    key = (cell.topic, cell.queue_id)
                    first = self.gaps.get(key, -1)
                    self.gaps[key] = first if first >= 0 else (off if gap else -1)
                if not gap:
                    if self.gaps is not None:
                        cq.repair_unit(off, r, tags, v.queue_offset, cl_files, cl_file_size)
                    cq.put_unit(off, r, tags, v.queue_offset)
                if cell.next_offset <= v.queue_offset:
                    # a slave's queues grow by reput only (a master assigned these offsets at put time)
                    cell.next_offset = v.queue_offset + 1
                cq.last_store_ts = v.store_ts
                self.last_store_ts = v.store_ts
            if self.index is not None:
                index_message(<IndexFilesBase?>self.index, rec + v.topic_pos, v.topic_len, rec + v.props_pos,
                              v.props_len, off, v.store_ts, v.sys_flag)
            off += r
        return off


@cython.final
cdef class QueueReader:
    """``MessageStore.get_message`` and ``look_message_by_offset`` without a Python frame, for the common
    call on a writable store that is loaded: ``get_message`` with a plain ``(group, topic, queue_id, offset,
    max_msg_nums)``, no filter, a queue that exists; ``look_message_by_offset`` with an int. Anything else (a
    filter, arguments of other types, an unknown queue, a store not readable or shut down, a slave) goes to
    the store class's own method, so there is one reading of every rule. The store keeps ``open`` in step
    with its state."""
    cdef dict queues                     # ConsumeQueueStore._queues: (topic, queue_id) -> ConsumeQueue
    cdef object cl_queue                 # the commit log's MappedFileQueue (its ``files`` list is replaced)
    cdef ReadLimits lim
    cdef tuple statuses
    cdef object flags                    # RunningFlags
    cdef long not_readable_bit
    cdef object config
    cdef object slave_role
    cdef object cls                      # the store's class: its methods are the slow paths
    cdef object store
    cdef public bint open

    def __init__(self, dict queues, cl_queue, ReadLimits lim, tuple statuses, flags, long not_readable_bit,
                 config, slave_role, cls, store):
        self.queues = queues
        self.cl_queue = cl_queue
        self.lim = lim
        self.statuses = statuses
        self.flags = flags
        self.not_readable_bit = not_readable_bit
        self.config = config
        self.slave_role = slave_role
        self.cls = cls
        self.store = store
        self.open = False

    def get_message(self, group, topic, queue_id, offset, max_msg_nums=32, message_filter=None):
        """``MessageStore.get_message(group, topic, queue_id, offset, max_msg_nums=32, message_filter=None)``:
        up to ``max_msg_nums`` messages of (topic, queue_id) from queue offset ``offset``, with RocketMQ's
        statuses and next-offset rules (FORMAT.md §11.1); None when the store is not readable."""
        cdef object cq = None
        cdef object q
        if (message_filter is None and self.open and type(topic) is str and type(queue_id) is int
                and type(offset) is int and type(max_msg_nums) is int):
            cq = self.queues.get((topic, queue_id))
            if cq is not None and (self.flags._flag & self.not_readable_bit
                                   or self.config.broker_role is self.slave_role):
                cq = None
        if cq is None:
            return self.cls.get_message(self.store, group, topic, queue_id, offset, max_msg_nums, message_filter)
        q = self.cl_queue
        return _read_queue(<ConsumeQueueCore>cq, offset, max_msg_nums, q.files, q.mapped_file_size, self.lim, None,
                           None, None, self.statuses, False, q)

    def look_message_by_offset(self, commit_log_offset):
        """``MessageStore.look_message_by_offset(commit_log_offset)``: the message stored at that commit-log
        offset, or None if no message starts there."""
        cdef object q
        cdef MappedFile mf
        if not self.open or type(commit_log_offset) is not int:
            return self.cls.look_message_by_offset(self.store, commit_log_offset)
        q = self.cl_queue
        mf = _find_file(q.files, q.mapped_file_size, commit_log_offset)
        if mf is None:
            return None
        return read_message(mf, commit_log_offset - mf.file_from_offset, self.lim.check_crc, True)
