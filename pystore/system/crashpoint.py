"""Named crash points for crash tests (cf. bbolt's fail points).

``PYSTORE_CRASHPOINT=name`` (or ``name:n``) in the environment makes the process SIGKILL itself the first
(or n-th) time it reaches ``crashpoint("name")``; ``PYSTORE_CRASHPOINT=*:n`` kills at the n-th point of any
name. Points sit in the Python layer, at the moments a crash is most interesting: rolling to a new file,
mid-recovery, mid-shutdown; a few in compiled code (the shared append), which reads ``nth`` once at import and
costs a compare of a C int. Without the variable a point costs one global lookup.
"""

from __future__ import annotations

import os
import signal
import threading

__all__ = ["armed", "crashpoint", "nth", "POINTS"]

#: Every point the store defines, for tests that iterate them.
POINTS = (
    "commitlog.roll",          # the old file ends with its blank, the next one is not created yet
    "allocate.created",        # a new commit-log file exists on disk, not yet handed to the put path
    "groupcommit.flushed",     # data is on disk, the waiting puts are not told yet
    "checkpoint.written",      # the checkpoint's new bytes are written, not yet synced
    "recovery.scanned",        # the valid end is known, nothing truncated yet
    "recovery.truncated",      # commit log truncated, consume queues not yet
    "shutdown.flushed",        # final flush done, checkpoint not written
    "shutdown.checkpoint",     # checkpoint written, abort file still there
    "timer.delivered",         # a wheel slot's messages put to their topics, the read time not moved yet
    "timer.flushed",           # the timer log and wheel flushed, config/timercheck not written yet
    "timer.checkpoint",        # config/timercheck written and synced (the next flush has not begun)
    # several writer processes (compiled points in ``_commitlog``, armed at its import: ``nth``)
    "shared.reserved",         # the append lock held, the reserved end set, nothing of the record written
    "shared.copied",           # the record written in full, the published end not yet moved
    "shared.catching_up",      # one record of another writer walked, the rest not
    "shared.repairing",        # a dead writer's torn bytes zeroed, the repair not yet published
)

_spec = os.environ.get("PYSTORE_CRASHPOINT", "")
_name, _, _nth = _spec.partition(":")
_target = int(_nth) if _nth.isdigit() else 1
_count = 0
_lock = threading.Lock()


def crashpoint(name: str) -> None:
    """Kill this process with SIGKILL if the environment asks for a crash here."""
    global _count
    if not _name or (_name != name and _name != "*"):
        return
    with _lock:
        _count += 1
        if _count < _target:
            return
    os.kill(os.getpid(), signal.SIGKILL)


def armed(name: str) -> bool:
    """Whether the environment asks for a crash at ``name`` (``*`` asks at every point): a fast path that would
    go around the point (the commit log's ready file, taken in C) steps aside while it is armed."""
    return bool(_name) and (_name == name or _name == "*")


def nth(name: str) -> int:
    """For a compiled point: at which arrival the process kills itself (0: never), read once at import."""
    return _target if _name == name else 0
