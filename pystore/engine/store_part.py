"""What a ``MessageStore`` shows of the parts it opened (``Part``: the consume-queue store, the index, the flush
service ...: read-only, None before they exist; white-box tests reach for them) and what it asks of each
service a started writer runs (``Service``: to stop)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar, overload

if TYPE_CHECKING:
    from pystore.engine.store import MessageStore

__all__ = ["Part", "Service"]

_T = TypeVar("_T")


class Part(Generic[_T]):
    """A read-only part of what load() opened (``_parts``) or of a started writer's services (``_writer``), None
    before: a property typed as the part (white-box tests reach for them)."""

    def __init__(self, get: Callable[[MessageStore], _T | None]) -> None:
        self._get = get

    @overload
    def __get__(self, store: None, owner: type[MessageStore]) -> Part[_T]: ...
    @overload
    def __get__(self, store: MessageStore, owner: type[MessageStore]) -> _T | None: ...
    def __get__(self, store: MessageStore | None, owner: type[MessageStore]) -> Part[_T] | _T | None:
        return self if store is None else self._get(store)

    def __set__(self, store: MessageStore, value: object) -> None:
        raise AttributeError("a part of the store cannot be replaced")


class Service(Protocol):
    """What the store asks of each service a started writer runs (``Writer.services``): to stop."""

    def shutdown(self) -> None: ...
