"""Status codes of puts, appends and reads (docs/format.md §6.5 and §11.1, RocketMQ 5.x spellings).

They are :class:`enum.IntEnum`s so the compiled put path can hand back the same member objects without
allocating; their values are private to pystore (RocketMQ's Java enums have no stable numbers).
"""

from __future__ import annotations

import enum

__all__ = ["PutMessageStatus", "AppendMessageStatus", "GetMessageStatus"]


class _Named(enum.IntEnum):
    """Prints as its name (``PUT_OK``), not as the private number IntEnum would show since Python 3.11."""

    def __str__(self) -> str:
        return self.name

    def __format__(self, spec: str) -> str:
        return format(self.name, spec) if not spec or spec[-1] not in "dxXobn" else int.__format__(self, spec)


class PutMessageStatus(_Named):
    PUT_OK = 0
    FLUSH_DISK_TIMEOUT = 1
    FLUSH_SLAVE_TIMEOUT = 2
    SLAVE_NOT_AVAILABLE = 3
    SERVICE_NOT_AVAILABLE = 4
    CREATE_MAPPED_FILE_FAILED = 5
    MESSAGE_ILLEGAL = 6
    PROPERTIES_SIZE_EXCEEDED = 7
    OS_PAGE_CACHE_BUSY = 8
    UNKNOWN_ERROR = 9
    # 5.x: RocketMQ 5's timer messages (pystore.timer): a slot over timer_congest_num_each_slot, a timer
    # property that is not a delay the store takes, a timer message while timer_wheel_enable is off
    WHEEL_TIMER_FLOW_CONTROL = 10
    WHEEL_TIMER_MSG_ILLEGAL = 11
    WHEEL_TIMER_NOT_ENABLE = 12


class AppendMessageStatus(_Named):
    PUT_OK = 0
    END_OF_FILE = 1
    MESSAGE_SIZE_EXCEEDED = 2
    PROPERTIES_SIZE_EXCEEDED = 3
    UNKNOWN_ERROR = 4


class GetMessageStatus(_Named):
    FOUND = 0
    NO_MATCHED_MESSAGE = 1
    MESSAGE_WAS_REMOVING = 2
    OFFSET_FOUND_NULL = 3
    OFFSET_OVERFLOW_BADLY = 4
    OFFSET_OVERFLOW_ONE = 5
    OFFSET_TOO_SMALL = 6
    NO_MATCHED_LOGIC_QUEUE = 7
    NO_MESSAGE_IN_QUEUE = 8
