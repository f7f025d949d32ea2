"""Types of ``pystore.columns._arrow_schema`` (compiled): the columns of ``pystore.columns._arrow``'s decoder and the check of a
schema asked for. Internal to pystore (``pystore.columns._arrow`` re-exports ``COLUMNS``); typed so that its own modules
type-check.

Kept in step with ``_arrow_schema.pyx`` by ``tests/test_stubs.py`` (mypy's stubtest).
"""

from typing import Any, Final

# pyarrow ships no type information: its schema is Any here
_Schema = Any

#: Column order of the data source (docs/api.md "Spark").
COLUMNS: Final[tuple[str, ...]]

def schema_columns(schema: _Schema) -> tuple[tuple[int, ...], bool]: ...
