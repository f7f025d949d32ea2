"""Streaming reads: ``spark.readStream.format("pystore").option("topics", "T1,T2").load(root)``.

Offsets are consume-queue offsets, one per queue: ``{"topic/queue_id": next_offset}`` (JSON, as Spark
checkpoints them). ``latestOffset`` reads each queue's max offset from its files (binary search, cheap
enough for Spark's continuous polling), so queues created after the query started join it at their min
offset without a restart. A micro-batch ``(start, end]`` is planned into
:class:`~pystore.spark.batch.QueueSlice`
partitions and decoded like a batch read; a restarted query replans the checkpointed batch from the same
offsets, so nothing is lost or read twice.

Options: ``topics`` (required), ``startingOffsets`` (``earliest`` default, ``latest``, or JSON with the
offsets of some queues, -2 = earliest, -1 = latest; queues left out start at their min offset),
``maxMessagesPerTrigger`` (read limit, shared among queues in proportion to their backlog; honoured by
``Trigger.AvailableNow`` on PySpark 4.2+), ``failOnDataLoss`` (default true: an offset below a queue's min
offset, i.e. messages deleted by the store's cleaning before they were read, fails the query; false skips
ahead and logs a warning), ``verify_crc`` (default true).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from pystore.spark.batch import (
    DEFAULT_MESSAGES_PER_PARTITION,
    DataLossError,
    Filters,
    plan_queue_slices,
    queue_ranges,
    read_slice,
)
from pystore.spark.options import parse_bool, parse_int, parse_list, roots
from pystore.spark.schema import arrow_schema, check_read_schema

try:  # PySpark 4.2+: admission control and Trigger.AvailableNow for Python stream readers
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow
except ImportError:  # pragma: no cover - PySpark 4.0/4.1
    ReadAllAvailable = ReadMaxRows = None  # type: ignore[assignment,misc]

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        """Stand-in: PySpark < 4.2 has no AvailableNow hook for Python sources."""


__all__ = ["PystoreStreamReader", "queue_key", "parse_key", "share_limit"]

log = logging.getLogger(__name__)

Offsets = dict[str, int]


def queue_key(topic: str, queue_id: int) -> str:
    return "%s/%d" % (topic, queue_id)


def parse_key(key: str) -> tuple[str, int]:
    topic, sep, q = key.rpartition("/")
    if not sep or not topic or not q.isdigit():
        raise ValueError('bad offset key %r: expected "topic/queue_id"' % key)
    return topic, int(q)


def share_limit(start: Mapping[str, int], latest: Mapping[str, int], limit: int) -> Offsets:
    """End offsets reading at most ``limit`` messages from ``start`` towards ``latest``: each queue gets a
    share in proportion to its backlog (largest remainders first, ties by key), so none starves."""
    backlog = {k: max(0, latest[k] - start[k]) for k in latest}
    total = sum(backlog.values())
    if total <= limit:
        return dict(latest)
    shares = {k: backlog[k] * limit // total for k in backlog}
    left = limit - sum(shares.values())
    order = sorted(backlog, key=lambda k: (-(backlog[k] * limit % total), k))
    for k in order:
        if left <= 0:
            break
        if shares[k] < backlog[k]:
            shares[k] += 1
            left -= 1
    return {k: start[k] + shares[k] for k in latest}


class PystoreStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The stream reader of one store root (see the module docstring for the options)."""

    def __init__(self, options: Mapping[str, str], schema: StructType | None) -> None:
        self.schema = check_read_schema(schema)
        rs = roots(options)
        if len(rs) != 1:
            raise ValueError(
                "a pystore stream reads one store (offsets are per topic/queue); got %d roots: "
                "start one query per root and union them" % len(rs)
            )
        self.root = rs[0]
        self.topics = parse_list(options, "topics")
        if not self.topics:
            raise ValueError('option "topics" is required for a pystore stream (comma-separated topic names)')
        self.starting = (
            options.get("startingoffsets") or options.get("startingOffsets") or "earliest"
        ).strip()
        self.max_per_trigger = parse_int(options, "maxmessagespertrigger", None, lowest=1)
        self.fail_on_data_loss = parse_bool(options, "failondataloss", True)
        self.verify_crc = parse_bool(options, "verify_crc", True)
        self.messages_per_partition = parse_int(
            options, "messages_per_partition", DEFAULT_MESSAGES_PER_PARTITION, 1
        )
        self._target: Offsets | None = None
        if self.starting.lower() not in ("earliest", "latest"):
            self._parse_starting()  # fail at query start on bad JSON

    # -- offsets --------------------------------------------------------------------------------------

    def _ranges(self) -> dict[str, tuple[int, int]]:
        return {queue_key(t, q): r for (t, q), r in queue_ranges(self.root, self.topics, -1).items()}

    def _parse_starting(self) -> Offsets:
        try:
            given = json.loads(self.starting)
        except json.JSONDecodeError as exc:
            raise ValueError(
                'startingOffsets: expected earliest, latest or JSON {"topic/queue_id": offset}, '
                "got %r (%s)" % (self.starting, exc)
            ) from None
        if not isinstance(given, dict):
            raise ValueError('startingOffsets JSON must be an object {"topic/queue_id": offset}')
        out = {}
        for k, v in given.items():
            topic, _ = parse_key(k)
            if topic not in self.topics:
                raise ValueError(
                    "startingOffsets names %r, whose topic is not in topics=%s" % (k, self.topics)
                )
            if not isinstance(v, int) or isinstance(v, bool) or v < -2:
                raise ValueError(
                    "startingOffsets[%r] must be an offset >= 0, -2 (earliest) or -1 (latest)" % k
                )
            out[k] = v
        return out

    def initialOffset(self) -> Offsets:
        ranges = self._ranges()
        mode = self.starting.lower()
        if mode == "earliest":
            return {k: lo for k, (lo, _) in ranges.items()}
        if mode == "latest":
            return {k: hi for k, (_, hi) in ranges.items()}
        out = {}
        for k, v in self._parse_starting().items():
            lo, hi = ranges.get(k, (0, 0))
            out[k] = lo if v == -2 else hi if v == -1 else v
        return out

    def _latest(self) -> dict[str, int]:
        return {k: hi for k, (_, hi) in self._ranges().items()}

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._latest()

    def getDefaultReadLimit(self) -> Any:
        if ReadMaxRows is None:  # pragma: no cover - PySpark < 4.2
            return None
        return ReadMaxRows(self.max_per_trigger) if self.max_per_trigger else ReadAllAvailable()

    def latestOffset(self, start: Offsets | None = None, limit: Any = None) -> Offsets:
        ranges = self._ranges()
        latest = {k: hi for k, (_, hi) in ranges.items()}
        if self._target is not None:  # AvailableNow: never past what existed when the query started
            latest = {k: min(v, self._target[k]) for k, v in latest.items() if k in self._target}
        if start is None:  # PySpark 4.0/4.1 call latestOffset() without arguments
            return latest
        begin = dict(start)
        for k in latest:
            if k not in begin:
                begin[k] = ranges[k][0]  # a new queue joins at its min offset
        for k, s in begin.items():
            if k not in latest:
                latest[k] = s  # a queue that vanished (or is outside the AvailableNow target)
            elif latest[k] < s:
                msg = (
                    "%s: queue %s ends at offset %d, behind the query's offset %d (was the store "
                    "replaced or truncated?)" % (self.root, k, latest[k], s)
                )
                if self.fail_on_data_loss:
                    raise DataLossError(msg + "; set failOnDataLoss=false to wait for new messages instead")
                log.warning("%s; waiting", msg)
                latest[k] = s
        max_rows = getattr(limit, "max_rows", None)
        if max_rows is not None:
            return share_limit(begin, latest, int(max_rows))
        return latest

    # -- planning and reading -------------------------------------------------------------------------

    def partitions(self, start: Offsets, end: Offsets) -> list[InputPartition]:
        ranges = self._ranges()
        todo: dict[tuple[str, int], tuple[int, int]] = {}
        for k, e in end.items():
            lo_now = ranges.get(k, (0, 0))[0]
            s = start.get(k)
            if s is None:
                s = lo_now  # joined in this batch
            elif s < lo_now:
                msg = (
                    "%s: offsets [%d, %d) of %s were deleted by the store's cleaning before they were read "
                    "(its min offset is now %d)" % (self.root, s, min(e, lo_now), k, lo_now)
                )
                if self.fail_on_data_loss:
                    raise DataLossError(msg + "; set failOnDataLoss=false to skip ahead")
                log.warning("%s; skipping ahead", msg)
                s = lo_now
            if e > s:
                todo[parse_key(k)] = (s, e)
        return list(plan_queue_slices(self.root, todo, self.messages_per_partition))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        f = Filters([], -1, None, None, self.verify_crc, self.fail_on_data_loss)
        yield from read_slice(partition, f, arrow_schema(self.schema))

    def commit(self, end: Offsets) -> None:
        """Nothing to acknowledge: the store keeps every message until its own cleaning deletes it."""
        return None

    def stop(self) -> None:
        return None
