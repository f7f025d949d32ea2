"""Types of ``pystore.read._queue_reader`` (compiled): the frameless reader of a store (internal), its live follow and
its long-polling wait. Kept in step with ``_queue_reader.pyx`` by ``tests/test_stubs.py`` (mypy's stubtest).
"""

from typing import Any, final

from pystore.message._message_ext import MessageExt
from pystore.read._read import GetMessageResult, ReadLimits
from pystore.system._notify import WakeWord

def follow_in_place(cq: Any, cl_files: list[Any]) -> int: ...
@final
class QueueReader:
    # Internal: MessageStore.get_message and look_message_by_offset without a Python frame (store.py binds them).
    open: bool
    @property
    def tail_reads(self) -> int: ...
    def __init__(
        self,
        queues: dict[tuple[str, int], Any],
        cl_queue: Any,
        lim: ReadLimits,
        flags: Any,
        not_readable_bit: int,
        config: Any,
        slave_role: Any,
        cls: type,
        store: Any,
        live: Any = None,
    ) -> None: ...
    def get_message(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_msg_nums: int = 32,
        message_filter: Any = None,
        timeout_ms: int = 0,
    ) -> GetMessageResult: ...
    def look_message_by_offset(self, commit_log_offset: int) -> MessageExt | None: ...
    def wait_message(
        self,
        wake: WakeWord,
        topic: str,
        queue_id: int,
        offset: int,
        max_msg_nums: int,
        spin_us: float,
        timeout_ms: float,
    ) -> GetMessageResult | None: ...
