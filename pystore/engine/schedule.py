r"""Delay (schedule) messages: ``SCHEDULE_TOPIC_XXXX`` → the real topic at the due time (docs/format.md §10;
RocketMQ ``ScheduleMessageService``, 4.8 store-side design with 5.x's persist-on-shutdown and load-time
offset correction).

The flow::

    put_message(msg, DELAY=n)                       (tx type NOT or COMMIT, n > 0)
      └─ rewrite (one Python call, the commit log's ``delay_rewrite`` hook)
           n := min(n, max level)                   DELAY rewritten only when capped
           + REAL_TOPIC = msg.topic, REAL_QID = msg.queue_id   (appended, or replaced in place)
           topic := SCHEDULE_TOPIC_XXXX, queue id := n - 1
      └─ stored; dispatch writes the CQ unit with tagsCode = storeTimestamp + delay(n)  (_dispatch, §2.2)

    ScheduleMessageService thread (one timer task per level, as 4.8's java.util.Timer)
      level n, from offset o (offsetTable[n], else 0), first run 1 000 ms after start:
        for each unit (phy, size, tagsCode) of SCHEDULE_TOPIC_XXXX/(n-1) from o to the end of its file:
          deliver := tagsCode, or now when tagsCode > now + delay(n)      (correctDeliverTimestamp)
          not due  → run again after (deliver - now) from this unit; offsetTable[n] := this unit
          due      → messageTimeup(record) put into REAL_TOPIC/REAL_QID  (half-topic messages dropped)
                     put refused → run again after 10 000 ms from this unit; offsetTable[n] := this unit
        end of the file's units → run again after 100 ms; offsetTable[n] := next unit
        no unit at o (the queue is empty or all delivered) → idle: run again after 1 000 ms, or at once
          when dispatch puts a delayed message's unit into a schedule queue (``QueueDispatcher.schedule_wake``)
      offsetTable persisted every flush_delay_offset_interval ms (first after 10 000 ms) and at shutdown

``messageTimeup`` rebuilds the stored record: body, flag, sys flag, born time and host, reconsume times; the
properties string is the stored one re-encoded from its map *before* ``DELAY`` is cleared, so the delivered
record still carries ``DELAY``, ``REAL_TOPIC`` and ``REAL_QID``; ``WAIT=false`` only in the map (the put does
not wait for a flush or a slave, and ``WAIT`` is not in the record); tags code from ``TAGS``. pystore's
``Message`` keeps one property map that is also its string, so the "DELAY cleared in the map" half is carried
by identity: the rewrite hook lets the one message being re-put pass unchanged.

``config/delayOffset.json`` is written as standard JSON (docs/format.md's choice: fastjson writes integer map keys
unquoted, which is not JSON; quoted keys are read by RocketMQ too), in fastjson's pretty layout (tabs, levels
ascending, no trailing newline; only the levels a task has moved, like RocketMQ; ``\t`` is one tab)::

    {
    \t"offsetTable":{"1":3,"2":0,"3":12
    \t}
    }

and ``{\n\t"offsetTable":{}\n}`` while empty. Reading accepts fastjson's bare integer keys as well as
quoted ones, and 5.x's extra ``dataVersion``. Writes go through ``delayOffset.json.tmp`` (fsynced, and the
folder fsynced after the rename that replaces the file: pystore's additions, RocketMQ forces neither), the
previous file is kept as ``delayOffset.json.bak`` (4.8 ``MixAll.string2File``). Loading is RocketMQ's
``ConfigManager.load``: a missing, empty or unparsable file (nested too deeply for the parser included) is read
from the ``.bak``; no ``.bak`` (or an empty one) means an empty table; a ``.bak`` that does not parse either stops
``start()`` with ``StoreError``.

Offsets are persisted at shutdown as in 5.x (4.8's ``shutdown`` only cancels the timer, so a 4.8 broker may
redeliver up to 10 s of delay messages after a clean restart; pystore does not). After a crash, messages
delivered after the last persist are delivered again (at-least-once, as RocketMQ).

Thread-safety: ``rewrite`` may run on any put thread (it only reads); level tasks run under one lock, on the
service thread or through ``deliver_once`` from a caller (tests), never both at once.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from pystore.consumer.config_json import load_config_file, offset_value, persist_config_file, read_offset_table
from pystore.message._message import Message
from pystore.message._message_ext import MessageExt
from pystore.message.constants import SCHEDULE_TOPIC, MessageConst, SysFlag
from pystore.queue._units import FILLER_SIZE, UNIT_SIZE, read_unit
from pystore.status import PutMessageStatus
from pystore.system.service import ServiceThread

if TYPE_CHECKING:
    from pystore.config import StoreConfig
    from pystore.log._results import PutMessageResult
    from pystore.log.commitlog import CommitLog
    from pystore.queue.queue_store import ConsumeQueueStore

__all__ = ["ScheduleMessageService", "delay_level_to_queue_id", "queue_id_to_delay_level",
           "encode_delay_offsets", "decode_delay_offsets"]

log = logging.getLogger(__name__)

#: ms from ``start()`` to each level's first run (RocketMQ ``FIRST_DELAY_TIME``).
FIRST_DELAY_TIME = 1000
#: ms between two runs of a level that reached the end of its queue file (``DELAY_FOR_A_WHILE``).
DELAY_FOR_A_WHILE = 100
#: ms before a level runs again after a failed put or an error (``DELAY_FOR_A_PERIOD``).
DELAY_FOR_A_PERIOD = 10_000
#: ms between two runs of a level with no unit to look at (pystore's; RocketMQ looks every
#: ``DELAY_FOR_A_WHILE``). Dispatch wakes the idle levels at once when a delayed message enters their topic
#: (``wake``), so this bounds only what a message put straight into ``SCHEDULE_TOPIC_XXXX`` waits. An
#: idle store's delay service thus wakes once a second, not ten times: each wake-up takes the GIL from a
#: busy put thread and a core from a consumer spinning beside it.
IDLE_LEVEL_MS = 1000
#: a pass runs the levels due within this many ms of its time, so that levels polling their queues share
#: one wake-up (pystore's; RocketMQ runs one timer task per level)
RUN_TOGETHER_MS = 10
#: ms from ``start()`` to the first persist of the offsets (RocketMQ's ``scheduleAtFixedRate(…, 10000, …)``).
FIRST_PERSIST_DELAY = 10_000
#: Messages of this topic are never delivered (a delayed transaction half message is dropped).
RMQ_SYS_TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
DELAY_OFFSET_FILE = "delayOffset.json"

def delay_level_to_queue_id(level: int) -> int:
    return level - 1


def queue_id_to_delay_level(queue_id: int) -> int:
    return queue_id + 1


def encode_delay_offsets(offset_table: dict[int, int]) -> str:
    """``delayOffset.json`` as standard JSON (docs/format.md's choice: keys quoted, which RocketMQ's fastjson also
    reads), laid out like fastjson's pretty form (tab indent, no trailing newline)."""
    if not offset_table:
        return '{\n\t"offsetTable":{}\n}'
    entries = ",".join('"%d":%d' % (level, offset) for level, offset in sorted(offset_table.items()))
    return '{\n\t"offsetTable":{' + entries + "\n\t}\n}"


def decode_delay_offsets(text: str) -> dict[int, int]:
    """``offsetTable`` of a ``delayOffset.json`` (fastjson's bare integer keys or quoted ones); ValueError if
    the text is not such a document."""
    table: dict[str, object] = read_offset_table(text)
    return {int(key): offset_value(value, "level %s" % key) for key, value in table.items()}


class ScheduleMessageService(ServiceThread):
    """Delay levels of one writable master store (see the module docstring). Created by
    ``MessageStore.start()``: ``load()`` (offsets), then ``start()``; ``shutdown()`` persists.

    The store hands it the commit log it reads and puts into, the consume-queue store holding the schedule
    topic's queues, its config and clock; ``flush_wakeup`` (the group commit's ``wakeup`` under SYNC_FLUSH,
    set once that service exists) is called after each delivery, which waits for no flush."""

    def __init__(self, commitlog: CommitLog, cq_store: ConsumeQueueStore, config: StoreConfig,
                 clock: Callable[[], int] | None = None) -> None:
        super().__init__("ScheduleMessageService", clock)
        self.commitlog = commitlog
        self.cq_store = cq_store
        self.config = config
        self.root = config.store_path_root_dir
        self.flush_wakeup: Callable[[], object] | None = None
        self.delay_level_table: dict[int, int] = config.delay_level_table()
        self.max_delay_level: int = config.max_delay_level()
        self.flush_delay_offset_interval: int = config.flush_delay_offset_interval
        self.path = os.path.join(config.config_path(), DELAY_OFFSET_FILE)
        self.offset_table: dict[int, int] = {}
        # level -> (due ms, offset): the pending timer task of each level
        self._tasks: dict[int, tuple[int, int]] = {}
        self._next_persist = 0
        self._run_lock = threading.Lock()
        self._persist_lock = threading.Lock()
        self._timeup: Message | None = None
        # levels parked by _idle until IDLE_LEVEL_MS, and whether dispatch woke them since the last pass
        self._idle_levels: set[int] = set()
        self._woken = False

    # -- delay arithmetic ----------------------------------------------------------------------------

    def compute_deliver_timestamp(self, delay_level: int, store_timestamp: int) -> int:
        """RocketMQ ``computeDeliverTimestamp``: an unknown level is due one second after storing."""
        delay = self.delay_level_table.get(delay_level)
        if delay is not None:
            return store_timestamp + delay
        return store_timestamp + 1000

    def correct_deliver_timestamp(self, now: int, deliver_timestamp: int, delay_level: int) -> int:
        """A deliver time more than one level-delay ahead of ``now`` (clock moved back) becomes ``now``."""
        if deliver_timestamp > now + self.delay_level_table.get(delay_level, 0):
            return now
        return deliver_timestamp

    # -- put side --------------------------------------------------------------------------------

    def rewrite(self, msg: Message) -> Message:
        """The commit log's ``delay_rewrite`` hook: a copy of ``msg`` bound for the schedule topic (the
        caller's message is left as it was, so it can be put again)."""
        if msg is self._timeup:
            return msg                      # a due message on its way back: DELAY is only in its string
        props = msg.properties
        level = msg.delay_time_level
        if level > self.max_delay_level:
            level = self.max_delay_level
            props[MessageConst.DELAY] = str(level)
        props[MessageConst.REAL_TOPIC] = msg.topic
        props[MessageConst.REAL_QID] = str(msg.queue_id)
        return Message(SCHEDULE_TOPIC, msg.body, flag=msg.flag, properties=props,
                       queue_id=delay_level_to_queue_id(level), born_timestamp=msg.born_timestamp,
                       born_host=msg.born_host, sys_flag=msg.sys_flag, reconsume_times=msg.reconsume_times,
                       prepared_transaction_offset=msg.prepared_transaction_offset)

    # -- offsets file ------------------------------------------------------------------------------

    def load(self) -> None:
        """Read ``config/delayOffset.json`` (or its ``.bak``), then move each level's offset into its queue's
        [min, max] (5.x ``correctDelayOffset``)."""
        self.offset_table = load_config_file(self.path, decode_delay_offsets) or {}
        log.info("%s: delay offsets loaded %s", self.path, self.offset_table)
        self.correct_delay_offset()

    def correct_delay_offset(self) -> None:
        cqs = self.cq_store
        for level, offset in list(self.offset_table.items()):
            if level not in self.delay_level_table:
                continue
            cq = cqs.find(SCHEDULE_TOPIC, delay_level_to_queue_id(level)) if cqs is not None else None
            low, high = (0, 0) if cq is None else (cq.get_min_offset_in_queue(), cq.get_max_offset_in_queue())
            corrected = min(max(offset, low), high)
            if corrected != offset:
                log.error("%s: delay level %d offset %d outside its queue [%d, %d]; corrected to %d",
                          self.root, level, offset, low, high, corrected)
                self.offset_table[level] = corrected

    def persist(self) -> None:
        """Write the offset table (RocketMQ ``ConfigManager.persist``: tmp file, old one kept as ``.bak``)."""
        with self._persist_lock:
            persist_config_file(self.path, encode_delay_offsets(dict(self.offset_table)))

    # -- the timer ---------------------------------------------------------------------------------

    def start(self) -> None:
        """Schedule every level's first run and the periodic persist, then start the thread."""
        now = self.clock()
        with self._run_lock:
            self._tasks = {level: (now + FIRST_DELAY_TIME, self.offset_table.get(level, 0))
                           for level in sorted(self.delay_level_table)}
        self._next_persist = now + FIRST_PERSIST_DELAY
        super().start()

    def run(self) -> None:
        while not self.is_stopped():
            wait = self.run_due()
            # re-read the clock at least every second: it may jump (or be a test's fake clock)
            self.wait_for_running(min(max(wait, 1), 1000))

    def wake(self) -> None:
        """A delayed message's unit entered a schedule queue (dispatch calls this under the put lock, so it
        takes no lock of this service's): the idle levels run at the next pass, which starts now."""
        self._woken = True
        self.wakeup()

    def run_due(self) -> int:
        """Run the level tasks and the persist that are due; ms until the next one is."""
        now = self.clock()
        with self._run_lock:
            if self._woken:
                # cleared before the levels read their queues: a unit dispatched after this read sets it again
                self._woken = False
                for level in self._idle_levels:
                    if level in self._tasks:
                        self._tasks[level] = (now, self._tasks[level][1])
                self._idle_levels.clear()
            for level, (due, _) in list(self._tasks.items()):
                # levels due within RUN_TOGETHER_MS run in this pass: idle levels, rescheduled a few µs apart
                # by the last pass, would otherwise wake the thread (and take the GIL) once each. Early is
                # harmless: a message not due yet is only rescheduled at its time
                if due <= now + RUN_TOGETHER_MS and not self.is_stopped():
                    self._run_level(level)
            next_due = min((due for due, _ in self._tasks.values()), default=now + 1000)
        if now >= self._next_persist and not self.is_stopped():
            self._next_persist = now + self.flush_delay_offset_interval
            try:
                self.persist()
            except OSError:
                log.exception("%s: persisting delay offsets failed", self.root)
        return min(next_due, self._next_persist) - self.clock()

    def deliver_once(self) -> int:
        """Run every level's task now, whatever its schedule; returns how many messages were delivered."""
        with self._run_lock:
            return sum(self._run_level(level) for level in list(self._tasks))

    def shutdown(self, join: bool = True) -> None:
        """Stop the thread and persist the offsets (5.x)."""
        super().shutdown(join)
        try:
            self.persist()
        except OSError:
            log.exception("%s: persisting delay offsets at shutdown failed", self.root)

    def _schedule(self, level: int, offset: int, delay: int) -> None:
        self._tasks[level] = (self.clock() + delay, offset)
        self._idle_levels.discard(level)

    def _idle(self, level: int, offset: int) -> None:
        """Nothing at ``offset`` of the level's queue yet: look again after ``IDLE_LEVEL_MS`` or when woken."""
        self._schedule(level, offset, IDLE_LEVEL_MS)
        self._idle_levels.add(level)

    def _run_level(self, level: int) -> int:
        offset = self._tasks[level][1]
        try:
            return self._execute_on_timeup(level, offset)
        except Exception:
            log.exception("%s: delay level %d failed at offset %d", self.root, level, offset)
            self._schedule(level, offset, DELAY_FOR_A_PERIOD)
            return 0

    def _execute_on_timeup(self, level: int, offset: int) -> int:
        """One run of a level's task (RocketMQ ``DeliverDelayedMessageTimerTask.executeOnTimeup``)."""
        cl, cqs = self.commitlog, self.cq_store
        cq = cqs.find(SCHEDULE_TOPIC, delay_level_to_queue_id(level))
        if cq is None:
            self._idle(level, offset)
            return 0
        buf = cq.get_index_buffer(offset)
        if buf is None:
            low = cq.get_min_offset_in_queue()
            if offset < low:
                log.error("%s: delay level %d offset %d below its queue's min %d; moving to it",
                          self.root, level, offset, low)
                offset = low
            if offset >= cq.get_max_offset_in_queue():
                self._idle(level, offset)
            else:
                self._schedule(level, offset, DELAY_FOR_A_WHILE)
            return 0
        mf, start, end = buf
        if not mf.hold():
            self._schedule(level, offset, DELAY_FOR_A_WHILE)
            return 0
        delivered = 0
        try:
            for pos in range(start, end - UNIT_SIZE + 1, UNIT_SIZE):
                phy, size, tags_code = read_unit(mf, pos)
                next_offset = offset + (pos - start) // UNIT_SIZE
                if size == FILLER_SIZE:
                    continue
                now = self.clock()
                countdown = self.correct_deliver_timestamp(now, tags_code, level) - now
                if countdown > 0:
                    self._schedule(level, next_offset, countdown)
                    self.offset_table[level] = next_offset
                    return delivered
                ext = cl.look_message_by_offset(phy)
                if ext is None:
                    # RocketMQ skips it too (a removed file, or a record that does not read as one); said here,
                    # since the message is lost to its consumers from now on
                    log.error("%s: delay level %d, queue offset %d: no readable record at commit-log offset %d "
                              "(%d bytes); skipped", self.root, level, next_offset, phy, size)
                    continue
                try:
                    inner = self.message_timeup(ext)
                    if inner.topic == RMQ_SYS_TRANS_HALF_TOPIC:
                        log.error("%s: delayed message at %d is a transaction half message; discarded",
                                  self.root, phy)
                        continue
                    result = self._put(inner)
                    if result.status is PutMessageStatus.PUT_OK:
                        delivered += 1
                        continue
                    log.error("%s: delivering the delayed message at %d to %s/%d failed: %s", self.root, phy,
                              inner.topic, inner.queue_id, result.status.name)
                    self._schedule(level, next_offset, DELAY_FOR_A_PERIOD)
                    self.offset_table[level] = next_offset
                    return delivered
                except Exception:
                    log.exception("%s: delayed message at %d cannot be delivered; skipped", self.root, phy)
            next_offset = offset + (end - start) // UNIT_SIZE
            self._schedule(level, next_offset, DELAY_FOR_A_WHILE)
            self.offset_table[level] = next_offset
            return delivered
        finally:
            mf.release()

    def message_timeup(self, ext: MessageExt) -> Message:
        """The message to put for a due record (RocketMQ ``messageTimeup``)."""
        props = ext.properties
        real_topic = props.get(MessageConst.REAL_TOPIC)
        real_qid = props.get(MessageConst.REAL_QID)
        if real_topic is None or real_qid is None:
            raise ValueError("no %s/%s property" % (MessageConst.REAL_TOPIC, MessageConst.REAL_QID))
        return Message(real_topic, ext.body, flag=ext.flag, properties=props, queue_id=int(real_qid),
                       born_timestamp=ext.born_timestamp, born_host=ext.born_host,
                       sys_flag=ext.sys_flag & ~(SysFlag.BORNHOST_V6_FLAG | SysFlag.STOREHOSTADDRESS_V6_FLAG),
                       reconsume_times=ext.reconsume_times)

    def _put(self, msg: Message) -> PutMessageResult:
        """Append without waiting for a flush or a slave (``waitStoreMsgOK=false``), past the rewrite."""
        cl = self.commitlog
        self._timeup = msg
        try:
            result = cl.append_message(msg)
        finally:
            self._timeup = None
        wakeup = self.flush_wakeup
        if wakeup is not None:
            wakeup()
        return result
