"""Types of ``pystore.index._index_walk`` (compiled): the index builder's walk of the commit log (``index_log``), its
cursor (``IndexCursor``) and its follow of the newest file between walks (``follow_log``). Internal to
pystore; typed so that its own modules type-check.

Kept in step with ``_index_walk.pyx`` by ``tests/test_stubs.py`` (mypy's stubtest).
"""

from typing import Final

from typing_extensions import disjoint_base

from pystore.index._index import IndexFilesBase
from pystore.log._commitlog import CommitLogCore
from pystore.log._mapped_file import MappedFile

FOLLOW_STOPPED: Final[int]
FOLLOW_TIMEOUT: Final[int]
FOLLOW_WORK: Final[int]

@disjoint_base
class IndexCursor:
    def __init__(self, start: int) -> None: ...
    @property
    def reached(self) -> int: ...
    def advance(self, to: int) -> int: ...
    def stop(self) -> None: ...
    def resume(self) -> None: ...
    def acquire(self) -> bool: ...
    def release(self) -> None: ...
    def __enter__(self) -> IndexCursor: ...
    def __exit__(self, *exc: object) -> None: ...

def index_log(
    service: IndexFilesBase, cl_files: list[MappedFile], cl_file_size: int, from_offset: int, end_offset: int
) -> int: ...
def log_end(cl_files: list[MappedFile]) -> int: ...
def follow_log(
    cursor: IndexCursor,
    cl_files: list[MappedFile],
    busy_ns: int,
    idle_ns: int,
    max_ns: int,
    core: CommitLogCore | None = None,
    idle_max_ns: int = 0,
    service: IndexFilesBase | None = None,
) -> int: ...
