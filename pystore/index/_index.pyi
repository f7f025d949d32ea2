"""Types of ``pystore.index._index`` (compiled): the hash index files (docs/format.md §3) — one file's header, slots and
entry chains (``IndexFileCore``), and the per-message indexing over ``IndexFilesBase``, the compiled core an
``IndexService`` (``pystore.index.service``) holds. Internal to pystore; typed so that its own modules type-check.

Kept in step with ``_index.pyx`` by ``tests/test_stubs.py`` (mypy's stubtest).
"""

from collections.abc import Callable
from typing import Final, final

from typing_extensions import disjoint_base

from pystore.log._mapped_file import MappedFile

HEADER_SIZE: Final[int]
HASH_SLOT_SIZE: Final[int]
INDEX_SIZE: Final[int]
PREFAULT_WINDOW: Final[int]

def key_hash(key: str) -> int: ...
def index_file_size(slots: int, num: int) -> int: ...

@final
class IndexFileCore:
    @property
    def mapped_file(self) -> MappedFile: ...
    @property
    def hash_slot_num(self) -> int: ...
    @property
    def index_num(self) -> int: ...
    @property
    def begin_timestamp(self) -> int: ...
    @property
    def end_timestamp(self) -> int: ...
    @property
    def begin_phy_offset(self) -> int: ...
    @property
    def end_phy_offset(self) -> int: ...
    @property
    def hash_slot_count(self) -> int: ...
    @property
    def index_count(self) -> int: ...
    # a broken chain was logged (the archive's reader sets it and logs breaks itself, once per archived object)
    warned: bool
    @property
    def broken(self) -> tuple[int, str] | None: ...
    def __init__(self, mf: MappedFile, hash_slot_num: int, index_num: int) -> None: ...
    def load_header(self) -> None: ...
    def init_header(self, begin_ts: int, end_ts: int, begin_phy: int, end_phy: int) -> None: ...
    def is_write_full(self) -> bool: ...
    def put_key(self, key: str, phy_offset: int, store_timestamp: int) -> bool: ...
    def select_phy_offset(self, out: list[int], key: str, max_num: int, begin: int, end: int) -> None: ...
    def walk(
        self,
        out: list[int],
        h: int,
        max_num: int,
        begin: int,
        end: int,
        cur: int,
        ready: bytes | bytearray | memoryview | None,
        range_size: int,
    ) -> tuple[int, int, int]: ...
    def check_chains(self, max_problems: int = 100) -> list[tuple[int, str]]: ...

@disjoint_base
class IndexFilesBase:
    # the index files, oldest first (a new list on every change)
    _files: list[IndexFileCore]
    # files the writer left full, until their flush
    _full: list[IndexFileCore]
    # a file made ahead of need, mapped at _spare_path, renamed to _spare_name when the writer takes it
    _spare: IndexFileCore | None
    _spare_path: str | None
    _spare_name: str | None
    # makes a file when there is no spare (IndexService._new_file); None: no file
    new_file: Callable[[], IndexFileCore | None] | None
    # entries dropped because no file could be made (a full disk): at least that many keys are not found
    dropped: int
    def take_spare(self) -> IndexFileCore | None: ...
    def drop_files(self, gone: list[IndexFileCore]) -> int: ...

def index_keys(
    service: IndexFilesBase, topic: bytes, props: bytes, phy_offset: int, store_ts: int, sys_flag: int
) -> None: ...
def select_in_files(
    files: list[IndexFileCore], full_key: str, max_num: int, begin: int, end: int, out: list[int]
) -> tuple[int, int]: ...
