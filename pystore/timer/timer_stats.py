"""What the timer store's files say, read without writing (``MessageStore.timer_stats`` of a store whose timer
store does not run here, ``pystore inspect``): the files and their sizes, the checkpoint, and the pending count and
next due time that the wheel's slots from the checkpoint's read time give (RocketMQ ``getAllCongestNum``).

Nothing is locked or changed: on a live store the numbers are those of the last flush (``timer_flush_interval_ms``).
"""

from __future__ import annotations

import os
from typing import Any

from pystore.timer._enqueue import wheel_pending
from pystore.timer.timer_checkpoint import TimerCheckpoint, checkpoint_path
from pystore.timer.timer_wheel import DEFAULT_SLOTS_TOTAL, TimerWheel

__all__ = ["timer_files", "stats_from_files"]


def timer_files(root: str) -> dict[str, Any]:
    """``{"timerwheel": bytes or None, "timerlog": [(file name, bytes), ...], "timercheck": bytes or None}``."""
    def size(path: str) -> int | None:
        try:
            return os.path.getsize(path)
        except OSError:
            return None

    folder = os.path.join(root, "timerlog")
    try:
        names = sorted(n for n in os.listdir(folder) if n.isdigit())
    except OSError:
        names = []
    return {
        "timerwheel": size(os.path.join(root, "timerwheel")),
        "timerlog": [(n, size(os.path.join(folder, n)) or 0) for n in names],
        "timercheck": size(checkpoint_path(root)),
    }


def stats_from_files(root: str, precision_ms: int, now_ms: int) -> dict[str, Any]:
    """``pending``, ``next_due_ms``, ``lag_ms`` as ``TimerMessageStore.stats`` gives them, from the files (zeros
    and None for a store without timer files), with the checkpoint's fields under ``checkpoint``."""
    files = timer_files(root)
    out: dict[str, Any] = {"pending": 0, "next_due_ms": None, "lag_ms": 0, "files": files, "checkpoint": None}
    if files["timercheck"] is None:
        return out
    cp = TimerCheckpoint(checkpoint_path(root), read_only=True)
    out["checkpoint"] = {
        "last_read_time_ms": cp.last_read_time_ms,
        "last_timer_log_flush_pos": cp.last_timer_log_flush_pos,
        "last_timer_queue_offset": cp.last_timer_queue_offset,
        "master_timer_queue_offset": cp.master_timer_queue_offset,
        "data_version": {"state_version": cp.data_version.state_version, "timestamp": cp.data_version.timestamp,
                         "counter": cp.data_version.counter},
    }
    out["lag_ms"] = max(0, now_ms // precision_ms * precision_ms - cp.last_read_time_ms)
    if files["timerwheel"]:
        wheel = TimerWheel(os.path.join(root, "timerwheel"), DEFAULT_SLOTS_TOTAL, precision_ms, read_only=True)
        try:
            # the two turns from the read time (``occupied``'s slots), summed in C without the GIL
            read = cp.last_read_time_ms
            units, first = wheel_pending(wheel.raw, DEFAULT_SLOTS_TOTAL, precision_ms, read,
                                         read + (2 * DEFAULT_SLOTS_TOTAL - 1) * precision_ms)
        finally:
            wheel.close(flush=False)
        out["pending"] = int(units)
        out["next_due_ms"] = first + precision_ms if first >= 0 else None
    return out
