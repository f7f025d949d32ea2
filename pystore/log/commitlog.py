"""The commit log: every message of every topic, in arrival order, in one ``MappedFileQueue``
(docs/format.md §1, §5; RocketMQ ``CommitLog``).

``CommitLog`` is the Python half of the commit log and holds the compiled half (``core``, a
``_commitlog.CommitLogCore``: what the store's puts, dispatch, the column put, the flush follow and the index
follow take): the core appends (checks, put lock, queue offsets, encode, roll); this half decides policy:
where the next file comes from (the queue, through the allocate service: the core's ``roll_file`` hook), the
min offset while the first file is being deleted, reads by offset, and keeping a read-only view in step with a
live writer. The core's fields and methods are reachable through the commit log under their own names.

Thread-safety: as ``CommitLogCore`` (puts from any thread) and ``MappedFileQueue`` (copy-on-write list).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Literal, overload

from pystore.format._codec import RECORD_BLANK
from pystore.log._commitlog import BUCKET_NAMES, CommitLogCore, Dispatcher, QueueCell
from pystore.log._mapped_file import MappedFile
from pystore.log._mapped_view import SelectMappedBufferResult
from pystore.log._put_lock import PutMessageLock
from pystore.log._records import message_at, scan_file
from pystore.log._results import PutMessageResult
from pystore.log.mapped_file_queue import MappedFileQueue
from pystore.message._message import Message
from pystore.message._message_batch import MessageBatch
from pystore.message._message_ext import MessageExt
from pystore.queue._timesearch import pickup_store_timestamp, queue_offset_by_time
from pystore.status import PutMessageStatus
from pystore.system.core_field import CoreField
from pystore.system.crashpoint import crashpoint

__all__ = ["CommitLog"]

log = logging.getLogger(__name__)


class CommitLog:
    # the core's fields (``_commitlog.pxd`` says what each is)
    file_size: CoreField[int] = CoreField()
    max_message_size: CoreField[int] = CoreField()
    writeable: CoreField[bool] = CoreField()
    os_page_cache_busy_timeout: CoreField[int] = CoreField()
    roll_file: CoreField[Callable[[int], MappedFile | None] | None] = CoreField()
    after_put: CoreField[Callable[[PutMessageResult, Message | MessageBatch], PutMessageResult] | None] = CoreField()
    delay_rewrite: CoreField[Callable[[Message], Message | None] | None] = CoreField()
    timer_rewrite: CoreField[Callable[[Message], Message | tuple[PutMessageStatus, str]] | None] = CoreField()
    flush_wakeup: CoreField[Callable[[], object] | None] = CoreField()
    flush_wake_c: CoreField[bool] = CoreField()
    put_cpu: CoreField[int] = CoreField()
    follow_put_cpu: CoreField[bool] = CoreField()
    wake_bytes: CoreField[int] = CoreField()
    dispatcher: CoreField[Dispatcher | None] = CoreField()
    clock: CoreField[Callable[[], int] | None] = CoreField()
    config: CoreField[Any] = CoreField()
    put_times_total: CoreField[int] = CoreField()
    put_size_total: CoreField[int] = CoreField()
    put_failed_times: CoreField[int] = CoreField()
    put_max_ns: CoreField[int] = CoreField()
    cells_removed: CoreField[int] = CoreField()
    last_file: CoreField[MappedFile | None] = CoreField()
    put_lock: CoreField[PutMessageLock] = CoreField()

    def __init__(self, config: Any, queue: MappedFileQueue, clock: Any = None) -> None:
        #: the compiled half: what the compiled code that puts or follows the puts takes
        self.core = CommitLogCore(queue.mapped_file_size, config.store_host, config.max_message_size,
                                  config.use_reentrant_lock_when_put_message, config.os_page_cache_busy_timeout_mills)
        self.config = config
        self.queue = queue
        # blocks allocated ahead of the writer: in the files loaded, and in those the queue creates inline
        queue.window = config.prefault_window_bytes
        for mf in queue.files:
            mf.window = queue.window
        self.clock = clock
        # the core's one call back here: a roll with no file ready (the allocate service keeps one in
        # ``core.ready``, which the roll publishes into the queue's list itself, under the list's lock)
        self.roll_file = self._roll_file
        self.core.files_owner = queue
        self.core.files_lock = queue._lock
        #: read-only: where recovery found damage (-1: none); a refresh never reads past it
        self.damage_fence = -1

    def _roll_file(self, next_offset: int) -> MappedFile | None:
        crashpoint("commitlog.roll")
        return self.queue.get_last_mapped_file(next_offset, True)

    # -- the core's puts and topic-queue table ---------------------------------------------------------------

    def put_message(self, msg: Message) -> PutMessageResult:
        return self.core.put_message(msg)

    def put_messages(self, batch: MessageBatch) -> PutMessageResult:
        return self.core.put_messages(batch)

    def append_message(self, msg: Message) -> PutMessageResult:
        """``put_message`` without the ``after_put`` waits (the async put adds them)."""
        return self.core.append_message(msg)

    def append_messages(self, batch: MessageBatch) -> PutMessageResult:
        return self.core.append_messages(batch)

    def set_store_host(self, host: tuple[str, int]) -> None:
        self.core.set_store_host(host)

    @overload
    def get_cell(self, topic: str, queue_id: int, create: Literal[True] = True) -> QueueCell: ...
    @overload
    def get_cell(self, topic: str, queue_id: int, create: bool) -> QueueCell | None: ...
    def get_cell(self, topic: str, queue_id: int, create: bool = True) -> QueueCell | None:
        return self.core.get_cell(topic, queue_id, create)

    def cells(self) -> list[QueueCell]:
        return self.core.cells()

    def remove_cell(self, topic: str, queue_id: int) -> QueueCell | None:
        return self.core.remove_cell(topic, queue_id)

    def get_topic_queue_table(self) -> dict[tuple[str, int], int]:
        return self.core.get_topic_queue_table()

    def is_os_page_cache_busy(self) -> bool:
        return self.core.is_os_page_cache_busy()

    def lock_time_mills(self) -> int:
        return self.core.lock_time_mills()

    def clear_flush_notified(self) -> None:
        self.core.clear_flush_notified()

    def put_latency_buckets(self) -> dict[str, int]:
        return self.core.put_latency_buckets()

    def attach_last(self) -> None:
        """After loading or recovery: appends continue in the queue's last file."""
        self.last_file = self.queue.last()

    # -- offsets -----------------------------------------------------------------------------------

    def get_min_offset(self) -> int:
        """Offset of the first byte still readable; -1 for an empty log. While the first file is being
        deleted it already counts as gone (RocketMQ)."""
        first = self.queue.first()
        if first is None:
            return -1
        if not first.available:
            return self.queue.roll_next_file(first.file_from_offset)
        return first.file_from_offset

    def get_max_offset(self) -> int:
        return self.queue.get_max_offset()

    def roll_next_file(self, offset: int) -> int:
        return self.queue.roll_next_file(offset)

    @property
    def flushed_where(self) -> int:
        return self.queue.flushed_where

    # -- reading -----------------------------------------------------------------------------------

    def look_message_by_offset(self, offset: int) -> MessageExt | None:
        return message_at(self.queue.files, self.queue.mapped_file_size, offset, self.config.check_crc_on_read)

    def select_data(self, offset: int) -> SelectMappedBufferResult | None:
        """``MessageStore.get_commit_log_data``: a view from ``offset`` to the end of the data in its file."""
        mf = self.queue.find_mapped_file_by_offset(offset, offset == 0)
        if mf is None or offset - mf.file_from_offset >= mf.read_position:
            return None
        return mf.select_mapped_buffer(offset - mf.file_from_offset)

    def pickup_store_timestamp(self, offset: int) -> int:
        """RocketMQ ``pickupStoreTimestamp``: the store time of the record at ``offset``, -1 if none."""
        return pickup_store_timestamp(self.queue.files, self.queue.mapped_file_size, offset)

    def unit_store_timestamp(self, offset: int, size: int) -> int:
        """The store time of the record a consume-queue unit (``offset``, ``size``) points at; -1 if none."""
        return int(pickup_store_timestamp(self.queue.files, self.queue.mapped_file_size, offset, size))

    def queue_offset_by_time(self, cq: Any, timestamp: int, lower: bool) -> int:
        """``MessageStore.get_offset_in_queue_by_time`` on consume queue ``cq`` (a ``ConsumeQueue``), whose units
        point here."""
        return int(queue_offset_by_time(cq.core, self.queue.files, self.queue.mapped_file_size, timestamp, lower))

    def runtime_info(self, boot_timestamp: int, now: int, disk_ratio: float, dispatch_behind: int) -> dict[str, str]:
        """``MessageStore.get_runtime_info``: the put figures under RocketMQ's key names, with the store's own."""
        up = max(0, now - boot_timestamp) // 1000
        times = max(1, self.put_times_total)
        return {
            "bootTimestamp": str(boot_timestamp),
            "runtime": "[ %d days, %d hours, %d minutes, %d seconds ]" % (
                up // 86400, up // 3600 % 24, up // 60 % 60, up % 60),
            "putMessageTimesTotal": str(times),
            "putMessageSizeTotal": str(self.put_size_total),
            "putMessageAverageSize": "%.1f" % (self.put_size_total / times),
            "putMessageEntireTimeMax": str(self.put_max_ns // 1_000_000),
            "putMessageFailedTimes": str(self.put_failed_times),
            "putMessageDistributeTime": " ".join(
                "[%s]:%d" % (k, v) for k, v in zip(BUCKET_NAMES, self.put_latency_buckets().values())),
            "commitLogMinOffset": str(self.get_min_offset()),
            "commitLogMaxOffset": str(self.get_max_offset()),
            "commitLogDiskRatio": "%.4f" % disk_ratio,
            "dispatchBehindBytes": str(dispatch_behind),
            "pageCacheLockTimeMills": str(self.lock_time_mills()),
        }

    # -- following a live writer (read-only) ------------------------------------------------------

    def refresh_read_only(self) -> None:
        """Map files the writer created, drop deleted ones, and move each file's read position to the end
        of its whole records (a reader never sees a half-written record). Every file not known to end with
        its blank is scanned from where its whole records were seen to end: new files (mapped with nothing
        readable) as well as the last one, and any the writer rolled past since. After a read-only recovery
        stopped at damage (``damage_fence``) the view widens past it only once the record there is whole (a
        live writer's record in flight when the reader opened)."""
        fence = self.damage_fence
        if fence >= 0:
            mf = self.queue.find_mapped_file_by_offset(fence)
            if mf is not None and scan_file(mf, fence - mf.file_from_offset, True, -1)[0] > fence - mf.file_from_offset:
                self.damage_fence = fence = -1
        files = self.queue.refresh(fence)
        if not files:
            return
        for mf in files:
            if mf.read_position == mf.file_size and mf is not files[-1]:
                continue
            start = 0 if mf.read_position == mf.file_size else mf.read_position
            limit = fence - mf.file_from_offset if 0 <= fence - mf.file_from_offset < mf.file_size else -1
            end, reason, _, _ = scan_file(mf, start, False, limit)
            mf.set_positions(mf.file_size if reason == RECORD_BLANK and limit < 0 else end)
        self.queue.trim_unused_tail()
