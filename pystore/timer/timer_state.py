"""What the parts of the timer store share (:mod:`pystore.timer.timer_store` puts them together): the property
names and answers of RocketMQ's ``TimerMessageStore``, ``NotTakingPuts``, and :class:`TimerState`, the fields of one
timer store (its files, its four times and queue offsets, its hooks) and the time arithmetic every part uses.

The parts, each a class over :class:`TimerState` in a module of its own: the delivery
(:mod:`pystore.timer.timer_dequeue`), the enqueue (:mod:`pystore.timer.timer_enqueue`, which delivers an already due
message through the delivery), and the files' recovery, flush and checkpoint (:mod:`pystore.timer.timer_flush`).

All of them log as ``pystore.timer.timer_store`` (one logger for the timer store, as before it was split).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from pystore.status import PutMessageStatus
from pystore.timer._timer_put import TimerPutLink
from pystore.timer.timer_checkpoint import TimerCheckpoint, checkpoint_path
from pystore.timer.timer_log import TimerLog
from pystore.timer.timer_wheel import DEFAULT_SLOTS_TOTAL, TimerWheel, roll_window_slots

if TYPE_CHECKING:
    from pystore.config import StoreConfig
    from pystore.log._results import PutMessageResult
    from pystore.log.commitlog import CommitLog
    from pystore.message._message import Message
    from pystore.message._message_ext import MessageExt
    from pystore.queue.queue_store import ConsumeQueueStore
    from pystore.timer._dequeue import SlotWalk
    from pystore.timer._enqueue import TimerEnqueue

__all__ = ["TimerState", "NotTakingPuts", "build_delete_key", "PUT_OK", "PUT_NEED_RETRY", "PUT_NO_RETRY",
           "NEVER_ENQUEUED", "TIMER_TOPIC", "TIMER_OUT_MS", "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS",
           "TIMER_ROLL_TIMES", "TIMER_DEL_UNIQKEY", "log"]

#: the timer store's one logger (every part of it logs here)
log = logging.getLogger("pystore.timer.timer_store")

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
NO_RETRY = {PutMessageStatus.MESSAGE_ILLEGAL, PutMessageStatus.PROPERTIES_SIZE_EXCEEDED,
            PutMessageStatus.WHEEL_TIMER_NOT_ENABLE, PutMessageStatus.WHEEL_TIMER_MSG_ILLEGAL}
#: statuses that mean the message is stored (the flush or the slave is what failed)
STORED = {PutMessageStatus.PUT_OK, PutMessageStatus.FLUSH_DISK_TIMEOUT, PutMessageStatus.FLUSH_SLAVE_TIMEOUT,
          PutMessageStatus.SLAVE_NOT_AVAILABLE}


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


class TimerState:
    """The fields of one timer store and its time arithmetic (see ``TimerMessageStore`` for the arguments)."""

    def __init__(self, commitlog: CommitLog, cq_store: ConsumeQueueStore, config: StoreConfig,
                 clock: Callable[[], int], put: Callable[[Message], PutMessageResult],
                 look: Callable[[int], MessageExt | None] | None = None,
                 readable_from: Callable[[], int] | None = None) -> None:
        self.commitlog = commitlog
        #: the message at a commit-log offset, for the dequeue: with an archive, below the local log from there (a
        #: timer waits up to ``timer_max_delay_sec``, longer than the archive's local retention may keep its record)
        self.look = look if look is not None else commitlog.look_message_by_offset
        #: the first commit-log offset ``look`` still reads (the timer-log files pointing below it may go): with an
        #: archive, where the archive begins; else the local log's first offset
        self.readable_from = readable_from if readable_from is not None else commitlog.get_min_offset
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
        #: the files are open and recovered (read and write times set from them): before, the dequeue reads
        #: nothing, though ``wheel`` is set while the recovery runs
        self.recovered = False
        self.commit_read_time_ms = 0
        self.curr_queue_offset = 0
        self.commit_queue_offset = 0
        #: the first slot the dequeue has not begun to read (pystore's): the enqueue links a unit due at or after it
        #: into its slot however late the unit reaches it, and delivers one due before it at once. Moved under
        #: ``_slot_lock``, which the enqueue holds from that choice to the unit's link: a slot's units and its delete
        #: markers are read together, never split between a slot read and a delivery at once
        self.unread_from_ms = 0
        #: the timer-queue offset the enqueue must have taken in before the dequeue reads a slot (pystore's): the
        #: queue's end at the open (what was put and put again after the checkpoint) and past every rolled copy the
        #: dequeue put again, so that a slot is read with every copy due in it that the timer queue held
        self.read_gate_offset = 0
        self._slot_lock = threading.Lock()
        self._last_commit = (0, 0)
        # the latest slot time enqueued (or recovered): pending and next_due_ms sum the wheel's slots from the read
        # time to it (wheel_pending), no further
        self._pending_hi = 0
        self._enqueuer: TimerEnqueue | None = None      # the compiled enqueue, over the wheel's slots
        self._walker: SlotWalk | None = None            # the compiled dequeue: a slot's units and their delivery
        self._lock = threading.RLock()          # enqueue's appends and slot updates against flush
        self.closed = False
        #: delete markers whose key named no message due in their slot (RocketMQ drops them silently): counted in
        #: ``stats()``, each logged when its slot is read
        self.cancels_unmatched = 0
        self._cancelled: set[str] = set()       # the delete keys of the slot being read that cancelled a message
        #: what the compiled put hook (``_timer_put.TimerPut``) shares with this store: the wheel's slots while open
        #: (flow control) and the enqueue's wake word, which a rewritten put notes without calling Python
        self.put_link = TimerPutLink()
        #: wakes the enqueue thread, and the dequeue thread (set by ``timer_services``)
        self.wake_enqueue: Callable[[], object] | None = None
        self.wake_dequeue: Callable[[], object] | None = None

    @property
    def expecting(self) -> bool:
        """A put rewrote a timer message (``note_timer_put``, or the compiled hook through ``put_link``): the
        enqueue polls at its RocketMQ rate from now on."""
        return self.put_link.expecting

    @expecting.setter
    def expecting(self, value: bool) -> None:
        self.put_link.expecting = value

    @property
    def opened(self) -> bool:
        return self.wheel is not None

    def files_exist(self) -> bool:
        """Whether this store has timer files already (the wheel, the log folder or the checkpoint)."""
        return (os.path.exists(os.path.join(self.root, "timerwheel")) or os.path.exists(checkpoint_path(self.root))
                or bool(_listdir(os.path.join(self.root, "timerlog"))))

    def _format(self, time_ms: int) -> int:
        return time_ms // self.precision_ms * self.precision_ms

    def maybe_move_write_time(self, now_ms: int | None = None) -> None:
        """Move the write time to ``now_ms`` (default: the clock), rounded down to the precision. The enqueue passes
        the time it read before it found the timer queue's end: every slot before it is then readable."""
        now = self._format(self.clock() if now_ms is None else now_ms)
        if self.curr_write_time_ms < now:
            self.curr_write_time_ms = now
            # a slot became readable: the dequeue thread reads it now, not at the end of its idle wait
            wake = self.wake_dequeue
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


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []
