"""Dispatch: the commit log → consume queues and index (docs/format.md §7; RocketMQ ``ReputMessageService``).

Two ways in, one writer of units at a time:

* **inline** (ASYNC_FLUSH): the put path hands each appended record to ``_dispatch.QueueDispatcher.dispatch``
  under the put lock, so a message is readable by queue the moment its put returns;
* **reput** (recovery, SYNC_FLUSH, a store whose queues are missing or behind): ``ReputService`` walks the
  commit log from ``reput_from`` up to an end offset and dispatches every whole record. Under SYNC_FLUSH the
  end is the flushed offset (5.x), so no consumer ever sees a message that a crash could take back; the
  group commit calls ``dispatch_until`` after each flush. Recovery re-dispatches with ``redispatch``, which
  also returns the queues found lacking units before a record of theirs (``Reached.gaps``), for recovery to
  rebuild (``pystore.engine.recovery``).

Re-dispatching a record that is already in its queue is accepted and ignored (``buildCQRepeatedly``).
``behind()`` is RocketMQ's ``dispatchBehindBytes``.

Thread-safety: ``dispatch_until`` serialises reput walks with a lock.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import NamedTuple

from pystore.log.commitlog import CommitLog
from pystore.queue._dispatch import QueueDispatcher

__all__ = ["Reached", "ReputService"]

log = logging.getLogger(__name__)

#: bytes of the log a recovery re-dispatch walks per compiled call (a few milliseconds; larger than a record)
REDISPATCH_STEP = 2 << 20


class Reached(NamedTuple):
    """What a recovery re-dispatch (``ReputService.redispatch``) reached and found."""

    #: where the walk ended: its end, or a record it could not read
    offset: int
    #: ``(topic, queue id)`` -> the offset of the first record found past the queue's units, for each queue
    #: lacking units before a record of it (-1: the queue had no units at all, and the record was not its first)
    gaps: dict[tuple[str, int], int]


class ReputService:
    def __init__(self, dispatcher: QueueDispatcher, commitlog: CommitLog, reput_from: int = 0) -> None:
        self.dispatcher = dispatcher
        self.commitlog = commitlog
        self.reput_from = reput_from
        self.end_offset = reput_from
        self._lock = threading.Lock()

    def dispatch_until(self, end: int) -> int:
        """Dispatch every whole record below ``end``; returns the offset reached."""
        with self._lock:
            return self._walk(end, None)

    def redispatch(self, start: int, end: int) -> Reached:
        """Recovery: dispatch again every whole record in ``[start, end)`` (from the log's head when ``start``
        lies below it), checking each queue's units against its records (``QueueDispatcher.reput_checked``)."""
        with self._lock:
            self.reput_from = start
            gaps: dict[tuple[str, int], int] = {}
            # in steps (the compiled walk holds the GIL): a takeover of several writers' lead re-dispatches while
            # its process goes on putting, and its put thread waits for the GIL a step at most
            while True:
                before = self.reput_from
                reached = self._step(end, REDISPATCH_STEP, gaps)
                if reached >= end or reached == before:
                    break
                time.sleep(0)           # the GIL offered to the other threads between steps
            return Reached(reached, gaps)

    def dispatch_step(self, end: int, step: int) -> int:
        """``dispatch_until(end)``, a step of about ``step`` bytes at most (each compiled walk holds the GIL);
        returns the offset reached."""
        with self._lock:
            return self._step(end, step, None)

    def _step(self, end: int, step: int, gaps: dict[tuple[str, int], int] | None) -> int:
        before = self.reput_from
        reached = self._walk(min(end, before + step), gaps)
        if reached == before < end:
            reached = self._walk(end, gaps)     # a record longer than a step, or where the walk stops
        return reached

    def _walk(self, end: int, gaps: dict[tuple[str, int], int] | None) -> int:
        queue = self.commitlog.queue
        self.end_offset = max(self.end_offset, end)
        low = queue.get_min_offset()
        if low >= 0 and self.reput_from < low:
            self.reput_from = low
        if self.reput_from < end:
            if gaps is None:
                reached = self.dispatcher.reput(queue.files, queue.mapped_file_size, self.reput_from, end)
            else:
                reached, found = self.dispatcher.reput_checked(queue.files, queue.mapped_file_size, self.reput_from,
                                                               end)
                for key, first in found.items():
                    gaps.setdefault(key, first)         # an earlier step's first record past the units stays
            if reached < end and reached == self.reput_from:
                log.debug("dispatch waits at %d (end %d)", reached, end)
            self.reput_from = reached
        return self.reput_from

    def behind(self) -> int:
        return max(0, self.end_offset - self.reput_from)
