"""The timer wheel: RocketMQ 5's ``timerwheel`` file, one slot per tick of ``precision_ms`` over two turns of the
wheel, each slot the head of a list of timer-log units (RocketMQ ``org.apache.rocketmq.store.timer.TimerWheel``:
``getSlotIndex``, ``getSlot``/``getRawSlot``, ``putSlot``, ``reviseSlot``, ``checkPhyPos``, ``getAllNum``,
``flush``; ``Slot``; the slot count and roll window from ``TimerMessageStore``'s constructor).

The file is ``2 * slots_total`` slots of 32 bytes, big-endian, nothing else (no header, no checksum, no backup copy
in the RocketMQ this follows: 5.3.3, commit 8fc57f1)::

    slot i at byte 32*i:
    0                 8            16           24     28      32
    | time / precision | firstPos   | lastPos    | num  | magic |
      i64                i64          i64          i32    i32

    slot index = (timeMs / precisionMs) % (2 * slots_total)

The first field is the slot's time divided by the precision (RocketMQ stores ``timeMs / precisionMs``: its first
version had a fixed 1000 ms precision and stored seconds). A slot is the one asked for only when that field equals
``timeMs / precisionMs``; any other value (zeros of a new file, a slot of an earlier turn) reads as the empty slot
``(-1, -1, -1, 0, 0)``. ``firstPos``/``lastPos`` are timer-log positions of the slot's oldest and newest unit,
``num`` counts its units (a delete marker counts -1), ``magic`` is unused (kept as written).

``slots_total`` is fixed at ``TIMER_WHEEL_TTL_DAY * DAY_SECS`` = 7 * 86400 = 604800 whatever the precision (so the
file is 38,707,200 bytes, and the wheel spans 14 days at 1000 ms, 1.4 days at 100 ms): RocketMQ does not derive it
from ``timerMaxDelaySec``. Delays past the roll window (``roll_window_slots``) are re-put and wait again.

Like RocketMQ, puts change an in-memory copy; ``flush`` writes the pages of slots that changed into the file and
forces it (RocketMQ compares the whole copy with the mapping byte by byte; pystore marks the 4 KiB pages it changed in
a dirty map, a byte per page, and writes those pages whole: the slots it did not change there are the file's own
bytes, so the file ends the same). The compiled enqueue (``pystore.timer._enqueue``) writes slots into the same
copy and marks the same map.
A wheel file of another size is refused (RocketMQ: "Timer wheel length ... != expected").
"""

from __future__ import annotations

import logging
import os
import struct
import threading
from collections.abc import Iterator
from typing import NamedTuple

from pystore.errors import StoreCorruptedError
from pystore.log._mapped_file import MappedFile
from pystore.system.durable import make_dirs_durable, sync_dirs

__all__ = [
    "SLOT_SIZE", "BLANK", "IGNORE", "TIMER_WHEEL_TTL_DAY", "DAY_SECS", "DEFAULT_SLOTS_TOTAL", "TIMER_BLANK_SLOTS",
    "DEFAULT_PRECISION_MS", "DEFAULT_ROLL_WINDOW_SLOT", "Slot", "EMPTY_SLOT", "TimerWheel", "precision_ms_of",
    "roll_window_slots",
]

log = logging.getLogger(__name__)

#: ``Slot.SIZE``
SLOT_SIZE = 32
#: ``TimerWheel.BLANK``, ``TimerWheel.IGNORE`` (``revise_slot``: leave this position as it is)
BLANK = -1
IGNORE = -2
#: ``TimerMessageStore.TIMER_WHEEL_TTL_DAY``, ``DAY_SECS``, ``TIMER_BLANK_SLOTS``
TIMER_WHEEL_TTL_DAY = 7
DAY_SECS = 24 * 3600
TIMER_BLANK_SLOTS = 60
#: ``TimerMessageStore``'s ``slotsTotal``: fixed, whatever the precision
DEFAULT_SLOTS_TOTAL = TIMER_WHEEL_TTL_DAY * DAY_SECS
#: ``MessageStoreConfig.timerPrecisionMs`` and ``timerRollWindowSlot`` defaults
DEFAULT_PRECISION_MS = 1000
DEFAULT_ROLL_WINDOW_SLOT = 3600 * 24 * 2

_SLOT = struct.Struct(">qqqii")
_TIME = struct.Struct(">q")
_POS = struct.Struct(">qq")
_MAX_LONG = (1 << 63) - 1
#: the dirty map's page: one byte of the map per 4 KiB of slots (``_enqueue.DIRTY_PAGE_SHIFT``)
_PAGE_SHIFT = 12
_PAGE = 1 << _PAGE_SHIFT

assert _SLOT.size == SLOT_SIZE


class Slot(NamedTuple):
    """A slot as ``TimerWheel.getRawSlot`` returns it: ``time_ms`` is the stored field times the precision."""

    time_ms: int
    first_pos: int
    last_pos: int
    num: int = 0
    magic: int = 0

    @property
    def empty(self) -> bool:
        return self.time_ms == -1


#: what ``get_slot`` returns for a slot that is not the one asked for (``new Slot(-1, -1, -1)``)
EMPTY_SLOT = Slot(-1, -1, -1, 0, 0)


def precision_ms_of(configured: int) -> int:
    """``MessageStoreConfig.setTimerPrecisionMs``: the largest of 100, 200, 500, 1000 not above ``configured``
    (100 below it)."""
    candidates = (100, 200, 500, 1000)
    for lower, upper in zip(candidates, candidates[1:]):
        if configured < upper:
            return lower
    return candidates[-1]


def roll_window_slots(configured: int = DEFAULT_ROLL_WINDOW_SLOT, slots_total: int = DEFAULT_SLOTS_TOTAL) -> int:
    """``TimerMessageStore``'s ``timerRollWindowSlots``: the configured ``timerRollWindowSlot`` unless it is above
    ``slots_total - TIMER_BLANK_SLOTS`` or below 2, then ``slots_total - TIMER_BLANK_SLOTS``. Counted in slots,
    whatever the precision."""
    if configured > slots_total - TIMER_BLANK_SLOTS or configured < 2:
        return slots_total - TIMER_BLANK_SLOTS
    return configured


class TimerWheel:
    """The ``timerwheel`` file.

    ``TimerWheel(path, slots_total=DEFAULT_SLOTS_TOTAL, precision_ms=1000, read_only=False)`` creates the file at
    ``2 * slots_total * 32`` bytes (zeros) when it is missing or empty. ``get_slot(time_ms)``,
    ``get_raw_slot(time_ms)``, ``get_slot_checked(time_ms, log_end)``, ``put_slot(time_ms, first, last, num, magic)``,
    ``revise_slot(time_ms, first, last, force)``, ``scan(start_ms, end_ms)``, ``occupied(start_ms)``,
    ``check_phy_pos(start_ms, max_offset)``, ``get_num(time_ms)``, ``get_all_num(start_ms)``, ``flush()``, ``close()``.
    """

    def __init__(self, path: str, slots_total: int = DEFAULT_SLOTS_TOTAL, precision_ms: int = DEFAULT_PRECISION_MS,
                 read_only: bool = False) -> None:
        if slots_total <= 0 or precision_ms <= 0:
            raise ValueError("slots_total and precision_ms must be positive: %d, %d" % (slots_total, precision_ms))
        self.path = path
        self.slots_total = slots_total
        self.precision_ms = precision_ms
        self.read_only = read_only
        self.wheel_length = slots_total * 2 * SLOT_SIZE
        self._lock = threading.Lock()
        # one byte per page of slots: 1 where a slot changed since the last flush (the compiled enqueue marks it too)
        self._dirty = bytearray((self.wheel_length + _PAGE - 1) >> _PAGE_SHIFT)
        size = os.path.getsize(path) if os.path.exists(path) else -1
        if size not in (-1, 0, self.wheel_length):
            raise StoreCorruptedError(path, 0, "the timer wheel is %d bytes, expected %d (2 x %d slots of %d)"
                                      % (size, self.wheel_length, slots_total, SLOT_SIZE))
        if read_only:
            self._file: MappedFile | None = MappedFile(path, self.wheel_length, read_only=True) if size > 0 else None
        else:
            folder = os.path.dirname(os.path.abspath(path))
            make_dirs_durable(folder)
            self._file = MappedFile(path, self.wheel_length, create=True)
            self._file.set_positions(self.wheel_length)
            if size == -1:
                sync_dirs([folder])
        self._buf = bytearray(self._file.read_any(0, self.wheel_length)) if self._file is not None \
            else bytearray(self.wheel_length)

    @property
    def raw(self) -> bytearray:
        """The slots' in-memory copy (what ``get_slot`` reads and ``flush`` writes), for the compiled enqueue."""
        return self._buf

    @property
    def dirty_map(self) -> bytearray:
        """A byte per 4 KiB page of ``raw``: non-zero where a slot changed since the last flush."""
        return self._dirty

    @property
    def lock(self) -> threading.Lock:
        """Held while slots change (``put_slot``, ``revise_slot``, the compiled enqueue's runs) and by ``flush``."""
        return self._lock

    # -- slots -------------------------------------------------------------------------------------

    def slot_index(self, time_ms: int) -> int:
        """``getSlotIndex``: ``time_ms / precision_ms % (2 * slots_total)``."""
        if time_ms < 0:
            raise ValueError("a timer slot time cannot be negative: %d" % time_ms)
        return time_ms // self.precision_ms % (self.slots_total * 2)

    def get_raw_slot(self, time_ms: int) -> Slot:
        """The slot at ``time_ms``'s index as stored, whatever time it holds."""
        t, first, last, num, magic = _SLOT.unpack_from(self._buf, self.slot_index(time_ms) * SLOT_SIZE)
        return Slot(t * self.precision_ms, first, last, num, magic)

    def get_slot(self, time_ms: int) -> Slot:
        """``getSlot``: the slot of ``time_ms``, or ``EMPTY_SLOT`` when its index holds another time."""
        slot = self.get_raw_slot(time_ms)
        if slot.time_ms != time_ms // self.precision_ms * self.precision_ms:
            return EMPTY_SLOT
        return slot

    def get_slot_checked(self, time_ms: int, log_end: int) -> Slot:
        """``get_slot``, refusing a slot whose positions cannot be in a timer log that ends at ``log_end``:
        ``StoreCorruptedError`` naming the wheel file and the slot's byte offset."""
        slot = self.get_slot(time_ms)
        if slot.empty:
            return slot
        problem = None
        if slot.last_pos >= log_end or slot.first_pos >= log_end:
            problem = "points past the timer log's end %d" % log_end
        elif slot.last_pos < 0 or slot.first_pos < 0 or slot.first_pos > slot.last_pos:
            problem = "has no valid positions"
        if problem is not None:
            raise StoreCorruptedError(self.path, self.slot_index(time_ms) * SLOT_SIZE, "the timer slot of %d (first %d, "
                                      "last %d) %s" % (slot.time_ms, slot.first_pos, slot.last_pos, problem))
        return slot

    def put_slot(self, time_ms: int, first_pos: int, last_pos: int, num: int | None = None,
                 magic: int | None = None) -> None:
        """``putSlot``: the slot of ``time_ms`` now starts at ``first_pos`` and ends at ``last_pos``. Without
        ``num`` and ``magic`` those fields stay as they are (RocketMQ's three-argument ``putSlot``)."""
        self._check_writable()
        index = self.slot_index(time_ms)
        at = index * SLOT_SIZE
        with self._lock:
            if num is None and magic is None:
                struct.pack_into(">qqq", self._buf, at, time_ms // self.precision_ms, first_pos, last_pos)
            else:
                _, _, _, old_num, old_magic = _SLOT.unpack_from(self._buf, at)
                _SLOT.pack_into(self._buf, at, time_ms // self.precision_ms, first_pos, last_pos,
                                old_num if num is None else num, old_magic if magic is None else magic)
            self._dirty[at >> _PAGE_SHIFT] = 1

    def revise_slot(self, time_ms: int, first_pos: int, last_pos: int, force: bool) -> None:
        """``reviseSlot`` (recovery): when the slot holds ``time_ms``, set the positions that are not ``IGNORE``;
        when it holds another time and ``force``, make it the slot of ``time_ms`` from ``first_pos`` (or
        ``last_pos`` when first is ``IGNORE``) to ``last_pos``, num and magic left as they are."""
        self._check_writable()
        index = self.slot_index(time_ms)
        at = index * SLOT_SIZE
        with self._lock:
            (stored,) = _TIME.unpack_from(self._buf, at)
            if stored != time_ms // self.precision_ms:
                if force:
                    struct.pack_into(">qqq", self._buf, at, time_ms // self.precision_ms,
                                     last_pos if first_pos == IGNORE else first_pos, last_pos)
                    self._dirty[at >> _PAGE_SHIFT] = 1
                return
            if first_pos != IGNORE:
                _TIME.pack_into(self._buf, at + 8, first_pos)
            if last_pos != IGNORE:
                _TIME.pack_into(self._buf, at + 16, last_pos)
            self._dirty[at >> _PAGE_SHIFT] = 1

    def scan(self, start_ms: int, end_ms: int) -> Iterator[Slot]:
        """The slots that hold a time in ``[start_ms, end_ms)``, in time order, one tick at a time (at most two turns
        of the wheel: a longer range would only find the same slots again)."""
        p = self.precision_ms
        t = start_ms // p * p
        stop = min(end_ms, t + 2 * self.slots_total * p)
        while t < stop:
            slot = self.get_slot(t)
            if not slot.empty:
                yield slot
            t += p

    def _turn(self, time_start_ms: int) -> Iterator[tuple[int, int]]:
        """(slot index, expected stored time) for the ``2 * slots_total`` ticks from ``time_start_ms``."""
        n = self.slots_total * 2
        first = self.slot_index(time_start_ms)
        tick = time_start_ms // self.precision_ms
        for i in range(n):
            yield (first + i) % n, tick + i

    def check_phy_pos(self, time_start_ms: int, max_offset: int) -> int:
        """``checkPhyPos``: the smallest firstPos among the slots of the two turns from ``time_start_ms`` whose
        lastPos is past ``max_offset`` (a wheel ahead of a damaged timer log), ``2**63 - 1`` when none is.
        RocketMQ's recovery rescans the log from there without checking it."""
        min_first = _MAX_LONG
        buf = self._buf
        for index, tick in self._turn(time_start_ms):
            at = index * SLOT_SIZE
            if _TIME.unpack_from(buf, at)[0] != tick:
                continue
            first, last = _POS.unpack_from(buf, at + 8)
            if last > max_offset and first < min_first:
                min_first = first
        return min_first

    def occupied(self, time_start_ms: int) -> list[Slot]:
        """The slots of the two turns from ``time_start_ms`` that hold their own time (the ones ``get_slot``
        returns), in time order: one pass over the wheel, for recovery and the pending count."""
        p = self.precision_ms
        n = self.slots_total * 2
        tick0 = time_start_ms // p
        first = tick0 % n
        out = []
        for index, (t, first_pos, last_pos, num, magic) in enumerate(_SLOT.iter_unpack(self._buf)):
            if t and t == tick0 + (index - first) % n:
                out.append(Slot(t * p, first_pos, last_pos, num, magic))
        out.sort()
        return out

    def get_num(self, time_ms: int) -> int:
        """``getNum``: the unit count of the slot of ``time_ms`` (0 when empty)."""
        return self.get_slot(time_ms).num

    def get_all_num(self, time_start_ms: int) -> int:
        """``getAllNum``: the unit counts of every slot of the two turns from ``time_start_ms``."""
        total = 0
        buf = self._buf
        for index, tick in self._turn(time_start_ms):
            at = index * SLOT_SIZE
            if _TIME.unpack_from(buf, at)[0] == tick:
                total += struct.unpack_from(">i", buf, at + 24)[0]
        return total

    # -- the file ----------------------------------------------------------------------------------

    def flush(self) -> None:
        """Write the slots changed since the last flush into the file and force it."""
        if self.read_only or self._file is None:
            return
        with self._lock:
            runs = _runs(self._dirty)
            view = memoryview(self._buf)
            for lo, hi in runs:
                self._file.write_at(lo << _PAGE_SHIFT, view[lo << _PAGE_SHIFT:hi << _PAGE_SHIFT])
                self._dirty[lo:hi] = bytes(hi - lo)
        if runs:
            self._file.unflush_from(runs[0][0] << _PAGE_SHIFT)
            try:
                self._file.flush(0)
            except OSError:
                with self._lock:
                    for lo, hi in runs:         # written, not forced: the next flush forces them again
                        self._dirty[lo:hi] = b"\x01" * (hi - lo)
                raise

    def close(self, flush: bool = True) -> None:
        """``shutdown(flush)``: flush (unless told not to, as ``TimerMessageStore.shutdown`` does) and unmap."""
        if self._file is None:
            return
        if flush:
            try:
                self.flush()
            except OSError:
                log.exception("flush of the timer wheel %s failed on close", self.path)
        self._file.close()
        self._file = None

    def _check_writable(self) -> None:
        if self.read_only:
            raise ValueError("the timer wheel %s is open read-only" % self.path)

    def __repr__(self) -> str:
        return "TimerWheel(%r, slots_total=%d, precision_ms=%d)" % (self.path, self.slots_total, self.precision_ms)


def _runs(dirty: bytearray) -> list[tuple[int, int]]:
    """The runs ``[lo, hi)`` of non-zero bytes of a dirty map."""
    out = []
    lo = dirty.find(1)
    while lo >= 0:
        hi = lo + 1
        while hi < len(dirty) and dirty[hi]:
            hi += 1
        out.append((lo, hi))
        lo = dirty.find(1, hi)
    return out
