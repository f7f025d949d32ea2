"""Types of ``pystore.read._sink`` (compiled): the base class of what takes a reader scan's accepted records (its
     one method is C only). Internal to pystore.

Kept in step with ``_sink.pyx`` by ``tests/test_stubs.py`` (mypy's stubtest).
"""

from typing_extensions import disjoint_base

@disjoint_base
class RecordSink: ...
