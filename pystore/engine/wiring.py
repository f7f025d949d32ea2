"""The services a writer runs over a store's parts (``pystore.engine.parts``): ``wire_writer`` builds them
(allocation, flush, cleaning, delay levels, timers, replication, the archive's uploads, the put path's waits)
and hooks them into the commit log; ``Writer`` starts them; ``close_writer`` is a writer's last flush and
checkpoint at shutdown. Which services run, and what each is handed, follows the configuration: flush type,
broker role, transient store pool, several writers. Each service gets the parts it works on, the clock and the
disk usage, never the store.

Dispatch (commit log -> queues and index), by configuration::

    ASYNC_FLUSH, no pool       inline: each put dispatches its record (``CommitLog.dispatcher``); its index
                               entries are written by ``IndexBuildService`` behind the puts
                               (``index_build_async``; False: inline too)
    ASYNC_FLUSH, pool          the commit service dispatches what it committed into the files
    SYNC_FLUSH                 the group commit dispatches what it flushed (nobody reads what a crash takes back)
    SLAVE, ASYNC_FLUSH         the HA client's append dispatches what arrived
    SLAVE, SYNC_FLUSH          the group commit dispatches what it flushed
    several writers            the leader's follow thread dispatches every writer's records
                               (``pystore.engine.shared_writers``)

The store keeps the lifecycle's order: it starts the services ``wire_writer`` returns (``Writer.start``),
stops them in the reverse order, then calls ``close_writer``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pystore.config import BrokerRole, FlushDiskType, StoreConfig
from pystore.consumer.offsets import ConsumerOffsets
from pystore.engine.checkpoint import AbortFile, StoreLock
from pystore.engine.clean import CleanService
from pystore.engine.parts import StoreParts
from pystore.engine.put_waits import PutWaits
from pystore.engine.schedule import ScheduleMessageService
from pystore.errors import StoreError
from pystore.ha.master import HAService, ReplicaWait
from pystore.ha.slave import HAClient, SlaveLog
from pystore.index.builder import IndexBuildService
from pystore.index.service import IndexFileService
from pystore.log._warm import write_page_by_page
from pystore.log.allocate import AllocateMappedFileService
from pystore.log.commitlog import CommitLog
from pystore.log.flush import (
    CommitRealTimeService,
    FlushConsumeQueueService,
    FlushRealTimeService,
    GroupCommitService,
    flush_all,
)
from pystore.log.pool import TransientStorePool
from pystore.queue.queue_store import ConsumeQueueStore
from pystore.system.crashpoint import armed as crashpoint_armed
from pystore.system.crashpoint import crashpoint
from pystore.system.running_flags import RunningFlags
from pystore.system.service import Clock, DiskUsage
from pystore.timer._timer_put import TimerPut
from pystore.timer.timer_services import TimerServices
from pystore.timer.timer_store import TimerMessageStore

if TYPE_CHECKING:
    from pystore.archive.archive import Archive
    from pystore.engine.shared_writers import SharedWriting
    from pystore.message._message_ext import MessageExt

__all__ = ["Writer", "close_writer", "dispatch_behind", "pool_enabled", "wire_writer"]

log = logging.getLogger(__name__)

_PAGE = 4096      # OS page, the unit of flush_commit_log_least_pages (RocketMQ's OS_PAGE_SIZE)


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


def _readable_from(cl: CommitLog, archive: Archive | None) -> Callable[[], int] | None:
    """With an archive, the first commit-log offset the timer store can still read a record at (the archive's
    first when it begins below the local log): the timer-log files it may delete point below it; None without
    an archive (the local log's first offset, as RocketMQ)."""
    if archive is None:
        return None

    def first() -> int:
        local, archived = cl.get_min_offset(), archive.min_phy_offset()
        return local if archived < 0 else min(local, archived)
    return first


def dispatch_behind(parts: StoreParts | None, writer: Writer | None) -> int:
    """RocketMQ ``dispatchBehindBytes`` of a store: 0 for a reader (it dispatches nothing) and with inline
    dispatch; else what dispatch has yet to reach of what it may (``Writer.dispatch_end``; the flushed end
    before the writer started)."""
    if parts is None or parts.reput is None or parts.commitlog.config.read_only:
        return 0
    if writer is not None:
        return writer.behind(parts)
    return max(0, parts.commitlog.queue.flushed_where - parts.reput.reput_from)


def _commit_flush_dispatch(cl: CommitLog, reput: Any, end: int) -> bool:
    """With the transient pool: commit every pooled byte written so far (at least to ``end``), flush it and
    dispatch it (what the commit service's pass does after a commit); True once it is all durable."""
    target = max(end, cl.queue.get_max_wrote_position())
    flushed = flush_all(cl.queue)
    if reput is not None:
        reput.dispatch_until(cl.queue.committed_where)
    return flushed >= target


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
    # (compiled: the commit log calls it in C; ``cl.clock`` is the injected clock, None for the C one)
    cl.timer_rewrite = TimerPut(cfg, cl.clock)
    timer = None
    if not slave and cfg.timer_wheel_enable:
        # a damaged timer log or wheel fails start() here, before any service runs
        timer = TimerMessageStore(cl, parts.cq_store, cfg, clock, put=cl.append_message,
                                  look=_look_below(cl, parts.archive), readable_from=_readable_from(cl, parts.archive))
        timer.load()
        cl.timer_rewrite = TimerPut(cfg, cl.clock, timer.put_link)     # with flow control and the enqueue's wake
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
    # a flush writes what the puts wrote, not the large folio around it (_warm.write_page_by_page):
    # new files (the allocate service), and the rest of the file recovery left the writer in
    allocate = AllocateMappedFileService(cfg.allocate_wait_timeout, cfg.warm_mapped_file_enable, pool=pool,
                                         clock=clock, window=cfg.prefault_window_bytes,
                                         sync_warm_every=cfg.flush_least_pages_when_warm_mapped_file * _PAGE
                                         if sync_flush else 0)
    last = cl.queue.last()
    if last is not None:
        write_page_by_page(last, last.wrote_position)
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
            if timer is not None:
                # its checkpoint waits for the deliveries to be durable, those still in a pool buffer included
                # (the log's max offset is only what the commit service copied into the files)
                timer.flush_commitlog = lambda end: _commit_flush_dispatch(cl, reput, end)
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

