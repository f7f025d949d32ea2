"""Cleanup: expired and disk-pressure deletion of commit-log files, then the consume-queue and index files
that only point below the commit log's new minimum (docs/format.md §9, RocketMQ's ``CleanCommitLogService`` and
``CleanConsumeQueueService``).

One ``CleanService`` thread runs a pass every ``clean_resource_interval`` ms; the first pass comes one interval
after ``start()``. A pass:

1. **commit log** — deletes when one of these holds: the local hour is one of ``delete_when``; the disk is
   over ``disk_max_used_space_ratio``; ``execute_delete_files_manually()`` was called (20 passes, as RocketMQ's
   counter). Files older than ``file_reserved_time`` hours (by modification time) go, oldest first, at most
   ``delete_file_batch_max`` a pass with ``delete_commit_log_files_interval`` ms between them, never the last
   file. Above ``disk_space_clean_forcibly_ratio`` (or the warning ratio) and with
   ``clean_file_forcibly_enable`` the expiry is ignored (``cleanImmediately``). Above
   ``disk_space_warning_level_ratio`` the store is marked DISK_FULL and refuses puts until the ratio falls.
   Every ``redelete_hanged_file_interval`` a first file that was shut down but is still held is destroyed
   again (``retryDeleteFirstFile``).
2. **consume queues and index** — when the commit log's min offset moved: every queue drops the files whose
   last unit points below it and corrects its min offset, then the index drops files that end below it.

With an archive (``archive_uri``, ``pystore.archive``) a commit-log or consume-queue file is deleted only once
its copy to the archive is finished (disk pressure included: the store fills up rather than lose data), and
``archive_local_retention_hours`` (when not 0) replaces ``file_reserved_time`` as the local expiry;
``archive_local_retention_bytes`` (when not 0) deletes the oldest archived files at once, whatever their age,
while the local commit log is larger (pystore's: RocketMQ 5's tiered store keeps local data by time only).

Every decision reads injected collaborators, never the machine or the store's insides: the time (expiry,
the delete hours, the hanged-file retry) is the store's ``clock``, the disk ratio is ``used / total`` of what
the store's ``disk_usage(path)`` says of the partition holding each path (``shutil.disk_usage`` by default;
``pystore.system.service.disk_used_ratio``), and the files come as the commit log, the consume-queue store and the
index the store hands over. ``clean_expired_consumer_queue`` and ``clean_unused_topic`` are RocketMQ's
manual operations on whole queues; neither is scheduled (as in RocketMQ 4.8).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from pystore.message.constants import SCHEDULE_TOPIC
from pystore.system.service import Clock, DiskUsage, ServiceThread, disk_used_ratio, real_clock
from pystore.timer import TIMER_TOPIC

if TYPE_CHECKING:
    from pystore.archive.archive import Archive
    from pystore.config import StoreConfig
    from pystore.index.service import IndexService
    from pystore.log.commitlog import CommitLog
    from pystore.queue.consume_queue import ConsumeQueue
    from pystore.queue.queue_store import ConsumeQueueStore
    from pystore.system.running_flags import RunningFlags

log = logging.getLogger(__name__)

MANUAL_DELETE_PASSES = 20          # RocketMQ's manualDeleteFileSeveralTimes
# TIMER_TOPIC: the timer store reads its queue on from where it last stood, so a queue destroyed and started again
# at offset 0 would leave every later timer unread (acknowledged, never delivered)
# System topics whose queues the manual topic cleanup never removes (RocketMQ's TopicValidator)
SYSTEM_TOPICS = frozenset({SCHEDULE_TOPIC, TIMER_TOPIC, "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC"})
#: Queues ``clean_expired_consumer_queue`` never removes: the delay levels' and the timer store's, each read by a
#: service from an offset it keeps (RocketMQ spares the schedule topic)
KEPT_WHEN_EXPIRED = frozenset({SCHEDULE_TOPIC, TIMER_TOPIC})


class CleanCommitLog:
    """The commit-log half of a pass (docs/format.md §9.2)."""

    def __init__(self, commitlog: CommitLog, config: StoreConfig, running_flags: RunningFlags,
                 clock: Clock | None = None, disk_usage: DiskUsage | None = None,
                 sleep: Callable[[float], None] = time.sleep, archive: Archive | None = None) -> None:
        self.commitlog = commitlog
        self.config = config
        self.archive = archive
        self.running_flags = running_flags
        self.clock = clock or real_clock
        self.disk_usage = disk_usage
        self.sleep = sleep
        self.root = config.store_path_root_dir
        self.manual_passes = 0
        self.clean_immediately = False
        self.last_redelete = 0

    def execute_delete_files_manually(self) -> None:
        self.manual_passes = MANUAL_DELETE_PASSES
        log.info("%s: manual deletion of expired files for the next %d passes", self.root, MANUAL_DELETE_PASSES)

    def run_once(self) -> int:
        deleted = self.delete_expired_files()
        self.redelete_hanged_file()
        return deleted

    def delete_expired_files(self) -> int:
        cfg = self.config
        time_up = self.is_time_to_delete()
        space_full = self.is_space_to_delete()
        manual = self.manual_passes > 0
        over = self._over_local_bytes()
        if over:
            return self._delete_archived(over)
        if not (time_up or space_full or manual):
            return 0
        if manual:
            self.manual_passes -= 1
        clean_at_once = cfg.clean_file_forcibly_enable and self.clean_immediately
        cl = self.commitlog
        hours, below = cfg.file_reserved_time, None
        if self.archive is not None:
            hours = cfg.archive_local_retention_hours or hours
            below = self.archive.deletable_end()
        before = cl.queue.files
        n = cl.queue.delete_expired_file_by_time(
            hours * 3_600_000, cfg.delete_commit_log_files_interval,
            cfg.destroy_mapped_file_interval_forcibly, clean_at_once, cfg.delete_file_batch_max,
            now=self.clock(), sleep=self.sleep, archived_below=below)
        if n and self.archive is not None:
            self.archive.record_deleted(before, cl.queue.files)
        if n:
            log.info("%s: deleted %d commit-log file(s) (time %s, space %s, manual %s, at once %s); min offset "
                     "now %d", self.root, n, time_up, space_full, manual, clean_at_once, cl.get_min_offset())
        elif space_full:
            log.warning("%s: the disk is full but no commit-log file could be deleted", self.root)
        return n

    def _over_local_bytes(self) -> int:
        """With ``archive_local_retention_bytes``: how far the local commit log's files exceed it (0: not)."""
        limit = self.config.archive_local_retention_bytes
        if self.archive is None or limit <= 0:
            return 0
        files = self.commitlog.queue.files
        return max(0, sum(f.file_size for f in files) - limit)

    def _delete_archived(self, over: int) -> int:
        """Delete the oldest local commit-log files whose copy finished, whatever their age, until the local log is
        within ``archive_local_retention_bytes`` (never the newest; at most ``delete_file_batch_max`` a pass)."""
        cfg, cl = self.config, self.commitlog
        assert self.archive is not None
        size = max(1, cl.queue.mapped_file_size)
        before = cl.queue.files
        n = cl.queue.delete_expired_file_by_time(
            0, cfg.delete_commit_log_files_interval, cfg.destroy_mapped_file_interval_forcibly, True,
            min(cfg.delete_file_batch_max, -(-over // size)), now=self.clock(), sleep=self.sleep,
            archived_below=self.archive.deletable_end())
        if n:
            self.archive.record_deleted(before, cl.queue.files)
            log.info("%s: deleted %d archived commit-log file(s) over archive_local_retention_bytes (%d); min offset "
                     "now %d", self.root, n, cfg.archive_local_retention_bytes, cl.get_min_offset())
        return n

    def redelete_hanged_file(self) -> None:
        cfg = self.config
        now = self.clock()
        # a clock that went back retries now rather than once it caught up
        if 0 <= now - self.last_redelete < cfg.redelete_hanged_file_interval:
            return
        self.last_redelete = now
        if self.commitlog.queue.retry_delete_first_file(cfg.destroy_mapped_file_interval_forcibly, now):
            log.info("%s: deleted a commit-log file that readers held past its destroy", self.root)

    def is_time_to_delete(self) -> bool:
        hour = time.localtime(self.clock() / 1000).tm_hour
        return hour in self.config.delete_when_hours()

    def is_space_to_delete(self) -> bool:
        """RocketMQ's ``isSpaceToDelete``: also sets ``clean_immediately`` and the DISK_FULL flag."""
        cfg = self.config
        ratio = cfg.disk_max_used_space_ratio / 100.0
        self.clean_immediately = False
        over = False
        full = False
        for path in [*cfg.commit_log_paths(), cfg.consume_queue_path()]:
            used = disk_used_ratio(self.disk_usage, path)
            if used > cfg.disk_space_warning_level_ratio:
                full = True
                self.clean_immediately = True
            elif used > cfg.disk_space_clean_forcibly_ratio:
                self.clean_immediately = True
            if used < 0 or used > ratio:
                over = True
        flags = self.running_flags
        if full:
            if flags.get_and_make_disk_full():
                log.error("%s: disk usage over %.2f; the store refuses puts until files are deleted", self.root,
                          cfg.disk_space_warning_level_ratio)
        elif not flags.get_and_make_disk_ok():
            log.info("%s: disk usage is back under %.2f; puts are accepted again", self.root,
                     cfg.disk_space_warning_level_ratio)
        return over


class CleanConsumeQueue:
    """The consume-queue and index half of a pass (docs/format.md §9.3)."""

    def __init__(self, commitlog: CommitLog, cq_store: ConsumeQueueStore, index: IndexService | None,
                 config: StoreConfig, sleep: Callable[[float], None] = time.sleep,
                 archive: Archive | None = None) -> None:
        self.archive = archive
        self.commitlog = commitlog
        self.cq_store = cq_store
        self.index = index
        self.config = config
        self.sleep = sleep
        self.last_min_offset = 0

    def run_once(self) -> int:
        cl, cqs, index = self.commitlog, self.cq_store, self.index
        min_offset = cl.get_min_offset()
        if min_offset <= self.last_min_offset:
            return 0
        self.last_min_offset = min_offset
        interval = self.config.delete_consume_queue_files_interval
        deleted = 0
        archive = self.archive
        for cq in cqs.queues():
            n = cq.delete_expired_file(min_offset, None if archive is None else archive.queue_file_archived)
            deleted += n
            if n and interval > 0:
                self.sleep(interval / 1000)
        if index is not None:
            before = list(index.files)
            n = index.delete_expired_file(min_offset, None if archive is None else archive.index_file_archived)
            if n and archive is not None:
                archive.record_index_deleted(before, index.files)
            deleted += n
        if deleted:
            log.info("%s: deleted %d consume-queue/index file(s) below commit-log offset %d",
                     self.config.store_path_root_dir, deleted, min_offset)
        return deleted


class CleanService(ServiceThread):
    """Runs both halves every ``clean_resource_interval`` ms. The store hands it what it cleans (commit log,
    consume-queue store, index), what decides (config, clock, ``disk_usage``) and the running flags it sets
    DISK_FULL in."""

    def __init__(self, commitlog: CommitLog, cq_store: ConsumeQueueStore, index: IndexService | None,
                 config: StoreConfig, running_flags: RunningFlags, clock: Clock | None = None,
                 disk_usage: DiskUsage | None = None, archive: Archive | None = None) -> None:
        super().__init__("CleanService", clock)
        self.config = config
        self.commit_log = CleanCommitLog(commitlog, config, running_flags, self.clock, disk_usage,
                                         sleep=self._sleep, archive=archive)
        self.consume_queue = CleanConsumeQueue(commitlog, cq_store, index, config, sleep=self._sleep,
                                               archive=archive)

    def _sleep(self, seconds: float) -> None:
        # deletions pace themselves, but shutdown must not wait for a whole batch
        if not self.is_stopped():
            self._notified.wait(seconds)

    def run_once(self) -> tuple[int, int]:
        return self.commit_log.run_once(), self.consume_queue.run_once()

    def run(self) -> None:
        interval = self.config.clean_resource_interval
        while not self.is_stopped():
            self.wait_for_running(interval)
            if self.is_stopped():
                break
            try:
                self.run_once()
            except Exception:
                log.exception("%s: a cleaning pass failed", self.config.store_path_root_dir)

    def expired_consumer_queues(self) -> list[tuple[str, int]]:
        """``MessageStore.clean_expired_consumer_queue``, on the parts this service cleans."""
        cq = self.consume_queue
        return clean_expired_consumer_queue(cq.commitlog, cq.cq_store)

    def unused_topics(self, keep: Iterable[str]) -> list[tuple[str, int]]:
        """``MessageStore.clean_unused_topic``, on the parts this service cleans."""
        cq = self.consume_queue
        return clean_unused_topic(cq.commitlog, cq.cq_store, keep)


def clean_expired_consumer_queue(cl: CommitLog, cqs: ConsumeQueueStore) -> list[tuple[str, int]]:
    """Destroy every queue whose last unit points below the commit log's min offset (RocketMQ's
    ``cleanExpiredConsumerQueue``); the schedule and timer topics are kept. Returns the removed (topic, queue id)s.

    RocketMQ looks at a queue and destroys it without stopping the puts: a message put into the queue in
    between is acknowledged and then hidden (no longer found by queue until a restart rebuilds the queue
    from the log). Here a queue that looks expired is looked at again under the put lock, which no put of
    this process can pass meanwhile, and destroyed only when every put the log counted for it is in it
    (a put not dispatched yet, with SYNC_FLUSH, keeps the queue until a later call). With several writer
    processes the store runs this only while no other one has it open (``MessageStore``)."""
    min_offset = cl.get_min_offset()
    removed = []
    for cq in cqs.queues():
        if cq.topic in KEPT_WHEN_EXPIRED:
            continue
        last = cq.get_last_offset()
        if last == -1:
            log.debug("%s/%d: empty consume queue (maybe created just now), kept", cq.topic, cq.queue_id)
            continue
        if last >= min_offset:
            continue
        with cl.put_lock:
            # dispatch does not take the put lock (with SYNC_FLUSH or the pool it follows the puts): the last unit
            # is only known to be the last when the queue's end is the same before and after it is read, and
            # is every put the log counted for the queue
            end = cq.get_max_offset_in_queue()
            cell = cl.get_cell(cq.topic, cq.queue_id, create=False)
            counted = end if cell is None or cl.core.shared is not None else cell.next_offset
            last = cq.get_last_offset()
            if not (counted == end == cq.get_max_offset_in_queue() and 0 <= last < min_offset):
                log.info("%s/%d: consume queue kept: a message was put into it meanwhile", cq.topic, cq.queue_id)
                continue
            log.info("%s/%d: consume queue destroyed, its last message (%d) is below the commit log's min (%d)",
                     cq.topic, cq.queue_id, last, min_offset)
            _drop_queue(cl, cqs, cq)
        removed.append((cq.topic, cq.queue_id))
    return removed


def clean_unused_topic(cl: CommitLog, cqs: ConsumeQueueStore, keep: Iterable[str]) -> list[tuple[str, int]]:
    """Destroy the queues of every topic not in ``keep`` (RocketMQ's ``cleanUnusedTopic``); system topics
    are kept. Returns the removed (topic, queue id)s."""
    if isinstance(keep, str) or not all(isinstance(t, str) for t in keep):
        raise TypeError("keep must be a set of topic names")
    kept = set(keep)
    removed = []
    for cq in cqs.queues():
        if cq.topic in kept or cq.topic in SYSTEM_TOPICS:
            continue
        log.info("%s/%d: consume queue of an unused topic destroyed", cq.topic, cq.queue_id)
        with cl.put_lock:
            _drop_queue(cl, cqs, cq)
        removed.append((cq.topic, cq.queue_id))
    return removed


def _drop_queue(cl: CommitLog, cqs: ConsumeQueueStore, cq: ConsumeQueue) -> None:
    """Forget a queue in the log's table and destroy it; the caller holds the put lock. A put in progress
    holds the cell it took (and may run Python when it rolls a file, handing the GIL over), and a put
    between the two steps would make a new cell bound to the queue being destroyed: each would leave
    acknowledged messages out of every queue."""
    cl.remove_cell(cq.topic, cq.queue_id)
    cqs.remove(cq.topic, cq.queue_id)
    cq.destroy()
