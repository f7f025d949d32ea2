"""``ServiceThread``: the loop every background service runs in (RocketMQ ``ServiceThread``).

A service sleeps in ``wait_for_running(interval)`` until its interval passes or someone calls
``wakeup()``; ``on_wait_end`` runs after every wait (the group commit swaps its request lists there).
``sleep(interval)`` ignores wake-ups (the timed flush) but not ``shutdown()``.
``shutdown()`` stops the loop, wakes it and joins it. Time comes from an injected ``clock`` (ms) so tests
move time instead of sleeping; the sleeping itself always uses real time.

Services are daemon threads: a process that exits without ``shutdown()`` behaves like a crash, which is
what recovery is for. An exception escaping ``run`` is logged, never swallowed silently.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

__all__ = ["ServiceThread", "real_clock"]

log = logging.getLogger(__name__)


def real_clock() -> int:
    """Wall-clock milliseconds since the epoch (RocketMQ's ``System.currentTimeMillis``)."""
    return time.time_ns() // 1_000_000


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
