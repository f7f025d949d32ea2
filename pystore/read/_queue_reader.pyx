# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The frameless reader (``QueueReader``): ``get_message`` and ``look_message_by_offset`` with no Python frame past
``MessageStore``'s own method for the common calls, a read-only store's follow of a live writer in C
(``follow_live``, the refresh's too), the one-new-unit tail read, and the long-polling wait on the writer's wake
word. Every answer is ``_read``'s: the general get is ``_read._read_queue``, and anything this module cannot settle
goes to the Python reads (``StoreReads``).
"""

cimport cython
from cpython.exc cimport PyErr_CheckSignals
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from libc.stdint cimport int32_t, int64_t, uint32_t
from posix.unistd cimport usleep

from pystore.format._bytes cimport get_i32, get_i64, load_i32_acquire
from pystore.format._codec cimport (CQ_FILLER_SIZE, CQ_STORE_UNIT_SIZE, REC_BLANK, REC_END, RecordView, check_record,
                                    make_ext, scan_records)
from pystore.log._files cimport files_of
from pystore.log._mapped_file cimport MappedFile
from pystore.message._message_ext cimport MessageExt
from pystore.system._notify cimport WakeWord, ps_now_ns, ps_register, ps_spin_nonzero, ps_unregister, ps_wait
from pystore.read._read cimport (GM_NO_MESSAGE_IN_QUEUE, GM_OFFSET_OVERFLOW_ONE, SCAN_FOUND, SCAN_NO_MATCHED, STATUSES,
                                 GetMessageResult, ReadLimits, _read_queue, _result)
from pystore.queue._units cimport DAMAGE_NONE, ConsumeQueueCore, unit_damage, unit_valid

from pystore.log._records import message_at

# the most commit log the get's follow scans (it holds the GIL): a reader further behind follows under the
# refresh lock (``StoreParts.refresh_queue_read_only``), whose follow scans without the GIL
cdef int64_t FOLLOW_MAX_SCAN = 1 << 20

# follow_live's answers
cdef enum:
    FOLLOW_HAND_OVER = 0       # a file to open or damage to look at: the Python follow's (folder listings)
    FOLLOW_COVERED = 1         # every unit seen has its record in view; nothing moved
    FOLLOW_MOVED = 2           # the same, after moving the queue's or the commit log's end seen


cdef int follow_live(ConsumeQueueCore cq, list cl_files, bint in_refresh) except -1:
    """A read-only store's follow of a live writer in the common case, the one follow of a known queue: the
    units written since into the queue's last file, then the records written since into the commit log's last
    file ``cl_files[-1]``. ``FOLLOW_MOVED`` or ``FOLLOW_COVERED`` when that covers every unit seen;
    ``FOLLOW_HAND_OVER`` when a file must be opened or damage looked at (a file filled or rolled, a unit
    pointing past the log's last file, the log's blank end; the queue's file found full, since the units after
    it are in the next one), which only the full follow in Python does
    (``StoreParts.refresh_queue_read_only``: folder listings, files mapped, damage reported).

    Two callers: the frameless get (``QueueReader._get_live``, ``in_refresh`` False) runs it with the GIL held
    throughout, while no Python follow is under way, so nothing else moves the reader's view meanwhile, and
    hands over past ``FOLLOW_MAX_SCAN`` of commit log; the refresh (``in_refresh`` True, under the refresh lock,
    ``StoreParts.following`` counted so that the get's follow does not start) walks without the GIL and
    without that cap.

    Units first, then records: the writer publishes a unit only after its record (and every record before it)
    is whole, so a commit log scanned after the units covers each of them; a unit whose record lies past the
    scanned end is not served (``_scan`` stops at it) and sends the get to the Python follow."""
    cdef MappedFile mf = cq.last, last
    cdef Py_ssize_t ncl = PyList_GET_SIZE(cl_files)
    cdef int64_t start, pos, mx = -1, count = 0, ts = -1, end, target
    cdef int32_t reason = REC_END
    cdef bint moved = False
    if mf is None or ncl == 0:
        return FOLLOW_HAND_OVER
    start = mf.read_position()
    if start >= mf.file_size or not mf.c_hold():
        return FOLLOW_HAND_OVER
    try:
        if mf.base == NULL:
            return FOLLOW_HAND_OVER
        if in_refresh:
            with nogil:
                pos = _walk_units(mf.base, start, mf.file_size, &mx)
        else:
            pos = _walk_units(mf.base, start, mf.file_size, &mx)
    finally:
        mf.c_release()
    if pos != start:
        mf.followed_to(pos)
        if mx >= 0:
            cq.max_physic_offset = mx
        moved = True
    if pos >= mf.file_size:
        # the file is full: the units after it are in a file this follow does not open
        return FOLLOW_HAND_OVER
    # the next unit lands in this file while it has room: these are all the new ones
    last = <MappedFile>PyList_GET_ITEM(cl_files, ncl - 1)
    start = last.read_position()
    if cq.max_physic_offset <= last.file_from_offset + start:
        return FOLLOW_MOVED if moved else FOLLOW_COVERED
    target = cq.max_physic_offset - last.file_from_offset
    if start >= last.file_size or target > last.file_size or (target - start > FOLLOW_MAX_SCAN and not in_refresh) \
            or not last.c_hold():
        return FOLLOW_HAND_OVER
    try:
        if last.base == NULL:
            return FOLLOW_HAND_OVER
        # up to the end of the last unit's record: what this queue's get needs
        if in_refresh:
            with nogil:
                end = scan_records(last.base, start, target, False, &reason, &count, &ts, NULL)
        else:
            end = scan_records(last.base, start, target, False, &reason, &count, &ts, NULL)
    finally:
        last.c_release()
    if reason == REC_BLANK:
        return FOLLOW_HAND_OVER
    last.followed_to(end)
    return FOLLOW_MOVED if cq.max_physic_offset <= last.file_from_offset + end else FOLLOW_HAND_OVER


cdef inline int64_t _walk_units(const unsigned char *base, int64_t pos, int64_t file_size,
                                int64_t *mx) noexcept nogil:
    """The end of the valid units from ``pos`` (RocketMQ's recovery rule, ``unit_valid``); ``mx`` set to the
    end of the last real unit's record, left as it was when there is none."""
    cdef const unsigned char *p
    cdef int32_t size
    while pos + CQ_STORE_UNIT_SIZE <= file_size:
        p = base + pos
        if not unit_valid(p):
            break
        size = get_i32(p + 8)
        if size != CQ_FILLER_SIZE:
            mx[0] = get_i64(p) + size
        pos += CQ_STORE_UNIT_SIZE
    return pos


def follow_in_place(ConsumeQueueCore cq not None, list cl_files not None):
    """``follow_live`` for the refresh (``StoreParts._follow_in_place``): 2 when it moved the ends seen, 1 when
    it covered the queue without moving them, 0 when the full follow must run."""
    return follow_live(cq, cl_files, True)


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
    """``MessageStore.get_message`` and ``look_message_by_offset`` (the store's methods call these) with no further
    Python frame, for the common call on a writable store that is loaded: ``get_message`` with a plain ``(group,
    topic, queue_id, offset, max_msg_nums)``, no filter, a queue that exists; ``look_message_by_offset`` with an
    int. Anything else (a filter, arguments of other types, an unknown queue, a store not readable or shut down, a
    slave) goes to the Python reads (``StoreReads``), so there is one reading of every rule. The store keeps ``open`` in step
    with its state.

    A read-only store's reader (``live``: its ``StoreParts``) follows the writer of another process first when
    the offset is at or past the queue's end it has seen (``follow_live``, while no Python follow is under
    way); whatever that cannot settle (a new file, damage, a Python follow under way, a record not seen yet)
    is the Python method's get, which follows in full. ``wait_message`` is its
    long-polling get on the writer's wake word, spinning and getting again without a Python frame between."""
    cdef dict queues                     # ConsumeQueueStore.table: (topic, queue_id) -> ConsumeQueueCore
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
            r = self._get_live(<ConsumeQueueCore?>cq, offset, max_msg_nums)
            if r is None:
                return self.cls.get_message(self.store, group, topic, queue_id, offset, max_msg_nums)
            return r
        q = self.cl_queue
        return _read_queue(<ConsumeQueueCore?>cq, offset, max_msg_nums, files_of(q), q.mapped_file_size, self.lim, None,
                           None, None, False, q)

    cdef GetMessageResult _get_live(self, ConsumeQueueCore cq, int64_t offset, int64_t max_msg_nums):
        """A read-only store's plain get: follow the writer when ``offset`` is at or past the end seen, then
        the read; None when the Python get must answer (the follow needs it, or units point at records not
        seen). Its fast case is a tailing consumer's: ``offset`` is the end seen and the writer has added just
        the one unit there (``_next_at_end``)."""
        cdef object q = self.cl_queue
        cdef list files = files_of(cq.queue)
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
            if self.parts.following or self.commitlog.damage_fence >= 0 or not follow_live(cq, files_of(q), False):
                return None
        r = _read_queue(cq, offset, max_msg_nums, files_of(q), q.mapped_file_size, self.lim, None, None,
                        None, False, None)
        if r.status is STATUSES[SCAN_NO_MATCHED] and r.next_begin_offset == offset:
            return None
        return r

    cdef GetMessageResult _next_at_end(self, ConsumeQueueCore cq, MappedFile mf, int64_t offset):
        """The fast case of ``_get_live``: the unit at ``offset``, the end seen of the queue's last file ``mf``,
        was just written, it is the only new one, and its record lies at the end seen of the commit log's last
        file (or below it). Then that record alone is checked (as ``_scan`` checks what it serves, and the
        follow's record scan would), the two ends move past them (what ``follow_live`` would do) and the
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
        if phy < 0 or (size == CQ_FILLER_SIZE and phy == 0):
            return None
        if rp + 2 * CQ_STORE_UNIT_SIZE <= mf.file_size and get_i32(p + CQ_STORE_UNIT_SIZE + 8) != 0:
            return None                         # more than one new unit: a page, the general read's
        # as the follow: never while a Python follow is under way or the commit log has a damage fence
        if self.parts.following or self.commitlog.damage_fence >= 0:
            return None
        cl_files = files_of(self.cl_queue)
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
        mf.followed_to(rp + CQ_STORE_UNIT_SIZE)
        if phy + size > cq.max_physic_offset:
            cq.max_physic_offset = phy + size
        if rpos + size > crp:
            crp = rpos + size
            cl.followed_to(crp)
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
            r = self._get_live(<ConsumeQueueCore?>cq, offset, max_msg_nums)
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
        (topic, queue_id) to arrive from the writer of another process (``pystore.read.arrival``'s wait, compiled):
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
                s = self._spin_on_unit(<ConsumeQueueCore?>cq, offset, spin_ns if spin_ns < left else left)
                if s >= 0:
                    # the queue and the store's state were looked up just before the spin: only a shutdown
                    # meanwhile sends this get the long way
                    r = self._get_live(<ConsumeQueueCore?>cq, offset, max_msg_nums) if self.open else None
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
        return message_at(files_of(q), q.mapped_file_size, commit_log_offset, self.lim.check_crc)
