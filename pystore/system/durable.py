"""Durable names: fsync the directory after a file or folder is created, renamed or removed in it.

Under POSIX a new file's data can be on disk while its *name* is not: the directory entry is durable only
once the directory itself is fsynced (a new folder needs its parent fsynced too). A power cut can otherwise
leave a store whose commit-log files, consume-queue folders or config files simply are not there, and the
store reopens silently empty or short. SQLite and LMDB fsync the directory; RocketMQ does not (its
``MappedFile`` creates files with ``RandomAccessFile`` and never forces a directory), and relies on ext4's
ordered mode. pystore deliberately adds it, once per file or folder created or removed, never per message.

* ``fsync_dir(path)``: the one place that fsyncs a directory.
* ``make_dirs(path)``: ``os.makedirs`` that returns the folders whose entries it changed (each new folder
  and the parent of the topmost one), for the caller to sync now (``sync_dirs``) or later (``PendingDirs``).
* ``sync_tree(paths)``: every file and folder under ``paths`` made durable, whoever wrote them (a takeover of
  several writers' lead: what the dead leader wrote may still be only in the page cache).
* ``PendingDirs``: directories changed on a hot path (a consume-queue or index file created under the put
  lock), synced by the next flush of that log *before* it counts anything as flushed: "flushed" then
  always means "reachable after a power cut", and the put lock never waits for a directory fsync.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
from collections.abc import Iterable

__all__ = ["fsync_dir", "sync_dirs", "sync_tree", "make_dirs", "make_dirs_durable", "PendingDirs"]

log = logging.getLogger(__name__)

#: errors meaning "this file system cannot fsync a directory" (some FUSE and network file systems): nothing
#: more can be done there, and refusing to run would be worse
_UNSUPPORTED = (errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EBADF)


def fsync_dir(path: str) -> None:
    """Make the entries of directory ``path`` durable (files created, renamed or removed in it). A folder
    that no longer exists, or a file system that cannot fsync directories, is skipped; an I/O error raises
    (the caller's creation or removal then fails rather than being reported durable)."""
    try:
        fd = os.open(path or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    except OSError as e:
        if e.errno not in _UNSUPPORTED:
            raise
        log.debug("%s: the file system cannot fsync a directory (%s)", path, e)
    finally:
        os.close(fd)


def sync_dirs(paths: Iterable[str]) -> None:
    """``fsync_dir`` each of ``paths`` (deepest first, each once)."""
    for path in sorted(set(paths), key=lambda p: (-p.count(os.sep), p)):
        fsync_dir(path)


def sync_tree(paths: Iterable[str]) -> int:
    """``fdatasync`` every regular file under each of ``paths`` (a file or a folder, walked), then fsync the
    folders: the page cache's dirty pages of a file are written whatever process dirtied them, through whatever
    mapping. A path that is gone is skipped; an I/O error raises. The number of files synced."""
    files, dirs = [], []
    for top in paths:
        if os.path.isfile(top):
            files.append(top)
            dirs.append(os.path.dirname(os.path.abspath(top)))
            continue
        for folder, _, names in os.walk(top):
            dirs.append(folder)
            files.extend(os.path.join(folder, n) for n in names)
    n = 0
    for path in files:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:           # deleted meanwhile (cleaning, a spare renamed)
            continue
        try:
            if os.path.isfile(path):
                os.fdatasync(fd)
                n += 1
        finally:
            os.close(fd)
    sync_dirs(dirs)
    return n


def make_dirs(path: str) -> list[str]:
    """Create ``path`` and its missing parents; the directories whose entries changed: every folder created
    and the parent of the topmost one (empty when ``path`` existed). Nothing is synced here."""
    path = os.path.abspath(path)
    if os.path.isdir(path):
        return []
    missing = []
    head = path
    while not os.path.isdir(head):
        missing.append(head)
        parent = os.path.dirname(head)
        if parent == head:
            break
        head = parent
    os.makedirs(path, exist_ok=True)
    if not missing:
        # another thread made it between the two looks (the consumer-offset and delay-offset services both
        # write under config/): its parent is where the new name is, and syncing it again is harmless
        return [os.path.dirname(path)]
    return [os.path.dirname(missing[-1])] + missing[::-1]


def make_dirs_durable(path: str) -> None:
    """``make_dirs`` and sync what it changed, before returning."""
    sync_dirs(make_dirs(path))


class PendingDirs:
    """Directories changed but not synced yet. ``add`` is cheap (the put path); ``sync`` is called by the
    flush of the log they belong to before it moves its flushed offset. Thread-safe."""

    __slots__ = ("_dirs", "_lock")

    def __init__(self) -> None:
        self._dirs: set[str] = set()
        self._lock = threading.Lock()

    def __bool__(self) -> bool:
        return bool(self._dirs)

    def add(self, paths: Iterable[str]) -> None:
        with self._lock:
            self._dirs.update(paths)

    def sync(self) -> None:
        """fsync every pending directory. One that fails stays pending (and the error is raised)."""
        if not self._dirs:
            return
        with self._lock:
            dirs, self._dirs = self._dirs, set()
        try:
            sync_dirs(dirs)
        except BaseException:
            self.add(dirs)
            raise
