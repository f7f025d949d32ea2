"""The timer store: RocketMQ 5's ``TimerMessageStore`` (enqueue, dequeue, roll, delete markers, checkpoint, recovery)
over the three files of :mod:`pystore.timer` (``timerlog/``, ``timerwheel``, ``config/timercheck``).

The flow (the put side is :mod:`pystore.timer.timer_put`)::

    put(msg, TIMER_DELAY_SEC=...)  ->  rmq_sys_wheel_timer queue 0  (TIMER_OUT_MS, REAL_TOPIC, REAL_QID set)

    enqueue (from the checkpoint's queue offset, unit by unit of that consume queue):
      delayed := TIMER_OUT_MS of the message
      delayed < currWriteTimeMs       -> delivered at once, TIMER_ENQUEUE_MS = 2**63 - 1 (never enqueued)
      delayed - currWriteTimeMs >= roll window     -> MAGIC_ROLL, delayed := a slot inside the window
                                         (currWriteTimeMs + window / 2 when within a third of a window past it)
      TIMER_DEL_UNIQKEY set           -> MAGIC_DELETE (the slot's count goes down by one, not up)
      timer-log unit appended (prevPos = the slot's lastPos), the wheel slot of delayed points to it
    currWriteTimeMs := now rounded down to the precision (after each batch; only the enqueue moves it)

    dequeue (one slot per tick, currReadTimeMs < currWriteTimeMs):
      walk the slot's units newest to oldest (TimerLog.walk, bounded and checked)
      delete markers (MAGIC_DELETE without MAGIC_ROLL): their TIMER_DEL_UNIQKEY ("topic+uniq key") collected
      the others, oldest first: a message whose "REAL_TOPIC+UNIQ_KEY" was collected is dropped (cancelled);
        MAGIC_ROLL -> re-put to rmq_sys_wheel_timer queue 0 with TIMER_ROLL_TIMES + 1 (it waits again)
        else       -> put to REAL_TOPIC / REAL_QID (both properties removed), TIMER_ENQUEUE_MS = the unit's
                      write time, TIMER_DEQUEUE_MS = now
      currReadTimeMs += precision once the whole slot is put (commitReadTimeMs with it)

    flush (every timer_flush_interval_ms, and at close), under the enqueue lock: the read time and queue offset
    taken, then  commit log (to its end: the deliveries and timer messages the checkpoint will count; pystore's,
    see ``flush``)  ->  timer log  ->  wheel  ->  config/timercheck (lastReadTimeMs = commitReadTimeMs,
    lastTimerLogFlushPos = what the log flushed, lastTimerQueueOffset = masterTimerQueueOffset = the next queue
    offset to enqueue; the data version moves when either changed)

Recovery (``load``, RocketMQ ``recover``/``recoverAndRevise``/``reviseQueueOffset``): the timer log is scanned from
one file before the checkpoint's flushed position (a cut below that position is refused:
``StoreCorruptedError``), each unit revising its slot's lastPos; the queue offset resumes after the message of the
log's last unit when that unit is found in the timer queue (units flushed after the checkpoint are not enqueued
twice), else at the checkpoint's; the read time resumes at ``lastReadTimeMs`` (never before now minus the wheel's
span). A slot that still points past the log's end is damage: ``StoreCorruptedError(wheel path, slot offset)``.
Delivery is at least once, as RocketMQ's: slots read after the last checkpoint are read again after a crash, and
their messages put again; a slot the checkpoint counts as read is never read again.

pystore's choices: one enqueue thread and one dequeue thread (RocketMQ hands requests between five kinds of
threads through queues; the order of units and puts is the same); the files are created when the first message
reaches ``rmq_sys_wheel_timer`` (RocketMQ creates them at start: a store that never takes a timer has none of
their 38.7 MB wheel); the dequeue thread delivers, so ``timer_skip_unknown_error``, ``timer_enable_retry_until_
success`` and the three put attempts behave as in ``TimerDequeuePutMessageService``.

What runs in C (:mod:`pystore.timer._enqueue`): the enqueue of a pass's units. ``TimerEnqueue.run`` walks them,
finds and checks each record in the commit-log files, reads its ``TIMER_OUT_MS``, ``REAL_TOPIC`` and
``TIMER_DEL_UNIQKEY`` and writes its unit and slot as ``do_enqueue`` does, with no Python object per message and
without the GIL while the records lie in one commit-log file (the store's, the timer log's and the wheel's locks
held for the run). It hands back to Python at a timer-log roll (``TimerLog.writable_tail``, then it runs on) and at
any unit that is not the common case: a message already due, a unit or record that does not check out, a
``TIMER_OUT_MS`` that is missing or not plain digits. Python takes that one unit as it always did
(``_enqueue_one``: deliver, or log and skip, or ``do_enqueue``), so each unit's outcome is the same byte for byte.
The pending count and the next due time are read from the wheel's slots between the read time and the latest
slot enqueued (``wheel_pending``), not kept per message.

Thread-safety: ``enqueue`` runs on one thread at a time, ``dequeue`` on one thread at a time, beside each other
(``currWriteTimeMs`` is moved by the enqueue only, and the dequeue reads only slots before it); ``flush`` and
``stats`` from any thread.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pystore.errors import StoreCorruptedError
from pystore.message._message import Message
from pystore.message._message_ext import MessageExt
from pystore.message.constants import MessageConst, SysFlag
from pystore.queue._units import FILLER_SIZE, read_unit
from pystore.queue._units import UNIT_SIZE as CQ_UNIT_SIZE
from pystore.status import PutMessageStatus
from pystore.system.crashpoint import crashpoint
from pystore.timer._enqueue import PYTHON, ROLL, TimerEnqueue, wheel_pending
from pystore.timer.timer_checkpoint import TimerCheckpoint, checkpoint_path
from pystore.timer.timer_log import (
    MAGIC_DEFAULT,
    MAGIC_DELETE,
    MAGIC_ROLL,
    UNIT_SIZE,
    TimerLog,
    TimerUnit,
    encode_unit,
    topic_hash,
)
from pystore.timer.timer_wheel import DEFAULT_SLOTS_TOTAL, IGNORE, TIMER_BLANK_SLOTS, TimerWheel, roll_window_slots

if TYPE_CHECKING:
    from pystore.config import StoreConfig
    from pystore.log._mapped_file import MappedFile
    from pystore.log._results import PutMessageResult
    from pystore.log.commitlog import CommitLog
    from pystore.queue.queue_store import ConsumeQueueStore

__all__ = ["TimerMessageStore", "NotTakingPuts", "build_delete_key", "PUT_OK", "PUT_NEED_RETRY", "PUT_NO_RETRY",
           "NEVER_ENQUEUED"]

log = logging.getLogger(__name__)

TIMER_TOPIC = "rmq_sys_wheel_timer"
TIMER_OUT_MS = "TIMER_OUT_MS"
TIMER_ENQUEUE_MS = "TIMER_ENQUEUE_MS"
TIMER_DEQUEUE_MS = "TIMER_DEQUEUE_MS"
TIMER_ROLL_TIMES = "TIMER_ROLL_TIMES"
TIMER_DEL_UNIQKEY = "TIMER_DEL_UNIQKEY"
#: ``doPut``'s answers
PUT_OK, PUT_NEED_RETRY, PUT_NO_RETRY = 0, 1, 2
#: TIMER_ENQUEUE_MS of a message delivered without entering the wheel (``Long.MAX_VALUE``)
NEVER_ENQUEUED = (1 << 63) - 1
#: puts that will never succeed: the message is dropped with a warning (``doPut``)
_NO_RETRY = {PutMessageStatus.MESSAGE_ILLEGAL, PutMessageStatus.PROPERTIES_SIZE_EXCEEDED,
             PutMessageStatus.WHEEL_TIMER_NOT_ENABLE, PutMessageStatus.WHEEL_TIMER_MSG_ILLEGAL}
#: statuses that mean the message is stored (the flush or the slave is what failed)
_STORED = {PutMessageStatus.PUT_OK, PutMessageStatus.FLUSH_DISK_TIMEOUT, PutMessageStatus.FLUSH_SLAVE_TIMEOUT,
           PutMessageStatus.SLAVE_NOT_AVAILABLE}
#: units enqueued per pass before the write time moves on (RocketMQ's put service takes up to 11 at a time; the
#: compiled enqueue takes a pass of 4096 in a few milliseconds, well within the 100 ms of the finest precision)
_ENQUEUE_BATCH = 4096


class NotTakingPuts(Exception):
    """The store refused a delivery with ``SERVICE_NOT_AVAILABLE``: it takes no puts now (still starting, shutting
    down, or not writeable). ``do_put`` raises it instead of counting the attempt, so nothing is dropped for it: the
    dequeue leaves its slot unread (the slot is read again, its messages put so far put again: at least once), the
    enqueue leaves its queue unit unconsumed, and the services try again after their idle wait (pystore's: the three
    attempts of ``TimerDequeuePutMessageService`` dropped a due message whenever a put came between the start of the
    timer threads and the store taking puts, or between the store's last put and the threads' stop, and the read
    time moved past it, so the checkpoint at close counted it delivered)."""


def build_delete_key(real_topic: str, unique_key: str) -> str:
    """``TimerMessageStore.buildDeleteKey``: what ``TIMER_DEL_UNIQKEY`` holds to cancel the timer message of
    ``real_topic`` whose ``UNIQ_KEY`` is ``unique_key``."""
    return real_topic + "+" + unique_key


class TimerMessageStore:
    """The timer store of one writable master (see the module docstring).

    ``TimerMessageStore(commitlog, cq_store, config, clock, put, look)``: ``put(msg)`` stores a due or rolled
    message (the store's own put, which waits for no flush); ``look(offset)`` reads the message a slot's unit
    points at (default: the local commit log; with an archive, the archive below the local log). ``load()`` opens
    and recovers the files when they exist;
    ``enqueue()``, ``dequeue()``, ``flush()`` are what the services (``timer_services``) call; ``stats()``;
    ``close()`` flushes and closes.
    """

    def __init__(self, commitlog: CommitLog, cq_store: ConsumeQueueStore, config: StoreConfig,
                 clock: Callable[[], int], put: Callable[[Message], PutMessageResult],
                 look: Callable[[int], MessageExt | None] | None = None) -> None:
        self.commitlog = commitlog
        #: the message at a commit-log offset, for the dequeue: with an archive, below the local log from there (a
        #: timer waits up to ``timer_max_delay_sec``, longer than the archive's local retention may keep its record)
        self.look = look if look is not None else commitlog.look_message_by_offset
        self.cq_store = cq_store
        self.config = config
        self.clock = clock
        self.put = put
        #: called after each delivery (the group commit's wakeup under SYNC_FLUSH: deliveries wait for no flush)
        self.flush_wakeup: Callable[[], object] | None = None
        #: makes the commit log durable up to an offset before a checkpoint (True when it is); None: the timer
        #: store flushes the commit log's files itself (ASYNC_FLUSH)
        self.flush_commitlog: Callable[[int], bool] | None = None
        self.root = config.store_path_root_dir
        self.precision_ms = int(config.timer_precision_ms)
        self.slots_total = DEFAULT_SLOTS_TOTAL
        self.roll_window_slots = roll_window_slots(int(config.timer_roll_window_slots), self.slots_total)
        self.timer_log: TimerLog | None = None
        self.wheel: TimerWheel | None = None
        self.checkpoint: TimerCheckpoint | None = None
        self.curr_read_time_ms = 0
        self.curr_write_time_ms = 0
        self.commit_read_time_ms = 0
        self.curr_queue_offset = 0
        self.commit_queue_offset = 0
        self._last_commit = (0, 0)
        # the latest slot time enqueued (or recovered): pending and next_due_ms sum the wheel's slots from the read
        # time to it (wheel_pending), no further
        self._pending_hi = 0
        self._enqueuer: TimerEnqueue | None = None      # the compiled enqueue, over the wheel's slots
        self._lock = threading.RLock()          # enqueue's appends and slot updates against flush
        self.closed = False
        #: a put rewrote a timer message (``note_timer_put``): the enqueue polls at its RocketMQ rate from now on
        self.expecting = False
        #: wakes the enqueue thread, and the dequeue thread (set by ``timer_services``)
        self.wake_enqueue: Callable[[], object] | None = None
        self.wake_dequeue: Callable[[], object] | None = None

    # -- files and recovery ------------------------------------------------------------------------

    @property
    def opened(self) -> bool:
        return self.wheel is not None

    def files_exist(self) -> bool:
        """Whether this store has timer files already (the wheel, the log folder or the checkpoint)."""
        return (os.path.exists(os.path.join(self.root, "timerwheel")) or os.path.exists(checkpoint_path(self.root))
                or bool(_listdir(os.path.join(self.root, "timerlog"))))

    def load(self) -> None:
        """Open and recover the files if the store has them; otherwise they are made by the first enqueue."""
        if self.files_exist():
            self._open()
        else:
            self.curr_write_time_ms = self.curr_read_time_ms = self.commit_read_time_ms = self._format(self.clock())

    def _open(self) -> None:
        with self._lock:
            if self.wheel is not None:
                return
            cp = TimerCheckpoint(checkpoint_path(self.root), clock=self.clock)
            wheel = TimerWheel(os.path.join(self.root, "timerwheel"), self.slots_total, self.precision_ms)
            try:
                flush_pos = cp.last_timer_log_flush_pos
                file_size = int(self.config.mapped_file_size_timer_log)

                def revise(pos: int, unit: TimerUnit) -> None:
                    wheel.revise_slot(unit.delayed_time_ms, IGNORE, pos, True)

                # a unit whose record a crash took back from the commit log ends the timer log: the record's
                # offset is reused by the next put, which that unit would deliver in its slot (its message is
                # enqueued again from the timer queue, if the queue still holds it)
                cl_end = self.commitlog.get_max_offset()

                def kept(unit: TimerUnit) -> str | None:
                    if unit.commit_log_offset + unit.msg_size <= cl_end:
                        return None
                    return ("a timer unit whose message (commit-log offset %d, %d bytes) lies past the commit log's "
                            "end %d" % (unit.commit_log_offset, unit.msg_size, cl_end))

                tl = TimerLog.open(os.path.join(self.root, "timerlog"), file_size, flush_pos, on_unit=revise,
                                   valid=kept)
            except BaseException:
                wheel.close(flush=False)
                raise
            self.checkpoint, self.wheel, self.timer_log = cp, wheel, tl
            self._enqueuer = TimerEnqueue(wheel.raw, wheel.dirty_map, self.slots_total, self.precision_ms,
                                          self.roll_window_slots)
            try:
                self._recover(cp, wheel, tl)
            except BaseException:
                self.checkpoint = self.wheel = self.timer_log = self._enqueuer = None
                wheel.close(flush=False)
                tl.close()
                raise

    def _recover(self, cp: TimerCheckpoint, wheel: TimerWheel, tl: TimerLog) -> None:
        end = tl.max_offset
        revised = self._revise_queue_offset(tl)
        offset = cp.last_timer_queue_offset if revised < 0 else max(revised + 1, cp.last_timer_queue_offset)
        cq = self.cq_store.find(TIMER_TOPIC, 0)
        if cq is not None:
            low, high = cq.get_min_offset_in_queue(), cq.get_max_offset_in_queue()
            if not low <= offset <= high:
                log.warning("%s: timer queue offset %d outside the timer queue [%d, %d]; moved into it",
                            self.root, offset, low, high)
                offset = min(max(offset, low), high)
        self.curr_queue_offset = self.commit_queue_offset = offset
        now = self._format(self.clock())
        read = cp.last_read_time_ms
        oldest = now - self.slots_total * self.precision_ms + TIMER_BLANK_SLOTS * self.precision_ms
        if end == tl.min_offset:
            read = max(read, now)       # no unit at all: nothing before now is pending
        read = max(read, oldest)
        occupied = wheel.occupied(read)
        min_first = min((s.first_pos for s in occupied if s.last_pos >= end), default=end)
        if min_first < end:
            # the wheel points past the log's end (RocketMQ: "Timer recheck because of minFirst")
            log.warning("%s: timer wheel slots point past the timer log's end %d; revising from %d",
                        self.root, end, min_first)
            tl.recover(min_first, on_unit=lambda pos, unit: wheel.revise_slot(unit.delayed_time_ms, IGNORE, pos,
                                                                               True), check=False)
            occupied = wheel.occupied(read)
        for slot in occupied:
            wheel.get_slot_checked(slot.time_ms, end)      # still past the end: damage, refused
        self.curr_read_time_ms = self.commit_read_time_ms = read
        self.curr_write_time_ms = max(now, read)
        pending = [s.time_ms for s in occupied if s.time_ms >= read]
        self._pending_hi = max(pending, default=read)
        self._prepare_checkpoint(tl.flushed_where, read, offset)
        log.info("%s: timer store recovered: read time %d, queue offset %d (checkpoint %d), timer log end %d, "
                 "%d slots pending", self.root, read, offset, cp.last_timer_queue_offset, end, len(pending))

    def _revise_queue_offset(self, tl: TimerLog) -> int:
        """``reviseQueueOffset``: the timer-queue offset of the message of the log's last unit, -1 when there is
        none or the queue does not hold it there."""
        end = tl.max_offset
        at = end - UNIT_SIZE
        if at < tl.min_offset or (end % tl.file_size) < UNIT_SIZE:
            return -1
        try:
            unit = tl.read_unit(at)
        except StoreCorruptedError:
            return -1
        ext = self.commitlog.look_message_by_offset(unit.commit_log_offset)
        if ext is None:
            return -1
        cq = self.cq_store.find(TIMER_TOPIC, 0)
        if cq is None:
            return -1
        buf = cq.get_index_buffer(ext.queue_offset)
        if buf is None:
            return -1
        mf, start, _ = buf
        if not mf.hold():
            return -1
        try:
            phy, size, _ = read_unit(mf, start)
        finally:
            mf.release()
        return ext.queue_offset if (phy, size) == (unit.commit_log_offset, unit.msg_size) else -1

    # -- time --------------------------------------------------------------------------------------

    def _format(self, time_ms: int) -> int:
        return time_ms // self.precision_ms * self.precision_ms

    def maybe_move_write_time(self) -> None:
        now = self._format(self.clock())
        if self.curr_write_time_ms < now:
            self.curr_write_time_ms = now
            # a slot became readable: the dequeue thread reads it now, not at the end of its idle wait
            wake = self.wake_dequeue
            if wake is not None:
                wake()

    # -- enqueue -----------------------------------------------------------------------------------

    def note_timer_put(self) -> None:
        """The put hook rewrote a timer message (its unit follows once it is dispatched)."""
        self.expecting = True
        wake = self.wake_enqueue
        if wake is not None:
            wake()

    def idle_wait_ms(self) -> float:
        """How long the enqueue and dequeue threads wait when there is nothing to do: RocketMQ's
        ``100 * precision / 1000`` ms once the store has timer messages, but never past the next tick (pystore:
        the enqueue thread then moves the write time at the tick and wakes the dequeue thread, so a slot is read
        as soon as it is due instead of up to two waits later: RocketMQ delivers up to ~200 ms past a tick); 1 s
        before the store has timer messages (a store that never takes a timer should not wake two threads ten
        times a second beside its puts)."""
        if self.opened or self.expecting:
            now = self.clock()
            to_tick = self._format(now) + self.precision_ms - now
            return min(100 * self.precision_ms / 1000, to_tick + 0.5)
        return 1000

    def enqueue(self) -> bool:
        """Enqueue what the timer queue holds from ``curr_queue_offset`` (up to a batch); whether anything was."""
        if self.config.timer_stop_enqueue or self.closed:
            return False
        cq = self.cq_store.find(TIMER_TOPIC, 0)
        if cq is None:
            self.maybe_move_write_time()
            return False
        low = cq.get_min_offset_in_queue()
        if self.curr_queue_offset < low:
            log.warning("%s: timer queue offset %d below the queue's min %d", self.root, self.curr_queue_offset, low)
            self.curr_queue_offset = low
        if cq.get_max_offset_in_queue() <= self.curr_queue_offset:
            self.commit_queue_offset = self.curr_queue_offset
            self.maybe_move_write_time()
            return False
        self._open()            # the first timer message makes the files
        offset = self.curr_queue_offset
        buf = cq.get_index_buffer(offset)
        if buf is None:
            self.maybe_move_write_time()
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
        self.maybe_move_write_time()
        return done > 0

    def _enqueue_run(self, cq_file: MappedFile, start: int, end: int) -> tuple[int, int]:
        """The compiled enqueue of the timer queue's units ``[start, end)`` of ``cq_file`` (``_enqueue``), under the
        store's, the timer log's and the wheel's locks: (units consumed, why it stopped)."""
        cl = self.commitlog.queue
        with self._lock:
            tl, wheel, run = self.timer_log, self.wheel, self._enqueuer
            if tl is None or wheel is None or run is None:
                return 0, PYTHON
            with tl.append_lock, wheel.lock:
                n, why, hi = run.run(cq_file, start, end, cl.files, cl.mapped_file_size, tl.last_file(),
                                     self.curr_write_time_ms, self.config.check_crc_on_read)
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
        if delayed < self.curr_write_time_ms:
            self._deliver(ext, NEVER_ENQUEUED, MAGIC_DEFAULT, set())      # already due: straight to its topic
            return
        self.do_enqueue(phy, size, delayed, ext)

    def do_enqueue(self, phy: int, size: int, delayed: int, ext: MessageExt) -> int:
        """``doEnqueue``: append the unit of ``ext`` (due at ``delayed``) and link it into its slot; its position."""
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

    # -- dequeue -----------------------------------------------------------------------------------

    def dequeue(self) -> int:
        """One tick of the wheel: -1 nothing to read yet, 0 an empty slot passed, 1 a slot delivered."""
        if self.config.timer_stop_dequeue or self.closed or self.wheel is None:
            return -1
        if self.curr_read_time_ms >= self.curr_write_time_ms:
            return -1
        read = self.curr_read_time_ms
        slot = self.wheel.get_slot(read)
        if slot.empty:
            self._move_read_time()
            return 0
        assert self.timer_log is not None
        units = list(self.timer_log.walk(slot.last_pos, read, self.precision_ms))
        if not units:
            log.warning("%s: dequeue time %d but read nothing from the timer log", self.root, read)
        deletes: set[str] = set()
        normal: list[TimerUnit] = []
        for _, unit in units:
            if unit.magic & MAGIC_DELETE and not unit.magic & MAGIC_ROLL:
                ext = self.look(unit.commit_log_offset)
                key = ext.properties.get(TIMER_DEL_UNIQKEY) if ext is not None else None
                if key is not None:
                    deletes.add(key)
            else:
                normal.append(unit)
        for unit in reversed(normal):                 # oldest first, as they were enqueued
            if self.closed:
                return -1
            ext = self.look(unit.commit_log_offset)
            if ext is None:
                log.error("%s: timer slot %d: no readable message at commit-log offset %d; skipped", self.root,
                          read, unit.commit_log_offset)
                continue
            self._deliver(ext, unit.write_time_ms, unit.magic, deletes)
        crashpoint("timer.delivered")
        self._move_read_time()
        return 1

    def skip_slot(self) -> None:
        """Move past the slot being read after an error (``timer_skip_unknown_error``: its messages are lost)."""
        if self.wheel is not None and self.curr_read_time_ms < self.curr_write_time_ms:
            log.error("%s: timer slot %d skipped after an error", self.root, self.curr_read_time_ms)
            self._move_read_time()

    def _move_read_time(self) -> None:
        self.curr_read_time_ms += self.precision_ms
        self.commit_read_time_ms = self.curr_read_time_ms

    def _deliver(self, ext: MessageExt, enqueue_time: int, magic: int, deletes: set[str]) -> None:
        """Put a due (or rolled) message, unless a delete marker of its slot cancelled it
        (``TimerDequeueGetMessageService`` + ``TimerDequeuePutMessageService``)."""
        roll = bool(magic & MAGIC_ROLL)
        props = ext.properties
        uniq = props.get(MessageConst.UNIQ_KEY)
        real_topic = props.get(MessageConst.REAL_TOPIC)
        if deletes and uniq is not None and real_topic is not None and build_delete_key(real_topic, uniq) in deletes:
            log.debug("%s: timer message %s of %s cancelled", self.root, uniq, real_topic)
            return
        if not roll and TIMER_DEL_UNIQKEY in props:
            log.warning("%s: a timer delete marker reached delivery (its message is not in its slot): dropped",
                        self.root)
            return
        try:
            msg = self.convert(ext, enqueue_time, roll)
        except ValueError:
            log.exception("%s: the timer message at %d cannot be delivered; dropped", self.root,
                          ext.commit_log_offset)
            return
        attempts = 0
        while not self.closed:
            result = self.do_put(msg)
            if result != PUT_NEED_RETRY:
                return
            attempts += 1
            if not self.config.timer_enable_retry_until_success and attempts >= 3:
                log.error("%s: delivering the timer message at %d failed %d times; dropped", self.root,
                          ext.commit_log_offset, attempts)
                return
            threading.Event().wait(0.5 * self.precision_ms / 1000)

    def convert(self, ext: MessageExt, enqueue_time: int, roll: bool) -> Message:
        """``convert`` + ``convertMessage``: the message to put for a due or rolled unit."""
        props = ext.properties
        if enqueue_time != -1:
            props[TIMER_ENQUEUE_MS] = str(enqueue_time)
        if roll:
            props[TIMER_ROLL_TIMES] = str(int(props.get(TIMER_ROLL_TIMES, "0")) + 1)
        props[TIMER_DEQUEUE_MS] = str(self.clock())
        if roll:
            topic, queue_id = ext.topic, ext.queue_id
        else:
            topic = props.pop(MessageConst.REAL_TOPIC, "")
            qid = props.pop(MessageConst.REAL_QID, "")
            if not topic or not qid:
                raise ValueError("no %s/%s property" % (MessageConst.REAL_TOPIC, MessageConst.REAL_QID))
            queue_id = int(qid)
        return Message(topic, ext.body, flag=ext.flag, properties=props, queue_id=queue_id,
                       born_timestamp=ext.born_timestamp, born_host=ext.born_host,
                       sys_flag=ext.sys_flag & ~(SysFlag.BORNHOST_V6_FLAG | SysFlag.STOREHOSTADDRESS_V6_FLAG),
                       reconsume_times=ext.reconsume_times)

    def do_put(self, msg: Message) -> int:
        """``doPut``: PUT_OK, PUT_NO_RETRY (the message can never be stored: dropped with a warning) or
        PUT_NEED_RETRY; raises ``NotTakingPuts`` when the store takes no puts now."""
        result = self.put(msg)
        wakeup = self.flush_wakeup
        if wakeup is not None:
            wakeup()
        if result.status in _STORED:
            return PUT_OK
        if result.status is PutMessageStatus.SERVICE_NOT_AVAILABLE:
            raise NotTakingPuts("%s: the store takes no puts now (%s)" % (self.root, result.reason))
        if result.status in _NO_RETRY:
            log.warning("%s: timer message to %s refused (%s: %s); dropped", self.root, msg.topic, result.status,
                        result.reason)
            return PUT_NO_RETRY
        if result.status is PutMessageStatus.UNKNOWN_ERROR and self.config.timer_skip_unknown_error:
            return PUT_NO_RETRY
        log.warning("%s: timer message to %s not stored (%s); retrying", self.root, msg.topic, result.status)
        return PUT_NEED_RETRY

    # -- checkpoint, flush, stats ------------------------------------------------------------------

    def _prepare_checkpoint(self, flushed_pos: int, read_time_ms: int, queue_offset: int) -> None:
        """``prepareTimerCheckPoint`` (a master: the master offset is its own)."""
        cp = self.checkpoint
        assert cp is not None
        cp.last_timer_log_flush_pos = flushed_pos
        cp.last_read_time_ms = read_time_ms
        cp.master_timer_queue_offset = queue_offset
        if (read_time_ms, queue_offset) != self._last_commit:
            cp.update_data_version(0)
            self._last_commit = (read_time_ms, queue_offset)
        cp.last_timer_queue_offset = min(queue_offset, cp.master_timer_queue_offset)

    def flush(self) -> None:
        """``TimerFlushService``'s pass: the commit log, the timer log, then the wheel, then the checkpoint.

        The read time and queue offset the checkpoint records are taken first. The commit log is then made durable
        up to its end: it holds the deliveries of every slot before that read time and the timer messages below
        that queue offset, so a crash cannot take back what the checkpoint counts as delivered (a slot it counts
        as read is never read again: its lost deliveries would be lost timers) or as enqueued (a unit would point
        at a record the crash took back, and at whatever a later put writes there). RocketMQ flushes only the
        timer files here; with ASYNC_FLUSH its checkpoint can run ahead of the commit log. The enqueue waits
        meanwhile, so the timer log flushed holds no unit whose record the commit log has not flushed, the wheel
        written never points at a unit the log has not flushed, and the queue offset recorded was enqueued into
        what was flushed."""
        with self._lock:
            if self.wheel is None or self.timer_log is None or self.checkpoint is None:
                return
            read, offset = self.commit_read_time_ms, self.commit_queue_offset
            # under the lock: no unit is appended meanwhile, so every unit the timer log flushes below points at
            # a record the commit log has flushed (recovery cuts a unit whose record a crash took back)
            self._flush_commitlog(self.commitlog.get_max_offset())
            flushed = self.timer_log.flush()
            self.wheel.flush()
            crashpoint("timer.flushed")
            self._prepare_checkpoint(flushed, read, offset)
            self.checkpoint.flush()
            crashpoint("timer.checkpoint")

    def _flush_commitlog(self, end: int) -> None:
        """Make the commit log durable up to ``end`` (``flush_commitlog`` when the wiring set one: SYNC_FLUSH's
        group commit, which also dispatches what it flushed); ``OSError`` when it is not, and the checkpoint is
        not written."""
        flush = self.flush_commitlog
        if flush is not None:
            ok = flush(end)
        else:
            queue = self.commitlog.queue
            for _ in range(len(queue.files) + 2):
                if queue.flushed_where >= end:
                    break
                queue.commit(0)
                queue.flush(0)
            ok = queue.flushed_where >= end
        if not ok:
            raise OSError("%s: the commit log is not flushed to %d: the timer checkpoint waits" % (self.root, end))

    def delete_expired(self) -> int:
        """Timer-log files whose units all point below the commit log's first offset (the clean service's
        ``deleteExpiredFileByOffsetForTimerLog``)."""
        tl = self.timer_log
        low = self.commitlog.get_min_offset()
        if tl is None or low <= 0:
            return 0
        return tl.delete_expired(low)

    def stats(self) -> dict[str, Any]:
        """``pending`` (units in the slots not read yet, delete markers counting -1, as ``getAllCongestNum``),
        ``next_due_ms`` (when the earliest of them becomes due, None if none), ``lag_ms`` (how far the dequeue is
        behind now, ``getDequeueBehindMillis``), and the positions."""
        now = self.clock()
        units, first = self._pending()
        cq = self.cq_store.find(TIMER_TOPIC, 0)
        queued = 0 if cq is None else max(0, cq.get_max_offset_in_queue() - self.curr_queue_offset)
        return {
            "pending": units + queued,
            "next_due_ms": first + self.precision_ms if first >= 0 else None,
            "lag_ms": max(0, self._format(now) - self.curr_read_time_ms),
            "enqueue_behind": queued,
            "read_time_ms": self.curr_read_time_ms,
            "write_time_ms": self.curr_write_time_ms,
            "queue_offset": self.curr_queue_offset,
            "timer_log_end": 0 if self.timer_log is None else self.timer_log.max_offset,
        }

    def next_due_ms(self) -> int | None:
        """When the earliest message waiting in the wheel becomes deliverable (its slot's time plus a tick: the
        dequeue reads a slot once the write time is past it), None when nothing waits."""
        first = self._pending()[1]
        return first + self.precision_ms if first >= 0 else None

    def _pending(self) -> tuple[int, int]:
        """The wheel's slots from the read time to the latest enqueued (``wheel_pending``, without the GIL): the sum of
        their counts and the time of the first with a positive count (-1 if none)."""
        wheel = self.wheel
        if wheel is None:
            return 0, -1
        units, first = wheel_pending(wheel.raw, self.slots_total, self.precision_ms, self.curr_read_time_ms,
                                     self._pending_hi)
        return int(units), int(first)

    def slot_num(self, deliver_ms: int) -> int:
        """``getCongestNum``: the unit count of the slot of ``deliver_ms`` (0 before the files exist)."""
        wheel = self.wheel
        return 0 if wheel is None else wheel.get_num(deliver_ms)

    def close(self) -> None:
        """``shutdown``: the last checkpoint, the files flushed and closed."""
        self.closed = True
        with self._lock:
            if self.wheel is None:
                return
            try:
                self.flush()
            except OSError:
                log.exception("%s: the last flush of the timer store failed", self.root)
            assert self.timer_log is not None
            self.wheel.close(flush=False)
            self.timer_log.close()
            self.wheel = None
            self.timer_log = None
            self.checkpoint = None
            self._enqueuer = None


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []

