"""Message-level constants and filters: property names, sys-flag bits, the schedule topic, ``TagFilter``, and
the commit-log offset an offset message id names (``offset_of_message_id``).

Property names and sys-flag values are RocketMQ's (docs/format.md §1.6, §1.7, §10); filters follow
RocketMQ's ``MessageFilter``: a cheap test on the consume-queue tags code, then an exact test on the
decoded message.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol, runtime_checkable

from pystore.format._jstring import java_string_hash

__all__ = ["MessageConst", "SysFlag", "TagFilter", "MessageFilter", "SCHEDULE_TOPIC", "SUB_ALL", "filter_tests",
           "offset_of_message_id"]

#: Delay messages wait in this topic, queue ``level - 1`` (docs/format.md §10).
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
#: RocketMQ's "every tag" subscription expression.
SUB_ALL = "*"


def offset_of_message_id(msg_id: str) -> int:
    """The commit-log offset an offset message id names (store host + port + offset, in hex: 32 digits for an
    IPv4 host, 56 for IPv6)."""
    if not isinstance(msg_id, str):
        raise TypeError("msg_id must be str")
    if len(msg_id) not in (32, 56):
        raise ValueError("an offset message id has 32 (IPv4) or 56 (IPv6) hex digits, got %r" % msg_id)
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError:
        raise ValueError("not a hex message id: %r" % msg_id) from None
    return int.from_bytes(raw[-8:], "big", signed=True)


class MessageConst:
    """Names of the properties the store and RocketMQ's clients interpret."""

    KEYS = "KEYS"
    TAGS = "TAGS"
    WAIT = "WAIT"
    DELAY = "DELAY"
    RETRY_TOPIC = "RETRY_TOPIC"
    REAL_TOPIC = "REAL_TOPIC"
    REAL_QID = "REAL_QID"
    TRAN_MSG = "TRAN_MSG"
    PGROUP = "PGROUP"
    MIN_OFFSET = "MIN_OFFSET"
    MAX_OFFSET = "MAX_OFFSET"
    UNIQ_KEY = "UNIQ_KEY"
    ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
    RECONSUME_TIME = "RECONSUME_TIME"
    MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
    TRAN_PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"
    TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
    CLUSTER = "CLUSTER"
    KEY_SEPARATOR = " "


class SysFlag:
    """Bits of the record's SYSFLAG field (docs/format.md §1.6)."""

    COMPRESSED_FLAG = 0x1
    MULTI_TAGS_FLAG = 0x2
    TRANSACTION_NOT_TYPE = 0x0
    TRANSACTION_PREPARED_TYPE = 0x4
    TRANSACTION_COMMIT_TYPE = 0x8
    TRANSACTION_ROLLBACK_TYPE = 0xC
    TRANSACTION_TYPE_MASK = 0xC
    BORNHOST_V6_FLAG = 0x10
    STOREHOSTADDRESS_V6_FLAG = 0x20

    @staticmethod
    def transaction_value(sys_flag: int) -> int:
        return sys_flag & SysFlag.TRANSACTION_TYPE_MASK


@runtime_checkable
class MessageFilter(Protocol):
    """What ``get_message`` accepts as ``message_filter``."""

    def is_matched_by_consume_queue(self, tags_code: int) -> bool: ...

    def is_matched_by_commit_log(self, msg: object) -> bool: ...


class TagFilter:
    """RocketMQ's tag subscription: ``TagFilter("TagA || TagB")``; ``"*"``, ``""`` or ``None`` match every
    message; an iterable of tag strings works too.

    The consume-queue test compares tags hash codes (so two tags with one hash both pass it); the
    commit-log test then compares the tag strings. Immutable and thread-safe.
    """

    __slots__ = ("expression", "tags", "codes", "match_all")

    def __init__(self, expression: str | Iterable[str] | None = None) -> None:
        if expression is None or (isinstance(expression, str) and expression.strip() in ("", SUB_ALL)):
            tags: frozenset[str] = frozenset()
            self.expression = SUB_ALL
        elif isinstance(expression, str):
            tags = frozenset(t.strip() for t in expression.split("||") if t.strip())
            self.expression = expression
        else:
            items = list(expression)
            for t in items:
                if not isinstance(t, str):
                    raise TypeError("tags must be str, got %r" % (t,))
            tags = frozenset(t.strip() for t in items if t.strip())
            self.expression = " || ".join(sorted(tags)) if tags else SUB_ALL
        self.match_all = not tags or SUB_ALL in tags
        self.tags = tags
        self.codes = frozenset(java_string_hash(t) for t in tags)

    def is_matched_by_consume_queue(self, tags_code: int) -> bool:
        return self.match_all or tags_code in self.codes

    def is_matched_by_commit_log(self, msg: object) -> bool:
        return self.match_all or getattr(msg, "tags", None) in self.tags

    def __repr__(self) -> str:
        return "TagFilter(%r)" % self.expression


def filter_tests(message_filter: MessageFilter | TagFilter | str | None) -> tuple[Any, Any, Any]:
    """What ``get_message``'s scan tests for ``message_filter``: ``(tag codes, tag names, filter object)``.
    A ``TagFilter`` (or its expression) is tested in C by its codes, then its tag names; another filter's
    two methods are called; ``None`` or a match-all filter tests nothing."""
    if message_filter is None:
        return None, None, None
    if isinstance(message_filter, str):
        message_filter = TagFilter(message_filter)
    if isinstance(message_filter, TagFilter):
        if message_filter.match_all:
            return None, None, None
        return message_filter.codes, message_filter.tags, None
    if not (hasattr(message_filter, "is_matched_by_consume_queue") and hasattr(message_filter, "is_matched_by_commit_log")):
        raise TypeError("message_filter must be None, a TagFilter, or have is_matched_by_consume_queue "
                        "and is_matched_by_commit_log")
    return None, None, message_filter
