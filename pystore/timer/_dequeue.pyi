"""Types of ``pystore.timer._dequeue`` (compiled): the timer store's dequeue, a due slot's units walked and their
delivery into the commit log in runs.

Internal (typed for pystore's own modules). Kept in step with ``_dequeue.pyx`` by ``tests/test_stubs.py``
(mypy's stubtest).
"""

from collections.abc import Callable
from typing import Final, final

from pystore.log._commitlog import CommitLogCore
from pystore.log._mapped_file import MappedFile

END: Final[int]
PYTHON: Final[int]

@final
class SlotWalk:
    def __init__(self, file_size: int, precision_ms: int) -> None: ...
    @property
    def file_size(self) -> int: ...
    @property
    def precision_ms(self) -> int: ...
    @property
    def deletes(self) -> int: ...
    @property
    def count(self) -> int: ...
    def walk(self, tl_files: list[MappedFile], last_pos: int, min_offset: int, end: int, slot_ms: int,
             expect: int = 0) -> int: ...
    def unit(self, i: int) -> tuple[int, int, int, int]: ...
    def delete_offsets(self) -> list[int]: ...
    def deliver(self, cl: CommitLogCore, cl_files: list[MappedFile], cl_file_size: int, start: int, end: int,
                clock: Callable[[], int] | None, check_crc: bool,
                deletes: frozenset[bytes] | None) -> tuple[int, int, int]: ...
