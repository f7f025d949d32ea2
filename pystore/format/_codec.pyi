"""Types of ``pystore.format._codec`` (compiled): the commit-log record (docs/format.md §1) — its field positions, the
check results, and encode, check, decode and scan over a buffer. Internal to pystore (the store and tools use
it); typed so that pystore's own modules and tests type-check against it.

Kept in step with ``_codec.pyx`` by ``tests/test_stubs.py`` (mypy's stubtest).
"""

from typing import Final

from typing_extensions import Buffer

from pystore.message._message import Message
from pystore.message._message_ext import MessageExt

MAGIC_CODE_V1: Final[int]
MAGIC_CODE_V2: Final[int]
BLANK_CODE: Final[int]
MIN_BLANK: Final[int]
UNIT_SIZE: Final[int]

# check_record_at and scan's reasons: a record's size is positive; these are zero or negative
RECORD_BLANK: Final[int]
RECORD_END: Final[int]
RECORD_SHORT: Final[int]
RECORD_BAD_MAGIC: Final[int]
RECORD_BAD_LENGTH: Final[int]
RECORD_BAD_CRC: Final[int]
REASONS: Final[dict[int, str]]

POS_TOTALSIZE: Final[int]
POS_MAGIC: Final[int]
POS_BODYCRC: Final[int]
POS_QUEUEID: Final[int]
POS_FLAG: Final[int]
POS_QUEUEOFFSET: Final[int]
POS_PHYSICALOFFSET: Final[int]
POS_SYSFLAG: Final[int]
POS_BORNTIMESTAMP: Final[int]
POS_BORNHOST: Final[int]

def crc_implementation() -> str: ...
def crc_implementations_built() -> tuple[str, ...]: ...
def fast_body_crc(data: Buffer) -> int: ...
def file_crc32(data: Buffer) -> int: ...
def body_crc(data: Buffer) -> int: ...
def calc_msg_length(version: int, sys_flag: int, body_len: int, topic_len: int, props_len: int) -> int: ...
def record_length(msg: Message, store_host: tuple[str, int] = ("127.0.0.1", 10911)) -> int: ...
def encode_record(
    msg: Message,
    queue_offset: int = 0,
    commit_log_offset: int = 0,
    store_timestamp: int = 0,
    store_host: tuple[str, int] = ("127.0.0.1", 10911),
) -> bytes: ...
def check_record_at(data: Buffer, offset: int = 0, verify_crc: bool = True) -> int: ...
def decode_record(
    data: Buffer, offset: int = 0, verify_crc: bool = False, source: str = "<buffer>", base_offset: int = 0
) -> MessageExt: ...
def scan(data: Buffer, start: int = 0, end: int | None = None, verify_crc: bool = True) -> tuple[int, int, int, int]: ...
def tags_code(data: Buffer, offset: int = 0) -> int: ...
