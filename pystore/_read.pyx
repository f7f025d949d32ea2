# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""``get_message``, compiled: RocketMQ's decision table (docs/format.md §11.1) and the scan of one consume queue
and the commit-log records its units point at, building the ``GetMessageResult`` (``read_queue``). The store's
Python ``get_message`` (filters, read-only stores, slaves) and its frameless fast path (``QueueReader``) both
run it, so every status and next-offset rule is read in one place.

The scan checks each record it serves against its unit (``_units.unit_damage``): damage is never a message.
"""

cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.exc cimport PyErr_CheckSignals
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from libc.stdint cimport INT64_MIN, int32_t, int64_t, uint32_t, uint64_t
from posix.unistd cimport usleep

from pystore._bytes cimport get_i32, get_i64, load_i32_acquire
from pystore._codec cimport (CQ_FILLER_SIZE, CQ_STORE_UNIT_SIZE, REC_BLANK, REC_END, SPLIT_BODY, RecordView,
                             check_record, find_property, make_ext, make_ext_shared, scan_records)
from pystore._files cimport find_file
from pystore._mapped_file cimport MappedFile
from pystore._jstring cimport utf8_text
from pystore._message_ext cimport MessageExt
from pystore._notify cimport WakeWord, ps_now_ns, ps_register, ps_spin_nonzero, ps_unregister, ps_wait
from pystore._sink cimport RecordSink, same_bytes
from pystore._units cimport (DAMAGE_MISMATCH, DAMAGE_NONE, DAMAGE_RECORD, ConsumeQueueCore, is_filler, unit_damage,
                             unit_valid)

from pystore._codec import REASONS as _REASONS
from pystore._records import message_at
from pystore.errors import StoreCorruptedError
from pystore.status import GetMessageStatus

cdef int32_t FILLER = CQ_FILLER_SIZE

# get_message's outcomes, as C codes: the scan's (SCAN_*), then those decided before any scan (GM_*) ...
cdef enum:
    SCAN_FOUND = 0
    SCAN_NO_MATCHED = 1
    SCAN_WAS_REMOVING = 2
    GM_NO_MESSAGE_IN_QUEUE = 3
    GM_OFFSET_TOO_SMALL = 4
    GM_OFFSET_OVERFLOW_ONE = 5
    GM_OFFSET_OVERFLOW_BADLY = 6
    GM_OFFSET_FOUND_NULL = 7

# ... and the status each one is, by code
cdef tuple STATUSES = (GetMessageStatus.FOUND, GetMessageStatus.NO_MATCHED_MESSAGE,
                       GetMessageStatus.MESSAGE_WAS_REMOVING, GetMessageStatus.NO_MESSAGE_IN_QUEUE,
                       GetMessageStatus.OFFSET_TOO_SMALL, GetMessageStatus.OFFSET_OVERFLOW_ONE,
                       GetMessageStatus.OFFSET_OVERFLOW_BADLY, GetMessageStatus.OFFSET_FOUND_NULL)


@cython.final
cdef class ReadLimits:
    """The transfer caps of one ``get_message`` (docs/format.md §11.1 ``isTheBatchFull``)."""
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
        return utf8_text(rec + v.props_pos + vp, vl)
    return None


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


cdef inline list _files_of(object q):
    """``q.files`` of a ``MappedFileQueue`` without its property's Python frame (the list is replaced whole,
    never changed in place: the one read is a snapshot as the property's is)."""
    return <list>q._files


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
    ``out``: no ``MessageExt`` is made, but for a filter object's commit-log test."""
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
                if count == 0 and cl_queue is not None and phy + size > _written_end(cl_queue.files):
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
                vp = &run_views[nrun] if shared else &v
                rec = held_base + rpos
                qoff = <int64_t>(<uint64_t>(cq_from + pos) // CQ_STORE_UNIT_SIZE)
                r = check_record(rec, rp - rpos, check_crc, vp)
                damage = _damage(r, vp, rec, phy, size, cq_topic, cq_topic_len, cq_qid, qoff)
                if damage != DAMAGE_NONE and rp != held.read_position():
                    # judged as at the read position of now, as every record that is served
                    rp = held.read_position()
                    r = check_record(rec, rp - rpos, check_crc, vp)
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
                pos += CQ_STORE_UNIT_SIZE
                continue
            if direct:
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
    finally:
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
    files = _files_of(cq.queue)
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


# the most commit log a compiled follow scans (it holds the GIL): a reader further behind follows in Python,
# whose scan lets other threads run
cdef int64_t FOLLOW_MAX_SCAN = 1 << 20


cdef int _follow_live(ConsumeQueueCore cq, list cl_files) except -1:
    """A read-only store's follow of a live writer in the common case, the compiled twin of
    ``StoreParts._follow_in_place`` (run while no Python follow is under way, with the GIL held throughout:
    nothing else moves the reader's view meanwhile): the units written since into the
    queue's last file, then the records written since into the commit log's last file. 1 when that covers
    every unit seen; 0 when a file must be opened or damage looked at (a file filled or rolled, a unit
    pointing past the log's last file, the log's blank end, more than ``FOLLOW_MAX_SCAN`` of it to scan):
    the Python follow does it all then.

    Units first, then records: the writer publishes a unit only after its record (and every record before it)
    is whole, so a commit log scanned after the units covers each of them; a unit whose record lies past the
    scanned end is not served (``_scan`` stops at it) and sends the get to the Python follow."""
    cdef MappedFile mf = cq.last, last
    cdef Py_ssize_t ncl = PyList_GET_SIZE(cl_files)
    cdef int64_t start, pos, mx = -1, phy, count = 0, ts = -1, end, target
    cdef int32_t size, reason = REC_END
    cdef const unsigned char *p
    if mf is None or ncl == 0:
        return 0
    start = mf.read_position()
    if start >= mf.file_size or not mf.c_hold():
        return 0
    try:
        if mf.base == NULL:
            return 0
        pos = start
        while pos + CQ_STORE_UNIT_SIZE <= mf.file_size:
            p = mf.base + pos
            if not unit_valid(p):
                break
            phy = get_i64(p)
            size = get_i32(p + 8)
            if size != FILLER:
                mx = phy + size
            pos += CQ_STORE_UNIT_SIZE
    finally:
        mf.c_release()
    if pos != start:
        # the next unit lands in this file while it has room: these are all the new ones
        mf.wrote = mf.committed = mf.flushed = pos
        if mx >= 0:
            cq.max_physic_offset = mx
    last = <MappedFile>PyList_GET_ITEM(cl_files, ncl - 1)
    start = last.read_position()
    if cq.max_physic_offset <= last.file_from_offset + start:
        return 1
    target = cq.max_physic_offset - last.file_from_offset
    if start >= last.file_size or target > last.file_size or target - start > FOLLOW_MAX_SCAN \
            or not last.c_hold():
        return 0
    try:
        if last.base == NULL:
            return 0
        # up to the end of the last unit's record: what this queue's get needs
        end = scan_records(last.base, start, target, False, &reason, &count, &ts, NULL)
    finally:
        last.c_release()
    if reason == REC_BLANK:
        return 0
    last.wrote = last.committed = last.flushed = end
    return 1 if cq.max_physic_offset <= last.file_from_offset + end else 0


cdef inline bint _unit_after(MappedFile mf) noexcept:
    """Whether a follow of the queue whose last file is ``mf`` may find anything: a unit written past the end
    seen, or no room left in the file (a new file is the Python follow's). Without either, the follow would
    find nothing new in this queue, so a get at its end skips it (and the lock): a waiting get's usual
    look."""
    cdef int64_t rp = mf.read_position()
    cdef bint r
    if rp + CQ_STORE_UNIT_SIZE > mf.file_size or not mf.c_hold():
        return True
    r = mf.base == NULL or unit_valid(mf.base + rp)
    mf.c_release()
    return r


cdef inline bint _final(GetMessageResult r, int64_t offset) noexcept:
    """Is a plain get's answer final for a waiting get (``arrival.found_something`` without a filter):
    anything but an empty queue, the offset one past the end, or no progress over units whose records are
    not seen."""
    cdef object st = r.status
    if st is STATUSES[GM_NO_MESSAGE_IN_QUEUE] or st is STATUSES[GM_OFFSET_OVERFLOW_ONE]:
        return False
    return st is not STATUSES[SCAN_NO_MATCHED] or r.next_begin_offset != offset


# the longest single sleep of a compiled wait: a store shut down meanwhile ends its waits within it
cdef int64_t WAIT_SLICE_NS = 1000000000
# After a wake-up that found nothing (a put to another queue of the store: the wake word is the store's), a
# compiled wait looks at its queue every WAKE_POLL_US for WAKE_POLL_NS without registering: a writer streaming
# to other queues then pays for this waiter's wake-up (its futex call, the barrier the registration sends it)
# once per WAKE_POLL_NS instead of once per round trip of the waiter, and a message to this queue meanwhile
# waits at most a poll interval.
cdef unsigned int WAKE_POLL_US = 50
cdef int64_t WAKE_POLL_NS = 1000000


@cython.final
cdef class QueueReader:
    """``MessageStore.get_message`` and ``look_message_by_offset`` without a Python frame, for the common
    call on a writable store that is loaded: ``get_message`` with a plain ``(group, topic, queue_id, offset,
    max_msg_nums)``, no filter, a queue that exists; ``look_message_by_offset`` with an int. Anything else (a
    filter, arguments of other types, an unknown queue, a store not readable or shut down, a slave) goes to
    the store class's own method, so there is one reading of every rule. The store keeps ``open`` in step
    with its state.

    A read-only store's reader (``live``: its ``StoreParts``) follows the writer of another process first when
    the offset is at or past the queue's end it has seen (``_follow_live``, while no Python follow is under
    way); whatever that cannot settle (a new file, damage, a Python follow under way, a record not seen yet)
    is the Python method's get, which follows in full. ``wait_message`` is its
    long-polling get on the writer's wake word, spinning and getting again without a Python frame between."""
    cdef dict queues                     # ConsumeQueueStore._queues: (topic, queue_id) -> ConsumeQueue
    cdef object cl_queue                 # the commit log's MappedFileQueue (its ``files`` list is replaced)
    cdef ReadLimits lim
    cdef object flags                    # RunningFlags
    cdef long not_readable_bit
    cdef object config
    cdef object slave_role
    cdef object cls                      # the store's class: its methods are the slow paths
    cdef object store
    cdef public bint open
    cdef bint live                       # a read-only store's: follows the writer before reading at the end
    cdef object parts                    # its StoreParts (live): a Python follow under way sends gets there
    cdef object commitlog                # the CommitLog (live): its damage fence sends follows to Python
    cdef readonly int64_t tail_reads     # gets answered by ``_next_at_end`` (the tests' evidence it ran)

    def __init__(self, dict queues not None, cl_queue, ReadLimits lim not None, flags, long not_readable_bit,
                 config, slave_role, cls, store, live=None):
        self.queues = queues
        self.cl_queue = cl_queue
        self.lim = lim
        self.flags = flags
        self.not_readable_bit = not_readable_bit
        self.config = config
        self.slave_role = slave_role
        self.cls = cls
        self.store = store
        self.open = False
        self.live = live is not None
        if live is not None:
            self.parts = live
            self.commitlog = live.commitlog

    def get_message(self, group, topic, queue_id, offset, max_msg_nums=32, message_filter=None, timeout_ms=0):
        """``MessageStore.get_message(group, topic, queue_id, offset, max_msg_nums=32, message_filter=None,
        timeout_ms=0)``: up to ``max_msg_nums`` messages of (topic, queue_id) from queue offset ``offset``, with
        RocketMQ's statuses and next-offset rules (docs/format.md §11.1). All but the plain case (a filter, an unknown
        queue, a slave, a store not readable, a wait) is the Python method's answer."""
        cdef object cq = None
        cdef object q
        if timeout_ms is not 0:
            return self.cls.get_message(self.store, group, topic, queue_id, offset, max_msg_nums, message_filter,
                                        timeout_ms)
        if (message_filter is None and self.open and type(topic) is str and type(queue_id) is int
                and type(offset) is int and type(max_msg_nums) is int):
            cq = self.queues.get((topic, queue_id))
            if cq is not None and (self.flags._flag & self.not_readable_bit
                                   or self.config.broker_role is self.slave_role):
                cq = None
        if cq is None:
            return self.cls.get_message(self.store, group, topic, queue_id, offset, max_msg_nums, message_filter)
        if self.live:
            r = self._get_live(<ConsumeQueueCore>cq, offset, max_msg_nums)
            if r is None:
                return self.cls.get_message(self.store, group, topic, queue_id, offset, max_msg_nums)
            return r
        q = self.cl_queue
        return _read_queue(<ConsumeQueueCore>cq, offset, max_msg_nums, q.files, q.mapped_file_size, self.lim, None,
                           None, None, False, q)

    cdef GetMessageResult _get_live(self, ConsumeQueueCore cq, int64_t offset, int64_t max_msg_nums):
        """A read-only store's plain get: follow the writer when ``offset`` is at or past the end seen, then
        the read; None when the Python get must answer (the follow needs it, or units point at records not
        seen). Its fast case is a tailing consumer's: ``offset`` is the end seen and the writer has added just
        the one unit there (``_next_at_end``)."""
        cdef object q = self.cl_queue
        cdef list files = _files_of(cq.queue)
        cdef Py_ssize_t n = PyList_GET_SIZE(files)
        cdef MappedFile last = None
        cdef int64_t max_o = 0
        cdef GetMessageResult r
        if n > 0:
            last = <MappedFile>PyList_GET_ITEM(files, n - 1)
            max_o = (last.file_from_offset + last.read_position()) // CQ_STORE_UNIT_SIZE
            if offset == max_o and last is cq.last and offset >= cq.min_logic_offset // CQ_STORE_UNIT_SIZE:
                r = self._next_at_end(cq, last, offset)
                if r is not None:
                    return r
        if offset >= max_o and (last is None or last is not cq.last or _unit_after(last)):
            # no lock: the follow runs with the GIL held throughout, and only while no Python follow is under
            # way (one that started would have released the GIL in a scan or a folder listing)
            if self.parts.following or self.commitlog.damage_fence >= 0 or not _follow_live(cq, _files_of(q)):
                return None
        r = _read_queue(cq, offset, max_msg_nums, _files_of(q), q.mapped_file_size, self.lim, None, None,
                        None, False, None)
        if r.status is STATUSES[SCAN_NO_MATCHED] and r.next_begin_offset == offset:
            return None
        return r

    cdef GetMessageResult _next_at_end(self, ConsumeQueueCore cq, MappedFile mf, int64_t offset):
        """The fast case of ``_get_live``: the unit at ``offset``, the end seen of the queue's last file ``mf``,
        was just written, it is the only new one, and its record lies at the end seen of the commit log's last
        file (or below it). Then that record alone is checked (as ``_scan`` checks what it serves, and the
        follow's record scan would), the two ends move past them (what ``_follow_live`` would do) and the
        result is made from them, as ``_read_queue`` would make it; None for anything else (no new unit,
        several, a filler, a record elsewhere, damage), which the follow and read of ``_get_live`` settle.

        The unit's size field is loaded with acquire semantics before anything else of it: the writer stores
        it last, with release semantics, after the record and the rest of the unit (``_units.put_unit``), so a
        unit whose size is seen has its record whole in memory; a unit not seen yet (size 0) is not served."""
        cdef int64_t rp = mf.read_position(), phy, rpos, crp, cl_max, min_o
        cdef int32_t size, r
        cdef Py_ssize_t ncl
        cdef list cl_files
        cdef MappedFile cl
        cdef const unsigned char *p
        cdef RecordView v
        cdef MessageExt msg
        if rp + CQ_STORE_UNIT_SIZE > mf.file_size or mf.base == NULL:
            return None
        p = mf.base + rp
        size = load_i32_acquire(p + 8)
        if size <= 0:
            return None
        phy = get_i64(p)
        if phy < 0 or (size == FILLER and phy == 0):
            return None
        if rp + 2 * CQ_STORE_UNIT_SIZE <= mf.file_size and get_i32(p + CQ_STORE_UNIT_SIZE + 8) != 0:
            return None                         # more than one new unit: a page, the general read's
        # as the follow: never while a Python follow is under way or the commit log has a damage fence
        if self.parts.following or self.commitlog.damage_fence >= 0:
            return None
        cl_files = _files_of(self.cl_queue)
        ncl = PyList_GET_SIZE(cl_files)
        if ncl == 0:
            return None
        cl = <MappedFile>PyList_GET_ITEM(cl_files, ncl - 1)
        rpos = phy - cl.file_from_offset
        crp = cl.read_position()
        # the record: right at the end seen (then the end moves past it), or below it (another queue's get
        # followed the log past it already)
        if rpos < 0 or rpos + size > cl.file_size or (rpos + size > crp and rpos != crp):
            return None
        if not mf.c_hold():
            return None
        if not cl.c_hold():
            mf.c_release()
            return None
        try:
            if cl.base == NULL or mf.base == NULL:
                return None
            r = check_record(cl.base + rpos, size, self.lim.check_crc, &v)
            if unit_damage(r, &v, cl.base + rpos, phy, size, cq, offset) != DAMAGE_NONE:
                return None
            msg = make_ext(cl.base + rpos, &v)
        finally:
            cl.c_release()
            mf.c_release()
        mf.wrote = mf.committed = mf.flushed = rp + CQ_STORE_UNIT_SIZE
        if phy + size > cq.max_physic_offset:
            cq.max_physic_offset = phy + size
        if rpos + size > crp:
            cl.wrote = cl.committed = cl.flushed = crp = rpos + size
        cl_max = cl.file_from_offset + crp
        min_o = cq.min_logic_offset // CQ_STORE_UNIT_SIZE
        self.tail_reads += 1
        return _result(STATUSES[SCAN_FOUND], offset + 1, min_o, offset + 1, [msg], size,
                       cl_max - phy > self.lim.memory_window)

    cdef GetMessageResult _get_any(self, tuple key, int64_t offset, int64_t max_msg_nums):
        """A plain get of a live reader of the queue ``key`` (topic, queue id): compiled when it can be, else
        the Python method's."""
        cdef object cq = self._queue_of(key)
        cdef GetMessageResult r = None
        if cq is not None:
            r = self._get_live(<ConsumeQueueCore>cq, offset, max_msg_nums)
        if r is None:
            r = self.cls.get_message(self.store, "", key[0], key[1], offset, max_msg_nums)
        return r

    cdef object _queue_of(self, tuple key):
        """The consume queue ``key`` of a readable store (None when the compiled get may not serve it)."""
        if (self.open and not (self.flags._flag & self.not_readable_bit)
                and self.config.broker_role is not self.slave_role):
            return self.queues.get(key)
        return None

    cdef int _spin_on_unit(self, ConsumeQueueCore cq, int64_t offset, int64_t spin_ns) except -2:
        """Spin up to ``spin_ns``, without the GIL, on the size field of the unit the writer will write for
        queue offset ``offset`` of ``cq`` when that is the next unit of the queue's last file as seen here (the
        file held meanwhile): 1 when the writer wrote it, 0 when the time ran out, -1 when there is no such
        place to watch (the queue's end not seen at ``offset``, its file full: the next unit goes to a new
        file)."""
        cdef MappedFile mf = cq.last
        cdef int64_t rp
        cdef int s
        if mf is None:
            return -1
        rp = mf.read_position()
        if (mf.file_from_offset + rp != offset * CQ_STORE_UNIT_SIZE or rp + CQ_STORE_UNIT_SIZE > mf.file_size
                or not mf.c_hold()):
            return -1
        try:
            if mf.base == NULL:
                return -1
            with nogil:
                s = ps_spin_nonzero(mf.base + rp + 8, spin_ns)
        finally:
            mf.c_release()
        return s

    def wait_message(self, WakeWord wake not None, str topic not None, int queue_id, long long offset,
                     long long max_msg_nums, double spin_us, double timeout_ms):
        """A read-only store's plain get that waits up to ``timeout_ms`` for a message at ``offset`` of
        (topic, queue_id) to arrive from the writer of another process (``pystore.arrival``'s wait, compiled):
        get; while the answer is not final, with ``spin_us``, spin that long without the GIL on the place the
        writer's next unit of the queue goes (``_spin_on_unit``: no registration, nothing for the writer to
        do) and get as soon as it is written; when there is no such place, or the spin ran out, register on
        ``wake``, get again, spin (when it could not spin on the unit) and sleep on its futex, and get again
        as soon as it moves, without a Python frame between. After a wake-up that found nothing it looks every
        ``WAKE_POLL_US`` for a while without registering. The last answer; None when this process cannot wait
        on the word (the writer needs a barrier it cannot issue, or no futex here: the caller polls) before
        anything was waited for."""
        cdef int64_t start, now, deadline, spin_ns = <int64_t>(spin_us * 1000.0) if spin_us > 0 else 0
        cdef int64_t seen, left, poll_until = 0, word_spin
        cdef int w = 0, s
        cdef bint unit_spin = spin_ns > 0
        cdef tuple key = (topic, queue_id)
        cdef object cq
        cdef GetMessageResult r
        if not self.live:
            raise TypeError("wait_message is a read-only store's")
        start = ps_now_ns()
        deadline = start + (<int64_t>(timeout_ms * 1000000.0) if timeout_ms > 0 else 0)
        r = self._get_any(key, offset, max_msg_nums)
        while not _final(r, offset):
            now = ps_now_ns()
            left = deadline - now
            if left <= 0:
                break
            if now < poll_until:
                with nogil:
                    usleep(WAKE_POLL_US if left > WAKE_POLL_US * 1000 else <unsigned int>(left // 1000 + 1))
                PyErr_CheckSignals()
                r = self._get_any(key, offset, max_msg_nums)
                continue
            word_spin = spin_ns
            cq = self._queue_of(key) if unit_spin else None
            if cq is not None:
                s = self._spin_on_unit(<ConsumeQueueCore>cq, offset, spin_ns if spin_ns < left else left)
                if s >= 0:
                    # the queue and the store's state were looked up just before the spin: only a shutdown
                    # meanwhile sends this get the long way
                    r = self._get_live(<ConsumeQueueCore>cq, offset, max_msg_nums) if self.open else None
                    if r is None:
                        r = self._get_any(key, offset, max_msg_nums)
                    # spun in full, or the unit came and is still not an answer (the Python get settles it
                    # next round): register and sleep, without a second spin
                    unit_spin = False
                    word_spin = 0
                    if s == 1:
                        continue
            seen = ps_register(wake.word, wake.flag_word)
            if seen < 0:
                return None
            try:
                r = self._get_any(key, offset, max_msg_nums)
                if _final(r, offset):
                    break
                left = deadline - ps_now_ns()
                if left <= 0:
                    break
                if left > WAIT_SLICE_NS:
                    left = WAIT_SLICE_NS
                with nogil:
                    w = ps_wait(wake.word, <uint32_t>seen, word_spin, left)
                if w == -2:
                    return None
                if w == -1:
                    PyErr_CheckSignals()
            finally:
                ps_unregister(wake.word, <uint32_t>seen)
            r = self._get_any(key, offset, max_msg_nums)
            unit_spin = spin_ns > 0
            if w == 1 and not _final(r, offset):
                poll_until = ps_now_ns() + WAKE_POLL_NS
        return r

    def look_message_by_offset(self, commit_log_offset):
        """``MessageStore.look_message_by_offset(commit_log_offset)``: the message stored at that commit-log
        offset, or None if no message starts there."""
        cdef object q
        if not self.open or type(commit_log_offset) is not int:
            return self.cls.look_message_by_offset(self.store, commit_log_offset)
        q = self.cl_queue
        return message_at(q.files, q.mapped_file_size, commit_log_offset, self.lim.check_crc)
