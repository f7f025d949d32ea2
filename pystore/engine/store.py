"""``MessageStore``: the facade users hold (RocketMQ ``DefaultMessageStore``, docs/api.md "The store").

It owns the lifecycle and hands every call to the part that does it; the parts are opened by
``pystore.engine.parts`` and a writer's services built by ``pystore.engine.wiring``, the Python reads are
``pystore.read.store_reads``', a put's waits are ``pystore.engine.put_waits``', replication is
``pystore.ha.master`` and ``pystore.ha.slave``'s; loops over bytes are in the Cython modules::

    MessageStore(config)      nothing touched on disk
      .load()                 lock the folder (writers), map files, recover        -> True/False
      .start()                abort file, services (allocate, flush ...), accept puts
      .shutdown()             stop accepting, stop services (they flush), checkpoint, remove abort, unlock
      .destroy()              shutdown and delete every file of the store

``MessageStore.open(root, read_only=False, **overrides)`` does load + start and is a context manager.
A read-only store takes no lock, writes nothing and refuses puts (``SERVICE_NOT_AVAILABLE``); it follows a
live writer by re-reading the folder when asked for data beyond what it has seen.

One put and its read: ``put_message`` calls the commit log's compiled ``put_message`` -> ``_commitlog`` appends,
dispatches inline or leaves it to a service (``wiring``), runs ``put_waits`` -> disk by ``flush``; ``get_message``
calls ``_queue_reader.QueueReader``'s, which hands what it does not serve to ``store_reads.StoreReads``: both run
``_read.read_queue`` over the consume queue's units and their records. Several writer processes:
``pystore.engine.shared_writers``.

Time and disk are injected: ``MessageStore(config, clock=..., disk_usage=...)`` hands its clock to every
policy that depends on the time and its ``disk_usage`` to every decision on disk usage (``pystore.system.service``
states the rule); the parts and services get these from ``pystore.engine.parts`` and ``pystore.engine.wiring``,
never the store.

Thread-safety: puts and reads may come from any number of threads; lifecycle calls (load, start,
shutdown, destroy) must not race each other.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from pystore.columns import api as columns
from pystore.columns.api import get_columns as _get_columns
from pystore.config import BrokerRole, StoreConfig
from pystore.consumer.offsets import ConsumerOffsets
from pystore.engine.checkpoint import AbortFile, StoreLock
from pystore.engine.parts import delete_store, open_parts
from pystore.engine.put_waits import NOT_LOADED, NotLoaded, done, not_available
from pystore.engine.shared_writers import SharedWriting, take_over, writer_info
from pystore.engine.store_cleaning import CleaningSide
from pystore.engine.store_consumers import STARTED, ConsumerSide
from pystore.engine.store_part import Part, Service
from pystore.engine.wiring import close_writer, dispatch_behind, pool_enabled, wire_writer
from pystore.errors import StoreError
from pystore.log._results import PutMessageResult
from pystore.log.flush import flush_all
from pystore.message._message import Message
from pystore.message._message_batch import MessageBatch
from pystore.message.constants import offset_of_message_id
from pystore.read._queue_reader import QueueReader
from pystore.read.store_reads import StoreReads
from pystore.system import forksafe
from pystore.system.durable import make_dirs_durable
from pystore.system.running_flags import RunningFlags
from pystore.system.service import disk_used_ratio, real_clock
from pystore.timer.timer_stats import stats_from_files

if TYPE_CHECKING:
    import numpy
    import pyarrow
    from numpy.typing import NDArray

    from pystore.columns.api import BodiesColumn, KeysColumn, PropertiesColumn, TagsColumn
    from pystore.engine.parts import StoreParts
    from pystore.engine.recovery import RecoveryResult
    from pystore.engine.schedule import ScheduleMessageService
    from pystore.engine.wiring import Writer
    from pystore.errors import StoreCorruptedError
    from pystore.log._commitlog import CommitLogCore
    from pystore.log._mapped_view import SelectMappedBufferResult
    from pystore.log.commitlog import CommitLog
    from pystore.message._message_ext import MessageExt
    from pystore.message.constants import MessageFilter, TagFilter
    from pystore.queue.queue_store import ConsumeQueueStore
    from pystore.read._read import ReadLimits
    from pystore.read.results import GetMessageResult, PutColumnsResult, QueryMessageResult
    from pystore.status import GetMessageStatus
    from pystore.system.service import DiskUsage
    from pystore.timer.timer_store import TimerMessageStore

__all__ = ["MessageStore"]

log = logging.getLogger(__name__)

_NEW, _LOADED, _STARTED, _SHUTDOWN = "new", "loaded", STARTED, "shutdown"


class MessageStore(ConsumerSide, CleaningSide):
    """An embedded RocketMQ-format message store in one folder (see the module docstring)."""

    def __init__(self, config: StoreConfig | None = None, *, clock: Callable[[], int] | None = None,
                 disk_usage: DiskUsage | None = None) -> None:
        """``clock()``: epoch ms, the time of every policy (store times, expiry, intervals, the checkpoint, index
        names); default the system clock. ``disk_usage(path)``: as ``shutil.disk_usage`` (default) or a used fraction
        in [0, 1], for cleaning, DISK_FULL and the index. Tests inject both to move time and fill the disk."""
        if config is not None and not isinstance(config, StoreConfig):
            raise TypeError("config must be a StoreConfig, got %s" % type(config).__name__)
        self.config = config if config is not None else StoreConfig()
        self.clock = clock or real_clock
        self._injected_clock = clock
        self.disk_usage: DiskUsage = disk_usage or shutil.disk_usage
        self.read_only = self.config.read_only
        self.running_flags = RunningFlags()
        self.running_flags.add_listener(self._update_writeable)
        #: the Python reads (``pystore.read.store_reads``); the compiled ``get_message`` of a writer (``_attach_fast_paths``)
        self._reads = StoreReads(self.config, self.running_flags)
        self._reader: QueueReader | None = None
        #: what ``put_message``/``put_messages``, ``get_message``, ``look_message_by_offset`` call (``_attach_fast_paths``)
        self._puts: CommitLogCore | NotLoaded = NOT_LOADED
        self._gets: QueueReader | StoreReads = self._reads
        self._looks: QueueReader | StoreReads = self._reads
        self._state = _NEW
        self._lock = StoreLock(self.config.lock_path())
        self._abort = AbortFile(self.config.abort_path())
        #: what load() opened
        self._parts: StoreParts | None = None
        self._commitlog: CommitLog | None = None
        self._cq_store: ConsumeQueueStore | None = None
        self._limits: ReadLimits | None = None
        #: a started writer's services (pystore.engine.wiring.Writer); ``_services`` are those still to stop
        self._writer: Writer | None = None
        self._services: list[Service] = []
        self.schedule_message_service: ScheduleMessageService | None = None
        #: RocketMQ 5's timer store, where this process runs the services (pystore.timer)
        self.timer_message_store: TimerMessageStore | None = None
        self.last_exit_ok = True
        self.recovery: RecoveryResult | None = None
        #: why ``load()`` returned False, when a file is at fault (``MessageStore.open`` raises it)
        self.load_error: StoreCorruptedError | None = None
        self.boot_timestamp = self.clock()
        #: a read-only store's committed offsets, read when first asked for (a writer's are ``_writer.offsets``)
        self._read_offsets: ConsumerOffsets | None = None
        #: this process's part in a store several writers share (``shared_writers``), else None
        self._shared: SharedWriting | None = None
        #: a forked child's copy of a writer store (``_drop_after_fork``): it reads, never writes
        self._forked = False

    _checkpoint = Part(lambda s: None if s._parts is None else s._parts.checkpoint)
    _index = Part(lambda s: None if s._parts is None else s._parts.index)
    _dispatcher = Part(lambda s: None if s._parts is None else s._parts.dispatcher)
    _reput = Part(lambda s: None if s._parts is None else s._parts.reput)
    _ha = Part(lambda s: None if s._writer is None else s._writer.ha)
    _ha_client = Part(lambda s: None if s._writer is None else s._writer.ha_client)
    _flush_service = Part(lambda s: None if s._writer is None else s._writer.flush_service)
    _allocate = Part(lambda s: None if s._writer is None else s._writer.allocate)
    _pool = Part(lambda s: None if s._writer is None else s._writer.pool)

    # -- lifecycle -------------------------------------------------------------------------------------------

    @classmethod
    def open(cls, root: str | os.PathLike[str], read_only: bool = False, **config_overrides: Any) -> MessageStore:
        """A loaded and started store at ``root`` (``with`` shuts it down); ``clock=`` and ``disk_usage=`` go to the
        constructor, the other keywords to ``StoreConfig``."""
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

    @property
    def _state(self) -> str:
        return self.__state

    @_state.setter
    def _state(self, state: str) -> None:
        # every read checks the state: the Python reads by ``closed``, the compiled ones by ``open``
        self.__state = state
        readable = state in (_LOADED, _STARTED)
        self._reads.closed = None if readable else state
        if self._reader is not None:
            self._reader.open = readable

    def load(self) -> bool:
        """Lock the folder (writers), map the files and recover; False if the files are unusable."""
        if self._state != _NEW:
            raise StoreError("load() on a store that is %s" % self._state)
        cfg = self.config
        if not self.read_only:
            make_dirs_durable(cfg.store_path_root_dir)
            self._lock.acquire(shared=cfg.shared_writers)
            forksafe.track(self)
        elif not os.path.isdir(cfg.store_path_root_dir):
            raise StoreError("no store at %s" % cfg.store_path_root_dir)
        try:
            self.last_exit_ok = not self._abort.exists()
            if cfg.shared_writers:
                self._shared = SharedWriting(cfg, self.clock, self._injected_clock)
                parts, self.load_error = self._shared.open(self._open_parts, lambda: self._open_parts(
                    self.config.replace(read_only=True, shared_writers=False)))
            else:
                parts, self.load_error = self._open_parts()
        except BaseException:
            self._release_after_failure()
            raise
        if parts is None:
            self._release_after_failure()
            return False
        self._attach(parts)
        self._state = _LOADED
        return True

    def _attach(self, parts: StoreParts) -> None:
        self._parts, self.recovery = parts, parts.recovery
        self._commitlog, self._cq_store, self._limits = parts.commitlog, parts.cq_store, parts.limits
        self._reads.read_only = self.read_only or self._follower
        self._reads.attach(parts)
        self._attach_fast_paths()

    def _open_parts(self, config: StoreConfig | None = None, log_end: int | None = None,
                    dispatched_end: int | None = None) -> tuple[StoreParts | None, StoreCorruptedError | None]:
        return open_parts(config or self.config, last_exit_ok=self.last_exit_ok, running_flags=self.running_flags,
                          clock=self.clock, injected_clock=self._injected_clock, disk_usage=self.disk_usage,
                          log_end=log_end, dispatched_end=dispatched_end)

    @property
    def _follower(self) -> bool:   # one of several writers that is not their leader (pystore.engine.shared_writers)
        return self._shared is not None and not self._shared.leader

    @property
    def _put_log(self) -> CommitLog | None:   # where puts go: a follower's appender, else the store's log
        s = self._shared
        return s.put_log if s is not None and s.put_log is not None else self._commitlog

    def _not_leading(self) -> str:
        return "is read-only" if self.read_only else "does not lead the writers (it runs no service)"

    def _attach_fast_paths(self) -> None:
        """The common calls at compiled objects (one frame, one call into C): puts at the put log's core (it refuses
        itself while not writeable); on a ``MessageStore`` itself, gets and looks at a ``QueueReader``, which hands
        what it does not serve to ``StoreReads`` (a store that follows a writer looks through ``StoreReads``)."""
        cl, cq_store, limits = self._commitlog, self._cq_store, self._limits
        assert cl is not None and cq_store is not None and limits is not None
        follows = self.read_only or self._follower
        self._puts = (self._put_log or cl).core
        if type(self) is not MessageStore:
            return
        self._reader = QueueReader(cq_store.table, cl.queue, limits, self.running_flags, RunningFlags.NOT_READABLE_BIT,
                                   self.config, BrokerRole.SLAVE, StoreReads, self._reads,
                                   self._parts if follows else None)
        self._reads.reader = self._reader
        self._gets = self._reader
        self._looks = self._reads if follows else self._reader
        if self._parts is not None and self._parts.archive is not None:    # reads below the local data: Python's
            self._gets = self._looks = self._reads

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
        assert self._parts is not None
        if not self._follower:
            self._run_writer(self._parts)
        self._state = _STARTED
        self._update_writeable()
        if self._shared is not None and not self._shared.leader:
            self._shared.watch(self._take_over)       # the follower of several writers leads when the leader goes
        log.info("store %s started (%s, %s)", self.root, self.config.flush_disk_type.name,
                 self.config.broker_role.name)

    def _run_writer(self, parts: StoreParts) -> None:
        w = self._writer = wire_writer(parts, self.config, lock=self._lock, abort=self._abort, shared=self._shared,
                                       running_flags=self.running_flags, clock=self.clock, disk_usage=self.disk_usage)
        self.schedule_message_service = w.schedule
        self.timer_message_store = w.timer
        self._services = list(w.services)
        w.start()

    def _take_over(self) -> None:
        """(A follower's watch thread, holding the leader's lock.) Lead: open and run a writer (``take_over``)."""
        assert self._shared is not None
        if self._state != _STARTED:
            return
        parts = take_over(self._shared, lambda end, dispatched: self._open_parts(log_end=end,
                                                                                 dispatched_end=dispatched))
        old = self._parts
        # the new log's hooks (flush waits) and services first, while puts still go through the appender: a put
        # in between is neither refused nor acknowledged before its flush
        self._run_writer(parts)
        self._update_writeable(parts.commitlog)
        self._shared.took_over(parts)
        self._attach(parts)
        if old is not None:
            self._shared.retired.append(old)

    def writer_info(self) -> dict[str, object]:
        """Who writes the store (``shared_writers.writer_info``: mode, lock kind, writers, the leader's pid)."""
        return writer_info(self._shared, self._lock.held)

    def _update_writeable(self, cl: CommitLog | None = None) -> None:
        cl = cl or self._put_log
        if cl is not None:
            cl.writeable = (self._state == _STARTED and not self.read_only and self.running_flags.is_writeable()
                            and self.config.broker_role != BrokerRole.SLAVE and not self._forked)

    def shutdown(self) -> None:
        """Stop accepting puts, stop the services (they flush what is left), write the checkpoint, remove the abort
        file, unmap and unlock. Idempotent. Afterwards a put answers ``SERVICE_NOT_AVAILABLE`` (a refused put is a
        status, as in RocketMQ) and every read, ``get_message`` included, raises ``StoreClosedError``."""
        if self._state in (_NEW, _SHUTDOWN) or self._forked:
            # a forked child's copy: no services, no lock (forksafe closed its descriptor), files the parent's
            self._state = _SHUTDOWN
            self._lock.release()
            return
        was_started = self._state == _STARTED
        self._state = _SHUTDOWN
        self._update_writeable()
        self._reads.wake_waiters()
        if self._shared is not None:
            self._shared.stop_watch()      # a takeover under way finishes first: its services are stopped below
        w = self._writer
        if w is not None:
            w.stop_appends()
        for s in reversed(self._services):
            s.shutdown()
        self._services = []
        if self._parts is not None and not self.read_only and not self._follower:
            close_writer(self._parts, w if was_started else None, abort=self._abort,
                         running_flags=self.running_flags)
        self._close_files()
        if w is not None and w.pool is not None:
            w.pool.destroy()          # after the files: a buffer a file still uses cannot be closed
            w.pool = None
        self._lock.release()
        forksafe.untrack(self)
        log.info("store %s shut down", self.root)

    def _drop_after_fork(self) -> None:
        """In a forked child (``pystore.system.forksafe``): a writer's service threads stayed in the parent, and its
        files are the parent's to write, so this copy only reads: puts answer ``SERVICE_NOT_AVAILABLE`` and its
        ``shutdown`` writes nothing (it closes it for the child alone). A child opens the store again to write."""
        self._forked = True
        self._update_writeable()

    def _close_files(self) -> None:
        if self._parts is not None:
            self._parts.close()
        if self._shared is not None:
            self._shared.close()

    def _release_after_failure(self) -> None:
        if self._writer is not None:
            self._writer.abandon()
        self._close_files()
        self._lock.release()
        self._state = _SHUTDOWN

    def destroy(self) -> None:
        """Shut down and delete every file of the store (the root folder too, if nothing else is in it)."""
        if self.read_only or (self._shared is not None and self._shared.others_writing()):
            raise StoreError("%s: %s cannot destroy files" % (self.root, "a read-only store" if self.read_only else
                                                                "a writer beside other writer processes"))
        was_new = self._state == _NEW
        self.shutdown()
        delete_store(self.config, was_new)

    def _check_readable(self) -> CommitLog:
        return self._reads.check()

    # -- writing ---------------------------------------------------------------------------------------------

    def put_message(self, msg: Message) -> PutMessageResult:
        """Store one message; a refused put returns a status (``TypeError`` only for a non-``Message``)."""
        return self._puts.put_message(msg)

    def put_messages(self, batch: MessageBatch) -> PutMessageResult:
        """Store a ``MessageBatch``: consecutive queue offsets, one lock hold, never split across files."""
        return self._puts.put_messages(batch)

    def async_put_message(self, msg: Message) -> Future[PutMessageResult]:
        """``put_message`` as a ``Future``; with SYNC_FLUSH it completes once the message is on disk."""
        cl = self._put_log
        return done(not_available(msg)) if cl is None else self._waited(cl.append_message(msg), msg)

    def async_put_messages(self, batch: MessageBatch) -> Future[PutMessageResult]:
        cl = self._put_log
        return done(not_available(batch)) if cl is None else self._waited(cl.append_messages(batch), batch)

    def _waited(self, result: PutMessageResult, msg: Message | MessageBatch) -> Future[PutMessageResult]:
        """``result`` with what the put waits for (a flush, a slave) once the writer started."""
        w, cl = self._writer, self._put_log
        if w is None:       # a follower of several writers waits in its appender's after_put (SYNC_FLUSH)
            return done(result if cl is None or cl.after_put is None else cl.after_put(result, msg))
        return w.put_waits.complete_async(result, msg)

    @property
    def ha_port(self) -> int | None:
        """The HA listener's port (``ha_listen_port=0``: the OS's choice); None when the store does not listen."""
        ha = self._ha
        return ha.port if ha is not None and self._state == _STARTED else None

    def flush(self) -> int:
        """Force everything written to disk; returns the flushed commit-log offset. The checkpoint's commit-log
        time follows at once (the flush service moves it only when it flushes something itself, which after
        this flush may be its thorough pass, 10 s later)."""
        cl = self._check_readable()
        if self.read_only:
            return self.get_max_phy_offset()
        if self._follower and self._put_log is not None:
            return flush_all(self._put_log.queue)      # the leader flushes the rest
        flushed = flush_all(cl.queue)
        if self._state == _STARTED and self._writer is not None and self._parts is not None:
            self._writer.catch_up(self._parts)
            checkpoint, ts = self._parts.checkpoint, cl.queue.store_timestamp
            if ts > 0 and ts != checkpoint.physic_msg_timestamp:
                checkpoint.physic_msg_timestamp = ts
                checkpoint.flush()
        return flushed

    def transient_store_pool_enabled(self) -> bool:
        """RocketMQ 4.8's ``isTransientStorePoolEnable``: the pool is used with ASYNC_FLUSH on a master only."""
        return pool_enabled(self.config)

    # -- reading the commit log (pystore.read.store_reads) --------------------------------------------------------------

    def look_message_by_offset(self, commit_log_offset: int) -> MessageExt | None:
        """The message stored at ``commit_log_offset``, or None if no message starts there."""
        return self._looks.look_message_by_offset(commit_log_offset)

    def view_message_by_id(self, msg_id: str) -> MessageExt | None:
        """The message with this offset message id (store host + port + commit-log offset, hex)."""
        return self.look_message_by_offset(offset_of_message_id(msg_id))

    def get_min_phy_offset(self) -> int:
        return self._check_readable().get_min_offset()

    def get_archive_min_phy_offset(self) -> int:
        """The archive's first commit-log offset (``archive_uri``); -1 without an archive or before its first copy."""
        return self._reads.archive_min_phy_offset()

    def archive_info(self) -> dict[str, object]:
        """The archive tier: ``uri``, files uploaded, its commit-log range, ``lag_bytes``, ``last_error``, the cache."""
        return self._reads.archive_info()

    def timer_stats(self) -> dict[str, object]:
        """RocketMQ 5 timer messages: ``pending`` (in the wheel or still to enqueue), ``next_due_ms`` (when the
        earliest becomes deliverable, None when none waits), ``lag_ms`` (how far delivery is behind the clock);
        from the files as last flushed where this process does not run the timer store."""
        ts = self.timer_message_store
        if ts is not None and ts.opened and not ts.closed:
            return ts.stats()
        return stats_from_files(self.root, self.config.timer_precision_ms, self.clock())

    def get_max_phy_offset(self) -> int:
        return self._reads.followed().get_max_offset()

    def get_commit_log_data(self, offset: int) -> SelectMappedBufferResult | None:
        """A read-only view of the log from ``offset`` to its file's written end (held until ``release()``)."""
        return self._reads.select_data(offset)

    def get_topic_queue_table(self) -> dict[tuple[str, int], int]:
        """``{(topic, queue_id): next queue offset}`` (a read-only store follows the writer first)."""
        return self._reads.followed().get_topic_queue_table()

    def dispatch_behind_bytes(self, _internal: bool = False) -> int:
        """How far the consume queues lag the commit log in bytes (0 with inline dispatch: ASYNC_FLUSH)."""
        if not _internal:
            self._check_readable()
        return dispatch_behind(self._parts, self._writer)

    # -- reading by queue (pystore.read.store_reads) --------------------------------------------------------------------

    def get_message(self, group: str, topic: str, queue_id: int, offset: int, max_msg_nums: int = 32,
                    message_filter: MessageFilter | TagFilter | str | None = None,
                    timeout_ms: int = 0) -> GetMessageResult:
        """Up to ``max_msg_nums`` messages of (topic, queue_id) from ``offset`` (RocketMQ's statuses and next-offset
        rules, docs/format.md §11.1); ``timeout_ms > 0`` waits that long at the queue's end (``pystore.read.arrival``).
        A store not loaded or shut down raises ``StoreClosedError``; one not readable ``StoreError``."""
        return self._gets.get_message(group, topic, queue_id, offset, max_msg_nums, message_filter, timeout_ms)

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        """Number of units ever written to the queue (the next offset to consume from its end); 0 if unknown."""
        return self._reads.get_max_offset_in_queue(topic, queue_id)

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return self._reads.get_min_offset_in_queue(topic, queue_id)

    def get_commit_log_offset_in_queue(self, topic: str, queue_id: int, consume_queue_offset: int) -> int:
        """The commit-log offset of that queue offset's message; 0 if there is none."""
        return self._reads.get_commit_log_offset_in_queue(topic, queue_id, consume_queue_offset)

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp: int, boundary: str = "lower") -> int:
        """5.x: ``"lower"`` the first offset stored at or after ``timestamp`` (the max offset if none is);
        ``"upper"`` the last offset stored at or before it (0 if none is). 0 for an unknown queue."""
        return self._reads.get_offset_in_queue_by_time(topic, queue_id, timestamp, boundary)

    def get_earliest_message_time(self, topic: str | None = None, queue_id: int | None = None) -> int:
        """Store time of the log's (with a topic and queue: the queue's) first message; -1 when there is none."""
        return self._reads.get_earliest_message_time(topic, queue_id)

    def get_message_store_timestamp(self, topic: str, queue_id: int, consume_queue_offset: int) -> int:
        """Store time of the message at that queue offset; -1 if there is none."""
        return self._reads.get_message_store_timestamp(topic, queue_id, consume_queue_offset)

    def get_message_total_in_queue(self, topic: str, queue_id: int) -> int:
        return self._reads.get_message_total_in_queue(topic, queue_id)

    def query_message(self, topic: str, key: str, max_num: int = 32, begin: int = 0,
                      end: int = 2**63 - 1) -> QueryMessageResult:
        """Messages of ``topic`` whose keys (or ``UNIQ_KEY``) include ``key``, stored in [begin, end]; at most
        ``config.max_msgs_num_batch`` (64) whatever ``max_num`` asks (a warning logged once per store)."""
        return self._reads.query_message(topic, key, max_num, begin, end)

    # -- columns: the work is pystore.columns.api' ---------------------------------------------------------------

    def put_columns(self, topic: str, bodies: BodiesColumn, queue_id: int = 0, keys: KeysColumn | None = None,
                    tags: TagsColumn | None = None, properties: PropertiesColumn | None = None,
                    batch: bool = False) -> PutColumnsResult:
        """One message per body, stored as ``put_message`` (``batch``: ``put_messages``) would, to a refusal."""
        return columns.put_columns(self, topic, bodies, queue_id, keys, tags, properties, batch)

    def get_columns(self, group: str, topic: str, queue_id: int, offset: int, max_msg_nums: int = 1024,
                    message_filter: MessageFilter | TagFilter | str | None = None, timeout_ms: int = 0,
                    columns: Sequence[str] | None = None) -> tuple[GetMessageStatus, int, pyarrow.RecordBatch]:
        """``get_message`` without its in-memory caps: ``(status, next_begin_offset, pyarrow.RecordBatch)``; the
        batch has the ``columns`` named (of ``columns_schema()``, in that order; None: all of them)."""
        return _get_columns(self._reads, group, topic, queue_id, offset, max_msg_nums, message_filter, timeout_ms,
                            columns)

    def queue_units(self, topic: str, queue_id: int, start: int = 0, count: int | None = None) -> NDArray[numpy.void]:
        """A read-only numpy view of the consume-queue units from ``start``, to a file's end or ``count``."""
        return columns.queue_units(self._reads, topic, queue_id, start, count)

    # -- operating -------------------------------------------------------------------------------------------

    def is_os_page_cache_busy(self) -> bool:
        return bool(self._commitlog is not None and self._commitlog.is_os_page_cache_busy())

    def refresh(self) -> None:
        """Read-only stores: pick up what the writer appended since (new files, the new end of data)."""
        self._reads.refresh()

    def get_runtime_info(self) -> dict[str, str]:
        """Runtime figures under RocketMQ's key names where they apply."""
        cl = self._check_readable()
        return cl.runtime_info(self.boot_timestamp, self.clock(),
                               disk_used_ratio(self.disk_usage, self.config.commit_log_paths()[0]),
                               self.dispatch_behind_bytes())

    def __repr__(self) -> str:
        return "MessageStore(%r, %s%s)" % (self.root, self._state, ", read-only" if self.read_only else "")
