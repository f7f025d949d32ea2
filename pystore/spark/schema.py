"""The data source's schema: one row per message, in docs/api.md's column order and types, and the exact
Arrow schema Spark expects from ``read()`` (PySpark 4.2+ compares it field by field: ``int32`` for INT,
``timestamp[us, tz=UTC]`` for TIMESTAMP, nullable fields). A user-given read schema is a projection: some
of these columns in any order (:func:`check_read_schema`), and :func:`project` narrows the decoder's
batches to it; PySpark gives a Python source no column pruning of its own, so this is how a query makes
Spark convert only the columns it reads."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from pystore.columns._arrow import COLUMNS as _COLUMNS

__all__ = [
    "DDL",
    "COLUMNS",
    "HEADERS",
    "SchemaError",
    "spark_schema",
    "arrow_schema",
    "check_read_schema",
    "project",
]

#: ``includeHeaders``: the extra last column, as Spark's Kafka source has it.
HEADERS = "headers ARRAY<STRUCT<key: STRING, value: BINARY>>"

#: docs/api.md "Spark — pystore.spark": the columns of a read, in order.
DDL = (
    "topic STRING, queue_id INT, queue_offset BIGINT, commit_log_offset BIGINT, store_size INT, body BINARY, "
    "tags STRING, keys ARRAY<STRING>, properties MAP<STRING,STRING>, flag INT, sys_flag INT, "
    "born_timestamp TIMESTAMP, store_timestamp TIMESTAMP, born_host STRING, store_host STRING, "
    "reconsume_times INT, prepared_transaction_offset BIGINT, body_crc INT, msg_id STRING"
)

#: The column names, in order (the decoder's own list).
COLUMNS: tuple[str, ...] = _COLUMNS


def _headers_type() -> ArrayType:
    return ArrayType(StructType([StructField("key", StringType(), True), StructField("value", BinaryType(), True)]), True)


def spark_schema(headers: bool = False) -> StructType:
    """The read schema as a Spark ``StructType`` (every field nullable; only ``tags`` holds nulls). Built
    field by field: ``StructType.fromDDL`` needs a running session, and executors have none."""
    s, i, lg, b, ts = StringType(), IntegerType(), LongType(), BinaryType(), TimestampType()
    types = {
        "topic": s,
        "queue_id": i,
        "queue_offset": lg,
        "commit_log_offset": lg,
        "store_size": i,
        "body": b,
        "tags": s,
        "keys": ArrayType(s, True),
        "properties": MapType(s, s, True),
        "flag": i,
        "sys_flag": i,
        "born_timestamp": ts,
        "store_timestamp": ts,
        "born_host": s,
        "store_host": s,
        "reconsume_times": i,
        "prepared_transaction_offset": lg,
        "body_crc": i,
        "msg_id": s,
    }
    fields = [StructField(name, types[name], True) for name in COLUMNS]
    if headers:
        fields.append(StructField("headers", _headers_type(), True))
    return StructType(fields)


def arrow_schema(schema: StructType | None = None) -> pa.Schema:
    """The Arrow schema Spark expects for ``schema`` (default: the read schema), built by PySpark itself
    so field types and nested field names match exactly on every PySpark 4.x."""
    from pyspark.sql.pandas.types import to_arrow_schema

    s = schema if schema is not None else spark_schema()
    try:
        return to_arrow_schema(s, timezone="UTC")  # PySpark 4.2+: keyword-only timezone
    except TypeError:
        return to_arrow_schema(s)  # PySpark 4.0/4.1: timestamps are UTC already


class SchemaError(ValueError):
    """A user-given read schema that is not a projection of the source's columns."""


#: The columns that never hold nulls (only ``tags`` does: null without a ``TAGS`` property): a user schema
#: may declare these NOT NULL.
_NEVER_NULL = frozenset(COLUMNS) - {"tags"} | {"headers"}


def check_read_schema(schema: Any, headers: bool = False) -> StructType:
    """The schema a reader produces: the source's own when none was given, else the user's ``.schema(...)``,
    which is the projection: some of the source's columns, in any order, each with the source's type
    (``headers`` only with ``includeHeaders``). Anything else raises :class:`SchemaError` naming the field
    and the source's type for it (raised where the reader is made, on the driver, before any task)."""
    own = spark_schema(headers)
    if schema is None:
        return own
    if not isinstance(schema, StructType):
        raise SchemaError("the schema of a pystore read must be a StructType, got %r" % (schema,))
    if not schema.fields:
        raise SchemaError("a pystore read schema needs at least one column (for count(), give one, e.g. "
                          "'queue_offset long')")
    by_name = {f.name: f for f in own.fields}
    seen: set[str] = set()
    for f in schema.fields:
        if f.name in seen:
            raise SchemaError("field %s appears twice in the read schema %s" % (f.name, schema.simpleString()))
        seen.add(f.name)
        src = by_name.get(f.name)
        if src is None:
            raise SchemaError(_unknown(f.name, headers))
        if f.dataType != src.dataType:
            nested = f.dataType.simpleString() == src.dataType.simpleString()
            raise SchemaError(
                "field %s: the pystore source's type for it is %s%s, the schema gives %s%s"
                % (f.name, src.dataType.simpleString(), " (nested fields nullable)" if nested else "",
                   f.dataType.simpleString(), " with other nested nullability" if nested else "")
            )
        if not f.nullable and f.name not in _NEVER_NULL:
            raise SchemaError("field %s: the pystore source's %s holds nulls (no TAGS property); declare it "
                              "nullable" % (f.name, src.dataType.simpleString()))
    return schema


def _unknown(name: str, headers: bool) -> str:
    """The error for a field the source does not have, with the nearest column's name."""
    if name == "headers" and not headers:
        return "field headers: the pystore source has it only with .option(\"includeHeaders\", \"true\")"
    import difflib

    names = list(COLUMNS) + (["headers"] if headers else [])
    near = [n for n in names if n.lower() == name.lower()] or difflib.get_close_matches(name, names, 1)
    return "field %s: the pystore source has no such column%s; its columns are %s" % (
        name,
        " (did you mean %s?)" % near[0] if near else "",
        DDL + (", " + HEADERS if headers else ""),
    )


def project(rb: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``rb`` (a decoder's batch holding the columns of ``schema`` and ``properties``, in any order) as the
    columns of ``schema`` in its order, without copying a buffer; ``headers`` is built from ``properties``."""
    cols = [
        _headers(rb.column("properties"), schema.field(i)) if n == "headers" else rb.column(n)
        for i, n in enumerate(schema.names)
    ]
    return pa.RecordBatch.from_arrays(cols, schema=schema)


def _headers(props: pa.MapArray, field: pa.Field) -> pa.ListArray:
    """The ``headers`` column built from the ``properties`` map: the map's own offsets and keys, its values
    as binary (UTF-8, as Kafka's header values are bytes)."""
    entries = pa.StructArray.from_arrays(
        [props.keys, props.items.cast(pa.binary())], fields=list(field.type.value_type)
    )
    mask = props.is_null() if props.null_count else None
    return pa.ListArray.from_arrays(props.offsets, entries, type=field.type, mask=mask)
