"""How a store is put together and taken apart: the parts ``MessageStore.load`` opens (``open_parts``: the
commit log, the consume queues, the index, dispatch, recovered), the services ``MessageStore.start`` runs for
a writer (``wire_writer``: allocation, flush, cleaning, delay levels, timers, replication, the put path's waits), a
writer's last flush and checkpoint at shutdown (``close_writer``) and ``destroy``'s deletion
(``delete_store``). Which services run, and what each is handed, follows the configuration: flush type,
broker role, transient store pool. Each part gets the parts it works on, the clock and the disk usage,
never the store.

Dispatch (commit log -> queues and index), by configuration::

    ASYNC_FLUSH, no pool       inline: each put dispatches its record (``CommitLog.dispatcher``); its index
                               entries are written by ``IndexBuildService`` behind the puts
                               (``index_build_async``; False: inline too)
    ASYNC_FLUSH, pool          the commit service dispatches what it committed into the files
    SYNC_FLUSH                 the group commit dispatches what it flushed (nobody reads what a crash takes back)
    SLAVE, ASYNC_FLUSH         the HA client's append dispatches what arrived
    SLAVE, SYNC_FLUSH          the group commit dispatches what it flushed

The store keeps the lifecycle's order: it starts the services ``wire_writer`` returns (``Writer.start``),
stops them in the reverse order, then calls ``close_writer``.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pystore.config import BrokerRole, FlushDiskType, StoreConfig
from pystore.consumer.offsets import ConsumerOffsets
from pystore.engine.checkpoint import AbortFile, StoreCheckpoint, StoreLock
from pystore.engine.clean import CleanService
from pystore.engine.put_waits import PutWaits
from pystore.engine.recovery import RecoveryResult, recover_commit_log, recover_queues
from pystore.engine.recovery_plan import abnormal_open, log_geometry, log_hole
from pystore.engine.schedule import ScheduleMessageService
from pystore.errors import ConfigError, StoreCorruptedError, StoreError
from pystore.ha.master import HAService, ReplicaWait
from pystore.ha.slave import HAClient, SlaveLog
from pystore.index.service import IndexBuildService, IndexFileService, IndexService
from pystore.log.allocate import AllocateMappedFileService
from pystore.log.commitlog import CommitLog
from pystore.log.flush import (
    CommitRealTimeService,
    FlushConsumeQueueService,
    FlushRealTimeService,
    GroupCommitService,
    flush_all,
)
from pystore.log.mapped_file_queue import MappedFileQueue
from pystore.log.pool import TransientStorePool
from pystore.message.constants import SCHEDULE_TOPIC
from pystore.queue._dispatch import QueueDispatcher
from pystore.queue.consume_queue import ConsumeQueue
from pystore.queue.dispatch import ReputService
from pystore.queue.queue_store import ConsumeQueueStore
from pystore.read._queue_reader import follow_in_place
from pystore.read._read import ReadLimits
from pystore.read.arrival import WAKE_FILE, open_wake_file
from pystore.system.crashpoint import armed as crashpoint_armed
from pystore.system.crashpoint import crashpoint
from pystore.system.durable import sync_dirs
from pystore.system.running_flags import RunningFlags
from pystore.system.service import Clock, DiskUsage
from pystore.timer import timer_log_path, timer_wheel_path
from pystore.timer.timer_put import TimerPutHook
from pystore.timer.timer_services import TimerServices
from pystore.timer.timer_store import TimerMessageStore

if TYPE_CHECKING:
    from pystore.archive.archive import Archive
    from pystore.engine.shared_writers import SharedWriting
    from pystore.message._message_ext import MessageExt

__all__ = ["StoreParts", "Writer", "close_writer", "delete_store", "dispatch_behind", "open_parts", "pool_enabled",
           "wire_writer"]

log = logging.getLogger(__name__)

#: A writer's checkpoint reaches the file at most this often, when a flush service moved a time (5.x: 1 s).
_CHECKPOINT_FLUSH_MS = 1000
_PAGE = 4096      # OS page, the unit of flush_commit_log_least_pages (RocketMQ's OS_PAGE_SIZE)


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
               log_end: int | None = None) -> tuple[StoreParts | None, StoreCorruptedError | None]:
    """Map the store's files and recover them: the parts, or (None, why) when the files are unusable (why is
    None when no file is to blame: the log says more). Whatever it opened is closed again when it refuses or
    raises. ``injected_clock``: the clock the store was given (None: the commit log stamps messages with
    the system clock from C); ``clock`` and ``disk_usage`` (None: ``shutil.disk_usage``) go to every part that
    decides by them. ``log_end``: a takeover of several writers' lead while the others append (the published
    end: the commit log is recovered up to it and left alone past it; ``recover_commit_log``)."""
    # read -> plan -> execute: what the files say is read here and in pystore.engine.recovery, every decision is
    # pystore.engine.recovery_plan's (geometry, a hole, normal or abnormal, where to cut, what to rebuild)
    read_only = cfg.read_only
    abnormal = abnormal_open(last_exit_ok=last_exit_ok, read_only=read_only)
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
        result = parts.recovery = recover_commit_log(commitlog, parts.checkpoint, cfg, abnormal, read_only, log_end)
        reput = _make_reput(parts, cfg, last_exit_ok, clock, disk_usage)
        recover_queues(commitlog, parts.cq_store, reput, parts.index, result, parts.checkpoint, cfg, abnormal, read_only)
        commitlog.attach_last()
        parts.archive = _open_archive(cfg) if cfg.archive_uri else None
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


def _look_below(cl: CommitLog, archive: Archive | None) -> Callable[[int], MessageExt | None] | None:
    """The timer store's read of a message by offset when the store has an archive: below the local log, the
    archive's (a pending timer's record may outlive the local retention); None without an archive."""
    if archive is None:
        return None

    def look(offset: int) -> MessageExt | None:
        if 0 <= offset < cl.get_min_offset():
            return archive.look_message(offset)
        return cl.look_message_by_offset(offset)
    return look


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


def dispatch_behind(parts: StoreParts | None, writer: Writer | None) -> int:
    """RocketMQ ``dispatchBehindBytes`` of a store: 0 for a reader (it dispatches nothing) and with inline
    dispatch; else what dispatch has yet to reach of what it may (``Writer.dispatch_end``; the flushed end
    before the writer started)."""
    if parts is None or parts.reput is None or parts.commitlog.config.read_only:
        return 0
    if writer is not None:
        return writer.behind(parts)
    return max(0, parts.commitlog.queue.flushed_where - parts.reput.reput_from)


def pool_enabled(cfg: StoreConfig) -> bool:
    """RocketMQ 4.8's ``isTransientStorePoolEnable``: the pool is used with ASYNC_FLUSH on a master only."""
    return (cfg.transient_store_pool_enable and cfg.flush_disk_type == FlushDiskType.ASYNC_FLUSH
            and cfg.broker_role != BrokerRole.SLAVE and not cfg.read_only)


@dataclass
class Writer:
    """The services of a started writer, in the order they start (they stop in the reverse order)."""

    services: list[Any]
    allocate: AllocateMappedFileService
    flush_service: FlushRealTimeService | GroupCommitService
    clean: CleanService
    put_waits: PutWaits
    #: whether each put dispatches its own record (else a service walks the log behind ``dispatch_end``)
    inline_dispatch: bool
    #: a writable master's delay levels
    schedule: ScheduleMessageService | None = None
    #: a writable master's timer store (RocketMQ 5 timer messages; ``timer_wheel_enable``)
    timer: TimerMessageStore | None = None
    #: committed consumer offsets (config/consumerOffset.json)
    offsets: ConsumerOffsets | None = None
    pool: TransientStorePool | None = None
    #: a master's HA listener (``ha_listen_port``), a slave's client and the log it writes
    ha: HAService | None = None
    ha_client: HAClient | None = None
    slave_log: SlaveLog | None = None
    #: the configuration's flush type, for ``dispatch_end``
    sync_flush: bool = False
    #: the thread writing the index behind inline dispatch (``index_build_async``), or None
    index_builder: IndexBuildService | None = None

    def start(self) -> None:
        """Start every service; a listener bound but not started is closed when one fails (no shutdown will)."""
        try:
            for s in self.services:
                s.start()
        except BaseException:
            self.release_listener()
            raise

    def stop_appends(self) -> None:
        """The store shuts down: a slave's client thread that outlives its join must not touch the log."""
        if self.slave_log is not None:
            self.slave_log.closed = True

    def abandon(self) -> None:
        """The store gives up without a shutdown (a failed open, a crash test): nothing may append any more, and
        the HA port is free again."""
        self.stop_appends()
        if self.ha is not None:
            self.ha.shutdown()
            self.ha = None

    def release_listener(self) -> None:
        ha = self.ha
        if ha is not None and not ha.started:
            ha.shutdown()
            self.ha = None

    def dispatch_end(self, commitlog: CommitLog) -> int:
        """Where dispatch may go: the flushed offset with SYNC_FLUSH, the committed end with the pool, the end of
        what arrived on an ASYNC_FLUSH slave (it dispatches on receipt, as a master does)."""
        q = commitlog.queue
        if self.ha_client is not None and not self.sync_flush:
            return q.get_max_offset()
        return q.committed_where if self.pool is not None else q.flushed_where

    def catch_up(self, parts: StoreParts) -> None:
        """Where a service dispatches behind the puts, dispatch now what it may (``dispatch_end``); the index
        builder indexes all the log holds."""
        if not self.inline_dispatch and parts.reput is not None:
            parts.reput.dispatch_until(self.dispatch_end(parts.commitlog))
        if self.index_builder is not None:
            self.index_builder.catch_up()

    def behind(self, parts: StoreParts) -> int:
        """RocketMQ ``dispatchBehindBytes``: what dispatch has yet to reach of what it may (0 when inline)."""
        if self.inline_dispatch or parts.reput is None:
            return 0
        return max(0, self.dispatch_end(parts.commitlog) - parts.reput.reput_from)


def wire_writer(parts: StoreParts, cfg: StoreConfig, *, lock: StoreLock, abort: AbortFile,
                running_flags: RunningFlags, clock: Clock, disk_usage: DiskUsage,
                shared: SharedWriting | None = None) -> Writer:
    """Build a writer's services around ``parts`` and hook them into the commit log; the lock is taken and the
    abort file created once nothing that can refuse (delay offsets, the HA port) is left."""
    cl = parts.commitlog
    slave = cfg.broker_role == BrokerRole.SLAVE
    sync_flush = cfg.flush_disk_type == FlushDiskType.SYNC_FLUSH
    name = cfg.store_path_root_dir
    schedule = None
    if not slave:                                # delay levels: a writable master only (docs/format.md §10)
        schedule = ScheduleMessageService(cl, parts.cq_store, cfg, clock=clock)
        schedule.load()                          # first: a bad delayOffset.json fails start() cleanly
        cl.delay_rewrite = schedule.rewrite
        if parts.dispatcher is not None:
            parts.dispatcher.schedule_wake = schedule.wake
    # timer properties are checked and rewritten on every writer (a disabled wheel refuses them)
    cl.timer_rewrite = TimerPutHook(cfg, clock)
    timer = None
    if not slave and cfg.timer_wheel_enable:
        # a damaged timer log or wheel fails start() here, before any service runs
        timer = TimerMessageStore(cl, parts.cq_store, cfg, clock, put=cl.append_message,
                                  look=_look_below(cl, parts.archive))
        timer.load()
        cl.timer_rewrite = TimerPutHook(cfg, clock, slot_num=timer.slot_num, on_timer=timer.note_timer_put)
    offsets = ConsumerOffsets(cfg.config_path(), cfg.flush_consumer_offset_interval, _min_offset_of(parts.cq_store),
                              read_only=False, clock=clock, journal=cfg.shared_writers)
    offsets.load()                               # before the lock too: a bad consumerOffset.json fails start()
    ha = None
    if not slave and cfg.ha_listen_port is not None:
        # bound first: a port in use fails start() before any service runs
        ha = HAService(cl.select_data, cl.get_max_offset, cl.get_min_offset, cfg, clock=clock,
                       file_size=cl.queue.mapped_file_size)
        try:
            ha.bind()
        except OSError as e:
            raise StoreError("the HA listener cannot bind %s:%d: %s" % (cfg.ha_listen_address, cfg.ha_listen_port,
                                                                       e)) from e
    elif cfg.broker_role == BrokerRole.SYNC_MASTER:
        log.warning("%s: SYNC_MASTER without ha_listen_port: no slave can connect, so every put that waits "
                    "reports SLAVE_NOT_AVAILABLE", name)
    try:
        lock.acquire()
        abort.create()
        w = _wire_services(parts, cfg, schedule, ha, running_flags, clock, disk_usage, slave, sync_flush, timer)
        if shared is not None:
            # the leader of several writers: every record, its own too, is dispatched behind the log's end
            w.services.append(shared.follow_service(parts))
        w.offsets = offsets
        w.services.append(offsets)               # stops first, then writes what changed
        return w
    except BaseException:
        if ha is not None:
            ha.shutdown()
        if timer is not None:
            timer.close()
        raise


def _no_dispatch(end: int) -> int:
    """Several writers: the leader's follow thread dispatches (``shared_writers.LeaderFollow``)."""
    return end


def _min_offset_of(cq_store: ConsumeQueueStore) -> Callable[[str, int], int]:
    def min_offset(topic: str, queue_id: int) -> int:
        cq = cq_store.find(topic, queue_id)
        return 0 if cq is None else cq.get_min_offset_in_queue()
    return min_offset


def _wire_services(parts: StoreParts, cfg: StoreConfig, schedule: ScheduleMessageService | None,
                   ha: HAService | None, running_flags: RunningFlags, clock: Clock, disk_usage: DiskUsage,
                   slave: bool, sync_flush: bool, timer: TimerMessageStore | None = None) -> Writer:
    """``wire_writer`` once the lock is held: the services, and the commit log's hooks into them."""
    cl, checkpoint, reput = parts.commitlog, parts.checkpoint, parts.reput
    assert reput is not None
    pool = None
    if pool_enabled(cfg):
        pool = TransientStorePool(cfg.transient_store_pool_size, cfg.mapped_file_size_commit_log,
                                  cfg.fast_fail_if_no_buffer_in_store_pool)
        pool.init()
    # a flush writes what the puts wrote, not the large folio around it (MappedFile.write_page_by_page):
    # new files (the allocate service), and the rest of the file recovery left the writer in
    allocate = AllocateMappedFileService(cfg.allocate_wait_timeout, cfg.warm_mapped_file_enable, pool=pool,
                                         clock=clock, window=cfg.prefault_window_bytes,
                                         sync_warm_every=cfg.flush_least_pages_when_warm_mapped_file * _PAGE
                                         if sync_flush else 0)
    last = cl.queue.last()
    if last is not None:
        last.write_page_by_page(last.wrote_position)
    # several writers: files are made inline, under the append lock (the service's files are not others')
    cl.queue.allocate = None if cfg.shared_writers else allocate
    if not slave and not cfg.shared_writers and not crashpoint_armed("commitlog.roll"):
        # the next file made ahead into the core, where the roll takes it in C (a crash test of the roll
        # needs the roll to come through Python, where the point is)
        allocate.keep_ready(cl.core, cl.queue)
    # each consume queue's next file made ahead by its flushes, renamed into place by the roll in C
    parts.cq_store.keep_ready()
    slave_log = SlaveLog(cl, reput, parts.dispatcher, checkpoint, cfg) if slave else None
    commit: CommitRealTimeService | None = None
    group_commit: GroupCommitService | None = None
    flush_service: FlushRealTimeService | GroupCommitService
    inline = False
    cl.dispatcher = None
    cl.flush_wakeup = None
    cl.flush_wake_c = False
    if sync_flush:
        # consume queues follow the flushed offset: nobody reads what a crash could take back
        flush_service = group_commit = GroupCommitService(
            cl, checkpoint, clock=clock,
            after_flush=slave_log.dispatch_flushed if slave_log is not None
            else _no_dispatch if cfg.shared_writers else reput.dispatch_until)
        if schedule is not None:
            # its deliveries wait for no flush: the group commit is woken to make them durable soon
            schedule.flush_wakeup = group_commit.wakeup
        if timer is not None:
            timer.flush_wakeup = group_commit.wakeup
            # its checkpoint waits for the deliveries to be durable: through the group commit, which dispatches
            timeout_s = cfg.sync_flush_timeout / 1000
            timer.flush_commitlog = lambda end: group_commit.sync(end, timeout_s)
    else:
        flush_service = FlushRealTimeService(cl, cfg, checkpoint, clock=clock)
        if pool is not None:
            # puts land in pool buffers; queues follow what the commit service copied into the files
            commit = CommitRealTimeService(cl, cfg, flush_service, after_commit=reput.dispatch_until, clock=clock)
            cl.flush_wakeup = None if cfg.flush_commit_log_timed else commit.wakeup
            cl.wake_bytes = cfg.commit_commit_log_least_pages * _PAGE
        else:
            # puts wake the service's wait in C (_flush_wait) through the commit log's word, not through Python
            # (flush_wakeup stays None: the put path calls it only without flush_wake_c)
            cl.flush_wake_c = not cfg.flush_commit_log_timed
            cl.follow_put_cpu = cfg.follow_put_cpu
            cl.wake_bytes = cfg.flush_commit_log_least_pages * _PAGE
            # a slave's log grows by transfers, never by puts: queues are built by walking what arrived
            inline = not slave and not cfg.shared_writers
            cl.dispatcher = parts.dispatcher if inline else None
    index_builder = None
    if parts.dispatcher is not None:
        # the entries of inline dispatch go to a builder that follows the log from here (recovery indexed
        # all before); the other ways dispatch walk the log off the put thread and index as they go
        parts.dispatcher.inline_index = not (inline and parts.index is not None and cfg.index_build_async)
        if not parts.dispatcher.inline_index:
            assert parts.index is not None
            index_builder = IndexBuildService(parts.index, cl, cl.get_max_offset(), clock=clock,
                                              nice=cfg.index_build_nice)
    replicas = ReplicaWait(ha, cfg, cfg.store_path_root_dir) if cfg.broker_role == BrokerRole.SYNC_MASTER else None
    put_waits = PutWaits(cfg, group_commit, replicas, cfg.store_path_root_dir)
    cl.after_put = put_waits.after_put if put_waits.blocking else None
    services: list[Any] = [allocate, flush_service]
    if commit is not None:
        services.append(commit)        # stops before the flush service: its last commit gets flushed
    clean = CleanService(cl, parts.cq_store, parts.index, cfg, running_flags, clock=clock, disk_usage=disk_usage,
                         archive=parts.archive)
    services.append(clean)
    if parts.archive is not None:   # sealed files copied once flushed and dispatched (inline: as they are written)
        services.append(parts.archive.serve(cl, parts.cq_store, cl.get_max_offset if inline else lambda: reput.reput_from,
                                            parts.index))
    services.append(FlushConsumeQueueService(parts.cq_store, parts.index, parts.dispatcher, cfg, checkpoint,
                                             clock=clock))
    if parts.index is not None:
        services.append(IndexFileService(parts.index, clock=clock))   # next files made, full ones flushed
    if index_builder is not None:
        services.append(index_builder)  # stops before IndexFileService: the files it filled get flushed
    if schedule is not None:
        services.append(schedule)      # stops first, then persists its offsets
    if timer is not None:
        services.append(TimerServices(timer, clock))    # stops first, then flushes its files and checkpoint
    ha_client = None
    if slave_log is not None:
        # a SYNC_FLUSH slave acknowledges only what it flushed; an ASYNC_FLUSH one on receipt (RocketMQ)
        ha_client = HAClient(cfg, cl.get_max_offset, slave_log.append, cl.queue.mapped_file_size, cl.select_data,
                             clock=clock, flush=slave_log.flush if sync_flush else None)
        services.append(ha_client)     # stops first: nothing arrives after
    elif ha is not None:
        services.append(ha)
    return Writer(services, allocate, flush_service, clean, put_waits, inline, schedule=schedule, timer=timer,
                  pool=pool, ha=ha,
                  ha_client=ha_client, slave_log=slave_log, sync_flush=sync_flush, index_builder=index_builder)


def close_writer(parts: StoreParts, writer: Writer | None, *, abort: AbortFile, running_flags: RunningFlags) -> None:
    """A writable store's shutdown once its services stopped (``writer``: None if it never started): cut a
    slave's torn tail, flush the commit log, dispatch what a service had yet to, flush the queues and index,
    write the checkpoint, and remove the abort file when all of it is on disk and nothing is left behind."""
    cl, checkpoint = parts.commitlog, parts.checkpoint
    name = cl.config.store_path_root_dir
    if writer is not None and writer.slave_log is not None:
        writer.slave_log.trim_torn_tail()
    clean = True
    try:
        flush_all(cl.queue)
    except OSError:
        log.exception("%s: final flush failed; the abort file stays", name)
        clean = False
    if writer is not None:
        writer.catch_up(parts)
    queues_synced = parts.cq_store.flush(0)
    if parts.index is not None:
        parts.index.flush()
    crashpoint("shutdown.flushed")
    ts = cl.queue.store_timestamp
    if ts > 0:
        checkpoint.physic_msg_timestamp = ts
    if parts.dispatcher is not None and parts.dispatcher.last_store_ts > 0 and queues_synced:
        checkpoint.logics_msg_timestamp = parts.dispatcher.last_store_ts
    checkpoint.flush()
    crashpoint("shutdown.checkpoint")
    if (writer is not None and clean and queues_synced and running_flags.is_writeable()
            and writer.behind(parts) == 0
            and (writer.index_builder is None or writer.index_builder.behind() == 0)):
        abort.remove()


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
