"""The timer store's enqueue: the units of the timer queue (``rmq_sys_wheel_timer`` queue 0) into the timer log and
the wheel (RocketMQ ``TimerMessageStore``: ``TimerEnqueueGetService``, ``TimerEnqueuePutService``, ``doEnqueue``).

From the checkpoint's queue offset, unit by unit of that consume queue::

    delayed := TIMER_OUT_MS of the message
    delayed < unread_from_ms        -> delivered at once, TIMER_ENQUEUE_MS = 2**63 - 1 (never enqueued): its
                                       slot was read (or is being read)
    delayed - currWriteTimeMs >= roll window     -> MAGIC_ROLL, delayed := a slot inside the window
                                       (currWriteTimeMs + window / 2 when within a third of a window past it)
    TIMER_DEL_UNIQKEY set           -> MAGIC_DELETE (the slot's count goes down by one, not up)
    timer-log unit appended (prevPos = the slot's lastPos), the wheel slot of delayed points to it
  currWriteTimeMs := the time read before the pass, rounded down to the precision, once the pass took the timer
                     queue in up to the end it had at that time (only the enqueue moves it)

pystore's difference to RocketMQ (whose test is ``delayed < currWriteTimeMs``): a unit due before the write time
but in a slot the dequeue has not begun to read (``unread_from_ms``) is linked into that slot (its unit's delay
field is then negative), and the write time, which the dequeue reads up to, waits for the enqueue to reach the
queue's end. A store catching up (reopened after its timers' time, or behind a backlog) thus reads a slot with
every unit and delete marker due in it: in RocketMQ's flow a copy that reached the enqueue after its time was
delivered at once and a late marker dropped while its timer still waited in its slot, so the cancel was lost
(docs/powerloss.md, "Timers"). With the dequeue's gate (``read_gate_offset``, timer_dequeue.py) this covers the
copies the catch-up puts again: a rolled timer and its marker meet in their slot however late both arrive.

What runs in C (:mod:`pystore.timer._enqueue`): the enqueue of a pass's units. ``TimerEnqueue.run`` walks them,
finds and checks each record in the commit-log files, reads its ``TIMER_OUT_MS``, ``REAL_TOPIC`` and
``TIMER_DEL_UNIQKEY`` and writes its unit and slot as ``do_enqueue`` does, with no Python object per message and
without the GIL while the records lie in one commit-log file (the store's, the timer log's and the wheel's locks
held for the run). It hands back to Python at a timer-log roll (``TimerLog.writable_tail``, then it runs on) and at
any unit that is not the common case: a message already due, a unit or record that does not check out, a
``TIMER_OUT_MS`` that is missing or not plain digits. Python takes that one unit as it always did
(``_enqueue_one``: deliver, or log and skip, or ``do_enqueue``), so each unit's outcome is the same byte for byte.

One thread enqueues at a time (the enqueue service's); the flush waits for a run (the timer store's lock).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pystore.message._message_ext import MessageExt
from pystore.message.constants import MessageConst
from pystore.queue._units import FILLER_SIZE, read_unit
from pystore.queue._units import UNIT_SIZE as CQ_UNIT_SIZE
from pystore.timer._enqueue import PYTHON, ROLL
from pystore.timer.timer_dequeue import TimerDelivery
from pystore.timer.timer_log import MAGIC_DEFAULT, MAGIC_DELETE, MAGIC_ROLL, encode_unit, topic_hash
from pystore.timer.timer_state import NEVER_ENQUEUED, TIMER_DEL_UNIQKEY, TIMER_OUT_MS, TIMER_TOPIC, log

if TYPE_CHECKING:
    from pystore.log._mapped_file import MappedFile

__all__ = ["TimerEnqueuing"]

#: units enqueued per pass before the write time moves on (RocketMQ's put service takes up to 11 at a time; the
#: compiled enqueue takes a pass of 4096 in a few milliseconds, well within the 100 ms of the finest precision)
_ENQUEUE_BATCH = 4096


class TimerEnqueuing(TimerDelivery):
    """The enqueue of one timer store (a message already due is delivered at once, through ``TimerDelivery``;
    the first message enqueued makes the files, ``TimerFiles._open``)."""

    def note_timer_put(self) -> None:
        """The put hook rewrote a timer message (its unit follows once it is dispatched): ``expecting`` set and the
        enqueue service woken, through the wake word the compiled hook notes in C (``put_link``)."""
        self.put_link.note()

    def enqueue(self) -> bool:
        """Enqueue what the timer queue holds from ``curr_queue_offset`` (up to a batch); whether anything was."""
        if self.config.timer_stop_enqueue or self.closed:
            return False
        # the time first, then the queue's end: a timer message dispatched before that time lies below that end, so
        # once the pass took the queue in up to there, the slots before that time hold every unit due in them
        now = self.clock()
        cq = self.cq_store.find(TIMER_TOPIC, 0)
        if cq is None:
            self.maybe_move_write_time(now)
            return False
        low = cq.get_min_offset_in_queue()
        if self.curr_queue_offset < low:
            log.warning("%s: timer queue offset %d below the queue's min %d", self.root, self.curr_queue_offset, low)
            self.curr_queue_offset = low
        high = cq.get_max_offset_in_queue()
        if high <= self.curr_queue_offset:
            self.commit_queue_offset = self.curr_queue_offset
            self.maybe_move_write_time(now)
            return False
        self._open()            # the first timer message makes the files
        offset = self.curr_queue_offset
        buf = cq.get_index_buffer(offset)
        if buf is None:
            self.maybe_move_write_time(now)
            return False
        mf, start, end = buf
        if not mf.hold():
            return False
        done = 0
        limit = min(end, start + _ENQUEUE_BATCH * CQ_UNIT_SIZE)
        limit -= (limit - start) % CQ_UNIT_SIZE
        try:
            pos = start
            while pos < limit and not self.closed:
                n, why = self._enqueue_run(mf, pos, limit)
                done += n
                pos += n * CQ_UNIT_SIZE
                self.curr_queue_offset = offset + done
                if why == ROLL:
                    self._roll_timer_log()
                elif why == PYTHON:
                    phy, size, _ = read_unit(mf, pos)
                    if size != FILLER_SIZE:
                        self._enqueue_one(phy, size, offset + done)
                    done += 1
                    pos += CQ_UNIT_SIZE
                    self.curr_queue_offset = offset + done
        finally:
            mf.release()
        self.commit_queue_offset = self.curr_queue_offset
        if self.curr_queue_offset >= high:
            self.maybe_move_write_time(now)     # else the next pass goes on at once, and moves it
        if offset < self.read_gate_offset <= self.curr_queue_offset:
            wake = self.wake_dequeue            # the dequeue waited for these units (its gate)
            if wake is not None:
                wake()
        return done > 0

    def _enqueue_run(self, cq_file: MappedFile, start: int, end: int) -> tuple[int, int]:
        """The compiled enqueue of the timer queue's units ``[start, end)`` of ``cq_file`` (``_enqueue``), under the
        store's, the timer log's and the wheel's locks: (units consumed, why it stopped)."""
        cl = self.commitlog.queue
        with self._lock:
            tl, wheel, run = self.timer_log, self.wheel, self._enqueuer
            if tl is None or wheel is None or run is None:
                return 0, PYTHON
            # the slot lock: no slot the run may link into is begun by the dequeue meanwhile
            with tl.append_lock, wheel.lock, self._slot_lock:
                n, why, hi = run.run(cq_file, start, end, cl.files, cl.mapped_file_size, tl.last_file(),
                                     self.curr_write_time_ms, self.unread_from_ms, self.config.check_crc_on_read)
        if hi > self._pending_hi:
            self._pending_hi = hi
        return n, why

    def _roll_timer_log(self) -> None:
        """The next unit does not fit the timer log's last file (or there is none): the blank, the next file."""
        with self._lock:
            tl = self.timer_log
            assert tl is not None
            with tl.append_lock:
                tl.writable_tail()

    def _enqueue_one(self, phy: int, size: int, queue_offset: int) -> None:
        ext = self.commitlog.look_message_by_offset(phy)
        if ext is None:
            log.error("%s: timer queue offset %d: no readable message at commit-log offset %d (%d bytes); skipped",
                      self.root, queue_offset, phy, size)
            return
        raw = ext.properties.get(TIMER_OUT_MS)
        try:
            delayed = int(raw) if raw is not None else None
        except ValueError:
            delayed = None
        if delayed is None:
            log.error("%s: timer queue offset %d: the message at %d has no valid %s (%r); skipped", self.root,
                      queue_offset, phy, TIMER_OUT_MS, raw)
            return
        with self._lock, self._slot_lock:
            if delayed >= self.unread_from_ms:
                # its slot is not begun, however late it came: read there with the slot's delete markers
                self.do_enqueue(phy, size, delayed, ext)
                return
        # due in a slot the dequeue has read (or is reading): straight to its topic (a marker: too late, dropped)
        self._deliver(ext, NEVER_ENQUEUED, MAGIC_DEFAULT, set())

    def do_enqueue(self, phy: int, size: int, delayed: int, ext: MessageExt) -> int:
        """``doEnqueue``: append the unit of ``ext`` (due at ``delayed``) and link it into its slot; its position.
        A ``delayed`` before the write time (a slot not read yet) is linked as it is: the unit's delay is negative."""
        write = self.curr_write_time_ms
        window = self.roll_window_slots * self.precision_ms
        magic = MAGIC_DEFAULT
        if delayed - write >= window:
            magic |= MAGIC_ROLL
            # give it enough time before the next roll (RocketMQ's halving)
            if delayed - write - window < self.roll_window_slots // 3 * self.precision_ms:
                delayed = write + self.roll_window_slots // 2 * self.precision_ms
            else:
                delayed = write + window
        props = ext.properties
        delete = TIMER_DEL_UNIQKEY in props
        if delete:
            magic |= MAGIC_DELETE
        with self._lock:
            assert self.wheel is not None and self.timer_log is not None
            slot = self.wheel.get_slot(delayed)
            unit = encode_unit(slot.last_pos, magic, write, delayed, phy, size,
                               topic_hash(props.get(MessageConst.REAL_TOPIC)))
            pos = self.timer_log.append(unit)
            num = slot.num - 1 if delete else slot.num + 1
            self.wheel.put_slot(delayed, pos if slot.first_pos == -1 else slot.first_pos, pos, num, slot.magic)
        if delayed > self._pending_hi:
            self._pending_hi = delayed
        return pos
