"""The timer store's files over time: open and recover them (``load``), flush them in order and write the checkpoint
(``flush``), clean the timer log's head, close (RocketMQ ``TimerMessageStore``: ``load``, ``recover``,
``recoverAndRevise``, ``reviseQueueOffset``, ``prepareTimerCheckPoint``, ``TimerFlushService``, ``shutdown``).

The flush (every ``timer_flush_interval_ms``, and at close), under the enqueue lock: the read time and queue offset
taken, then::

    commit log (to its end: the deliveries and timer messages the checkpoint will count; pystore's, see ``flush``)
      ->  timer log  ->  wheel  ->  config/timercheck (lastReadTimeMs = commitReadTimeMs, lastTimerLogFlushPos =
          what the log flushed, lastTimerQueueOffset = masterTimerQueueOffset = the next queue offset to enqueue;
          the data version moves when either changed)

Recovery (``load``): the timer log is scanned from one file before the checkpoint's flushed position (a cut below
that position is refused: ``StoreCorruptedError``), each unit revising its slot's lastPos; the queue offset resumes
after the message of the log's last unit when that unit is found in the timer queue (units flushed after the
checkpoint are not enqueued twice), else at the checkpoint's; the read time resumes at ``lastReadTimeMs`` (never
before now minus the wheel's span), and no slot is read before the enqueue has taken in the timer queue to the end
it has at the open (pystore's: the units and delete markers due in the slots the reopened store catches up with are
linked into them, not delivered at once). A slot that still points past the log's end is damage:
``StoreCorruptedError(wheel path, slot offset)``. Delivery is at least once, as RocketMQ's: slots read after the last
checkpoint are read again after a crash, and their messages put again; a slot the checkpoint counts as read is never
read again.

The files are created when the first message reaches ``rmq_sys_wheel_timer`` (RocketMQ creates them at start: a
store that never takes a timer has none of their 38.7 MB wheel).
"""

from __future__ import annotations

import os

from pystore.errors import StoreCorruptedError
from pystore.queue._units import read_unit
from pystore.system.crashpoint import crashpoint
from pystore.timer._dequeue import SlotWalk
from pystore.timer._enqueue import TimerEnqueue
from pystore.timer.timer_checkpoint import TimerCheckpoint, checkpoint_path
from pystore.timer.timer_log import UNIT_SIZE, TimerLog, TimerUnit, offset_for_last_unit
from pystore.timer.timer_state import TIMER_TOPIC, TimerState, log
from pystore.timer.timer_wheel import IGNORE, TIMER_BLANK_SLOTS, TimerWheel

__all__ = ["TimerFiles"]


class TimerFiles(TimerState):
    """Recovery, flush, checkpoint, cleaning and close of one timer store's files."""

    def load(self) -> None:
        """Open and recover the files if the store has them; otherwise they are made by the first enqueue."""
        if self.files_exist():
            self._open()
        else:
            now = self._format(self.clock())
            self.curr_write_time_ms = self.curr_read_time_ms = self.commit_read_time_ms = self.unread_from_ms = now

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
            self.put_link.set_wheel(wheel.raw, self.slots_total, self.precision_ms)
            self._enqueuer = TimerEnqueue(wheel.raw, wheel.dirty_map, self.slots_total, self.precision_ms,
                                          self.roll_window_slots)
            self._walker = SlotWalk(file_size, self.precision_ms)
            try:
                self._recover(cp, wheel, tl)
            except BaseException:
                self.checkpoint = self.wheel = self.timer_log = self._enqueuer = self._walker = None
                self.put_link.set_wheel(None, 0, 0)
                wheel.close(flush=False)
                tl.close()
                raise
            self.recovered = True

    def _recover(self, cp: TimerCheckpoint, wheel: TimerWheel, tl: TimerLog) -> None:
        end = tl.max_offset
        revised = self._revise_queue_offset(tl)
        offset = cp.last_timer_queue_offset if revised < 0 else max(revised + 1, cp.last_timer_queue_offset)
        cq = self.cq_store.find(TIMER_TOPIC, 0)
        gate = offset
        if cq is not None:
            low, high = cq.get_min_offset_in_queue(), cq.get_max_offset_in_queue()
            if not low <= offset <= high:
                log.warning("%s: timer queue offset %d outside the timer queue [%d, %d]; moved into it",
                            self.root, offset, low, high)
                offset = min(max(offset, low), high)
            gate = high
        self.curr_queue_offset = self.commit_queue_offset = offset
        # no slot is read before the enqueue took in what the timer queue holds (the puts and the rolled copies put
        # again after the checkpoint): a timer and its delete marker are read in one slot however late they are
        self.read_gate_offset = gate
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
        self.curr_read_time_ms = self.commit_read_time_ms = self.unread_from_ms = read
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
        rel = end % tl.file_size
        if rel == 0:
            # the log ends at a file's start: its last unit is the one before the blank that closed the file before
            at = end - tl.file_size + offset_for_last_unit(tl.file_size)
        elif rel < UNIT_SIZE:
            return -1
        else:
            at = end - UNIT_SIZE
        if at < tl.min_offset:
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

    # -- checkpoint, flush ---------------------------------------------------------------------------

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
        ``deleteExpiredFileByOffsetForTimerLog``); with an archive, below the archive's first offset, since the
        dequeue still reads the records the archive holds."""
        tl = self.timer_log
        low = self.readable_from()
        if tl is None or low <= 0:
            return 0
        return tl.delete_expired(low)

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
            self.put_link.set_wheel(None, 0, 0)
            self.wheel.close(flush=False)
            self.timer_log.close()
            self.recovered = False
            self.wheel = None
            self.timer_log = None
            self.checkpoint = None
            self._enqueuer = None
            self._walker = None
