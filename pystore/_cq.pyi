"""Types of ``pystore._cq`` (compiled), partial: only ``GetMessageResult``, the public result of
``MessageStore.get_message`` (re-exported by ``pystore.results``), is typed. The rest of the module is
internal (consume-queue scans, dispatch) and stays untyped through ``__getattr__``.

``GetMessageResult`` is kept in step with ``_cq.pyx`` by ``tests/test_stubs.py`` (mypy's stubtest).
"""

from typing import final

from _typeshed import Incomplete

from pystore._message import MessageExt
from pystore.status import GetMessageStatus

def __getattr__(name: str) -> Incomplete: ...

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
