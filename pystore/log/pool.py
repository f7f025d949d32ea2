"""The transient store pool (docs/format.md §5.4, RocketMQ's ``TransientStorePool``).

``transient_store_pool_size`` page-aligned anonymous buffers of the commit-log file size, locked in memory
when the OS allows (``mlock``; a refusal, e.g. a low ``RLIMIT_MEMLOCK``, is logged and the buffers stay
unlocked). With the pool on, the allocate service attaches a buffer to each new commit-log file: puts write
into the buffer, ``CommitRealTimeService`` copies the appended bytes into the file's mapping (``commit``),
then the flush service forces the file as usual. Readers and dispatch see only committed bytes. A file
returns its buffer once it is committed whole; the buffers are never zeroed (only bytes below the write
position are ever copied out).

Borrowing takes the most recently returned buffer (LIFO, warm in cache). When none is left a new file is
written straight into its mapping, unless ``fast_fail_if_no_buffer_in_store_pool`` is set, in which case the
allocation fails (``CREATE_MAPPED_FILE_FAILED``), as RocketMQ's allocate service does.

Enabled only with ASYNC_FLUSH on a master, as in RocketMQ 4.8 (``isTransientStorePoolEnable``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import mmap
import threading
from typing import Any

log = logging.getLogger(__name__)

_libc: Any = None


def _mlock(buf: mmap.mmap, size: int, lock: bool) -> bool:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    fn = _libc.mlock if lock else _libc.munlock
    fn.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
    ok: bool = fn(ctypes.c_void_p(addr), ctypes.c_size_t(size)) == 0
    return ok


class TransientStorePool:
    """``pool_size`` buffers of ``file_size`` bytes; ``attach(mapped_file)`` is what the allocate service calls."""

    def __init__(self, pool_size: int, file_size: int, fast_fail: bool = False) -> None:
        if pool_size <= 0:
            raise ValueError("transient_store_pool_size must be positive, got %d" % pool_size)
        self.pool_size = pool_size
        self.file_size = file_size
        self.fast_fail = fast_fail
        self._lock = threading.Lock()
        self._free: list[mmap.mmap] = []
        self._all: list[mmap.mmap] = []
        self.locked = False

    def init(self) -> None:
        locked = True
        for _ in range(self.pool_size):
            buf = mmap.mmap(-1, self.file_size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
            if locked and not _mlock(buf, self.file_size, True):
                locked = False
                log.warning("cannot lock the transient store pool in memory (errno %d); it stays pageable",
                            ctypes.get_errno())
            self._all.append(buf)
            self._free.append(buf)
        self.locked = locked
        log.info("transient store pool: %d buffers of %d bytes%s", self.pool_size, self.file_size,
                 " locked in memory" if locked else "")

    def borrow_buffer(self) -> mmap.mmap | None:
        with self._lock:
            buf = self._free.pop() if self._free else None
            remaining = len(self._free)
        if remaining < self.pool_size * 0.4:
            log.warning("transient store pool: only %d buffers left", remaining)
        return buf

    def return_buffer(self, buf: mmap.mmap) -> None:
        with self._lock:
            if any(b is buf for b in self._free):
                return
            self._free.append(buf)

    def available_buffer_nums(self) -> int:
        with self._lock:
            return len(self._free)

    def attach(self, mf: Any) -> None:
        """Give a new commit-log file a buffer to write into (called when the file is created)."""
        buf = self.borrow_buffer()
        if buf is None:
            if self.fast_fail:
                raise OSError("no buffer left in the transient store pool")
            log.warning("transient store pool exhausted: %s is written straight into its mapping", mf.file_name)
            return
        mf.attach_pool_buffer(self, buf, buf)

    def destroy(self) -> None:
        with self._lock:
            for buf in self._all:
                if self.locked:
                    _mlock(buf, self.file_size, False)
                try:
                    buf.close()
                except BufferError:          # still exported by a file that outlived the store
                    log.warning("a transient pool buffer is still in use; left to the garbage collector")
            self._all.clear()
            self._free.clear()
