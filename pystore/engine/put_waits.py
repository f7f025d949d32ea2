"""What a put waits for once its record is in the commit log, before it returns (RocketMQ
``handleDiskFlush`` then ``handleHA``): with SYNC_FLUSH, the group commit's flush past the record
(``FLUSH_DISK_TIMEOUT`` after ``sync_flush_timeout``); with SYNC_MASTER, then a slave's acknowledgement
(``pystore.ha.master.ReplicaWait``). A message whose ``wait_store_msg_ok`` is false waits for neither (it
only wakes the group commit). Every status here counts as stored: the record stays whatever the wait says.

A blocking put runs ``after_put`` on the caller's thread (the commit log calls it, as its ``after_put``
hook, only when there is something to wait for: ASYNC_FLUSH on an ASYNC_MASTER keeps Python off the put
path); an async put gets a ``Future`` from ``complete_async``, completed by the group commit service and the
HA service's transfer thread.

A put to a store not loaded waits for nothing: it is refused at once with SERVICE_NOT_AVAILABLE
(:data:`NOT_LOADED` stands in for the commit log's puts until ``load``, :func:`not_available` answers the others).
"""

from __future__ import annotations

import logging
from concurrent.futures import Future
from typing import TYPE_CHECKING

from pystore.ha.master import ReplicaWait
from pystore.log._results import PutMessageResult
from pystore.log.flush import GroupCommitRequest, GroupCommitService
from pystore.message._message import Message
from pystore.message._message_batch import MessageBatch
from pystore.status import PutMessageStatus

if TYPE_CHECKING:
    from pystore.config import StoreConfig

__all__ = ["NOT_LOADED", "NotLoaded", "PutWaits", "done", "not_available"]

log = logging.getLogger(__name__)


def not_available(msg: object) -> PutMessageResult:
    """SERVICE_NOT_AVAILABLE for a put to a store not loaded; ``TypeError`` for what no put takes."""
    if not isinstance(msg, (Message, MessageBatch)):
        raise TypeError("expected a Message or MessageBatch, got %s" % type(msg).__name__)
    return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE)


class NotLoaded:
    """Where ``MessageStore``'s puts go before ``load``: SERVICE_NOT_AVAILABLE (a refused put is a status), as the
    commit log's compiled puts answer once the store is shut down."""

    __slots__ = ()

    @staticmethod
    def put_message(msg: Message) -> PutMessageResult:
        return not_available(msg)

    @staticmethod
    def put_messages(batch: MessageBatch) -> PutMessageResult:
        return not_available(batch)


NOT_LOADED = NotLoaded()


def done(result: PutMessageResult) -> Future[PutMessageResult]:
    """A future that already holds ``result``."""
    f: Future[PutMessageResult] = Future()
    f.set_result(result)
    return f


class PutWaits:
    """The waits of a started writer. ``group_commit``: the SYNC_FLUSH service, None with ASYNC_FLUSH;
    ``replicas``: the SYNC_MASTER wait, None on any other role."""

    def __init__(self, config: StoreConfig, group_commit: GroupCommitService | None, replicas: ReplicaWait | None,
                 name: str) -> None:
        self.config = config
        self.group_commit = group_commit
        self.replicas = replicas
        #: the store's folder, for the log
        self.name = name

    @property
    def blocking(self) -> bool:
        """Whether a blocking put has anything to wait for (else the commit log needs no ``after_put``)."""
        return self.group_commit is not None or self.replicas is not None

    def after_put(self, result: PutMessageResult, msg: Message | MessageBatch) -> PutMessageResult:
        """The commit log's ``after_put`` hook: ``result`` (a stored record) with the waits' verdict. With
        SYNC_MASTER the slave is asked even when the flush timed out: its verdict replaces the flush's (4.x)."""
        gc = self.group_commit
        if gc is not None:
            if not msg.wait_store_msg_ok:
                gc.wakeup()
                return result
            if not gc.sync(result.next_offset, self.config.sync_flush_timeout / 1000):
                log.warning("%s: the flush to offset %d failed or did not finish within %d ms", self.name,
                            result.next_offset, self.config.sync_flush_timeout)
                result = result.with_status(PutMessageStatus.FLUSH_DISK_TIMEOUT)
        if self.replicas is None or not msg.wait_store_msg_ok:
            return result
        return self.replicas.wait(result)

    def complete_async(self, result: PutMessageResult, msg: Message | MessageBatch) -> Future[PutMessageResult]:
        """A future of ``result`` (what the append returned) with the waits' verdict."""
        fut = self._flushed(result, msg)
        if self.replicas is None or not result.is_ok() or not msg.wait_store_msg_ok:
            return fut
        return self.replicas.after(fut)

    def _flushed(self, result: PutMessageResult, msg: Message | MessageBatch) -> Future[PutMessageResult]:
        gc = self.group_commit
        if gc is None:
            return done(result)
        if result.status is not PutMessageStatus.PUT_OK or not msg.wait_store_msg_ok:
            gc.wakeup()
            return done(result)
        fut: Future[PutMessageResult] = Future()
        # the service completes it, or its expiry thread after sync_flush_timeout (FLUSH_DISK_TIMEOUT)
        gc.put_request(GroupCommitRequest(result.next_offset, fut, result, self.config.sync_flush_timeout / 1000))
        return fut
