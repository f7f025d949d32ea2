# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""``get_message``, compiled: RocketMQ's decision table (docs/format.md §11.1) and the scan of one consume queue
and the commit-log records its units point at, building the ``GetMessageResult`` (``read_queue``). The store's
Python ``get_message`` (filters, read-only stores, slaves) and its frameless fast path (``_queue_reader``) both
run it, so every status and next-offset rule is read in one place.

The scan checks each record it serves against its unit (``_units.unit_damage``): damage is never a message.
"""

cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from libc.stdint cimport INT64_MIN, int32_t, int64_t, uint64_t

from pystore.format._bytes cimport body_crc32, get_i32, get_i64, load_i32_acquire
from pystore.format._codec cimport (BORNHOST_V6_FLAG, CQ_FILLER_SIZE, CQ_STORE_UNIT_SIZE, MESSAGE_MAGIC_CODE, REC_BAD_CRC,
                                    SPLIT_BODY, STOREHOSTADDRESS_V6_FLAG, RecordView, check_lengths, check_record,
                                    find_property, make_ext, make_ext_shared, read_unit_fields)
from pystore.log._files cimport files_of, find_file
from pystore.log._mapped_file cimport MappedFile
from pystore.format._record cimport AT_MAGIC, AT_SYSFLAG, MIN_RECORD_SIZE, PLAIN_AT_BODYLENGTH
from pystore.format._jstring cimport utf8_text
from pystore.message._message_ext cimport MessageExt
from pystore.read._sink cimport Cut, Pending, RecordSink, complete_plain, same_bytes
from pystore.queue._units cimport (DAMAGE_MISMATCH, DAMAGE_NONE, DAMAGE_RECORD, ConsumeQueueCore, is_filler, unit_damage,
                                   unit_valid)

from pystore.format._codec import REASONS as _REASONS
from pystore.errors import StoreCorruptedError
from pystore.status import GetMessageStatus

cdef int32_t FILLER = CQ_FILLER_SIZE

# ... and the status each one is, by code
cdef tuple STATUSES = (GetMessageStatus.FOUND, GetMessageStatus.NO_MATCHED_MESSAGE,
                       GetMessageStatus.MESSAGE_WAS_REMOVING, GetMessageStatus.NO_MESSAGE_IN_QUEUE,
                       GetMessageStatus.OFFSET_TOO_SMALL, GetMessageStatus.OFFSET_OVERFLOW_ONE,
                       GetMessageStatus.OFFSET_OVERFLOW_BADLY, GetMessageStatus.OFFSET_FOUND_NULL)


@cython.final
cdef class ReadLimits:
    """The transfer caps of one ``get_message`` (docs/format.md §11.1 ``isTheBatchFull``)."""

    def __init__(self, long long bytes_in_memory, int count_in_memory, long long bytes_in_disk, int count_in_disk,
                 long long memory_window, bint check_crc=True):
        self.check_crc = check_crc
        self.bytes_in_memory = bytes_in_memory
        self.count_in_memory = count_in_memory
        self.bytes_in_disk = bytes_in_disk
        self.count_in_disk = count_in_disk
        self.memory_window = memory_window


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
cdef int64_t PREFETCH_UNITS = 12


cdef object _record_tags(const unsigned char *rec, RecordView *v):
    """The TAGS property of a checked record, as its ``MessageExt.tags`` would give it (None without one): a
    TagFilter's names are tested before a message is made."""
    cdef int32_t vp = 0, vl = 0
    if v.props_len > 0 and find_property(rec + v.props_pos, v.props_len, "TAGS", 4, &vp, &vl):
        return utf8_text(rec + v.props_pos + vp, vl)
    return None


cdef inline int32_t _check_plain_part(const unsigned char *p, int64_t remaining, int32_t size,
                                      RecordView *v) noexcept nogil:
    """``_check_plain`` but for the fields no test needs (``complete_plain``: a deferring sink reads them
    itself, off the scan's thread): ``v.magic`` is left 0 to say so. ``check_record``'s parts, with the plain
    record's places as constants."""
    cdef int32_t total = load_i32_acquire(p), sys_flag
    if total != size or total > remaining or total < MIN_RECORD_SIZE or get_i32(p + AT_MAGIC) != MESSAGE_MAGIC_CODE:
        return 0
    sys_flag = get_i32(p + AT_SYSFLAG)
    if sys_flag & (BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG):
        return 0
    if check_lengths(p, total, PLAIN_AT_BODYLENGTH, False, v) != 0:
        return 0
    v.total_size = total
    v.magic = 0
    read_unit_fields(p, v)
    v.sys_flag = sys_flag
    return total


cdef inline int32_t _check_plain(const unsigned char *p, int64_t remaining, int32_t size,
                                 RecordView *v) noexcept nogil:
    """``check_record`` without the CRC for the usual record: ``size`` bytes as its unit says, magic V1, IPv4
    hosts, so that every field before the body is at a fixed place. Its size, with ``v`` filled as
    ``check_record`` fills it; 0 for any other record (``check_record`` then says what it is)."""
    cdef int32_t total = _check_plain_part(p, remaining, size, v)
    if total != 0:
        complete_plain(p, v)
    return total


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


cdef inline int _damage(int32_t r, RecordView *v, const unsigned char *rec, int64_t phy, int32_t size,
                        const unsigned char *topic, Py_ssize_t topic_len, int32_t queue_id,
                        int64_t queue_offset) noexcept:
    """``unit_damage`` with the queue's part (``topic`` NULL: none) taken from C values the scan read once: no
    Python attribute and no call to ``memcmp`` on every record."""
    cdef int damage = unit_damage(r, v, rec, phy, size, None, queue_offset)
    if damage == DAMAGE_NONE and topic != NULL and (
            v.queue_id != queue_id or v.queue_offset != queue_offset or v.topic_len != topic_len
            or not same_bytes(rec + v.topic_pos, topic, topic_len)):
        return DAMAGE_MISMATCH
    return damage


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
        files = files_of(cq.queue)
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
    if p == NULL or not unit_valid(p) or is_filler(p):
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
               ConsumeQueueCore cq=None, object cl_queue=None, RecordSink sink=None) except -1:
    """The scan behind ``get_message``; the caller holds ``cqf``. Each commit-log file is held while its
    records are read (a filter's Python code may let a cleaner run meanwhile).

    Every record served is checked against its unit (``unit_damage``): size, place, topic, queue id and queue
    offset, and with ``lim.check_crc`` the body CRC. A mismatch is damage, never a message: the page ends
    before it, or, when it is the page's first unit, ``StoreCorruptedError`` names the file at fault.

    With a ``sink``, each message served goes to ``sink.add`` (a record view into its held file) instead of
    ``out``: no ``MessageExt`` is made, but for a filter object's commit-log test. A sink that defers
    (``RecordSink.begin``) gets each record checked into its ``slot`` but for the body CRC, which it checks as
    it decodes (``finish``, before the record's file is released): a wrong one is a ``cut``, and the page is
    then what it would have been had the scan found it (it ends before that record, or the error is raised
    when it is the page's first)."""
    cdef int64_t pos = start_pos, max_filter = <int64_t>max_msg_nums * CQ_STORE_UNIT_SIZE
    cdef int64_t phy, tags, total = 0, next_phy_file_start = INT64_MIN, last_phy = -1, rp = 0, rpos = 0, limit, ahead
    cdef int32_t size, count = 0, r
    cdef int status = SCAN_NO_MATCHED
    cdef const unsigned char *p
    cdef const unsigned char *rec
    cdef MappedFile f, held = None
    # the held file's place (its own fields are re-read only when the file changes) and read position (re-read
    # only when a record seems to lie past it: it only grows)
    cdef int64_t held_from = 0, held_end = INT64_MIN
    cdef const unsigned char *held_base = NULL
    # the transfer caps (docs/format.md §11.1 ``isTheBatchFull``), read out of ``lim`` once: a page that holds
    # a message is full at these counts, or when the next record would pass these bytes
    cdef int64_t disk_below, mem_bytes = lim.bytes_in_memory, disk_bytes = lim.bytes_in_disk
    cdef int64_t mem_count = min(<int64_t>max_msg_nums, <int64_t>lim.count_in_memory)
    cdef int64_t disk_count = min(<int64_t>max_msg_nums, <int64_t>lim.count_in_disk)
    cdef bint check_crc = lim.check_crc
    # a sink without a filter object takes each record as it is checked: no message is made
    cdef bint direct = sink is not None and filt is None
    cdef bint deferred = direct and sink.begin(lim.check_crc)
    # the CRC the scan checks itself (a deferring sink checks the CRC of the records it takes)
    cdef bint crc_here = lim.check_crc and not deferred
    cdef bint cut_seen = False
    cdef Pending *slot = NULL
    cdef Cut *cut
    # what ``unit_damage`` tests of the queue, read out of ``cq`` once: its topic, queue id, the unit's offset
    cdef const unsigned char *cq_topic = NULL
    cdef Py_ssize_t cq_topic_len = 0
    cdef int32_t cq_qid = 0
    cdef int64_t qoff
    # the queue file's mapping and place (held by the caller: they stay)
    cdef const unsigned char *cq_base = cqf.base
    cdef int64_t cq_from = cqf.file_from_offset
    cdef RecordView v
    cdef MessageExt msg
    cdef int64_t codes[16]
    cdef int ncodes = 0, k, damage
    cdef bint code_ok, in_disk
    # a page without a filter object builds its messages a run at a time (_emit_run); a TagFilter's tag names
    # are tested on the record itself
    cdef bint shared = filt is None and sink is None
    # one spare view past the last: a record is checked straight into the slot after the run, and moved to the
    # first slot when it starts the next run
    cdef RecordView run_views[RUN_RECORDS + 1]
    cdef int64_t run_pos[RUN_RECORDS]
    cdef RecordView *vp = &v
    cdef int64_t run_start = 0, run_end = 0
    cdef int nrun = 0
    # the tight loop (see below) of a page without a filter into a deferring sink: the unit it last stopped at
    # (that unit goes through the general loop once) and the end of the records it serves in the held file
    cdef bint tight = deferred and tag_codes is None and tag_names is None and cq is not None
    cdef int64_t stopped = -1, tight_end
    if max_filter < 16000:
        max_filter = 16000
    # records at or past this commit-log offset are in memory (RocketMQ: within memory_window of the end)
    disk_below = cl_max_offset - lim.memory_window
    limit = min(end_pos, start_pos + max_filter)
    if cq is not None:
        cq_topic = <const unsigned char *>PyBytes_AS_STRING(cq.topic_utf8)
        cq_topic_len = PyBytes_GET_SIZE(cq.topic_utf8)
        cq_qid = cq.queue_id
    if tag_codes is not None:
        for c in tag_codes:
            if ncodes < 16:
                codes[ncodes] = c
            ncodes += 1
    try:
        while pos + CQ_STORE_UNIT_SIZE <= limit:
            if tight and pos != stopped and held_end != INT64_MIN and next_phy_file_start == INT64_MIN:
                # The common page, unit after unit while each is the plain case: a valid unit whose record lies
                # in the held file, below both its read position as last read and the commit log this call sees
                # (one bound, taken once), within the caps, and passes ``_check_plain`` and every test
                # ``unit_damage`` makes (size, place, topic, queue id, queue offset; the sink checks the CRC).
                # Any other unit stops it, and the general loop below takes that unit as it takes every unit.
                tight_end = min(rp, cl_max_offset - held_from)
                qoff = <int64_t>(<uint64_t>(cq_from + pos) // CQ_STORE_UNIT_SIZE)
                while pos + CQ_STORE_UNIT_SIZE <= limit:
                    p = cq_base + pos
                    phy = get_i64(p)
                    size = load_i32_acquire(p + 8)
                    rpos = phy - held_from
                    # held_from >= 0: rpos >= 0 is also unit_valid's phy >= 0 (a filler's size lies past any end)
                    if size <= 0 or rpos < 0 or rpos + size > tight_end:
                        break
                    if count > 0 and total > 0:
                        if phy < disk_below:
                            if count >= disk_count or total + size > disk_bytes:
                                break
                        elif count >= mem_count or total + size > mem_bytes:
                            break
                    if pos + (PREFETCH_UNITS + 1) * CQ_STORE_UNIT_SIZE <= limit:
                        ahead = get_i64(p + PREFETCH_UNITS * CQ_STORE_UNIT_SIZE) - held_from
                        if 0 <= ahead < rp:
                            prefetch_record(held_base + ahead, <int>min(rp - ahead, 256))
                    slot = sink.next
                    rec = held_base + rpos
                    if (_check_plain_part(rec, rp - rpos, size, &slot.v) == 0 or slot.v.phy_offset != phy
                            or slot.v.queue_id != cq_qid or slot.v.queue_offset != qoff
                            or slot.v.topic_len != cq_topic_len
                            or not same_bytes(rec + slot.v.topic_pos, cq_topic, cq_topic_len)):
                        break
                    slot.rec = rec
                    slot.pos = pos
                    total += size
                    count += 1
                    last_phy = phy
                    status = SCAN_FOUND
                    pos += CQ_STORE_UNIT_SIZE
                    qoff += 1
                    if sink.commit():
                        cut_seen = True
                        break
                if cut_seen:
                    break
                stopped = pos
                continue
            p = cq_base + pos
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
                if count == 0 and cl_queue is not None and phy + size > _written_end(files_of(cl_queue)):
                    _raise_past(cqf, pos, phy, size, "the commit log")
                break
            if count > 0 and total > 0:
                in_disk = phy < disk_below
                if in_disk:
                    if count >= disk_count or total + size > disk_bytes:
                        break
                elif count >= mem_count or total + size > mem_bytes:
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
            if not (held_from <= phy < held_end):
                # another commit-log file (the usual case, the held one, costs no division to find)
                f = find_file(cl_files, cl_file_size, phy)
                if f is not held:
                    if nrun > 0:
                        _emit_run(held, run_start, run_end, run_views, run_pos, nrun, out)
                        nrun = 0
                    if held is not None:
                        if deferred and sink.finish():
                            cut_seen = True
                            break
                        held.c_release()
                        held = None
                        held_end = INT64_MIN
                    if f is not None and f.c_hold():
                        held = f
                        if held.base != NULL:
                            held_base = held.base
                            held_from = held.file_from_offset
                            held_end = held_from + cl_file_size
                            rp = held.read_position()
            r = 0
            if held_from <= phy < held_end:
                rpos = phy - held_from
                if rpos + size > rp:
                    rp = held.read_position()
                if rpos + size > rp:
                    # not readable yet (a reader behind the writer), unless the record would cross its file's
                    # end (records never do) or lie past what was written (``cl_queue``: units follow records)
                    if count == 0 and (rpos + size > held.file_size or
                                       (cl_queue is not None and rpos + size > held.wrote)):
                        _raise_past(cqf, pos, phy, size,
                                    "its file" if rpos + size > held.file_size else "what was written")
                    break
                if pos + (PREFETCH_UNITS + 1) * CQ_STORE_UNIT_SIZE <= limit:
                    ahead = get_i64(p + PREFETCH_UNITS * CQ_STORE_UNIT_SIZE) - held_from
                    if 0 <= ahead < rp:
                        prefetch_record(held_base + ahead, <int>min(rp - ahead, 256))
                if deferred:
                    slot = sink.next
                    vp = &slot.v
                else:
                    vp = &run_views[nrun] if shared else &v
                rec = held_base + rpos
                qoff = <int64_t>(<uint64_t>(cq_from + pos) // CQ_STORE_UNIT_SIZE)
                r = _check_plain(rec, rp - rpos, size, vp)
                if r == 0:
                    r = check_record(rec, rp - rpos, crc_here, vp)
                elif crc_here and vp.body_len > 0 and body_crc32(rec + vp.body_pos, vp.body_len) != vp.body_crc:
                    r = REC_BAD_CRC
                damage = _damage(r, vp, rec, phy, size, cq_topic, cq_topic_len, cq_qid, qoff)
                if damage != DAMAGE_NONE and rp != held.read_position():
                    # judged as at the read position of now, as every record that is served
                    rp = held.read_position()
                    r = check_record(rec, rp - rpos, crc_here, vp)
                    damage = _damage(r, vp, rec, phy, size, cq_topic, cq_topic_len, cq_qid, qoff)
                if damage != DAMAGE_NONE:
                    if count > 0:
                        break               # the good messages before it first; the next read starts at it
                    _raise_damage(damage, r, vp, held, phy, size, cqf, pos, cq)
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
            if tag_names is not None and _record_tags(rec, vp) not in tag_names:
                if deferred and check_crc and vp.body_len > 0 and (
                        body_crc32(rec + vp.body_pos, vp.body_len) != vp.body_crc):
                    # damage the scan finds before the tag test, after any found in the records before it
                    if sink.finish():
                        cut_seen = True
                        break
                    if count > 0:
                        break
                    _raise_damage(DAMAGE_RECORD, REC_BAD_CRC, vp, held, phy, size, cqf, pos, cq)
                pos += CQ_STORE_UNIT_SIZE
                continue
            if deferred:
                slot.rec = rec
                slot.pos = pos
                if sink.commit():
                    cut_seen = True
                    break
            elif direct:
                sink.add(rec, vp)
            elif shared and vp.body_len < SPLIT_BODY:
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
                msg = make_ext(rec, vp)
                if filt is not None and not filt.is_matched_by_commit_log(msg):
                    pos += CQ_STORE_UNIT_SIZE
                    continue
                if sink is not None:
                    sink.add(rec, vp)
                else:
                    out.append(msg)
            total += size
            count += 1
            last_phy = phy
            status = SCAN_FOUND
            next_phy_file_start = INT64_MIN
            pos += CQ_STORE_UNIT_SIZE
        if nrun > 0:
            _emit_run(held, run_start, run_end, run_views, run_pos, nrun, out)
        if deferred and (cut_seen or sink.finish()):
            # a deferred record's body CRC is wrong: the page is what it is up to that record (held is its file)
            cut = &sink.cut
            if cut.good == 0:
                _raise_damage(DAMAGE_RECORD, REC_BAD_CRC, &cut.bad.v, held, cut.bad.v.phy_offset,
                              cut.bad.v.total_size, cqf, cut.bad.pos, cq)
            count = <int32_t>cut.good
            total = cut.good_bytes
            last_phy = cut.last_phy
            pos = cut.bad.pos
            status = SCAN_FOUND
    finally:
        if deferred:
            sink.settle()
        if held is not None:
            held.c_release()
    consumed[0] = (pos - start_pos) // CQ_STORE_UNIT_SIZE
    total_out[0] = total
    last_phy_out[0] = last_phy
    return status


@cython.final
cdef class GetMessageResult:
    """What ``get_message`` returns (docs/api.md "Reading"): ``status, next_begin_offset, min_offset, max_offset,
    messages, message_count, buffer_total_size`` and ``suggest_pulling_from_slave`` (RocketMQ: the pull is
    far behind, in data no longer in memory). Compiled because every pull makes one; re-exported by
    ``pystore.read.results``."""

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


cdef GetMessageResult _result(object status, int64_t next_offset, int64_t min_o, int64_t max_o, list msgs,
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


def read_queue(ConsumeQueueCore cq, long long offset, long long max_msg_nums, list cl_files not None,
               long long cl_file_size, ReadLimits lim not None, object tag_codes, object tag_names, object filt,
               bint keep_offset, object cl_queue=None, RecordSink sink=None):
    """``get_message`` on one consume queue (None: a queue that does not exist): RocketMQ's decision table
    (docs/format.md §11.1; empty queue, offset too small, one past the end, far past it, no unit buffer) then the
    scan, in one call, as a ``GetMessageResult``. ``keep_offset`` is the slave's next-offset rule
    (``nextOffsetCorrection``); ``cl_queue``, the commit log's ``MappedFileQueue`` of a writer, lets a unit
    pointing past all the log ever written be reported as damage rather than waited for; ``sink`` takes the
    messages found instead of the result (``get_columns``: its ``messages`` stay empty)."""
    return _read_queue(cq, offset, max_msg_nums, cl_files, cl_file_size, lim, tag_codes, tag_names, filt,
                       keep_offset, cl_queue, sink)


cdef GetMessageResult _read_queue(ConsumeQueueCore cq, int64_t offset, int64_t max_msg_nums, list cl_files,
                                  int64_t cl_file_size, ReadLimits lim, object tag_codes, object tag_names,
                                  object filt, bint keep_offset, object cl_queue=None, RecordSink sink=None):
    cdef list files
    cdef int64_t cq_size, units, min_o = 0, max_o = 0, pos, end, cl_max = 0
    cdef Py_ssize_t n, ncl = PyList_GET_SIZE(cl_files)
    cdef int64_t consumed = 0, total = 0, last_phy = -1
    cdef int32_t nums = 1 if max_msg_nums < 1 else (0x7FFFFFFF if max_msg_nums > 0x7FFFFFFF else max_msg_nums)
    cdef MappedFile last, mf
    cdef list out
    cdef int code
    if cq is None:
        return _result(STATUSES[GM_NO_MESSAGE_IN_QUEUE], offset if keep_offset else 0, 0, 0, [], 0, False)
    files = files_of(cq.queue)
    cq_size = cq.queue.mapped_file_size
    units = cq_size // CQ_STORE_UNIT_SIZE
    n = PyList_GET_SIZE(files)
    min_o = cq.min_logic_offset // CQ_STORE_UNIT_SIZE
    if n > 0:
        last = <MappedFile>PyList_GET_ITEM(files, n - 1)
        max_o = (last.file_from_offset + last.read_position()) // CQ_STORE_UNIT_SIZE
    if max_o == 0:
        return _result(STATUSES[GM_NO_MESSAGE_IN_QUEUE], offset if keep_offset else 0, min_o, max_o, [], 0, False)
    if offset < min_o:
        return _result(STATUSES[GM_OFFSET_TOO_SMALL], offset if keep_offset else min_o, min_o, max_o, [], 0, False)
    if offset == max_o:
        return _result(STATUSES[GM_OFFSET_OVERFLOW_ONE], offset, min_o, max_o, [], 0, False)
    if offset > max_o:
        return _result(STATUSES[GM_OFFSET_OVERFLOW_BADLY], offset if keep_offset else max_o, min_o, max_o, [], 0,
                       False)
    mf = find_file(files, cq_size, offset * CQ_STORE_UNIT_SIZE)
    if mf is not None and mf.base != NULL:
        pos = offset * CQ_STORE_UNIT_SIZE - mf.file_from_offset
        end = mf.read_position()
        if pos >= end or not mf.c_hold():
            mf = None
    else:
        mf = None
    if mf is None:
        return _result(STATUSES[GM_OFFSET_FOUND_NULL], offset if keep_offset else offset + units - offset % units,
                       min_o, max_o, [], 0, False)
    if ncl > 0:
        last = <MappedFile>PyList_GET_ITEM(cl_files, ncl - 1)
        cl_max = last.file_from_offset + last.read_position()
    out = []
    try:
        code = _scan(mf, pos, end, cl_files, cl_file_size, cl_max, nums, lim, tag_codes, tag_names, filt, out,
                     &consumed, &total, &last_phy, cq, cl_queue, sink)
    finally:
        mf.c_release()
    # the scan's next offset is never corrected, on a slave either (RocketMQ: offset + units visited)
    return _result(STATUSES[code], offset + consumed, min_o, max_o, out, total,
                   last_phy >= 0 and cl_max - last_phy > lim.memory_window)
