"""A fleet: the stores one query reads, each by a name, from a local root, an archive, or both.

``load(...)`` (or the ``stores`` option) takes a comma-separated list of locations, each ``[name=]location``:

* a path is a store root (pystore's, or a RocketMQ broker's ``store/`` folder);
* a URI (``s3://bucket/prefix``, ``file:///mnt/archive``, any ``pyarrow.fs`` URI) is a store's archive
  (``archive_uri``), opened with the ``archive_options`` option (JSON, handed to the ``pyarrow.fs`` file system).

A store's name is the one given (``name=location``, or the ``storeNames`` option: one name per location, in
order), else the location's last folder (``/data/broker-a/store`` -> ``broker-a``: a
broker's ``store/`` folder is named by its parent; ``s3://arch/broker-a`` -> ``broker-a``). A root and an
archive of the same name are one store: its archived files below the local data are read from the archive,
the rest from the root. Names key the offsets of a fleet (``{"broker-a": {"Orders": {"0": 123}}}``); two
locations of one kind that would take the same name keep their whole location as the name instead.

The driver plans from what each store says of itself without reading a message: a root's consume-queue
files (as a one-store read does), an archive's manifest (no data object is opened); executors fetch the
archived objects their partitions need (``pystore.spark.archive_read``).
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from pyspark.sql.datasource import InputPartition

from pystore.spark import layout
from pystore.spark.options import OptionError, option_value, roots

__all__ = ["Member", "StoreView", "members", "member_options", "is_fleet", "archive_options"]

log = logging.getLogger(__name__)

Queue = tuple[str, int]
_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_NAMED = re.compile(r"^([A-Za-z0-9_.-]+)=(.+)$")


@dataclass(frozen=True)
class Member:
    """One store of a fleet: its name, and its local root and/or its archive (URI, file system options as
    JSON, so that a partition carrying it pickles small and compares equal)."""

    name: str
    root: str | None = None
    archive: str | None = None
    archive_options: str = "{}"


def archive_options(options: Mapping[str, str]) -> str:
    """The ``archive_options`` option, checked, as canonical JSON (``{}`` without it)."""
    raw = (option_value(options, "archive_options") or "").strip()
    if not raw:
        return "{}"
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise OptionError("option archive_options: expected a JSON object, got %r (%s)" % (raw, exc)) from None
    if not isinstance(value, dict):
        raise OptionError("option archive_options: expected a JSON object, got %r" % raw)
    return json.dumps(value, sort_keys=True)


def _derived_name(location: str, archive: bool) -> str:
    path = location.split("://", 1)[1] if archive else os.path.abspath(location)
    parts = [p for p in path.rstrip("/").split("/") if p]
    if not parts:
        return location
    if not archive and parts[-1] == "store" and len(parts) > 1:
        return parts[-2]                       # a broker's store/ folder: named by the broker's folder
    return parts[-1]


def _locations(options: Mapping[str, str]) -> list[str]:
    stores = (option_value(options, "stores") or "").strip()
    has_path = option_value(options, "path") is not None or option_value(options, "paths") is not None
    if stores and has_path:
        raise OptionError("option stores and load(path): name the stores one way")
    if stores:
        return [s.strip() for s in stores.split(",") if s.strip()]
    return roots(options)


def members(options: Mapping[str, str]) -> list[Member]:
    """The stores of a read, in the order given (see the module docstring)."""
    fs_options = archive_options(options)
    given: list[tuple[str | None, str, bool]] = []
    for loc in _locations(options):
        m = _NAMED.match(loc)
        name, where = (m.group(1), m.group(2).strip()) if m and not _URI.match(loc) else (None, loc)
        given.append((name, where, bool(_URI.match(where))))
    raw_names = (option_value(options, "storeNames") or "").strip()
    if raw_names:
        names = [n.strip() for n in raw_names.split(",")]
        if len(names) != len(given) or not all(names):
            raise OptionError("option storeNames: %d name(s) for %d location(s) (%r): one name per location, in "
                              "order" % (len(names), len(given), raw_names))
        if any(name is not None for name, _w, _a in given):
            raise OptionError("option storeNames and name=location: name the stores one way")
        given = [(n, where, arch) for n, (_none, where, arch) in zip(names, given, strict=True)]
    derived = [name or _derived_name(where, arch) for name, where, arch in given]
    # two locations of one kind under one derived name: each keeps its whole location as its name
    for i, (name, where, arch) in enumerate(given):
        if name is None and any(j != i and derived[j] == derived[i] and given[j][2] == arch for j in range(len(given))):
            derived[i] = where
    out: dict[str, Member] = {}
    for (_name, where, arch), key in zip(given, derived, strict=True):
        have = out.get(key, Member(key, archive_options=fs_options))
        if arch:
            if have.archive is not None:
                raise OptionError("store %s is given two archives (%s, %s)" % (key, have.archive, where))
            out[key] = Member(key, have.root, where, fs_options)
        else:
            if have.root is not None:
                raise OptionError("store %s is given two roots (%s, %s): name them (name=path)" % (key, have.root,
                                                                                                 where))
            if not os.path.isdir(where):
                raise FileNotFoundError("no store at %s" % where)
            out[key] = Member(key, where, have.archive, fs_options)
    return list(out.values())


def is_fleet(options: Mapping[str, str], fleet: list[Member]) -> bool:
    """Are the read's offsets keyed by store? With the ``stores`` option, several stores or an archive; a
    single root keeps the one-store form (``{"topic/0": n}``), as checkpoints of earlier queries hold it."""
    return bool((option_value(options, "stores") or "").strip()) or len(fleet) > 1 or fleet[0].archive is not None


_PER_STORE = ("startingOffsets", "endingOffsets", "startingOffsetsByTimestamp", "failOnDataLoss")


def _fleet_form(value: Any, names: set[str]) -> bool:
    """Is an offsets JSON keyed by store: its keys are store names and its values objects of topics?"""
    if not isinstance(value, dict) or not value or not set(value) <= names:
        return False
    return all(isinstance(v, dict) and all(isinstance(x, dict) or "/" in k for k, x in v.items())
               for v in value.values())


def member_options(options: Mapping[str, str], fleet: list[Member], member: Member) -> dict[str, str]:
    """``options`` as one store of the fleet reads them: offsets JSON keyed by store (and ``failOnDataLoss``
    as ``{"store": false}``) narrowed to this store's part; options of the one-store form apply to every store."""
    names = {m.name for m in fleet}
    out = dict(options)
    for opt in _PER_STORE:
        key = opt.lower()
        raw = (out.get(key) or "").strip()
        if not raw.startswith("{"):
            continue
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            continue                            # refused, with its reason, by the option's own parser
        if opt == "failOnDataLoss":
            if not isinstance(value, dict) or not set(value) <= names or not all(isinstance(v, bool)
                                                                                for v in value.values()):
                raise OptionError('option failOnDataLoss: true, false or {"<store>": false, ...} of the stores %s, '
                                  "got %r" % (sorted(names), raw))
            out[key] = "true" if value.get(member.name, True) else "false"
        elif _fleet_form(value, names):
            mine = value.get(member.name)
            if mine:
                out[key] = json.dumps(mine)
            else:
                out.pop(key)
    return out


class StoreView:
    """What the driver knows of one store: its queues and their bounds, and its partitions, from its root's
    consume-queue files and its archive's manifest (loaded once, refreshed by ``refresh``)."""

    def __init__(self, member: Member) -> None:
        self.member = member

    @cached_property
    def manifest(self) -> Any:
        if self.member.archive is None:
            return None
        from pystore.archive.manifest import Manifest
        from pystore.archive.target import open_target

        target = open_target(self.member.archive, json.loads(self.member.archive_options))
        return Manifest(target).load()

    def refresh(self) -> None:
        if self.member.archive is not None:
            self.manifest.refresh()

    # -- queues and bounds -------------------------------------------------------------------------------------

    def queues(self, sub: Any) -> list[Queue]:
        """The subscribed queues the store has (``assign``: those named, so a queue created later joins)."""
        found: set[Queue] = set()
        if self.member.root is not None:
            found.update(sub.queues(self.member.root))
        if self.manifest is not None:
            from pystore.archive.manifest import queue_keys

            if sub.assign is not None:
                found.update(sub.assign)
            else:
                found.update(q for q in queue_keys(self.manifest) if sub.covers(*q))
        return sorted(found)

    def local_bounds(self, queues: list[Queue]) -> dict[Queue, tuple[int, int]]:
        from pystore.spark.subscription import queue_bounds_of

        return queue_bounds_of(self.member.root, queues) if self.member.root is not None else {}

    def archive_span(self, queue: Queue) -> tuple[int, int] | None:
        from pystore.archive.manifest import queue_span

        return queue_span(self.manifest, *queue) if self.manifest is not None else None

    def bounds(self, queues: list[Queue]) -> dict[Queue, tuple[int, int]]:
        """``{queue: (min, max)}``: the local bounds, extended down by the archive where it joins them (an
        archive whose copies end below the local minimum leaves a gap: its part is not offered)."""
        local = self.local_bounds(queues)
        out = {}
        for q in queues:
            lo, hi = local.get(q, (0, 0))
            span = self.archive_span(q)
            if span is not None:
                if self.member.root is None or (lo, hi) == (0, 0):
                    lo, hi = span
                elif span[0] < lo <= span[1]:
                    lo = span[0]
            out[q] = (lo, hi)
        return out

    def split(self, queue: Queue, start: int, end: int) -> tuple[tuple[int, int] | None, tuple[int, int] | None]:
        """``[start, end)`` of a queue cut into the archive's part and the root's part (either None)."""
        if self.member.archive is None:
            return None, (start, end)
        local_lo = self.local_bounds([queue]).get(queue, (0, 0)) if self.member.root is not None else None
        if local_lo is None or local_lo == (0, 0):
            return (start, end), None
        cut = max(start, min(end, local_lo[0]))
        return ((start, cut) if cut > start else None), ((cut, end) if end > cut else None)

    # -- partitions --------------------------------------------------------------------------------------------

    def plan_queues(self, ranges: Mapping[Queue, tuple[int, int]], per_partition: int, target: int) -> list[InputPartition]:
        """Partitions of at most ``per_partition`` offsets of one queue each, at least ``target`` when there are
        that many messages; the archive's part of a range read from the archive."""
        from pystore.spark.archive_read import archive_queue_slice
        from pystore.spark.batch import QueueGroup, QueueSlice, plan_queue_slices

        local: dict[Queue, tuple[int, int]] = {}
        archived: dict[Queue, tuple[int, int]] = {}
        for q, (s, e) in ranges.items():
            a, loc = self.split(q, s, e)
            if a is not None:
                archived[q] = a
            if loc is not None:
                local[q] = loc
        total = sum(e - s for s, e in ranges.values()) or 1
        out: list[InputPartition] = []
        if local:
            share = sum(e - s for s, e in local.values())
            out.extend(plan_queue_slices(self.member.root or "", local, per_partition,
                                         max(1, -(-target * share // total))))
        if archived:
            share = sum(e - s for s, e in archived.values())
            for p in plan_queue_slices(self.member.name, archived, per_partition, max(1, -(-target * share // total))):
                slices = p.slices if isinstance(p, QueueGroup) else [p]
                made = [archive_queue_slice(self.member, self.manifest, sl.topic, sl.queue_id, sl.start, sl.end)
                        for sl in slices if isinstance(sl, QueueSlice)]
                out.append(made[0] if len(made) == 1 else QueueGroup(made))
        return out

    def plan_log(self, bytes_per_partition: int, target: int) -> list[InputPartition]:
        """Every message of the store, in commit-log order: one partition per archived commit-log file below
        the local data, then the root's slices."""
        from pystore.spark.archive_read import ArchiveLogSlice
        from pystore.spark.batch import plan_commit_log_slices

        out: list[InputPartition] = []
        if self.manifest is not None:
            local_min = None
            if self.member.root is not None:
                files = layout.commit_log_files(self.member.root)
                local_min = layout.commit_log_min(files) if files else None
            for r in self.manifest.commitlog_files():
                if local_min is None or r["base"] + r["size"] <= local_min:
                    out.append(ArchiveLogSlice(self.member, _small(r)))
        if self.member.root is not None:
            out.extend(plan_commit_log_slices(self.member.root, bytes_per_partition, target))
        return out


def _small(record: Mapping[str, Any], ranges: bool = False) -> dict[str, Any]:
    """What an executor needs of a manifest record to fetch and check its object; with ``ranges``, also its
    per-range CRCs (``range_size``, ``range_crc32``) where it has them, for a read that fetches only the ranges
    it needs (without them the object is fetched whole)."""
    keys = ("name", "base", "size", "crc32", "kind") + (("range_size", "range_crc32") if ranges else ())
    return {k: record[k] for k in keys if k in record}
