"""The consumer side of ``MessageStore`` (docs/api.md "Consumers"): arrival listeners, committed offsets and
``Consumer`` objects, as a base class of the facade.

Which object holds a group's committed offsets depends on the process: a writer that runs the services
(a single writer, or the leader of several) keeps them in its ``Writer`` (flushed to
``config/consumerOffset.json`` by its service); a read-only store and a follower writer open their own
``ConsumerOffsets`` when first asked (a follower's commits go through the journal the leader folds in,
``pystore.consumer.offsets``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol, cast

from pystore.consumer.consumer import Consumer
from pystore.consumer.offsets import ConsumerOffsets
from pystore.errors import StoreClosedError, StoreError

if TYPE_CHECKING:
    from pystore.config import StoreConfig
    from pystore.engine.store import MessageStore
    from pystore.engine.wiring import Writer
    from pystore.log.commitlog import CommitLog
    from pystore.message.constants import MessageFilter, TagFilter
    from pystore.read.arrival import ArrivingListener
    from pystore.read.store_reads import StoreReads

__all__ = ["ConsumerSide", "STARTED"]

#: ``MessageStore``'s state once started (the only one in which a writer's offsets are open)
STARTED = "started"


class _Facade(Protocol):
    """What the methods below use of ``MessageStore`` (their ``self``)."""

    read_only: bool
    config: StoreConfig
    _reads: StoreReads
    _writer: Writer | None
    _read_offsets: ConsumerOffsets | None

    @property
    def root(self) -> str: ...
    @property
    def _state(self) -> str: ...
    @property
    def _follower(self) -> bool: ...
    def _not_leading(self) -> str: ...
    def _check_readable(self) -> CommitLog: ...
    def _consumer_offsets(self: _Facade) -> ConsumerOffsets: ...


class ConsumerSide:
    """What ``MessageStore`` offers consumers (a base class of the facade, whose state it uses)."""

    #: a read-only store's or a follower's committed offsets, read when first asked for (a leader's: ``_writer``)
    _read_offsets: ConsumerOffsets | None = None

    def add_arriving_listener(self: _Facade, fn: ArrivingListener) -> None:
        """Call ``fn(topic, queue_id, logic_offset, tags_code, store_timestamp, filter_bit_map, properties)`` after
        each dispatch to a consume queue (not on a slave; ``pystore.read.arrival``); read-only: ``StoreError``."""
        if self.read_only or self._follower:
            raise StoreError("%s: no message to listen to; this process %s" % (self.root, self._not_leading()))
        self._reads.arrivals().add_listener(fn)

    def remove_arriving_listener(self: _Facade, fn: ArrivingListener) -> None:
        self._reads.arrivals().remove_listener(fn)          # ValueError if it was not added

    def _consumer_offsets(self: _Facade) -> ConsumerOffsets:
        self._check_readable()
        if self.read_only or self._follower:
            offsets = self._read_offsets
            if offsets is None:
                offsets = self._read_offsets = ConsumerOffsets(
                    self.config.config_path(), 0, self._reads.get_min_offset_in_queue, read_only=True,
                    journal=self._follower)
            return offsets
        if self._writer is None or self._writer.offsets is None or self._state != STARTED:
            raise StoreClosedError("the store at %s is %s, not started" % (self.root, self._state))
        return self._writer.offsets

    def commit_offset(self: _Facade, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Record that ``group`` consumed (topic, queue_id) up to ``offset`` (the next offset it will read);
        persisted to ``config/consumerOffset.json`` every ``flush_consumer_offset_interval`` ms and at shutdown.
        ``StoreError`` on a read-only store. Several writers: ``ConsumerOffsets``' journal."""
        self._consumer_offsets().commit(group, topic, queue_id, offset)

    def fetch_offset(self: _Facade, group: str, topic: str, queue_id: int) -> int:
        """``group``'s committed offset of (topic, queue_id), at least the queue's min; -1 if never committed."""
        return self._consumer_offsets().fetch(group, topic, queue_id)

    def consumer(self: _Facade, group: str, topic: str, queue_ids: Iterable[int] | None = None,
                 message_filter: MessageFilter | TagFilter | str | None = None, auto_commit: bool = True,
                 spin_us: float = 0) -> Consumer:
        """A ``Consumer`` of ``topic`` for ``group`` (``pystore.consumer.consumer``)."""
        return Consumer(cast("MessageStore", self), group, topic, queue_ids, message_filter, auto_commit, spin_us,
                        arrivals=self._reads.arrivals())
