"""Batch reads: ``spark.read.format("pystore").load(root)``.

Partitions are planned on the driver without reading a body:

* with ``topic`` and/or ``queue_id``, from the consume queues: one :class:`QueueSlice` per
  (topic, queue, range of at most ``messages_per_partition`` queue offsets), bounds found by binary search
  in the queue files; rows are the messages consumers of those queues see;
* otherwise from the commit log: one :class:`CommitLogSlice` per (root, commit-log file), cut every
  ``bytes_per_partition`` bytes at record boundaries found by walking the record headers.

Each partition decodes its records with ``pystore.columns._arrow`` (C loops into Arrow buffers) and yields
``pyarrow.RecordBatch``es of the exact schema: the source's, or the columns of a user's ``.schema(...)``
(a projection, so that Spark converts only those into rows). Time bounds (``start_time`` inclusive, ``end_time``
exclusive, on the store timestamp) and the topic/queue filters run inside the decoder loop.
"""

from __future__ import annotations

import functools
import json
import logging
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from pystore.columns._arrow import BatchBuilder
from pystore.columns._arrow_plan import queue_boundaries, queue_bounds, record_size_at, split_points, walk_to
from pystore.columns._arrow_source import QueueReader, scan_file
from pystore.errors import StoreCorruptedError
from pystore.format._codec import RECORD_END
from pystore.log._mapped_file import MappedFile
from pystore.spark import layout
from pystore.spark.archive_read import ArchiveLogSlice, ArchiveQueueSlice, read_archive
from pystore.spark.fleet import Member, StoreView, member_options, members
from pystore.spark.options import OptionError, check_options, parse_bool, parse_int, parse_time, per_partition
from pystore.spark.schema import arrow_schema, check_read_schema, project
from pystore.spark.subscription import ending_offsets, starting_offsets, subscription
from pystore.tools import _common_size, _valid_after

__all__ = [
    "CommitLogSlice",
    "QueueSlice",
    "QueueGroup",
    "Filters",
    "DataLossError",
    "PystoreBatchReader",
    "read_slice",
    "plan_queue_slices",
    "queue_ranges",
]

log = logging.getLogger(__name__)

# Spark's tasks of a Python source each cost a Python worker's round trip: partitions of a quarter GiB (about
# a million 128 B messages) keep that small, and a store smaller than parallelism x this still gets a task per
# unit of Spark's default parallelism (minPartitions)
DEFAULT_BYTES_PER_PARTITION = 256 << 20
DEFAULT_MESSAGES_PER_PARTITION = 1_000_000
ROWS_PER_BATCH = 32_768


@dataclass
class CommitLogSlice(InputPartition):
    """Records of one commit-log file from ``start`` (a record boundary) to ``end`` (-1: the file's end)."""

    root: str
    path: str
    start: int
    end: int


@dataclass
class QueueSlice(InputPartition):
    """Messages of queue offsets ``[start, end)`` of one consume queue."""

    root: str
    topic: str
    queue_id: int
    start: int
    end: int


@dataclass
class QueueGroup(InputPartition):
    """Several queue slices (:class:`QueueSlice`) read one after the other by one task (small queues packed)."""

    slices: list[Any]  # QueueSlice, or ArchiveQueueSlice (pystore.spark.archive_read)


@dataclass
class Filters:
    """What a partition keeps: record filters (run in C) and how strictly it reads."""

    topics: list[str]
    queue_id: int
    start_ms: int | None
    end_ms: int | None
    verify_crc: bool
    fail_on_data_loss: bool = False


# cuts a plan asks the consume queues for at most: a plan of more (tiny slices of a big log) walks the files'
# record headers instead, whose cost follows the records, not the bytes over the slice size
_MAX_QUEUE_CUTS = 8192
# consume queues a plan asks at most (those holding the most units): any of them gives true boundaries, and
# a broker's thousands of queues would cost more to open than the walk they save
_MAX_QUEUES = 256
# commit-log files of this many bytes in all, or fewer, are walked: a walk of them costs less than listing
# and opening the queues of a store of many queues (a few milliseconds)
_WALK_BELOW = 64 << 20


def plan_commit_log_slices(root: str, bytes_per_partition: int, target: int = 1) -> list[CommitLogSlice]:
    """Slices of about ``bytes_per_partition`` bytes at most, and at least ``target`` of them when the data
    allows (a small store still uses every core), cut at record boundaries.

    A big log is planned without walking it all: a file holds data when a record starts it (files made ahead
    of the writer are empty; a file whose start is damaged while records follow it is planned whole, and its
    reader refuses it); every such file but the last is full; the last one's data end is walked to from the
    end of the last record a consume queue points at. Each cut is the first record at or after its wanted
    offset, walked to from the nearest record below it that a consume queue points at (binary searches in at
    most ``_MAX_QUEUES`` queues; the record checked in place), or from the previous cut. A log of at most
    ``_WALK_BELOW`` bytes of files, or a plan of more than ``_MAX_QUEUE_CUTS`` cuts, walks the files' record
    headers outright. A reader checks that its walk lands exactly on the next slice's start
    (``StoreCorruptedError`` if not)."""
    files = _data_files(root)
    if not files:
        return []
    queues: list[list[str]] = []
    if sum(size for _, _, size, _ in files) <= _WALK_BELOW:
        files = [(path, first, _walked_end(path) if whole else size, whole) for path, first, size, whole in files]
    else:
        queues = _planning_queues(root)
        path, first, size, whole = files[-1]
        if whole:
            # from the end of the last record a queue points at, the records after it (not dispatched yet, or
            # of queues not asked) are walked to the end of the data
            cq_end = max((_queue_end(paths) for paths in queues), default=-1) - first
            files[-1] = (path, first, _walked_end(path, cq_end if 0 < cq_end <= size else 0), whole)
    total = sum(n for _, _, n, _ in files)
    chunk = max(1, min(bytes_per_partition, -(-total // max(1, target))))
    cut = [(first, n) for _, first, n, whole in files if whole and n > chunk]
    below: dict[int, int] = {}
    if queues and 0 < sum(-(-n // chunk) - 1 for _, n in cut) <= _MAX_QUEUE_CUTS:
        wanted = np.array([first + k * chunk for first, n in cut for k in range(1, -(-n // chunk))], dtype=np.int64)
        found = np.full(len(wanted), -1, dtype=np.int64)
        for paths in queues:
            try:
                queue_boundaries(paths, wanted, found)
            except FileNotFoundError:
                continue                         # cleaned meanwhile: the other queues' boundaries serve
        below = dict(zip(wanted.tolist(), found.tolist(), strict=True))
    out: list[CommitLogSlice] = []
    for path, first, n, whole in files:
        if n <= chunk or not whole:
            out.append(CommitLogSlice(root, path, 0, -1))
            continue
        if below:
            starts = _cuts_from(path, first, chunk, n, below)
        else:
            mf = MappedFile(path, -1, read_only=True)
            try:
                starts = split_points(mf, chunk)[0]
            finally:
                mf.close()
        ends = starts[1:] + [-1]
        out.extend(CommitLogSlice(root, path, s, e) for s, e in zip(starts, ends, strict=True))
    return out


def _data_files(root: str) -> list[tuple[str, int, int, bool]]:
    """``(path, first offset, size, whole)`` of the commit-log files with data: a record starts them
    (``whole``), or their start is damaged and whole records follow in them or a later file (``whole``
    False: planned as one slice, which its reader refuses). The others are empty: made ahead of the writer."""
    out = []
    for path in layout.commit_log_files(root):
        mf = MappedFile(path, -1, read_only=True)
        try:
            if mf.file_size <= 0:
                continue
            if record_size_at(mf, 0) > 0:
                out.append((path, mf.file_from_offset, mf.file_size, True))
            elif not _torn_tail(root, path, mf, 0):
                out.append((path, mf.file_from_offset, mf.file_size, False))
        finally:
            mf.close()
    return out


def _planning_queues(root: str) -> list[list[str]]:
    """The consume-queue files of the queues a plan asks (at most ``_MAX_QUEUES``, those with the most units)."""
    queues = [paths for paths in (layout.queue_files(root, t, q) for t, q in layout.list_queues(root)) if paths]
    if len(queues) <= _MAX_QUEUES:
        return queues

    def units(paths: list[str]) -> tuple[int, int]:
        try:
            return len(paths), os.path.getsize(paths[-1])
        except OSError:
            return len(paths), 0

    return sorted(queues, key=units, reverse=True)[:_MAX_QUEUES]


def _queue_end(paths: list[str]) -> int:
    """The end of the record the last unit of a consume queue points at (-1: no unit, or its files gone)."""
    none = np.empty(0, dtype=np.int64)
    for i in range(len(paths) - 1, -1, -1):
        try:
            end = queue_boundaries(paths[i:i + 1], none, none)
        except FileNotFoundError:
            return -1
        if end >= 0:
            return end
    return -1


def _walked_end(path: str, pos: int = 0) -> int:
    """Where a commit-log file's records end, by walking their headers from the record boundary ``pos``."""
    mf = MappedFile(path, -1, read_only=True)
    try:
        return walk_to(mf, pos, mf.file_size)
    finally:
        mf.close()


def _cuts_from(path: str, first: int, chunk: int, n: int, below: dict[int, int]) -> list[int]:
    """A file's slice starts: for each wanted offset, the first record at or after it, walked to from the
    nearest record below it that a consume queue points at (``below``: wanted offset -> that record, -1
    none), checked in place, or from the previous cut. Where the queues point at every record, each walk is a
    record or two; where they point at none, it is the whole file's walk, as without them."""
    starts = [0]
    mf = MappedFile(path, -1, read_only=True)
    try:
        for k in range(1, -(-n // chunk)):
            x = k * chunk
            b = below.get(first + x, -1) - first
            if not (starts[-1] < b < x and record_size_at(mf, b) > 0):
                b = starts[-1]
            at = walk_to(mf, b, x)
            if x <= at < n and at > starts[-1] and record_size_at(mf, at) > 0:
                starts.append(at)
    finally:
        mf.close()
    return starts


def plan_queue_slices(
    root: str, ranges: Mapping[tuple[str, int], tuple[int, int]], messages_per_partition: int, target: int = 1
) -> list[QueueSlice | QueueGroup]:
    """Partitions of at most ``messages_per_partition`` queue offsets, and at least ``target`` of them when
    there are that many messages. Each slice is one queue's consecutive offsets, so a queue's order is kept;
    consecutive slices smaller than that are packed into one :class:`QueueGroup` when at least ``target``
    partitions remain (many small queues make ``target`` tasks, not one each)."""
    total = sum(max(0, hi - lo) for lo, hi in ranges.values())
    messages_per_partition = max(1, min(messages_per_partition, -(-total // max(1, target))))
    out = []
    for (topic, qid), (lo, hi) in sorted(ranges.items()):
        s = lo
        while s < hi:
            e = min(hi, s + messages_per_partition)
            out.append(QueueSlice(root, topic, qid, s, e))
            s = e
    packed: list[list[QueueSlice]] = []
    room = 0
    for sl in out:
        n = sl.end - sl.start
        if packed and n <= room:
            packed[-1].append(sl)
            room -= n
        else:
            packed.append([sl])
            room = messages_per_partition - n
    if len(packed) == len(out) or len(packed) < max(1, target):
        return list(out)
    return [g[0] if len(g) == 1 else QueueGroup(g) for g in packed]


def queue_ranges(
    root: str, topics: list[str] | None, queue_id: int
) -> dict[tuple[str, int], tuple[int, int]]:
    """``{(topic, queue_id): (min_offset, max_offset)}`` of the matching consume queues of ``root``."""
    cl_min = layout.commit_log_min(layout.commit_log_files(root))
    out = {}
    for topic, qid in layout.list_queues(root, topics, queue_id):
        out[(topic, qid)] = queue_bounds(layout.queue_files(root, topic, qid), cl_min)
    return out


def read_slice(
    part: InputPartition, filters: Filters, schema: pa.Schema, rows_per_batch: int = ROWS_PER_BATCH
) -> Iterator[pa.RecordBatch]:
    """The record batches of one partition, of ``schema``: the source's columns, or any of them in any
    order (a user's read schema, checked by ``check_read_schema``; ``headers`` with ``includeHeaders``)."""
    if "headers" not in schema.names:
        # the decoder builds exactly these columns, and skips the work of the others
        yield from _read_slice(part, filters, schema, rows_per_batch)
        return
    for rb in _read_slice(part, filters, _with_properties(schema), rows_per_batch):
        yield project(rb, schema)


def _with_properties(schema: pa.Schema) -> pa.Schema:
    """What the decoder builds for a read schema with ``headers`` (made from ``properties``): the schema
    without it, and with ``properties`` when the schema lacks it."""
    fields = [f for f in schema if f.name != "headers"]
    if "properties" not in schema.names:
        fields.append(decoder_schema().field("properties"))
    return pa.schema(fields)


@functools.cache
def decoder_schema() -> pa.Schema:
    """The Arrow schema of every source column, made once per process (the decoder checks a schema it has
    not seen before, and pyarrow builds it field by field)."""
    return arrow_schema()


def _read_slice(
    part: InputPartition, filters: Filters, schema: pa.Schema, rows_per_batch: int
) -> Iterator[pa.RecordBatch]:
    b = BatchBuilder(
        schema,
        filters.verify_crc,
        filters.topics or None,
        filters.queue_id,
        filters.start_ms,
        filters.end_ms,
        rows_per_batch,
    )
    if isinstance(part, (ArchiveLogSlice, ArchiveQueueSlice)):
        yield from read_archive(part, b, filters, schema, rows_per_batch)
        return
    if isinstance(part, CommitLogSlice):
        try:
            mf = MappedFile(part.path, -1, read_only=True)
        except FileNotFoundError:
            log.warning("%s was deleted before it could be read (store cleaning); skipped", part.path)
            return
        try:
            pos, done = part.start, False
            while not done:
                try:
                    pos, done = scan_file(b, mf, pos, part.end)
                except StoreCorruptedError as e:
                    if not _torn_tail(part.root, part.path, mf, e.offset - mf.file_from_offset):
                        raise
                    log.info("%s: %s at %d with nothing valid after it: a torn tail, the end of the data",
                             part.path, e.reason, e.offset)
                    done = True
                if done and part.end < 0 and _no_blank(mf, pos) and not _torn_tail(part.root, part.path, mf, pos):
                    # the records stop without the end-of-file record while whole records follow (a zeroed size
                    # field, a file cut short): damage, not the end of the data, which stopping would hide
                    raise StoreCorruptedError(part.path, mf.file_from_offset + pos,
                                              "the records stop (a size of zero, or the file's end without "
                                              "its end-of-file record) with records after them")
                if done and 0 <= part.end != pos:
                    # the next slice starts where no record of this walk does (a consume queue pointed
                    # between records): its rows and these could overlap or miss some
                    raise StoreCorruptedError(
                        part.path, mf.file_from_offset + part.end,
                        "a slice boundary that is not a record boundary (the records from %d end at %d)"
                        % (mf.file_from_offset + part.start, mf.file_from_offset + pos))
                rb = b.build()
                if rb is not None:
                    yield rb
        finally:
            mf.close()
        return
    if isinstance(part, QueueGroup):
        for sl in part.slices:
            yield from _read_slice(sl, filters, schema, rows_per_batch)
        return
    if not isinstance(part, QueueSlice):
        if getattr(part, "value", 0) is None:  # Spark's stand-in when partitions() planned none
            return
        raise TypeError("not a pystore partition: %r" % (part,))
    qr = QueueReader(
        part.topic,
        part.queue_id,
        layout.queue_files(part.root, part.topic, part.queue_id),
        layout.commit_log_files(part.root),
    )
    i, done = part.start, False
    while not done:
        i, done = qr.scan(b, i, part.end)
        if qr.lost and filters.fail_on_data_loss:
            raise DataLossError(
                "%s: %d message(s) of %s/%d in offsets [%d, %d) were deleted before they could be read "
                "(set failOnDataLoss=false to skip them)"
                % (part.root, qr.lost, part.topic, part.queue_id, part.start, part.end)
            )
        rb = b.build()
        if rb is not None:
            yield rb
    if qr.lost:
        log.warning(
            "%s: %d message(s) of %s/%d were deleted before they could be read; skipped",
            part.root,
            qr.lost,
            part.topic,
            part.queue_id,
        )


def _no_blank(mf: MappedFile, pos: int) -> bool:
    """Did a walk stop at ``pos`` without the end-of-file BLANK record: on a zero TOTALSIZE, or at the file's
    end? At the writer's tail that is the end of the data; anywhere else, damage."""
    return pos + 8 > mf.file_size or record_size_at(mf, pos) == RECORD_END


def _torn_tail(root: str, path: str, mf: MappedFile, pos: int) -> bool:
    """Is the damage at ``pos`` of ``mf`` a record still being written (nothing valid after it, in its file or
    a later one of ``root``), which recovery would cut as the log's end?"""
    files = layout.commit_log_files(root)
    if mf.file_size < _common_size(files):
        return False                            # a truncated file: a writer's files have their full size
    names = [os.path.basename(f) for f in files]
    base = os.path.basename(path)
    idx = names.index(base) if base in names else len(files)
    return not _valid_after(files, idx, mf, pos)


class DataLossError(RuntimeError):
    """Messages a query needs are gone (the store deleted them), and ``failOnDataLoss`` is set."""


def default_partitions(parallelism: int | None = None) -> int:
    """How many partitions a read aims at without ``minPartitions``: Spark's default parallelism as
    ``register(spark)`` found it, else (a source registered by hand) the planner's cores."""
    return parallelism or os.cpu_count() or 1


class PystoreBatchReader(DataSourceReader):
    """The batch reader: options ``topic`` (one or a comma-separated list; or ``topics``/``subscribe``,
    ``subscribePattern``, ``assign``), ``queue_id``, ``startingOffsets``/``endingOffsets`` (or the
    ``startingTimestamp`` forms), ``start_time``, ``end_time``, ``verify_crc`` (default true),
    ``failOnDataLoss``, ``minPartitions``, ``includeHeaders``, ``bytes_per_partition``,
    ``messages_per_partition`` (docs/spark.md)."""

    def __init__(
        self, options: Mapping[str, str], schema: StructType | None, parallelism: int | None = None
    ) -> None:
        check_options(options, "batch")
        self.parallelism = parallelism
        self.options = dict(options)
        self.headers = parse_bool(options, "includeHeaders", False)
        self.schema = check_read_schema(schema, self.headers)
        self.fleet = members(options)
        self.sub = subscription(options, stream=False)
        self.by_offsets = any(
            (options.get(n.lower()) or "").strip()
            for n in ("startingOffsets", "endingOffsets", "startingTimestamp", "startingOffsetsByTimestamp")
        )
        self.start_ms = parse_time("start_time", options.get("start_time"))
        self.end_ms = parse_time("end_time", options.get("end_time"))
        self.verify_crc = parse_bool(options, "verify_crc", True)
        for m in self.fleet:
            mine = member_options(options, self.fleet, m)
            parse_bool(mine, "failOnDataLoss", True)
        self.bytes_per_partition = parse_int(options, "bytes_per_partition", DEFAULT_BYTES_PER_PARTITION, 1)
        self.messages_per_partition = per_partition(options, DEFAULT_MESSAGES_PER_PARTITION)
        self.min_partitions = parse_int(options, "minPartitions", None, lowest=1)

    def _member_of(self, part: InputPartition) -> Member | None:
        if isinstance(part, QueueGroup) and part.slices:
            return self._member_of(part.slices[0])
        if isinstance(part, (ArchiveLogSlice, ArchiveQueueSlice)):
            return part.member
        root = getattr(part, "root", None)
        return next((m for m in self.fleet if m.root == root), None)

    def _filters(self, part: InputPartition | None = None) -> Filters:
        member = self._member_of(part) if part is not None else None
        options = member_options(self.options, self.fleet, member) if member is not None else self.options
        return Filters(
            list(self.sub.topics or []),
            self.sub.queue_id,
            self.start_ms,
            self.end_ms,
            self.verify_crc,
            # messages deleted while the read runs: skipped unless failOnDataLoss was asked for
            parse_bool(options, "failOnDataLoss", False) if member is not None or not _per_store(options) else False,
        )

    def _queue_ranges(self, view: StoreView) -> dict[tuple[str, int], tuple[int, int]]:
        m = view.member
        options = member_options(self.options, self.fleet, m)
        bounds = view.bounds(view.queues(self.sub))
        starts = starting_offsets(options, self.sub, m.root or "", bounds, stream=False, archive=time_archive(m)) or {}
        ends = ending_offsets(options, self.sub, bounds)
        out = {}
        for k, (lo, hi) in bounds.items():
            s, e = starts.get(k, lo), ends.get(k, hi)
            if s < lo:
                msg = "%s: offsets [%d, %d) of %s/%d were deleted by the store's cleaning (its min offset is %d)" % (
                    m.root or m.archive, s, min(e, lo), k[0], k[1], lo)
                if parse_bool(options, "failOnDataLoss", True):
                    raise DataLossError(msg + "; set failOnDataLoss=false to read from there")
                log.warning("%s; reading from %d", msg, lo)
                s = lo
            if e > s:
                out[k] = (s, e)
        return out

    def partitions(self) -> list[InputPartition]:
        target = self.min_partitions or default_partitions(self.parallelism)
        by_queue = not self.sub.everything or self.by_offsets
        ranges: dict[int, dict[tuple[str, int], tuple[int, int]]] = {}
        views = [StoreView(m) for m in self.fleet]
        log_views = []
        for i, view in enumerate(views):
            m = view.member
            if by_queue and (m.archive is not None or layout.consume_queue_dir(m.root or "") is not None):
                ranges[i] = self._queue_ranges(view)
            elif self.by_offsets or self.sub.pattern is not None or self.sub.assign is not None:
                raise OptionError(
                    "%s has no consume queues: offsets, subscribePattern and assign need them (read by "
                    "topic, queue_id and time instead)" % m.root
                )
            else:
                log_views.append(view)
        parts: list[InputPartition] = []
        # each store gets its share of the target, by its size
        n_msgs = sum(hi - lo for r in ranges.values() for lo, hi in r.values())
        for i, r in ranges.items():
            share = sum(hi - lo for lo, hi in r.values())
            want = max(1, -(-target * share // n_msgs)) if n_msgs else 1
            parts.extend(views[i].plan_queues(r, self.messages_per_partition, want))
        for view in log_views:
            parts.extend(view.plan_log(self.bytes_per_partition, -(-target // len(views))))
        log.info("pystore read of %s: %d partition(s)", ",".join(m.name for m in self.fleet), len(parts))
        return parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        yield from read_slice(partition, self._filters(partition), arrow_schema(self.schema))


def _per_store(options: Mapping[str, str]) -> bool:
    return (options.get("failondataloss") or "").strip().startswith("{")


def time_archive(member: Member) -> tuple[str, dict[str, Any]] | None:
    """The member's archive as a start by time searches it: (URI, options), None without one."""
    return None if member.archive is None else (member.archive, json.loads(member.archive_options))
