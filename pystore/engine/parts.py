"""A store's files, opened and taken apart: ``open_parts`` maps the commit log, the consume queues, the index
and dispatch, and recovers them (what ``MessageStore.load`` opens, for writers and readers alike, and what a
takeover of several writers' lead opens again); ``StoreParts`` holds them, follows a writer for a reader
(``refresh_read_only``) and closes them; ``delete_store`` deletes them (``MessageStore.destroy``). The services a
writer runs over the parts are :mod:`pystore.engine.wiring`'s.

Opening is read -> plan -> execute: what the files say is read here and in :mod:`pystore.engine.recovery`, every
decision (geometry, a hole, normal or abnormal, where to cut, what to rebuild) is
:mod:`pystore.engine.recovery_plan`'s. Each part gets the parts it works on, the clock and the disk usage, never
the store.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pystore.config import StoreConfig
from pystore.engine.checkpoint import StoreCheckpoint, StoreLock
from pystore.engine.recovery import RecoveryResult, recover_commit_log, recover_queues
from pystore.engine.recovery_plan import abnormal_open, log_geometry, log_hole
from pystore.errors import ConfigError, StoreCorruptedError
from pystore.index.service import IndexService
from pystore.log.commitlog import CommitLog
from pystore.log.mapped_file_queue import MappedFileQueue
from pystore.message.constants import SCHEDULE_TOPIC
from pystore.queue._dispatch import QueueDispatcher
from pystore.queue.consume_queue import ConsumeQueue
from pystore.queue.dispatch import ReputService
from pystore.queue.queue_store import ConsumeQueueStore
from pystore.read._queue_reader import follow_in_place
from pystore.read._read import ReadLimits
from pystore.read.arrival import WAKE_FILE, open_wake_file
from pystore.system.durable import sync_dirs
from pystore.system.running_flags import RunningFlags
from pystore.system.service import Clock, DiskUsage
from pystore.timer import timer_log_path, timer_wheel_path

if TYPE_CHECKING:
    from pystore.archive.archive import Archive

__all__ = ["StoreParts", "delete_store", "open_parts"]

log = logging.getLogger(__name__)

#: A writer's checkpoint reaches the file at most this often, when a flush service moved a time (5.x: 1 s).
_CHECKPOINT_FLUSH_MS = 1000


@dataclass
class StoreParts:
    """What a loaded store reads and writes: its files and the dispatch onto the queues and index."""

    checkpoint: StoreCheckpoint
    commitlog: CommitLog
    cq_store: ConsumeQueueStore
    limits: ReadLimits
    #: None with ``message_index_enable`` off
    index: IndexService | None = None
    dispatcher: QueueDispatcher | None = None
    reput: ReputService | None = None
    recovery: RecoveryResult | None = None
    archive: Archive | None = None      # the archive tier (``archive_uri``)

    #: a reader's refreshes, one at a time (``get_message`` reads again under it after following its queue)
    refresh_lock: threading.RLock = field(default_factory=threading.RLock)
    #: a reader's refreshes under way: the get's compiled follow (``_queue_reader.follow_live``) runs only while there is
    #: none, and holds the GIL from start to end, so none starts while it runs
    following: int = 0

    def refresh_read_only(self) -> None:
        """A reader: pick up what the writer appended since. The queues and the index before the commit log:
        every unit and index entry seen then points at a record in view (as ``refresh_queue_read_only``)."""
        cl = self.commitlog
        with self.refresh_lock:
            self.following += 1
            try:
                self.cq_store.refresh_read_only(cl.get_min_offset())
                if self.index is not None:
                    self.index.refresh_read_only()
                cl.refresh_read_only()
                for cq in self.cq_store.queues():
                    self._attach(cq)
            finally:
                self.following -= 1

    def refresh_queue_read_only(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        """A reader: follow one queue, then the commit log. The writer publishes a unit only after its record
        (and every record before it) is whole, so the commit log scanned afterwards covers every unit seen;
        the other order lets units written between the two scans point past the commit log in view."""
        cl = self.commitlog
        with self.refresh_lock:
            self.following += 1
            try:
                cq = self.cq_store.find(topic, queue_id)
                if cq is not None and self._follow_in_place(cq):
                    return cq
                cq = self.cq_store.refresh_queue_read_only(topic, queue_id, cl.get_min_offset())
                cl.refresh_read_only()
                if cq is not None:
                    self._attach(cq)
            finally:
                self.following -= 1
        return cq

    def _follow_in_place(self, cq: ConsumeQueue) -> bool:
        """A reader's quick follow of a known queue (a waiting get looks after each wake-up; the folder listings
        of the full follow cost far more): the compiled follow the frameless get runs first
        (``_queue_reader.follow_live``), here without the GIL while it walks and without its cap on the commit
        log scanned. False when that does not cover the queue (a file filled or rolled, damage seen, a unit
        pointing past the log's last file): what C cannot do, opening files and reporting damage, is the full
        follow's, in Python."""
        if self.commitlog.damage_fence >= 0:
            return False
        moved = follow_in_place(cq.core, self.commitlog.queue.files)
        if moved == 2:
            self._attach(cq)
        return moved != 0

    def _attach(self, cq: ConsumeQueue) -> None:
        """The commit log's cell of ``cq``'s queue follows what the reader now sees of it."""
        cell = self.commitlog.get_cell(cq.topic, cq.queue_id)
        cell.consume_queue = cq.core
        cell.next_offset = cq.get_max_offset_in_queue()

    def close(self) -> None:
        """Unmap every file (nothing is flushed: the store's shutdown did that, or there is nothing to keep)."""
        if self.archive is not None:
            self.archive.close()
        self.commitlog.dispatcher = None
        self.commitlog.queue.close()
        self.cq_store.close()
        if self.index is not None:
            self.index.close()


def _open_archive(cfg: StoreConfig) -> Archive:
    try:    # pyarrow (pyarrow.fs): imported only by a store that has an archive
        from pystore.archive.archive import Archive
    except ImportError as e:
        raise ConfigError("archive_uri", cfg.archive_uri, "needs pyarrow (pystore-mq[archive]): %s" % e) from e
    return Archive(cfg)


def open_parts(cfg: StoreConfig, *, last_exit_ok: bool, running_flags: RunningFlags, clock: Clock,
               injected_clock: Clock | None, disk_usage: DiskUsage | None = None,
               log_end: int | None = None,
               dispatched_end: int | None = None) -> tuple[StoreParts | None, StoreCorruptedError | None]:
    """Map the store's files and recover them: the parts, or (None, why) when the files are unusable (why is
    None when no file is to blame: the log says more). Whatever it opened is closed again when it refuses or
    raises. ``injected_clock``: the clock the store was given (None: the commit log stamps messages with
    the system clock from C); ``clock`` and ``disk_usage`` (None: ``shutil.disk_usage``) go to every part that
    decides by them. ``log_end``: a takeover of several writers' lead while the others append (the published
    end: the commit log is recovered up to it and left alone past it; ``recover_commit_log``), and
    ``dispatched_end`` where the dead leader had dispatched to (the walk starts there; the recovery is not
    abnormal: ``abnormal_open``)."""
    # read -> plan -> execute: what the files say is read here and in pystore.engine.recovery, every decision is
    # pystore.engine.recovery_plan's (geometry, a hole, normal or abnormal, where to cut, what to rebuild)
    read_only = cfg.read_only
    abnormal = abnormal_open(last_exit_ok=last_exit_ok, read_only=read_only, takeover=dispatched_end is not None)
    queue = MappedFileQueue(cfg.commit_log_paths(), cfg.mapped_file_size_commit_log, read_only=read_only,
                            clock=clock)
    if log_end is not None:
        queue.others_write = True
    size = log_geometry(cfg.mapped_file_size_commit_log, queue.detect_file_size(), queue.list_file_paths())
    if size != cfg.mapped_file_size_commit_log:
        (log.info if read_only else log.warning)(
            "%s: commit-log files are %d bytes, not the configured %d; the store keeps its geometry",
            cfg.store_path_root_dir, size, cfg.mapped_file_size_commit_log)
        queue.mapped_file_size = size
    # a crashed writer's last files may be short: a power cut took back a size no flush made durable
    if not queue.load(pad_short=abnormal):
        return None, None if queue.load_error is None else StoreCorruptedError(*queue.load_error)
    if log_end is not None:
        queue.view_until(log_end)
    hole = log_hole(queue.first_gap())
    if hole is not None:
        queue.close()
        error = StoreCorruptedError(queue.path_for(hole.offset), hole.offset, hole.reason)
        log.error("%s", error)
        return None, error

    def on_queue_error(message: str) -> None:
        log.error("%s: %s; the store stops accepting puts", cfg.store_path_root_dir, message)
        running_flags.make_logics_queue_error()

    try:
        commitlog = CommitLog(cfg, queue, clock=injected_clock)
        parts = StoreParts(StoreCheckpoint(cfg.checkpoint_path(), read_only=read_only, clock=clock), commitlog,
                           ConsumeQueueStore(cfg.consume_queue_path(), cfg.mapped_file_size_consume_queue,
                                             read_only, on_error=on_queue_error, window=cfg.prefault_window_bytes,
                                             clock=clock),
                           ReadLimits(cfg.max_transfer_bytes_on_message_in_memory,
                                      cfg.max_transfer_count_on_message_in_memory,
                                      cfg.max_transfer_bytes_on_message_in_disk,
                                      cfg.max_transfer_count_on_message_in_disk,
                                      _physical_memory() * cfg.access_message_in_memory_max_ratio // 100,
                                      cfg.check_crc_on_read))
    except BaseException:
        queue.close()
        raise
    try:
        if cfg.archive_uri and not read_only:
            # a queue rebuilt from the local log keeps its units of the archived messages below it
            parts.cq_store.keep_below = queue.get_min_offset()
        if not parts.cq_store.load():
            parts.close()
            return None, parts.cq_store.load_error
        if abnormal:
            log.warning("%s: the last writer did not shut down cleanly; abnormal recovery", cfg.store_path_root_dir)
        # the log judged first: an open it refuses leaves the index as it was (see recover_queues)
        result = parts.recovery = recover_commit_log(commitlog, parts.checkpoint, cfg, abnormal, read_only, log_end,
                                                     dispatched_end)
        # a takeover keeps the index files as they are: the dead leader's pages are all in the page cache
        reput = _make_reput(parts, cfg, last_exit_ok or dispatched_end is not None, clock, disk_usage)
        # the archive before the queues' recovery: after a crash, the index takes back the keys of archived messages
        parts.archive = _open_archive(cfg) if cfg.archive_uri else None
        recover_queues(commitlog, parts.cq_store, reput, parts.index, result, parts.checkpoint, cfg, abnormal, read_only,
                       dispatched_end, parts.archive)
        commitlog.attach_last()
    except BaseException:
        parts.close()
        raise
    if not read_only:
        if not parts.checkpoint.on_disk and commitlog.get_max_offset() == 0:
            # a new store: a durable checkpoint that says nothing was flushed yet, before the first put. Without
            # it, a crash before the first timed write, then a power cut, can leave the file empty (created, its
            # bytes lost): recovery cannot trust it, and a log whose unflushed middle was lost while later pages
            # were written back is refused instead of cut at the loss
            parts.checkpoint.flush(crash_point=False)
        parts.checkpoint.auto_flush_ms = _CHECKPOINT_FLUSH_MS
    return parts, None


def _make_reput(parts: StoreParts, cfg: StoreConfig, last_exit_ok: bool, clock: Clock,
                disk_usage: DiskUsage | None) -> ReputService:
    """The index, the dispatcher and the reput service, made once recovery judged the commit log: a refused
    open must leave the index as it was."""
    cl, cq_store = parts.commitlog, parts.cq_store
    if cfg.message_index_enable:
        parts.index = IndexService(cfg.index_path(), cfg.max_hash_slot_num, cfg.max_index_num, parts.checkpoint,
                                   cfg.read_only, clock, cfg.max_msgs_num_batch, disk_usage=disk_usage)
        parts.index.load(last_exit_ok)

    # the dispatcher finds a record's cell in the commit log's topic-queue table itself (in C); a cell's
    # consume queue is made through cq_store on its first record
    parts.dispatcher = QueueDispatcher(cl.core, cq_store.find_or_create_core, cfg.delay_level_table(),
                                       None if parts.index is None else parts.index.core,
                                       SCHEDULE_TOPIC)
    if not cfg.read_only:
        # readers in other processes wait on this file's word; the dispatcher wakes them (pystore.read.arrival)
        parts.dispatcher.wake = open_wake_file(cfg.store_path_root_dir, create=True)
    parts.reput = ReputService(parts.dispatcher, cl)
    return parts.reput


def delete_store(cfg: StoreConfig, unopened: bool) -> None:
    """Delete every file of the store at ``cfg`` and its folder if nothing else is in it, under its lock (a
    store another writer holds is never wiped: ``StoreLockedError``)."""
    root = cfg.store_path_root_dir
    if not os.path.isdir(root):
        return
    lock = StoreLock(cfg.lock_path())
    lock.acquire()
    if unopened:
        log.info("destroying the unopened store %s", root)
    try:
        folders = cfg.commit_log_paths() + [cfg.consume_queue_path(), cfg.index_path(), cfg.config_path()]
        for path in folders:
            shutil.rmtree(path, ignore_errors=True)
        folders.append(timer_log_path(root))
        for path in (cfg.checkpoint_path(), cfg.abort_path(), os.path.join(root, WAKE_FILE), timer_wheel_path(root)):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        # a destroyed store must not come back, in part, after a power cut
        sync_dirs(os.path.dirname(os.path.abspath(p)) for p in folders + [cfg.checkpoint_path()])
    finally:
        lock.release()
    try:
        os.unlink(cfg.lock_path())
    except FileNotFoundError:
        pass
    try:
        os.rmdir(root)
    except OSError:          # it holds something else
        pass


def _physical_memory() -> int:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return 24 << 30          # RocketMQ's fallback
