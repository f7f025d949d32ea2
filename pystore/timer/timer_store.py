"""The timer store: RocketMQ 5's ``TimerMessageStore`` (enqueue, dequeue, roll, delete markers, checkpoint, recovery)
over the three files of :mod:`pystore.timer` (``timerlog/``, ``timerwheel``, ``config/timercheck``).

The flow, each part in a module of its own (the put side is :mod:`pystore.timer.timer_put`)::

    put(msg, TIMER_DELAY_SEC=...)  ->  rmq_sys_wheel_timer queue 0  (TIMER_OUT_MS, REAL_TOPIC, REAL_QID set)
    enqueue  (timer_enqueue.py)    ->  a timer-log unit per message, linked into the wheel slot of its time
                                       (or delivered at once when already due; rolled when past the window)
    dequeue  (timer_dequeue.py)    ->  each due slot's units, oldest first, put to REAL_TOPIC / REAL_QID
                                       (cancelled by a delete marker of the slot; re-put when rolled)
    flush    (timer_flush.py)      ->  commit log, timer log, wheel, then config/timercheck; recovery at load

:class:`TimerMessageStore` is those parts put together (``timer_state.TimerState`` their fields,
``timer_flush.TimerFiles`` the files, ``timer_dequeue.TimerDelivery`` the delivery, ``timer_enqueue.TimerEnqueuing``
the enqueue), with what reads them all: ``stats``, ``next_due_ms``, ``slot_num``. The names other modules import
from here (``NotTakingPuts``, ``build_delete_key``, the ``PUT_*`` answers, ``NEVER_ENQUEUED``) are
``timer_state``'s.

pystore's choices: one enqueue thread and one dequeue thread (RocketMQ hands requests between five kinds of
threads through queues; the order of units and puts is the same); the files are created when the first message
reaches ``rmq_sys_wheel_timer``; the dequeue thread delivers, so ``timer_skip_unknown_error``,
``timer_enable_retry_until_success`` and the three put attempts behave as in ``TimerDequeuePutMessageService``.
What runs in C: the enqueue's runs of units (``_enqueue.pyx``), the dequeue's walk of a slot and its runs of
deliveries (``_dequeue.pyx``), each stopping for any unit that is not the common case, which Python takes as it
always did. The pending count and the next due time are read from the wheel's slots between the read time and the
latest slot enqueued (``wheel_pending``), not kept per message.

Thread-safety: ``enqueue`` runs on one thread at a time, ``dequeue`` on one thread at a time, beside each other
(``currWriteTimeMs`` is moved by the enqueue only, and the dequeue reads only slots before it); ``flush`` and
``stats`` from any thread.
"""

from __future__ import annotations

from typing import Any

from pystore.timer._enqueue import wheel_pending
from pystore.timer.timer_enqueue import TimerEnqueuing
from pystore.timer.timer_state import (
    NEVER_ENQUEUED,
    PUT_NEED_RETRY,
    PUT_NO_RETRY,
    PUT_OK,
    TIMER_TOPIC,
    NotTakingPuts,
    build_delete_key,
)

__all__ = ["TimerMessageStore", "NotTakingPuts", "build_delete_key", "PUT_OK", "PUT_NEED_RETRY", "PUT_NO_RETRY",
           "NEVER_ENQUEUED"]


class TimerMessageStore(TimerEnqueuing):
    """The timer store of one writable master (see the module docstring).

    ``TimerMessageStore(commitlog, cq_store, config, clock, put, look)``: ``put(msg)`` stores a due or rolled
    message (the store's own put, which waits for no flush); ``look(offset)`` reads the message a slot's unit
    points at (default: the local commit log; with an archive, the archive below the local log). ``load()`` opens
    and recovers the files when they exist;
    ``enqueue()``, ``dequeue()``, ``flush()`` are what the services (``timer_services``) call; ``stats()``;
    ``close()`` flushes and closes.
    """

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
            "cancels_unmatched": self.cancels_unmatched,
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
