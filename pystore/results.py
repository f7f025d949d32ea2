"""What reads return: ``GetMessageResult`` and ``QueryMessageResult`` (API.md "Reading").

Plain objects with slots; the put-side results (``PutMessageResult``, ``AppendMessageResult``) are compiled
(``_results``) because every put makes one.
"""

from __future__ import annotations

from pystore._message import MessageExt
from pystore.status import GetMessageStatus

__all__ = ["GetMessageResult", "QueryMessageResult"]


class GetMessageResult:
    """``status, next_begin_offset, min_offset, max_offset, messages, message_count, buffer_total_size``,
    and ``suggest_pulling_from_slave`` (RocketMQ: the pull is far behind, in data not in memory)."""

    __slots__ = ("status", "next_begin_offset", "min_offset", "max_offset", "messages", "buffer_total_size",
                 "suggest_pulling_from_slave")

    def __init__(self, status: GetMessageStatus, next_begin_offset: int, min_offset: int, max_offset: int,
                 messages: list[MessageExt] | None = None, buffer_total_size: int = 0,
                 suggest_pulling_from_slave: bool = False) -> None:
        self.status = status
        self.next_begin_offset = next_begin_offset
        self.min_offset = min_offset
        self.max_offset = max_offset
        self.messages = messages if messages is not None else []
        self.buffer_total_size = buffer_total_size
        self.suggest_pulling_from_slave = suggest_pulling_from_slave

    @property
    def message_count(self) -> int:
        return len(self.messages)

    def __repr__(self) -> str:
        return ("GetMessageResult(status=%s, next_begin_offset=%d, min_offset=%d, max_offset=%d, message_count=%d, "
                "buffer_total_size=%d)" % (self.status.name, self.next_begin_offset, self.min_offset,
                                           self.max_offset, self.message_count, self.buffer_total_size))


class QueryMessageResult:
    """Messages found by key, and the index's last update time and commit-log offset."""

    __slots__ = ("messages", "index_last_update_timestamp", "index_last_update_phyoffset")

    def __init__(self, messages: list[MessageExt], index_last_update_timestamp: int,
                 index_last_update_phyoffset: int) -> None:
        self.messages = messages
        self.index_last_update_timestamp = index_last_update_timestamp
        self.index_last_update_phyoffset = index_last_update_phyoffset

    @property
    def message_count(self) -> int:
        return len(self.messages)

    @property
    def buffer_total_size(self) -> int:
        return sum(m.store_size for m in self.messages)

    def __repr__(self) -> str:
        return "QueryMessageResult(%d messages, index_last_update_timestamp=%d, index_last_update_phyoffset=%d)" % (
            len(self.messages), self.index_last_update_timestamp, self.index_last_update_phyoffset)
