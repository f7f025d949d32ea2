"""The store's running flags (RocketMQ ``RunningFlags``, docs/format.md §9.4).

A bit set saying whether the store may be read and written and why not. ``is_writeable()`` is false
when any of NOT_WRITEABLE, WRITE_LOGICS_QUEUE_ERROR, WRITE_INDEX_FILE_ERROR, DISK_FULL is set;
``is_cq_writeable()`` ignores DISK_FULL. The ``getAndMake*`` methods return whether the bit was clear
before. Thread-safe (a lock guards the word); listeners run after each change, outside that lock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

__all__ = ["RunningFlags"]


class RunningFlags:
    NOT_READABLE_BIT = 1
    NOT_WRITEABLE_BIT = 1 << 1
    WRITE_LOGICS_QUEUE_ERROR_BIT = 1 << 2
    WRITE_INDEX_FILE_ERROR_BIT = 1 << 3
    DISK_FULL_BIT = 1 << 4

    _NOT_WRITEABLE_MASK = NOT_WRITEABLE_BIT | WRITE_LOGICS_QUEUE_ERROR_BIT | DISK_FULL_BIT | WRITE_INDEX_FILE_ERROR_BIT

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._flag = 0
        self._listeners: list[Callable[[], None]] = []

    def add_listener(self, fn: Callable[[], None]) -> None:
        self._listeners.append(fn)

    def _change(self, set_bits: int = 0, clear_bits: int = 0) -> int:
        with self._lock:
            before = self._flag
            self._flag = (before | set_bits) & ~clear_bits
        if before != self._flag:
            for fn in self._listeners:
                fn()
        return before

    def get_flag_bits(self) -> int:
        return self._flag

    def is_readable(self) -> bool:
        return not self._flag & self.NOT_READABLE_BIT

    def is_writeable(self) -> bool:
        return not self._flag & self._NOT_WRITEABLE_MASK

    def is_cq_writeable(self) -> bool:
        return not self._flag & (self.NOT_WRITEABLE_BIT | self.WRITE_LOGICS_QUEUE_ERROR_BIT | self.WRITE_INDEX_FILE_ERROR_BIT)

    def is_disk_full(self) -> bool:
        return bool(self._flag & self.DISK_FULL_BIT)

    def is_logics_queue_error(self) -> bool:
        return bool(self._flag & self.WRITE_LOGICS_QUEUE_ERROR_BIT)

    def is_index_file_error(self) -> bool:
        return bool(self._flag & self.WRITE_INDEX_FILE_ERROR_BIT)

    def get_and_make_readable(self) -> bool:
        """Clear NOT_READABLE; True if the store was readable before (RocketMQ's getAndMakeReadable)."""
        return not self._change(clear_bits=self.NOT_READABLE_BIT) & self.NOT_READABLE_BIT

    def get_and_make_not_readable(self) -> bool:
        return not self._change(set_bits=self.NOT_READABLE_BIT) & self.NOT_READABLE_BIT

    def get_and_make_writeable(self) -> bool:
        """Clear NOT_WRITEABLE; True if the store was writeable before (RocketMQ's getAndMakeWriteable)."""
        return not self._change(clear_bits=self.NOT_WRITEABLE_BIT) & self.NOT_WRITEABLE_BIT

    def get_and_make_not_writeable(self) -> bool:
        return not self._change(set_bits=self.NOT_WRITEABLE_BIT) & self.NOT_WRITEABLE_BIT

    def make_logics_queue_error(self) -> None:
        self._change(set_bits=self.WRITE_LOGICS_QUEUE_ERROR_BIT)

    def make_index_file_error(self) -> None:
        self._change(set_bits=self.WRITE_INDEX_FILE_ERROR_BIT)

    def clear_logics_queue_error(self) -> None:
        self._change(clear_bits=self.WRITE_LOGICS_QUEUE_ERROR_BIT)

    def get_and_make_disk_full(self) -> bool:
        """Set DISK_FULL; True if it was clear before."""
        return not self._change(set_bits=self.DISK_FULL_BIT) & self.DISK_FULL_BIT

    def get_and_make_disk_ok(self) -> bool:
        """Clear DISK_FULL; True if it was clear before."""
        return not self._change(clear_bits=self.DISK_FULL_BIT) & self.DISK_FULL_BIT

    def __repr__(self) -> str:
        names = [n for n, b in (("NOT_READABLE", 1), ("NOT_WRITEABLE", 2), ("WRITE_LOGICS_QUEUE_ERROR", 4),
                                ("WRITE_INDEX_FILE_ERROR", 8), ("DISK_FULL", 16)) if self._flag & b]
        return "RunningFlags(%s)" % ("|".join(names) or "OK")
