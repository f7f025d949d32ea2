# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Reading records out of commit-log files: one message by its offset, an iterator over a file, and the
recovery walk (with its per-queue tally) and its helpers.

Every reader holds the mapped file (``c_hold``) while it reads, so a file that is being deleted is never read
after it is unmapped, and checks each record with ``_codec.check_record`` before it decodes it (docs/format.md
§1.2 for the record layout): a read never serves a torn or damaged record. Damage is reported as
``StoreCorruptedError`` with the file and the absolute offset.

Thread-safety: readers run alongside the writer. They read below the file's read position, which the put path
(``_commitlog``) moves only after a record is whole. The recovery walk and the search for the next valid
record run without the GIL.
"""

cimport cython
from libc.stdint cimport int32_t, int64_t
from libc.stdlib cimport calloc, free

from pystore.format._codec cimport (REC_BAD_CRC, REC_BAD_LENGTH, REC_END, QueueTallyC, RecordView, TallySlot,
                                    check_record, find_next_record, make_ext, scan_records)
from pystore.log._files cimport find_file
from pystore.format._jstring cimport utf8_text
from pystore.log._mapped_file cimport MappedFile

from pystore.errors import StoreCorruptedError


def read_message(MappedFile mf, long long pos, bint verify_crc=False, bint strict=False):
    """Decode the record at ``pos`` of ``mf`` (a copy), or None when no whole valid record starts there
    (past the readable end, a blank, not a record boundary, or the file is going away).

    ``strict`` (the read paths of a store): a record must name its own place (PHYSICALOFFSET == the offset
    asked for), or it is not the message stored there (a misplaced or swapped file): None. A record that
    names its place but fails its CRC (``verify_crc``) is damage: ``StoreCorruptedError``."""
    return _read_at(mf, pos, verify_crc, strict)


cdef object _read_at(MappedFile mf, int64_t pos, bint verify_crc, bint strict):
    cdef RecordView v
    cdef int32_t r
    cdef int64_t rp, at = mf.file_from_offset + pos
    cdef object e = None
    if mf.base == NULL or not mf.c_hold():
        return None
    try:
        rp = mf.read_position()
        if 0 <= pos < rp:
            r = check_record(mf.base + pos, rp - pos, verify_crc, &v)
            if strict and (r > 0 or r == REC_BAD_CRC) and v.phy_offset != at:
                return None
            if r == REC_BAD_CRC and strict:
                raise StoreCorruptedError(mf.file_name, at, "the body of the record stored here fails its CRC")
            if r > 0:
                e = make_ext(mf.base + pos, &v)
        return e
    finally:
        mf.c_release()


def message_at(list files not None, long long file_size, long long offset, bint verify_crc=False):
    """The message stored at ``offset`` of the log whose files are ``files`` (in offset order, ``file_size``
    bytes each), or None if none starts there: ``read_message`` with ``strict`` in the file that holds it.
    Every read of a message by its commit-log offset comes here (``look_message_by_offset``)."""
    cdef MappedFile mf
    if file_size <= 0:
        raise ValueError("file_size must be positive")
    mf = find_file(files, file_size, offset)
    if mf is None:
        return None
    return _read_at(mf, offset - mf.file_from_offset, verify_crc, True)


@cython.final
cdef class RecordIterator:
    """Iterate the records of one mapped file from ``start``: yields ``MessageExt``; stops at the blank or
    the end of written data; raises ``StoreCorruptedError`` (file, absolute offset) at a record that is
    damaged, or whose CRC is wrong when ``verify_crc``. ``stop_reason`` tells how it ended."""
    cdef MappedFile mf
    cdef int64_t pos
    cdef int64_t limit
    cdef bint verify_crc
    cdef bint held
    cdef readonly int32_t stop_reason
    cdef readonly bint finished

    def __init__(self, MappedFile mf not None, long long start=0, bint verify_crc=True, long long limit=-1):
        self.mf = mf
        self.pos = start
        self.limit = mf.read_position() if limit < 0 else min(<int64_t>limit, mf.file_size)
        self.verify_crc = verify_crc
        self.stop_reason = REC_END
        self.held = mf.c_hold()
        if not self.held:
            self.finished = True

    @property
    def position(self):
        return self.pos

    def __iter__(self):
        return self

    def __next__(self):
        cdef RecordView v
        cdef int32_t r
        if self.finished or self.mf.base == NULL:
            self._finish()
            raise StopIteration
        r = check_record(self.mf.base + self.pos, self.limit - self.pos, self.verify_crc, &v)
        if r > 0 and self.verify_crc and v.phy_offset != self.mf.file_from_offset + self.pos:
            # a record stored for another offset (a misplaced or swapped file, a damaged header): never
            # yielded as the message at this offset
            self._finish()
            self.stop_reason = REC_BAD_LENGTH
            raise StoreCorruptedError(self.mf.file_name, self.mf.file_from_offset + self.pos,
                                      "the record here names offset %d as its own" % v.phy_offset)
        if r > 0:
            e = make_ext(self.mf.base + self.pos, &v)
            self.pos += r
            return e
        self._finish()
        self.stop_reason = r
        if r < REC_END:
            raise StoreCorruptedError(self.mf.file_name, self.mf.file_from_offset + self.pos, _reason(r))
        raise StopIteration

    cdef void _finish(self) noexcept:
        if self.held:
            self.held = False
            self.mf.c_release()
        self.finished = True

    def close(self):
        self._finish()

    def __dealloc__(self):
        if self.held and self.mf is not None:
            self.held = False
            self.mf.c_release()


cdef class QueueTally:
    """What a recovery walk (``scan_file`` with ``tally=``) saw of each queue: for every (topic, queue id)
    with records in the walked range, the commit-log offset of its first record there and its highest queue
    offset. Recovery compares them with each consume queue's end (a queue that lost units at its end has a
    record at or past that end) without a second walk. ``overflow`` is set when a topic is too long for a
    slot or more queues were seen than the table holds: then the tally says nothing."""
    cdef QueueTallyC t

    def __cinit__(self, int slots=8192):
        cdef int n = 16
        while n < slots:
            n <<= 1
        self.t.slots = <TallySlot *>calloc(n, sizeof(TallySlot))
        if self.t.slots == NULL:
            raise MemoryError()
        self.t.mask = n - 1
        self.t.used = 0
        self.t.last = -1
        self.t.overflow = False
        self.t.file_from = 0

    def __dealloc__(self):
        free(self.t.slots)

    @property
    def overflow(self) -> bool:
        return self.t.overflow

    def queues(self):
        """``{(topic, queue_id): (first_record_offset, max_queue_offset)}`` of what was walked."""
        cdef int32_t i
        cdef TallySlot *s
        out = {}
        for i in range(self.t.mask + 1):
            s = &self.t.slots[i]
            if s.topic_len > 0:
                topic = utf8_text(s.topic, s.topic_len)
                out[(topic, s.queue_id)] = (s.first_phy, s.max_queue_offset)
        return out


def scan_file(MappedFile mf, long long start=0, bint check_crc=True, long long limit=-1, QueueTally tally=None):
    """Walk the records of ``mf`` from ``start`` without the GIL: ``(valid_end, reason, count,
    last_store_timestamp)``; ``reason`` is RECORD_BLANK, RECORD_END or the corruption found. With a
    ``tally``, every valid record walked is counted for its queue."""
    cdef int32_t reason = REC_END
    cdef int64_t count = 0, last_ts = -1, end
    cdef int64_t lim = mf.file_size if limit < 0 else min(<int64_t>limit, mf.file_size)
    cdef QueueTallyC *t = NULL
    mf.check_mapped()
    if mf.base == NULL or start >= lim:
        return (start, REC_END, 0, -1)
    if tally is not None:
        t = &tally.t
        t.file_from = mf.file_from_offset
        t.last = -1
    if not mf.c_hold():
        return (start, REC_END, 0, -1)
    try:
        with nogil:
            end = scan_records(mf.base, start, lim, check_crc, &reason, &count, &last_ts, t)
    finally:
        mf.c_release()
    return (end, reason, count, last_ts)


def find_valid_record_after(MappedFile mf, long long start):
    """Position of the first whole valid record at or after ``start`` in ``mf`` (see
    ``_codec.find_next_record``), or -1. Looks for records' magic codes only where the file system reports
    data (``SEEK_DATA`` / ``SEEK_HOLE``): the code's bytes are never zero, so they are data wherever a record
    was written, and reading the holes of a mostly unwritten 1 GiB file would fault in a zeroed page for
    every 4 KiB of them. A record found is checked against all of the file: its size field may begin in the
    block before (three zero bytes of a small size) and its body may cover blocks reported as holes."""
    cdef int64_t pos = start, found = -1, lim = mf.file_size, data, hole
    if mf.base == NULL or start >= lim:
        return -1
    if not mf.c_hold():
        return -1
    try:
        with nogil:
            while pos < lim:
                data = mf.data_extent(pos, &hole)
                if data < 0:
                    break
                # a record starts 4 bytes before its magic code, which lies at or after data
                found = find_next_record(mf.base, max(pos, data - 4), hole, lim, mf.file_from_offset)
                if found >= 0:
                    break
                pos = hole
    finally:
        mf.c_release()
    return found


def first_store_timestamp(MappedFile mf):
    """Store time of the first record of ``mf`` if it is a valid message, else 0."""
    cdef RecordView v
    if mf.base == NULL or mf.file_size < 8:
        return 0
    r = check_record(mf.base, mf.file_size, False, &v)
    return v.store_ts if r > 0 else 0


cdef object _reason(int32_t r):
    from pystore.format._codec import REASONS
    return REASONS.get(r, "invalid record")
