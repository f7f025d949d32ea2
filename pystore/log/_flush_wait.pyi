"""Types of ``pystore.log._flush_wait`` (compiled): the async flush service's wait and flush without the GIL
(``follow_flush``) and its stop and poke flags (``FlushStop``). Internal to pystore; typed so that its own
modules type-check.

Kept in step with ``_flush_wait.pyx`` by ``tests/test_stubs.py`` (mypy's stubtest).
"""

from typing import Final

from typing_extensions import disjoint_base

from pystore.log._commitlog import CommitLogCore
from pystore.log._mapped_file import MappedFile

FLUSH_STOPPED: Final[int]
FLUSH_TIMEOUT: Final[int]
FLUSH_FILE_DONE: Final[int]
FLUSH_ERROR: Final[int]

@disjoint_base
class FlushStop:
    @property
    def errno(self) -> int: ...
    def poke(self, core: CommitLogCore) -> None: ...
    def stop(self, core: CommitLogCore) -> None: ...
    def resume(self) -> None: ...

def follow_flush(
    core: CommitLogCore,
    mf: MappedFile,
    stop: FlushStop,
    least_pages: int,
    interval_ns: int,
    max_ns: int,
    min_gap_ns: int = 0,
) -> int: ...
