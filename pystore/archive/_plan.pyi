"""Types of ``pystore.archive._plan`` (compiled): the ranges a queue read of archived files touches.

Internal (typed for pystore's own modules). Kept in step with ``_plan.pyx`` by ``tests/test_stubs.py`` (mypy's
stubtest).
"""

from typing_extensions import Buffer

def plan(units: Buffer, files: list[tuple[int, int, int]], budget: int) -> tuple[int, list[list[int]]]: ...
def extend(units: Buffer, n: int, base: int, size: int, range_size: int, mapped: Buffer) -> list[int]: ...
