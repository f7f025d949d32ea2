"""Types of ``pystore.log._commitlog`` (compiled): the put path (``CommitLogCore``, held by its Python half
    ``pystore.log.commitlog.CommitLog`` as ``core``) and the topic-queue cells and inline-dispatch hook it works with. Internal to
pystore; typed so that its own modules type-check. The put lock is in ``pystore.log._put_lock``, the record readers
in ``pystore.log._records``.

Kept in step with ``_commitlog.pyx`` by ``tests/test_stubs.py`` (mypy's stubtest).
"""

from collections.abc import Callable
from typing import Any, Final, Literal, final, overload

from typing_extensions import disjoint_base

from pystore.log._mapped_file import MappedFile
from pystore.log._put_lock import PutMessageLock
from pystore.log._results import PutMessageResult
from pystore.log._shared_lock import SharedLock
from pystore.message._message import Message
from pystore.message._message_batch import MessageBatch
from pystore.status import PutMessageStatus

BUCKET_NAMES: Final[tuple[str, ...]]

@final
class QueueCell:
    @property
    def topic(self) -> str: ...
    @property
    def queue_id(self) -> int: ...
    next_offset: int
    consume_queue: Any  # the (topic, queue id)'s ConsumeQueue once dispatch made it, else None
    def __init__(self, topic: str, queue_id: int, next_offset: int = 0) -> None: ...

@final
class RecentCells:
    """The cells of the last (topic, queue id) pairs a compiled walk over records met (no Python API)."""

@disjoint_base
class Dispatcher:
    """Inline dispatch under the put lock; its methods are C only (``_dispatch.QueueDispatcher`` subclasses it)."""

@disjoint_base
class CommitLogCore:
    @property
    def file_size(self) -> int: ...
    max_message_size: int
    writeable: bool
    os_page_cache_busy_timeout: int
    roll_file: Callable[[int], MappedFile | None] | None
    ready: MappedFile | None
    files_owner: Any
    files_lock: PutMessageLock | None
    @property
    def ready_rolls(self) -> int: ...
    after_put: Callable[[PutMessageResult, Message | MessageBatch], PutMessageResult] | None
    delay_rewrite: Callable[[Message], Message | None] | None
    timer_rewrite: Callable[[Message], Message | tuple[PutMessageStatus, str]] | None
    flush_wakeup: Callable[[], object] | None
    flush_wake_c: bool
    put_cpu: int
    follow_put_cpu: bool
    wake_bytes: int
    dispatcher: Dispatcher | None
    clock: Callable[[], int] | None
    config: Any
    @property
    def put_times_total(self) -> int: ...
    @property
    def put_size_total(self) -> int: ...
    @property
    def put_failed_times(self) -> int: ...
    @property
    def put_max_ns(self) -> int: ...
    @property
    def cells_removed(self) -> int: ...
    def __init__(
        self,
        file_size: int,
        store_host: tuple[str, int] = ("127.0.0.1", 10911),
        max_message_size: int = 4194304,
        reentrant_lock: bool = False,
        os_page_cache_busy_timeout: int = 1000,
    ) -> None: ...
    def set_store_host(self, host: tuple[str, int]) -> None: ...
    @property
    def last_file(self) -> MappedFile | None: ...
    @last_file.setter
    def last_file(self, mf: MappedFile | None) -> None: ...
    @property
    def put_lock(self) -> PutMessageLock: ...
    @overload
    def get_cell(self, topic: str, queue_id: int, create: Literal[True] = True) -> QueueCell: ...
    @overload
    def get_cell(self, topic: str, queue_id: int, create: bool) -> QueueCell | None: ...
    def cells(self) -> list[QueueCell]: ...
    def remove_cell(self, topic: str, queue_id: int) -> QueueCell | None: ...
    def get_topic_queue_table(self) -> dict[tuple[str, int], int]: ...
    def is_os_page_cache_busy(self) -> bool: ...
    def lock_time_mills(self) -> int: ...
    def clear_flush_notified(self) -> None: ...
    def put_message(self, msg: Message) -> PutMessageResult: ...
    def put_messages(self, batch: MessageBatch) -> PutMessageResult: ...
    def append_message(self, msg: Message) -> PutMessageResult: ...
    def append_messages(self, batch: MessageBatch) -> PutMessageResult: ...
    def put_latency_buckets(self) -> dict[str, int]: ...
    @property
    def shared(self) -> SharedLock | None: ...
    shared_repair: Callable[[], object] | None
    @property
    def caught_up(self) -> int: ...
    @property
    def jumped(self) -> int: ...
    def share(self, lock: SharedLock | None, repair: Callable[[], object] | None) -> None: ...
    def catch_up(self, step: int = -1, wait: bool = True) -> int: ...
