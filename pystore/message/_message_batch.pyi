"""Types of ``pystore.message._message_batch`` (compiled): ``MessageBatch``, several messages put as one batch.

Kept in step with ``_message_batch.pyx`` by ``tests/test_stubs.py`` (mypy's stubtest).
"""

from collections.abc import Iterable, Iterator, Mapping
from typing import final

from typing_extensions import Buffer

from pystore.message._message import Message

@final
class MessageBatch:
    def __init__(self, messages: Iterable[Message]) -> None: ...
    @staticmethod
    def from_bodies(
        topic: str,
        bodies: Iterable[Buffer],
        tags: str | None = None,
        keys: str | Iterable[str] | None = None,
        flag: int = 0,
        properties: Mapping[str, str] | None = None,
        queue_id: int = 0,
        born_timestamp: int | None = None,
        born_host: tuple[str, int] = ("127.0.0.1", 0),
    ) -> MessageBatch: ...
    @property
    def messages(self) -> list[Message]: ...
    @property
    def wait_store_msg_ok(self) -> bool: ...
    @property
    def topic(self) -> str: ...
    @property
    def queue_id(self) -> int: ...
    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[Message]: ...
