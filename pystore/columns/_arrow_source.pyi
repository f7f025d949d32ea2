"""Types of ``pystore.columns._arrow_source`` (compiled): the sources of the Spark data source's decoder — the records
of a commit-log file range (``scan_file``) or of a consume queue's offset range (``QueueReader``), added to a
``pystore.columns._arrow.BatchBuilder``. Internal to pystore; typed so that its own modules type-check.

Kept in step with ``_arrow_source.pyx`` by ``tests/test_stubs.py`` (mypy's stubtest).
"""

from typing import final

from pystore.columns._arrow import BatchBuilder
from pystore.format._codec import REASONS as REASONS
from pystore.log._mapped_file import MappedFile

def scan_file(b: BatchBuilder, mf: MappedFile, pos: int, end: int = -1) -> tuple[int, bool]: ...

@final
class QueueReader:
    @property
    def topic(self) -> str: ...
    @property
    def queue_id(self) -> int: ...
    @property
    def lost(self) -> int: ...
    def __init__(self, topic: str, queue_id: int, cq_paths: list[str],
                 cl_paths: list[str] | list[tuple[str, int]]) -> None: ...
    def scan(self, b: BatchBuilder, start: int, end: int) -> tuple[int, bool]: ...
