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

from pystore._commitlog import BUCKET_NAMES, read_message
from pystore._mapped_file import SelectMappedBufferResult
from pystore._message import Message, MessageBatch, MessageExt
from pystore._results import PutMessageResult
from pystore.allocate import AllocateMappedFileService
from pystore.checkpoint import AbortFile, StoreCheckpoint, StoreLock
from pystore.commitlog import CommitLog
from pystore.config import BrokerRole, FlushDiskType, StoreConfig
from pystore.crashpoint import crashpoint
from pystore.errors import StoreClosedError, StoreError
from pystore.flush import FlushRealTimeService, GroupCommitRequest, GroupCommitService
from pystore.mapped_file_queue import MappedFileQueue
from pystore.recovery import RecoveryResult, recover_commit_log
from pystore.running_flags import RunningFlags
from pystore.service import real_clock
from pystore.status import PutMessageStatus

__all__ = ["MessageStore"]

log = logging.getLogger(__name__)

_NEW, _LOADED, _STARTED, _SHUTDOWN = "new", "loaded", "started", "shutdown"


def _not_available(msg: object) -> PutMessageResult:
    if not isinstance(msg, (Message, MessageBatch)):
        raise TypeError("expected a Message or MessageBatch, got %s" % type(msg).__name__)
    return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE)


class MessageStore:
    """An embedded RocketMQ-format message store in one folder (see the module docstring)."""

    def __init__(self, config: StoreConfig | None = None, *, clock: Callable[[], int] | None = None,
                 disk_usage: Callable[[str], float] | None = None) -> None:
        if config is not None and not isinstance(config, StoreConfig):
            raise TypeError("config must be a StoreConfig, got %s" % type(config).__name__)
        self.config = config if config is not None else StoreConfig()
        self.clock = clock or real_clock
        self.disk_usage = disk_usage
        self.read_only = self.config.read_only
        self.running_flags = RunningFlags()
        self.running_flags.add_listener(self._update_writeable)
        self._state = _NEW
        self._lock = StoreLock(self.config.lock_path())
        self._abort = AbortFile(self.config.abort_path())
        self._checkpoint: StoreCheckpoint | None = None
        self._commitlog: CommitLog | None = None
        self._allocate: AllocateMappedFileService | None = None
        self._flush_service: FlushRealTimeService | GroupCommitService | None = None
        self._services: list[Any] = []
        self._refresh_lock = threading.Lock()
        self.last_exit_ok = True
        self.recovery: RecoveryResult | None = None
        self.boot_timestamp = self.clock()

    # ------------------------------------------------------------------------------------------
    # lifecycle
    # ------------------------------------------------------------------------------------------

    @classmethod
    def open(cls, root: str | os.PathLike[str], read_only: bool = False, **config_overrides: Any) -> MessageStore:
        """A loaded and started store at ``root``; ``with MessageStore.open(root) as store:`` shuts it down."""
        clock = config_overrides.pop("clock", None)
        disk_usage = config_overrides.pop("disk_usage", None)
        config = StoreConfig(store_path_root_dir=os.fspath(root), read_only=read_only, **config_overrides)
        store = cls(config, clock=clock, disk_usage=disk_usage)
        try:
            if not store.load():
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
            os.makedirs(cfg.store_path_root_dir, exist_ok=True)
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
            (log.info if self.read_only else log.warning)(
                "%s: commit-log files are %d bytes, not the configured %d; the store keeps its geometry",
                        cfg.store_path_root_dir, existing, cfg.mapped_file_size_commit_log)
            queue.mapped_file_size = existing
        if not queue.load():
            return False
        self._checkpoint = StoreCheckpoint(cfg.checkpoint_path(), read_only=self.read_only)
        self._commitlog = CommitLog(cfg, queue, clock=None)
        abnormal = not self.last_exit_ok and not self.read_only
        if abnormal:
            log.warning("%s: the last writer did not shut down cleanly; abnormal recovery", cfg.store_path_root_dir)
        self.recovery = recover_commit_log(self._commitlog, self._checkpoint, cfg, abnormal, self.read_only)
        self._commitlog.attach_last()
        self._state = _LOADED
        return True

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
        cfg = self.config
        assert self._commitlog is not None and self._checkpoint is not None
        cl = self._commitlog
        self._lock.acquire()
        self._abort.create()
        self._allocate = AllocateMappedFileService(cfg.allocate_wait_timeout, cfg.warm_mapped_file_enable,
                                                   clock=self.clock)
        cl.queue.allocate = self._allocate
        self._services = [self._allocate]
        if cfg.flush_disk_type == FlushDiskType.SYNC_FLUSH:
            gc = GroupCommitService(cl, self._checkpoint, clock=self.clock)
            self._flush_service = gc
            cl.after_put = self._after_put_sync
            cl.flush_wakeup = None
        else:
            fs = FlushRealTimeService(cl, cfg, self._checkpoint, clock=self.clock)
            self._flush_service = fs
            cl.after_put = None
            cl.flush_wakeup = None if cfg.flush_commit_log_timed else fs.wakeup
        self._services.append(self._flush_service)
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
            clean = True
            try:
                self._flush_all()
            except OSError:
                log.exception("%s: final flush failed; the abort file stays", self.root)
                clean = False
            crashpoint("shutdown.flushed")
            if self._checkpoint is not None:
                ts = cl.queue.store_timestamp
                if ts > 0:
                    self._checkpoint.physic_msg_timestamp = ts
                    self._checkpoint.logics_msg_timestamp = max(self._checkpoint.logics_msg_timestamp, ts)
                self._checkpoint.flush()
            crashpoint("shutdown.checkpoint")
            if was_started and clean and self.running_flags.is_writeable():
                self._abort.remove()
        if cl is not None:
            cl.queue.close()
        self._lock.release()
        log.info("store %s shut down", self.root)

    def _release_after_failure(self) -> None:
        if self._commitlog is not None:
            self._commitlog.queue.close()
        self._lock.release()
        self._state = _SHUTDOWN

    def destroy(self) -> None:
        """Shut down and delete every file of the store (the root folder too, if nothing else is in it)."""
        self.shutdown()
        if self.read_only:
            raise StoreError("a read-only store cannot destroy files")
        cfg = self.config
        for path in cfg.commit_log_paths() + [cfg.consume_queue_path(), cfg.index_path(), cfg.config_path()]:
            shutil.rmtree(path, ignore_errors=True)
        for path in (cfg.checkpoint_path(), cfg.abort_path(), cfg.lock_path()):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        try:
            os.rmdir(cfg.store_path_root_dir)
        except OSError:
            pass

    def _check_readable(self) -> CommitLog:
        if self._state in (_NEW, _SHUTDOWN) or self._commitlog is None:
            raise StoreClosedError("the store at %s is %s" % (self.root, self._state))
        return self._commitlog

    # ------------------------------------------------------------------------------------------
    # writing
    # ------------------------------------------------------------------------------------------

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
        gc = self._flush_service
        if (result.status is not PutMessageStatus.PUT_OK or not isinstance(gc, GroupCommitService)
                or not _waits(msg)):
            if isinstance(gc, GroupCommitService):
                gc.wakeup()
            return _done(result)
        fut: Future[PutMessageResult] = Future()
        req = GroupCommitRequest(result.next_offset, fut, result)
        gc.put_request(req)
        timeout = self.config.sync_flush_timeout / 1000

        def _expire() -> None:
            if not fut.done():
                req.complete(False)

        t = threading.Timer(timeout, _expire)
        t.daemon = True
        t.start()
        fut.add_done_callback(lambda _f: t.cancel())
        return fut

    def _after_put_sync(self, result: PutMessageResult, msg: Message | MessageBatch) -> PutMessageResult:
        gc = self._flush_service
        assert isinstance(gc, GroupCommitService)
        if not _waits(msg):
            gc.wakeup()
            return result
        req = GroupCommitRequest(result.next_offset)
        gc.put_request(req)
        if not req.wait(self.config.sync_flush_timeout / 1000):
            log.warning("%s: flush to offset %d did not finish within %d ms", self.root, result.next_offset,
                        self.config.sync_flush_timeout)
            return result.with_status(PutMessageStatus.FLUSH_DISK_TIMEOUT)
        return result

    def flush(self) -> int:
        """Force everything written to disk; returns the flushed commit-log offset."""
        self._check_readable()
        if self.read_only:
            return self.get_max_phy_offset()
        return self._flush_all()

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
        return read_message(mf, commit_log_offset - mf.file_from_offset)

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
        if mf is None:
            return None
        return mf.select_mapped_buffer(offset - mf.file_from_offset)

    def get_topic_queue_table(self) -> dict[tuple[str, int], int]:
        """``{(topic, queue_id): next queue offset}``."""
        return self._check_readable().get_topic_queue_table()

    def dispatch_behind_bytes(self) -> int:
        """How far the consume queues lag the commit log, in bytes (0: dispatch is inline)."""
        self._check_readable()
        return 0

    # ------------------------------------------------------------------------------------------
    # operating
    # ------------------------------------------------------------------------------------------

    def is_os_page_cache_busy(self) -> bool:
        cl = self._commitlog
        return bool(cl is not None and cl.is_os_page_cache_busy())

    def refresh(self) -> None:
        """Read-only stores: pick up what the writer appended since (new files, the new end of data)."""
        if not self.read_only or self._commitlog is None:
            return
        with self._refresh_lock:
            self._commitlog.refresh_read_only()

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
        if self.disk_usage is not None:
            return float(self.disk_usage(path))
        try:
            st = os.statvfs(path)
        except OSError:
            return -1.0
        total = st.f_blocks * st.f_frsize
        return (total - st.f_bavail * st.f_frsize) / total if total else -1.0

    def __repr__(self) -> str:
        return "MessageStore(%r, %s%s)" % (self.root, self._state, ", read-only" if self.read_only else "")


def _done(result: PutMessageResult) -> Future[PutMessageResult]:
    f: Future[PutMessageResult] = Future()
    f.set_result(result)
    return f


def _waits(msg: Message | MessageBatch) -> bool:
    """RocketMQ ``isWaitStoreMsgOK``: a batch waits unless its first message says ``WAIT=false``."""
    if isinstance(msg, MessageBatch):
        return bool(msg.messages[0].wait_store_msg_ok)
    return bool(msg.wait_store_msg_ok)

