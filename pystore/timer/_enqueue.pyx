# cython: language_level=3
"""The timer store's enqueue in C: RocketMQ ``TimerMessageStore.doEnqueue`` over a run of the units of the timer
queue (``rmq_sys_wheel_timer`` queue 0), and the pending count read from the wheel's slots.

``TimerEnqueue.run`` takes the units ``[start, end)`` of one (held) file of the timer queue and, unit by unit:
skips a filler; finds the record the unit names in the commit-log files (the file that holds its offset, held
while read; the record checked with ``check_record``: whole, of the unit's size, naming its own offset, its CRC
too when the store checks CRCs on reads); reads ``TIMER_OUT_MS`` (plain decimal digits), ``REAL_TOPIC`` and
whether ``TIMER_DEL_UNIQKEY`` is set from its properties (the one splitter, ``_props.next_prop``: the last of a
repeated name wins, as in the dict Python decodes); computes the magic and the (rolled) delayed time as
``TimerMessageStore.do_enqueue`` does; writes the 52-byte unit at the timer log's write position (through the
last file's mapping, its blocks reserved first) and links it into its wheel slot (the wheel's in-memory copy,
its 4 KiB page marked dirty for the wheel's flush). Nothing per unit touches Python: the units of a run whose
records lie in one commit-log file are enqueued without the GIL.

A run stops, with the units consumed so far, when the next unit

* needs the next timer-log file (``STOP_ROLL``: there is none yet, or a unit and the blank after it no longer fit
  the last one): Python rolls the log as ``TimerLog.append`` does and runs again;
* is anything else than the common case (``STOP_PYTHON``): a message due in a slot the dequeue has begun to read
  (before ``read_ms``: Python delivers it at once; one due before the write time but in a slot not begun is linked
  into that slot, its delay negative), a unit or
  record that does not check out, a ``TIMER_OUT_MS`` that is missing or not plain digits, a wheel slot whose
  ``lastPos`` is not before the log's end, a count that would overflow, blocks that cannot be reserved. Python's
  own per-unit path takes that one unit, with today's logging, skipping and errors, then runs again.

So every unit's outcome is the one Python's path gives, byte for byte (tests/test_timer_enqueue.py).

The caller holds the timer store's lock, the timer log's append lock and the wheel's lock for a run (the flush
waits: the wheel never points at a unit the log has not flushed), and holds the queue file.
"""

cimport cython
from libc.stdint cimport int32_t, int64_t
from libc.string cimport memcmp

from pystore.format._bytes cimport get_i32, get_i64, put_i32, put_i64
from pystore.format._codec cimport CQ_FILLER_SIZE, CQ_STORE_UNIT_SIZE, RecordView, check_record
from pystore.format._jstring cimport java_hash_utf8
from pystore.format._props cimport next_prop
from pystore.log._files cimport find_file
from pystore.log._mapped_file cimport MappedFile

ROLL = STOP_ROLL
PYTHON = STOP_PYTHON
END = STOP_END

cdef int64_t _I32_MAX = 2147483647
cdef int64_t _I32_MIN = -2147483648


cdef inline bint _name_is(const unsigned char *p, Py_ssize_t *item, const char *name, Py_ssize_t n) noexcept nogil:
    return item[1] == n and memcmp(p + item[0], name, n) == 0


cdef inline bint _parse_ms(const unsigned char *p, Py_ssize_t n, int64_t *out) noexcept nogil:
    """``TIMER_OUT_MS`` as plain decimal digits, an optional minus first, at most 18 of them (no overflow);
    False for anything else (Python's ``int`` then judges it)."""
    cdef Py_ssize_t i = 0
    cdef int64_t v = 0
    cdef bint neg = False
    if n > 0 and p[0] == 45:           # '-'
        neg = True
        i = 1
    if n - i <= 0 or n - i > 18:
        return False
    while i < n:
        if p[i] < 48 or p[i] > 57:
            return False
        v = v * 10 + (p[i] - 48)
        i += 1
    out[0] = -v if neg else v
    return True


cdef bint timer_props(const unsigned char *p, Py_ssize_t n, TimerProps *t) noexcept nogil:
    """Fill ``t`` from the properties string ``p[:n]``; False when ``TIMER_OUT_MS`` is missing or not plain
    digits."""
    cdef Py_ssize_t at = 0
    cdef Py_ssize_t item[4]
    cdef Py_ssize_t out_pos = -1, out_len = 0
    t.topic_pos = -1
    t.topic_len = 0
    t.delete = False
    while next_prop(p, n, &at, item):
        if _name_is(p, item, "TIMER_OUT_MS", 12):
            out_pos = item[2]
            out_len = item[3]
        elif _name_is(p, item, "REAL_TOPIC", 10):
            t.topic_pos = <int32_t>item[2]
            t.topic_len = <int32_t>item[3]
        elif _name_is(p, item, "TIMER_DEL_UNIQKEY", 17):
            t.delete = True
    return out_pos >= 0 and _parse_ms(p + out_pos, out_len, &t.out_ms)


@cython.final
cdef class TimerEnqueue:
    """``TimerEnqueue(wheel_slots, wheel_dirty, slots_total, precision_ms, roll_window_slots)``: the
    compiled enqueue of one timer store, over its wheel's in-memory slots and dirty map (``TimerWheel.raw`` and
    ``TimerWheel.dirty_map``). ``run(...)`` enqueues a run of units (see the module docstring)."""

    def __init__(self, bytearray wheel_slots not None, bytearray wheel_dirty not None, long long slots_total,
                 long long precision_ms, long long roll_window_slots):
        if slots_total <= 0 or precision_ms <= 0 or roll_window_slots < 2:
            raise ValueError("slots_total %d, precision_ms %d, roll_window_slots %d"
                             % (slots_total, precision_ms, roll_window_slots))
        if len(wheel_slots) != slots_total * 2 * WHEEL_SLOT_SIZE:
            raise ValueError("a wheel of %d bytes for %d slots" % (len(wheel_slots), slots_total))
        if len(wheel_dirty) < ((len(wheel_slots) - 1) >> DIRTY_PAGE_SHIFT) + 1:
            raise ValueError("a dirty map of %d bytes for a wheel of %d" % (len(wheel_dirty), len(wheel_slots)))
        self.wheel = wheel_slots
        self.dirty = wheel_dirty
        self.slots_total = slots_total
        self.precision_ms = precision_ms
        self.roll_window_slots = roll_window_slots
        self.tl = None

    def run(self, MappedFile cq_file not None, long long start, long long end, list cl_files not None,
            long long cl_file_size, MappedFile tl_file, long long write_ms, long long read_ms, bint check_crc):
        """Enqueue the timer queue's units ``[start, end)`` of ``cq_file`` (held by the caller), whose records
        are in the commit-log files ``cl_files`` (``cl_file_size`` bytes each), into the timer log whose last
        file is ``tl_file`` (None when it has none), at the wheel's write time ``write_ms``, with the slots from
        ``read_ms`` on not begun by the dequeue (a message due before it goes through Python), each record's CRC
        checked when ``check_crc`` (``check_crc_on_read``, as ``look_message_by_offset`` reads). Returns
        ``(units consumed, why it stopped, the latest delayed time written or -1)``: ``END``, ``ROLL`` or
        ``PYTHON`` (the unit after those consumed)."""
        cdef int64_t pos = start, done = 0, phy, rp
        cdef int why = STOP_END
        cdef MappedFile held = None, f
        cdef const unsigned char *cq = cq_file.base
        if cq == NULL:
            raise ValueError("%s is not mapped" % cq_file.file_name)
        if start < 0 or end > cq_file.file_size or start > end or (end - start) % CQ_STORE_UNIT_SIZE:
            raise ValueError("units [%d, %d) of %s" % (start, end, cq_file.file_name))
        if cl_file_size <= 0:
            raise ValueError("cl_file_size must be positive")
        self.tl = tl_file
        self.tl_writable = tl_file is not None and tl_file.base != NULL and not tl_file.read_only
        self.write_ms = write_ms
        self.read_ms = read_ms
        self.check_crc = check_crc
        self.hi = -1
        try:
            while pos < end:
                phy = get_i64(cq + pos)
                if get_i32(cq + pos + 8) == CQ_FILLER_SIZE:
                    pos += CQ_STORE_UNIT_SIZE
                    done += 1
                    continue
                if phy < 0:
                    why = STOP_PYTHON
                    break
                if held is None or not held.file_from_offset <= phy < held.file_from_offset + cl_file_size:
                    if held is not None:
                        held.c_release()
                        held = None
                    f = find_file(cl_files, cl_file_size, phy)
                    if f is None or f.base == NULL or not f.c_hold():
                        why = STOP_PYTHON
                        break
                    held = f
                rp = held.read_position_acquire()
                with nogil:
                    why = self._run(cq, &pos, end, &done, held.base, held.file_from_offset, cl_file_size, rp)
                if why != _NEXT_FILE:
                    break
                why = STOP_END
        finally:
            if held is not None:
                held.c_release()
            self.tl = None
        return done, why, self.hi

    cdef int _run(self, const unsigned char *cq, int64_t *pos, int64_t end, int64_t *done,
                  const unsigned char *cl_base, int64_t cl_from, int64_t cl_file_size,
                  int64_t cl_read) noexcept nogil:
        """The units from ``pos[0]`` while their records lie in the commit-log file at ``cl_base`` (``cl_from``,
        readable below ``cl_read``): ``pos`` and ``done`` move past each unit enqueued. A stop reason, or
        ``_NEXT_FILE``."""
        cdef int64_t phy, rel
        cdef int32_t size, r
        cdef int why
        cdef RecordView v
        while pos[0] < end:
            phy = get_i64(cq + pos[0])
            size = get_i32(cq + pos[0] + 8)
            if size != CQ_FILLER_SIZE:
                if phy < 0 or size <= 0:
                    return STOP_PYTHON
                if phy < cl_from or phy >= cl_from + cl_file_size:
                    return _NEXT_FILE
                rel = phy - cl_from
                if rel >= cl_read:
                    return STOP_PYTHON
                r = check_record(cl_base + rel, cl_read - rel, self.check_crc, &v)
                if r <= 0 or r != size or v.phy_offset != phy:
                    return STOP_PYTHON
                why = self._unit(cl_base + rel, &v, phy, size)
                if why != STOP_END:
                    return why
            pos[0] += CQ_STORE_UNIT_SIZE
            done[0] += 1
        return STOP_END

    cdef int _unit(self, const unsigned char *rec, RecordView *v, int64_t phy, int32_t size) noexcept nogil:
        """``doEnqueue`` of one checked record: ``STOP_END`` once its unit is written and linked, else why not
        (nothing written then)."""
        cdef TimerProps t
        cdef int64_t write = self.write_ms, p = self.precision_ms, window, delayed, tick, at, pos, wrote
        cdef int64_t first, last, num
        cdef int32_t magic = T_MAGIC_DEFAULT, slot_magic, topic_hash = 0
        cdef unsigned char *w
        cdef unsigned char *u
        if not timer_props(rec + v.props_pos, v.props_len, &t):
            return STOP_PYTHON
        delayed = t.out_ms
        if delayed < self.read_ms:
            return STOP_PYTHON                     # its slot was read (or is being read): Python delivers it
        window = self.roll_window_slots * p
        if delayed - write >= window:
            magic |= T_MAGIC_ROLL
            # give it enough time before the next roll (RocketMQ's halving)
            if delayed - write - window < self.roll_window_slots // 3 * p:
                delayed = write + self.roll_window_slots // 2 * p
            else:
                delayed = write + window
        if delayed - write > _I32_MAX or delayed - write < _I32_MIN or delayed < 0:
            return STOP_PYTHON                     # Python refuses both (the unit's delay field, the slot index)
        if t.delete:
            magic |= T_MAGIC_DELETE
        if t.topic_pos >= 0:
            topic_hash = <int32_t>java_hash_utf8(rec + v.props_pos + t.topic_pos, t.topic_len)
        # the timer log's write position: a unit and the blank after it must fit the last file
        if self.tl is None or self.tl.file_size - self.tl.wrote < TL_UNIT_SIZE + TL_MIN_BLANK_LEN:
            return STOP_ROLL
        if not self.tl_writable:
            return STOP_PYTHON                     # Python's append raises why
        wrote = self.tl.wrote
        pos = self.tl.file_from_offset + wrote
        # the wheel slot of ``delayed`` (getSlot: a slot holding another time reads as empty)
        tick = delayed // p
        at = tick % (2 * self.slots_total) * WHEEL_SLOT_SIZE
        w = &self.wheel[at]
        if get_i64(w) == tick:
            first = get_i64(w + 8)
            last = get_i64(w + 16)
            num = get_i32(w + 24)
            slot_magic = get_i32(w + 28)
        else:
            first = last = -1
            num = 0
            slot_magic = 0
        if last != -1 and not 0 <= last < pos:
            return STOP_PYTHON                     # TimerLog.append refuses a prevPos not before the unit
        num = num - 1 if t.delete else num + 1
        if num > _I32_MAX or num < _I32_MIN:
            return STOP_PYTHON
        if self.tl.write_base == self.tl.base and self.tl.reserve(wrote, wrote + TL_UNIT_SIZE) != 0:
            return STOP_PYTHON                     # Python's append raises the OSError
        u = self.tl.write_base + wrote
        put_i32(u, TL_UNIT_SIZE)
        put_i64(u + 4, last)
        put_i32(u + 12, magic)
        put_i64(u + 16, write)
        put_i32(u + 24, <int32_t>(delayed - write))
        put_i64(u + 28, phy)
        put_i32(u + 36, size)
        put_i32(u + 40, topic_hash)
        put_i64(u + 44, 0)
        self.tl.publish(wrote + TL_UNIT_SIZE)
        # putSlot(delayed, first == -1 ? pos : first, pos, num, magic)
        put_i64(w, tick)
        put_i64(w + 8, pos if first == -1 else first)
        put_i64(w + 16, pos)
        put_i32(w + 24, <int32_t>num)
        put_i32(w + 28, slot_magic)
        self.dirty[at >> DIRTY_PAGE_SHIFT] = 1
        if delayed > self.hi:
            self.hi = delayed
        return STOP_END


def wheel_pending(const unsigned char[::1] wheel not None, long long slots_total, long long precision_ms,
                  long long from_ms, long long to_ms):
    """``(units, first)`` of the wheel's slots from ``from_ms`` to ``to_ms`` (both included, at most two turns):
    the sum of the counts of the slots that hold their own time (``getSlot`` finds them; a delete marker counts
    -1), and the time of the first of them whose count is positive (-1 if none). Without the GIL."""
    cdef int64_t n = 2 * slots_total, tick, last, total = 0, first = -1, at, num
    cdef const unsigned char *w
    if slots_total <= 0 or precision_ms <= 0 or wheel.shape[0] != n * WHEEL_SLOT_SIZE:
        raise ValueError("a wheel of %d bytes for %d slots" % (wheel.shape[0], slots_total))
    if from_ms < 0 or to_ms < from_ms:
        return 0, -1
    tick = from_ms // precision_ms
    last = to_ms // precision_ms
    if last - tick >= n:
        last = tick + n - 1
    with nogil:
        while tick <= last:
            at = tick % n * WHEEL_SLOT_SIZE
            w = &wheel[at]
            if get_i64(w) == tick:
                num = get_i32(w + 24)
                total += num
                if num > 0 and first < 0:
                    first = tick * precision_ms
            tick += 1
    return total, first
