"""Types of ``pystore.columns._arrow`` (compiled): the Spark data source's decoder — commit-log records straight into
Arrow record batches (``BatchBuilder``), fed by ``pystore.columns._arrow_source``'s readers or by ``get_columns``'s scan;
``COLUMNS`` and the decode worker's switch re-exported from ``_arrow_schema`` and ``_decode_worker``.
Internal to pystore; typed so that its own modules type-check.

Kept in step with ``_arrow.pyx`` by ``tests/test_stubs.py`` (mypy's stubtest).
"""

from typing import Any, final

from pystore.columns._arrow_schema import COLUMNS as COLUMNS
from pystore.columns._decode_worker import decode_worker as decode_worker
from pystore.columns._decode_worker import decode_worker_state as decode_worker_state
from pystore.format._codec import REASONS as REASONS
from pystore.read._sink import RecordSink

# pyarrow ships no type information: its schema and record batch are Any here
_Schema = Any
_RecordBatch = Any

@final
class BatchBuilder(RecordSink):
    @property
    def verify_crc(self) -> bool: ...
    @property
    def max_rows(self) -> int: ...
    @property
    def max_bytes(self) -> int: ...
    @property
    def rows(self) -> int: ...
    @property
    def rows_total(self) -> int: ...
    def __init__(
        self,
        schema: _Schema,
        verify_crc: bool = True,
        topics: list[str] | None = None,
        queue_id: int = -1,
        start_ms: int | None = None,
        end_ms: int | None = None,
        max_rows: int = 32768,
        max_bytes: int = 67108864,
    ) -> None: ...
    def reserve(self, rows: int, body_bytes: int, topic_bytes: int = 0) -> None: ...
    def build(self, again: bool = True) -> _RecordBatch | None: ...
