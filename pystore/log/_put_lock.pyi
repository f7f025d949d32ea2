"""Types of ``pystore.log._put_lock`` (compiled): the put lock, RocketMQ's spin lock or its reentrant lock.
Internal to pystore; typed so that its own modules type-check.

Kept in step with ``_put_lock.pyx`` by ``tests/test_stubs.py`` (mypy's stubtest).
"""

from types import TracebackType
from typing import Self, final

@final
class PutMessageLock:
    @property
    def reentrant(self) -> bool: ...
    def __new__(cls, reentrant: bool = False) -> Self: ...
    def acquire(self) -> None: ...
    def release(self) -> None: ...
    def __enter__(self) -> Self: ...
    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None, /
    ) -> None: ...
