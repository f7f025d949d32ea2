"""Types of ``pystore.log._file_names`` (compiled): a log's files are named by the offset of their first byte.
Internal to pystore; typed so that its own modules type-check.

Kept in step with ``_file_names.pyx`` by ``tests/test_stubs.py`` (mypy's stubtest).
"""

def offset_to_file_name(offset: int) -> str: ...
def is_file_name(name: str) -> bool: ...
