"""Which queues a read takes and where in them it starts and ends, from the Kafka-source option names
(docs/spark.md): ``subscribe`` / ``topics`` (comma list), ``subscribePattern`` (a regex matching whole
topic names), ``assign`` (``{"topic": [0, 1]}``), ``startingOffsets`` / ``endingOffsets`` (``earliest``,
``latest`` or offsets JSON, -2 earliest, -1 latest), ``startingTimestamp`` / ``startingOffsetsByTimestamp``
(store time, epoch ms: the first queue offset stored at or after it, found by the store's own time search).

Everything here runs on the driver, from the consume-queue files (``layout``), before a partition is planned.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pystore.columns._arrow_plan import queue_bounds
from pystore.spark import layout
from pystore.spark.options import OptionError, option_value, parse_assign, parse_int, parse_list, parse_offsets

__all__ = ["Subscription", "subscription", "starting_offsets", "ending_offsets", "queue_bounds_of"]

Queue = tuple[str, int]


@dataclass(frozen=True)
class Subscription:
    """Topics by name, by pattern, or single queues (``assign``); all three None: every topic."""

    topics: tuple[str, ...] | None = None
    pattern: str | None = None
    assign: tuple[Queue, ...] | None = None
    queue_id: int = -1  # the batch option queue_id: that queue id in every subscribed topic

    @property
    def everything(self) -> bool:
        return self.topics is None and self.pattern is None and self.assign is None and self.queue_id < 0

    def covers(self, topic: str, queue_id: int) -> bool:
        if self.assign is not None:
            return (topic, queue_id) in self.assign
        if self.queue_id >= 0 and queue_id != self.queue_id:
            return False
        if self.pattern is not None:
            return re.fullmatch(self.pattern, topic) is not None
        return self.topics is None or topic in self.topics

    def check(self, name: str, queues: Mapping[Queue, int]) -> None:
        """Refuse offsets of ``name`` for a queue this subscription does not read."""
        for t, q in queues:
            if not self.covers(t, q):
                raise OptionError("option %s names %s/%d, which the subscription does not read" % (name, t, q))

    def queues(self, root: str) -> list[Queue]:
        """The subscribed queues that have a consume-queue folder in ``root`` now (``assign``: all of them,
        so a queue created later joins a stream)."""
        if self.assign is not None:
            return list(self.assign)
        if self.pattern is not None:
            rx = re.compile(self.pattern)
            return [(t, q) for t, q in layout.list_queues(root, None, self.queue_id) if rx.fullmatch(t)]
        return layout.list_queues(root, list(self.topics) if self.topics else None, self.queue_id)


def subscription(options: Mapping[str, str], stream: bool) -> Subscription:
    """The subscription options of a read; a stream needs exactly one of them, a batch read at most one
    (none: every topic)."""
    given = [n for n in ("topic", "topics", "subscribe", "subscribePattern", "assign") if option_value(options, n) is not None]
    if stream and not given:
        raise OptionError(
            'option "topics" is required for a pystore stream (or subscribe, subscribePattern or assign, '
            "as Spark's Kafka source takes)"
        )
    if len(given) > 1:
        raise OptionError("options %s: give only one way to choose the topics" % " and ".join(given))
    queue_id = -1 if stream else parse_int(options, "queue_id", -1, lowest=0)
    if not given:
        return Subscription(queue_id=queue_id)
    name = given[0]
    raw = option_value(options, name) or ""
    if name == "subscribePattern":
        try:
            re.compile(raw)
        except re.error as exc:
            raise OptionError("option subscribePattern: %r is not a regular expression (%s)" % (raw, exc)) from None
        return Subscription(pattern=raw, queue_id=queue_id)
    if name == "assign":
        if queue_id >= 0:
            raise OptionError("options assign and queue_id: assign names the queues already")
        return Subscription(assign=tuple(parse_assign(raw)))
    topics = parse_list(options, name)
    if not topics:
        raise OptionError("option %s: no topic in %r" % (name, raw))
    return Subscription(topics=tuple(topics), queue_id=queue_id)


def queue_bounds_of(root: str, queues: list[Queue]) -> dict[Queue, tuple[int, int]]:
    """``{queue: (min_offset, max_offset)}`` from the consume-queue files (``(0, 0)`` for a queue with none)."""
    cl_min = layout.commit_log_min(layout.commit_log_files(root))
    return {(t, q): queue_bounds(layout.queue_files(root, t, q), cl_min) for t, q in queues}


def _by_time(root: str, when: Mapping[Queue, int], archive: tuple[str, dict[str, Any]] | None = None) -> dict[Queue, int]:
    """The first offset of each queue stored at or after its time (the queue's max offset when none is yet),
    by the store's own time search, on a read-only store (no lock: a live writer may run); with ``archive``
    (its URI and file system options), the store's archive searched too, for times below the local data."""
    from pystore import MessageStore

    if not root:
        assert archive is not None
        return _by_time_in_archive(archive, when)
    out = {}
    extra: dict[str, Any] = {} if archive is None else {"archive_uri": archive[0], "archive_options": archive[1]}
    with MessageStore.open(root, read_only=True, **extra) as store:
        for (t, q), ms in when.items():
            out[(t, q)] = store.get_offset_in_queue_by_time(t, q, ms, "lower")
    return out


def _by_time_in_archive(archive: tuple[str, dict[str, Any]], when: Mapping[Queue, int]) -> dict[Queue, int]:
    """``_by_time`` for an archive named without its root: the archive's own time search over the queue offsets
    it holds (its manifest, the queue files it probes, the commit-log files holding the times asked), through a
    cache in a temporary folder removed after."""
    import tempfile

    from pystore.archive.archive import Archive
    from pystore.config import StoreConfig

    out = {}
    with tempfile.TemporaryDirectory(prefix="pystore-time-start-") as tmp:
        arch = Archive(StoreConfig(store_path_root_dir=tmp, archive_uri=archive[0], archive_options=archive[1]))
        try:
            arch.ensure_loaded()
            for (t, q), ms in when.items():
                low, high = max(arch.queue_min_offset(t, q), 0), arch.queue_end(t, q)
                out[(t, q)] = arch.queue_offset_by_time(None, t, q, low, high, ms, True) if low < high else high
        finally:
            arch.close()
    return out


def starting_offsets(
    options: Mapping[str, str],
    sub: Subscription,
    root: str,
    bounds: Mapping[Queue, tuple[int, int]],
    stream: bool,
    archive: tuple[str, dict[str, Any]] | None = None,
) -> dict[Queue, int] | None:
    """Where each queue of ``bounds`` starts, from ``startingOffsets`` / ``startingTimestamp`` /
    ``startingOffsetsByTimestamp`` (at most one of them); None when none is given (earliest). A queue left
    out of a JSON starts at its earliest offset. ``archive``: the store's (URI, options), searched by a start by
    time below the local data."""
    given = [
        n for n in ("startingOffsets", "startingTimestamp", "startingOffsetsByTimestamp")
        if (option_value(options, n) or "").strip()
    ]
    if len(given) > 1:
        raise OptionError("options %s: give only one starting position" % " and ".join(given))
    if not given:
        return None
    name = given[0]
    raw = (option_value(options, name) or "").strip()
    if name == "startingTimestamp":
        ms = parse_int(options, name, None, lowest=0)
        assert ms is not None
        return _by_time(root, {k: ms for k in bounds}, archive)
    if name == "startingOffsetsByTimestamp":
        when = parse_offsets(name, raw, lowest=0)
        sub.check(name, when)
        at = _by_time(root, {k: v for k, v in when.items()}, archive)
        return {k: at.get(k, lo) for k, (lo, _) in bounds.items()} | at
    mode = raw.lower()
    if mode == "earliest":
        return {k: lo for k, (lo, _) in bounds.items()}
    if mode == "latest":
        if not stream:
            raise OptionError("option startingOffsets: latest is for streams (a batch read would be empty)")
        return {k: hi for k, (_, hi) in bounds.items()}
    offsets = parse_offsets(name, raw, lowest=-2)
    sub.check(name, offsets)
    out = {k: lo for k, (lo, _) in bounds.items()}
    for k, v in offsets.items():
        lo, hi = bounds.get(k, (0, 0))
        if v == -1 and not stream:
            raise OptionError("option startingOffsets: -1 (latest) of %s/%d is for streams" % k)
        out[k] = lo if v == -2 else hi if v == -1 else v
    return out


def ending_offsets(
    options: Mapping[str, str], sub: Subscription, bounds: Mapping[Queue, tuple[int, int]]
) -> dict[Queue, int]:
    """Where each queue of a batch read ends (exclusive), from ``endingOffsets`` (default latest)."""
    raw = (option_value(options, "endingOffsets") or "latest").strip()
    if raw.lower() == "latest":
        return {k: hi for k, (_, hi) in bounds.items()}
    if raw.lower() == "earliest":
        raise OptionError("option endingOffsets: earliest would read nothing; use latest or offsets JSON")
    offsets = parse_offsets("endingOffsets", raw, lowest=-1)
    sub.check("endingOffsets", offsets)
    out = {k: hi for k, (_, hi) in bounds.items()}
    for k, v in offsets.items():
        hi = bounds.get(k, (0, 0))[1]
        out[k] = hi if v == -1 else min(v, hi)
    return out
