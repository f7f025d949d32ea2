"""The data source's schema: one row per message, in docs/api.md's column order and types, and the exact
Arrow schema Spark expects from ``read()`` (PySpark 4.2+ compares it field by field: ``int32`` for INT,
``timestamp[us, tz=UTC]`` for TIMESTAMP, nullable fields)."""

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

from pystore._arrow import COLUMNS as _COLUMNS

__all__ = ["DDL", "COLUMNS", "HEADERS", "spark_schema", "arrow_schema", "check_read_schema", "add_headers"]

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


def check_read_schema(schema: Any, headers: bool = False) -> StructType:
    """The schema a reader got, if it is the source's own; a user-given ``.schema(...)`` that differs
    (other columns, order or types) is refused, since every column comes from the record decoder."""
    own = spark_schema(headers)
    if schema is None:
        return own
    got = [(f.name, f.dataType.simpleString()) for f in schema.fields]
    want = [(f.name, f.dataType.simpleString()) for f in own.fields]
    if got != want:
        raise ValueError(
            "the pystore source has a fixed schema (%s); got %s. Read without .schema(...) and select "
            "the columns you need" % (DDL + (", " + HEADERS if headers else ""), schema.simpleString())
        )
    return schema


def add_headers(rb: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``rb`` (the decoder's columns) with the ``headers`` column of ``schema`` built from ``properties``:
    the map's own offsets and keys, its values as binary (UTF-8, as Kafka's header values are bytes)."""
    props = rb.column(COLUMNS.index("properties"))
    field = schema.field("headers")
    entries = pa.StructArray.from_arrays(
        [props.keys, props.items.cast(pa.binary())], fields=list(field.type.value_type)
    )
    mask = props.is_null() if props.null_count else None
    headers = pa.ListArray.from_arrays(props.offsets, entries, type=field.type, mask=mask)
    return pa.RecordBatch.from_arrays(list(rb.columns) + [headers], schema=schema)
