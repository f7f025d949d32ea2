"""Writes: ``df.write.format("pystore").mode("append").save(root)``.

Columns: ``topic`` (string) and ``body`` (binary, or string stored as UTF-8) are required; ``tags``
(string), ``keys`` (array<string>, or one space-separated string), ``queue_id`` (any integer type; null or
absent = 0) and ``properties`` (map<string,string>) are optional. The other columns of a pystore read
(``queue_offset``, ``store_timestamp`` ...) are ignored, so a read DataFrame can be written back; any
other column is refused, as is a column of the wrong type, before a task runs.

Two phases, so a failed job leaves nothing visible:

1. each task checks its rows (vectorised with ``pyarrow.compute``: a missing or invalid topic, a null
   body, a body larger than ``max_message_size``, properties too large for the record format, separator
   characters) and stages them as an Arrow IPC file under ``<root>/.spark-staging/<job id>/``; the first
   bad row fails the job with a message naming its partition, row and problem;
2. the driver's ``commit`` opens the store (``MessageStore.open(root, **config)``: it takes the store
   lock, so no other writer runs meanwhile), appends the staged rows in partition order through the put
   path (``put_messages`` batches of consecutive rows of one topic and queue), shuts the store down and
   deletes the staging folder. ``abort`` only deletes the staging folder.

An existing store keeps its geometry (file sizes come from its files); for a new store any
``StoreConfig`` field may be given as an option in snake_case (``mapped_file_size_commit_log`` ...).
"""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    ByteType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
)

from pystore.log.refusal import (  # the put path's limits and words (pystore put says the same)
        MAX_PROPERTIES_BYTES,
        MAX_TOPIC_BYTES,
        TOPIC_CHARACTERS,
        body_problem,
        properties_problem,
        topic_problem,
    )
from pystore.spark.options import roots, store_config_overrides
from pystore.spark.schema import COLUMNS

__all__ = ["PystoreWriter", "StagedPart", "WriteError", "STAGING_DIR", "STAGING_SCHEMA", "stage_rows", "check_write_schema"]

log = logging.getLogger(__name__)

STAGING_DIR = ".spark-staging"
DEFAULT_MAX_MESSAGE_SIZE = 4 * 1024 * 1024

STAGING_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("body", pa.binary()),
        ("tags", pa.string()),
        ("keys", pa.list_(pa.string())),
        ("queue_id", pa.int32()),
        ("properties", pa.map_(pa.string(), pa.string())),
    ]
)

_INTEGER_TYPES = (ByteType, ShortType, IntegerType, LongType)


class WriteError(ValueError):
    """A row (or the DataFrame's schema) cannot be stored as a message."""


@dataclass
class StagedPart(WriterCommitMessage):
    """What one task staged: its partition id, the IPC file (None when it had no rows) and the row count."""

    partition: int
    path: str | None
    rows: int


def check_write_schema(schema: StructType) -> None:
    """Refuse, before any task runs, a DataFrame whose columns cannot become messages."""
    fields = {f.name.lower(): f.dataType for f in schema.fields}
    problems = []
    for need in ("topic", "body"):
        if need not in fields:
            problems.append("column %r is missing (required)" % need)
    expect = {
        "topic": (lambda t: isinstance(t, StringType), "string"),
        "body": (lambda t: isinstance(t, (BinaryType, StringType)), "binary or string"),
        "tags": (lambda t: isinstance(t, StringType), "string"),
        "keys": (
            lambda t: (
                isinstance(t, StringType)
                or (isinstance(t, ArrayType) and isinstance(t.elementType, StringType))
            ),
            "array<string> or string",
        ),
        "queue_id": (lambda t: isinstance(t, _INTEGER_TYPES), "an integer type"),
        "properties": (
            lambda t: (
                isinstance(t, MapType)
                and isinstance(t.keyType, StringType)
                and isinstance(t.valueType, StringType)
            ),
            "map<string,string>",
        ),
    }
    for name, dtype in fields.items():
        if name in expect:
            ok, what = expect[name]
            if not ok(dtype):
                problems.append("column %r is %s, expected %s" % (name, dtype.simpleString(), what))
        elif name not in COLUMNS:
            problems.append(
                "column %r is not a message field (expected topic, body, tags, keys, queue_id, "
                "properties)" % name
            )
    if problems:
        raise WriteError("cannot write this DataFrame to pystore: " + "; ".join(problems))


def _first(mask: pa.Array) -> int | None:
    """Index of the first true value of a boolean array (nulls are false), or None."""
    m = pc.fill_null(mask, False)
    if not pc.any(m).as_py():
        return None
    return int(pc.index(m, True).as_py())


def _row_sums(lists: pa.Array, values: pa.Array) -> pa.Array:
    """Per row of a list/map array, the sum of ``values`` (one int64 per child element)."""
    offsets = lists.offsets
    prefix = pa.concat_arrays([pa.array([0], pa.int64()), pc.cumulative_sum(values.cast(pa.int64()))])
    return pc.subtract(pc.take(prefix, offsets[1:]), pc.take(prefix, offsets[:-1]))


def _compact(arr: pa.Array) -> pa.Array:
    """``arr`` with offset 0, so its offsets index its (flattened) children directly."""
    return pa.concat_arrays([arr]) if arr.offset else arr


def _has_separators(arr: pa.Array) -> pa.Array:
    return pc.match_substring_regex(arr, "[\x01\x02]")


def normalize_batch(
    batch: pa.RecordBatch, partition: int, row_base: int, max_message_size: int
) -> pa.RecordBatch:
    """Check the rows of one incoming batch and return them in :data:`STAGING_SCHEMA`; raise
    :class:`WriteError` naming the first bad row (partition, row number in the partition)."""
    n = batch.num_rows
    cols = {name.lower(): batch.column(i) for i, name in enumerate(batch.schema.names)}

    def fail(idx: int, problem: str | None) -> None:
        raise WriteError("pystore write: partition %d, row %d: %s" % (partition, row_base + idx, problem))

    topic = cols["topic"].cast(pa.string())
    i = _first(pc.is_null(topic))
    if i is not None:
        fail(i, "topic is null (topic is required)")
    bad = pc.invert(pc.match_substring_regex(topic, "^%s{1,%d}$" % (TOPIC_CHARACTERS, MAX_TOPIC_BYTES)))
    i = _first(bad)
    if i is not None:
        fail(i, topic_problem(topic[i].as_py()) or "topic %r is refused" % topic[i].as_py())

    body = cols["body"]
    if pa.types.is_string(body.type) or pa.types.is_large_string(body.type):
        body = body.cast(pa.binary())
    body = body.cast(pa.binary())
    i = _first(pc.is_null(body))
    if i is not None:
        fail(i, "body is null (body is required)")
    blen = pc.binary_length(body)
    i = _first(pc.greater(blen, max_message_size))
    if i is not None:
        fail(i, body_problem(blen[i].as_py(), max_message_size))

    props_size = pa.array([0] * n, pa.int64())
    tags = cols.get("tags")
    if tags is None:
        tags = pa.nulls(n, pa.string())
    tags = tags.cast(pa.string())
    i = _first(_has_separators(tags))
    if i is not None:
        fail(i, "tags contain a \\x01 or \\x02 character (the properties separators)")
    props_size = pc.add(props_size, pc.fill_null(pc.add(pc.binary_length(tags).cast(pa.int64()), 6), 0))

    keys = cols.get("keys")
    if keys is None:
        keys = pa.nulls(n, pa.list_(pa.string()))
    elif pa.types.is_string(keys.type) or pa.types.is_large_string(keys.type):
        keys = pc.split_pattern(keys.cast(pa.string()), " ")
    keys = _compact(keys.cast(pa.list_(pa.string())))
    flat = pc.fill_null(keys.values, "")
    i = _first(_has_separators(flat))
    if i is not None:
        owner = int(pc.list_parent_indices(keys)[i].as_py())
        fail(owner, "keys contain a \\x01 or \\x02 character (the properties separators)")
    klen = _row_sums(keys, pc.add(pc.binary_length(flat).cast(pa.int64()), 1))
    props_size = pc.add(props_size, pc.if_else(pc.greater(klen, 0), pc.add(klen, 5), 0))

    qid = cols.get("queue_id")
    if qid is None:
        qid = pa.array([0] * n, pa.int32())
    else:
        i = _first(pc.or_(pc.less(qid, 0), pc.greater(qid, 2**31 - 1)))
        if i is not None:
            fail(i, "queue_id %d is out of range (0 .. 2**31-1)" % qid[i].as_py())
        qid = pc.fill_null(qid, 0).cast(pa.int32())

    props = cols.get("properties")
    if props is None:
        props = pa.nulls(n, pa.map_(pa.string(), pa.string()))
    props = _compact(props.cast(pa.map_(pa.string(), pa.string())))
    pk, pv = props.keys, props.items
    as_list = pa.ListArray.from_arrays(props.offsets, pk)  # list_parent_indices does not take maps
    i = _first(
        pc.or_(
            pc.or_(_has_separators(pk), _has_separators(pc.fill_null(pv, ""))),
            pc.equal(pc.binary_length(pk), 0),
        )
    )
    if i is not None:
        owner = int(pc.list_parent_indices(as_list)[i].as_py())
        fail(owner, "a property name is empty, or a name or value contains \\x01 or \\x02")
    plen = _row_sums(as_list, pc.add(pc.add(pc.binary_length(pk), pc.fill_null(pc.binary_length(pv), 0)), 2))
    props_size = pc.add(props_size, plen)
    i = _first(pc.greater(props_size, MAX_PROPERTIES_BYTES))
    if i is not None:
        fail(i, properties_problem(props_size[i].as_py()))
    return pa.RecordBatch.from_arrays([topic, body, tags, keys, qid, props], schema=STAGING_SCHEMA)


@dataclass
class WriteTarget:
    """Where a batch or streaming write goes: one store root, the ``StoreConfig`` overrides of its options and
    the largest body they allow."""

    root: str
    config: dict[str, Any]
    max_message_size: int


def write_target(options: Mapping[str, str], schema: StructType, what: str) -> WriteTarget:
    """The target of a write (``what``: "write", "streaming write") whose rows have ``schema``."""
    rs = roots(options)
    if len(rs) != 1:
        raise WriteError("a pystore %s goes to one store root, got %d" % (what, len(rs)))
    check_write_schema(schema)
    config = store_config_overrides(options)
    return WriteTarget(os.path.abspath(rs[0]), config,
                       int(config.get("max_message_size", DEFAULT_MAX_MESSAGE_SIZE)))


class PystoreWriter(DataSourceArrowWriter):
    """Stages rows per task, appends them on the driver's commit (see the module docstring)."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        t = write_target(options, schema, "write")
        self.root, self.config, self.max_message_size = t.root, t.config, t.max_message_size
        self.job_id = uuid.uuid4().hex
        self.staging = os.path.join(self.root, STAGING_DIR, self.job_id)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedPart:
        return stage_rows(iterator, self.staging, self.max_message_size)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        from pystore.spark.append import append_staged

        parts = sorted(
            (m for m in messages if isinstance(m, StagedPart) and m.path), key=lambda m: m.partition
        )
        try:
            total = append_staged(self.root, [p.path for p in parts if p.path], self.config)
            log.info(
                "pystore write to %s: %d message(s) appended from %d partition(s)",
                self.root,
                total,
                len(parts),
            )
        finally:
            self._clean()

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        log.warning("pystore write to %s aborted; staged rows dropped", self.root)
        self._clean()

    def _clean(self) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)
        try:
            os.rmdir(os.path.dirname(self.staging))  # only when no other job is staging
        except OSError:
            pass


def stage_rows(iterator: Iterator[pa.RecordBatch], staging: str, max_message_size: int) -> StagedPart:
    """A task's half of a write: check its rows and stage them as one Arrow IPC file under ``staging``."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    partition = ctx.partitionId() if ctx is not None else 0
    os.makedirs(staging, exist_ok=True)
    path = os.path.join(staging, "part-%05d-%s.arrow" % (partition, uuid.uuid4().hex[:8]))
    rows = 0
    sink = None
    try:
        for batch in iterator:
            if batch.num_rows == 0:
                continue
            staged = normalize_batch(batch, partition, rows, max_message_size)
            if sink is None:
                sink = pa.ipc.new_file(path, STAGING_SCHEMA)
            sink.write_batch(staged)
            rows += staged.num_rows
    except BaseException:
        if sink is not None:
            sink.close()
            sink = None
        _remove(path)
        raise
    finally:
        if sink is not None:
            sink.close()
    return StagedPart(partition, path if rows else None, rows)


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
