"""Types of ``pystore.queue._timesearch`` (compiled): consume queues searched by store time.

Internal (typed for pystore's own modules). Kept in step with ``_timesearch.pyx`` by ``tests/test_stubs.py``
(mypy's stubtest).
"""

from pystore.log._mapped_file import MappedFile
from pystore.queue._units import ConsumeQueueCore

def pickup_store_timestamp(cl_files: list[MappedFile], cl_file_size: int, phy: int, size: int = 0) -> int: ...
def queue_offset_by_time(
    cq: ConsumeQueueCore, cl_files: list[MappedFile], cl_file_size: int, timestamp: int, lower: bool
) -> int: ...
