"""``CoreField``: a field of the compiled core a Python class holds (``self.core``), read and set through it.

The Python halves of the logs (``CommitLog``, ``ConsumeQueue``, ``IndexService``) hold their compiled halves
rather than subclass them, and hand the core to the compiled code that takes one; their own code and their
callers keep reading and setting the core's fields under the names they had (``cq.max_physic_offset``,
``index._files``).
A Python-level descriptor: for the policy code's reads, never on a compiled path.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar, overload

__all__ = ["CoreField"]

_T = TypeVar("_T")


class CoreField(Generic[_T]):
    """The core's field of the attribute's own name (``owner.core.<name>``); set it too unless the core declares it
    read-only."""

    __slots__ = ("name",)

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> CoreField[_T]: ...
    @overload
    def __get__(self, obj: object, owner: type | None = None) -> _T: ...
    def __get__(self, obj: object | None, owner: type | None = None) -> _T | CoreField[_T]:
        if obj is None:
            return self
        value: _T = getattr(_core(obj), self.name)
        return value

    def __set__(self, obj: object, value: _T) -> None:
        setattr(_core(obj), self.name, value)


def _core(obj: object) -> Any:
    return obj.core  # type: ignore[attr-defined]
