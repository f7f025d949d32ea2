"""The timer store's dequeue: delivery of the wheel's due slots (RocketMQ ``TimerMessageStore``:
``TimerDequeueGetService``, ``TimerDequeueGetMessageService``, ``TimerDequeuePutMessageService``, ``dequeue``,
``convert``, ``doPut``).

One slot per tick, while ``currReadTimeMs < currWriteTimeMs`` and the enqueue has taken in the timer queue up to
``read_gate_offset``::

    the slot begun: unread_from_ms := currReadTimeMs + precision (the enqueue links no unit into it any more)
    walk the slot's units newest to oldest (TimerLog.walk, bounded and checked)
    delete markers (MAGIC_DELETE without MAGIC_ROLL): their TIMER_DEL_UNIQKEY ("topic+uniq key") collected
    the others, oldest first: a message whose "REAL_TOPIC+UNIQ_KEY" was collected is dropped (cancelled);
      MAGIC_ROLL -> re-put to rmq_sys_wheel_timer queue 0 with TIMER_ROLL_TIMES + 1 (it waits again;
                    read_gate_offset := past its queue offset)
      else       -> put to REAL_TOPIC / REAL_QID (both properties removed), TIMER_ENQUEUE_MS = the unit's
                    write time, TIMER_DEQUEUE_MS = now
    currReadTimeMs += precision once the whole slot is put (commitReadTimeMs with it)

What runs in C (:mod:`pystore.timer._dequeue`): the walk and the delivery of the ordinary units.
``SlotWalk.walk`` follows the slot's list without the GIL, checked as ``TimerLog.walk`` checks it (a unit that does
not check out: the Python walk runs instead and raises ``StoreCorruptedError`` with the file and offset).
``SlotWalk.deliver`` takes the walked units oldest first, up to ``_RUN`` a call, and puts each ordinary unit's
delivery straight from its record into the commit log, in chunks of up to 256 under the put lock (the delivery's
bytes are those ``convert`` and the store's put write; ``TIMER_DEQUEUE_MS`` is read once a chunk), so the first
message of a slot goes out a few milliseconds after the slot is due whatever its size. It hands back to Python at
every unit that is not the common case: the delete markers' keys are read by Python before the run (the run passes
over the markers), a rolled unit, a cancelled message, a record not in the local commit log or that does not check
out, properties or fields that Python would not write back the same way, a store that takes no puts or a page
cache busy. Python delivers that unit through ``_deliver`` as it always did (retries, drops and their logging
included), then the run goes on. The whole slot goes through Python (``_dequeue_python``) when the store's put or
read is not the commit log's own (an archive below the log, a test's put).

pystore's choices: one dequeue thread (RocketMQ hands requests between its get and put threads through queues; the
order of the puts is the same); it delivers itself, so ``timer_skip_unknown_error``,
``timer_enable_retry_until_success`` and the three put attempts behave as in ``TimerDequeuePutMessageService``; a
store that takes no puts now raises ``NotTakingPuts`` and the slot stays unread. The gate and the slot's beginning
are pystore's too (RocketMQ reads a slot once the write time is past it): the next slot is read only once the
enqueue has linked the copies of those before it that were put again (a rolled timer and its delete marker, put
again from two slots, meet in the slot of their time however late the catch-up of a reopened store puts them),
and what the timer queue held at the open (timer_enqueue.py; docs/powerloss.md, "Timers").

One thread dequeues at a time, beside the enqueue (``currWriteTimeMs`` is moved by the enqueue only, and the dequeue
reads only slots before it).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from pystore.message._message import Message
from pystore.message._message_ext import MessageExt
from pystore.message.constants import MessageConst, SysFlag
from pystore.status import PutMessageStatus
from pystore.system.crashpoint import crashpoint
from pystore.system.service import real_clock
from pystore.timer._dequeue import PYTHON, SlotWalk
from pystore.timer.timer_flush import TimerFiles
from pystore.timer.timer_log import MAGIC_DELETE, MAGIC_ROLL, TimerUnit
from pystore.timer.timer_state import (
    NO_RETRY,
    PUT_NEED_RETRY,
    PUT_NO_RETRY,
    PUT_OK,
    STORED,
    TIMER_DEL_UNIQKEY,
    TIMER_DEQUEUE_MS,
    TIMER_ENQUEUE_MS,
    TIMER_ROLL_TIMES,
    TIMER_TOPIC,
    NotTakingPuts,
    build_delete_key,
    log,
)

if TYPE_CHECKING:
    from pystore.log._results import PutMessageResult

__all__ = ["TimerDelivery"]

#: units per call of the compiled delivery (``SlotWalk.deliver``): the store's closing is looked at between calls
_RUN = 4096


class TimerDelivery(TimerFiles):
    """The dequeue of one timer store: ``dequeue()`` reads one slot; ``convert`` and ``do_put`` are RocketMQ's."""

    def dequeue(self) -> int:
        """One tick of the wheel: -1 nothing to read yet, 0 an empty slot passed, 1 a slot delivered."""
        if self.config.timer_stop_dequeue or self.closed or not self.recovered:
            return -1
        if self.curr_read_time_ms >= self.curr_write_time_ms or self.curr_queue_offset < self.read_gate_offset:
            return -1
        read = self.curr_read_time_ms
        with self._slot_lock:
            self.unread_from_ms = read + self.precision_ms      # begun: a unit due in it now is delivered at once
        try:
            done = self._read_slot(read)
        except BaseException:
            self._unbegin(read)
            raise
        if done == -1:
            self._unbegin(read)
            return -1
        if done == 1:
            crashpoint("timer.delivered")
        self._move_read_time()
        return done

    def _unbegin(self, read: int) -> None:
        """The slot of ``read`` stays unread (read again from its first unit): the enqueue may link into it again."""
        with self._slot_lock:
            if self.curr_read_time_ms == read:
                self.unread_from_ms = read

    def _read_slot(self, read: int) -> int:
        """Deliver the slot of ``read``: 0 empty, 1 delivered, -1 the store closed meanwhile."""
        assert self.wheel is not None
        slot = self.wheel.get_slot(read)
        if slot.empty:
            return 0
        tl, walker = self.timer_log, self._walker
        assert tl is not None
        done = -2
        if walker is not None and self._compiled_delivery():
            n = walker.walk(tl.queue.files, slot.last_pos, tl.min_offset, tl.max_offset, read, slot.num)
            if n >= 0:                      # else damage: the Python walk says where (StoreCorruptedError)
                done = self._deliver_walked(walker, n, read)
        if done == -2:
            done = self._dequeue_python(read, slot.last_pos)
        return done

    def _compiled_delivery(self) -> bool:
        """Whether the slot's ordinary units may be delivered in C (``_dequeue``): the timer store puts through the
        commit log's own put and reads the local commit log (no archive below it, no put or read of a test's)."""
        cl = self.commitlog
        return self.put == cl.append_message and self.look == cl.look_message_by_offset

    def _deliver_walked(self, walker: SlotWalk, n: int, read: int) -> int:
        """Deliver the ``n`` units ``walker`` walked (oldest first): runs of ordinary units in C
        (``SlotWalk.deliver``, up to ``_RUN`` units a call), every other unit through ``_deliver``, as
        ``_dequeue_python`` would. -1 when the store closed meanwhile, else 1."""
        if n == 0:
            log.warning("%s: dequeue time %d but read nothing from the timer log", self.root, read)
        deletes = self._delete_keys(walker.delete_offsets()) if walker.deletes else set()
        self._cancelled.clear()
        keys = frozenset(k.encode("utf-8", "surrogatepass") for k in deletes) or None
        cl = self.commitlog
        clock = None if self.clock is real_clock else self.clock
        check_crc = bool(self.config.check_crc_on_read)
        i = 0
        while i < n:
            if self.closed:
                return -1
            done, why, put = walker.deliver(cl.core, cl.queue.files, cl.queue.mapped_file_size, i, min(n, i + _RUN),
                                            clock, check_crc, keys)
            if put:
                wakeup = self.flush_wakeup
                if wakeup is not None:
                    wakeup()
            i += done
            if why == PYTHON and i < n:
                phy, _, magic, write_ms = walker.unit(i)
                i += 1
                if magic & MAGIC_DELETE and not magic & MAGIC_ROLL:
                    continue
                ext = self.look(phy)
                if ext is None:
                    log.error("%s: timer slot %d: no readable message at commit-log offset %d; skipped", self.root,
                              read, phy)
                    continue
                self._deliver(ext, write_ms, magic, deletes)
        self._unmatched(read, deletes)
        return 1

    def _unmatched(self, read: int, deletes: set[str]) -> None:
        """Say which delete markers of the slot just read cancelled nothing: a key no message due in that tick
        carries (never put, delivered already, or due at another time). RocketMQ drops such a marker without a
        word; here it is logged and counted (``timer_stats()["cancels_unmatched"]``)."""
        for key in sorted(deletes - self._cancelled):
            self.cancels_unmatched += 1
            log.info("%s: timer slot %d: the delete marker for %r cancelled nothing (no message with that key was "
                     "due in its tick)", self.root, read, key)

    def _delete_keys(self, offsets: list[int]) -> set[str]:
        """The ``TIMER_DEL_UNIQKEY`` of the delete markers at these commit-log offsets."""
        deletes: set[str] = set()
        for phy in offsets:
            ext = self.look(phy)
            key = ext.properties.get(TIMER_DEL_UNIQKEY) if ext is not None else None
            if key is not None:
                deletes.add(key)
        return deletes

    def _dequeue_python(self, read: int, last_pos: int) -> int:
        """The slot of ``read`` (whose list ends at ``last_pos``) unit by unit in Python (``TimerLog.walk``, then
        ``_deliver`` per unit): -1 when the store closed meanwhile, else 1."""
        assert self.timer_log is not None
        units = list(self.timer_log.walk(last_pos, read, self.precision_ms))
        if not units:
            log.warning("%s: dequeue time %d but read nothing from the timer log", self.root, read)
        normal: list[TimerUnit] = []
        markers: list[int] = []
        for _, unit in units:
            if unit.magic & MAGIC_DELETE and not unit.magic & MAGIC_ROLL:
                markers.append(unit.commit_log_offset)
            else:
                normal.append(unit)
        deletes = self._delete_keys(markers)
        self._cancelled.clear()
        for unit in reversed(normal):                 # oldest first, as they were enqueued
            if self.closed:
                return -1
            ext = self.look(unit.commit_log_offset)
            if ext is None:
                log.error("%s: timer slot %d: no readable message at commit-log offset %d; skipped", self.root,
                          read, unit.commit_log_offset)
                continue
            self._deliver(ext, unit.write_time_ms, unit.magic, deletes)
        self._unmatched(read, deletes)
        return 1

    def skip_slot(self) -> None:
        """Move past the slot being read after an error (``timer_skip_unknown_error``: its messages are lost)."""
        if self.wheel is not None and self.curr_read_time_ms < self.curr_write_time_ms:
            log.error("%s: timer slot %d skipped after an error", self.root, self.curr_read_time_ms)
            self._move_read_time()

    def _move_read_time(self) -> None:
        with self._slot_lock:
            self.curr_read_time_ms += self.precision_ms
            self.commit_read_time_ms = self.curr_read_time_ms
            if self.unread_from_ms < self.curr_read_time_ms:
                self.unread_from_ms = self.curr_read_time_ms

    def _deliver(self, ext: MessageExt, enqueue_time: int, magic: int, deletes: set[str]) -> None:
        """Put a due (or rolled) message, unless a delete marker of its slot cancelled it
        (``TimerDequeueGetMessageService`` + ``TimerDequeuePutMessageService``)."""
        roll = bool(magic & MAGIC_ROLL)
        props = ext.properties
        uniq = props.get(MessageConst.UNIQ_KEY)
        real_topic = props.get(MessageConst.REAL_TOPIC)
        key = build_delete_key(real_topic, uniq) if deletes and uniq is not None and real_topic is not None else None
        if key is not None and key in deletes:
            log.debug("%s: timer message %s of %s cancelled", self.root, uniq, real_topic)
            self._cancelled.add(key)
            return
        if not roll and TIMER_DEL_UNIQKEY in props:
            log.warning("%s: a timer delete marker reached the enqueue after its slot was read: dropped (too late)",
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

    def _gate_past(self, result: PutMessageResult) -> None:
        """A rolled copy was put again: no later slot is read before the enqueue has linked it (it may be due in
        one of them, with its delete marker)."""
        amr = result.append_message_result
        if amr is not None:
            end = amr.logics_offset + 1
        else:                                   # a put that does not say where: the timer queue's end now
            cq = self.cq_store.find(TIMER_TOPIC, 0)
            end = 0 if cq is None else cq.get_max_offset_in_queue()
        if end > self.read_gate_offset:
            self.read_gate_offset = end
        wake = self.wake_enqueue
        if wake is not None:
            wake()

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
        if result.status in STORED:
            if msg.topic == TIMER_TOPIC:
                self._gate_past(result)
            return PUT_OK
        if result.status is PutMessageStatus.SERVICE_NOT_AVAILABLE:
            raise NotTakingPuts("%s: the store takes no puts now (%s)" % (self.root, result.reason))
        if result.status in NO_RETRY:
            log.warning("%s: timer message to %s refused (%s: %s); dropped", self.root, msg.topic, result.status,
                        result.reason)
            return PUT_NO_RETRY
        if result.status is PutMessageStatus.UNKNOWN_ERROR and self.config.timer_skip_unknown_error:
            return PUT_NO_RETRY
        log.warning("%s: timer message to %s not stored (%s); retrying", self.root, msg.topic, result.status)
        return PUT_NEED_RETRY
