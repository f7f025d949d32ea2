"""Types of ``pystore.read._read`` (compiled): ``get_message``'s decision table and scan, and its result.

``GetMessageResult`` is public (the result of ``MessageStore.get_message``, re-exported by ``pystore.read.results``);
the rest is internal, typed for pystore's own modules. Kept in step with ``_read.pyx`` by ``tests/test_stubs.py``
(mypy's stubtest).
"""

from collections.abc import Collection
from typing import Any, final

from pystore.log._mapped_file import MappedFile
from pystore.message._message_ext import MessageExt
from pystore.queue._units import ConsumeQueueCore
from pystore.read._sink import RecordSink
from pystore.status import GetMessageStatus

@final
class ReadLimits:
    # Internal: the transfer caps of one get_message.
    bytes_in_memory: int
    count_in_memory: int
    bytes_in_disk: int
    count_in_disk: int
    memory_window: int
    check_crc: bool
    def __init__(
        self,
        bytes_in_memory: int,
        count_in_memory: int,
        bytes_in_disk: int,
        count_in_disk: int,
        memory_window: int,
        check_crc: bool = True,
    ) -> None: ...

@final
class GetMessageResult:
    # Every field is writable (cdef public), as RocketMQ's setters allow.
    status: GetMessageStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[MessageExt]
    buffer_total_size: int
    suggest_pulling_from_slave: bool
    def __init__(
        self,
        status: GetMessageStatus,
        next_begin_offset: int,
        min_offset: int,
        max_offset: int,
        messages: list[MessageExt] | None = None,
        buffer_total_size: int = 0,
        suggest_pulling_from_slave: bool = False,
    ) -> None: ...
    @property
    def message_count(self) -> int: ...

def read_queue(
    cq: ConsumeQueueCore | None,
    offset: int,
    max_msg_nums: int,
    cl_files: list[MappedFile],
    cl_file_size: int,
    lim: ReadLimits,
    tag_codes: Collection[int] | None,
    tag_names: Collection[str] | None,
    filt: Any,
    keep_offset: bool,
    cl_queue: Any = None,
    sink: RecordSink | None = None,
) -> GetMessageResult: ...
