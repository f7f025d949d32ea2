"""The archive's manifest: which files the archive holds, in an append-only list of records, one object each.

An archive (``archive_uri``) is laid out as::

    <uri>/commitlog/<20-digit base offset>                  a sealed commit-log file, whole (its blank end too)
    <uri>/consumequeue/<topic>/<queue id>/<20-digit name>   a sealed consume-queue file, whole
    <uri>/index/<yyyyMMddHHmmssSSS>                         a full index file, whole, once its messages are archived
    <uri>/manifest/<20-digit seq>.json                      one manifest record, written once, never changed

A record is one JSON object (UTF-8, keys sorted) with a ``crc`` field: the CRC32 of the same object's JSON
without that field, so a record torn by a power cut (a ``file://`` archive on a disk that lost its tail) or
changed behind the store's back is recognised and skipped. Fields: ``seq`` (its object's number), ``state``,
``kind`` (``commitlog``, ``consumequeue`` or ``index``), ``name`` (the data object's path under the archive), ``base``
(the file's first byte offset: commit-log offset, or consume-queue byte offset), ``size`` and ``at`` (wall ms).
A finished copy adds ``crc32`` (of the whole object), ``range_size`` and ``range_crc32`` (the CRC32 of each
``range_size`` bytes: what a ranged read checks; absent in records of earlier pystores, whose objects are fetched
whole), on a ``file://`` archive ``stamp`` (the object's inode,
size, modification and change times right after the copy: a reader that finds them unchanged skips the CRC),
``min_ts``/``max_ts`` (store times of its first and last
record, commit log) and, for a commit-log file, ``queues``: ``{"topic/queue id": [first record's offset, highest
queue offset]}`` of its records; for a consume-queue file ``topic``, ``queue_id``, ``first`` and ``last`` (the
queue offsets of its first and last unit); for an index file ``begin_ts``, ``end_ts``, ``begin_phy``, ``end_phy``
(its header) and ``slots``, ``entries`` (its geometry).

The states follow Kafka's tiered storage: ``copy-started`` (the object may be partial or missing: never read),
``copy-finished`` (the object was written whole and its size checked: readable), ``local-deleted`` (the local
file is gone; the object is still the copy). A file's state is that of its record with the highest ``seq``;
only finished (or locally deleted) files are visible to readers, whatever the order in which a reader lists
the records. Records are appended by the store's one archiving service, so seqs never collide; a reader lists
them and folds them (``load``), and folds again to follow a writer (``refresh``: only the new ones are read).
The records of a refresh are fetched up to ``_READERS`` at once (on an object store each is a round trip) and
folded in ``seq`` order; a record whose read failed is read again by the next refresh.
"""

from __future__ import annotations

import bisect
import json
import logging
import threading
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pystore.archive.target import ArchiveTarget

log = logging.getLogger(__name__)

__all__ = ["COPY_FINISHED", "COPY_STARTED", "LOCAL_DELETED", "Manifest", "commitlog_for_queue", "decode_record", "encode_record",
           "queue_entry", "queue_files_from", "queue_keys", "queue_span"]

COPY_STARTED = "copy-started"
COPY_FINISHED = "copy-finished"
LOCAL_DELETED = "local-deleted"
STATES = (COPY_STARTED, COPY_FINISHED, LOCAL_DELETED)
KINDS = ("commitlog", "consumequeue", "index")
FOLDER = "manifest"
VISIBLE = frozenset({COPY_FINISHED, LOCAL_DELETED})
#: how many manifest records a refresh reads at once
_READERS = 16


def _canonical(record: dict[str, Any]) -> bytes:
    return json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def encode_record(record: dict[str, Any]) -> bytes:
    """A record's bytes: its JSON with the ``crc`` of its JSON without it."""
    body = {k: v for k, v in record.items() if k != "crc"}
    return _canonical({**body, "crc": zlib.crc32(_canonical(body))})


def decode_record(data: bytes) -> dict[str, Any] | None:
    """The record in ``data``, or None when it is not a whole, unchanged record of a known state and kind."""
    try:
        record = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(record, dict) or not isinstance(record.get("crc"), int):
        return None
    body = {k: v for k, v in record.items() if k != "crc"}
    if zlib.crc32(_canonical(body)) != record["crc"]:
        return None
    if (record.get("state") not in STATES or record.get("kind") not in KINDS or not isinstance(record.get("seq"), int)
            or not isinstance(record.get("name"), str) or not isinstance(record.get("base"), int)
            or not isinstance(record.get("size"), int)):
        return None
    return body


class Manifest:
    """The folded manifest of one archive: the last record of every file, and the visible ones by kind.

    Thread-safety: ``append`` and ``refresh`` take a lock; the lookups read snapshots (lists replaced whole)."""

    def __init__(self, target: ArchiveTarget) -> None:
        self.target = target
        self._lock = threading.Lock()
        self._last: dict[str, dict[str, Any]] = {}     # name -> its record with the highest seq
        self._seen: set[str] = set()                  # record objects already read (or skipped)
        self.next_seq = 1
        self.skipped = 0                              # records torn or changed, not folded
        # the visible commit-log files in offset order, their bases (for bisect), and each queue's files
        self._commitlog: list[dict[str, Any]] = []
        self._bases: list[int] = []
        self._queues: dict[tuple[str, int], list[dict[str, Any]]] = {}
        self._index: list[dict[str, Any]] = []

    # -- reading ----------------------------------------------------------------------------------------------

    def load(self) -> Manifest:
        """Read every record of the archive (``refresh`` from nothing)."""
        self.refresh()
        return self

    def refresh(self) -> int:
        """Read the records written since the last refresh and fold them; returns how many were new."""
        with self._lock:
            names = self.target.list(FOLDER)
            new = 0
            fresh: list[tuple[str, int]] = []
            for name in names:
                if name in self._seen or not name.endswith(".json"):
                    continue
                try:
                    seq = int(name.rsplit("/", 1)[-1][:-5])
                except ValueError:
                    self._seen.add(name)
                    continue
                fresh.append((name, seq))
            # one GET per record: many at once (an object store answers each after a round trip), folded in order
            if len(fresh) > 1:
                with ThreadPoolExecutor(max_workers=min(_READERS, len(fresh))) as pool:
                    blobs = list(pool.map(self.target.read, [name for name, _ in fresh]))
            else:
                blobs = [self.target.read(name) for name, _ in fresh]
            for (name, seq), blob in zip(fresh, blobs, strict=True):
                self._seen.add(name)
                self.next_seq = max(self.next_seq, seq + 1)
                record = decode_record(blob)
                if record is None or record["seq"] != seq:
                    self.skipped += 1
                    log.warning("%s: manifest record %s is torn or was changed: skipped", self.target.shown, name)
                    continue
                self._fold(record)
                new += 1
            if new:
                self._rebuild()
            return new

    def _fold(self, record: dict[str, Any]) -> None:
        last = self._last.get(record["name"])
        if last is None or last["seq"] < record["seq"]:
            if last is not None and last["state"] in VISIBLE and record["state"] == LOCAL_DELETED:
                record = {**last, **record}           # a deletion keeps what the finished copy said
            self._last[record["name"]] = record

    def _rebuild(self) -> None:
        cl = sorted((r for r in self._last.values() if r["kind"] == "commitlog" and r["state"] in VISIBLE),
                    key=lambda r: r["base"])
        queues: dict[tuple[str, int], list[dict[str, Any]]] = {}
        for r in self._last.values():
            if r["kind"] == "consumequeue" and r["state"] in VISIBLE:
                queues.setdefault((r["topic"], r["queue_id"]), []).append(r)
        for files in queues.values():
            files.sort(key=lambda r: r["base"])
        index = sorted((r for r in self._last.values() if r["kind"] == "index" and r["state"] in VISIBLE),
                       key=lambda r: r["name"])
        self._commitlog, self._bases, self._queues, self._index = cl, [r["base"] for r in cl], queues, index

    # -- writing ----------------------------------------------------------------------------------------------

    def append(self, state: str, kind: str, name: str, base: int, size: int, **fields: Any) -> dict[str, Any]:
        """Write the next record (its object first: a record is folded only once it is in the archive)."""
        if state not in STATES or kind not in KINDS:
            raise ValueError("unknown manifest state %r or kind %r" % (state, kind))
        with self._lock:
            seq = self.next_seq
            record = {"seq": seq, "state": state, "kind": kind, "name": name, "base": base, "size": size,
                      "at": int(time.time() * 1000), **fields}
            obj = "%s/%020d.json" % (FOLDER, seq)
            self.target.put(obj, encode_record(record))
            self.next_seq = seq + 1
            self._seen.add(obj)
            self._fold(record)
            self._rebuild()
            return record

    # -- what readers ask -------------------------------------------------------------------------------------

    def state_of(self, name: str) -> str | None:
        r = self._last.get(name)
        return None if r is None else str(r["state"])

    def record_of(self, name: str) -> dict[str, Any] | None:
        return self._last.get(name)

    def commitlog_files(self) -> list[dict[str, Any]]:
        """The visible commit-log files, in offset order."""
        return self._commitlog

    def min_phy_offset(self) -> int:
        """The archive's first commit-log offset, -1 when it holds none."""
        cl = self._commitlog
        return -1 if not cl else int(cl[0]["base"])

    def contiguous_end(self, start: int | None = None) -> int:
        """Where the run of visible commit-log files from ``start`` (the archive's first) ends without a gap:
        every byte below it is in the archive. ``start`` when none is (-1 with neither)."""
        cl = self._commitlog
        if not cl:
            return -1 if start is None else start
        end = cl[0]["base"] if start is None else start
        i = bisect.bisect_right(self._bases, end) - 1
        if i < 0:
            return end
        for r in cl[i:]:
            if r["base"] > end:
                break
            end = max(end, r["base"] + r["size"])
        return int(end)

    def commitlog_file_for(self, offset: int) -> dict[str, Any] | None:
        """The visible commit-log file holding ``offset``, or None."""
        i = bisect.bisect_right(self._bases, offset) - 1
        if i < 0:
            return None
        r = self._commitlog[i]
        return r if offset < r["base"] + r["size"] else None

    def queue_files(self, topic: str, queue_id: int) -> list[dict[str, Any]]:
        """The visible consume-queue files of one queue, in offset order."""
        return self._queues.get((topic, queue_id), [])

    def queue_min_offset(self, topic: str, queue_id: int) -> int:
        """The first queue offset the archive holds for the queue, -1 when it holds none."""
        files = self.queue_files(topic, queue_id)
        return -1 if not files else int(files[0]["first"])

    def queues(self) -> list[tuple[str, int]]:
        return sorted(self._queues)

    def index_files(self) -> list[dict[str, Any]]:
        """The visible index files, oldest first (their names are their creation times)."""
        return self._index



# -- what a reader that plans from the manifest alone asks (the Spark source over archives) --------------------------

def queue_entry(record: dict[str, Any], key: str) -> tuple[int, int] | None:
    """``(first, highest)`` queue offsets of queue ``key`` ("topic/queue id") in a finished commit-log record,
    None when the file holds none of it. A record without a tally (``queues`` null: too many queues) may hold
    any: ``(0, 2**63 - 1)``. A record of an earlier pystore, without the first offset, gives ``(0, highest)``."""
    queues = record.get("queues")
    if queues is None:
        return (0, (1 << 63) - 1)
    entry = queues.get(key)
    if entry is None:
        return None
    return (int(entry[2]) if len(entry) > 2 else 0, int(entry[1]))


def queue_keys(manifest: Manifest) -> set[tuple[str, int]]:
    """Every queue with messages in the archive (of the tallied commit-log files, and the archived queue files)."""
    out = set(manifest.queues())
    for r in manifest.commitlog_files():
        for key in r.get("queues") or {}:
            topic, _, q = key.rpartition("/")
            out.add((topic, int(q)))
    return out


def queue_span(manifest: Manifest, topic: str, queue_id: int) -> tuple[int, int] | None:
    """``(first, end)``: the queue offsets the archive holds for a queue (end exclusive), None for none. The end
    is the highest offset of the tallied commit-log files plus one; the first is that of its first archived
    queue file, or of the first commit-log file holding it."""
    key = "%s/%d" % (topic, queue_id)
    first = end = None
    for r in manifest.commitlog_files():
        if r.get("queues") is None:
            continue
        e = queue_entry(r, key)
        if e is not None:
            first = e[0] if first is None else first
            end = e[1] + 1
    files = manifest.queue_files(topic, queue_id)
    if files:
        first = int(files[0]["first"]) if first is None else min(first, int(files[0]["first"]))
        end = max(end or 0, int(files[-1]["last"]) + 1)
    return None if first is None or end is None else (first, end)


def commitlog_for_queue(manifest: Manifest, topic: str, queue_id: int, start: int, end: int) -> list[dict[str, Any]]:
    """The finished commit-log records that may hold queue offsets ``[start, end)`` of a queue, in offset order:
    those whose tallied range meets it, and untallied ones between the last tallied file below ``start`` and the
    first tallied file past ``end``."""
    key = "%s/%d" % (topic, queue_id)
    cl = manifest.commitlog_files()
    entries = [queue_entry(r, key) if r.get("queues") is not None else None for r in cl]
    lo_i, hi_i = 0, len(cl)
    for i, e in enumerate(entries):
        if e is not None and e[1] < start:
            lo_i = i + 1                        # wholly below: nothing earlier is wanted
        if e is not None and e[0] >= end:
            hi_i = i                            # wholly past: nothing later is wanted
            break
    out = []
    for r, e in zip(cl[lo_i:hi_i], entries[lo_i:hi_i], strict=True):
        if r.get("queues") is None or (e is not None and e[0] < end and e[1] >= start):
            out.append(r)
    return out


def queue_files_from(manifest: Manifest, topic: str, queue_id: int, start: int, end: int) -> tuple[list[dict[str, Any]], int]:
    """The archived queue files holding offsets from ``start`` on, without a gap, up to ``end``: ``(records,
    covered_end)``: every offset of ``[start, covered_end)`` has its unit in them (``covered_end`` is ``start``
    when the archive holds no queue file of ``start``)."""
    out: list[dict[str, Any]] = []
    covered = start
    for r in manifest.queue_files(topic, queue_id):
        first, last = int(r["first"]), int(r["last"])
        if last < covered:
            continue
        if first > covered or covered >= end:
            break
        out.append(r)
        covered = last + 1
    return out, min(covered, end) if out else start
