"""The reads ``MessageStore`` serves in Python: by queue (``get_message`` and its long-polling wait, the
queue-offset and time queries) and by commit-log offset, each after the store's readability check and, on a
read-only store, after following the live writer as far as the read needs.

The scan, its decision table (RocketMQ's statuses and next-offset rules, docs/format.md §11.1) and the
result are ``_read.read_queue``'s, the one function the compiled fast path (``_queue_reader.QueueReader``, bound by
``MessageStore._attach_fast_paths``) also runs; that reader hands the calls it does not serve to
``StoreReads.get_message`` and ``look_message_by_offset`` directly; the wait is ``pystore.read.arrival``'s;
following the writer is ``pystore.engine.parts.StoreParts``' (a read-only store's compiled reader follows it in
C in the common case and hands the rest here). ``StoreReads`` gets the parts ``MessageStore.load`` opened (``attach``)
and the store's lifecycle as ``closed`` (None while readable, else the state that is not), never the store.
An offset argument is checked here (``offset_arg``): an integer of any type reads as its value, a float or str
raises ``TypeError`` rather than being truncated.

Thread-safety: any number of threads read at once; ``attach`` and ``closed`` are set by the lifecycle calls.
"""

from __future__ import annotations

import operator
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from pystore.config import BrokerRole, StoreConfig
from pystore.errors import StoreClosedError, StoreError
from pystore.message.constants import MessageFilter, TagFilter, filter_tests
from pystore.read._queue_reader import QueueReader
from pystore.read._read import ReadLimits, read_queue
from pystore.read.arrival import Arrivals, found_something
from pystore.read.results import GetMessageResult, QueryMessageResult
from pystore.status import GetMessageStatus
from pystore.system.running_flags import RunningFlags

if TYPE_CHECKING:
    from pystore.archive.archive import Archive
    from pystore.engine.parts import StoreParts
    from pystore.log._mapped_view import SelectMappedBufferResult
    from pystore.log.commitlog import CommitLog
    from pystore.message._message_ext import MessageExt
    from pystore.queue.consume_queue import ConsumeQueue
    from pystore.read._sink import RecordSink

__all__ = ["StoreReads", "offset_arg"]

_NO_MATCHED = GetMessageStatus.NO_MATCHED_MESSAGE
_TOO_SMALL = GetMessageStatus.OFFSET_TOO_SMALL
_SLAVE = BrokerRole.SLAVE

Filter = MessageFilter | TagFilter | str | None


def _unit_below(cq: ConsumeQueue, offset: int, local_min: int) -> bool:
    """Whether the unit at ``offset`` points below the local commit log (at an archived record)."""
    u = cq.unit(offset)
    return u is not None and u[0] < local_min


def offset_arg(value: int, name: str) -> int:
    """``value`` as an ``int`` when it is an integer (an ``int``, a bool as Python counts it, numpy's integers:
    anything with ``__index__``); ``TypeError`` for a float, str or anything else, which the scans below would
    otherwise truncate (1.5 read as 1) or compare as a number that no record starts at."""
    if type(value) is int:
        return value
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError("%s must be an int, got %s" % (name, type(value).__name__)) from None


class StoreReads:
    """The reads of one store (see the module docstring)."""

    def __init__(self, config: StoreConfig, running_flags: RunningFlags) -> None:
        self.config = config
        self.read_only = config.read_only
        self.running_flags = running_flags
        #: what ``MessageStore.load`` opened (None before)
        self.parts: StoreParts | None = None
        #: None while the store is readable (loaded or started), else its state ("new", "shutdown")
        self.closed: str | None = "new"
        self._arrivals: Arrivals | None = None
        #: the store's compiled reader (``MessageStore._attach_fast_paths``); a read-only store's waits use it
        self.reader: QueueReader | None = None

    def attach(self, parts: StoreParts) -> None:
        self.parts = parts

    def check(self) -> CommitLog:
        """The commit log of a readable store; ``StoreClosedError`` before ``load`` and after ``shutdown``."""
        parts = self.parts
        if self.closed is not None or parts is None:
            raise StoreClosedError("the store at %s is %s" % (self.config.store_path_root_dir, self.closed))
        return parts.commitlog

    def refresh(self) -> None:
        """A read-only store: pick up what the writer appended since (new files, the new end of data)."""
        if self.read_only and self.parts is not None:
            self.parts.refresh_read_only()

    def followed(self) -> CommitLog:
        """The commit log, once a read-only store followed its writer."""
        cl = self.check()
        self.refresh()
        return cl

    # -- the waits ---------------------------------------------------------------------------------------------

    def arrivals(self) -> Arrivals:
        """The store's listeners and waiting gets (``pystore.read.arrival``), made at the first use."""
        self.check()
        if self._arrivals is None:
            dispatcher = None if self.read_only else self.parts.dispatcher  # type: ignore[union-attr]
            self._arrivals = Arrivals(dispatcher, listeners_on=self.config.broker_role is not _SLAVE,
                                      root=self.config.store_path_root_dir if self.read_only else None,
                                      reader=self.reader if self.read_only else None)
        return self._arrivals

    def wake_waiters(self) -> None:
        """The store shuts down: every waiting get wakes (and its next get raises ``StoreClosedError``)."""
        if self._arrivals is not None:
            self._arrivals.wake_all()

    # -- by queue ----------------------------------------------------------------------------------------------

    def queue(self, topic: str, queue_id: int, need: int = -1, fresh: bool = False) -> ConsumeQueue | None:
        """The consume queue of (topic, queue_id); a read-only store first follows the writer (that queue and
        the commit log) if the queue is unknown, ``fresh`` is asked for, or ``need`` lies beyond what it has
        seen."""
        self.check()
        if not isinstance(topic, str):
            raise TypeError("topic must be str, got %s" % type(topic).__name__)
        if not isinstance(queue_id, int) or isinstance(queue_id, bool):
            raise TypeError("queue_id must be int, got %s" % type(queue_id).__name__)
        parts = self.parts
        assert parts is not None
        cq = parts.cq_store.find(topic, queue_id)
        if self.read_only and (cq is None or fresh or need >= cq.get_max_offset_in_queue()):
            cq = parts.refresh_queue_read_only(topic, queue_id)
        return cq

    def get_message(self, group: str, topic: str, queue_id: int, offset: int, max_msg_nums: int = 32,
                    message_filter: Filter = None, timeout_ms: int = 0,
                    limits_of: Callable[[ReadLimits], ReadLimits] | None = None,
                    sink: RecordSink | None = None) -> GetMessageResult:
        """``MessageStore.get_message``, with the transfer caps ``limits_of(config's)`` (``get_columns`` lifts
        some) and, given a ``sink`` (``get_columns``' Arrow decoder), the messages handed to it instead of the
        result. The compiled reader hands here every call it does not serve itself."""
        if timeout_ms:
            return self._wait(group, topic, queue_id, offset, max_msg_nums, message_filter, timeout_ms, limits_of,
                              sink)
        if not isinstance(offset, int) or not isinstance(max_msg_nums, int):
            raise TypeError("offset and max_msg_nums must be int")
        cq = self.queue(topic, queue_id, offset)
        if not self.running_flags.is_readable():
            raise StoreError("the store at %s is not readable (running flags %s)" % (self.config.store_path_root_dir,
                                                                                    self.running_flags))
        parts = self.parts
        assert parts is not None
        tag_codes, tag_names, filt = filter_tests(message_filter)
        queue = parts.commitlog.queue
        limits = parts.limits if limits_of is None else limits_of(parts.limits)
        slave = self.config.broker_role is _SLAVE
        # a writer's units point into what was written: one past it is damage (``queue``); a reader's view
        # may lag its queue's (another thread refreshed the queue meanwhile): it catches the commit log up
        # and looks again, under the refresh lock so that no refresh runs between the two
        archive = parts.archive
        if archive is not None and (cq is None or offset < cq.get_min_offset_in_queue()
                                    or _unit_below(cq, offset, parts.commitlog.get_min_offset())):
            local_min = parts.commitlog.get_min_offset()
            ra = archive.get_message(cq, topic, queue_id, offset, max_msg_nums, local_min, parts.commitlog, limits,
                                     tag_codes, tag_names, filt, slave, sink,
                                     lambda res: self._archive_bounds(res, cq, topic, queue_id, offset, slave))
            if ra is not None:
                return ra
        r = read_queue(None if cq is None else cq.core, offset, max_msg_nums, queue.files, queue.mapped_file_size, limits,
                       tag_codes, tag_names, filt, slave, None if self.read_only else queue, sink)
        if cq is not None and self.read_only and r.status is _NO_MATCHED and r.next_begin_offset == offset:
            parts.refresh_queue_read_only(topic, queue_id)
            with parts.refresh_lock:
                r = read_queue(cq.core, offset, max_msg_nums, queue.files, queue.mapped_file_size, limits,
                               tag_codes, tag_names, filt, slave, queue, sink)
        return r if archive is None else self._archive_bounds(r, cq, topic, queue_id, offset, slave)

    def _archive_bounds(self, r: GetMessageResult, cq: ConsumeQueue | None, topic: str, queue_id: int, offset: int,
                        slave: bool) -> GetMessageResult:
        """A result's bounds as the queue's, archive included: its min offset is the archive's when that is lower,
        its max the local queue's; an offset below both is too small, and the next read starts at the archive's
        first offset."""
        low = self.get_min_offset_in_queue(topic, queue_id)
        r.min_offset = low
        if cq is not None:
            r.max_offset = cq.get_max_offset_in_queue()
        if r.status is _TOO_SMALL and not slave:
            r.next_begin_offset = low
        return r

    def _wait(self, group: str, topic: str, queue_id: int, offset: int, max_msg_nums: int, message_filter: Filter,
              timeout_ms: int, limits_of: Callable[[ReadLimits], ReadLimits] | None,
              sink: RecordSink | None) -> GetMessageResult:
        """A get that waits up to ``timeout_ms`` for a message to arrive when it finds nothing at the queue's end
        (``Arrivals.wait_for`` calls the plain get again after each arrival in the topic: the one callback of
        the read path, as the wait's condition variable is the arrivals' own)."""
        if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, int):
            raise TypeError("timeout_ms must be int, got %s" % type(timeout_ms).__name__)
        if timeout_ms < 0:
            raise ValueError("timeout_ms must be >= 0, got %d" % timeout_ms)

        if (message_filter is None and limits_of is None and self.read_only and isinstance(offset, int)
                and isinstance(max_msg_nums, int)):
            r = self.arrivals().wait_queue(topic, queue_id, offset, max_msg_nums, timeout_ms)
            if r is not None:
                return r

        def get() -> tuple[GetMessageResult, int]:
            r = self.get_message(group, topic, queue_id, offset, max_msg_nums, message_filter, 0, limits_of, sink)
            return r, (self.get_max_offset_in_queue(topic, queue_id) if r.status is _NO_MATCHED else 0)
        return self.arrivals().wait_for(topic, timeout_ms, get, found_something)[0]

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.queue(topic, queue_id, fresh=True)
        return 0 if cq is None else cq.get_max_offset_in_queue()

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        """The queue's first offset; with an archive, the first it holds (archived, or local but for its record)."""
        cq = self.queue(topic, queue_id, fresh=True)
        local = 0 if cq is None else cq.get_min_offset_in_queue()
        archive = self.parts.archive if self.parts is not None else None
        if archive is None:
            return local
        low = archive.queue_min_offset(topic, queue_id)
        phy_low = archive.min_phy_offset()
        if cq is not None and phy_low >= 0:
            # a local file's units below the local min offset whose records the archive holds
            first = cq.queue.first()
            start = local if first is None else first.file_from_offset // 20
            u = cq.unit(start) if start < local else None
            if u is not None and u[0] >= phy_low:
                local = start
        if low < 0:
            return local
        return low if cq is None else min(low, local)

    def get_message_total_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.queue(topic, queue_id, fresh=True)
        return 0 if cq is None else cq.get_max_offset_in_queue() - cq.get_min_offset_in_queue()

    def get_commit_log_offset_in_queue(self, topic: str, queue_id: int, consume_queue_offset: int) -> int:
        consume_queue_offset = offset_arg(consume_queue_offset, "consume_queue_offset")
        cq = self.queue(topic, queue_id, consume_queue_offset)
        u = None if cq is None else cq.unit(consume_queue_offset)
        return 0 if u is None else u[0]

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp: int, boundary: str) -> int:
        if boundary not in ("lower", "upper"):
            raise ValueError("boundary must be 'lower' or 'upper', got %r" % (boundary,))
        cq = self.queue(topic, queue_id, fresh=True)
        archive = self.parts.archive if self.parts is not None else None
        if archive is not None:
            found = self._archive_offset_by_time(archive, cq, topic, queue_id, timestamp, boundary == "lower")
            if found is not None:
                return found
        return 0 if cq is None else self.check().queue_offset_by_time(cq, timestamp, boundary == "lower")

    def _archive_offset_by_time(self, archive: Archive, cq: ConsumeQueue | None, topic: str, queue_id: int,
                                timestamp: int, lower: bool) -> int | None:
        """``get_offset_in_queue_by_time`` when the answer lies in the archived offsets below the local ones (those
        whose records are local start at the local queue's min offset); None when the local search answers."""
        low = self.get_min_offset_in_queue(topic, queue_id)
        local_low = cq.get_min_offset_in_queue() if cq is not None else archive.queue_end(topic, queue_id)
        high = cq.get_max_offset_in_queue() if cq is not None else local_low
        if low >= local_low:
            return None
        if local_low < high:
            first_local = self.get_message_store_timestamp(topic, queue_id, local_low)
            if first_local >= 0 and (first_local < timestamp if lower else first_local <= timestamp):
                return None             # the answer is at or past the first local record
        found = archive.queue_offset_by_time(cq, topic, queue_id, low, local_low, timestamp, lower)
        if lower:
            return found if found < local_low else (local_low if local_low < high else high)
        return found if found >= low else 0

    def get_earliest_message_time(self, topic: str | None, queue_id: int | None) -> int:
        cl = self.check()
        if topic is None:
            archive = self.parts.archive if self.parts is not None else None
            first = archive.first_store_time() if archive is not None else -1
            if first >= 0:
                return first
            low = cl.get_min_offset()
            return -1 if low < 0 else cl.pickup_store_timestamp(low)
        if queue_id is None:
            raise TypeError("get_earliest_message_time needs a queue_id with a topic")
        cq = self.queue(topic, queue_id, fresh=True)
        if self.parts is not None and self.parts.archive is not None:
            return self.get_message_store_timestamp(topic, queue_id, self.get_min_offset_in_queue(topic, queue_id))
        return -1 if cq is None else self.get_message_store_timestamp(topic, queue_id, cq.get_min_offset_in_queue())

    def get_message_store_timestamp(self, topic: str, queue_id: int, consume_queue_offset: int) -> int:
        consume_queue_offset = offset_arg(consume_queue_offset, "consume_queue_offset")
        cq = self.queue(topic, queue_id, consume_queue_offset)
        archive = self.parts.archive if self.parts is not None else None
        if archive is not None and (cq is None or consume_queue_offset < cq.get_min_offset_in_queue()):
            # below the local records: the archived record's time (a unit kept locally, or the archive's)
            unit = archive.unit(cq, topic, queue_id, consume_queue_offset)
            return -1 if unit is None else archive.store_time(unit[0])
        if cq is None or consume_queue_offset < cq.get_min_offset_in_queue():
            return -1
        u = cq.unit(consume_queue_offset)
        return -1 if u is None else self.check().unit_store_timestamp(*u[:2])

    # -- the archive tier (pystore.archive) --------------------------------------------------------------------

    def archive_min_phy_offset(self) -> int:
        self.check()
        archive = self.parts.archive if self.parts is not None else None
        return -1 if archive is None else archive.min_phy_offset()

    def archive_info(self) -> dict[str, object]:
        cl = self.check()
        archive = self.parts.archive if self.parts is not None else None
        return {"uri": None} if archive is None else archive.info(cl.get_max_offset())

    # -- by commit-log offset and by key -----------------------------------------------------------------------

    def look_message_by_offset(self, commit_log_offset: int) -> MessageExt | None:
        """``MessageStore.look_message_by_offset``; the compiled reader hands here every call whose offset is not
        an exact ``int``."""
        cl = self.check()
        commit_log_offset = offset_arg(commit_log_offset, "commit_log_offset")
        if self.read_only and (commit_log_offset >= cl.get_max_offset()
                               or cl.queue.find_mapped_file_by_offset(commit_log_offset) is None):
            self.refresh()
        archive = self.parts.archive if self.parts is not None else None
        if archive is not None and 0 <= commit_log_offset < cl.get_min_offset():
            return archive.look_message(commit_log_offset)
        return cl.look_message_by_offset(commit_log_offset)

    def select_data(self, offset: int) -> SelectMappedBufferResult | None:
        """``MessageStore.get_commit_log_data``."""
        cl = self.check()
        return cl.select_data(offset_arg(offset, "offset"))

    def query_message(self, topic: str, key: str, max_num: int, begin: int, end: int) -> QueryMessageResult:
        cl = self.check()
        if not isinstance(topic, str) or not isinstance(key, str):
            raise TypeError("topic and key must be str")
        index = self.parts.index  # type: ignore[union-attr]
        if index is None:
            return QueryMessageResult([], 0, 0)
        self.refresh()
        archive = self.parts.archive  # type: ignore[union-attr]
        if archive is None:
            return index.query_messages(cl, topic, key, max_num, begin, end)
        # keys of messages below the local data: the archived index files no longer here, read through the archive
        local = {os.path.basename(f.mapped_file.file_name) for f in index.files}
        return index.query_messages(_WithArchive(self, cl), topic, key, max_num, begin, end,
                                    lambda k, n, b, e, out: archive.select_index(k, n, b, e, out, local))


class _WithArchive:
    """The commit log as ``query_message`` reads it with an archive: a record below the local data from there."""

    def __init__(self, reads: StoreReads, cl: CommitLog) -> None:
        self.reads = reads
        self.cl = cl

    def look_message_by_offset(self, offset: int) -> MessageExt | None:
        return self.reads.look_message_by_offset(offset)

    def pickup_store_timestamp(self, offset: int) -> int:
        if offset >= self.cl.get_min_offset():
            return self.cl.pickup_store_timestamp(offset)
        m = self.reads.look_message_by_offset(offset)
        return -1 if m is None else m.store_timestamp
