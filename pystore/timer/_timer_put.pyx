# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The put side of RocketMQ 5's timer messages, compiled: the commit log's ``timer_rewrite`` hook without a call into
Python (docs/architecture.md, "Python on the hot paths").

:class:`TimerPut` applies the rules of :mod:`pystore.timer.timer_put` (its module docstring states each, and where
pystore is stricter than RocketMQ) to a message with a timer property, in C: ``CommitLogCore._put`` calls it through
the C pointer this module registers when it is imported (``set_timer_rewrite``: the ``log`` package never imports
the ``timer`` one). It answers what ``TimerPutHook`` answers: the message itself, a copy bound for
``rmq_sys_wheel_timer`` queue 0 with ``TIMER_OUT_MS``, ``REAL_TOPIC``, ``REAL_QID`` added (``copy_message`` and
the properties map changed in place of the copy, then ``Message._refresh``: the same record bytes as the
``Message(...)`` the Python hook builds), a copy without its timer properties when a delay level wins, or
``(status, reason)`` (the reason in the Python hook's words, made only on a refusal).

* The value is parsed as ``Long.parseLong`` parses it (an optional sign, ASCII decimal digits, within a Java long),
  and every time computed in 128-bit integers: a delay in seconds is compared with ``timer_max_delay_sec`` before
  it is multiplied, and nothing wraps around.
* The clock: the C clock (``now_ms``) unless one was injected (tests), which is then called, as the commit log does
  for its store time.
* Flow control and the enqueue's wake-up go through a :class:`TimerPutLink`, which the timer store holds (only the
  process that runs the timer store has one; a hook without it skips both, as ``TimerPutHook`` without ``slot_num``
  and ``on_timer``): the slot's count is read from the wheel's in-memory slots (``TimerWheel.raw``, linked while
  the wheel is open, every offset bounded by the buffer's size), and a rewrite notes the put on the link's wake
  word (``_notify``'s state word, in this process's memory), on which the enqueue service waits.

Thread-safety: a ``TimerPut`` is called from any put thread, with the GIL held; it changes nothing of its own. The
link's wheel is set and cleared with the GIL held too.
"""

cimport cython
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE
from cpython.dict cimport PyDict_Contains, PyDict_DelItem, PyDict_GetItem, PyDict_SetItem
from cpython.unicode cimport PyUnicode_DecodeASCII
from libc.stdint cimport int64_t, uint32_t, uint64_t

from pystore.format._bytes cimport get_i32, get_i64, load_i64_acquire, now_ms, store_i64_release
from pystore.log._commitlog cimport set_timer_rewrite
from pystore.message._message cimport Message, copy_message
from pystore.system._notify cimport ps_notify, ps_register, ps_unregister, ps_wait

from pystore.status import PutMessageStatus

cdef object ST_NOT_ENABLE = PutMessageStatus.WHEEL_TIMER_NOT_ENABLE
cdef object ST_ILLEGAL = PutMessageStatus.WHEEL_TIMER_MSG_ILLEGAL
cdef object ST_FLOW_CONTROL = PutMessageStatus.WHEEL_TIMER_FLOW_CONTROL

cdef str DELIVER_MS = "TIMER_DELIVER_MS"
cdef str DELAY_SEC = "TIMER_DELAY_SEC"
cdef str DELAY_MS = "TIMER_DELAY_MS"
cdef tuple KINDS = (DELAY_SEC, DELAY_MS, DELIVER_MS)     # RocketMQ's order of precedence
cdef str TIMER_TOPIC = "rmq_sys_wheel_timer"
cdef str TIMER_OUT_MS = "TIMER_OUT_MS"
cdef str TIMER_DEL_UNIQKEY = "TIMER_DEL_UNIQKEY"
cdef str REAL_TOPIC = "REAL_TOPIC"
cdef str REAL_QID = "REAL_QID"

cdef enum:
    SLOT_SIZE = 32          # docs/format.md §10: timeSecs i64 | firstPos i64 | lastPos i64 | num i32 | magic i32
    KIND_SEC = 0
    KIND_MS = 1
    KIND_DELIVER = 2

cdef i128 LONG_MAX_128 = <i128>9223372036854775807


cdef bint parse_java_long(str s, int64_t *out) noexcept:
    """``Long.parseLong``: an optional ``+`` or ``-``, then one or more ASCII decimal digits, within a Java long
    (leading zeros are fine); False for anything else."""
    cdef Py_ssize_t n = len(s), i = 0
    cdef uint32_t c
    cdef bint neg = False
    cdef uint64_t v = 0, limit, d
    if n == 0:
        return False
    c = s[0]
    if c == 43 or c == 45:          # '+', '-'
        neg = c == 45
        i = 1
        if n == 1:
            return False
    limit = (<uint64_t>1 << 63) if neg else ((<uint64_t>1 << 63) - 1)
    while i < n:
        c = s[i]
        if c < 48 or c > 57:            # not an ASCII decimal digit
            return False
        d = <uint64_t>c - 48
        if v > (limit - d) // 10:
            return False
        v = v * 10 + d
        i += 1
    out[0] = <int64_t>(<uint64_t>0 - v) if neg else <int64_t>v
    return True


def java_long(str s not None):
    """``parse_java_long`` for tests: the value, or None when ``Long.parseLong`` would fail."""
    cdef int64_t v = 0
    return v if parse_java_long(s, &v) else None


cdef str _text_i128(i128 v):
    cdef char buf[48]
    cdef int n = fmt_i128(buf, v)
    return PyUnicode_DecodeASCII(buf, n, NULL)


@cython.final
cdef class TimerPutLink:
    """What the timer store shares with the compiled put hook: the wheel's in-memory slots while they are open
    (``set_wheel``; flow control reads a slot's count there) and the enqueue's wake word. A rewritten put sets
    ``expecting`` and wakes a ``wait`` (only the first put since the last wait notifies the word)."""

    def __cinit__(self):
        self.wheel = None
        self.slots2 = 0
        self.wheel_precision = 0

    def set_wheel(self, object slots, long long slots_total, long long precision_ms):
        """Link the wheel's slots (``TimerWheel.raw``: ``2 * slots_total`` slots of 32 bytes), or unlink them
        (``slots`` None: every slot count reads 0, as ``TimerMessageStore.slot_num`` without a wheel)."""
        if slots is None:
            self.wheel = None
            self.slots2 = 0
            self.wheel_precision = 0
            return
        if not isinstance(slots, bytearray):
            raise TypeError("the wheel's slots are a bytearray, got %s" % type(slots).__name__)
        if slots_total <= 0 or precision_ms <= 0:
            raise ValueError("slots_total and precision_ms must be positive: %d, %d" % (slots_total, precision_ms))
        self.wheel = <bytearray>slots
        self.slots2 = slots_total * 2
        self.wheel_precision = precision_ms

    @property
    def linked(self):
        return self.wheel is not None

    def slot_num(self, deliver_ms):
        """The unit count of the slot of ``deliver_ms`` (0 when the wheel is not linked or the slot holds another
        time), as the put hook reads it."""
        return self.num_at(<i128>(<int64_t>deliver_ms))

    cdef int64_t num_at(self, i128 deliver_ms) except? -1:
        cdef i128 tick, index
        cdef Py_ssize_t at
        cdef const unsigned char *p
        if self.wheel is None:
            return 0
        if deliver_ms < 0:
            raise ValueError("a timer slot time cannot be negative: %s" % _text_i128(deliver_ms))
        tick = floordiv_i128(deliver_ms, self.wheel_precision)
        index = mod_i128(tick, self.slots2)
        at = <Py_ssize_t>(index * SLOT_SIZE)
        if at < 0 or at + SLOT_SIZE > PyByteArray_GET_SIZE(self.wheel):
            return 0                    # a buffer shorter than its slots (never the wheel's): nothing read
        p = <const unsigned char *>PyByteArray_AS_STRING(self.wheel) + at
        if <i128>get_i64(p) != tick:
            return 0                    # another turn's slot: the empty slot
        return get_i32(p + 24)

    # -- the enqueue's wake-up ------------------------------------------------------------------------

    cdef void note_put(self) noexcept:
        self.expecting = True
        if not load_i64_acquire(&self.pending):
            store_i64_release(&self.pending, 1)
            ps_notify(&self.word, 0)

    def note(self):
        """A timer put was rewritten (``TimerEnqueuing.note_timer_put``, the Python hook's path)."""
        self.note_put()

    def wake(self):
        """End the current or next ``wait`` (the enqueue service's ``wakeup``)."""
        store_i64_release(&self.pending, 1)
        ps_notify(&self.word, 0)

    def wait(self, double timeout_ms):
        """Wait, without the GIL, up to ``timeout_ms`` for a ``note`` or ``wake`` since the last wait returned;
        whether one came."""
        cdef int64_t seen, t = <int64_t>(timeout_ms * 1e6) if timeout_ms > 0 else 0
        cdef int r = 0
        seen = ps_register(&self.word, &self.flags)
        if load_i64_acquire(&self.pending):
            if seen >= 0:
                ps_unregister(&self.word, <uint32_t>seen)
            store_i64_release(&self.pending, 0)
            return True
        if seen >= 0 and t > 0:
            with nogil:
                r = ps_wait(&self.word, <uint32_t>seen, 0, t)
        if seen >= 0:
            ps_unregister(&self.word, <uint32_t>seen)
        if seen < 0 or r == -2:
            # no futex here (or no registration): the caller's loop polls
            return self._poll(t)
        if load_i64_acquire(&self.pending):
            store_i64_release(&self.pending, 0)
            return True
        return False

    cdef bint _poll(self, int64_t t):
        import time
        time.sleep(min(t, 1000000) / 1e9)
        if load_i64_acquire(&self.pending):
            store_i64_release(&self.pending, 0)
            return True
        return False


@cython.final
cdef class TimerPut:
    """The compiled put hook: ``TimerPut(config, clock=None, link=None)``; ``clock``: the store's injected clock
    (None: the C clock), ``link``: the timer store's :class:`TimerPutLink` (None: no flow control and no wake-up,
    as in a writer process without the timer store). ``hook(msg)`` answers as ``TimerPutHook(msg)``."""

    def __init__(self, config, clock=None, TimerPutLink link=None):
        self.enabled = bool(config.timer_wheel_enable)
        self.precision_ms = int(config.timer_precision_ms)
        self.max_delay_sec = int(config.timer_max_delay_sec)
        self.congest_num = int(config.timer_congest_num_each_slot)
        if self.precision_ms <= 0:
            raise ValueError("timer_precision_ms must be positive: %d" % self.precision_ms)
        if self.max_delay_sec < 0:
            raise ValueError("timer_max_delay_sec cannot be negative: %d" % self.max_delay_sec)
        self.clock = clock
        self.link = link

    def __call__(self, Message msg not None):
        return self.rewrite(msg)

    cdef int64_t _now(self) except? -1:
        return now_ms() if self.clock is None else <int64_t>self.clock()

    cdef object rewrite(self, Message msg):
        cdef dict props = msg._props
        cdef Message t
        cdef object kind = None, raw
        cdef int nkinds = 0, k = 0, i
        cdef int64_t value = 0, now
        cdef i128 delay, deliver, max_ms, num, limit
        cdef str out_ms
        if msg._delay_level > 0:
            # checkIfTimerMessage: a delay level wins, the timer properties are cleared
            t = copy_message(msg, True)
            for i in range(3):
                if PyDict_Contains(t._props, KINDS[i]):
                    PyDict_DelItem(t._props, KINDS[i])
            t._refresh()
            return t
        if msg._topic == TIMER_TOPIC or PyDict_Contains(props, TIMER_OUT_MS):
            return msg                  # a rolled timer, or a due one on its way to its topic
        for i in range(3):
            if PyDict_Contains(props, KINDS[i]):
                if nkinds == 0:
                    kind = KINDS[i]
                    k = i
                nkinds += 1
        if not self.enabled:
            return (ST_NOT_ENABLE, "the message has a timer property (%s) but timer_wheel_enable is off"
                    % ", ".join([n for n in KINDS if n in props]))
        if nkinds != 1:
            return (ST_ILLEGAL, "the message has %s: one timer delay per message"
                    % " and ".join([n for n in KINDS if n in props]))
        raw = <object>PyDict_GetItem(props, kind)
        if not isinstance(raw, str) or not parse_java_long(<str>raw, &value):
            return (ST_ILLEGAL, "%s=%r is not a decimal integer that fits 64 bits" % (kind, raw[:40]))
        if value < 0:
            return (ST_ILLEGAL, "%s=%d is negative" % (kind, value))
        now = self._now()
        max_ms = <i128>self.max_delay_sec * 1000
        # the delay is compared with the maximum before anything is multiplied (RocketMQ #5376, #10872)
        if k == KIND_SEC:
            if value > self.max_delay_sec:
                return self._too_far(kind, value, <object>value * 1000)
            delay = <i128>value * 1000
        elif k == KIND_MS:
            delay = <i128>value
            if delay > max_ms:
                return self._too_far(kind, value, value)
        else:
            delay = <i128>value - <i128>now
            if delay > max_ms:
                return self._too_far(kind, value, <object>value - <object>now)
        deliver = <i128>now + delay
        if delay <= 0:
            if PyDict_Contains(props, TIMER_DEL_UNIQKEY):
                return (ST_ILLEGAL, "a timer delete marker (%s) whose time is not in the future" % TIMER_DEL_UNIQKEY)
            return msg                  # already due: an ordinary message of its own topic
        # round_deliver_ms: one tick earlier when on a tick, else down to the tick
        if mod_i128(deliver, self.precision_ms) == 0:
            deliver = deliver - self.precision_ms
        else:
            deliver = floordiv_i128(deliver, self.precision_ms) * self.precision_ms
        if self.link is not None:
            # TimerMessageStore.isReject (the rule: TimerPutHook._reject)
            num = self.link.num_at(deliver)
            limit = self.congest_num
            if num > limit and (num >= limit * 2 or (num - limit) * 2 > limit):
                return (ST_FLOW_CONTROL, "the timer slot of %s holds more than timer_congest_num_each_slot (%d) "
                        "messages" % (_text_i128(deliver), self.congest_num))
        out_ms = _text_i128(deliver)
        t = copy_message(msg, True)
        PyDict_SetItem(t._props, TIMER_OUT_MS, out_ms)
        PyDict_SetItem(t._props, REAL_TOPIC, msg._topic)
        PyDict_SetItem(t._props, REAL_QID, str(msg._queue_id))
        if self.link is not None:
            self.link.note_put()
        t._topic = TIMER_TOPIC
        t._queue_id = 0
        t._refresh()
        return t

    cdef tuple _too_far(self, object kind, int64_t value, object delay):
        return (ST_ILLEGAL, "%s=%d is a delay of %d ms, more than timer_max_delay_sec (%d s)"
                % (kind, value, delay, self.max_delay_sec))


cdef object _rewrite(object hook, Message msg):
    return (<TimerPut>hook).rewrite(msg)


set_timer_rewrite(_rewrite, TimerPut)
