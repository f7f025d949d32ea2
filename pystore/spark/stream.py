"""Streaming reads: ``spark.readStream.format("pystore").option("topics", "T1,T2").load(root)``.

Offsets are consume-queue offsets, one per queue: ``{"topic/queue_id": next_offset}`` (JSON, as Spark
checkpoints them). ``latestOffset`` reads each queue's max offset from its files (binary search, cheap
enough for Spark's continuous polling), so queues created after the query started join it at their min
offset without a restart. A micro-batch ``(start, end]`` is planned into
:class:`~pystore.spark.batch.QueueSlice` partitions (small ones packed into a ``QueueGroup``: as many tasks
as ``minPartitions``, else Spark's default parallelism) and decoded like a batch read; a restarted query
replans the checkpointed batch from the same offsets, so nothing is lost or read twice. A user's
``.schema(...)`` narrows the rows as in a batch read; the offsets never come from rows (they are the queues'
bounds, read from their files), so a query reading only ``body`` resumes as one reading every column.

Options (docs/spark.md): one of ``topics`` / ``subscribe`` / ``subscribePattern`` / ``assign`` (required;
a pattern is matched again at every trigger, so new topics join), ``startingOffsets`` (``earliest`` default,
``latest``, or JSON with the offsets of some queues, ``{"topic": {"0": n}}`` or ``{"topic/0": n}``, -2 =
earliest, -1 = latest; queues left out start at their min offset) or ``startingTimestamp`` /
``startingOffsetsByTimestamp``, ``maxOffsetsPerTrigger`` = ``maxMessagesPerTrigger`` (read limit, shared
among queues in proportion to their backlog; honoured by ``Trigger.AvailableNow`` on PySpark 4.2+),
``minOffsetsPerTrigger`` with ``maxTriggerDelay`` (wait for that many messages, at most that long),
``failOnDataLoss`` (default true: an offset below a queue's min offset, i.e. messages deleted by the
store's cleaning before they were read, fails the query; false skips ahead and logs a warning),
``minPartitions``, ``includeHeaders``, ``verify_crc`` (default true). The latest offsets are reported for
the query's progress (``reportLatestOffset``); :func:`pystore.spark.offsets_behind_latest` turns a progress
into Kafka's offsets-behind figures.

Under ``Trigger.AvailableNow`` without a limit, a drain is one micro-batch of everything there was at the
start. Its time goes to the query's start (Spark's Python stream runner and planner processes, which
import PySpark, PyArrow and pystore), then ``addBatch``: the tasks, where the decoder's share is small
next to Spark's intake of the Arrow batches (rows built from every column read); the offsets, planning and
checkpoint writes are a few percent (``bench/profile_spark_stream.py`` prints the split).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from pystore.spark.batch import (
    DEFAULT_MESSAGES_PER_PARTITION,
    DataLossError,
    Filters,
    default_partitions,
    read_slice,
    time_archive,
)
from pystore.spark.fleet import StoreView, is_fleet, member_options, members
from pystore.spark.options import OptionError, check_options, parse_bool, parse_int, parse_offsets, per_partition
from pystore.spark.schema import arrow_schema, check_read_schema
from pystore.spark.subscription import starting_offsets, subscription

try:  # PySpark 4.2+: admission control and Trigger.AvailableNow for Python stream readers
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadMaxRows,
        ReadMinRows,
        SupportsTriggerAvailableNow,
    )
except ImportError:  # pragma: no cover - PySpark 4.0/4.1
    ReadAllAvailable = ReadMaxRows = ReadMinRows = None  # type: ignore[assignment,misc]

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        """Stand-in: PySpark < 4.2 has no AvailableNow hook for Python sources."""


__all__ = ["PystoreStreamReader", "queue_key", "parse_key", "share_limit"]

log = logging.getLogger(__name__)

Offsets = dict[str, Any]
# an offset's key inside the reader: (store name, topic, queue id)
Key = tuple[str, str, int]


def queue_key(topic: str, queue_id: int) -> str:
    return "%s/%d" % (topic, queue_id)


def parse_key(key: str) -> tuple[str, int]:
    topic, sep, q = key.rpartition("/")
    if not sep or not topic or not q.isdigit():
        raise ValueError('bad offset key %r: expected "topic/queue_id"' % key)
    return topic, int(q)


def share_limit(start: Mapping[Any, int], latest: Mapping[Any, int], limit: int) -> dict[Any, int]:
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


def parse_duration(name: str, raw: str) -> int:
    """Milliseconds from ``raw``: a number with a unit (``500ms``, ``30s``, ``15m``, ``1h``, ``1d``) or bare
    milliseconds, as Spark's Kafka source reads ``maxTriggerDelay``."""
    m = re.fullmatch(r"\s*([0-9]+)\s*(ms|s|m|min|h|d)?\s*", raw.lower())
    if m is None:
        raise OptionError("option %s: expected a duration such as 500ms, 30s, 15m or 1h, got %r" % (name, raw))
    unit = {"ms": 1, None: 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}
    return int(m.group(1)) * unit[m.group(2)]


class PystoreStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The stream reader of one store, or of a fleet of stores (roots, archives or both: see
    ``pystore.spark.fleet``), with the options of the module docstring."""

    def __init__(
        self, options: Mapping[str, str], schema: StructType | None, parallelism: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``clock``: seconds on a clock that never goes back, the time ``maxTriggerDelay`` is measured on
        (``time.monotonic``; a test drives the delay with a fake one instead of sleeping)."""
        check_options(options, "stream")
        self.clock = clock
        self.parallelism = parallelism
        self.options = dict(options)
        self.headers = parse_bool(options, "includeHeaders", False)
        self.schema = check_read_schema(schema, self.headers)
        self.fleet = members(options)
        self.views = [StoreView(m) for m in self.fleet]
        self.keyed = is_fleet(options, self.fleet)
        self.by_name = {v.member.name: v for v in self.views}
        self.sub = subscription(options, stream=True)
        self.topics = list(self.sub.topics or [])
        limits = [n for n in ("maxOffsetsPerTrigger", "maxMessagesPerTrigger") if options.get(n.lower())]
        if len(limits) > 1:
            raise OptionError("options maxOffsetsPerTrigger and maxMessagesPerTrigger are one limit: give one")
        self.max_per_trigger = parse_int(options, limits[0], None, lowest=1) if limits else None
        self.min_per_trigger = parse_int(options, "minOffsetsPerTrigger", None, lowest=1)
        delay = options.get("maxtriggerdelay")
        if delay is not None and self.min_per_trigger is None:
            raise OptionError("option maxTriggerDelay: it bounds the wait of minOffsetsPerTrigger, which is not set")
        self.max_trigger_delay_ms = parse_duration("maxTriggerDelay", delay) if delay is not None else 15 * 60_000
        if self.max_per_trigger is not None and self.min_per_trigger is not None:
            if self.min_per_trigger > self.max_per_trigger:
                raise OptionError("option minOffsetsPerTrigger (%d) is above maxOffsetsPerTrigger (%d)"
                                  % (self.min_per_trigger, self.max_per_trigger))
        self.fail_on_data_loss = {v.member.name: parse_bool(member_options(options, self.fleet, v.member),
                                                            "failOnDataLoss", True) for v in self.views}
        self.verify_crc = parse_bool(options, "verify_crc", True)
        self.messages_per_partition = per_partition(options, DEFAULT_MESSAGES_PER_PARTITION)
        self.min_partitions = parse_int(options, "minPartitions", None, lowest=1)
        self._target: dict[Key, int] | None = None
        self._last_batch_ms = clock() * 1000.0
        # fail at query start on a bad starting position, not at the first offsets asked
        for v in self.views:
            mine = member_options(options, self.fleet, v.member)
            for name in ("startingOffsets", "startingOffsetsByTimestamp"):
                raw = (mine.get(name.lower()) or "").strip()
                if raw and raw.lower() not in ("earliest", "latest"):
                    self.sub.check(name, parse_offsets(name, raw, lowest=-2 if name == "startingOffsets" else 0))
        if (options.get("startingtimestamp") or "").strip():
            parse_int(options, "startingTimestamp", None, lowest=0)
        given = [n for n in ("startingOffsets", "startingTimestamp", "startingOffsetsByTimestamp")
                 if (options.get(n.lower()) or "").strip()]
        if len(given) > 1:
            raise OptionError("options %s: give only one starting position" % " and ".join(given))

    # -- offsets --------------------------------------------------------------------------------------

    # -- offsets: (store, topic, queue id) inside, JSON for Spark -------------------------------------------------

    def _encode(self, offsets: Mapping[Key, int]) -> Offsets:
        """Offsets as Spark checkpoints them: ``{"topic/queue_id": n}`` for one store, ``{"store": {"topic":
        {"queue_id": n}}}`` (the Kafka form nested by store) for a fleet."""
        if not self.keyed:
            return {queue_key(t, q): n for (_, t, q), n in sorted(offsets.items())}
        out: dict[str, Any] = {}
        for (store, t, q), n in sorted(offsets.items()):
            out.setdefault(store, {}).setdefault(t, {})[str(q)] = n
        return out

    def _decode(self, offsets: Mapping[str, Any]) -> dict[Key, int]:
        if not self.keyed:
            name = self.fleet[0].name
            return {(name, *parse_key(k)): int(n) for k, n in offsets.items()}
        out: dict[Key, int] = {}
        for store, topics in offsets.items():
            if not isinstance(topics, dict):
                raise ValueError("offsets of a fleet are keyed by store: %r is not {topic: {queue id: offset}}" % store)
            for t, qs in topics.items():
                for q, n in qs.items():
                    out[(store, t, int(q))] = int(n)
        return out

    def _ranges(self) -> dict[Key, tuple[int, int]]:
        out = {}
        for v in self.views:
            v.refresh()
            for (t, q), r in v.bounds(v.queues(self.sub)).items():
                out[(v.member.name, t, q)] = r
        return out

    def initialOffset(self) -> Offsets:
        out: dict[Key, int] = {}
        for v in self.views:
            bounds = v.bounds(v.queues(self.sub))
            mine = member_options(self.options, self.fleet, v.member)
            start = starting_offsets(mine, self.sub, v.member.root or "", bounds, stream=True,
                                     archive=time_archive(v.member))
            for (t, q), (lo, _) in bounds.items():
                out[(v.member.name, t, q)] = lo if start is None else start.get((t, q), lo)
            for (t, q), n in (start or {}).items():
                out.setdefault((v.member.name, t, q), n)
        return self._encode(out)

    def _latest(self) -> dict[Key, int]:
        return {k: hi for k, (_, hi) in self._ranges().items()}

    def reportLatestOffset(self) -> Offsets:
        """The latest offset of every subscribed queue, for the query's progress (``latestOffset``)."""
        return self._encode(self._latest())

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._latest()

    def getDefaultReadLimit(self) -> Any:
        if ReadMaxRows is None:  # pragma: no cover - PySpark < 4.2
            return None
        if self.max_per_trigger:
            return ReadMaxRows(self.max_per_trigger)
        if self.min_per_trigger:
            return ReadMinRows(self.min_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: Offsets | None = None, limit: Any = None) -> Offsets:
        ranges = self._ranges()
        latest = {k: hi for k, (_, hi) in ranges.items()}
        if self._target is not None:  # AvailableNow: never past what existed when the query started
            latest = {k: min(v, self._target[k]) for k, v in latest.items() if k in self._target}
        if start is None:  # PySpark 4.0/4.1 call latestOffset() without arguments
            return self._encode(latest)
        begin = self._decode(start)
        for k in latest:
            if k not in begin:
                begin[k] = ranges[k][0]  # a new queue joins at its min offset
        for k, s in begin.items():
            if k not in latest:
                latest[k] = s  # a queue that vanished (or is outside the AvailableNow target)
            elif latest[k] < s:
                msg = (
                    "store %s: queue %s/%d ends at offset %d, behind the query's offset %d (was the store "
                    "replaced or truncated?)" % (k[0], k[1], k[2], latest[k], s)
                )
                if self.fail_on_data_loss.get(k[0], True):
                    raise DataLossError(msg + "; set failOnDataLoss=false to wait for new messages instead")
                log.warning("%s; waiting", msg)
                latest[k] = s
        # minOffsetsPerTrigger: wait for that many new messages, at most maxTriggerDelay since the last
        # batch (never under AvailableNow, which must end)
        min_rows = getattr(limit, "min_rows", None)
        if min_rows is None and self.min_per_trigger and getattr(limit, "max_rows", None) is not None:
            min_rows = self.min_per_trigger  # both limits given: the engine passes only the max
        if min_rows is not None and self._target is None:
            backlog = sum(max(0, latest[k] - begin[k]) for k in latest)
            waited = self.clock() * 1000.0 - self._last_batch_ms
            if backlog < min_rows and waited < self.max_trigger_delay_ms:
                return dict(start)
        max_rows = getattr(limit, "max_rows", None)
        end = share_limit(begin, latest, int(max_rows)) if max_rows is not None else latest
        if any(end[k] > begin[k] for k in end):
            self._last_batch_ms = self.clock() * 1000.0
        return self._encode(end)

    # -- planning and reading -------------------------------------------------------------------------

    def partitions(self, start: Offsets, end: Offsets) -> list[InputPartition]:
        ranges = self._ranges()
        begin, stop = self._decode(start), self._decode(end)
        todo: dict[str, dict[tuple[str, int], tuple[int, int]]] = {}
        for k, e in stop.items():
            if k[0] not in self.by_name:
                raise DataLossError("the query's offsets name store %s, which it no longer reads (stores: %s)"
                                    % (k[0], ", ".join(sorted(self.by_name))))
            lo_now = ranges.get(k, (0, 0))[0]
            s = begin.get(k)
            if s is None:
                s = lo_now  # joined in this batch
            elif s < lo_now:
                msg = (
                    "store %s: offsets [%d, %d) of %s/%d were deleted by the store's cleaning before they were read "
                    "(its min offset is now %d)" % (k[0], s, min(e, lo_now), k[1], k[2], lo_now)
                )
                if self.fail_on_data_loss.get(k[0], True):
                    raise DataLossError(msg + "; set failOnDataLoss=false to skip ahead")
                log.warning("%s; skipping ahead", msg)
                s = lo_now
            if e > s:
                todo.setdefault(k[0], {})[(k[1], k[2])] = (s, e)
        target = self.min_partitions or default_partitions(self.parallelism)
        total = sum(e - s for r in todo.values() for s, e in r.values()) or 1
        out: list[InputPartition] = []
        for name, r in todo.items():
            want = max(1, -(-target * sum(e - s for s, e in r.values()) // total))
            out.extend(self.by_name[name].plan_queues(r, self.messages_per_partition, want))
        return out

    def _store_of(self, part: InputPartition) -> str:
        slices = getattr(part, "slices", None)
        one = slices[0] if slices else part
        member = getattr(one, "member", None)
        if member is not None:
            return str(member.name)
        return next((v.member.name for v in self.views if v.member.root == getattr(one, "root", None)), "")

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        f = Filters([], -1, None, None, self.verify_crc, self.fail_on_data_loss.get(self._store_of(partition), True))
        yield from read_slice(partition, f, arrow_schema(self.schema))

    def commit(self, end: Offsets) -> None:
        """Nothing to acknowledge: the store keeps every message until its own cleaning deletes it."""
        return None

    def stop(self) -> None:
        return None
