"""``MessageStore``: the facade users hold (RocketMQ ``DefaultMessageStore``, API.md "The store").

It owns the lifecycle and wires the pieces; it holds no loops over bytes (those are in the Cython
modules) and no service schedules (those are in their services)::

    MessageStore(config)      nothing touched on disk
      .load()                 lock the folder (writers), map files, recover        -> True/False
      .start()                abort file, services (allocate, flush ...), accept puts
      .shutdown()             stop accepting, stop services (they flush), checkpoint, remove abort, unlock
      .destroy()              shutdown and delete every file of the store

``MessageStore.open(root, read_only=False, **overrides)`` does load + start and is a context manager.
A read-only store takes no lock, writes nothing and refuses puts (``SERVICE_NOT_AVAILABLE``); it follows a
live writer by re-reading the folder when asked for data beyond what it has seen.

Time and disk are injected: ``MessageStore(config, clock=..., disk_usage=...)`` (both keyword-only and
optional) hands its clock to every policy that depends on the time and its ``disk_usage`` to every decision on
disk usage (``pystore.service`` states the rule); the services get these and the parts they work on from the
store's wiring, not by reading the store.

Thread-safety: puts and reads may come from any number of threads; lifecycle calls (load, start,
shutdown, destroy) must not race each other.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from pystore._codec import REASONS, RECORD_SHORT
from pystore._commitlog import BUCKET_NAMES, QueueCell, read_message, scan_file
from pystore._cq import QueueDispatcher, QueueReader, ReadLimits, pickup_store_timestamp, queue_offset_by_time, read_queue
from pystore._mapped_file import SelectMappedBufferResult
from pystore._message import Message, MessageBatch, MessageExt
from pystore._results import PutMessageResult
from pystore.allocate import AllocateMappedFileService
from pystore.checkpoint import AbortFile, StoreCheckpoint, StoreLock
from pystore.clean import CleanService, clean_expired_consumer_queue, clean_unused_topic
from pystore.commitlog import CommitLog
from pystore.config import BrokerRole, FlushDiskType, StoreConfig
from pystore.consume_queue import ConsumeQueue, ConsumeQueueStore
from pystore.crashpoint import crashpoint
from pystore.dispatch import ReputService
from pystore.durable import make_dirs_durable, sync_dirs
from pystore.errors import StoreClosedError, StoreCorruptedError, StoreError
from pystore.flush import (
    CommitRealTimeService,
    FlushConsumeQueueService,
    FlushRealTimeService,
    GroupCommitRequest,
    GroupCommitService,
)
from pystore.ha import HAClient, HAService
from pystore.index import IndexService
from pystore.mapped_file_queue import MappedFileQueue
from pystore.message import SCHEDULE_TOPIC, MessageFilter, TagFilter
from pystore.pool import TransientStorePool
from pystore.recovery import RecoveryResult, recover_store
from pystore.results import GetMessageResult, QueryMessageResult
from pystore.running_flags import RunningFlags
from pystore.schedule import ScheduleMessageService
from pystore.service import DiskUsage, disk_used_ratio, real_clock
from pystore.status import GetMessageStatus, PutMessageStatus

__all__ = ["MessageStore"]

log = logging.getLogger(__name__)

_NEW, _LOADED, _STARTED, _SHUTDOWN = "new", "loaded", "started", "shutdown"
#: A writer's checkpoint reaches the file at most this often, when a flush service moved a time (5.x: 1 s).
_CHECKPOINT_FLUSH_MS = 1000

#: ``_cq.read_queue`` codes (SCAN_* then GM_*) -> GetMessageStatus
_GET_STATUS = (GetMessageStatus.FOUND, GetMessageStatus.NO_MATCHED_MESSAGE, GetMessageStatus.MESSAGE_WAS_REMOVING,
               GetMessageStatus.NO_MESSAGE_IN_QUEUE, GetMessageStatus.OFFSET_TOO_SMALL,
               GetMessageStatus.OFFSET_OVERFLOW_ONE, GetMessageStatus.OFFSET_OVERFLOW_BADLY,
               GetMessageStatus.OFFSET_FOUND_NULL)
_NO_MATCHED = GetMessageStatus.NO_MATCHED_MESSAGE
_SLAVE = BrokerRole.SLAVE


def _not_available(msg: object) -> PutMessageResult:
    if not isinstance(msg, (Message, MessageBatch)):
        raise TypeError("expected a Message or MessageBatch, got %s" % type(msg).__name__)
    return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE)


_PAGE = 4096      # OS page, the unit of flush_commit_log_least_pages (RocketMQ's OS_PAGE_SIZE)


class MessageStore:
    """An embedded RocketMQ-format message store in one folder (see the module docstring)."""

    def __init__(self, config: StoreConfig | None = None, *, clock: Callable[[], int] | None = None,
                 disk_usage: DiskUsage | None = None) -> None:
        """``clock()``: epoch milliseconds, the time of every policy (store timestamps, file expiry, flush and
        heartbeat intervals, the checkpoint's writes, the page-cache-busy check); default the system clock.
        ``disk_usage(path)``: what the partition holding ``path`` uses, as ``shutil.disk_usage`` answers (the
        default) or as the used fraction in [0, 1]; cleaning and the DISK_FULL flag decide by it. Tests
        inject both to move time and fill the disk without waiting or writing."""
        if config is not None and not isinstance(config, StoreConfig):
            raise TypeError("config must be a StoreConfig, got %s" % type(config).__name__)
        self.config = config if config is not None else StoreConfig()
        self.clock = clock or real_clock
        self._injected_clock = clock
        self.disk_usage: DiskUsage = disk_usage or shutil.disk_usage
        self.read_only = self.config.read_only
        self.running_flags = RunningFlags()
        self.running_flags.add_listener(self._update_writeable)
        self._reader: QueueReader | None = None
        self._state = _NEW
        self._lock = StoreLock(self.config.lock_path())
        self._abort = AbortFile(self.config.abort_path())
        self._checkpoint: StoreCheckpoint | None = None
        self._commitlog: CommitLog | None = None
        self._cq_store: ConsumeQueueStore | None = None
        self._index: IndexService | None = None
        self._dispatcher: QueueDispatcher | None = None
        self._reput: ReputService | None = None
        self._inline_dispatch = False
        self._limits: ReadLimits | None = None
        self._allocate: AllocateMappedFileService | None = None
        self._flush_service: FlushRealTimeService | GroupCommitService | None = None
        self._services: list[Any] = []
        self._clean: CleanService | None = None
        self.schedule_message_service: ScheduleMessageService | None = None
        self._pool: TransientStorePool | None = None
        #: master: the HA listener (``ha_listen_port``); slave: the client following ``ha_master_address``
        self._ha: HAService | None = None
        self._ha_client: HAClient | None = None
        self._refresh_lock = threading.RLock()
        self.last_exit_ok = True
        self.recovery: RecoveryResult | None = None
        #: why ``load()`` returned False, when a file is at fault (``MessageStore.open`` raises it)
        self.load_error: StoreCorruptedError | None = None
        self.boot_timestamp = self.clock()

    # ------------------------------------------------------------------------------------------
    # lifecycle
    # ------------------------------------------------------------------------------------------

    @classmethod
    def open(cls, root: str | os.PathLike[str], read_only: bool = False, **config_overrides: Any) -> MessageStore:
        """A loaded and started store at ``root``; ``with MessageStore.open(root) as store:`` shuts it down.
        ``clock=`` and ``disk_usage=`` among the keywords go to the constructor, the rest to ``StoreConfig``."""
        clock = config_overrides.pop("clock", None)
        disk_usage = config_overrides.pop("disk_usage", None)
        config = StoreConfig(store_path_root_dir=os.fspath(root), read_only=read_only, **config_overrides)
        store = cls(config, clock=clock, disk_usage=disk_usage)
        try:
            if not store.load():
                if store.load_error is not None:
                    raise store.load_error
                raise StoreError("the store at %s cannot be loaded (see the log for the file at fault)" % root)
            store.start()
        except BaseException:
            store._release_after_failure()
            raise
        return store

    def __enter__(self) -> MessageStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    @property
    def root(self) -> str:
        return self.config.store_path_root_dir

    @property
    def state(self) -> str:
        return self._state

    def load(self) -> bool:
        """Lock the folder (writers), map the files and recover; False if the files are unusable."""
        if self._state != _NEW:
            raise StoreError("load() on a store that is %s" % self._state)
        cfg = self.config
        if not self.read_only:
            make_dirs_durable(cfg.store_path_root_dir)
            self._lock.acquire()
        elif not os.path.isdir(cfg.store_path_root_dir):
            raise StoreError("no store at %s" % cfg.store_path_root_dir)
        try:
            ok = self._load()
        except BaseException:
            self._release_after_failure()
            raise
        if not ok:
            self._release_after_failure()
        return ok

    def _load(self) -> bool:
        cfg = self.config
        self.last_exit_ok = not self._abort.exists()
        queue = MappedFileQueue(cfg.commit_log_paths(), cfg.mapped_file_size_commit_log, read_only=self.read_only,
                                clock=self.clock)
        existing = queue.detect_file_size()
        if existing is not None and existing != cfg.mapped_file_size_commit_log:
            if _plausible_geometry(queue, existing):
                (log.info if self.read_only else log.warning)(
                    "%s: commit-log files are %d bytes, not the configured %d; the store keeps its geometry",
                    cfg.store_path_root_dir, existing, cfg.mapped_file_size_commit_log)
                queue.mapped_file_size = existing
        # a crashed writer's last files may be short: a power cut took back a size no flush made durable
        if not queue.load(pad_short=not self.last_exit_ok and not self.read_only):
            if queue.load_error is not None:
                self.load_error = StoreCorruptedError(*queue.load_error)
            return False
        gap = queue.first_gap()
        if gap >= 0:
            queue.close()
            self.load_error = StoreCorruptedError(queue.path_for(gap), gap, "commit-log file missing: the log has "
                                                  "a hole from offset %d" % gap)
            log.error("%s", self.load_error)
            return False
        self._checkpoint = StoreCheckpoint(cfg.checkpoint_path(), read_only=self.read_only, clock=self.clock)
        self._commitlog = CommitLog(cfg, queue, clock=self._injected_clock)
        self._bind_put_fast_path()
        self._cq_store = ConsumeQueueStore(cfg.consume_queue_path(), cfg.mapped_file_size_consume_queue,
                                           self.read_only, self._on_queue_error, cfg.prefault_window_bytes)
        if not self._cq_store.load():
            self.load_error = self._cq_store.load_error
            return False
        self._limits = ReadLimits(cfg.max_transfer_bytes_on_message_in_memory,
                                  cfg.max_transfer_count_on_message_in_memory,
                                  cfg.max_transfer_bytes_on_message_in_disk, cfg.max_transfer_count_on_message_in_disk,
                                  _physical_memory() * cfg.access_message_in_memory_max_ratio // 100,
                                  cfg.check_crc_on_read)
        abnormal = not self.last_exit_ok and not self.read_only
        if abnormal:
            log.warning("%s: the last writer did not shut down cleanly; abnormal recovery", cfg.store_path_root_dir)

        def make_reput() -> ReputService:
            # only once the commit log is judged: a refused open must leave the index as it was
            assert self._commitlog is not None and self._cq_store is not None
            if cfg.message_index_enable:
                self._index = IndexService(cfg.index_path(), cfg.max_hash_slot_num, cfg.max_index_num,
                                           self._checkpoint, self.read_only, self.clock, cfg.max_msgs_num_batch)
                self._index.load(self.last_exit_ok)
            self._dispatcher = QueueDispatcher(self._cell_for, self._cq_store.find_or_create,
                                               cfg.delay_level_table(), self._index, SCHEDULE_TOPIC)
            self._reput = ReputService(self._dispatcher, self._commitlog)
            return self._reput

        self.recovery = recover_store(self._commitlog, self._cq_store, make_reput, self._checkpoint, cfg, abnormal,
                                      self.read_only)
        self._commitlog.attach_last()
        if not self.read_only:
            self._checkpoint.auto_flush_ms = _CHECKPOINT_FLUSH_MS
            self._bind_get_fast_path()
        self._state = _LOADED
        return True

    @property
    def _state(self) -> str:
        return self.__state

    @_state.setter
    def _state(self, state: str) -> None:
        self.__state = state
        if self._reader is not None:
            # the compiled get_message serves only a readable store; the rest goes to the Python method
            self._reader.open = state in (_LOADED, _STARTED)

    def _bind_get_fast_path(self) -> None:
        """``get_message`` and ``look_message_by_offset`` without a Python frame for their common calls (no
        filter, a known queue, a readable master; an int offset): the instance's methods become a
        ``_cq.QueueReader``'s, which hands every other call back to this class's. Only for a writable
        ``MessageStore`` itself: a read-only store refreshes its view first, and a subclass may change any
        helper these methods use, so it keeps the Python methods."""
        if type(self) is not MessageStore:
            return
        assert self._commitlog is not None and self._cq_store is not None
        self._reader = QueueReader(self._cq_store._queues, self._commitlog.queue, self._limits, _GET_STATUS,
                                   self.running_flags, RunningFlags.NOT_READABLE_BIT, self.config, _SLAVE,
                                   MessageStore, self)
        self.get_message = self._reader.get_message  # type: ignore[method-assign]
        self.look_message_by_offset = self._reader.look_message_by_offset  # type: ignore[method-assign]

    def _cell_for(self, topic: str, queue_id: int) -> QueueCell:
        """The topic-queue cell with its consume queue (dispatch's factory)."""
        assert self._commitlog is not None and self._cq_store is not None
        cell = self._commitlog.get_cell(topic, queue_id)
        if cell.consume_queue is None:
            cell.consume_queue = self._cq_store.find_or_create(topic, queue_id)
        return cell

    def _on_queue_error(self, message: str) -> None:
        log.error("%s: %s; the store stops accepting puts", self.root, message)
        self.running_flags.make_logics_queue_error()

    def start(self) -> None:
        """Start the services and accept puts (a read-only store only serves reads)."""
        if self._state == _NEW:
            if not self.load():
                raise StoreError("the store at %s cannot be loaded" % self.root)
        if self._state != _LOADED:
            raise StoreError("start() on a store that is %s" % self._state)
        if self.read_only:
            self._state = _STARTED
            return
        try:
            self._start_writer()
        except BaseException:
            ha = self._ha
            if ha is not None and not ha.started:          # bound, but not started: no shutdown will close it
                ha.shutdown()
                self._ha = None
            raise

    def _start_writer(self) -> None:
        cfg = self.config
        assert self._commitlog is not None and self._checkpoint is not None
        cl = self._commitlog
        slave = cfg.broker_role == BrokerRole.SLAVE
        if not slave:                                # delay levels: a writable master only (FORMAT.md §10)
            assert self._cq_store is not None
            self.schedule_message_service = ScheduleMessageService(cl, self._cq_store, cfg, clock=self.clock)
            self.schedule_message_service.load()     # first: a bad delayOffset.json fails start() cleanly
            cl.delay_rewrite = self.schedule_message_service.rewrite
        if not slave and cfg.ha_listen_port is not None:
            # bound first: a port in use fails start() before any service runs
            self._ha = HAService(self, cfg, clock=self.clock, file_size=cl.queue.mapped_file_size)
            try:
                self._ha.bind()
            except OSError as e:
                self._ha = None
                raise StoreError("the HA listener cannot bind %s:%d: %s" % (cfg.ha_listen_address,
                                                                           cfg.ha_listen_port, e)) from e
        elif cfg.broker_role == BrokerRole.SYNC_MASTER:
            log.warning("%s: SYNC_MASTER without ha_listen_port: no slave can connect, so every put that waits "
                        "reports SLAVE_NOT_AVAILABLE", self.root)
        self._lock.acquire()
        self._abort.create()
        if self.transient_store_pool_enabled():
            self._pool = TransientStorePool(cfg.transient_store_pool_size, cfg.mapped_file_size_commit_log,
                                            cfg.fast_fail_if_no_buffer_in_store_pool)
            self._pool.init()
        sync_warm = (cfg.flush_least_pages_when_warm_mapped_file * _PAGE
                     if cfg.flush_disk_type == FlushDiskType.SYNC_FLUSH else 0)
        # a flush writes what the puts wrote, not the large folio around it (MappedFile.write_page_by_page):
        # new files (the allocate service), and the rest of the file recovery left the writer in
        self._allocate = AllocateMappedFileService(cfg.allocate_wait_timeout, cfg.warm_mapped_file_enable,
                                                   pool=self._pool, clock=self.clock, sync_warm_every=sync_warm,
                                                   window=cfg.prefault_window_bytes)
        last = cl.queue.last()
        if last is not None:
            last.write_page_by_page(last.wrote_position)
        cl.queue.allocate = self._allocate
        self._services = [self._allocate]
        assert self._reput is not None and self._cq_store is not None
        commit: CommitRealTimeService | None = None
        if cfg.flush_disk_type == FlushDiskType.SYNC_FLUSH:
            # consume queues follow the flushed offset: nobody reads what a crash could take back
            gc = GroupCommitService(cl, self._checkpoint, clock=self.clock,
                                    after_flush=self._slave_dispatch if slave else self._reput.dispatch_until)
            self._flush_service = gc
            if self.schedule_message_service is not None:
                # its deliveries wait for no flush: the group commit is woken to make them durable soon
                self.schedule_message_service.flush_wakeup = gc.wakeup
            cl.after_put = self._after_put_sync
            cl.flush_wakeup = None
            cl.dispatcher = None
            self._inline_dispatch = False
        else:
            fs = FlushRealTimeService(cl, cfg, self._checkpoint, clock=self.clock)
            self._flush_service = fs
            cl.after_put = None
            if self._pool is not None:
                # puts land in pool buffers; queues follow what the commit service copied into the files
                commit = CommitRealTimeService(cl, cfg, fs, after_commit=self._reput.dispatch_until,
                                               clock=self.clock)
                cl.flush_wakeup = None if cfg.flush_commit_log_timed else commit.wakeup
                cl.wake_bytes = cfg.commit_commit_log_least_pages * _PAGE
                cl.dispatcher = None
                self._inline_dispatch = False
            else:
                cl.flush_wakeup = None if cfg.flush_commit_log_timed else fs.wakeup
                cl.wake_bytes = cfg.flush_commit_log_least_pages * _PAGE
                cl.dispatcher = self._dispatcher
                self._inline_dispatch = True
        if cfg.broker_role == BrokerRole.SYNC_MASTER:
            cl.after_put = self._after_put_replicated
        if slave:
            # a slave's log grows by transfers, never by puts: queues are built by walking what arrived
            cl.dispatcher = None
            self._inline_dispatch = False
        self._services.append(self._flush_service)
        if commit is not None:
            self._services.append(commit)        # stops before the flush service: its last commit gets flushed
        assert self._cq_store is not None
        self._clean = CleanService(cl, self._cq_store, self._index, cfg, self.running_flags, clock=self.clock,
                                   disk_usage=self.disk_usage)
        self._services.append(self._clean)
        self._services.append(FlushConsumeQueueService(self._cq_store, self._index, self._dispatcher, cfg,
                                                       self._checkpoint, clock=self.clock))
        if self.schedule_message_service is not None:
            self._services.append(self.schedule_message_service)   # stops first, then persists its offsets
        if slave:
            # a SYNC_FLUSH slave acknowledges only what it flushed; an ASYNC_FLUSH one on receipt (RocketMQ)
            durable_acks = cfg.flush_disk_type == FlushDiskType.SYNC_FLUSH
            self._ha_client = HAClient(cfg, cl.get_max_offset, self._append_replicated, cl.queue.mapped_file_size,
                                       self.get_commit_log_data, clock=self.clock,
                                       flush=self._flush_replicated if durable_acks else None)
            self._services.append(self._ha_client)                # stops first: nothing arrives after
        elif self._ha is not None:
            self._services.append(self._ha)
        for s in self._services:
            s.start()
        self._state = _STARTED
        self._update_writeable()
        log.info("store %s started (%s, %s)", self.root, cfg.flush_disk_type.name, cfg.broker_role.name)

    def _update_writeable(self) -> None:
        cl = self._commitlog
        if cl is not None:
            cl.writeable = (self._state == _STARTED and not self.read_only and self.running_flags.is_writeable()
                            and self.config.broker_role != BrokerRole.SLAVE)

    def shutdown(self) -> None:
        """Stop accepting puts, stop the services (they flush what is left), write the checkpoint, remove
        the abort file, unmap and unlock. Idempotent."""
        if self._state in (_NEW, _SHUTDOWN):
            self._state = _SHUTDOWN
            self._lock.release()
            return
        was_started = self._state == _STARTED
        self._state = _SHUTDOWN
        self._update_writeable()
        cl = self._commitlog
        for s in reversed(self._services):
            s.shutdown()
        self._services = []
        if cl is not None and not self.read_only:
            if was_started and self._ha_client is not None:
                self._trim_torn_tail()
            clean = True
            try:
                self._flush_all()
            except OSError:
                log.exception("%s: final flush failed; the abort file stays", self.root)
                clean = False
            if was_started and self._reput is not None and not self._inline_dispatch:
                self._reput.dispatch_until(self._dispatch_end())
            queues_synced = self._cq_store.flush(0) if self._cq_store is not None else True
            if self._index is not None:
                self._index.flush()
            crashpoint("shutdown.flushed")
            if self._checkpoint is not None:
                ts = cl.queue.store_timestamp
                if ts > 0:
                    self._checkpoint.physic_msg_timestamp = ts
                if self._dispatcher is not None and self._dispatcher.last_store_ts > 0 and queues_synced:
                    self._checkpoint.logics_msg_timestamp = self._dispatcher.last_store_ts
                self._checkpoint.flush()
            crashpoint("shutdown.checkpoint")
            if (was_started and clean and queues_synced and self.running_flags.is_writeable()
                    and self.dispatch_behind_bytes(True) == 0):
                self._abort.remove()
        self._close_files()
        if self._pool is not None:
            self._pool.destroy()
            self._pool = None
        self._lock.release()
        log.info("store %s shut down", self.root)

    def _close_files(self) -> None:
        if self._commitlog is not None:
            self._commitlog.dispatcher = None
            self._commitlog.queue.close()
        if self._cq_store is not None:
            self._cq_store.close()
        if self._index is not None:
            self._index.close()

    def _release_after_failure(self) -> None:
        if self._ha is not None:
            self._ha.shutdown()
            self._ha = None
        self._close_files()
        self._lock.release()
        self._state = _SHUTDOWN

    def destroy(self) -> None:
        """Shut down and delete every file of the store (the root folder too, if nothing else is in it)."""
        if self.read_only:
            raise StoreError("a read-only store cannot destroy files")
        was_new = self._state == _NEW
        self.shutdown()
        cfg = self.config
        if not os.path.isdir(cfg.store_path_root_dir):
            return
        lock = StoreLock(cfg.lock_path())
        lock.acquire()         # a store another writer holds is never wiped (StoreLockedError)
        if was_new:
            log.info("destroying the unopened store %s", cfg.store_path_root_dir)
        try:
            self._delete_files()
        finally:
            lock.release()
        try:
            os.unlink(cfg.lock_path())
        except FileNotFoundError:
            pass
        try:
            os.rmdir(cfg.store_path_root_dir)
        except OSError:
            pass

    def _delete_files(self) -> None:
        cfg = self.config
        folders = cfg.commit_log_paths() + [cfg.consume_queue_path(), cfg.index_path(), cfg.config_path()]
        for path in folders:
            shutil.rmtree(path, ignore_errors=True)
        for path in (cfg.checkpoint_path(), cfg.abort_path()):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        # a destroyed store must not come back, in part, after a power cut
        sync_dirs(os.path.dirname(os.path.abspath(p)) for p in folders + [cfg.checkpoint_path()])

    def _check_readable(self) -> CommitLog:
        if self._state in (_NEW, _SHUTDOWN) or self._commitlog is None:
            raise StoreClosedError("the store at %s is %s" % (self.root, self._state))
        return self._commitlog

    # ------------------------------------------------------------------------------------------
    # writing
    # ------------------------------------------------------------------------------------------

    def _bind_put_fast_path(self) -> None:
        """From now on the commit log answers every put itself (it refuses with SERVICE_NOT_AVAILABLE while
        the store is not started, read-only or shut down), so the instance's ``put_message`` and
        ``put_messages`` become its compiled methods: a put then costs one C call instead of a Python frame
        and a C call. A subclass that overrides them keeps its overrides."""
        cl = self._commitlog
        assert cl is not None
        if type(self).put_message is MessageStore.put_message:
            self.put_message = cl.put_message  # type: ignore[method-assign]
        if type(self).put_messages is MessageStore.put_messages:
            self.put_messages = cl.put_messages  # type: ignore[method-assign]

    def put_message(self, msg: Message) -> PutMessageResult:
        """Store one message; a refused put returns a status (``TypeError`` only for a non-``Message``)."""
        cl = self._commitlog
        if cl is None:
            return _not_available(msg)
        return cl.put_message(msg)

    def put_messages(self, batch: MessageBatch) -> PutMessageResult:
        """Store a ``MessageBatch``: consecutive queue offsets, one lock hold, never split across files."""
        cl = self._commitlog
        if cl is None:
            return _not_available(batch)
        return cl.put_messages(batch)

    def async_put_message(self, msg: Message) -> Future[PutMessageResult]:
        """Like ``put_message``, returning a ``Future``; with SYNC_FLUSH it completes once the message is on
        disk (the group commit service completes it)."""
        cl = self._commitlog
        if cl is None:
            return _done(_not_available(msg))
        return self._complete_async(cl.append_message(msg), msg)

    def async_put_messages(self, batch: MessageBatch) -> Future[PutMessageResult]:
        cl = self._commitlog
        if cl is None:
            return _done(_not_available(batch))
        return self._complete_async(cl.append_messages(batch), batch)

    def _complete_async(self, result: PutMessageResult, msg: Message | MessageBatch) -> Future[PutMessageResult]:
        fut = self._flushed_async(result, msg)
        if (self.config.broker_role is not BrokerRole.SYNC_MASTER or not result.is_ok() or not _waits(msg)):
            return fut
        out: Future[PutMessageResult] = Future()

        def replicate(flushed: Future[PutMessageResult]) -> None:
            # RocketMQ 4.x handleHA: the replica's verdict replaces a flush timeout, success keeps it
            r = flushed.result()
            try:
                ha = self._slave_ready(r)
                if ha is None:
                    out.set_result(r.with_status(PutMessageStatus.SLAVE_NOT_AVAILABLE))
                else:
                    ha.request(r.next_offset, r, self.config.slave_timeout / 1000).add_done_callback(
                        lambda done: out.set_result(done.result()))
            except Exception:
                log.exception("%s: waiting for a slave failed", self.root)
                if not out.done():
                    out.set_result(r.with_status(PutMessageStatus.FLUSH_SLAVE_TIMEOUT))

        fut.add_done_callback(replicate)
        return out

    def _flushed_async(self, result: PutMessageResult, msg: Message | MessageBatch) -> Future[PutMessageResult]:
        gc = self._flush_service
        if (result.status is not PutMessageStatus.PUT_OK or not isinstance(gc, GroupCommitService)
                or not _waits(msg)):
            if isinstance(gc, GroupCommitService):
                gc.wakeup()
            return _done(result)
        fut: Future[PutMessageResult] = Future()
        # the service completes it, or its expiry thread after sync_flush_timeout (FLUSH_DISK_TIMEOUT)
        gc.put_request(GroupCommitRequest(result.next_offset, fut, result, self.config.sync_flush_timeout / 1000))
        return fut

    def _after_put_sync(self, result: PutMessageResult, msg: Message | MessageBatch) -> PutMessageResult:
        gc = self._flush_service
        assert isinstance(gc, GroupCommitService)
        if not _waits(msg):
            gc.wakeup()
            return result
        if not gc.sync(result.next_offset, self.config.sync_flush_timeout / 1000):
            log.warning("%s: the flush to offset %d failed or did not finish within %d ms", self.root,
                        result.next_offset, self.config.sync_flush_timeout)
            return result.with_status(PutMessageStatus.FLUSH_DISK_TIMEOUT)
        return result

    def _after_put_replicated(self, result: PutMessageResult, msg: Message | MessageBatch) -> PutMessageResult:
        """SYNC_MASTER (RocketMQ ``handleHA``): after the flush (SYNC_FLUSH), wait for a slave to hold the
        record; the message stays stored whatever the wait says."""
        if self.config.flush_disk_type == FlushDiskType.SYNC_FLUSH:
            # then the slave, whatever the flush said: its verdict replaces a flush timeout (4.x handleHA)
            result = self._after_put_sync(result, msg)
        if not _waits(msg):
            return result
        ha = self._slave_ready(result)
        if ha is None:
            return result.with_status(PutMessageStatus.SLAVE_NOT_AVAILABLE)
        if not ha.wait_for_slave(result.next_offset, self.config.slave_timeout / 1000):
            log.warning("%s: no slave acknowledged offset %d within %d ms", self.root, result.next_offset,
                        self.config.slave_timeout)
            return result.with_status(PutMessageStatus.FLUSH_SLAVE_TIMEOUT)
        return result

    def _slave_ready(self, result: PutMessageResult) -> HAService | None:
        """The HA service when a slave can take ``result``'s record (RocketMQ ``isSlaveOK``: one is connected
        and less than ``ha_slave_fallbehind_max`` behind); None means ``SLAVE_NOT_AVAILABLE``."""
        ha = self._ha
        return ha if ha is not None and ha.is_slave_ok(result.next_offset) else None

    @property
    def ha_port(self) -> int | None:
        """The port the HA listener is bound to (with ``ha_listen_port=0``, the one the OS chose); None
        when the store does not listen (no ``ha_listen_port``, a slave, or not started)."""
        ha = self._ha
        return ha.port if ha is not None and self._state == _STARTED else None

    def _append_replicated(self, offset: int, data: memoryview) -> bool:
        """Slave: RocketMQ ``appendToCommitLog``: put a transfer's bytes at ``offset``, the end of this
        commit log (a new file where the last is full, or where the log is empty), then build the queues and
        index of the whole records that arrived (under SYNC_FLUSH, the group commit does that after it flushed).
        False if the bytes do not belong at the end of this log or do not fit its file."""
        cl = self._commitlog
        if cl is None or self._state == _SHUTDOWN:
            raise StoreClosedError("the store at %s is %s" % (self.root, self._state))
        queue = cl.queue
        size = queue.mapped_file_size
        files = queue.files
        if not any(f.wrote_position for f in files):
            # an empty log (perhaps a lone file a trim emptied) starts wherever its master's data does, at a file
            # boundary: the master sends an empty slave its last file
            if offset % size:
                log.error("%s: an empty slave cannot start at offset %d, inside a commit-log file of %d bytes",
                          self.root, offset, size)
                return False
            while files and files[-1].file_from_offset != offset:
                queue.delete_last_file()
                files = queue.files
        mf = queue.get_last_mapped_file(offset, True)
        if mf is None:
            return False
        if mf.file_from_offset + mf.wrote_position != offset or not mf.append_message(data):
            log.error("%s: a transfer of %d bytes at offset %d does not fit the end of %s (%d bytes written)",
                      self.root, len(data), offset, mf.file_name, mf.wrote_position)
            return False
        if self.config.flush_disk_type != FlushDiskType.SYNC_FLUSH and self._reput is not None:
            self._reput.dispatch_until(offset + len(data))
            ts = self._dispatcher.last_store_ts if self._dispatcher is not None else 0
            if ts > mf.store_timestamp:
                mf.store_timestamp = ts      # the checkpoint's physicMsgTimestamp, as a master's puts set it
        return True

    def _flush_replicated(self) -> None:
        """SYNC_FLUSH slave, before it reports an offset to its master: flush the commit log to its end, so
        that what it acknowledges survives a power cut (RocketMQ's slave reports on receipt, as an
        ASYNC_FLUSH slave here does). Raises OSError when the
        log cannot be flushed, which drops the connection without a report."""
        cl = self._commitlog
        if cl is None or self._state == _SHUTDOWN:
            raise StoreClosedError("the store at %s is %s" % (self.root, self._state))
        queue = cl.queue
        end = queue.get_max_offset()
        # the flush itself, not the group commit's sync: that would also build the queues and index on this
        # thread before the report (the group commit's next pass dispatches what this flushed)
        for _ in range(len(queue.files) + 1):
            if queue.flushed_where >= end or queue.flush(0):
                break
        if queue.flushed_where < end:
            raise OSError("the slave's commit log is flushed to %d, not to its end %d" % (queue.flushed_where, end))

    def _slave_dispatch(self, flushed: int) -> int:
        """A SYNC_FLUSH slave's group commit, after each flush: queues and index follow the flushed records,
        and the checkpoint's physicMsgTimestamp their store time (a master's puts set it; a slave has none)."""
        assert self._reput is not None and self._checkpoint is not None
        reached = self._reput.dispatch_until(flushed)
        ts = self._dispatcher.last_store_ts if self._dispatcher is not None else 0
        if ts > self._checkpoint.physic_msg_timestamp:
            self._checkpoint.physic_msg_timestamp = ts
        return reached

    def _trim_torn_tail(self) -> None:
        """Slave shutdown: a transfer may have ended inside a record; cut that record off so the log ends where
        a master's would (the master sends it again on the next connection). Only a record that runs past the
        end of the last file's data is cut: anything else that stops the walk is left for recovery to judge."""
        cl, reput = self._commitlog, self._reput
        if cl is None or reput is None:
            return
        end = cl.get_max_offset()
        reached = reput.dispatch_until(end)
        last = cl.queue.last()
        if reached >= end or last is None or reached < last.file_from_offset:
            if reached < end:
                log.error("%s: the slave's records stop being readable at offset %d (its log ends at %d); left "
                          "for recovery", self.root, reached, end)
            return
        pos = reached - last.file_from_offset
        stop, reason, _, _ = scan_file(last, pos, False, last.wrote_position)
        if stop == pos and reason == RECORD_SHORT:
            log.info("%s: cutting the %d bytes of a partly received record at offset %d", self.root,
                     end - reached, reached)
            cl.queue.truncate_dirty_files(reached)
        else:
            log.error("%s: the record at offset %d is damaged (%s); left for recovery", self.root, reached,
                      REASONS.get(reason, reason))

    def flush(self) -> int:
        """Force everything written to disk; returns the flushed commit-log offset."""
        self._check_readable()
        if self.read_only:
            return self.get_max_phy_offset()
        flushed = self._flush_all()
        if self._state == _STARTED and self._reput is not None and not self._inline_dispatch:
            self._reput.dispatch_until(self._dispatch_end())
        return flushed

    def transient_store_pool_enabled(self) -> bool:
        """RocketMQ 4.8's ``isTransientStorePoolEnable``: the pool is used with ASYNC_FLUSH on a master only."""
        cfg = self.config
        return (cfg.transient_store_pool_enable and cfg.flush_disk_type == FlushDiskType.ASYNC_FLUSH
                and cfg.broker_role != BrokerRole.SLAVE and not self.read_only)

    def _dispatch_end(self) -> int:
        """Where dispatch may go: the flushed offset with SYNC_FLUSH, the committed end with the pool."""
        assert self._commitlog is not None
        q = self._commitlog.queue
        if self._ha_client is not None and self.config.flush_disk_type != FlushDiskType.SYNC_FLUSH:
            return q.get_max_offset()        # an ASYNC_FLUSH slave dispatches what arrived, as a master does
        return q.committed_where if self._pool is not None else q.flushed_where

    def _flush_all(self) -> int:
        cl = self._commitlog
        assert cl is not None
        queue = cl.queue
        for _ in range(len(queue.files) + 2):
            committed_still = queue.commit(0)
            if queue.flush(0) and committed_still:
                break
        return queue.flushed_where

    # ------------------------------------------------------------------------------------------
    # reading the commit log
    # ------------------------------------------------------------------------------------------

    def look_message_by_offset(self, commit_log_offset: int) -> MessageExt | None:
        """The message stored at ``commit_log_offset``, or None if no message starts there."""
        cl = self._check_readable()
        mf = cl.queue.find_mapped_file_by_offset(commit_log_offset)
        if mf is None or (self.read_only and commit_log_offset >= cl.get_max_offset()):
            if self.read_only:
                self.refresh()
                mf = cl.queue.find_mapped_file_by_offset(commit_log_offset)
            if mf is None:
                return None
        return read_message(mf, commit_log_offset - mf.file_from_offset, self.config.check_crc_on_read, True)

    def view_message_by_id(self, msg_id: str) -> MessageExt | None:
        """The message with this offset message id (store host + port + commit-log offset, hex)."""
        if not isinstance(msg_id, str):
            raise TypeError("msg_id must be str")
        if len(msg_id) not in (32, 56):
            raise ValueError("an offset message id has 32 (IPv4) or 56 (IPv6) hex digits, got %r" % msg_id)
        try:
            raw = bytes.fromhex(msg_id)
        except ValueError:
            raise ValueError("not a hex message id: %r" % msg_id) from None
        return self.look_message_by_offset(int.from_bytes(raw[-8:], "big", signed=True))

    def get_min_phy_offset(self) -> int:
        return self._check_readable().get_min_offset()

    def get_max_phy_offset(self) -> int:
        cl = self._check_readable()
        if self.read_only:
            self.refresh()
        return cl.get_max_offset()

    def get_commit_log_data(self, offset: int) -> SelectMappedBufferResult | None:
        """A read-only view of the commit log from ``offset`` to the end of written data in its file; it
        holds the file until ``release()`` or the end of its ``with`` block."""
        cl = self._check_readable()
        mf = cl.queue.find_mapped_file_by_offset(offset, offset == 0)
        if mf is None or offset - mf.file_from_offset >= mf.read_position:
            return None
        return mf.select_mapped_buffer(offset - mf.file_from_offset)

    def get_topic_queue_table(self) -> dict[tuple[str, int], int]:
        """``{(topic, queue_id): next queue offset}`` (a read-only store follows the writer first)."""
        cl = self._check_readable()
        if self.read_only:
            self.refresh()
        return cl.get_topic_queue_table()

    def dispatch_behind_bytes(self, _internal: bool = False) -> int:
        """How far the consume queues lag the commit log, in bytes: 0 with inline dispatch (ASYNC_FLUSH);
        with SYNC_FLUSH, the flushed bytes not dispatched yet."""
        if not _internal:
            self._check_readable()
        cl, reput = self._commitlog, self._reput
        if cl is None or reput is None or self._inline_dispatch or self.read_only:
            return 0
        return max(0, self._dispatch_end() - reput.reput_from)

    # ------------------------------------------------------------------------------------------
    # reading by queue
    # ------------------------------------------------------------------------------------------

    def _queue(self, topic: str, queue_id: int, need: int = -1, fresh: bool = False) -> ConsumeQueue | None:
        """The consume queue of (topic, queue_id); a read-only store first follows the writer (that queue and
        the commit log) if the queue is unknown, ``fresh`` is asked for, or ``need`` lies beyond what it has
        seen."""
        self._check_readable()
        if not isinstance(topic, str):
            raise TypeError("topic must be str, got %s" % type(topic).__name__)
        if not isinstance(queue_id, int) or isinstance(queue_id, bool):
            raise TypeError("queue_id must be int, got %s" % type(queue_id).__name__)
        assert self._cq_store is not None
        cq = self._cq_store.find(topic, queue_id)
        if self.read_only and (cq is None or fresh or need >= cq.get_max_offset_in_queue()):
            cq = self._refresh_queue(topic, queue_id)
        return cq

    def _refresh_queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        """Read-only: the queue first, then the commit log. The writer publishes a unit only after its record
        (and every record before it) is whole, so the commit log scanned afterwards covers every unit seen;
        the other order lets units written between the two scans point past the commit log in view."""
        cl, cqs = self._commitlog, self._cq_store
        assert cl is not None and cqs is not None
        with self._refresh_lock:
            cq = cqs.refresh_queue_read_only(topic, queue_id, cl.get_min_offset())
            cl.refresh_read_only()
            if cq is not None:
                cell = cl.get_cell(topic, queue_id)
                cell.consume_queue = cq
                cell.next_offset = cq.get_max_offset_in_queue()
        return cq

    def get_message(self, group: str, topic: str, queue_id: int, offset: int, max_msg_nums: int = 32,
                    message_filter: MessageFilter | TagFilter | str | None = None) -> GetMessageResult | None:
        """Up to ``max_msg_nums`` messages of (topic, queue_id) from queue offset ``offset``, with RocketMQ's
        statuses and next-offset rules (FORMAT.md §11.1). None when the store is not readable."""
        if not isinstance(offset, int) or not isinstance(max_msg_nums, int):
            raise TypeError("offset and max_msg_nums must be int")
        cq = self._queue(topic, queue_id, offset)
        if not self.running_flags.is_readable():
            log.warning("%s: get_message while the store is not readable", self.root)
            return None
        tag_codes = tag_names = filt = None
        if message_filter is not None:
            if isinstance(message_filter, str):
                message_filter = TagFilter(message_filter)
            if isinstance(message_filter, TagFilter):
                if not message_filter.match_all:
                    tag_codes, tag_names = message_filter.codes, message_filter.tags
            elif not (hasattr(message_filter, "is_matched_by_consume_queue")
                      and hasattr(message_filter, "is_matched_by_commit_log")):
                raise TypeError("message_filter must be None, a TagFilter, or have is_matched_by_consume_queue "
                                "and is_matched_by_commit_log")
            else:
                filt = message_filter
        if cq is None:
            return GetMessageResult(GetMessageStatus.NO_MESSAGE_IN_QUEUE, self._next(offset, 0), 0, 0)
        queue = self._commitlog.queue                       # type: ignore[union-attr]
        slave = self.config.broker_role is _SLAVE
        # the decision table, the scan and the result, in C (_cq.read_queue)
        # a writer's units point into what was written: one past it is damage (``queue``); a reader's view
        # may lag its queue's (another thread refreshed the queue meanwhile): it catches the commit log up
        # and looks again, under the refresh lock so that no refresh runs between the two
        r = read_queue(cq, offset, max_msg_nums, queue.files, queue.mapped_file_size, self._limits, tag_codes,
                       tag_names, filt, _GET_STATUS, slave, None if self.read_only else queue)
        if self.read_only and r.status is _NO_MATCHED and r.next_begin_offset == offset:
            self._refresh_queue(topic, queue_id)
            with self._refresh_lock:
                r = read_queue(cq, offset, max_msg_nums, queue.files, queue.mapped_file_size, self._limits,
                               tag_codes, tag_names, filt, _GET_STATUS, slave, queue)
        return r

    def _next(self, old: int, new: int) -> int:
        """RocketMQ ``nextOffsetCorrection``: a slave keeps the requested offset."""
        return old if self.config.broker_role == BrokerRole.SLAVE else new

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        """Number of units ever written to the queue (the next offset to consume from its end); 0 if unknown."""
        cq = self._queue(topic, queue_id, fresh=True)
        return 0 if cq is None else cq.get_max_offset_in_queue()

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self._queue(topic, queue_id, fresh=True)
        return 0 if cq is None else cq.get_min_offset_in_queue()

    def get_commit_log_offset_in_queue(self, topic: str, queue_id: int, consume_queue_offset: int) -> int:
        """The commit-log offset of that queue offset's message; 0 if there is none."""
        cq = self._queue(topic, queue_id, consume_queue_offset)
        u = None if cq is None else cq.unit(consume_queue_offset)
        return 0 if u is None else u[0]

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp: int, boundary: str = "lower") -> int:
        """5.x: ``"lower"`` the first offset stored at or after ``timestamp`` (the max offset if none is);
        ``"upper"`` the last offset stored at or before it (0 if none is). 0 for an unknown queue."""
        if boundary not in ("lower", "upper"):
            raise ValueError("boundary must be 'lower' or 'upper', got %r" % (boundary,))
        cq = self._queue(topic, queue_id, fresh=True)
        if cq is None:
            return 0
        queue = self._commitlog.queue                       # type: ignore[union-attr]
        return queue_offset_by_time(cq, queue.files, queue.mapped_file_size, timestamp, boundary == "lower")

    def get_earliest_message_time(self, topic: str | None = None, queue_id: int | None = None) -> int:
        """Store time of the commit log's first message, or (with a topic and queue) of the queue's first
        message; -1 when there is none."""
        cl = self._check_readable()
        if topic is None:
            low = cl.get_min_offset()
            return -1 if low < 0 else cl.pickup_store_timestamp(low)
        if queue_id is None:
            raise TypeError("get_earliest_message_time needs a queue_id with a topic")
        cq = self._queue(topic, queue_id, fresh=True)
        if cq is None:
            return -1
        return self.get_message_store_timestamp(topic, queue_id, cq.get_min_offset_in_queue())

    def get_message_store_timestamp(self, topic: str, queue_id: int, consume_queue_offset: int) -> int:
        """Store time of the message at that queue offset; -1 if there is none."""
        cq = self._queue(topic, queue_id, consume_queue_offset)
        if cq is None or consume_queue_offset < cq.get_min_offset_in_queue():
            return -1
        u = cq.unit(consume_queue_offset)
        if u is None:
            return -1
        cl = self._commitlog
        assert cl is not None
        return int(pickup_store_timestamp(cl.queue.files, cl.queue.mapped_file_size, u[0], u[1]))

    def get_message_total_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self._queue(topic, queue_id, fresh=True)
        return 0 if cq is None else cq.get_max_offset_in_queue() - cq.get_min_offset_in_queue()

    def query_message(self, topic: str, key: str, max_num: int = 32, begin: int = 0,
                      end: int = 2**63 - 1) -> QueryMessageResult:
        """Messages of ``topic`` whose keys (or ``UNIQ_KEY``) include ``key``, stored in [begin, end]."""
        cl = self._check_readable()
        if not isinstance(topic, str) or not isinstance(key, str):
            raise TypeError("topic and key must be str")
        if self._index is None:
            return QueryMessageResult([], 0, 0)
        if self.read_only:
            self.refresh()
        found: list[MessageExt] = []
        seen: set[int] = set()
        last_ts = last_phy = 0
        hi = end
        for _ in range(3):                       # RocketMQ queries up to three rounds
            r = self._index.query_offset(topic, key, max_num, begin, hi)
            last_ts, last_phy = r.index_last_update_timestamp, r.index_last_update_phyoffset
            for off in sorted(r.phy_offsets):
                if off in seen:
                    continue
                seen.add(off)
                m = cl.look_message_by_offset(off)
                # the index compares 32-bit hashes only: keep real matches
                if m is not None and m.topic == topic and (key in m.keys or m.uniq_key == key):
                    found.append(m)
            if found or not r.phy_offsets:
                break
            hi = min(cl.pickup_store_timestamp(min(r.phy_offsets)), hi) - 1
            if hi < begin:
                break
        found.sort(key=lambda m: m.commit_log_offset)
        return QueryMessageResult(found[:max_num], last_ts, last_phy)

    # ------------------------------------------------------------------------------------------
    # operating
    # ------------------------------------------------------------------------------------------

    def execute_delete_files_manually(self) -> None:
        """Make the next cleaning passes (20, as RocketMQ) delete expired commit-log files at any hour."""
        self._check_writable_service().commit_log.execute_delete_files_manually()

    def clean_files(self) -> tuple[int, int]:
        """Run one cleaning pass now (pystore addition; the service runs one every
        ``clean_resource_interval``). Returns (commit-log files deleted, consume-queue and index files deleted)."""
        return self._check_writable_service().run_once()

    def clean_expired_consumer_queue(self) -> list[tuple[str, int]]:
        """Destroy the consume queues whose messages are all below the commit log's min offset; returns the
        (topic, queue id)s removed."""
        self._check_writable_service()
        assert self._commitlog is not None and self._cq_store is not None
        return clean_expired_consumer_queue(self._commitlog, self._cq_store)

    def clean_unused_topic(self, keep: set[str]) -> list[tuple[str, int]]:
        """Destroy the consume queues of every topic not in ``keep`` (system topics stay); returns the
        (topic, queue id)s removed. The commit log is untouched."""
        self._check_writable_service()
        assert self._commitlog is not None and self._cq_store is not None
        return clean_unused_topic(self._commitlog, self._cq_store, keep)

    def _check_writable_service(self) -> CleanService:
        if self.read_only:
            raise StoreError("%s is open read-only: cleaning writes" % self.root)
        if self._state != _STARTED or self._clean is None:
            raise StoreClosedError("the store at %s is %s, not started" % (self.root, self._state))
        return self._clean

    def is_os_page_cache_busy(self) -> bool:
        cl = self._commitlog
        return bool(cl is not None and cl.is_os_page_cache_busy())

    def refresh(self) -> None:
        """Read-only stores: pick up what the writer appended since (new files, the new end of data)."""
        if not self.read_only or self._commitlog is None:
            return
        with self._refresh_lock:
            # queues before the commit log, the index before the commit log: every unit and index entry seen
            # then points at a record in view (see _refresh_queue)
            if self._cq_store is not None:
                self._cq_store.refresh_read_only(self._commitlog.get_min_offset())
            if self._index is not None:
                self._index.refresh_read_only()
            self._commitlog.refresh_read_only()
            if self._cq_store is not None:
                for cq in self._cq_store.queues():
                    cell = self._commitlog.get_cell(cq.topic, cq.queue_id)
                    cell.consume_queue = cq
                    cell.next_offset = cq.get_max_offset_in_queue()

    def get_runtime_info(self) -> dict[str, str]:
        """Runtime figures under RocketMQ's key names where they apply."""
        cl = self._check_readable()
        now = self.clock()
        up = max(0, now - self.boot_timestamp) // 1000
        times = max(1, cl.put_times_total)
        info = {
            "bootTimestamp": str(self.boot_timestamp),
            "runtime": "[ %d days, %d hours, %d minutes, %d seconds ]" % (
                up // 86400, up // 3600 % 24, up // 60 % 60, up % 60),
            "putMessageTimesTotal": str(times),
            "putMessageSizeTotal": str(cl.put_size_total),
            "putMessageAverageSize": "%.1f" % (cl.put_size_total / times),
            "putMessageEntireTimeMax": str(cl.put_max_ns // 1_000_000),
            "putMessageFailedTimes": str(cl.put_failed_times),
            "putMessageDistributeTime": " ".join(
                "[%s]:%d" % (k, v) for k, v in zip(BUCKET_NAMES, cl.put_latency_buckets().values())),
            "commitLogMinOffset": str(cl.get_min_offset()),
            "commitLogMaxOffset": str(cl.get_max_offset()),
            "commitLogDiskRatio": "%.4f" % self._disk_ratio(self.config.commit_log_paths()[0]),
            "dispatchBehindBytes": str(self.dispatch_behind_bytes()),
            "pageCacheLockTimeMills": str(cl.lock_time_mills()),
        }
        return info

    def _disk_ratio(self, path: str) -> float:
        return disk_used_ratio(self.disk_usage, path)

    def __repr__(self) -> str:
        return "MessageStore(%r, %s%s)" % (self.root, self._state, ", read-only" if self.read_only else "")


def _plausible_geometry(queue: MappedFileQueue, size: int) -> bool:
    """May the size the existing commit-log files share be the store's file size? It must be whole pages and
    put every file name on its grid; a single file must not be mistaken for the geometry when it was cut
    short (it is then refused, naming the file)."""
    if size % 4096:
        return False
    return all(int(os.path.basename(p)) % size == 0 for p in queue.list_file_paths())


def _physical_memory() -> int:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return 24 << 30          # RocketMQ's fallback


def _done(result: PutMessageResult) -> Future[PutMessageResult]:
    f: Future[PutMessageResult] = Future()
    f.set_result(result)
    return f


def _waits(msg: Message | MessageBatch) -> bool:
    """RocketMQ ``isWaitStoreMsgOK``: a batch waits unless its first message says ``WAIT=false``."""
    return bool(msg.wait_store_msg_ok)

