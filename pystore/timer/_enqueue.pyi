"""Types of ``pystore.timer._enqueue`` (compiled): the timer store's enqueue over a run of its queue's units, and the
pending count read from the wheel.

Internal (typed for pystore's own modules). Kept in step with ``_enqueue.pyx`` by ``tests/test_stubs.py``
(mypy's stubtest).
"""

from typing import Final, final

from pystore.log._mapped_file import MappedFile

END: Final[int]
ROLL: Final[int]
PYTHON: Final[int]

@final
class TimerEnqueue:
    def __init__(self, wheel_slots: bytearray, wheel_dirty: bytearray, slots_total: int, precision_ms: int,
                 roll_window_slots: int) -> None: ...
    @property
    def slots_total(self) -> int: ...
    @property
    def precision_ms(self) -> int: ...
    @property
    def roll_window_slots(self) -> int: ...
    def run(self, cq_file: MappedFile, start: int, end: int, cl_files: list[MappedFile], cl_file_size: int,
            tl_file: MappedFile | None, write_ms: int, read_ms: int, check_crc: bool) -> tuple[int, int, int]: ...

def wheel_pending(wheel: bytearray | bytes | memoryview, slots_total: int, precision_ms: int, from_ms: int,
                  to_ms: int) -> tuple[int, int]: ...
