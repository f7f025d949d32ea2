"""Stub of the compiled column put (``_bulk_put.pyx``)."""

from typing import Any

from pystore.log._commitlog import CommitLogCore
from pystore.message._message import Message
from pystore.status import PutMessageStatus

CHUNK_BYTES: int

def batch_ends(sizes: Any, lens: Any, max_message_size: int, file_size: int) -> list[int]: ...
def _copy_crc32(dst: Any, at: int, src: Any, level: int = ...) -> int: ...

def put_bodies(cl: CommitLogCore, tmpl: Message, values: Any, offsets: Any, batch: bool, born_ts: int,
               queue_offsets: Any, commit_log_offsets: Any, store_timestamps: Any, tags: Any = ...,
               keys: Any = ..., chunk_bytes: int = ...) -> tuple[PutMessageStatus, int, PutMessageStatus]: ...
def put_bytes(cl: CommitLogCore, tmpl: Message, bodies: tuple[bytes, ...], batch: bool, born_ts: int,
              queue_offsets: Any, commit_log_offsets: Any, store_timestamps: Any, tags: Any = ...,
              keys: Any = ..., chunk_bytes: int = ...) -> tuple[PutMessageStatus, int, PutMessageStatus]: ...
