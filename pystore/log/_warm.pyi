"""Types of ``pystore.log._warm`` (compiled): a mapped file's pages made ready off the put path (warming, the
page-by-page advice) and the prefault worker seen from Python. Internal to pystore; typed so that its own modules
type-check.

Kept in step with ``_warm.pyx`` by ``tests/test_stubs.py`` (mypy's stubtest).
"""

from typing import TypedDict, type_check_only

from pystore.log._mapped_file import MappedFile

@type_check_only
class _PrefaultStats(TypedDict):
    bytes: int
    skipped: int
    dropped: int
    failed: int
    pending: int
    supported: bool

def prefault_stats() -> _PrefaultStats: ...
def warm(mf: MappedFile, populate: bool = True, sync_every: int = 0) -> None: ...
def write_page_by_page(mf: MappedFile, pos: int = 0) -> None: ...
def populate_past_writer(mf: MappedFile, start: int, end: int, writer_at: int | None = None) -> tuple[int, int]: ...
