"""The cleaning side of ``MessageStore`` (docs/api.md "Operating"): cleaning passes run now, and the removal of
whole queues, as a base class of the facade. The work is ``pystore.engine.clean``'s; this holds who may ask
for it: a started writer that runs the services (a single writer, or the leader of several), and, for whole
queues, only while no other writer has the store open.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from pystore.engine.store_consumers import STARTED
from pystore.errors import StoreClosedError, StoreError

if TYPE_CHECKING:
    from pystore.engine.clean import CleanService
    from pystore.engine.shared_writers import SharedWriting
    from pystore.engine.wiring import Writer

__all__ = ["CleaningSide"]


class _Facade(Protocol):
    """What the methods below use of ``MessageStore`` (their ``self``)."""

    read_only: bool
    _writer: Writer | None
    _shared: SharedWriting | None

    @property
    def root(self) -> str: ...
    @property
    def _state(self) -> str: ...
    @property
    def _follower(self) -> bool: ...
    def _not_leading(self) -> str: ...
    def _check_writable_service(self) -> CleanService: ...
    def _check_queues_removable(self) -> CleanService: ...


class CleaningSide:
    """What ``MessageStore`` offers to clean now (a base class of the facade, whose state it uses)."""

    def execute_delete_files_manually(self: _Facade) -> None:
        """Make the next cleaning passes (20, as RocketMQ) delete expired commit-log files at any hour."""
        self._check_writable_service().commit_log.execute_delete_files_manually()

    def clean_files(self: _Facade) -> tuple[int, int]:
        """Run one cleaning pass now (pystore): (commit-log files deleted, consume-queue and index files deleted)."""
        return self._check_writable_service().run_once()

    def clean_expired_consumer_queue(self: _Facade) -> list[tuple[str, int]]:
        """Destroy the queues whose messages are all below the log's min offset; the (topic, queue id)s removed."""
        return self._check_queues_removable().expired_consumer_queues()

    def clean_unused_topic(self: _Facade, keep: set[str]) -> list[tuple[str, int]]:
        """Destroy the queues of topics not in ``keep`` (system topics stay); the (topic, queue id)s removed."""
        return self._check_queues_removable().unused_topics(keep)

    def _check_queues_removable(self: _Facade) -> CleanService:
        """Whole queues are destroyed only with no other writer process open: a queue made again under the same
        name after its removal would be hidden from them (each keeps its mapping of the destroyed queue's
        files), and so would every message put into it, by them too, until they open the store again."""
        clean = self._check_writable_service()
        if self._shared is not None and self._shared.writers_open() > 1:
            raise StoreError("%s: whole queues cannot be removed while other writer processes have the store open "
                             "(they would keep reading the removed queues): run it in the only process" % self.root)
        return clean

    def _check_writable_service(self: _Facade) -> CleanService:
        if self.read_only or self._follower:
            raise StoreError("%s: cleaning writes; this process %s" % (self.root, self._not_leading()))
        if self._state != STARTED or self._writer is None:
            raise StoreClosedError("the store at %s is %s, not started" % (self.root, self._state))
        return self._writer.clean
