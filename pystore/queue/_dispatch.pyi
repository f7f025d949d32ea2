"""Types of ``pystore.queue._dispatch`` (compiled): records of the commit log turned into consume-queue units and
index entries.

Internal (typed for pystore's own modules). Kept in step with ``_dispatch.pyx`` by ``tests/test_stubs.py``
(mypy's stubtest).
"""

from collections.abc import Callable, Mapping
from typing import Any, final

from pystore.log._commitlog import CommitLogCore, Dispatcher
from pystore.log._mapped_file import MappedFile
from pystore.queue._units import ConsumeQueueCore
from pystore.system._notify import WakeWord

def queues_behind(
    cl_files: list[MappedFile],
    cl_file_size: int,
    from_offset: int,
    end_offset: int,
    queues: dict[tuple[str, int], ConsumeQueueCore],
    tails: bool = True,
    stored_before: int = 0,
    dispatched_end: int = 0,
) -> tuple[set[tuple[str, int]], int]: ...

@final
class QueueDispatcher(Dispatcher):
    @property
    def cells(self) -> CommitLogCore: ...
    create_queue: Callable[[str, int], Any]
    index: Any
    inline_index: bool
    last_store_ts: int
    schedule_topic: str
    arriving: Callable[[str, int, int, int, int, bytes], object] | None
    schedule_wake: Callable[[], object] | None
    wake: WakeWord | None
    def __init__(
        self,
        cells: CommitLogCore,
        create_queue: Callable[[str, int], Any],
        delay_levels: Mapping[int, int] | None = None,
        index: Any = None,
        schedule_topic: str = "SCHEDULE_TOPIC_XXXX",
    ) -> None: ...
    def reput(self, cl_files: list[MappedFile], cl_file_size: int, from_offset: int, end_offset: int) -> int: ...
    def reput_checked(
        self, cl_files: list[MappedFile], cl_file_size: int, from_offset: int, end_offset: int
    ) -> tuple[int, dict[tuple[str, int], int]]: ...
