"""Creates commit-log files before they are needed (RocketMQ ``AllocateMappedFileService``, docs/format.md §5.5).

When the put path needs file *N*, it asks for *N* and *N+1*: *N* is usually ready already (it was the
previous request's *N+1*), so a roll costs a dictionary lookup, not an ``fallocate`` and page faults under
the put lock. The service thread creates files at full size with their first ``window`` bytes allocated
(``posix_fallocate``; the put path allocates the rest a window at a time), pre-faults them when
``warm_mapped_file_enable`` is set (with SYNC_FLUSH, like RocketMQ's ``warmMappedFile``, it also writes
the zeros to disk every ``flush_least_pages_when_warm_mapped_file`` pages, so a durable put's flush carries
data only, never block allocation), maps them a page at a time (a flush then writes what the puts wrote,
not a large folio around it; ``_warm.write_page_by_page``), and attaches a transient-pool buffer when
the pool is on. A put waits at most ``allocate_wait_timeout`` ms for its file (then
``CREATE_MAPPED_FILE_FAILED``). Pre-created files that were never used are deleted at shutdown; after a
crash one may remain, empty, and recovery keeps or trims it like any other file.

The service also makes each new file's name durable (``pystore.system.durable``): it creates missing folders
durably, fsyncs the new file (its size) and then the folder, before the put path gets it, so a put never writes
into a file that a power cut could unname. RocketMQ does not fsync directories; pystore adds it here, in the
service's thread, once per file (a commit-log file holds 1 GiB by default), never on the put path's account
unless the service is not running (before start, after shutdown) and the file is created inline.

The ready file (``keep_ready``): once the log has rolled in this process, the file after its last is made
ahead and handed to the commit log's compiled core (``CommitLogCore.ready``), where the roll takes it and
publishes it into the log's file list itself, in C, under the list's lock: a roll then calls no Python. The
service looks after each file it made and every half second: it asks for the next file once the roll took
the ready one, hands a made-ahead file over, and deletes a ready file that no longer follows the log. A roll
that finds no ready file (the first of a process, or one that came too soon) asks through Python as before,
and takes the ready file there if it is the one wanted. A file some put waits for never goes to the ready slot.

The service's view of where the log ends (``queue.last()``, read without its lock) can lag a roll: one in C that
took the ready file between that read and the service's lock, or one through Python whose file the put path has
been given but not yet added to the log's list. The file last handed to the log (``_handed``) is therefore never
asked for again from that view, and the roll is not counted as seen until a look whose view has moved past it:
else the service made a second mapping of a file the log writes, and deleted it at shutdown as unused, with the
messages in it. Nothing is ever deleted here that the log holds under its name.

Thread-safety: requests come from the put path (under the put lock); one service thread creates. The ready
slot is set, and taken from Python, under the service's lock; the compiled roll takes it holding the GIL,
without running Python code between its look and its take.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from pystore.log import _warm
from pystore.log._mapped_file import MappedFile
from pystore.system.crashpoint import crashpoint
from pystore.system.durable import fsync_dir, make_dirs_durable
from pystore.system.service import ServiceThread

if TYPE_CHECKING:
    from pystore.log._commitlog import CommitLogCore
    from pystore.log.mapped_file_queue import MappedFileQueue

__all__ = ["AllocateMappedFileService"]

log = logging.getLogger(__name__)


def _fsync_file(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _Request:
    __slots__ = ("path", "size", "done", "mapped_file", "error", "claimed")

    def __init__(self, path: str, size: int) -> None:
        self.path = path
        self.size = size
        #: a put waits for this file (it goes to that put, never to the ready slot)
        self.claimed = False
        self.done = threading.Event()
        self.mapped_file: MappedFile | None = None
        self.error: BaseException | None = None


class AllocateMappedFileService(ServiceThread):
    def __init__(
        self,
        wait_timeout_ms: int = 5000,
        warm: bool = False,
        pool: object | None = None,
        sync_warm_every: int = 0,
        clock: Callable[[], int] | None = None,
        window: int = -1,
    ) -> None:
        super().__init__("AllocateMappedFileService", clock)
        self.wait_timeout_ms = wait_timeout_ms
        self.warm = warm
        #: with SYNC_FLUSH, warming also writes the zeros to disk every this many bytes (RocketMQ)
        self.sync_warm_every = sync_warm_every
        self.pool = pool
        #: blocks allocated ahead of the writer (``MappedFile(window=)``); -1: whole files
        self.window = window
        self._lock = threading.Lock()
        self._requests: dict[str, _Request] = {}
        self._queue: list[_Request] = []
        self._cond = threading.Condition(self._lock)
        #: the commit log whose next file this service keeps ready in its core (``keep_ready``), or None
        self._core: CommitLogCore | None = None
        self._log: MappedFileQueue | None = None
        self._rolls_seen = 0        # ``core.ready_rolls`` when the service last looked
        #: the path of the file last handed to the log: as the ready file, or returned to a roll through Python
        self._handed: str | None = None

    def keep_ready(self, core: CommitLogCore, queue: MappedFileQueue) -> None:
        """Keep the commit log's next file made ahead in ``core.ready`` (``CommitLogCore``), where the put
        path's roll takes it in C; ``queue`` is the log's ``MappedFileQueue``. Set before ``start``."""
        self._core, self._log = core, queue
        self._rolls_seen = core.ready_rolls

    def _fill_ready(self) -> None:
        """(The service's thread.) The ready file: drop one that no longer follows the log (a truncation since
        it was made), hand over the made-ahead file that does, or ask for it once the roll took the last one."""
        core, queue = self._core, self._log
        if core is None or queue is None:
            return
        last = queue.last()
        if last is None:
            return
        path = queue.path_for(last.file_from_offset + queue.mapped_file_size)
        stale = None
        with self._cond:
            ready = core.ready
            if ready is not None:
                if ready.file_name == path:
                    return
                stale, core.ready = ready, None
            if path != self._handed:        # else the view lags a roll into that file (module docstring)
                req = self._requests.get(path)
                took = core.ready_rolls != self._rolls_seen
                self._rolls_seen = core.ready_rolls
                if req is None:
                    # asked for only after the roll took the last one: a log that has not rolled in this process
                    # gets its next file when it first rolls (the put path asks for it and the one after, as
                    # before), so an idle store holds no file past its end
                    if took and self._pool_allows_next():
                        self._requests[path] = req = _Request(path, queue.mapped_file_size)
                        self._queue.append(req)
                        self._cond.notify()
                elif req.done.is_set() and req.mapped_file is not None and not req.claimed:
                    self._requests.pop(path)
                    core.ready = req.mapped_file
                    self._handed = path
        if stale is not None and not self._in_log(stale):
            log.info("deleting the ready file %s: the log no longer ends before it", stale.file_name)
            stale.destroy(0, self.clock())

    def __call__(self, path: str, next_path: str, size: int) -> MappedFile | None:
        return self.put_request_and_return_mapped_file(path, next_path, size)

    def put_request_and_return_mapped_file(self, path: str, next_path: str, size: int) -> MappedFile | None:
        if not self.started:
            return self._create(path, size)          # before start / after shutdown: create inline
        with self._cond:
            core = self._core
            ready = core.ready if core is not None else None
            if core is not None and ready is not None and ready.file_name == path:
                # made ahead and handed to the core, which did not take it (the roll came through Python)
                core.ready = None
                self._handed = path
                return ready
            req = self._requests.get(path)
            if req is None:
                req = self._requests[path] = _Request(path, size)
                self._queue.append(req)
            req.claimed = True
            if next_path not in self._requests and self._pool_allows_next():
                nxt = self._requests[next_path] = _Request(next_path, size)
                self._queue.append(nxt)
            self._cond.notify()
        if not req.done.wait(self.wait_timeout_ms / 1000):
            log.warning("creating %s took longer than %d ms", path, self.wait_timeout_ms)
            return None
        with self._cond:
            self._requests.pop(path, None)
            if req.mapped_file is not None:
                self._handed = path
        if req.error is not None:
            log.error("cannot create %s: %s", path, req.error)
            return None
        return req.mapped_file

    def _in_log(self, mf: MappedFile) -> bool:
        """Whether the log kept ready (``keep_ready``) holds a file of ``mf``'s name, through whichever mapping."""
        queue = self._log
        return queue is not None and any(f.file_name == mf.file_name for f in queue.files)

    def _pool_allows_next(self) -> bool:
        pool = self.pool
        return pool is None or getattr(pool, "available_buffer_nums", lambda: 1)() > 1

    def _create(self, path: str, size: int) -> MappedFile:
        folder = os.path.dirname(path)
        make_dirs_durable(folder)
        # without read-ahead until full: a flush then writes what the puts wrote (_warm.write_page_by_page)
        mf = MappedFile(path, size, create=True, fresh_random=True, window=self.window)
        try:
            # the file's size first (strict POSIX keeps a size change only with the file's own fsync): else a
            # power cut can leave the file named but 0 bytes long, and a log holding two such files (a full
            # file not yet flushed under ASYNC_FLUSH, and the one made ahead) refuses to load
            _fsync_file(path)
            fsync_dir(folder)           # the file's name: durable before any put is acknowledged in it
        except OSError:
            mf.destroy(0, self.clock())
            raise
        if self.pool is not None:
            try:
                self.pool.attach(mf)  # type: ignore[attr-defined]
            except OSError:
                mf.destroy(0, self.clock())         # no half-made file left behind for the next load
                raise
        if self.warm:
            _warm.warm(mf, True, self.sync_warm_every if self.pool is None else 0)
        return mf

    def run(self) -> None:
        while not self.is_stopped():
            self._fill_ready()
            with self._cond:
                if not self._queue and not self.is_stopped():
                    # looks again within half a second: the put path takes the ready file without a word
                    self._cond.wait(0.5)
                if self.is_stopped():
                    break
                if not self._queue:
                    continue
                req = min(self._queue, key=lambda r: r.path.rsplit(os.sep, 1)[-1])
                self._queue.remove(req)
            try:
                req.mapped_file = self._create(req.path, req.size)
                crashpoint("allocate.created")
            except BaseException as e:  # noqa: BLE001 - handed to the waiting put
                req.error = e
            req.done.set()
            self._fill_ready()

    def shutdown(self, join: bool = True) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        super().shutdown(join)
        with self._cond:
            leftovers = list(self._requests.values())
            self._requests.clear()
            self._queue.clear()
            core = self._core
            if core is not None and core.ready is not None:
                leftovers.append(_Request(core.ready.file_name, 0))
                leftovers[-1].mapped_file, core.ready = core.ready, None
        for req in leftovers:
            mf = req.mapped_file
            if mf is None:
                continue
            if self._in_log(mf):
                log.error("not deleting %s at shutdown: the log holds it (made twice)", mf.file_name)
                mf.close()
            else:
                log.info("deleting the pre-created, unused file %s", mf.file_name)
                mf.destroy(0, self.clock())
