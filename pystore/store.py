"""``MessageStore``: the facade users hold (RocketMQ ``DefaultMessageStore``, docs/api.md "The store").

It owns the lifecycle and hands every call to the part that does it; the parts and services are built by
``pystore.wiring``, a put's waits are ``pystore.put_waits``', replication is ``pystore.ha_master`` and
``pystore.ha_slave``'s; loops over bytes are in the Cython modules::

    MessageStore(config)      nothing touched on disk
      .load()                 lock the folder (writers), map files, recover        -> True/False
      .start()                abort file, services (allocate, flush ...), accept puts
      .shutdown()             stop accepting, stop services (they flush), checkpoint, remove abort, unlock
      .destroy()              shutdown and delete every file of the store

``MessageStore.open(root, read_only=False, **overrides)`` does load + start and is a context manager.
A read-only store takes no lock, writes nothing and refuses puts (``SERVICE_NOT_AVAILABLE``); it follows a
live writer by re-reading the folder when asked for data beyond what it has seen.

One put and its read, module by module: ``put_message`` is the commit log's compiled ``put_message``
(``_bind_fast_paths``) -> ``_commitlog`` appends, dispatches inline or leaves it to a service (``wiring``
says which), then runs ``put_waits`` -> disk by ``flush``; ``get_message`` -> ``_read.read_queue`` reads the
consume queue's units and the records they point at.

Time and disk are injected: ``MessageStore(config, clock=..., disk_usage=...)`` hands its clock to every
policy that depends on the time and its ``disk_usage`` to every decision on disk usage (``pystore.service``
states the rule); the services get these and the parts they work on from ``pystore.wiring``, never the store.

Thread-safety: puts and reads may come from any number of threads; lifecycle calls (load, start,
shutdown, destroy) must not race each other.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from typing import Any

from pystore import columns
from pystore._mapped_view import SelectMappedBufferResult
from pystore._message import Message
from pystore._message_batch import MessageBatch
from pystore._message_ext import MessageExt
from pystore._read import QueueReader, ReadLimits, read_queue
from pystore._results import PutMessageResult
from pystore.arrival import Arrivals, ArrivingListener, found_something
from pystore.checkpoint import AbortFile, StoreLock
from pystore.clean import CleanService
from pystore.columns import PutColumnsResult
from pystore.commitlog import CommitLog
from pystore.config import BrokerRole, StoreConfig
from pystore.consume_queue import ConsumeQueue, ConsumeQueueStore
from pystore.consumer import Consumer
from pystore.consumer_offsets import ConsumerOffsets
from pystore.durable import make_dirs_durable
from pystore.errors import StoreClosedError, StoreCorruptedError, StoreError
from pystore.flush import flush_all
from pystore.message import MessageFilter, TagFilter, filter_tests, offset_of_message_id
from pystore.put_waits import done
from pystore.recovery import RecoveryResult
from pystore.results import GetMessageResult, QueryMessageResult
from pystore.running_flags import RunningFlags
from pystore.schedule import ScheduleMessageService
from pystore.service import DiskUsage, disk_used_ratio, real_clock
from pystore.status import GetMessageStatus, PutMessageStatus
from pystore.wiring import StoreParts, Writer, close_writer, delete_store, open_parts, pool_enabled, wire_writer

__all__ = ["MessageStore"]

log = logging.getLogger(__name__)

_NEW, _LOADED, _STARTED, _SHUTDOWN = "new", "loaded", "started", "shutdown"

_NO_MATCHED = GetMessageStatus.NO_MATCHED_MESSAGE
_SLAVE = BrokerRole.SLAVE


def _not_available(msg: object) -> PutMessageResult:
    if not isinstance(msg, (Message, MessageBatch)):
        raise TypeError("expected a Message or MessageBatch, got %s" % type(msg).__name__)
    return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE)


def _part(holder: str, name: str) -> property:
    """A part of what load() opened (``_parts``) or of a started writer's services (``_writer``), None before:
    white-box tests reach for them."""
    return property(lambda self: getattr(getattr(self, holder), name, None))


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
        #: what load() opened; the read path reads three of its parts as attributes
        self._parts: StoreParts | None = None
        self._commitlog: CommitLog | None = None
        self._cq_store: ConsumeQueueStore | None = None
        self._limits: ReadLimits | None = None
        #: a started writer's services (pystore.wiring.Writer); ``_services`` are those still to stop
        self._writer: Writer | None = None
        self._services: list[Any] = []
        self.schedule_message_service: ScheduleMessageService | None = None
        self.last_exit_ok = True
        self.recovery: RecoveryResult | None = None
        #: why ``load()`` returned False, when a file is at fault (``MessageStore.open`` raises it)
        self.load_error: StoreCorruptedError | None = None
        self.boot_timestamp = self.clock()
        self._arrivals: Arrivals | None = None
        self._read_offsets: ConsumerOffsets | None = None

    _checkpoint, _index, _dispatcher, _reput = (_part("_parts", n) for n in ("checkpoint", "index", "dispatcher", "reput"))
    _ha, _ha_client, _flush_service, _allocate, _pool = (
        _part("_writer", n) for n in ("ha", "ha_client", "flush_service", "allocate", "pool"))

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
                                                clock=self.clock, injected_clock=self._injected_clock)
        except BaseException:
            self._release_after_failure()
            raise
        if parts is None:
            self._release_after_failure()
            return False
        self._parts, self.recovery = parts, parts.recovery
        self._commitlog, self._cq_store, self._limits = parts.commitlog, parts.cq_store, parts.limits
        self._bind_fast_paths()
        self._state = _LOADED
        return True

    def _bind_fast_paths(self) -> None:
        """The one place where instance attributes replace methods, so that the common calls cost one call
        into C and no Python frame (a put is measured in hundreds of nanoseconds):

        * ``put_message``, ``put_messages``: the commit log's compiled methods, which refuse with
          SERVICE_NOT_AVAILABLE themselves while the store is not started, read-only or shut down;
        * ``get_message``, ``look_message_by_offset`` on a writer: a ``_read.QueueReader``'s
          (``_bind_get_fast_path``), which hands every call it does not serve back to this class's methods.

        The methods below are what the bound ones do, and what runs before ``load``, in a read-only store (for
        reads) and in a subclass that overrides them."""
        cl = self._commitlog
        assert cl is not None
        if type(self).put_message is MessageStore.put_message:
            self.put_message = cl.put_message  # type: ignore[method-assign]
        if type(self).put_messages is MessageStore.put_messages:
            self.put_messages = cl.put_messages  # type: ignore[method-assign]
        if not self.read_only:
            self._bind_get_fast_path()

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
        ``_read.QueueReader``'s, which hands every other call back to this class's. Only for a writable
        ``MessageStore`` itself: a read-only store refreshes its view first, and a subclass may change any
        helper these methods use, so it keeps the Python methods."""
        if type(self) is not MessageStore:
            return
        assert self._commitlog is not None and self._cq_store is not None and self._limits is not None
        self._reader = QueueReader(self._cq_store._queues, self._commitlog.queue, self._limits, self.running_flags,
                                   RunningFlags.NOT_READABLE_BIT, self.config, _SLAVE, MessageStore, self)
        self.get_message = self._reader.get_message  # type: ignore[method-assign]
        self.look_message_by_offset = self._reader.look_message_by_offset  # type: ignore[method-assign]

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
        if self._arrivals is not None:
            self._arrivals.wake_all()
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
        if self._state in (_NEW, _SHUTDOWN) or self._commitlog is None:
            raise StoreClosedError("the store at %s is %s" % (self.root, self._state))
        return self._commitlog

    def _followed(self) -> CommitLog:
        """The commit log, once a read-only store followed its writer (``refresh``)."""
        cl = self._check_readable()
        if self.read_only:
            self.refresh()
        return cl

    # -- writing ---------------------------------------------------------------------------------------------

    def put_message(self, msg: Message) -> PutMessageResult:
        """Store one message; a refused put returns a status (``TypeError`` only for a non-``Message``).
        Once loaded, the commit log's compiled method answers instead (``_bind_fast_paths``)."""
        cl = self._commitlog
        return _not_available(msg) if cl is None else cl.put_message(msg)

    def put_messages(self, batch: MessageBatch) -> PutMessageResult:
        """Store a ``MessageBatch``: consecutive queue offsets, one lock hold, never split across files."""
        cl = self._commitlog
        return _not_available(batch) if cl is None else cl.put_messages(batch)

    def async_put_message(self, msg: Message) -> Future[PutMessageResult]:
        """Like ``put_message``, returning a ``Future``; with SYNC_FLUSH it completes once the message is on
        disk (the group commit service completes it)."""
        cl = self._commitlog
        return done(_not_available(msg)) if cl is None else self._waited(cl.append_message(msg), msg)

    def async_put_messages(self, batch: MessageBatch) -> Future[PutMessageResult]:
        cl = self._commitlog
        return done(_not_available(batch)) if cl is None else self._waited(cl.append_messages(batch), batch)

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

    # -- reading the commit log ------------------------------------------------------------------------------

    def look_message_by_offset(self, commit_log_offset: int) -> MessageExt | None:
        """The message stored at ``commit_log_offset``, or None if no message starts there."""
        cl = self._check_readable()
        if self.read_only and (commit_log_offset >= cl.get_max_offset()
                               or cl.queue.find_mapped_file_by_offset(commit_log_offset) is None):
            self.refresh()
        return cl.look_message_by_offset(commit_log_offset)

    def view_message_by_id(self, msg_id: str) -> MessageExt | None:
        """The message with this offset message id (store host + port + commit-log offset, hex)."""
        return self.look_message_by_offset(offset_of_message_id(msg_id))

    def get_min_phy_offset(self) -> int:
        return self._check_readable().get_min_offset()

    def get_max_phy_offset(self) -> int:
        return self._followed().get_max_offset()

    def get_commit_log_data(self, offset: int) -> SelectMappedBufferResult | None:
        """A read-only view of the commit log from ``offset`` to the end of written data in its file; it
        holds the file until ``release()`` or the end of its ``with`` block."""
        return self._check_readable().select_data(offset)

    def get_topic_queue_table(self) -> dict[tuple[str, int], int]:
        """``{(topic, queue_id): next queue offset}`` (a read-only store follows the writer first)."""
        return self._followed().get_topic_queue_table()

    def dispatch_behind_bytes(self, _internal: bool = False) -> int:
        """How far the consume queues lag the commit log, in bytes: 0 with inline dispatch (ASYNC_FLUSH);
        with SYNC_FLUSH, the flushed bytes not dispatched yet."""
        if not _internal:
            self._check_readable()
        cl, reput, w = self._commitlog, self._reput, self._writer
        if cl is None or reput is None or self.read_only or (w is not None and w.inline_dispatch):
            return 0
        end = cl.queue.flushed_where if w is None else w.dispatch_end(cl)
        return max(0, end - reput.reput_from)

    # -- reading by queue ------------------------------------------------------------------------------------

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
            cq = self._parts.refresh_queue_read_only(topic, queue_id)  # type: ignore[union-attr]
        return cq

    def get_message(self, group: str, topic: str, queue_id: int, offset: int, max_msg_nums: int = 32,
                    message_filter: MessageFilter | TagFilter | str | None = None,
                    timeout_ms: int = 0) -> GetMessageResult:
        """Up to ``max_msg_nums`` messages of (topic, queue_id) from queue offset ``offset``, with RocketMQ's
        statuses and next-offset rules (docs/format.md §11.1). With ``timeout_ms > 0``, a get that finds nothing at
        the queue's end waits up to that long for a message to arrive there (``pystore.arrival``).

        Always a ``GetMessageResult`` (RocketMQ's null has no place in docs/api.md's signature): a store that is
        not loaded or is shut down raises ``StoreClosedError``, as every read does, and one whose running
        flags say not readable raises ``StoreError``; a put in either case answers ``SERVICE_NOT_AVAILABLE``
        instead, because a refused put is a status (docs/api.md)."""
        return self._get(group, topic, queue_id, offset, max_msg_nums, message_filter, timeout_ms)

    def _get(self, group: str, topic: str, queue_id: int, offset: int, max_msg_nums: int,
             message_filter: MessageFilter | TagFilter | str | None, timeout_ms: int,
             limits_of: Callable[[ReadLimits], ReadLimits] | None = None) -> GetMessageResult:
        """``get_message``, with the transfer caps ``limits_of(config's)`` (``get_columns`` lifts some)."""
        if timeout_ms:
            return self._wait_for_message(group, topic, queue_id, offset, max_msg_nums, message_filter, timeout_ms,
                                          limits_of)
        if not isinstance(offset, int) or not isinstance(max_msg_nums, int):
            raise TypeError("offset and max_msg_nums must be int")
        cq = self._queue(topic, queue_id, offset)
        if not self.running_flags.is_readable():
            raise StoreError("the store at %s is not readable (running flags %s)" % (self.root, self.running_flags))
        tag_codes, tag_names, filt = filter_tests(message_filter)
        queue = self._commitlog.queue                       # type: ignore[union-attr]
        assert self._limits is not None
        limits = self._limits if limits_of is None else limits_of(self._limits)
        slave = self.config.broker_role is _SLAVE
        # the decision table (an unknown queue too), the scan and the result, in C (_read.read_queue)
        # a writer's units point into what was written: one past it is damage (``queue``); a reader's view
        # may lag its queue's (another thread refreshed the queue meanwhile): it catches the commit log up
        # and looks again, under the refresh lock so that no refresh runs between the two
        r = read_queue(cq, offset, max_msg_nums, queue.files, queue.mapped_file_size, limits, tag_codes,
                       tag_names, filt, slave, None if self.read_only else queue)
        if cq is not None and self.read_only and r.status is _NO_MATCHED and r.next_begin_offset == offset:
            parts = self._parts
            assert parts is not None
            parts.refresh_queue_read_only(topic, queue_id)
            with parts.refresh_lock:
                r = read_queue(cq, offset, max_msg_nums, queue.files, queue.mapped_file_size, limits,
                               tag_codes, tag_names, filt, slave, queue)
        return r

    def _wait_for_message(self, group: str, topic: str, queue_id: int, offset: int, max_msg_nums: int,
                          message_filter: MessageFilter | TagFilter | str | None, timeout_ms: int,
                          limits_of: Callable[[ReadLimits], ReadLimits] | None) -> GetMessageResult:
        if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, int):
            raise TypeError("timeout_ms must be int, got %s" % type(timeout_ms).__name__)
        if timeout_ms < 0:
            raise ValueError("timeout_ms must be >= 0, got %d" % timeout_ms)
        def get() -> tuple[GetMessageResult, int]:
            r = self._get(group, topic, queue_id, offset, max_msg_nums, message_filter, 0, limits_of)
            return r, (self.get_max_offset_in_queue(topic, queue_id) if r.status is _NO_MATCHED else 0)
        return self._arrivals_of().wait_for(topic, timeout_ms, get, found_something)[0]

    # -- columns: the work is pystore.columns' ---------------------------------------------------------------

    def put_columns(self, topic: str, bodies: Any, queue_id: int = 0, keys: Any = None, tags: Any = None,
                    properties: Any = None, batch: bool = False) -> PutColumnsResult:
        """One message per body, stored as ``put_message`` (``batch``: ``put_messages``) would, to a refusal."""
        return columns.put_columns(self, topic, bodies, queue_id, keys, tags, properties, batch)

    def get_columns(self, group: str, topic: str, queue_id: int, offset: int, max_msg_nums: int = 1024,
                    message_filter: MessageFilter | TagFilter | str | None = None,
                    timeout_ms: int = 0) -> tuple[GetMessageStatus, int, Any]:
        """``get_message`` without its in-memory caps: ``(status, next_begin_offset, pyarrow.RecordBatch)``."""
        return columns.get_columns(self, group, topic, queue_id, offset, max_msg_nums, message_filter, timeout_ms)

    def queue_units(self, topic: str, queue_id: int, start: int = 0, count: int | None = None) -> Any:
        """A read-only numpy view of the consume-queue units from ``start``, to a file's end or ``count``."""
        return columns.queue_units(self, topic, queue_id, start, count)

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
        return 0 if cq is None else self._commitlog.queue_offset_by_time(cq, timestamp,  # type: ignore[union-attr]
                                                                         boundary == "lower")

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
        return -1 if cq is None else self.get_message_store_timestamp(topic, queue_id, cq.get_min_offset_in_queue())

    def get_message_store_timestamp(self, topic: str, queue_id: int, consume_queue_offset: int) -> int:
        """Store time of the message at that queue offset; -1 if there is none."""
        cq = self._queue(topic, queue_id, consume_queue_offset)
        if cq is None or consume_queue_offset < cq.get_min_offset_in_queue():
            return -1
        u = cq.unit(consume_queue_offset)
        return -1 if u is None else self._commitlog.unit_store_timestamp(*u[:2])  # type: ignore[union-attr]

    def get_message_total_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self._queue(topic, queue_id, fresh=True)
        return 0 if cq is None else cq.get_max_offset_in_queue() - cq.get_min_offset_in_queue()

    def query_message(self, topic: str, key: str, max_num: int = 32, begin: int = 0,
                      end: int = 2**63 - 1) -> QueryMessageResult:
        """Messages of ``topic`` whose keys (or ``UNIQ_KEY``) include ``key``, stored in [begin, end].

        At most ``config.max_msgs_num_batch`` (RocketMQ's ``maxMsgsNumBatch``, 64 by default) whatever
        ``max_num`` asks: a larger ``max_num`` is cut to it, with a warning logged once per store."""
        cl = self._check_readable()
        if not isinstance(topic, str) or not isinstance(key, str):
            raise TypeError("topic and key must be str")
        if self._index is None:
            return QueryMessageResult([], 0, 0)
        if self.read_only:
            self.refresh()
        return self._index.query_messages(cl, topic, key, max_num, begin, end)

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

    def _arrivals_of(self) -> Arrivals:
        self._check_readable()
        if self._arrivals is None:
            dispatcher = None if self.read_only else self._dispatcher
            self._arrivals = Arrivals(dispatcher, listeners_on=self.config.broker_role is not _SLAVE)
        return self._arrivals

    def add_arriving_listener(self, fn: ArrivingListener) -> None:
        """Call ``fn(topic, queue_id, logic_offset, tags_code, store_timestamp, filter_bit_map, properties)``
        after each message is dispatched to its consume queue (not on a slave; see ``pystore.arrival`` for the
        thread it runs on). A read-only store dispatches nothing: ``StoreError``."""
        if self.read_only:
            raise StoreError("%s is open read-only: it dispatches no message to listen to" % self.root)
        self._arrivals_of().add_listener(fn)

    def remove_arriving_listener(self, fn: ArrivingListener) -> None:
        """Stop calling ``fn``; ValueError if it was not added."""
        self._arrivals_of().remove_listener(fn)

    def _consumer_offsets(self) -> ConsumerOffsets:
        self._check_readable()
        if self.read_only:
            if self._read_offsets is None:
                self._read_offsets = ConsumerOffsets(self.config.config_path(), 0, self.get_min_offset_in_queue,
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
                 message_filter: MessageFilter | TagFilter | str | None = None, auto_commit: bool = True) -> Consumer:
        """A ``Consumer`` of ``topic`` for ``group`` (``pystore.consumer``)."""
        return Consumer(self, group, topic, queue_ids, message_filter, auto_commit)

    def is_os_page_cache_busy(self) -> bool:
        cl = self._commitlog
        return bool(cl is not None and cl.is_os_page_cache_busy())

    def refresh(self) -> None:
        """Read-only stores: pick up what the writer appended since (new files, the new end of data)."""
        if self.read_only and self._parts is not None:
            self._parts.refresh_read_only()

    def get_runtime_info(self) -> dict[str, str]:
        """Runtime figures under RocketMQ's key names where they apply."""
        cl = self._check_readable()
        return cl.runtime_info(self.boot_timestamp, self.clock(),
                               disk_used_ratio(self.disk_usage, self.config.commit_log_paths()[0]),
                               self.dispatch_behind_bytes())

    def __repr__(self) -> str:
        return "MessageStore(%r, %s%s)" % (self.root, self._state, ", read-only" if self.read_only else "")
