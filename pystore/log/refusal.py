"""Why the store refuses a put, in words: :func:`refusal_reason` (the ``pystore put`` command and the Spark
writer say the same thing).

The put path answers a refusal with a status only (``MESSAGE_ILLEGAL`` is a bad topic, a body over
``max_message_size`` or a record larger than a commit-log file alike): keeping the reason out of the result
keeps the accepted put free of any extra work. The reason is derived afterwards, from the message and the
store's configuration, by the same checks in the same order as the put path (``_commitlog.pyx``
``CommitLog._put``, and ``Message`` for the topic and properties verdicts).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from pystore.format._codec import record_length
from pystore.format._props import properties_to_string
from pystore.message._message import Message
from pystore.message._message_batch import MessageBatch
from pystore.status import PutMessageStatus

if TYPE_CHECKING:
    from pystore.config import StoreConfig

__all__ = [
    "MAX_PROPERTIES_BYTES",
    "MAX_TOPIC_BYTES",
    "body_problem",
    "properties_problem",
    "refusal_reason",
    "refusal_reason_of",
    "topic_problem",
]

#: the put checks' limits (docs/format.md "pystore's choices"; ``_message.pyx`` holds the same numbers)
MAX_TOPIC_BYTES = 255
MAX_PROPERTIES_BYTES = 32767
TOPIC_CHARACTERS = "[%|a-zA-Z0-9_-]"

_END_FILE_MIN_BLANK = 8  # a commit-log file keeps room for its end-of-file blank

_STATUS_TEXT = {
    PutMessageStatus.SERVICE_NOT_AVAILABLE: "the store takes no puts now: it is read-only, a slave, not "
    "started or shut down, or its disk is full (`pystore inspect` shows the disk ratio)",
    PutMessageStatus.CREATE_MAPPED_FILE_FAILED: "a new commit-log file could not be created (disk full, or "
    "no permission; see the log)",
    PutMessageStatus.OS_PAGE_CACHE_BUSY: "the page cache is busy: a put held the lock longer than "
    "os_page_cache_busy_timeout_mills",
    PutMessageStatus.FLUSH_DISK_TIMEOUT: "stored, but the flush to disk did not finish within "
    "sync_flush_timeout",
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT: "stored, but the slave did not confirm it within slave_timeout",
    PutMessageStatus.SLAVE_NOT_AVAILABLE: "stored, but no slave is connected to replicate it",
    PutMessageStatus.UNKNOWN_ERROR: "the store failed unexpectedly (see the log)",
}


def _topic_ok_char(c: str) -> bool:
    return c.isascii() and (c.isalnum() or c in "%|_-")


def topic_problem(topic: str) -> str | None:
    """What is wrong with ``topic`` as a topic name (None when nothing is)."""
    n = len(topic.encode("utf-8", "surrogatepass"))
    if n == 0:
        return "topic is empty"
    if n > MAX_TOPIC_BYTES:
        return "topic %r is longer than %d bytes (%d)" % (topic[:40] + "...", MAX_TOPIC_BYTES, n)
    if not all(_topic_ok_char(c) for c in topic):
        return "topic %r has characters outside %s" % (topic, TOPIC_CHARACTERS)
    return None


def body_problem(size: int, max_message_size: int) -> str | None:
    """What is wrong with a body of ``size`` bytes under ``max_message_size`` (None when nothing is)."""
    if size > max_message_size:
        return "body of %d bytes is larger than max_message_size (%d)" % (size, max_message_size)
    return None


def properties_problem(size: int) -> str | None:
    """What is wrong with properties (tags and keys included) that encode to ``size`` bytes."""
    if size > MAX_PROPERTIES_BYTES:
        return "properties (tags and keys included) take %d bytes, more than the record format's %d" % (
            size,
            MAX_PROPERTIES_BYTES,
        )
    return None


def refusal_reason(msg: Message, config: StoreConfig, status: PutMessageStatus | None = None) -> str | None:
    """Why a store with ``config`` (a :class:`~pystore.config.StoreConfig`) refuses ``msg``, or refused it
    with ``status``; None when the message would be taken (or ``status`` is ``PUT_OK``).

    The checks run in the put path's order, so the first reason given is the one that refused the put.
    A status that is not about the message (a full disk, a busy page cache) is explained as such.
    """
    if status is PutMessageStatus.PUT_OK:
        return None
    if status is not None and status in _STATUS_TEXT:
        return _STATUS_TEXT[status]
    why = topic_problem(msg.topic)
    if why is None and msg.queue_id < 0:
        why = "queue id %d is negative" % msg.queue_id
    if why is None:
        why = properties_problem(len(properties_to_string(msg.properties).encode("utf-8")))
    if why is None:
        why = body_problem(len(msg.body), int(config.max_message_size))
    if why is None:
        # StoreConfig checks store_host into an (address, port) pair; tuple() copes with a list assigned since
        size = record_length(msg, cast("tuple[str, int]", tuple(config.store_host)))
        file_size = int(config.mapped_file_size_commit_log)
        if size + _END_FILE_MIN_BLANK > file_size:
            why = "the record (%d bytes) does not fit a commit-log file of %d bytes" % (size, file_size)
    if why is None and status is not None:
        # MESSAGE_ILLEGAL for a message that passes every check: another thread changed it during the put
        why = "the message changed while it was being stored (another thread modified it)"
    return why


_GENERIC = {
    PutMessageStatus.MESSAGE_ILLEGAL: "the message is not one the store takes: a bad topic, a body over "
    "max_message_size, or a record larger than a commit-log file",
    PutMessageStatus.PROPERTIES_SIZE_EXCEEDED: "properties (tags and keys included) take more than the record "
    "format's %d bytes" % MAX_PROPERTIES_BYTES,
}


def refusal_reason_of(what: Message | MessageBatch | str | None, config: StoreConfig | None,
                      status: PutMessageStatus) -> str | None:
    """``PutMessageResult.reason``: why a put of ``what`` (a message, a batch, or None when the result does not
    say) into a store with ``config`` ended with ``status``. For a batch, the first of its messages that is
    refused on its own, else what holds for the batch as a whole."""
    if status is PutMessageStatus.PUT_OK:
        return None
    if isinstance(what, str):
        return what             # a timer refusal: the put path kept its words (they depend on the put's clock)
    if status in _STATUS_TEXT or config is None:
        return _STATUS_TEXT.get(status) or _GENERIC.get(status) or status.name
    if isinstance(what, MessageBatch):
        for m in what.messages:
            why = refusal_reason(m, config)
            if why is not None:
                return why
        if status is PutMessageStatus.MESSAGE_ILLEGAL:
            return ("the batch's records do not fit a commit-log file of %d bytes (a batch never spans files)"
                    % int(config.mapped_file_size_commit_log))
        return _GENERIC.get(status) or status.name
    if isinstance(what, Message):
        return refusal_reason(what, config, status)
    return _GENERIC.get(status) or status.name
