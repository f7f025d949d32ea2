"""The index builder: a thread that writes the key index's entries behind the puts (``index_build_async`` with
ASYNC_FLUSH), following the commit log in C without the GIL, so that a keyed put costs what an unkeyed one does
(RocketMQ builds its index on the reput thread in the same way). The files it writes into are
:mod:`pystore.index.service`'s; the walks are :mod:`pystore.index._index_walk`'s.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pystore.index._index_walk import FOLLOW_WORK, IndexCursor, follow_log, index_log, log_end
from pystore.system.service import ServiceThread

if TYPE_CHECKING:
    from pystore.index.service import IndexService

__all__ = ["IndexBuildService", "lower_priority"]

log = logging.getLogger(__name__)


def lower_priority(by: int) -> None:
    """Raise the calling thread's nice value by ``by`` (Linux: ``setpriority`` on a thread id sets that thread
    alone). The index builder's work can wait: on a machine whose cores are all busy, CFS shares a core
    between the builder and a put thread by weight, and at nice 10 the builder weighs a tenth of a put thread.
    That is safe only because its steady state holds no lock a put needs and not the GIL (``follow_log``):
    a thread descheduled while holding the GIL would stall every other. Not possible: logged, and the
    thread runs at its priority."""
    if by <= 0 or not sys.platform.startswith("linux"):
        return
    tid = threading.get_native_id()
    try:
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + by))
    except OSError as e:
        log.info("the index builder keeps its priority: %s", e)


class IndexBuildService(ServiceThread):
    """The index builder (RocketMQ's reput thread with ``CommitLogDispatcherBuildIndex``): it follows the commit
    log from where it was when the writer started (recovery indexed all before) to the log's end, and writes
    the entries of the records the put path appended (``_index_walk.index_log``, which scans and writes with
    the GIL released), so that a keyed put costs what an unkeyed one does. A lookup
    (``IndexService.query_offset``), a flush and the shutdown catch it up at once (``catch_up``). One writer
    of the index: dispatch's inline path writes no entries while this runs (``QueueDispatcher.inline_index``).

    Between walks it waits in ``_index_walk.follow_log``, without the GIL: looking ``busy_ms`` after a
    walk or after records with keys, otherwise ``idle_ms`` later, then each time after twice the last pause up
    to ``idle_max_ms``, it indexes what the newest commit-log file gained itself (moving the cursor over
    records without keys, writing the entries of those with keys into the newest index file), and hands back
    to a walk only when the log moved to another file, the index file is near full (a walk switches files,
    which takes Python) or after ``FOLLOW_MAX_MS``. A store's puts, keyed or not, thus cost the put threads
    no GIL hand-over in steady state: a thread that takes the GIL every millisecond makes a thread that keeps
    it busy (a put loop) give it up after CPython's switch interval, every time; and a builder descheduled
    while it holds the GIL (a machine whose cores are all busy) stalls the put thread for the scheduler's
    whole time slice.

    Thread-safety: ``lock`` (the cursor's mutex) serialises the walks, the lookups that catch up and the
    follow's looks: one writer of the index at a time; ``cursor`` (``reached``) moves only under it."""

    #: how long one follow runs before the builder's loop looks at its own state again
    FOLLOW_MAX_MS = 1000

    def __init__(self, index: IndexService, commitlog: Any, start: int, busy_ms: float = 1, idle_ms: float = 10,
                 clock: Callable[[], int] | None = None, idle_max_ms: float = 100, nice: int = 0) -> None:
        super().__init__("IndexBuildService", clock)
        #: how much the thread lowers its own priority when it starts (``index_build_nice``)
        self.nice = nice
        self.index = index
        self.commitlog = commitlog
        #: where the walk is: every record below ``cursor.reached`` is indexed
        self.cursor = IndexCursor(start)
        self.busy_ms = busy_ms
        self.idle_ms = idle_ms
        self.idle_max_ms = idle_max_ms
        #: one writer of the index at a time: the walks, the lookups that catch up and the follow's looks (a
        #: mutex the follow takes in C without the GIL)
        self.lock = self.cursor

    @property
    def reached(self) -> int:
        return self.cursor.reached

    def start(self) -> None:
        self.index.builder = self
        self.cursor.resume()
        super().start()

    def shutdown(self, join: bool = True) -> None:
        self.cursor.stop()
        super().shutdown(join)
        self.catch_up()
        self.index.builder = None

    def behind(self) -> int:
        """The bytes of the log not indexed yet."""
        return max(0, log_end(self.commitlog.queue.files) - self.cursor.reached)

    def build_locked(self) -> int:
        """Index what the log holds past ``reached`` (the caller holds ``lock``); the bytes walked."""
        queue = self.commitlog.queue
        end = log_end(queue.files)
        start = self.cursor.reached
        if start >= end:
            return 0
        low = queue.get_min_offset()
        if low > start:
            start = low             # cleaned away unindexed: nothing left to index there
        return self.cursor.advance(index_log(self.index.core, queue.files, queue.mapped_file_size, start, end)) - start

    def catch_up(self) -> int:
        """Index all the log holds now; the bytes walked."""
        with self.lock:
            return self.build_locked()

    def run(self) -> None:
        lower_priority(self.nice)
        handed = False
        while not self.is_stopped():
            try:
                walked = self.catch_up()
            except Exception:  # noqa: BLE001 - the walk is tried again at the next pass
                log.exception("building the index failed")
                walked = 0
            if handed and not walked:
                # the follow handed over but there was nothing to walk (the log's next file is not there yet)
                self.wait_for_running(self.idle_ms)
            try:
                handed = follow_log(self.cursor, self.commitlog.queue.files, int(self.busy_ms * 1e6),
                                    int(self.idle_ms * 1e6), self.FOLLOW_MAX_MS * 1_000_000,
                                    self.commitlog.core, int(self.idle_max_ms * 1e6), self.index.core) == FOLLOW_WORK
            except Exception:  # noqa: BLE001 - making the next index file failed: the walk tries again
                log.exception("building the index failed")
                handed = True
