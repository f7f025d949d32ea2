"""Types of ``pystore.columns._arrow_plan`` (compiled): the Spark data source's planning helpers, run on the driver
(``split_points``, ``queue_bounds``, ``queue_boundaries``, ``walk_to``, ``record_size_at``). Internal to
pystore; typed so that its own modules type-check.

Kept in step with ``_arrow_plan.pyx`` by ``tests/test_stubs.py`` (mypy's stubtest).
"""

import numpy as np
import numpy.typing as npt

from pystore.log._mapped_file import MappedFile

def split_points(mf: MappedFile, chunk: int) -> tuple[list[int], int, int]: ...
def queue_bounds(cq_paths: list[str], cl_min: int) -> tuple[int, int]: ...
def queue_boundaries(cq_paths: list[str], xs: npt.NDArray[np.int64], below: npt.NDArray[np.int64]) -> int: ...
def walk_to(mf: MappedFile, pos: int, target: int) -> int: ...
def record_size_at(mf: MappedFile, pos: int) -> int: ...
