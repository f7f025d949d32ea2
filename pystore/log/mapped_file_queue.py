"""A log made of equal-size mapped files named by their start offset (RocketMQ ``MappedFileQueue``,
docs/format.md §5.3; cf. Kafka's ``LogSegments``).

::

    <dir>/00000000000000000000   <dir>/00000000001073741824   <dir>/00000000002147483648 ...
          [0, size)                    [size, 2*size)               [2*size, 3*size)

Offsets are absolute in the log; file *i* holds ``[from_i, from_i + size)``. The commit log may spread
its files over several folders (``store_path_commit_log="a;b"``): the file starting at ``offset`` lives in
folder ``(offset // size) % len(folders)`` (RocketMQ 5.x ``MultiPathMappedFileQueue``), and loading merges
the folders in offset order.

``flushed_where`` / ``committed_where`` are the absolute offsets up to which the log is forced to disk or
copied from the transient pool. ``truncate_dirty_files`` cuts the log after recovery; the cut file's tail
is zeroed so nothing stale can be read as a record later. Only the *last* file is ever written to.

Names are made durable (``pystore.system.durable``; RocketMQ does not fsync directories, pystore does): a file
created here (consume queues; the commit log's files come from ``AllocateMappedFileService``, which syncs
its own) leaves its folder, and any folder ``make_dirs`` created, in ``pending_dirs``, which ``flush`` syncs
before it moves ``flushed_where``: no directory fsync under the put lock, and nothing counts as flushed
that a power cut could unname. Removals (recovery's truncation, a damaged queue's files, cleaning) fsync the
folder right after unlinking, outside the list's lock: a file recovery cut must not come back.

Thread-safety: the file list is copy-on-write (readers take the current list without locking); changes
(create, truncate, delete) take ``self._lock``, and so does the commit log's roll when it publishes the ready
file in C (``CommitLogCore._roll``).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

from pystore.log._file_names import is_file_name, offset_to_file_name
from pystore.log._mapped_file import MappedFile
from pystore.log._put_lock import PutMessageLock
from pystore.queue._units import find_file
from pystore.system.durable import PendingDirs, make_dirs, sync_dirs
from pystore.system.service import real_clock

__all__ = ["MappedFileQueue", "destroy_now"]

log = logging.getLogger(__name__)


def destroy_now(f: MappedFile, now: int) -> None:
    """Delete a file even if a reader still holds it (its views keep the mapping alive, not the file). ``now``:
    the queue's clock, as every shutdown of its files is timed."""
    if not f.destroy(0, now):
        f.destroy(0, now)


class MappedFileQueue:
    """Files of one log (the commit log, or one consume queue)."""

    def __init__(
        self,
        store_paths: str | list[str],
        mapped_file_size: int,
        allocate: Callable[[str, str, int], MappedFile | None] | None = None,
        read_only: bool = False,
        clock: Callable[[], int] | None = None,
    ) -> None:
        self.store_paths = [store_paths] if isinstance(store_paths, str) else list(store_paths)
        self.mapped_file_size = mapped_file_size
        self.allocate = allocate
        self.read_only = read_only
        self.clock = clock or real_clock
        self._files: list[MappedFile] = []
        # a reentrant lock the commit log's roll also takes in C (``CommitLogCore.files_lock``), waited for
        # without the GIL
        self._lock = PutMessageLock(reentrant=True)
        self.flushed_where = 0
        self.committed_where = 0
        self._flush_lock = threading.Lock()
        self._commit_lock = threading.Lock()
        self.store_timestamp = 0
        #: new files are mapped without read-ahead until full (``MappedFile(fresh_random=True)``): for files
        #: written a few bytes at a time, such as consume queues
        self.fresh_random = False
        #: disk blocks allocated ahead of a new file's writer (``MappedFile(window=)``); -1: whole files
        self.window = -1
        #: folders whose new entries are not durable yet; ``flush`` syncs them first
        self.pending_dirs = PendingDirs()
        #: why the last ``load`` refused the files: ``(path, absolute offset, reason)``, else None
        self.load_error: tuple[str, int, str] | None = None
        #: other processes add files while this one loads (a writer joining other writers): a listing is
        #: made again while it shows a hole, and a last file short of its size is being made, not left over
        #: from a crash (never deleted, never a refusal: it is mapped when the walk reaches it)
        self.others_write = read_only

    # -- the file list ----------------------------------------------------------------------------

    @property
    def files(self) -> list[MappedFile]:
        """The files in offset order (a snapshot; do not mutate)."""
        return self._files

    def first(self) -> MappedFile | None:
        files = self._files
        return files[0] if files else None

    def last(self) -> MappedFile | None:
        files = self._files
        return files[-1] if files else None

    def __len__(self) -> int:
        return len(self._files)

    def _path_for(self, offset: int) -> str:
        folder = self.store_paths[(offset // self.mapped_file_size) % len(self.store_paths)]
        return os.path.join(folder, offset_to_file_name(offset))

    def list_file_paths(self) -> list[str]:
        """Data files in every folder, sorted by offset.

        With ``others_write`` (a reader, or a writer joining others, beside processes that write): a listing
        made while a writer adds files at the end or cleaning deletes them at the front can show a file and miss
        one before it (readdir is no snapshot), which the loads would take for a hole, i.e. damage. Each event
        is at one end, so a listing that shows a hole is made again (a few times, a millisecond apart) until
        one shows none; a hole that stays is the folder's and is judged as before."""
        paths = self._listed()
        tries = 0
        while self.others_write and tries < _RELISTS and _has_hole(paths):
            tries += 1
            time.sleep(0.001)
            paths = self._listed()
        return paths

    def _listed(self) -> list[str]:
        found: dict[int, str] = {}
        for folder in self.store_paths:
            try:
                names = os.listdir(folder)
            except FileNotFoundError:
                continue
            for name in names:
                if not is_file_name(name):
                    continue
                path = os.path.join(folder, name)
                if os.path.isfile(path):
                    found[int(name)] = path
        return [found[k] for k in sorted(found)]

    def detect_file_size(self) -> int | None:
        """The size the existing files share, if there are files and they agree."""
        sizes = {os.path.getsize(p) for p in self.list_file_paths()}
        sizes.discard(0)
        return sizes.pop() if len(sizes) == 1 else None

    def load(self, pad_short: bool = False) -> bool:
        """Map every file. Each must be exactly ``mapped_file_size`` bytes, except that an empty last file
        (a crash while creating it) is deleted, and with ``pad_short`` (a writer recovering from a crash) a
        shorter file is extended with zeros to the file size. Loaded files start with every position at
        their end; recovery truncates. False (and nothing mapped) if a file has the wrong size.

        Why ``pad_short`` is safe: a file is created at its full size (fallocate), and that size is on disk
        once the file is fsynced, which every flush of it does. A file short of it after a crash was never
        flushed: a power cut took its size back (a file system that does not journal size changes, e.g.
        POSIX's minimum, or the strict model of tests/powerloss), while some of its pages may have been
        written back. Nothing in it was acknowledged as durable, and recovery judges its records like any
        crashed tail (its guard still refuses valid data the checkpoint says was flushed)."""
        paths = self.list_file_paths()
        self.load_error = None
        files: list[MappedFile] = []
        for i, path in enumerate(paths):
            size = os.path.getsize(path)
            if size != self.mapped_file_size:
                if size < self.mapped_file_size and i == len(paths) - 1 and self.others_write and not self.read_only:
                    log.info("%s is %d bytes: another writer is making it; mapped when reached", path, size)
                    continue
                if size == 0 and i == len(paths) - 1:
                    if not self.read_only:
                        log.warning("deleting the empty last file %s (creation interrupted)", path)
                        os.unlink(path)
                        sync_dirs([os.path.dirname(path)])
                    continue
                if pad_short and not self.read_only and size < self.mapped_file_size:
                    log.warning("%s is %d bytes, short of %d: its size never reached the disk (a crash before "
                                "its first flush); extended with zeros for recovery to judge", path, size,
                                self.mapped_file_size)
                    fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
                    try:
                        os.ftruncate(fd, self.mapped_file_size)
                        os.fsync(fd)
                    finally:
                        os.close(fd)
                    size = self.mapped_file_size
            if size != self.mapped_file_size:
                log.error("%s is %d bytes, expected %d: the store cannot be loaded", path, size,
                          self.mapped_file_size)
                self.load_error = (path, int(os.path.basename(path)) + min(size, self.mapped_file_size),
                                   "the file is %d bytes, every file of this log is %d" % (size, self.mapped_file_size))
                for f in files:
                    f.close()
                return False
            mf = MappedFile(path, self.mapped_file_size, read_only=self.read_only, window=self.window)
            mf.set_positions(self.mapped_file_size)
            files.append(mf)
        with self._lock:
            self._files = files
        self.check_self()
        return True

    def check_self(self) -> None:
        files = self._files
        for a, b in zip(files, files[1:]):
            if b.file_from_offset - a.file_from_offset != self.mapped_file_size:
                log.error("files %s and %s are not %d bytes apart", a.file_name, b.file_name, self.mapped_file_size)

    def first_gap(self) -> int:
        """The offset of the first file missing between the first and the last file (a hole in the log),
        or -1. Cleaning only ever deletes from the front, so a hole means lost data."""
        files = self._files
        for a, b in zip(files, files[1:]):
            if b.file_from_offset != a.file_from_offset + self.mapped_file_size:
                return a.file_from_offset + self.mapped_file_size
        return -1

    def path_for(self, offset: int) -> str:
        """Where the file starting at ``offset`` lives (or would live)."""
        return self._path_for(offset)

    def refresh(self, limit: int = -1) -> list[MappedFile]:
        """Read-only: map files another process created since ``load``, drop ones it deleted. A newly mapped
        file has nothing readable yet (positions 0): the caller scans it. With ``limit`` >= 0, files that
        start at or after it are left out (a reader that found damage never looks past it).

        New files are taken only up to the first one missing after the last: a folder listing made while the
        writer creates files may show a file and miss the one created before it (readdir is not a snapshot),
        and a view with a hole would read a whole file of the log as gone."""
        paths = self.list_file_paths()
        with self._lock:
            by_name = {f.file_name: f for f in self._files}
            files: list[MappedFile] = []
            for p in paths:
                if limit >= 0 and int(os.path.basename(p)) >= limit:
                    continue
                f = by_name.get(p)
                if f is None and files and int(os.path.basename(p)) != files[-1].file_from_offset + self.mapped_file_size:
                    break                   # the file before it is not listed yet: the next refresh takes both
                if f is None:
                    try:
                        size = os.path.getsize(p)
                        if size != self.mapped_file_size:
                            continue        # being created
                        f = MappedFile(p, self.mapped_file_size, read_only=True)
                    except (OSError, ValueError):
                        continue
                    f.set_positions(0)
                files.append(f)
            self._files = files
            return files

    def view_until(self, end: int) -> None:
        """A writer that joins other writers: its files end at log offset ``end`` (the files before it full, the
        one holding it written up to it); files after it are closed, not deleted (others write them; the writer
        maps them again when it walks their records)."""
        with self._lock:
            keep = [f for f in self._files if f.file_from_offset <= end]
            for f in self._files[len(keep):]:
                f.close()
            for f in keep:
                f.set_positions(min(f.file_size, end - f.file_from_offset))
            self._files = keep

    def drop_deleted_head(self) -> list[MappedFile]:
        """A writer that joins other writers: close the files at the head of its view that another process's
        cleaning deleted (held open, their disk blocks would never be freed). The last file always stays."""
        with self._lock:
            files = self._files
            k = 0
            while k < len(files) - 1 and not os.path.exists(files[k].file_name):
                k += 1
            gone, self._files = files[:k], files[k:]
        for f in gone:
            f.close()
        return gone

    def trim_unused_tail(self) -> None:
        """Read-only view: drop trailing files with no data while the file before them is still being
        written (a writer's pre-created next file is not part of the log yet)."""
        with self._lock:
            files = self._files
            while len(files) > 1 and files[-1].read_position == 0 and files[-2].read_position < self.mapped_file_size:
                files[-1].close()
                files = files[:-1]
            self._files = files

    # -- creating ---------------------------------------------------------------------------------

    def get_last_mapped_file(self, start_offset: int = 0, need_create: bool = True) -> MappedFile | None:
        """The last file; with ``need_create``, a new one when there is none (at ``start_offset`` rounded down
        to a file boundary) or when the last is full."""
        last = self.last()
        create_offset = -1
        if last is None:
            create_offset = start_offset - start_offset % self.mapped_file_size
        elif last.is_full():
            create_offset = last.file_from_offset + self.mapped_file_size
        if create_offset >= 0 and need_create:
            return self.create_file(create_offset)
        return last

    def create_file(self, offset: int) -> MappedFile | None:
        if self.read_only:
            return None
        with self._lock:
            last = self.last()
            if last is not None and last.file_from_offset >= offset:
                return last if last.file_from_offset == offset else None
            path = self._path_for(offset)
            next_path = self._path_for(offset + self.mapped_file_size)
            try:
                if self.allocate is not None:
                    mf = self.allocate(path, next_path, self.mapped_file_size)
                else:
                    folder = os.path.dirname(path)
                    changed = make_dirs(folder)
                    mf = MappedFile(path, self.mapped_file_size, create=True, fresh_random=self.fresh_random,
                                    window=self.window)
                    # synced by the next flush, off the put lock (a consume queue's file is made under it)
                    self.pending_dirs.add(changed + [folder])
            except (OSError, ValueError):       # ValueError: a path the OS cannot take (a NUL byte)
                log.exception("cannot create %s", path)
                return None
            if mf is None:
                return None
            if not self._files:
                mf.first_create_in_queue = True
            self._files = self._files + [mf]
            return mf

    # -- finding ----------------------------------------------------------------------------------

    def find_mapped_file_by_offset(self, offset: int, return_first_on_not_found: bool = False) -> MappedFile | None:
        files = self._files
        if not files:
            return None
        mf = find_file(files, self.mapped_file_size, offset)       # the compiled readers' lookup (_files.pxd)
        return files[0] if mf is None and return_first_on_not_found else mf

    def get_min_offset(self) -> int:
        first = self.first()
        return first.file_from_offset if first is not None else -1

    def get_max_offset(self) -> int:
        last = self.last()
        return last.file_from_offset + last.read_position if last is not None else 0

    def get_max_wrote_position(self) -> int:
        last = self.last()
        return last.file_from_offset + last.wrote_position if last is not None else 0

    def remain_how_many_data_to_commit(self) -> int:
        return self.get_max_wrote_position() - self.committed_where

    def remain_how_many_data_to_flush(self) -> int:
        return self.get_max_offset() - self.flushed_where

    def roll_next_file(self, offset: int) -> int:
        return offset + self.mapped_file_size - offset % self.mapped_file_size

    def get_mapped_memory_size(self) -> int:
        return sum(f.file_size for f in self._files if f.available)

    # -- flushing ---------------------------------------------------------------------------------

    def flush(self, least_pages: int) -> bool:
        """Flush the file holding ``flushed_where``; True iff nothing moved (RocketMQ's convention).
        Serialised: the flush service and a user's ``flush()`` must not move ``flushed_where`` backwards."""
        with self._flush_lock:
            self.pending_dirs.sync()        # new files' names first: what is flushed must be reachable
            mf = self.find_mapped_file_by_offset(self.flushed_where, self.flushed_where == 0)
            if mf is None:
                return True
            ts = mf.store_timestamp
            where = mf.file_from_offset + mf.flush(least_pages)
            result = where == self.flushed_where
            self.flushed_where = where
            if least_pages == 0:
                self.store_timestamp = ts
            return result

    def commit(self, least_pages: int) -> bool:
        """Copy pooled writes of the file holding ``committed_where`` into it; True iff nothing moved."""
        with self._commit_lock:
            mf = self.find_mapped_file_by_offset(self.committed_where, self.committed_where == 0)
            if mf is None:
                return True
            where = mf.file_from_offset + mf.commit(least_pages)
            result = where == self.committed_where
            self.committed_where = where
            return result

    # -- truncating and deleting ------------------------------------------------------------------

    def truncate_dirty_files(self, offset: int) -> None:
        """Cut the log at ``offset``: later files are deleted (durably), the file holding it ends there (tail
        zeroed)."""
        removed: list[str] = []
        with self._lock:
            keep: list[MappedFile] = []
            for f in self._files:
                tail = f.file_from_offset + self.mapped_file_size
                if tail > offset:
                    if offset >= f.file_from_offset:
                        pos = offset % self.mapped_file_size
                        f.set_positions(pos)
                        if not self.read_only:
                            f.zero_from(pos)
                        keep.append(f)
                    elif self.read_only:
                        f.close()          # a reader only narrows its view; the files are not its own
                    else:
                        log.info("deleting %s: it starts after the truncation offset %d", f.file_name, offset)
                        destroy_now(f, self.clock())
                        removed.append(os.path.dirname(f.file_name))
                else:
                    keep.append(f)
            self._files = keep
            if self.flushed_where > offset:
                self.flushed_where = offset
            if self.committed_where > offset:
                self.committed_where = offset
        sync_dirs(removed)      # a file recovery cut must not come back after a power cut

    def delete_last_file(self) -> None:
        """Delete the last file (consume-queue truncation)."""
        with self._lock:
            if not self._files:
                return
            last = self._files[-1]
            destroy_now(last, self.clock())
            self._files = self._files[:-1]
            end = self.get_max_offset()
            self.flushed_where = min(self.flushed_where, end)
            self.committed_where = min(self.committed_where, end)
        sync_dirs([os.path.dirname(last.file_name)])

    def delete_expired_file_by_time(
        self,
        expired_ms: int,
        interval_ms: int,
        forcibly_ms: int,
        clean_immediately: bool,
        batch_max: int = 10,
        now: int | None = None,
        sleep: Callable[[float], None] = time.sleep,
        archived_below: int | None = None,
    ) -> int:
        """Delete files (never the last) older than ``expired_ms`` by modification time, oldest first; stop
        at the first that is not expired or cannot be deleted yet, or after ``batch_max``; with
        ``archived_below``, also at the first that ends past it (its archive copy is not finished)."""
        now = self.clock() if now is None else now
        deleted: list[MappedFile] = []
        for f in self._files[:-1]:
            if archived_below is not None and f.file_from_offset + self.mapped_file_size > archived_below:
                break
            try:
                mtime = int(os.stat(f.file_name).st_mtime * 1000)
            except FileNotFoundError:
                mtime = 0
            if not (now >= mtime + expired_ms or clean_immediately):
                break
            if not f.destroy(forcibly_ms, now):
                break
            deleted.append(f)
            if len(deleted) >= batch_max:
                break
            if interval_ms > 0:
                sleep(interval_ms / 1000)
        self._remove(deleted)
        return len(deleted)

    def delete_expired_file_by_offset(self, min_phy_offset: int, unit_size: int,
                                      archived: Callable[[MappedFile], bool] | None = None) -> int:
        """Consume queues: delete files (never the last) whose last unit points below ``min_phy_offset`` (and,
        with ``archived``, whose archive copy is finished)."""
        deleted: list[MappedFile] = []
        for f in self._files[:-1]:
            if archived is not None and not archived(f):
                break
            destroy = True
            if f.available:
                raw = f.read_any(self.mapped_file_size - unit_size, 8)
                destroy = int.from_bytes(raw, "big", signed=True) < min_phy_offset
            if not destroy:
                break
            if not f.destroy(60_000, self.clock()):
                break
            deleted.append(f)
        self._remove(deleted)
        return len(deleted)

    def retry_delete_first_file(self, forcibly_ms: int, now: int | None = None) -> bool:
        """Destroy again a first file that was shut down but is still held (RocketMQ's ``retryDeleteFirstFile``),
        forced once ``forcibly_ms`` passed since its first shutdown on the same clock: ``now``, the caller's
        (the cleaning's), else this queue's."""
        first = self.first()
        if first is None or first.available:
            return False
        log.warning("retrying to delete %s, shut down but still held", first.file_name)
        if first.destroy(forcibly_ms, self.clock() if now is None else now):
            self._remove([first])
            return True
        return False

    def _remove(self, gone: list[MappedFile]) -> None:
        if not gone:
            return
        with self._lock:
            ids = {id(f) for f in gone}
            self._files = [f for f in self._files if id(f) not in ids]
        try:
            sync_dirs(os.path.dirname(f.file_name) for f in gone)
        except OSError:
            # the files are gone; after a power cut one may come back, and is deleted again (it is older
            # than what the log keeps), so cleaning goes on
            log.exception("making the deletion of %d file(s) durable failed", len(gone))

    def shutdown(self, interval_forcibly: int = 0) -> None:
        now = self.clock()
        for f in self._files:
            f.shutdown(interval_forcibly, now)

    def close(self) -> None:
        """Unmap and close every file (the files stay)."""
        with self._lock:
            for f in self._files:
                f.close()
            self._files = []

    def destroy(self) -> None:
        """Delete every file of this log, and the folders if they end up empty."""
        with self._lock:
            for f in self._files:
                destroy_now(f, self.clock())
            self._files = []
            self.flushed_where = self.committed_where = 0
        changed = []
        for folder in self.store_paths:
            try:
                os.rmdir(folder)
                changed.append(os.path.dirname(os.path.abspath(folder)))
            except OSError:
                changed.append(folder)      # still there (not empty): its entries changed
        sync_dirs(changed)


#: listings a load beside writers (``others_write``) makes again while one shows a hole (``MappedFileQueue.list_file_paths``)
_RELISTS = 20


def _has_hole(paths: list[str]) -> bool:
    """Whether ``paths`` (sorted by offset) miss a file between two others, on the grid of the first file's size
    (a queue may keep another geometry than the configured one; its files share one size)."""
    if len(paths) < 2:
        return False
    try:
        step = os.path.getsize(paths[0])
    except OSError:
        return True                 # deleted since it was listed: list again
    if step <= 0:
        return False
    offsets = [int(os.path.basename(p)) for p in paths]
    return any(b - a != step for a, b in zip(offsets, offsets[1:]))
