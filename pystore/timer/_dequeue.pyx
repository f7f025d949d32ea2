# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The timer store's dequeue in C: a due slot's units walked out of the timer log, and the delivery of its ordinary
units into the commit log in runs (RocketMQ ``TimerMessageStore.dequeue``, ``convert``/``convertMessage`` and
``doPut`` for the common case), each delivery byte for byte the record the Python path
(``timer_dequeue.TimerDelivery``: ``convert`` then the store's put) writes.

``SlotWalk.walk`` follows the slot's ``prevPos`` list from its ``lastPos`` (the timer log's files held; without the
GIL for a slot of ``WALK_NOGIL`` units or more), checking every unit as ``TimerLog.walk`` does: the position is a
unit's of the written log, its size is 52, its magic whole, its ``prevPos`` -1 or before it, its message size
positive, its delayed time in the slot walked; at most as many steps as the log holds units. A link below the log's
first file ends the list (a cleaned head). It keeps the units oldest first (commit-log offset, size, magic, write
time) and counts the delete markers; anything that does not check out returns -1 and the Python walk, run then,
raises ``StoreCorruptedError`` with the file and the offset (or finds nothing wrong, and the slot is delivered by
Python).

``SlotWalk.deliver`` takes a run of the walked units and delivers it in chunks (at most ``CHUNK_UNITS`` records
or ``CHUNK_BYTES``), each chunk:

* planned while its records lie in one commit-log file (held): each unit's record found and
  checked (``check_record``: whole, of the unit's size, naming its own offset, its CRC too when the store checks
  CRCs on reads); its properties read (``_props_pass``) and the delivery's worked out: ``REAL_TOPIC`` and
  ``REAL_QID`` removed, ``TIMER_ENQUEUE_MS`` (the unit's write time) and ``TIMER_DEQUEUE_MS`` (the chunk's clock
  read) replaced in place or added at the end in that order, as the dict ``convert`` edits and ``Message``
  encodes in its order; the delete markers of the run skipped (Python collected their keys first);
* with a delete marker's key in the slot, each planned message's ``REAL_TOPIC+UNIQ_KEY`` looked up (Python bytes:
  only in a slot with cancellations);
* put under the commit log's put lock as the store's put does (``CommitLogCore``'s protocol: the page-cache-busy
  check, the lock, the shared writers' lock, one clock read for the store time, then per record the file with room
  (blank and roll), the queue offset of its cell, the record encoded, published, and dispatched (consume-queue
  unit, index entries: ``Dispatcher.dispatch_record``), the statistics and the flush wake-up after the lock).

A run stops, with the units consumed so far, at the first unit that is not the common case, which Python delivers
through ``convert`` and the store's put as it always did: a rolled unit (``MAGIC_ROLL``: re-put to the timer topic),
a record that is not in the local commit-log files or does not check out, a cancelled message, properties that
Python would not write back unchanged (a name twice, an empty name or value, an item without its ``\\x02``, a
``\\x01`` in a value, bytes that are not UTF-8), ``DELAY`` or ``TIMER_DEL_UNIQKEY`` set, no ``TIMER_OUT_MS``, a
``REAL_TOPIC`` that is missing or not a plain topic of at most 127 bytes, a ``REAL_QID`` that is missing or not
plain digits of an int, a transaction type that does not enter a queue, a sys flag with its top bit set, an IPv6
born host or a port out of range, a body over the max message size, properties over 32767 bytes, a record larger
than a file; and a store that takes no puts, a page cache busy, a file that cannot be made.

Locks: the walk holds the timer log's files (no lock: the dequeue reads slots before the write time, which no unit
is appended to, and the files are copy-on-write); a chunk's delivery holds its source commit-log file and the
commit log's put lock (with the shared writers' append lock when the log is shared), as a put does.

The GIL: released for a long walk only. A chunk is planned and put with it (tens of microseconds; the writes under
the put lock keep it, as the put's do), and a call returns to Python after ``RUN_BYTES`` of deliveries, where
other threads get it. Beside a thread that keeps the GIL busy (a writer putting at full speed), every release
costs up to a switch interval (5 ms) to take it back: releasing it per chunk made a slot's delivery later, not
sooner.
"""

cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from libc.stdint cimport int16_t, int32_t, int64_t, uint32_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcmp, memcpy

from pystore.format._bytes cimport (fmt_int, get_i32, get_i64, mono_coarse_ns, now_ms, put_i16, put_i32, put_i64,
                                    store_i32_release)
from pystore.format._codec cimport (BORNHOST_V6_FLAG, END_FILE_MIN_BLANK_LENGTH, MESSAGE_MAGIC_CODE,
                                    STOREHOSTADDRESS_V6_FLAG, cal_msg_length, check_record, enters_queue)
from pystore.format._jstring cimport utf8_lead
from pystore.format._props cimport find_byte
from pystore.format._record cimport (AT_BODYCRC, AT_BORNHOST, AT_BORNTIMESTAMP, AT_FLAG, AT_MAGIC, AT_PHYSICALOFFSET,
                                     AT_QUEUEID, AT_QUEUEOFFSET, AT_SYSFLAG, IPV4_HOST_SIZE, IPV6_HOST_SIZE)
from pystore.log._commitlog cimport REFUSE_NONE
from pystore.log._files cimport find_file
from pystore.log._mapped_file cimport MappedFile
from pystore.message._message cimport MAX_PROPERTIES_BYTES
from pystore.timer._enqueue cimport T_MAGIC_DEFAULT, T_MAGIC_DELETE, T_MAGIC_ROLL, TL_UNIT_SIZE

cdef extern from "crc32.h":
    uint32_t ps_copy_crc32(unsigned char *dst, const unsigned char *src, size_t n) noexcept nogil

# why ``deliver`` stopped
cdef enum:
    STOP_END = 0                 # every unit of the run was consumed
    STOP_PYTHON = 2              # the unit after those consumed goes through Python
    _NEXT_FILE = 3               # (internal) the next record lies in another commit-log file
    _FULL = 4                    # (internal) the chunk is full

END = STOP_END
PYTHON = STOP_PYTHON

cdef enum:
    CHUNK_UNITS = 256            # deliveries per put-lock hold (a batch put's order of size)
    CHUNK_BYTES = 1 << 19
    MAX_ITEMS = 64               # properties items compared for a repeated name; more goes through Python
    WALK_NOGIL = 16384           # a slot of this many units is walked without the GIL (about 0.3 ms or more)
    RUN_BYTES = 1 << 22          # a call of ``deliver`` returns to Python once it put this many bytes
    MAX_V1_TOPIC = 127           # a topic this long or shorter is stored in a V1 record (and every byte is ASCII)

cdef int64_t _I32_MAX = 2147483647
cdef int64_t _DELAY_MAX = 2147483648            # |delay| of a unit: an i32

# RocketMQ's TopicValidator characters: [%|a-zA-Z0-9_-]
cdef unsigned char _TOPIC_OK[256]
for _c in range(256):
    _TOPIC_OK[_c] = 1 if (chr(_c).isascii() and (chr(_c).isalnum() or chr(_c) in "%|_-")) else 0


cdef inline int64_t _floor_div(int64_t a, int64_t b) noexcept nogil:
    cdef int64_t q = a // b
    if (a % b != 0) and ((a < 0) != (b < 0)):
        q -= 1
    return q


cdef inline bint _is(const unsigned char *p, Py_ssize_t n, const char *name, Py_ssize_t name_len) noexcept nogil:
    return n == name_len and memcmp(p, name, n) == 0


cdef bint _utf8_ok(const unsigned char *p, Py_ssize_t n) noexcept nogil:
    """Whether ``p[:n]`` is well-formed UTF-8 (so decoding and encoding it again gives the same bytes)."""
    cdef Py_ssize_t i = 0
    cdef int k, j
    cdef unsigned char lo, hi
    while i < n:
        if p[i] < 0x80:
            i += 1
            continue
        k = utf8_lead(p[i], &lo, &hi)
        if k < 0 or i + k >= n:
            return False
        if not lo <= p[i + 1] <= hi:
            return False
        for j in range(2, k + 1):
            if not 0x80 <= p[i + j] <= 0xBF:
                return False
        i += k + 1
    return True


cdef inline unsigned char *_item(unsigned char *q, const unsigned char *name, Py_ssize_t name_len,
                                 const unsigned char *value, Py_ssize_t value_len) noexcept nogil:
    memcpy(q, name, name_len)
    q[name_len] = 1
    memcpy(q + name_len + 1, value, value_len)
    q[name_len + 1 + value_len] = 2
    return q + name_len + value_len + 2


cdef int32_t _props_pass(const unsigned char *p, int32_t n, PropsInfo *pi, const unsigned char *enq,
                         int32_t enq_len, const unsigned char *deq, int32_t deq_len,
                         unsigned char *out) noexcept nogil:
    """The properties string ``p[:n]`` of a timer record as ``convert`` makes the delivery's (``enq`` NULL: the
    unit has no write time, TIMER_ENQUEUE_MS is left as it is): its length, written to ``out`` unless NULL, with
    ``pi`` filled; -1 when Python would not write the string back the same way or the message is not the common
    case (see the module docstring)."""
    cdef Py_ssize_t at = 0, end, sep, vpos, vlen, nlen, k
    cdef Py_ssize_t names[MAX_ITEMS][2]
    cdef Py_ssize_t items = 0
    cdef int32_t w = 0
    cdef unsigned char *q = out
    pi.topic_pos = pi.qid_pos = pi.uniq_pos = -1
    pi.topic_len = pi.qid_len = pi.uniq_len = 0
    pi.out_ms = pi.enq = pi.deq = False
    while at < n:
        end = find_byte(p, at, n, 2)
        if end >= n:
            return -1                          # the last item without its \x02 (Python writes one)
        sep = find_byte(p, at, end, 1)
        if sep == at or sep >= end - 1:
            return -1                          # an empty name or value, or no \x01: the decoder drops the item
        if find_byte(p, sep + 1, end, 1) < end:
            return -1                          # a \x01 in the value: Message refuses it
        nlen = sep - at
        vpos = sep + 1
        vlen = end - vpos
        if items == MAX_ITEMS:
            return -1
        for k in range(items):
            if names[k][1] == nlen and memcmp(p + names[k][0], p + at, nlen) == 0:
                return -1                      # a name twice: the dict keeps the first place and the last value
        names[items][0] = at
        names[items][1] = nlen
        items += 1
        if _is(p + at, nlen, "DELAY", 5) or _is(p + at, nlen, "TIMER_DEL_UNIQKEY", 17):
            return -1
        if _is(p + at, nlen, "REAL_TOPIC", 10):
            pi.topic_pos = <int32_t>vpos
            pi.topic_len = <int32_t>vlen
        elif _is(p + at, nlen, "REAL_QID", 8):
            pi.qid_pos = <int32_t>vpos
            pi.qid_len = <int32_t>vlen
        elif enq != NULL and _is(p + at, nlen, "TIMER_ENQUEUE_MS", 16):
            pi.enq = True
            w += <int32_t>nlen + enq_len + 2
            if q != NULL:
                q = _item(q, p + at, nlen, enq, enq_len)
        elif _is(p + at, nlen, "TIMER_DEQUEUE_MS", 16):
            pi.deq = True
            w += <int32_t>nlen + deq_len + 2
            if q != NULL:
                q = _item(q, p + at, nlen, deq, deq_len)
        else:
            if _is(p + at, nlen, "TIMER_OUT_MS", 12):
                pi.out_ms = True
            elif _is(p + at, nlen, "UNIQ_KEY", 8):
                pi.uniq_pos = <int32_t>vpos
                pi.uniq_len = <int32_t>vlen
            w += <int32_t>(end + 1 - at)
            if q != NULL:
                memcpy(q, p + at, end + 1 - at)
                q += end + 1 - at
        at = end + 1
    if enq != NULL and not pi.enq:
        w += 16 + enq_len + 2
        if q != NULL:
            q = _item(q, <const unsigned char *>"TIMER_ENQUEUE_MS", 16, enq, enq_len)
    if not pi.deq:
        w += 16 + deq_len + 2
        if q != NULL:
            q = _item(q, <const unsigned char *>"TIMER_DEQUEUE_MS", 16, deq, deq_len)
    return w


cdef inline bint _qid(const unsigned char *p, int32_t n, int32_t *out) noexcept nogil:
    """``REAL_QID`` as plain decimal digits of a non-negative int (``int`` reads more: Python judges those)."""
    cdef int64_t v = 0
    cdef int32_t i
    if n <= 0 or n > 10:
        return False
    for i in range(n):
        if p[i] < 48 or p[i] > 57:
            return False
        v = v * 10 + (p[i] - 48)
    if v > _I32_MAX:
        return False
    out[0] = <int32_t>v
    return True


cdef inline bint _plain_topic(const unsigned char *p, int32_t n) noexcept nogil:
    cdef int32_t i
    if n <= 0 or n > MAX_V1_TOPIC:
        return False
    for i in range(n):
        if not _TOPIC_OK[p[i]]:
            return False
    return True


@cython.final
cdef class SlotWalk:
    """``SlotWalk(timer_log_file_size, precision_ms)``: the compiled dequeue of one timer store. ``walk(...)``
    reads a slot's units; ``deliver(...)`` delivers a run of them; ``unit(i)`` and ``delete_offsets()`` are what
    Python needs of them (see the module docstring)."""

    def __cinit__(self):
        self.plans = <Plan *>malloc(CHUNK_UNITS * sizeof(Plan))
        if self.plans == NULL:
            raise MemoryError()

    def __init__(self, long long file_size, long long precision_ms):
        if file_size < TL_UNIT_SIZE or precision_ms <= 0:
            raise ValueError("timer log file size %d, precision %d ms" % (file_size, precision_ms))
        self.file_size = file_size
        self.precision_ms = precision_ms
        self.cells = RecentCells()

    def __dealloc__(self):
        free(self.units)
        free(self.plans)

    @property
    def count(self):
        return self.n

    cdef int _grow(self) except -1:
        cdef Py_ssize_t cap = 1024 if self.cap == 0 else 2 * self.cap
        cdef DUnit *u = <DUnit *>realloc(self.units, cap * sizeof(DUnit))
        if u == NULL:
            raise MemoryError()
        self.units = u
        self.cap = cap
        return 0

    def walk(self, list tl_files not None, long long last_pos, long long min_offset, long long end,
             long long slot_ms, long long expect=0):
        """Walk the list of the slot of ``slot_ms`` from ``last_pos`` in the timer log whose files are
        ``tl_files`` (written from ``min_offset`` to ``end``): the number of its units (kept oldest first), or -1
        when a unit or link does not check out. ``expect``: about how many units the slot holds (its count): a
        walk of ``WALK_NOGIL`` units or more runs without the GIL (a shorter one keeps it: under a thread that
        keeps the GIL busy, taking it back costs up to a switch interval, 5 ms, more than the walk)."""
        cdef Py_ssize_t nf = PyList_GET_SIZE(tl_files), j, r
        cdef MappedFile f
        cdef const unsigned char **bases = NULL
        cdef int64_t *froms = NULL
        cdef int64_t *limits = NULL
        cdef list held = []
        self.n = 0
        self.deletes = 0
        # room for every unit the log holds, capped by the walk's own bound (grown as needed below that)
        while self.cap < min(max(0, (end - min_offset) // TL_UNIT_SIZE + 1), 1 << 16):
            self._grow()
        bases = <const unsigned char **>malloc((nf + 1) * sizeof(void *))
        froms = <int64_t *>malloc((nf + 1) * sizeof(int64_t))
        limits = <int64_t *>malloc((nf + 1) * sizeof(int64_t))
        try:
            if bases == NULL or froms == NULL or limits == NULL:
                raise MemoryError()
            for j in range(nf):
                f = <MappedFile>PyList_GET_ITEM(tl_files, j)
                froms[j] = f.file_from_offset
                if f.base != NULL and f.file_size == self.file_size and f.c_hold():
                    held.append(f)
                    bases[j] = f.base
                    limits[j] = f.read_position_acquire()
                else:
                    bases[j] = NULL
                    limits[j] = 0
            while True:
                if expect >= WALK_NOGIL:
                    with nogil:
                        r = self._walk(bases, froms, limits, nf, last_pos, min_offset, end,
                                       _floor_div(slot_ms, self.precision_ms))
                else:
                    r = self._walk(bases, froms, limits, nf, last_pos, min_offset, end,
                                   _floor_div(slot_ms, self.precision_ms))
                if r != -2:
                    return r
                self._grow()                    # -2: full, walked again with more room
        finally:
            for f in held:
                f.c_release()
            free(bases)
            free(froms)
            free(limits)

    cdef Py_ssize_t _walk(self, const unsigned char **bases, const int64_t *froms, const int64_t *limits,
                          Py_ssize_t nf, int64_t last_pos, int64_t min_offset, int64_t end,
                          int64_t want) noexcept nogil:
        """The walk of ``walk``: the unit count, -1 for damage, -2 when the array is full."""
        cdef int64_t pos = last_pos, steps, rel, prev, write, phy, delayed
        cdef int32_t size, magic, delay, msize
        cdef Py_ssize_t j, n = 0, a, b
        cdef const unsigned char *u
        cdef DUnit t
        self.n = 0
        self.deletes = 0
        if last_pos == -1:
            return 0
        if last_pos >= end or nf == 0:
            return -1
        steps = (end - min_offset) // TL_UNIT_SIZE + 1
        while pos != -1:
            if pos < -1:
                return -1
            if pos < min_offset:
                break                            # a cleaned head ends the list
            if steps <= 0:
                return -1
            steps -= 1
            j = <Py_ssize_t>((pos - froms[0]) // self.file_size)
            if j < 0 or j >= nf or not froms[j] <= pos < froms[j] + self.file_size or bases[j] == NULL:
                return -1
            rel = pos - froms[j]
            if rel % TL_UNIT_SIZE != 0 or rel + TL_UNIT_SIZE > limits[j]:
                return -1
            u = bases[j] + rel
            size = get_i32(u)
            prev = get_i64(u + 4)
            magic = get_i32(u + 12)
            write = get_i64(u + 16)
            delay = get_i32(u + 24)
            phy = get_i64(u + 28)
            msize = get_i32(u + 36)
            if size != TL_UNIT_SIZE or (magic | 0xF) != 0xF or not magic & T_MAGIC_DEFAULT:
                return -1
            if prev != -1 and not 0 <= prev < pos:
                return -1
            if msize <= 0:
                return -1
            if write > (<int64_t>0x7FFFFFFFFFFFFFFF) - _DELAY_MAX or write < -(<int64_t>0x7FFFFFFFFFFFFFFF) + _DELAY_MAX:
                return -1
            delayed = write + delay
            if _floor_div(delayed, self.precision_ms) != want:
                return -1
            if n == self.cap:
                return -2
            self.units[n].phy = phy
            self.units[n].write_ms = write
            self.units[n].size = msize
            self.units[n].magic = magic
            if magic & T_MAGIC_DELETE and not magic & T_MAGIC_ROLL:
                self.deletes += 1
            n += 1
            pos = prev
        # oldest first, as they were enqueued
        a = 0
        b = n - 1
        while a < b:
            t = self.units[a]
            self.units[a] = self.units[b]
            self.units[b] = t
            a += 1
            b -= 1
        self.n = n
        return n

    def unit(self, Py_ssize_t i):
        """``(commit-log offset, size, magic, write time)`` of unit ``i`` of the walk (oldest first)."""
        if not 0 <= i < self.n:
            raise IndexError(i)
        return self.units[i].phy, self.units[i].size, self.units[i].magic, self.units[i].write_ms

    def delete_offsets(self):
        """The commit-log offsets of the walk's delete markers (MAGIC_DELETE without MAGIC_ROLL)."""
        cdef Py_ssize_t i
        cdef list out = []
        for i in range(self.n):
            if self.units[i].magic & T_MAGIC_DELETE and not self.units[i].magic & T_MAGIC_ROLL:
                out.append(self.units[i].phy)
        return out

    def deliver(self, CommitLogCore cl not None, list cl_files not None, long long cl_file_size, Py_ssize_t start,
                Py_ssize_t end, clock, bint check_crc, frozenset deletes):
        """Deliver the walk's units ``[start, end)`` (oldest first) into ``cl``, whose files are ``cl_files``
        (``cl_file_size`` bytes each), ``TIMER_DEQUEUE_MS`` read from ``clock()`` once a chunk (None: the C
        clock), each record's CRC checked when ``check_crc``; ``deletes``: the slot's delete keys
        (``REAL_TOPIC+UNIQ_KEY`` as UTF-8 bytes), None when it has none. Returns ``(units consumed, why it stopped,
        messages put)``: ``END`` (short of ``end`` once ``RUN_BYTES`` of deliveries were put: the caller calls
        again), or ``PYTHON`` for the unit after those consumed."""
        cdef Py_ssize_t i = start, stop, k, w
        cdef int why = STOP_END, plan_why
        cdef int64_t phy, rp, deq_ms
        cdef int32_t deq_len
        cdef unsigned char deq[24]
        cdef MappedFile f
        cdef Plan *pl
        cdef bytes key
        cdef Py_ssize_t put = 0
        cdef int64_t put_bytes = 0
        if cl_file_size <= 0 or not 0 <= start <= end <= self.n:
            raise ValueError("units [%d, %d) of %d" % (start, end, self.n))
        while i < end:
            # the delete markers are skipped, a rolled unit goes through Python
            if self.units[i].magic & T_MAGIC_DELETE and not self.units[i].magic & T_MAGIC_ROLL:
                i += 1
                continue
            if self.units[i].magic & T_MAGIC_ROLL or not cl.writeable:
                why = STOP_PYTHON
                break
            phy = self.units[i].phy
            f = find_file(cl_files, cl_file_size, phy)
            if f is None or f.base == NULL or not f.c_hold():
                why = STOP_PYTHON
                break
            try:
                deq_ms = now_ms() if clock is None else <int64_t>clock()
                deq_len = fmt_int(<char *>deq, deq_ms)
                rp = f.read_position_acquire()
                # with the GIL: a chunk is planned in tens of microseconds, and taking the GIL back from a thread
                # that keeps it busy costs up to a switch interval (5 ms)
                stop = self._plan(i, end, f.base, f.file_from_offset, cl_file_size, rp, check_crc, deq_len,
                                  cl.max_message_size, cl.store_flag, &plan_why)
                if deletes:
                    # a cancelled message goes through Python, which drops it
                    for k in range(self.n_plans):
                        pl = &self.plans[k]
                        if pl.pi.uniq_pos < 0:
                            continue
                        key = (PyBytes_FromStringAndSize(<const char *>pl.rec + pl.v.props_pos + pl.pi.topic_pos,
                                                         pl.pi.topic_len) + b"+"
                               + PyBytes_FromStringAndSize(<const char *>pl.rec + pl.v.props_pos + pl.pi.uniq_pos,
                                                           pl.pi.uniq_len))
                        if key in deletes:
                            self.n_plans = k
                            stop = pl.idx
                            plan_why = STOP_PYTHON
                            break
                self.put_bytes = 0
                w = 0
                while w < self.n_plans:
                    k = self._put(cl, deq, deq_len, w)
                    w += k
                    if k == 0 or cl.shared is None:
                        break           # several writers: a hold a queue (the rest in the holds after it)
                put += w
                if w < self.n_plans:
                    i = self.plans[w].idx
                    why = STOP_PYTHON
                    break
                i = stop
                if plan_why == STOP_PYTHON:
                    why = STOP_PYTHON
                    break
                put_bytes += self.put_bytes
                if put_bytes >= RUN_BYTES:
                    break                               # END with units left: Python calls again
            finally:
                f.c_release()
        return i - start, why, put

    cdef Py_ssize_t _plan(self, Py_ssize_t i, Py_ssize_t end, const unsigned char *base, int64_t cl_from,
                          int64_t cl_file_size, int64_t cl_read, bint check_crc, int32_t deq_len,
                          int64_t max_body, int32_t store_flag, int *why) noexcept nogil:
        """Plan the deliveries of the units from ``i`` while their records lie in the commit-log file at ``base``
        (``cl_from``, readable below ``cl_read``) and the chunk has room: ``plans[:n_plans]``, delete markers
        passed over. Returns the index of the first unit not planned, ``why[0]`` why (``STOP_END``: ``end``
        reached)."""
        cdef DUnit *u
        cdef Plan *pl
        cdef int64_t rel, bytes_ = 0
        cdef int32_t r, plen
        cdef unsigned char enq[24]
        cdef int32_t enq_len
        cdef const unsigned char *rec
        cdef const unsigned char *props
        cdef int32_t port
        self.n_plans = 0
        why[0] = STOP_END
        while i < end:
            u = &self.units[i]
            if u.magic & T_MAGIC_DELETE and not u.magic & T_MAGIC_ROLL:
                i += 1
                continue
            if self.n_plans == CHUNK_UNITS or bytes_ >= CHUNK_BYTES:
                why[0] = _FULL
                return i
            if u.magic & T_MAGIC_ROLL or u.phy < 0:
                why[0] = STOP_PYTHON
                return i
            if u.phy < cl_from or u.phy >= cl_from + cl_file_size:
                why[0] = _NEXT_FILE
                return i
            rel = u.phy - cl_from
            if rel >= cl_read:
                why[0] = STOP_PYTHON
                return i
            pl = &self.plans[self.n_plans]
            rec = base + rel
            r = check_record(rec, cl_read - rel, check_crc, &pl.v)
            if r <= 0 or r != u.size or pl.v.phy_offset != u.phy:
                why[0] = STOP_PYTHON
                return i
            # the Message convert builds: its sys flag, born host and body as it checks them
            if (pl.v.sys_flag < 0 or pl.v.sys_flag & BORNHOST_V6_FLAG or pl.v.born_host_len != IPV4_HOST_SIZE
                    or not enters_queue(pl.v.sys_flag) or pl.v.body_len > max_body):
                why[0] = STOP_PYTHON
                return i
            port = get_i32(rec + pl.v.born_host_pos + IPV4_HOST_SIZE - 4)
            if port < 0 or port > 65535:
                why[0] = STOP_PYTHON
                return i
            props = rec + pl.v.props_pos
            enq_len = fmt_int(<char *>enq, u.write_ms)
            plen = _props_pass(props, pl.v.props_len, &pl.pi, NULL if u.write_ms == -1 else enq, enq_len,
                               enq, deq_len, NULL)
            if (plen < 0 or plen > MAX_PROPERTIES_BYTES or not pl.pi.out_ms or pl.pi.topic_pos < 0
                    or pl.pi.qid_pos < 0 or not _plain_topic(props + pl.pi.topic_pos, pl.pi.topic_len)
                    or not _qid(props + pl.pi.qid_pos, pl.pi.qid_len, &pl.qid)
                    or not _utf8_ok(props, pl.v.props_len)):
                why[0] = STOP_PYTHON
                return i
            pl.idx = i
            pl.rec = rec
            pl.props_len = plen
            pl.sys_flag = (pl.v.sys_flag & ~(BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG)) | store_flag
            pl.total = cal_msg_length(1, pl.sys_flag, pl.v.body_len, pl.pi.topic_len, plen)
            if pl.total + END_FILE_MIN_BLANK_LENGTH > cl_file_size:
                why[0] = STOP_PYTHON
                return i
            bytes_ += pl.total
            self.n_plans += 1
            i += 1
        return i

    cdef Py_ssize_t _put(self, CommitLogCore cl, const unsigned char *deq, int32_t deq_len,
                         Py_ssize_t first) except -1:
        """Put the chunk's planned deliveries from ``plans[first]`` as the store's put would, under the put lock: how
        many were put (a prefix; the rest go through Python: a store that takes no puts, a page cache busy, no
        file). A log several writers share: the deliveries of one queue at most, in one hold of their append lock,
        each taking its offset from the queue's slot in their table (``_take_offset``: one offset noted, which a
        repair gives back if this process dies before the hold publishes), so the caller calls again for the
        next queue's."""
        cdef Py_ssize_t k, w = 0
        cdef QueueCell held = None
        cdef int64_t ts, t0, pos, phy, qoff, acc = 0
        cdef int32_t shl = IPV6_HOST_SIZE if cl.store_flag else IPV4_HOST_SIZE
        cdef Plan *pl
        cdef MappedFile mf = None, last = None
        cdef QueueCell cell
        cdef unsigned char *dst
        cdef unsigned char *q
        cdef const unsigned char *rec
        cdef const unsigned char *host = <const unsigned char *>PyBytes_AS_STRING(cl.store_host_b)
        cdef unsigned char enq[24]
        cdef int32_t enq_len, crc
        cdef RecordView nv
        if first >= self.n_plans or not cl.writeable or cl._room_refusal(self.plans[first].total) != REFUSE_NONE:
            return 0
        t0 = mono_coarse_ns()
        cl.put_lock.lock()
        try:
            if cl.shared is not None:
                cl._shared_enter()
            ts = cl._now()
            cl.begin_time_in_lock = ts
            for k in range(first, self.n_plans):
                pl = &self.plans[k]
                rec = pl.rec
                cell = self.cells.get(cl, rec + pl.v.props_pos + pl.pi.topic_pos, pl.pi.topic_len, pl.qid)
                if cl.shared is not None:
                    if held is None:
                        held = cell
                        cl._take_offset(cell)       # before anything is reserved
                    elif cell is not held:
                        break
                mf = cl._file_with_room(pl.total)
                if mf is None:
                    break
                qoff = cell.next_offset
                pos = mf.wrote
                phy = mf.file_from_offset + pos
                dst = mf.write_base + pos
                put_i32(dst + AT_MAGIC, MESSAGE_MAGIC_CODE)
                put_i32(dst + AT_QUEUEID, pl.qid)
                put_i32(dst + AT_FLAG, pl.v.flag)
                put_i64(dst + AT_QUEUEOFFSET, qoff)
                put_i64(dst + AT_PHYSICALOFFSET, phy)
                put_i32(dst + AT_SYSFLAG, pl.sys_flag)
                put_i64(dst + AT_BORNTIMESTAMP, pl.v.born_ts)
                memcpy(dst + AT_BORNHOST, rec + pl.v.born_host_pos, IPV4_HOST_SIZE)
                q = dst + AT_BORNHOST + IPV4_HOST_SIZE
                put_i64(q, ts)
                q += 8
                memcpy(q, host, shl)
                q += shl
                put_i32(q, pl.v.reconsume_times)
                q += 4
                put_i64(q, 0)                                    # a Message's prepared transaction offset
                q += 8
                put_i32(q, pl.v.body_len)
                q += 4
                crc = <int32_t>(ps_copy_crc32(q, rec + pl.v.body_pos, <size_t>pl.v.body_len) & 0x7FFFFFFF)
                put_i32(dst + AT_BODYCRC, crc)
                q += pl.v.body_len
                nv.topic_pos = <int32_t>(q + 1 - dst)
                nv.topic_len = pl.pi.topic_len
                q[0] = <unsigned char>pl.pi.topic_len
                memcpy(q + 1, rec + pl.v.props_pos + pl.pi.topic_pos, pl.pi.topic_len)
                q += 1 + pl.pi.topic_len
                put_i16(q, <int16_t>pl.props_len)
                q += 2
                nv.props_pos = <int32_t>(q - dst)
                nv.props_len = pl.props_len
                enq_len = fmt_int(<char *>enq, self.units[pl.idx].write_ms)
                _props_pass(rec + pl.v.props_pos, pl.v.props_len, &pl.pi,
                            NULL if self.units[pl.idx].write_ms == -1 else enq, enq_len, deq, deq_len, q)
                store_i32_release(dst, pl.total)
                mf.publish(pos + pl.total)
                mf.store_timestamp = ts
                cell.next_offset = qoff + 1
                last = mf
                acc += pl.total
                w += 1
                if cl.dispatcher is not None:
                    nv.total_size = pl.total
                    nv.store_ts = ts
                    nv.sys_flag = pl.sys_flag
                    cl.dispatcher.dispatch_record(cell, dst, &nv, phy, qoff)
        finally:
            cl._exit()
        self.put_bytes = acc
        if w > 0:
            cl._finish(t0, acc, last)
            cl.put_times_total += w - 1              # the put path counts one put per message
        return w
