"""What reads return: ``GetMessageResult`` and ``QueryMessageResult`` (docs/api.md "Reading"); and
``PutColumnsResult``, what ``put_columns`` returns (defined with the column API, ``pystore.columns``).

``GetMessageResult`` is compiled (``_read``, where ``get_message`` builds it) because every pull makes one, as
the put-side results are (``_results``); ``QueryMessageResult`` is a plain object with slots.
"""

from __future__ import annotations

from pystore._message_ext import MessageExt
from pystore._read import GetMessageResult
from pystore.columns import PutColumnsResult

__all__ = ["GetMessageResult", "PutColumnsResult", "QueryMessageResult"]


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
