"""What reads return: ``GetMessageResult`` and ``QueryMessageResult`` (docs/api.md "Reading"); and
``PutColumnsResult``, what ``put_columns`` returns (docs/api.md "Columns").

``GetMessageResult`` is compiled (``_read``, where ``get_message`` builds it) because every pull makes one, as
the put-side results are (``_results``); ``QueryMessageResult`` is a plain object with slots.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pystore.message._message_ext import MessageExt
from pystore.read._read import GetMessageResult

if TYPE_CHECKING:
    import numpy as np

    from pystore.status import PutMessageStatus

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


class PutColumnsResult:
    """What ``put_columns`` stored: ``status`` (the first refusal; else the first failed wait of a stored
    message, such as FLUSH_DISK_TIMEOUT; else PUT_OK), ``count`` messages stored, and for each of them (numpy
    int64 arrays, in input order) its queue offset, commit-log offset and store time."""

    __slots__ = ("status", "count", "queue_offsets", "commit_log_offsets", "store_timestamps")

    def __init__(self, status: PutMessageStatus, queue_offsets: np.ndarray, commit_log_offsets: np.ndarray,
                 store_timestamps: np.ndarray) -> None:
        self.status = status
        self.count = len(queue_offsets)
        self.queue_offsets = queue_offsets
        self.commit_log_offsets = commit_log_offsets
        self.store_timestamps = store_timestamps

    def __repr__(self) -> str:
        return "PutColumnsResult(%s, count=%d)" % (self.status.name, self.count)
