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
the count or the timeout passes, then gets again: no thread per waiter, no CPU while waiting.

A read-only store follows a writer in another process through the store's ``wakeup`` file (``open_wake_file``;
its layout is in docs/format.md §15): the writer maps it at start (creating it once, then
reusing it across restarts) and hands its state word to the dispatcher, whose put path, after a put's units are
written, pays one load while no reader waits. A reader's waiting get registers in the word, gets again, and
sleeps on the word's futex (optionally spinning on it first: ``spin_us``) until the writer, seeing the
registration, bumps the word and wakes it; then gets again. Every sleep is bounded by the timeout (and by a
second, so that a store shut down meanwhile ends its waits), which is what keeps a reader whose writer died or
restarted working. A read-only store writes nothing but its registrations in that word; it creates no file:
without a wake file (no writer since, or one that predates it; a store it cannot open for writing) its waiters
re-read the queue every ``READER_POLL_MS`` and look for the file again once a second. ``wait_queue`` is that wait
for one queue without a filter, compiled (``_queue_reader.QueueReader.wait_message``): the spin, the sleep and the get
after a wake-up run without a Python frame between them, and its spin watches the place of the queue's next
unit rather than the word, without registering (the writer pays nothing for a spinning reader).
"""

from __future__ import annotations

import logging
import mmap
import os
import struct
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from pystore.format._props import string_to_properties
from pystore.read._queue_reader import QueueReader
from pystore.read.results import GetMessageResult
from pystore.status import GetMessageStatus
from pystore.system._notify import WakeWord
from pystore.system.durable import fsync_dir

__all__ = ["Arrivals", "ArrivingListener", "READER_POLL_MS", "WAKE_FILE", "found_something", "open_wake_file"]

R = TypeVar("R")

log = logging.getLogger(__name__)

#: fn(topic, queue_id, logic_offset, tags_code, store_timestamp, filter_bit_map, properties)
ArrivingListener = Callable[[str, int, int, int, int, Any, dict[str, str]], object]

#: ms between two looks at the files of a read-only store's waiting get when there is no wake file
READER_POLL_MS = 20

#: the wake file in the store root (pystore's own; RocketMQ ignores it), and its layout (docs/format.md §15)
WAKE_FILE = "wakeup"
WAKE_MAGIC = b"PSWAKEUP"
WAKE_VERSION = 1
WAKE_SIZE = 64
#: where the state word (``_notify.h``: seq, waiter count, sleeping bit) lies in the file
WAKE_WORD_AT = 16
_HEADER = struct.Struct("<8sI")
#: s between two looks for the wake file of a reader that found none
_WAKE_RETRY_S = 1.0
#: the longest single sleep on the word: a shut-down store's waits end within it
_WAKE_SLICE_MS = 1000.0

_EMPTY = (GetMessageStatus.NO_MESSAGE_IN_QUEUE, GetMessageStatus.OFFSET_OVERFLOW_ONE)
_NO_MATCHED = GetMessageStatus.NO_MATCHED_MESSAGE


def open_wake_file(root: str, create: bool) -> WakeWord | None:
    """The state word of ``root``'s wake file, mapped shared. ``create`` (a writer): made when missing (written
    whole beside it, then linked in: a reader never sees a part of it), and claimed (``WakeWord.claim_writer``:
    the flags word says whether waiters issue the barrier for it); a reader only opens an existing one.
    None when there is none to open, or it cannot be opened for writing or is not a wake file (logged): waiters
    then poll."""
    path = os.path.join(root, WAKE_FILE)
    try:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            if not create:
                return None
            tmp = "%s.%d.tmp" % (path, os.getpid())
            with open(tmp, "wb") as f:
                f.write(_HEADER.pack(WAKE_MAGIC, WAKE_VERSION).ljust(WAKE_SIZE, b"\0"))
            try:
                os.link(tmp, path)
            except FileExistsError:
                pass
            finally:
                os.unlink(tmp)
            # every name in a store is made durable (docs/format.md, "pystore's choices"), this one too
            fsync_dir(root)
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        try:
            size = os.fstat(fd).st_size
            mm = mmap.mmap(fd, WAKE_SIZE) if size >= WAKE_SIZE else None
        finally:
            os.close(fd)
    except OSError as e:
        log.warning("%s: the wake file cannot be opened (%s): waiting gets of other processes poll", path, e)
        return None
    if mm is None or _HEADER.unpack_from(mm) != (WAKE_MAGIC, WAKE_VERSION):
        log.warning("%s is not a pystore wake file of version %d (%s): waiting gets of other processes poll",
                    path, WAKE_VERSION, "%d bytes" % size if mm is None else "header %r" % mm[:12])
        if mm is not None:
            mm.close()
        return None
    wake = WakeWord(mm, WAKE_WORD_AT)
    if create:
        wake.claim_writer()
    return wake


class Arrivals:
    """The listeners and waiters of one store. ``dispatcher``: the store's ``QueueDispatcher`` (None on a
    read-only store, which dispatches nothing); ``listeners_on``: False on a slave; ``root``: the store root of
    a read-only store, whose wake file its waiters sleep on (None: they poll); ``reader``: a read-only store's
    compiled reader, whose ``wait_message`` is ``wait_queue``'s."""

    def __init__(self, dispatcher: Any, listeners_on: bool = True, root: str | None = None,
                 reader: QueueReader | None = None) -> None:
        self._dispatcher = dispatcher
        self._listeners_on = listeners_on
        self._root = root
        self._reader = reader
        self._wake: WakeWord | None = None
        self._wake_looked = float("-inf")
        self._barrier_warned = False
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

    def wait_for(self, topic: str, timeout_ms: int, get: Callable[[], R], done: Callable[[R], bool],
                 spin_us: float = 0) -> R:
        """``get()`` until ``done`` of its answer, waiting between two gets for an arrival in a queue of
        ``topic`` (any queue: a queue created meanwhile counts too), at most ``timeout_ms`` in all; the last
        answer. ``spin_us``: a read-only store's waiter spins that long on the wake word before it sleeps
        (lower latency for a CPU's worth of spinning; the writer's own waiters sleep on a condition)."""
        deadline = time.monotonic() + timeout_ms / 1000.0
        if self._dispatcher is None:
            return self._wait_across(deadline, get, done, spin_us)
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

    def wait_queue(self, topic: str, queue_id: int, offset: int, max_msg_nums: int, timeout_ms: int,
                   spin_us: float = 0) -> GetMessageResult | None:
        """A read-only store's plain get of one queue that waits up to ``timeout_ms`` for a message, compiled
        (``QueueReader.wait_message``: the spin on the wake word and the get after it run without a Python
        frame); None when it cannot run here (no wake file, no compiled reader, a barrier this process cannot
        issue): the caller waits through ``wait_for``."""
        reader = self._reader
        if reader is None or self._dispatcher is not None:
            return None
        wake = self._wake_word()
        if wake is None:
            return None
        return reader.wait_message(wake, topic, queue_id, offset, max_msg_nums, spin_us, timeout_ms)

    def _wake_word(self) -> WakeWord | None:
        """The wake file's word of a read-only store (looked for at most once a second while there is none)."""
        if self._wake is None and self._root is not None:
            now = time.monotonic()
            if now - self._wake_looked >= _WAKE_RETRY_S:
                self._wake_looked = now
                self._wake = open_wake_file(self._root, create=False)
        return self._wake

    def _wait_across(self, deadline: float, get: Callable[[], R], done: Callable[[R], bool], spin_us: float) -> R:
        """A read-only store's wait for the writer of another process: registered in the wake word while it
        gets a last time and sleeps, so that the writer's put after that get wakes it."""
        r = get()
        while not done(r):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            wake = self._wake_word()
            if wake is None or (seen := wake.register()) < 0:
                # no wake file, or the writer needs a barrier this process cannot issue (logged once): poll
                if wake is not None and not self._barrier_warned:
                    self._barrier_warned = True
                    log.warning("%s: membarrier(2) is refused here: waiting gets poll the files", self._root)
                time.sleep(min(left, READER_POLL_MS / 1000.0))
                r = get()
                continue
            try:
                r = get()
                if done(r):
                    break
                if wake.wait(seen, spin_us, min(left * 1000.0, _WAKE_SLICE_MS)) == -2:
                    time.sleep(min(left, READER_POLL_MS / 1000.0))
            finally:
                wake.unregister(seen)
            r = get()
        return r


def found_something(status_and_end: tuple[GetMessageResult, int]) -> bool:
    """Is a get's answer final for a waiting get: anything but NO_MESSAGE_IN_QUEUE, OFFSET_OVERFLOW_ONE, or
    NO_MATCHED_MESSAGE at the queue's end (``end``: the queue's max offset)?"""
    r, end = status_and_end
    return r.status not in _EMPTY and (r.status is not _NO_MATCHED or r.next_begin_offset < end)
