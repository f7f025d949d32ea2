"""What a forked child must not keep of its parent's stores: the file descriptors that hold the stores' kernel
locks, and the right to write.

``fork`` copies every file descriptor, and a ``flock`` or an open-file-description (OFD) ``fcntl`` lock
belongs to the open file description the parent and the child then share: the kernel releases it only when
the last of the two closes it. A child that outlives its parent (a ``multiprocessing`` worker of the fork
start method, a daemon's helper) would so keep the store's ``lock`` file locked (a new writer gets
``StoreLockedError`` naming a dead pid) and, with several writers, the services' leader byte (no process
takes over: nothing is dispatched, flushed or cleaned while the child lives). Worse, a child that unlocked
(``shutdown`` of the store object it inherited) would release the parent's locks under it.

So in the child, right after ``fork``, each registered holder drops what it inherited (``_drop_after_fork``):
it closes its descriptors without unlocking (the parent's locks stay whole) and forgets them, and a writer
store stops writing (its service threads were not copied into the child, and its files are the parent's to
write): it still reads, refuses puts, and its ``shutdown`` writes nothing. A child opens the store again to
write. Holders register while they hold a lock and leave
when they let go; the registry holds them weakly.
"""

from __future__ import annotations

import os
import weakref
from typing import Protocol


class ForkDropper(Protocol):
    def _drop_after_fork(self) -> None: ...


_holders: weakref.WeakSet[ForkDropper] = weakref.WeakSet()


def track(holder: ForkDropper) -> None:
    """``holder._drop_after_fork()`` is called in the child of any later ``fork`` of this process."""
    _holders.add(holder)


def untrack(holder: ForkDropper) -> None:
    _holders.discard(holder)


def _after_fork_in_child() -> None:
    holders = list(_holders)
    _holders.clear()
    for holder in holders:
        try:
            holder._drop_after_fork()
        except Exception:  # noqa: BLE001 - a child must come up whatever one holder does; logging may not be safe yet
            pass


os.register_at_fork(after_in_child=_after_fork_in_child)
