"""``ServiceThread``: the loop every background service runs in (RocketMQ ``ServiceThread``), and the two
things the store injects into every policy: the clock and the disk.

A service sleeps in ``wait_for_running(interval)`` until its interval passes or someone calls
``wakeup()``; ``on_wait_end`` runs after every wait (the group commit swaps its request lists there).
``sleep(interval)`` ignores wake-ups (the timed flush) but not ``shutdown()``.
``shutdown()`` stops the loop, wakes it and joins it.

**Policy time and real waits.** The store has one clock (``MessageStore(clock=...)``, epoch ms, default
``real_clock``) and hands it to every component whose *decision* depends on the time: is a file expired, is
a thorough flush or a heartbeat due, has a slave been silent too long, is the checkpoint's next write due,
has a put held the lock too long (page cache busy), is a time in the checkpoint impossible. Tests move a
fake clock instead of sleeping, and a decision then depends on nothing but what the test did. A *wait* that
bounds how long a thread blocks is real time (``time.monotonic``, ``Event.wait``, socket timeouts): how
long a put waits for its flush (``sync_flush_timeout``) or its slave (``slave_timeout``), how long the group
commit gathers a group, how long a service sleeps between passes. A fake clock that nobody advances would
turn those into hangs, and what they bound is the caller's real patience, not a policy. A policy loop
therefore sleeps in real time and re-reads the clock when it wakes (at least every second or every
interval), and a clock that moved back counts as "due now" rather than "due once it catches up".

**The disk.** Decisions on disk usage (cleaning's ratios, the DISK_FULL flag) go through an injected
``disk_usage(path)`` (``MessageStore(disk_usage=...)``, default ``shutil.disk_usage``);
``disk_used_ratio`` turns its answer into the used fraction, ``disk_free_bytes`` into the bytes free (the
index's check before it makes a sparse file).

Services are daemon threads: a process that exits without ``shutdown()`` behaves like a crash, which is
what recovery is for. An exception escaping ``run`` is logged, never swallowed silently.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["ServiceThread", "real_clock", "disk_used_ratio", "disk_free_bytes", "Clock", "DiskUsage"]

#: epoch milliseconds, RocketMQ's ``SystemClock.now()``
Clock = Callable[[], int]
#: ``disk_usage(path)``: a ``shutil.disk_usage`` result (anything with ``total`` and ``used``), or the used
#: fraction itself as a number in [0, 1] (the store's hook before it took ``shutil.disk_usage``'s shape)
DiskUsage = Callable[[str], Any]

log = logging.getLogger(__name__)


def real_clock() -> int:
    """Wall-clock milliseconds since the epoch (RocketMQ's ``System.currentTimeMillis``)."""
    return time.time_ns() // 1_000_000


def disk_used_ratio(disk_usage: DiskUsage | None, path: str) -> float:
    """The used fraction of the partition holding ``path`` by ``disk_usage`` (``shutil.disk_usage`` when
    None); -1.0 when it cannot be read (cleaning then treats the disk as over its limit, as RocketMQ does).

    ``shutil.disk_usage``'s ``used`` is ``total - f_bfree``: the blocks reserved for root count as free, as in
    RocketMQ's ``getDiskPartitionSpaceUsedPercent`` (``File.getFreeSpace``)."""
    try:
        usage = (disk_usage or shutil.disk_usage)(path)
    except OSError:
        return -1.0
    if isinstance(usage, (int, float)):
        return float(usage)
    total = usage.total
    return usage.used / total if total else -1.0


def disk_free_bytes(disk_usage: DiskUsage | None, path: str) -> int | None:
    """The bytes free on the partition holding ``path`` by ``disk_usage`` (``shutil.disk_usage`` when None):
    its ``free``, else ``total - used``. A hook that answers the used fraction alone says no byte count: 0
    when the fraction is 1 or more (full), None below (unknown; the caller goes on). ``OSError`` propagates."""
    usage = (disk_usage or shutil.disk_usage)(path)
    if isinstance(usage, (int, float)):
        return 0 if usage >= 1 else None
    free = getattr(usage, "free", None)
    return int(usage.total - usage.used if free is None else free)


class ServiceThread:
    """Base of the store's background services. Subclasses implement ``run`` and loop while
    ``not self.is_stopped()``. Thread-safe: ``wakeup`` and ``shutdown`` may be called from any thread."""

    join_time_ms = 90_000

    def __init__(self, name: str | None = None, clock: Callable[[], int] | None = None) -> None:
        self.name = name or type(self).__name__
        self.clock = clock or real_clock
        self._stopped = False
        self._notified = threading.Event()
        self._stop_event = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = False

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        if self._started:
            return
        self._started = True
        self._stopped = False
        self._stop_event.clear()
        self._thread = threading.Thread(target=self._main, name="pystore-" + self.name, daemon=True)
        self._thread.start()

    def _main(self) -> None:
        log.debug("%s started", self.name)
        try:
            self.run()
        except Exception:
            log.exception("%s stopped by an unexpected error", self.name)
        log.debug("%s ended", self.name)

    def run(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def shutdown(self, join: bool = True) -> None:
        self._stopped = True
        self._stop_event.set()
        self.wakeup()
        t = self._thread
        if join and t is not None and t is not threading.current_thread():
            t.join(self.join_time_ms / 1000)
            if t.is_alive():
                log.warning("%s did not stop within %d ms", self.name, self.join_time_ms)
        self._started = False

    def is_stopped(self) -> bool:
        return self._stopped

    @property
    def started(self) -> bool:
        return self._started

    # -- waiting --------------------------------------------------------------------------------

    def wakeup(self) -> None:
        self._notified.set()

    def sleep(self, interval_ms: float) -> None:
        """Sleep ``interval_ms``; ``wakeup()`` does not end it, ``shutdown()`` does (RocketMQ sleeps with
        ``Thread.sleep`` here, so its shutdown waits for the rest of the interval)."""
        self._stop_event.wait(max(interval_ms, 0) / 1000.0)

    def wait_for_running(self, interval_ms: float) -> None:
        if not self._notified.is_set():
            self._notified.wait(max(interval_ms, 0) / 1000.0)
        self._notified.clear()
        self.on_wait_end()

    def on_wait_end(self) -> None:
        """Hook run after every wait."""
