"""Message arrival: the listeners called after each message is dispatched to its consume queue (RocketMQ's
``MessageArrivingListener``) and the long-polling wait of ``get_message(..., timeout_ms=N)``.

Both hang on one hook, ``QueueDispatcher.arriving``, which is set only while a listener is registered or a
get is waiting: with neither, the put path pays one pointer test per message. The hook runs on the thread
that dispatched the message: under the put lock with inline dispatch (ASYNC_FLUSH without a pool), on the
group commit or the commit service otherwise. A listener must therefore be quick and must not put into the
same store (the put lock is not reentrant); an exception it raises is logged and dispatch goes on. A slave
never calls listeners (RocketMQ registers none on a slave); its waiters still wake.

A waiting get (``wait_for``) registers its topic, takes the arrival count, runs a plain get and, when that get
found nothing at the queue's end, sleeps on one condition variable until an arrival in a waited-on topic bumps
the count or the timeout passes, then gets again: no thread per waiter, no CPU while waiting. A read-only store
sees a writer in another process only through the files, so its waiters re-read the queue every
``READER_POLL_MS`` instead (bounded by the timeout).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from pystore._props import string_to_properties
from pystore.results import GetMessageResult
from pystore.status import GetMessageStatus

__all__ = ["Arrivals", "ArrivingListener", "READER_POLL_MS", "found_something"]

R = TypeVar("R")

log = logging.getLogger(__name__)

#: fn(topic, queue_id, logic_offset, tags_code, store_timestamp, filter_bit_map, properties)
ArrivingListener = Callable[[str, int, int, int, int, Any, dict[str, str]], object]

#: ms between two looks at the files of a read-only store's waiting get
READER_POLL_MS = 20

_EMPTY = (GetMessageStatus.NO_MESSAGE_IN_QUEUE, GetMessageStatus.OFFSET_OVERFLOW_ONE)
_NO_MATCHED = GetMessageStatus.NO_MATCHED_MESSAGE


class Arrivals:
    """The listeners and waiters of one store. ``dispatcher``: the store's ``QueueDispatcher`` (None on a
    read-only store, which dispatches nothing); ``listeners_on``: False on a slave."""

    def __init__(self, dispatcher: Any, listeners_on: bool = True) -> None:
        self._dispatcher = dispatcher
        self._listeners_on = listeners_on
        self._listeners: tuple[ArrivingListener, ...] = ()
        #: topic -> how many gets wait on one of its queues (a wake-up per topic: a get woken by another
        #: queue's arrival gets again and waits on)
        self._waited: dict[str, int] = {}
        self._arrived = 0
        self._cond = threading.Condition()

    # -- listeners --------------------------------------------------------------------------------------------

    def add_listener(self, fn: ArrivingListener) -> None:
        if not callable(fn):
            raise TypeError("an arriving listener must be callable, got %s" % type(fn).__name__)
        with self._cond:
            self._listeners += (fn,)
            self._update_hook()

    def remove_listener(self, fn: ArrivingListener) -> None:
        """Remove ``fn`` (its first registration); ValueError when it is not registered."""
        with self._cond:
            listeners = list(self._listeners)
            listeners.remove(fn)
            self._listeners = tuple(listeners)
            self._update_hook()

    def _update_hook(self) -> None:
        """Under ``_cond``: hook the dispatcher while anyone listens or waits, unhook it otherwise."""
        if self._dispatcher is not None:
            wanted = (self._listeners and self._listeners_on) or self._waited
            self._dispatcher.arriving = self.arrived if wanted else None

    def arrived(self, topic: str, queue_id: int, queue_offset: int, tags_code: int, store_ts: int,
                props: bytes) -> None:
        """The dispatcher's hook: wake the gets waiting on this queue, then call the listeners."""
        if topic in self._waited:
            with self._cond:
                self._arrived += 1
                self._cond.notify_all()
        if not self._listeners_on:
            return
        listeners = self._listeners
        if not listeners:
            return
        try:
            properties = string_to_properties(props.decode("utf-8", "replace"))
        except Exception:
            log.exception("%s/%d: properties of queue offset %d cannot be decoded for the arriving listeners",
                          topic, queue_id, queue_offset)
            properties = {}
        for fn in listeners:
            try:
                fn(topic, queue_id, queue_offset, tags_code, store_ts, None, properties)
            except Exception:
                log.exception("arriving listener %r failed on %s/%d offset %d", fn, topic, queue_id, queue_offset)

    def wake_all(self) -> None:
        """Wake every waiting get (the store shuts down: their next get raises ``StoreClosedError``)."""
        with self._cond:
            self._arrived += 1
            self._cond.notify_all()

    # -- waiting gets -----------------------------------------------------------------------------------------

    def wait_for(self, topic: str, timeout_ms: int, get: Callable[[], R], done: Callable[[R], bool]) -> R:
        """``get()`` until ``done`` of its answer, waiting between two gets for an arrival in a queue of
        ``topic`` (any queue: a queue created meanwhile counts too), at most ``timeout_ms`` in all; the last
        answer."""
        deadline = time.monotonic() + timeout_ms / 1000.0
        poll = self._dispatcher is None
        with self._cond:
            self._waited[topic] = self._waited.get(topic, 0) + 1
            self._update_hook()
        try:
            while True:
                with self._cond:
                    seen = self._arrived
                r = get()
                if done(r):
                    return r
                left = deadline - time.monotonic()
                if left <= 0:
                    return r
                if poll:
                    time.sleep(min(left, READER_POLL_MS / 1000.0))
                    continue
                with self._cond:
                    if self._arrived == seen:
                        self._cond.wait(left)
        finally:
            with self._cond:
                n = self._waited[topic] - 1
                if n:
                    self._waited[topic] = n
                else:
                    del self._waited[topic]
                self._update_hook()


def found_something(status_and_end: tuple[GetMessageResult, int]) -> bool:
    """Is a get's answer final for a waiting get: anything but NO_MESSAGE_IN_QUEUE, OFFSET_OVERFLOW_ONE, or
    NO_MATCHED_MESSAGE at the queue's end (``end``: the queue's max offset)?"""
    r, end = status_and_end
    return r.status not in _EMPTY and (r.status is not _NO_MATCHED or r.next_begin_offset < end)
