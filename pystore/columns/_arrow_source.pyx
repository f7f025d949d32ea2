# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The sources of the Arrow decoder (``_arrow.BatchBuilder``): the records of a commit-log file range
(``scan_file``, a batch partition of the Spark source) and those a consume queue's offset range points at
(``QueueReader``, a stream's or a queue-bounded batch's partition), fed to the builder until it is full.

Every walk is bounded by the mapped file it reads: a record whose size or header is damaged, a consume-queue
unit pointing past the commit log's end or at a record that is not its own, and (with ``verify_crc``) a wrong
body CRC raise ``StoreCorruptedError`` naming the file and the absolute offset.

Everything reads read-only mappings and holds no lock: safe on a live store (a record's size, a unit's size,
is published last, so a non-zero size means a whole record).
"""

cimport cython
from libc.stdint cimport int32_t, int64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcmp

from pystore.columns._arrow cimport BatchBuilder
from pystore.format._bytes cimport get_i64, load_i32_acquire
from pystore.format._codec cimport CQ_FILLER_SIZE, CQ_STORE_UNIT_SIZE, REC_BLANK, REC_END, RecordView, check_record
from pystore.log._mapped_file cimport MappedFile

from pystore.format._codec import REASONS
from pystore.errors import StoreCorruptedError

cdef int32_t FILLER = CQ_FILLER_SIZE
cdef int32_t UNIT = CQ_STORE_UNIT_SIZE


def scan_file(BatchBuilder b, MappedFile mf, long long pos, long long end=-1):
    """Add the records of ``mf`` from ``pos`` (a record boundary) until ``end`` (a record boundary; -1:
    the end-of-file blank or the end of written data), until ``b`` is full.

    Returns ``(next_pos, done)``. A damaged record, a record whose PHYSICALOFFSET is not its own offset, or
    (with ``verify_crc``) a wrong body CRC, raises ``StoreCorruptedError`` naming the file and the record's
    absolute offset."""
    cdef RecordView v
    cdef int32_t r
    cdef int64_t limit = mf.file_size
    cdef const unsigned char *base = mf.base
    cdef const unsigned char *p
    mf.check_mapped()
    if end < 0 or end > limit:
        end = limit
    while pos < end:
        if b.full():
            return (pos, False)
        p = base + pos
        r = check_record(p, limit - pos, False, &v)
        if r <= 0:
            if r == REC_BLANK or r == REC_END:
                return (pos, True)
            raise StoreCorruptedError(mf.file_name, mf.file_from_offset + pos, REASONS.get(r, "damaged record"))
        if v.phy_offset != mf.file_from_offset + pos:
            # a header that passes the checks but names another place (a damaged offset field, or record bytes
            # copied from elsewhere): its row would carry a wrong commit_log_offset, or repeat another record
            raise StoreCorruptedError(mf.file_name, mf.file_from_offset + pos,
                                      "PHYSICALOFFSET %d names another offset" % v.phy_offset)
        if b.wanted(p, &v):
            b.check_crc(p, &v, mf.file_name, mf.file_from_offset + pos)
            b.add(p, &v)
        pos += r
    return (pos, True)


cdef inline const unsigned char *_unit(list files, int64_t fsize, int64_t first_from, int64_t index,
                                       int *state):
    """The unit of queue offset ``index``: state 0 found, 1 below the first file (deleted), 2 past the last,
    3 in a file missing or cut short before the last (the files must follow each other, each ``fsize``
    long)."""
    cdef int64_t byte = index * UNIT
    cdef Py_ssize_t fi
    cdef MappedFile mf
    if byte < first_from:
        state[0] = 1
        return NULL
    fi = (byte - first_from) // fsize
    if fi >= len(files):
        state[0] = 2
        return NULL
    mf = <MappedFile>files[fi]
    if mf.file_from_offset != first_from + fi * fsize:
        state[0] = 3
        return NULL
    if mf.base == NULL or (byte - first_from) - fi * fsize + UNIT > mf.file_size:
        state[0] = 2 if fi == len(files) - 1 else 3
        return NULL
    state[0] = 0
    return mf.base + (byte - first_from - fi * fsize)


@cython.final
cdef class QueueReader:
    """One consume queue and the commit log it points into, both mapped read-only:
    ``QueueReader(topic, queue_id, cq_paths, cl_paths)`` (paths sorted by their 20-digit names; a commit-log file
    may also be given as ``(path, from_offset)``, for a copy whose name does not say its offset)."""
    cdef readonly str topic
    cdef bytes topic_b
    cdef readonly int queue_id
    cdef list cq
    cdef int64_t cq_size, cq_first
    cdef list cl
    cdef int64_t *cl_from
    cdef int64_t *cl_size
    cdef Py_ssize_t n_cl
    cdef readonly int64_t lost

    def __cinit__(self):
        self.cl_from = NULL
        self.cl_size = NULL

    def __init__(self, str topic, int queue_id, list cq_paths, list cl_paths):
        cdef Py_ssize_t i
        cdef MappedFile mf
        self.topic = topic
        self.topic_b = topic.encode("utf-8")
        self.queue_id = queue_id
        self.cq = [MappedFile(p, -1, read_only=True) for p in cq_paths]
        self.cq = [m for m in self.cq if (<MappedFile>m).file_size > 0]
        # the files' size: the largest (a file cut short is damage, found where its units are wanted)
        self.cq_size = max([(<MappedFile>m).file_size for m in self.cq]) if self.cq else 1
        self.cq_first = (<MappedFile>self.cq[0]).file_from_offset if self.cq else 0
        self.cl = [MappedFile(p[0], -1, read_only=True, from_offset=p[1]) if isinstance(p, tuple)
                   else MappedFile(p, -1, read_only=True) for p in cl_paths]
        self.n_cl = len(self.cl)
        self.cl_from = <int64_t *>malloc((self.n_cl + 1) * sizeof(int64_t))
        self.cl_size = <int64_t *>malloc((self.n_cl + 1) * sizeof(int64_t))
        if self.cl_from == NULL or self.cl_size == NULL:
            raise MemoryError()
        for i in range(self.n_cl):
            mf = <MappedFile>self.cl[i]
            self.cl_from[i] = mf.file_from_offset
            self.cl_size[i] = mf.file_size

    def __dealloc__(self):
        free(self.cl_from)
        free(self.cl_size)

    cdef bint _written_after(self, int64_t index) noexcept:
        """Is a unit after the empty unit ``index`` written (in its file, or a later file's first unit)? Units
        are written in order, so one is damage there, and stopping would hide the messages after it."""
        cdef int64_t byte = index * UNIT - self.cq_first
        cdef Py_ssize_t fi = byte // self.cq_size, k
        cdef int64_t pos
        cdef MappedFile mf
        for k in range(fi, len(self.cq)):
            mf = <MappedFile>self.cq[k]
            if mf.base == NULL:
                continue
            pos = byte - fi * self.cq_size + UNIT if k == fi else 0
            while pos + UNIT <= mf.file_size:
                if load_i32_acquire(mf.base + pos + 8) != 0:
                    return True
                if k != fi:
                    break               # a later file: its first unit tells
                pos += UNIT
        return False

    cdef str _cq_name(self, int64_t index):
        """The consume-queue file holding unit ``index`` (for errors)."""
        cdef Py_ssize_t fi = (index * UNIT - self.cq_first) // self.cq_size
        return (<MappedFile>self.cq[min(max(fi, 0), len(self.cq) - 1)]).file_name if self.cq else self.topic

    cdef Py_ssize_t _cl_index(self, int64_t phy) noexcept:
        cdef Py_ssize_t lo = 0, hi = self.n_cl - 1, mid
        if self.n_cl == 0 or phy < self.cl_from[0]:
            return -1
        while lo < hi:
            mid = (lo + hi + 1) >> 1
            if self.cl_from[mid] <= phy:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def scan(self, BatchBuilder b, long long start, long long end):
        """Add the messages of queue offsets ``[start, end)`` until ``b`` is full: ``(next_offset, done)``.

        ``done`` is also set when the queue's files end before ``end``. Units whose message was deleted (the
        consume-queue file, or the commit-log file, is gone) are counted in ``lost`` and skipped. ``end`` is
        at most the queue's end as planned (``queue_bounds``): an empty unit before it, or a unit not after the
        one ahead of it (units follow the commit log), is damage and raises ``StoreCorruptedError``; skipping
        it would hide the messages of the units after it."""
        cdef int64_t i = start, phy, rel, prev = -1
        cdef int32_t usize, r
        cdef int state = 0
        cdef const unsigned char *u
        cdef const unsigned char *p
        cdef Py_ssize_t ci
        cdef MappedFile mf
        cdef RecordView v
        if i > 0:
            # the unit ahead of the first: where the units must continue from
            u = _unit(self.cq, self.cq_size, self.cq_first, i - 1, &state)
            if state == 0 and load_i32_acquire(u + 8) > 0 and load_i32_acquire(u + 8) != FILLER:
                prev = get_i64(u)
        while i < end:
            if b.full():
                return (i, False)
            u = _unit(self.cq, self.cq_size, self.cq_first, i, &state)
            if state == 1:
                self.lost += min(end, self.cq_first // UNIT) - i
                i = min(end, self.cq_first // UNIT)
                continue
            if state == 2:
                return (i, True)
            if state == 3:
                raise StoreCorruptedError(self._cq_name(i), i * UNIT, "consume queue %s/%d: the file of unit %d is "
                                          "missing or cut short, and later files hold units"
                                          % (self.topic, self.queue_id, i))
            usize = load_i32_acquire(u + 8)
            phy = get_i64(u)
            if usize == 0 or phy < 0:
                if usize == 0 and not self._written_after(i):
                    return (i, True)        # the end of written units
                raise StoreCorruptedError(self._cq_name(i), i * UNIT, "consume queue %s/%d unit %d is empty (or "
                                          "points below 0) with written units after it"
                                          % (self.topic, self.queue_id, i))
            i += 1
            if usize == FILLER:
                continue
            if phy <= prev:
                raise StoreCorruptedError(self._cq_name(i - 1), (i - 1) * UNIT, "consume queue %s/%d unit %d points "
                                          "at %d, not after the unit ahead of it (%d)"
                                          % (self.topic, self.queue_id, i - 1, phy, prev))
            prev = phy
            ci = self._cl_index(phy)
            if ci < 0:
                self.lost += 1
                continue
            mf = <MappedFile>self.cl[ci]
            rel = phy - self.cl_from[ci]
            if rel + usize > mf.file_size or mf.base == NULL:
                raise StoreCorruptedError(mf.file_name, phy, "consume queue %s/%d unit %d points past the "
                                          "commit log's end" % (self.topic, self.queue_id, i - 1))
            p = mf.base + rel
            r = check_record(p, mf.file_size - rel, False, &v)
            if r <= 0:
                raise StoreCorruptedError(mf.file_name, phy, REASONS.get(r, "damaged record"))
            if r != usize or v.phy_offset != phy or v.queue_id != self.queue_id or v.queue_offset != i - 1 or \
                    v.topic_len != len(self.topic_b) or \
                    memcmp(p + v.topic_pos, <const char *>self.topic_b, v.topic_len) != 0:
                raise StoreCorruptedError(mf.file_name, phy, "consume queue %s/%d unit %d does not match the "
                                          "record it points at" % (self.topic, self.queue_id, i - 1))
            if b.wanted(p, &v):
                b.check_crc(p, &v, mf.file_name, phy)
                b.add(p, &v)
        return (i, True)
