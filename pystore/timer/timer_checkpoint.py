"""The timer checkpoint: RocketMQ 5's ``config/timercheck``, where the timer store records how far it has read, written
and flushed (RocketMQ ``org.apache.rocketmq.store.timer.TimerCheckpoint``: its constructor reads the file,
``flush`` writes it, ``encode``/``decode`` are the 56 bytes a slave fetches from its master; ``DataVersion`` of
``org.apache.rocketmq.remoting.protocol``; the path from ``BrokerPathConfigHelper.getTimerCheckPath``).

The file is one page, ``OS_PAGE_SIZE`` = 4096 bytes (RocketMQ maps that much of it, which makes a new file that
long), of which the first 56 are seven big-endian longs and the rest zeros::

    0               8                      16                     24                       32
    | lastReadTimeMs | lastTimerLogFlushPos | lastTimerQueueOffset | masterTimerQueueOffset |
    32                            40                     48                 56             4096
    | dataVersion.stateVersion    | dataVersion.timestamp | dataVersion.counter | zeros ... |

* ``lastReadTimeMs``: the wheel's read (dequeue) time committed so far; recovery restarts dequeuing there (but never
  earlier than now minus the wheel's span plus ``TIMER_BLANK_SLOTS`` ticks).
* ``lastTimerLogFlushPos``: the timer log's flushed position; recovery rescans the log from one file before it.
* ``lastTimerQueueOffset``: the next offset to enqueue from the ``rmq_sys_wheel_timer`` consume queue (min of the
  committed offset and ``masterTimerQueueOffset``).
* ``masterTimerQueueOffset``: the master's committed queue offset (a slave reads it from its master).
* the data version: ``updateDateVersion(stateVersion)`` (sic) sets ``stateVersion``, sets ``timestamp`` to now and
  increments ``counter``; it moves whenever the committed read time or queue offset does, and decides which of a
  master and a slave has the newer checkpoint.

RocketMQ writes the page in place through its mapping and forces it. pystore writes the whole page to a temporary
file, fsyncs it and renames it over ``timercheck`` (then syncs the folder): the bytes are RocketMQ's, and a crash
leaves the old page or the new one, never half of each. Bytes 56 to 4096 of an existing file are kept as they are.
A file shorter than a page reads as if padded with zeros (RocketMQ maps a page of it); a missing file gives zeros
and a data version stamped now, and a writer creates it (zeros) on opening, as RocketMQ's ``RandomAccessFile`` does.
"""

from __future__ import annotations

import logging
import os
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass

from pystore.system.durable import make_dirs_durable, sync_dirs

__all__ = ["CHECKPOINT_FILE_SIZE", "CHECKPOINT_BYTES", "DataVersion", "TimerCheckpoint", "checkpoint_path"]

log = logging.getLogger(__name__)

#: ``DefaultMappedFile.OS_PAGE_SIZE``: the size of the file
CHECKPOINT_FILE_SIZE = 4096
#: the bytes that mean something (``TimerCheckpoint.encode``)
CHECKPOINT_BYTES = 56

_LAYOUT = struct.Struct(">qqqqqqq")
_OLD = struct.Struct(">qqqq")           # ``decode`` of a master without the data version

assert _LAYOUT.size == CHECKPOINT_BYTES


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def checkpoint_path(store_root: str) -> str:
    """``BrokerPathConfigHelper.getTimerCheckPath``: ``<root>/config/timercheck``."""
    return os.path.join(store_root, "config", "timercheck")


@dataclass
class DataVersion:
    """RocketMQ's ``DataVersion``: state version, timestamp (ms), counter."""

    state_version: int = 0
    timestamp: int = 0
    counter: int = 0

    def next_version(self, state_version: int = 0, now_ms: int | None = None) -> None:
        """``nextVersion(stateVersion)``."""
        self.timestamp = _now_ms() if now_ms is None else now_ms
        self.state_version = state_version
        self.counter += 1

    def assign(self, other: DataVersion) -> None:
        """``assignNewOne``."""
        self.state_version, self.timestamp, self.counter = other.state_version, other.timestamp, other.counter


class TimerCheckpoint:
    """``config/timercheck``.

    ``TimerCheckpoint(path=None, read_only=False, clock=None)`` reads the file (``path=None``: in memory only,
    RocketMQ's no-argument constructor). The four fields are plain attributes (``last_read_time_ms``,
    ``last_timer_log_flush_pos``, ``last_timer_queue_offset``, ``master_timer_queue_offset``) beside
    ``data_version``; ``flush()`` writes them, ``encode()``/``decode(data)`` are the 56 bytes,
    ``update_data_version(state_version)``, ``close()`` flushes.
    """

    def __init__(self, path: str | None = None, read_only: bool = False,
                 clock: Callable[[], int] | None = None) -> None:
        self.path = path
        self.read_only = read_only
        self.clock = clock or _now_ms
        self.last_read_time_ms = 0
        self.last_timer_log_flush_pos = 0
        self.last_timer_queue_offset = 0
        self.master_timer_queue_offset = 0
        self.data_version = DataVersion(timestamp=self.clock())
        self._page = bytearray(CHECKPOINT_FILE_SIZE)
        if path is None:
            return
        try:
            with open(path, "rb") as f:
                raw = f.read(CHECKPOINT_FILE_SIZE)
        except FileNotFoundError:
            log.info("timer checkpoint file does not exist: %s", path)
            if not read_only:
                self._write(bytes(self._page))
            return
        self._page[:len(raw)] = raw
        self._set(_LAYOUT.unpack_from(self._page))
        log.info("timer checkpoint %s: lastReadTimeMs %d, lastTimerLogFlushPos %d, lastTimerQueueOffset %d, "
                 "masterTimerQueueOffset %d, data version %s", path, self.last_read_time_ms,
                 self.last_timer_log_flush_pos, self.last_timer_queue_offset, self.master_timer_queue_offset,
                 self.data_version)

    def _set(self, values: tuple[int, ...]) -> None:
        (self.last_read_time_ms, self.last_timer_log_flush_pos, self.last_timer_queue_offset,
         self.master_timer_queue_offset) = values[:4]
        if len(values) > 4:
            self.data_version = DataVersion(*values[4:7])

    def encode(self) -> bytes:
        """``TimerCheckpoint.encode``: the 56 bytes (the file's first 56)."""
        dv = self.data_version
        return _LAYOUT.pack(self.last_read_time_ms, self.last_timer_log_flush_pos, self.last_timer_queue_offset,
                            self.master_timer_queue_offset, dv.state_version, dv.timestamp, dv.counter)

    @classmethod
    def decode(cls, data: bytes) -> TimerCheckpoint:
        """``TimerCheckpoint.decode``: an in-memory checkpoint from 32 bytes (an old master: the data version stays
        new) or 56."""
        cp = cls()
        if len(data) >= CHECKPOINT_BYTES:
            cp._set(_LAYOUT.unpack_from(data))
        elif len(data) >= _OLD.size:
            cp._set(_OLD.unpack_from(data))
        else:
            raise ValueError("a timer checkpoint is %d bytes (or %d), got %d" % (CHECKPOINT_BYTES, _OLD.size, len(data)))
        return cp

    def update_data_version(self, state_version: int) -> None:
        """``updateDateVersion``: the data version moves on (now, ``state_version``, counter + 1)."""
        self.data_version.next_version(state_version, self.clock())

    def flush(self) -> None:
        """Write the checkpoint (the page, its first 56 bytes from the fields) and make it durable."""
        if self.path is None or self.read_only:
            return
        self._page[:CHECKPOINT_BYTES] = self.encode()
        self._write(bytes(self._page))

    def _write(self, page: bytes) -> None:
        assert self.path is not None
        folder = os.path.dirname(os.path.abspath(self.path))
        make_dirs_durable(folder)
        tmp = self.path + ".tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            view = memoryview(page)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        sync_dirs([folder])

    def close(self) -> None:
        """``shutdown``: flush (a failure is logged, as RocketMQ does)."""
        try:
            self.flush()
        except OSError:
            log.exception("flush of the timer checkpoint %s failed on close", self.path)

    def __repr__(self) -> str:
        return ("TimerCheckpoint(last_read_time_ms=%d, last_timer_log_flush_pos=%d, last_timer_queue_offset=%d, "
                "master_timer_queue_offset=%d, %s)" % (self.last_read_time_ms, self.last_timer_log_flush_pos,
                                                       self.last_timer_queue_offset, self.master_timer_queue_offset,
                                                       self.data_version))
