"""The timer store's threads (RocketMQ ``TimerMessageStore``'s ``TimerEnqueueGetService``/``TimerEnqueuePutService``,
``TimerDequeueGetService``/``TimerDequeueGetMessageService``/``TimerDequeuePutMessageService`` and
``TimerFlushService``), one of each kind here: :class:`TimerServices` starts and stops them together and closes the
timer store once they stopped.

* enqueue: ``TimerMessageStore.enqueue()`` until it finds nothing, then waits ``100 * precision / 1000`` ms or
  to the next tick, whichever comes first (1 s while the store has no timer files and no put has rewritten a timer
  message: ``idle_wait_ms``), on the timer store's wake word (``put_link``), which a rewritten timer put notes in
  C; moving the write time at a tick wakes the dequeue thread;
* dequeue: ``dequeue()`` slot after slot; waits as long when nothing is due (``-1``); an error waits 1 s and, with
  ``timer_skip_unknown_error``, moves past the slot (RocketMQ ``dequeue``'s catch), else tries the slot again; a
  store that takes no puts now (``NotTakingPuts``: starting or stopping) leaves the slot unread, and the thread
  tries it again after the idle wait (the enqueue likewise with a due message it delivers at once);
* flush: ``flush()`` (log, wheel, checkpoint), the timer log's expired files, and a progress line in the log every
  ``timer_progress_log_interval_ms``, every ``timer_flush_interval_ms``.

They run on a writable master only, in the process that runs the store's services (the leader of several
writers). Waits are on the real clock; the times they compare are the store's clock (tests drive it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from pystore.system.service import ServiceThread
from pystore.timer.timer_store import NotTakingPuts, TimerMessageStore

__all__ = ["TimerServices", "TimerEnqueueService", "TimerDequeueService", "TimerFlushService"]

log = logging.getLogger(__name__)

#: ms an enqueue or dequeue error waits before the next try (RocketMQ holds 50 ms; a damaged slot would log
#: twenty lines a second)
_ERROR_WAIT_MS = 1000


class TimerEnqueueService(ServiceThread):
    def __init__(self, store: TimerMessageStore, clock: Callable[[], int] | None = None) -> None:
        super().__init__("TimerEnqueueService", clock)
        self.store = store

    # Its waits are on the timer store's wake word (``put_link``), which the compiled put hook notes in C when it
    # rewrites a timer message: the put path wakes this thread without calling Python.

    def wakeup(self) -> None:
        self.store.put_link.wake()

    def wait_for_running(self, interval_ms: float) -> None:
        self.store.put_link.wait(interval_ms)
        self.on_wait_end()

    def run(self) -> None:
        while not self.is_stopped():
            try:
                if not self.store.enqueue():
                    self.wait_for_running(self.store.idle_wait_ms())
            except NotTakingPuts as e:
                # a due message delivered at once was refused: its unit is enqueued again once the store takes puts
                log.debug("%s", e)
                self.wait_for_running(self.store.idle_wait_ms())
            except Exception:
                log.exception("%s: timer enqueue failed", self.store.root)
                self.wait_for_running(_ERROR_WAIT_MS)


class TimerDequeueService(ServiceThread):
    def __init__(self, store: TimerMessageStore, clock: Callable[[], int] | None = None) -> None:
        super().__init__("TimerDequeueService", clock)
        self.store = store

    def run(self) -> None:
        store = self.store
        while not self.is_stopped():
            try:
                if store.dequeue() == -1:
                    self.wait_for_running(store.idle_wait_ms())
            except NotTakingPuts as e:
                # the slot stays unread: read again once the store takes puts (never skipped, never dropped)
                log.debug("%s", e)
                self.wait_for_running(store.idle_wait_ms())
            except Exception:
                log.exception("%s: timer dequeue failed at %d", store.root, store.curr_read_time_ms)
                if store.config.timer_skip_unknown_error:
                    store.skip_slot()
                self.wait_for_running(_ERROR_WAIT_MS)


class TimerFlushService(ServiceThread):
    def __init__(self, store: TimerMessageStore, clock: Callable[[], int] | None = None) -> None:
        super().__init__("TimerFlushService", clock)
        self.store = store

    def run(self) -> None:
        store = self.store
        interval = store.config.timer_flush_interval_ms
        last_progress = self.clock()
        while not self.is_stopped():
            try:
                store.flush()
                store.delete_expired()
                now = self.clock()
                if now - last_progress > store.config.timer_progress_log_interval_ms and store.opened:
                    last_progress = now
                    log.info("%s: timer progress %s", store.root, store.stats())
            except Exception:
                log.exception("%s: timer flush failed", store.root)
            self.wait_for_running(interval)


class TimerServices:
    """The three threads of one timer store; ``shutdown`` stops them (dequeue and enqueue first, then the flush)
    and closes the store (its last flush and checkpoint)."""

    def __init__(self, store: TimerMessageStore, clock: Callable[[], int] | None = None) -> None:
        self.store = store
        self.threads: list[ServiceThread] = [TimerFlushService(store, clock), TimerEnqueueService(store, clock),
                                             TimerDequeueService(store, clock)]
        store.wake_enqueue = self.threads[1].wakeup
        store.wake_dequeue = self.threads[2].wakeup

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def shutdown(self, join: bool = True) -> None:
        for t in reversed(self.threads):
            t.shutdown(join)
        self.store.close()
