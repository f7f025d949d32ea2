"""The store folder's small files: ``checkpoint``, ``abort`` and ``lock`` (docs/format.md §4).

``checkpoint`` (4096 bytes, big-endian, the 5.x layout)::

    0    8    physicMsgTimestamp   store time of the last flushed commit-log message
    8    8    logicsMsgTimestamp   store time of the last message built into a consume queue (and flushed)
    16   8    indexMsgTimestamp    end time of the last full, flushed index file
    24   8    masterFlushedOffset  (5.x)
    32   8    confirmPhyOffset     (5.x)
    40 .. 4096  zeros

Abnormal recovery starts from the newest commit-log file whose first message is not newer than
``min_timestamp()`` = max(0, min(physic, logics) − 3000). A checkpoint that cannot be trusted (short file,
negative or future times) reads as all zeros, which makes recovery start from the first file: slower,
never wrong.

``abort`` exists while a writer runs; finding it at load means the last writer did not shut down
cleanly. ``lock`` carries an exclusive ``flock`` for as long as a writer has the store open; a second
writer, in this process or another, gets :class:`~pystore.errors.StoreLockedError` before it touches a file.

Time is the store's clock (``clock``, epoch ms; ``pystore.system.service``): it decides when the next automatic write
is due and how far in the future a time may lie before the file counts as impossible, so a test's fake clock
drives both.

Names are durable (``pystore.system.durable``; RocketMQ does not fsync directories): the folder is fsynced after
``abort`` is created or removed, and after the checkpoint's first write creates the file (once, not at
every write).
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import struct
import threading
from collections.abc import Callable

from pystore.errors import StoreLockedError
from pystore.system import forksafe
from pystore.system.crashpoint import crashpoint
from pystore.system.durable import fsync_dir
from pystore.system.service import real_clock

__all__ = ["StoreCheckpoint", "AbortFile", "StoreLock", "CHECKPOINT_FILE_SIZE"]

log = logging.getLogger(__name__)

CHECKPOINT_FILE_SIZE = 4096
_LAYOUT = struct.Struct(">qqqqq")
_ONE_DAY_MS = 86_400_000


class _Time:
    """One of the checkpoint's three times, an ``int`` to the type checker: read from ``_<name>``, set through
    ``StoreCheckpoint._set_time`` (which marks the checkpoint dirty and may write it)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.attr = "_" + name

    def __get__(self, obj: StoreCheckpoint, objtype: type | None = None) -> int:
        value: int = getattr(obj, self.attr)
        return value

    def __set__(self, obj: StoreCheckpoint, value: int) -> None:
        obj._set_time(self.attr, value)


class StoreCheckpoint:
    """The checkpoint file. Thread-safe: a lock guards the write.

    The flush services set the times as data reaches disk (the commit log's ``physic_msg_timestamp`` after
    every flush, the queues' ``logics_msg_timestamp`` after a thorough queue flush, the index's time when a
    full index file is flushed). With ``auto_flush_ms`` > 0 (a writer, once loaded) a changed time is
    written to the file by whichever service sets a time once ``auto_flush_ms`` has passed since the last
    write: 5.x's once-a-second checkpoint task, without a thread of its own. The services call setters every
    few milliseconds (group commit) or every flush interval, so a change reaches the file within about
    ``auto_flush_ms`` plus one interval. Recovery's guard against truncating durable data
    (``recovery._judge_damage``) relies on it after a crash."""

    def __init__(self, path: str, read_only: bool = False, auto_flush_ms: int = 0,
                 clock: Callable[[], int] | None = None) -> None:
        self.path = path
        self.read_only = read_only
        #: epoch ms: when the next automatic write is due, and the horizon of a trusted time
        self.clock = clock or real_clock
        self._lock = threading.Lock()
        self.auto_flush_ms = 0          # no writes while loading the fields
        self._dirty = False
        self._last_flush = 0            # the clock's ms at the last write (0: never written)
        self._physic_msg_timestamp = 0
        self._logics_msg_timestamp = 0
        self._index_msg_timestamp = 0
        self.master_flushed_offset = 0
        self.confirm_phy_offset = 0
        self.trusted = True
        #: the file's name is durable (it existed at load, or its directory was fsynced after creating it)
        self._named = True
        self._load()
        self._dirty = False
        self.auto_flush_ms = auto_flush_ms

    # The three times (``_Time``): setting a new value marks the checkpoint dirty and, with ``auto_flush_ms``,
    # writes it once that long has passed since the last write.
    physic_msg_timestamp = _Time()
    logics_msg_timestamp = _Time()
    index_msg_timestamp = _Time()

    def _set_time(self, attr: str, value: int) -> None:
        if value != getattr(self, attr):
            setattr(self, attr, value)
            self._dirty = True
        if self._dirty and self.auto_flush_ms > 0:
            self._maybe_flush()

    def _maybe_flush(self) -> None:
        if self.read_only:
            return
        since = self.clock() - self._last_flush
        # a clock that went back (since < 0) writes now: waiting for it to catch up could leave the file
        # that much older than the data after a crash, which recovery's damage guard relies on
        if 0 <= since < self.auto_flush_ms:
            return
        try:
            self.flush()
        except OSError:
            log.exception("writing the checkpoint %s failed", self.path)

    def _load(self) -> None:
        try:
            with open(self.path, "rb") as f:
                data = f.read(CHECKPOINT_FILE_SIZE)
        except FileNotFoundError:
            self._named = False
            return
        if len(data) < _LAYOUT.size:
            log.warning("checkpoint %s is %d bytes: ignored, recovery starts from the first file", self.path, len(data))
            self.trusted = False
            return
        values: tuple[int, ...] = _LAYOUT.unpack_from(data)
        horizon = self.clock() + _ONE_DAY_MS
        if any(v < 0 for v in values) or any(v > horizon for v in values[:3]):
            log.warning("checkpoint %s holds impossible values %r: ignored", self.path, values)
            self.trusted = False
            return
        (self.physic_msg_timestamp, self.logics_msg_timestamp, self.index_msg_timestamp,
         self.master_flushed_offset, self.confirm_phy_offset) = values

    def min_timestamp(self) -> int:
        """RocketMQ ``getMinTimestamp``: max(0, min(physic, logics) − 3000)."""
        m = min(self.physic_msg_timestamp, self.logics_msg_timestamp) - 3000
        return m if m > 0 else 0

    def min_timestamp_index(self) -> int:
        return min(self.min_timestamp(), self.index_msg_timestamp)

    def to_bytes(self) -> bytes:
        head = _LAYOUT.pack(self.physic_msg_timestamp, self.logics_msg_timestamp, self.index_msg_timestamp,
                            self.master_flushed_offset, self.confirm_phy_offset)
        return head + bytes(CHECKPOINT_FILE_SIZE - len(head))

    @property
    def on_disk(self) -> bool:
        """Whether the file existed when it was loaded or has been written since."""
        return self._named

    def flush(self, crash_point: bool = True) -> None:
        """Write the fields and force them to disk. ``crash_point``: the write is the ``checkpoint.written``
        crash point (a new store's first write, at open, is not: crash tests count the writes of a running
        writer)."""
        if self.read_only:
            return
        with self._lock:
            self._dirty = False
            self._last_flush = self.clock()
            data = self.to_bytes()
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                os.pwrite(fd, data, 0)
                if crash_point:
                    crashpoint("checkpoint.written")
                os.fdatasync(fd)
            finally:
                os.close(fd)
            if not self._named:
                fsync_dir(os.path.dirname(self.path))     # once: the first write created the file
                self._named = True

    def __repr__(self) -> str:
        return "StoreCheckpoint(physic=%d, logics=%d, index=%d, master_flushed=%d, confirm=%d)" % (
            self.physic_msg_timestamp, self.logics_msg_timestamp, self.index_msg_timestamp,
            self.master_flushed_offset, self.confirm_phy_offset)


class AbortFile:
    """The ``abort`` marker: created at start (with the writer's PID, as 5.x does), removed at a clean
    shutdown."""

    def __init__(self, path: str) -> None:
        self.path = path

    def exists(self) -> bool:
        return os.path.exists(self.path)

    def create(self) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            os.write(fd, str(os.getpid()).encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        fsync_dir(os.path.dirname(self.path))

    def remove(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            return
        try:
            fsync_dir(os.path.dirname(self.path))
        except OSError:
            # the marker may come back after a power cut: the next open then recovers as after a crash (slower,
            # never wrong), so a clean shutdown is not failed for it
            log.exception("making the removal of %s durable failed", self.path)


class StoreLock:
    """``flock`` on ``<root>/lock``: exclusive for a store's only writer, shared by the writers of a store opened
    with ``shared_writers`` (several processes). ``acquire`` raises StoreLockedError when the lock is held in
    the other mode (or, exclusively, at all), naming the mode it is held in and the holders' pids."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd: int | None = None
        self.shared = False

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self, shared: bool = False) -> None:
        if self._fd is not None:
            return
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise StoreLockedError(self.path, _locked_message(self.path, shared)) from None
            raise
        if not shared:
            os.pwrite(fd, b"lock", 0)
            os.fsync(fd)
        self._fd = fd
        self.shared = shared
        forksafe.track(self)

    def release(self) -> None:
        if self._fd is None:
            return
        forksafe.untrack(self)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        finally:
            os.close(self._fd)
            self._fd = None

    def _drop_after_fork(self) -> None:
        """In a forked child: let go of the inherited descriptor without unlocking (the lock is the
        parent's; ``pystore.system.forksafe``)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


def _locked_message(path: str, wanted_shared: bool) -> str:
    holders = lock_holders(path) or []
    pids = ", ".join(str(pid) for pid, _ in holders) or "unknown"
    if any(shared for _, shared in holders):
        held = "by %d process(es) that opened it with shared_writers=True (pid %s)" % (len(holders), pids)
    else:
        held = "by its only writer (pid %s)" % pids
    wanted = "with shared_writers=True" if wanted_shared else "as its only writer"
    return "%s: the store is locked %s; it cannot be opened %s (open it the same way, or read_only=True)" % (
        path, held, wanted)


def lock_holders(path: str) -> list[tuple[int, bool]] | None:
    """``(pid, shared)`` of every process that holds the ``flock`` on the store's ``lock`` file at ``path``, read
    from ``/proc/locks`` without touching the lock (taking even a shared lock for a moment would make a writer
    starting at that instant fail with StoreLockedError). None when it cannot tell (no such file, or no
    ``/proc``)."""
    try:
        st = os.stat(path)
        with open("/proc/locks") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    found = []
    for line in lines:
        parts = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF" (a blocked waiter's line has "->" first; READ: shared)
        if "FLOCK" not in parts or "->" in parts:
            continue
        for i, fld in enumerate(parts):
            if fld.count(":") == 2:
                try:
                    inode = int(fld.rsplit(":", 1)[1])
                    pid = int(parts[i - 1])
                except ValueError:
                    break
                if inode == st.st_ino:
                    found.append((pid, "READ" in parts))
                break
    return found


def writer_holds_lock(path: str) -> bool | None:
    """Does a process hold the ``flock`` on the store's ``lock`` file at ``path`` (a writer is running)? None when
    it cannot tell (``lock_holders``)."""
    holders = lock_holders(path)
    return None if holders is None else bool(holders)
