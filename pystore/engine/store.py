"""``MessageStore``: the facade users hold (RocketMQ ``DefaultMessageStore``, docs/api.md "The store").

It owns the lifecycle and hands every call to the part that does it; the parts and services are built by
``pystore.engine.wiring``, the Python reads are ``pystore.read.store_reads``', a put's waits are ``pystore.engine.put_waits``',
replication is ``pystore.ha.master`` and ``pystore.ha.slave``'s; loops over bytes are in the Cython modules::

    MessageStore(config)      nothing touched on disk
      .load()                 lock the folder (writers), map files, recover        -> True/False
      .start()                abort file, services (allocate, flush ...), accept puts
      .shutdown()             stop accepting, stop services (they flush), checkpoint, remove abort, unlock
      .destroy()              shutdown and delete every file of the store

``MessageStore.open(root, read_only=False, **overrides)`` does load + start and is a context manager.
A read-only store takes no lock, writes nothing and refuses puts (``SERVICE_NOT_AVAILABLE``); it follows a
live writer by re-reading the folder when asked for data beyond what it has seen.

One put and its read, module by module: ``put_message`` calls the commit log's compiled ``put_message``
(``_attach_fast_paths``) -> ``_commitlog`` appends, dispatches inline or leaves it to a service (``wiring``
says which), then runs ``put_waits`` -> disk by ``flush``; ``get_message`` calls ``_queue_reader.QueueReader``'s
(``_attach_fast_paths``), which hands the calls it does not serve to ``store_reads.StoreReads.get_message``: both
run ``_read.read_queue``, which reads the consume queue's units and the records they point at.

Time and disk are injected: ``MessageStore(config, clock=..., disk_usage=...)`` hands its clock to every
policy that depends on the time and its ``disk_usage`` to every decision on disk usage (``pystore.system.service``
states the rule); the services get these and the parts they work on from ``pystore.engine.wiring``, never the store.

Thread-safety: puts and reads may come from any number of threads; lifecycle calls (load, start,
shutdown, destroy) must not race each other.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, overload

from pystore.columns import api as columns
from pystore.columns.api import get_columns as _get_columns
from pystore.config import BrokerRole, StoreConfig
from pystore.consumer.consumer import Consumer
from pystore.consumer.offsets import ConsumerOffsets
from pystore.engine.checkpoint import AbortFile, StoreLock
from pystore.engine.put_waits import NOT_LOADED, NotLoaded, done, not_available
from pystore.engine.wiring import close_writer, delete_store, dispatch_behind, open_parts, pool_enabled, wire_writer
from pystore.errors import StoreClosedError, StoreError
from pystore.log._results import PutMessageResult
from pystore.log.flush import flush_all
from pystore.message._message import Message
from pystore.message._message_batch import MessageBatch
from pystore.message.constants import offset_of_message_id
from pystore.read._queue_reader import QueueReader
from pystore.read.store_reads import StoreReads
from pystore.system.durable import make_dirs_durable
from pystore.system.running_flags import RunningFlags
from pystore.system.service import disk_used_ratio, real_clock

if TYPE_CHECKING:
    import numpy
    import pyarrow
    from numpy.typing import NDArray

    from pystore.columns.api import BodiesColumn, KeysColumn, PropertiesColumn, TagsColumn
    from pystore.engine.clean import CleanService
    from pystore.engine.recovery import RecoveryResult
    from pystore.engine.schedule import ScheduleMessageService
    from pystore.engine.wiring import StoreParts, Writer
    from pystore.errors import StoreCorruptedError
    from pystore.log._commitlog import CommitLogCore
    from pystore.log._mapped_view import SelectMappedBufferResult
    from pystore.log.commitlog import CommitLog
    from pystore.message._message_ext import MessageExt
    from pystore.message.constants import MessageFilter, TagFilter
    from pystore.queue.queue_store import ConsumeQueueStore
    from pystore.read._read import ReadLimits
    from pystore.read.arrival import ArrivingListener
    from pystore.read.results import GetMessageResult, PutColumnsResult, QueryMessageResult
    from pystore.status import GetMessageStatus
    from pystore.system.service import DiskUsage

__all__ = ["MessageStore"]

log = logging.getLogger(__name__)

_T = TypeVar("_T")

_NEW, _LOADED, _STARTED, _SHUTDOWN = "new", "loaded", "started", "shutdown"


class _Part(Generic[_T]):
    """A read-only part of what load() opened (``_parts``) or of a started writer's services (``_writer``), None
    before: a property typed as the part (white-box tests reach for them)."""

    def __init__(self, get: Callable[[MessageStore], _T | None]) -> None:
        self._get = get

    @overload
    def __get__(self, store: None, owner: type[MessageStore]) -> _Part[_T]: ...
    @overload
    def __get__(self, store: MessageStore, owner: type[MessageStore]) -> _T | None: ...
    def __get__(self, store: MessageStore | None, owner: type[MessageStore]) -> _Part[_T] | _T | None:
        return self if store is None else self._get(store)

    def __set__(self, store: MessageStore, value: object) -> None:
        raise AttributeError("a part of the store cannot be replaced")


class _Service(Protocol):
    """What the store asks of each service a started writer runs (``Writer.services``): to stop."""

    def shutdown(self) -> None: ...


class MessageStore:
    """An embedded RocketMQ-format message store in one folder (see the module docstring)."""

    def __init__(self, config: StoreConfig | None = None, *, clock: Callable[[], int] | None = None,
                 disk_usage: DiskUsage | None = None) -> None:
        """``clock()``: epoch milliseconds, the time of every policy (store timestamps, file expiry, flush and
        heartbeat intervals, the checkpoint's writes, the page-cache-busy check, forcing out a file a reader
        still holds, index file names); default the system clock.
        ``disk_usage(path)``: what the partition holding ``path`` uses, as ``shutil.disk_usage`` answers (the
        default) or as the used fraction in [0, 1]; cleaning, the DISK_FULL flag and the free-space check before
        a new index file decide by it. Tests
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
        #: the Python reads (``pystore.read.store_reads``); the compiled ``get_message`` of a writer (``_attach_fast_paths``)
        self._reads = StoreReads(self.config, self.running_flags)
        self._reader: QueueReader | None = None
        #: what ``put_message``/``put_messages``, ``get_message`` and ``look_message_by_offset`` call: until
        #: ``load``, and in the cases ``_attach_fast_paths`` names, the Python ones; after it, compiled ones
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
        self._services: list[_Service] = []
        self.schedule_message_service: ScheduleMessageService | None = None
        self.last_exit_ok = True
        self.recovery: RecoveryResult | None = None
        #: why ``load()`` returned False, when a file is at fault (``MessageStore.open`` raises it)
        self.load_error: StoreCorruptedError | None = None
        self.boot_timestamp = self.clock()
        #: a read-only store's committed offsets, read when first asked for (a writer's are ``_writer.offsets``)
        self._read_offsets: ConsumerOffsets | None = None

    _checkpoint = _Part(lambda s: None if s._parts is None else s._parts.checkpoint)
    _index = _Part(lambda s: None if s._parts is None else s._parts.index)
    _dispatcher = _Part(lambda s: None if s._parts is None else s._parts.dispatcher)
    _reput = _Part(lambda s: None if s._parts is None else s._parts.reput)
    _ha = _Part(lambda s: None if s._writer is None else s._writer.ha)
    _ha_client = _Part(lambda s: None if s._writer is None else s._writer.ha_client)
    _flush_service = _Part(lambda s: None if s._writer is None else s._writer.flush_service)
    _allocate = _Part(lambda s: None if s._writer is None else s._writer.allocate)
    _pool = _Part(lambda s: None if s._writer is None else s._writer.pool)

    # -- lifecycle -------------------------------------------------------------------------------------------

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
            self._lock.acquire()
        elif not os.path.isdir(cfg.store_path_root_dir):
            raise StoreError("no store at %s" % cfg.store_path_root_dir)
        try:
            self.last_exit_ok = not self._abort.exists()
            parts, self.load_error = open_parts(cfg, last_exit_ok=self.last_exit_ok, running_flags=self.running_flags,
                                                clock=self.clock, injected_clock=self._injected_clock,
                                                disk_usage=self.disk_usage)
        except BaseException:
            self._release_after_failure()
            raise
        if parts is None:
            self._release_after_failure()
            return False
        self._parts, self.recovery = parts, parts.recovery
        self._commitlog, self._cq_store, self._limits = parts.commitlog, parts.cq_store, parts.limits
        self._reads.attach(parts)
        self._attach_fast_paths()
        self._state = _LOADED
        return True

    def _attach_fast_paths(self) -> None:
        """Point the common calls at compiled objects, so that each costs one Python frame (the method's) and one
        call into C, whatever it reaches (on the put and get paths the work is little more than that):

        * ``put_message``, ``put_messages``: the commit log's compiled methods, which refuse with
          SERVICE_NOT_AVAILABLE themselves while the store is not started, read-only or shut down;
        * ``get_message``, ``look_message_by_offset``, on a ``MessageStore`` itself: a ``_queue_reader.QueueReader``'s,
          which serves the common call (no filter, a known queue, a readable master, int arguments) and hands
          every other to the ``StoreReads`` methods. A read-only store's reader follows the writer first
          (``QueueReader`` says how far in C); its ``look_message_by_offset`` stays ``StoreReads``', which follows
          the writer too. A subclass reads through ``StoreReads`` (no reader), whatever it overrides.

        The methods stay the class's: nothing here is an instance attribute named as a method."""
        cl, cq_store, limits = self._commitlog, self._cq_store, self._limits
        assert cl is not None and cq_store is not None and limits is not None
        self._puts = cl.core
        if type(self) is not MessageStore:
            return
        self._reader = QueueReader(cq_store.table, cl.queue, limits, self.running_flags, RunningFlags.NOT_READABLE_BIT,
                                   self.config, BrokerRole.SLAVE, StoreReads, self._reads,
                                   self._parts if self.read_only else None)
        self._reads.reader = self._reader
        self._gets = self._reader
        if not self.read_only:
            self._looks = self._reader

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
        w = self._writer = wire_writer(self._parts, self.config, lock=self._lock, abort=self._abort,
                                       running_flags=self.running_flags, clock=self.clock, disk_usage=self.disk_usage)
        self.schedule_message_service = w.schedule
        self._services = list(w.services)
        w.start()
        self._state = _STARTED
        self._update_writeable()
        log.info("store %s started (%s, %s)", self.root, self.config.flush_disk_type.name,
                 self.config.broker_role.name)

    def _update_writeable(self) -> None:
        cl = self._commitlog
        if cl is not None:
            cl.writeable = (self._state == _STARTED and not self.read_only and self.running_flags.is_writeable()
                            and self.config.broker_role != BrokerRole.SLAVE)

    def shutdown(self) -> None:
        """Stop accepting puts, stop the services (they flush what is left), write the checkpoint, remove
        the abort file, unmap and unlock. Idempotent. Afterwards a put answers ``SERVICE_NOT_AVAILABLE`` (a
        refused put is a status, as in RocketMQ) and every read, ``get_message`` included, raises
        ``StoreClosedError``."""
        if self._state in (_NEW, _SHUTDOWN):
            self._state = _SHUTDOWN
            self._lock.release()
            return
        was_started = self._state == _STARTED
        self._state = _SHUTDOWN
        self._update_writeable()
        self._reads.wake_waiters()
        w = self._writer
        if w is not None:
            w.stop_appends()
        for s in reversed(self._services):
            s.shutdown()
        self._services = []
        if self._parts is not None and not self.read_only:
            close_writer(self._parts, w if was_started else None, abort=self._abort,
                         running_flags=self.running_flags)
        self._close_files()
        if w is not None and w.pool is not None:
            w.pool.destroy()          # after the files: a buffer a file still uses cannot be closed
            w.pool = None
        self._lock.release()
        log.info("store %s shut down", self.root)

    def _close_files(self) -> None:
        if self._parts is not None:
            self._parts.close()

    def _release_after_failure(self) -> None:
        if self._writer is not None:
            self._writer.abandon()
        self._close_files()
        self._lock.release()
        self._state = _SHUTDOWN

    def destroy(self) -> None:
        """Shut down and delete every file of the store (the root folder too, if nothing else is in it)."""
        if self.read_only:
            raise StoreError("a read-only store cannot destroy files")
        was_new = self._state == _NEW
        self.shutdown()
        delete_store(self.config, was_new)

    def _check_readable(self) -> CommitLog:
        return self._reads.check()

    # -- writing ---------------------------------------------------------------------------------------------

    def put_message(self, msg: Message) -> PutMessageResult:
        """Store one message; a refused put returns a status (``TypeError`` only for a non-``Message``).
        Once loaded, the commit log's compiled method answers (``_attach_fast_paths``)."""
        return self._puts.put_message(msg)

    def put_messages(self, batch: MessageBatch) -> PutMessageResult:
        """Store a ``MessageBatch``: consecutive queue offsets, one lock hold, never split across files."""
        return self._puts.put_messages(batch)

    def async_put_message(self, msg: Message) -> Future[PutMessageResult]:
        """Like ``put_message``, returning a ``Future``; with SYNC_FLUSH it completes once the message is on
        disk (the group commit service completes it)."""
        cl = self._commitlog
        return done(not_available(msg)) if cl is None else self._waited(cl.append_message(msg), msg)

    def async_put_messages(self, batch: MessageBatch) -> Future[PutMessageResult]:
        cl = self._commitlog
        return done(not_available(batch)) if cl is None else self._waited(cl.append_messages(batch), batch)

    def _waited(self, result: PutMessageResult, msg: Message | MessageBatch) -> Future[PutMessageResult]:
        """``result`` with what the put waits for (a flush, a slave) once the writer started."""
        w = self._writer
        return done(result) if w is None else w.put_waits.complete_async(result, msg)

    @property
    def ha_port(self) -> int | None:
        """The port the HA listener is bound to (with ``ha_listen_port=0``, the one the OS chose); None
        when the store does not listen (no ``ha_listen_port``, a slave, or not started)."""
        ha = self._ha
        return ha.port if ha is not None and self._state == _STARTED else None

    def flush(self) -> int:
        """Force everything written to disk; returns the flushed commit-log offset."""
        cl = self._check_readable()
        if self.read_only:
            return self.get_max_phy_offset()
        flushed = flush_all(cl.queue)
        if self._state == _STARTED and self._writer is not None and self._parts is not None:
            self._writer.catch_up(self._parts)
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

    def get_max_phy_offset(self) -> int:
        return self._reads.followed().get_max_offset()

    def get_commit_log_data(self, offset: int) -> SelectMappedBufferResult | None:
        """A read-only view of the commit log from ``offset`` to the end of written data in its file; it
        holds the file until ``release()`` or the end of its ``with`` block."""
        return self._reads.select_data(offset)

    def get_topic_queue_table(self) -> dict[tuple[str, int], int]:
        """``{(topic, queue_id): next queue offset}`` (a read-only store follows the writer first)."""
        return self._reads.followed().get_topic_queue_table()

    def dispatch_behind_bytes(self, _internal: bool = False) -> int:
        """How far the consume queues lag the commit log, in bytes: 0 with inline dispatch (ASYNC_FLUSH);
        with SYNC_FLUSH, the flushed bytes not dispatched yet."""
        if not _internal:
            self._check_readable()
        return dispatch_behind(self._parts, self._writer)

    # -- reading by queue (pystore.read.store_reads) --------------------------------------------------------------------

    def get_message(self, group: str, topic: str, queue_id: int, offset: int, max_msg_nums: int = 32,
                    message_filter: MessageFilter | TagFilter | str | None = None,
                    timeout_ms: int = 0) -> GetMessageResult:
        """Up to ``max_msg_nums`` messages of (topic, queue_id) from queue offset ``offset``, with RocketMQ's
        statuses and next-offset rules (docs/format.md §11.1). With ``timeout_ms > 0``, a get that finds nothing at
        the queue's end waits up to that long for a message to arrive there (``pystore.read.arrival``).

        Always a ``GetMessageResult`` (RocketMQ's null has no place in docs/api.md's signature): a store that is
        not loaded or is shut down raises ``StoreClosedError``, as every read does, and one whose running
        flags say not readable raises ``StoreError``; a put in either case answers ``SERVICE_NOT_AVAILABLE``
        instead, because a refused put is a status (docs/api.md)."""
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
        """Store time of the commit log's first message, or (with a topic and queue) of the queue's first
        message; -1 when there is none."""
        return self._reads.get_earliest_message_time(topic, queue_id)

    def get_message_store_timestamp(self, topic: str, queue_id: int, consume_queue_offset: int) -> int:
        """Store time of the message at that queue offset; -1 if there is none."""
        return self._reads.get_message_store_timestamp(topic, queue_id, consume_queue_offset)

    def get_message_total_in_queue(self, topic: str, queue_id: int) -> int:
        return self._reads.get_message_total_in_queue(topic, queue_id)

    def query_message(self, topic: str, key: str, max_num: int = 32, begin: int = 0,
                      end: int = 2**63 - 1) -> QueryMessageResult:
        """Messages of ``topic`` whose keys (or ``UNIQ_KEY``) include ``key``, stored in [begin, end].

        At most ``config.max_msgs_num_batch`` (RocketMQ's ``maxMsgsNumBatch``, 64 by default) whatever
        ``max_num`` asks: a larger ``max_num`` is cut to it, with a warning logged once per store."""
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
        return self._check_writable_service().expired_consumer_queues()

    def clean_unused_topic(self, keep: set[str]) -> list[tuple[str, int]]:
        """Destroy the consume queues of every topic not in ``keep`` (system topics stay); returns the
        (topic, queue id)s removed. The commit log is untouched."""
        return self._check_writable_service().unused_topics(keep)

    def _check_writable_service(self) -> CleanService:
        if self.read_only:
            raise StoreError("%s is open read-only: cleaning writes" % self.root)
        if self._state != _STARTED or self._writer is None:
            raise StoreClosedError("the store at %s is %s, not started" % (self.root, self._state))
        return self._writer.clean

    # -- consumers -------------------------------------------------------------------------------------------

    def add_arriving_listener(self, fn: ArrivingListener) -> None:
        """Call ``fn(topic, queue_id, logic_offset, tags_code, store_timestamp, filter_bit_map, properties)``
        after each message is dispatched to its consume queue (not on a slave; see ``pystore.read.arrival`` for the
        thread it runs on). A read-only store dispatches nothing: ``StoreError``."""
        if self.read_only:
            raise StoreError("%s is open read-only: it dispatches no message to listen to" % self.root)
        self._reads.arrivals().add_listener(fn)

    def remove_arriving_listener(self, fn: ArrivingListener) -> None:
        """Stop calling ``fn``; ValueError if it was not added."""
        self._reads.arrivals().remove_listener(fn)

    def _consumer_offsets(self) -> ConsumerOffsets:
        self._check_readable()
        if self.read_only:
            if self._read_offsets is None:
                self._read_offsets = ConsumerOffsets(self.config.config_path(), 0, self._reads.get_min_offset_in_queue,
                                                     read_only=True)
            return self._read_offsets
        if self._writer is None or self._writer.offsets is None or self._state != _STARTED:
            raise StoreClosedError("the store at %s is %s, not started" % (self.root, self._state))
        return self._writer.offsets

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Record that ``group`` consumed (topic, queue_id) up to ``offset`` (the next offset it will read);
        persisted to ``config/consumerOffset.json`` every ``flush_consumer_offset_interval`` ms and at shutdown.
        ``StoreError`` on a read-only store."""
        self._consumer_offsets().commit(group, topic, queue_id, offset)

    def fetch_offset(self, group: str, topic: str, queue_id: int) -> int:
        """``group``'s committed offset of (topic, queue_id), at least the queue's min offset; -1 if never
        committed."""
        return self._consumer_offsets().fetch(group, topic, queue_id)

    def consumer(self, group: str, topic: str, queue_ids: Iterable[int] | None = None,
                 message_filter: MessageFilter | TagFilter | str | None = None, auto_commit: bool = True,
                 spin_us: float = 0) -> Consumer:
        """A ``Consumer`` of ``topic`` for ``group`` (``pystore.consumer.consumer``)."""
        return Consumer(self, group, topic, queue_ids, message_filter, auto_commit, spin_us,
                        arrivals=self._reads.arrivals())

    def is_os_page_cache_busy(self) -> bool:
        cl = self._commitlog
        return bool(cl is not None and cl.is_os_page_cache_busy())

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
