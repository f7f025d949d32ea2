"""Offline check of a store folder: commit-log CRCs, consume queues against the commit log, the key index.

:func:`verify_store` reads a store (a live one too: it takes no lock and writes nothing) in three passes:

1. **commit log** — every record through :func:`pystore.tools.iter_commitlog` with ``verify_crc=True``. A
   damaged record is reported (file and absolute offset, from :class:`~pystore.errors.StoreCorruptedError`)
   and the walk resumes at the next valid record, so one report lists every damaged place.
2. **consume queues** — every unit of every ``consumequeue/<topic>/<queue_id>`` must point at the start of
   a whole record of that topic and queue, with the record's size and tags hash code (the due time in
   ``SCHEDULE_TOPIC_XXXX``, which is not checked), and consecutive units at consecutive queue offsets.
   Units below the commit log's first record (files already cleaned) are counted, not reported; so are
   units beyond the end the walk saw while a writer runs (``abort`` present). Records of a queue that are
   missing from it (at or after its first unit) are reported.
3. **index** — every index file's header and hash chains (each link back to an older written entry of
   its slot, no entry on two chains or on none: ``IndexFileCore.check_chains``); then, for up to
   ``index_sample`` messages with keys (spread over the whole log), the index must find the message by
   each key (``query_message`` around its store time, through a read-only store).

Every walk moves forward: a restart after damage begins past it, so a damaged store is reported in time
proportional to its size, never looped over.

Whatever is found is a :class:`Problem`; the :class:`VerifyReport` says whether the store is ``ok``.
``progress(phase, done, total)`` is called now and then (``phase``: ``"commit log"`` in bytes,
``"consume queues"`` in units, ``"index"`` in keys).
"""

from __future__ import annotations

import logging
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pystore.errors import StoreCorruptedError, StoreError
from pystore.log._file_names import is_file_name
from pystore.log._mapped_file import MappedFile
from pystore.log._records import find_valid_record_after
from pystore.log.geometry import is_index_file_name
from pystore.message.constants import SCHEDULE_TOPIC, SysFlag
from pystore.queue._units import UNIT_SIZE
from pystore.queue.consume_queue import queue_id_of
from pystore.system.report import ProblemsReport
from pystore.tools import commit_log_files, iter_commitlog, iter_consume_queue

__all__ = ["Problem", "VerifyReport", "verify_store", "queue_id_of"]

log = logging.getLogger(__name__)

Progress = Callable[[str, int, int], None]

_PREPARED = 0x4
_QUERY_MAX = 64  # the store answers at most max_msgs_num_batch (64) messages a query


@dataclass
class Problem:
    """One thing wrong: ``kind`` (``commitlog``, ``consumequeue``, ``index``), the file and absolute offset
    when known, and what is wrong."""

    kind: str
    path: str | None
    offset: int | None
    detail: str

    def __str__(self) -> str:
        where = ""
        if self.path is not None:
            where = self.path + (" at offset %d" % self.offset if self.offset is not None else "") + ": "
        return "[%s] %s%s" % (self.kind, where, self.detail)


@dataclass
class VerifyReport(ProblemsReport):
    root: str
    commit_log_files: int = 0
    records: int = 0
    record_bytes: int = 0
    min_offset: int = -1  # first record seen
    end_offset: int = 0  # end of the last record seen
    queues: int = 0
    units: int = 0
    units_checked: int = 0
    units_expired: int = 0  # below the commit log's first record (cleaned files)
    units_beyond: int = 0  # past the end the walk saw (a live writer)
    records_without_queue: int = 0  # records of topics/queues that have no consume-queue folder
    keys_sampled: int = 0
    keys_checked: int = 0
    keys_total: int = 0  # keys of indexed messages (the sample is drawn from them)
    keys_too_common: int = 0  # sampled keys the index answer was too full to decide
    keys_before_index: int = 0  # sampled keys of messages older than the index's first entry
    keys_out_of_window: int = 0  # sampled keys found only with the whole time range
    index_present: bool = False
    unclean: bool = False  # the abort file exists
    seconds: float = 0.0
    problems: list[Problem] = field(default_factory=list)
    problems_dropped: int = 0  # beyond max_problems
    notes: list[str] = field(default_factory=list)



class _Collector:
    def __init__(self, report: VerifyReport, max_problems: int) -> None:
        self.report = report
        self.max = max_problems

    def add(self, kind: str, path: str | None, offset: int | None, detail: str) -> None:
        if len(self.report.problems) < self.max:
            self.report.problems.append(Problem(kind, path, offset, detail))
        else:
            self.report.problems_dropped += 1


def verify_store(
    root: str | os.PathLike[str],
    *,
    progress: Progress | None = None,
    index_sample: int = 1000,
    max_problems: int = 100,
    seed: int = 0,
    **config_overrides: Any,
) -> VerifyReport:
    """Check the store at ``root`` (see the module docstring); ``config_overrides`` go to the read-only
    store the index pass opens. Raises ``FileNotFoundError`` if there is no commit log at ``root``."""
    root = os.fspath(root)
    t0 = time.perf_counter()
    report = VerifyReport(root)
    out = _Collector(report, max_problems)
    cl_folder = os.path.join(root, "commitlog")
    if not os.path.isdir(cl_folder):
        raise FileNotFoundError("no commit log at %s" % cl_folder)
    report.unclean = os.path.exists(os.path.join(root, "abort"))
    files = commit_log_files(cl_folder)
    report.commit_log_files = len(files)
    records, keyed = _scan_commit_log(
        cl_folder, files, report, out, progress, index_sample, random.Random(seed)
    )
    _check_queues(root, records, report, out, progress)
    _check_index(root, keyed, report, out, progress, index_sample, config_overrides)
    report.seconds = time.perf_counter() - t0
    return report


# -- pass 1 ---------------------------------------------------------------------------------------------


def _scan_commit_log(
    folder: str,
    files: list[str],
    report: VerifyReport,
    out: _Collector,
    progress: Progress | None,
    sample: int,
    rng: random.Random,
) -> tuple[dict[int, tuple[str, int, int, int, int]], list[tuple[str, str, int, int]]]:
    """Walk every record; ``{phy: (topic, queue_id, queue_offset, size, tags_code)}`` of the records that
    enter a consume queue, and a uniform sample of ``sample`` keys ``(topic, key, phy, store_ts)`` of the
    indexed messages."""
    records: dict[int, tuple[str, int, int, int, int]] = {}
    keyed: list[tuple[str, str, int, int]] = []
    if not files:
        return records, keyed
    first = int(os.path.basename(files[0]))
    sizes = [os.path.getsize(f) for f in files]
    total = sum(sizes)
    start = first
    step = max(1 << 20, total // 200)
    next_tick = 0
    while True:
        try:
            for m in iter_commitlog(folder, start_offset=start, verify_crc=True):
                phy = m.commit_log_offset
                size = m.store_size
                if report.min_offset < 0:
                    report.min_offset = phy
                report.records += 1
                report.record_bytes += size
                report.end_offset = phy + size
                sys_flag = m.sys_flag
                tx = sys_flag & SysFlag.TRANSACTION_TYPE_MASK
                if tx in (SysFlag.TRANSACTION_NOT_TYPE, SysFlag.TRANSACTION_COMMIT_TYPE):   # it enters a queue
                    records[phy] = (m.topic, m.queue_id, m.queue_offset, size, m.tags_code)
                if tx != SysFlag.TRANSACTION_ROLLBACK_TYPE:
                    keys = m.keys
                    uniq = m.uniq_key
                    if keys or uniq:
                        ts = m.store_timestamp
                        topic = m.topic
                        for k in (keys + [uniq]) if uniq else keys:
                            # reservoir sampling: every key has the same chance to be checked
                            n = report.keys_total
                            report.keys_total = n + 1
                            if n < sample:
                                keyed.append((topic, k, phy, ts))
                            elif sample > 0:
                                j = rng.randrange(n + 1)
                                if j < sample:
                                    keyed[j] = (topic, k, phy, ts)
                if progress is not None and phy - first >= next_tick:
                    progress("commit log", phy - first, total)
                    next_tick = phy - first + step
            break
        except StoreCorruptedError as e:
            out.add("commitlog", e.path, e.offset, e.reason)
            resume = _resume_after(files, sizes, e.offset)
            if resume is None:
                break
            if resume <= max(e.offset, start):
                # every restart must move forward, or the same damage would be met again and again
                report.notes.append("the walk stopped at the damage at offset %d (no later record to resume at)"
                                    % e.offset)
                break
            report.notes.append(
                "the walk skipped from offset %d to the next valid record at %d" % (e.offset, resume)
            )
            start = resume
    if progress is not None:
        progress("commit log", total, total)
    return records, keyed


def _resume_after(files: list[str], sizes: list[int], offset: int) -> int | None:
    """The first valid record after the damage at ``offset``, in its file or a later one; None if none."""
    for name, size in zip(files, sizes, strict=True):
        base = int(os.path.basename(name))
        if base + size <= offset:
            continue
        pos = offset - base + 1 if offset >= base else 0
        if pos < size:
            mf = MappedFile(name, -1, read_only=True)
            try:
                mf.set_positions(mf.file_size)
                found = find_valid_record_after(mf, pos)
            finally:
                mf.close()
            if found >= 0:
                return base + found
    return None


# -- pass 2 ---------------------------------------------------------------------------------------------


def _queue_folders(root: str, skipped: list[str] | None = None) -> list[tuple[str, int, str]]:
    base = os.path.join(root, "consumequeue")
    out: list[tuple[str, int, str]] = []
    try:
        topics = sorted(os.listdir(base))
    except OSError:
        return out
    for topic in topics:
        tdir = os.path.join(base, topic)
        if not os.path.isdir(tdir):
            continue
        for q in sorted(os.listdir(tdir), key=lambda s: (len(s), s)):
            qdir = os.path.join(tdir, q)
            if not os.path.isdir(qdir):
                continue
            qid = queue_id_of(q)
            if qid is None:
                log.warning("%s: not a queue id (an int32); skipped", qdir)
                if skipped is not None:
                    skipped.append(qdir)
                continue
            out.append((topic, qid, qdir))
    return out


def _check_queues(
    root: str,
    records: dict[int, tuple[str, int, int, int, int]],
    report: VerifyReport,
    out: _Collector,
    progress: Progress | None,
) -> None:
    skipped: list[str] = []
    folders = _queue_folders(root, skipped)
    for qdir in skipped:
        report.notes.append("%s is not named by a queue id (an int32): skipped" % qdir)
    report.queues = len(folders)
    total = 0
    for _, _, qdir in folders:
        for n in os.listdir(qdir):
            if is_file_name(n):
                total += os.path.getsize(os.path.join(qdir, n)) // UNIT_SIZE
    low = report.min_offset if report.min_offset >= 0 else report.end_offset
    end = report.end_offset
    seen: set[int] = set()
    damaged = {p.offset for p in report.problems if p.kind == "commitlog"}
    first_phy: dict[tuple[str, int], int] = {}
    done = 0
    for topic, qid, qdir in folders:
        prev_qoff: int | None = None
        reported_beyond = False
        for phy, size, tags in iter_consume_queue(qdir):
            done += 1
            report.units += 1
            if progress is not None and (done & 4095) == 0:
                progress("consume queues", done, total)
            if phy < low:
                report.units_expired += 1
                prev_qoff = None
                continue
            if phy >= end:
                report.units_beyond += 1
                if not report.unclean and not reported_beyond:
                    out.add("consumequeue", qdir, phy, "unit points past the commit log's end %d" % end)
                    reported_beyond = True
                continue
            first_phy.setdefault((topic, qid), phy)
            rec = records.get(phy)
            report.units_checked += 1
            if rec is None:
                if phy in damaged:
                    out.add("consumequeue", qdir, phy, "unit points at the damaged record")
                else:
                    out.add(
                        "consumequeue",
                        qdir,
                        phy,
                        "unit (size %d) does not point at the start of a message that enters a queue" % size,
                    )
                prev_qoff = None
                continue
            seen.add(phy)
            r_topic, r_qid, r_qoff, r_size, r_tags = rec
            if (r_topic, r_qid) != (topic, qid):
                out.add("consumequeue", qdir, phy, "unit points at a message of %s/%d" % (r_topic, r_qid))
            if r_size != size:
                out.add("consumequeue", qdir, phy, "unit size %d, the message is %d bytes" % (size, r_size))
            if topic != SCHEDULE_TOPIC and r_tags != tags:
                out.add(
                    "consumequeue",
                    qdir,
                    phy,
                    "unit tags code %d, the message's tags hash to %d" % (tags, r_tags),
                )
            if prev_qoff is not None and r_qoff != prev_qoff + 1:
                out.add("consumequeue", qdir, phy, "queue offset %d follows %d" % (r_qoff, prev_qoff))
            prev_qoff = r_qoff
    if progress is not None:
        progress("consume queues", total, total)
    queues = {(t, q) for t, q, _ in folders}
    missing: dict[tuple[str, int], list[int]] = {}
    for phy, (topic, qid, _qoff, _size, _tags) in records.items():
        if phy in seen:
            continue
        if (topic, qid) not in queues:
            report.records_without_queue += 1
            continue
        if phy >= first_phy.get((topic, qid), end):
            missing.setdefault((topic, qid), []).append(phy)
    for (topic, qid), phys in sorted(missing.items()):
        out.add(
            "consumequeue",
            os.path.join(root, "consumequeue", topic, str(qid)),
            min(phys),
            "%d message(s) of %s/%d are not in the queue (first at commit-log offset %d)"
            % (len(phys), topic, qid, min(phys)),
        )
    if report.records_without_queue:
        report.notes.append(
            "%d message(s) belong to queues without a consume-queue folder (dispatch behind, or "
            "their topic was cleaned)" % report.records_without_queue
        )


# -- pass 3 ---------------------------------------------------------------------------------------------


def _check_index_files(index_dir: str, report: VerifyReport, out: _Collector, overrides: dict[str, Any]) -> int:
    """The structure of every index file: header counts and hash chains (``IndexFileCore.check_chains``).
    The commit-log offset of the first indexed message (-1 if none)."""
    first = -1
    from pystore.index._index import IndexFileCore, index_file_size
    from pystore.log.geometry import index_geometry

    configured: tuple[int, int] | None = None
    if overrides.get("max_hash_slot_num") and overrides.get("max_index_num"):
        configured = (int(overrides["max_hash_slot_num"]), int(overrides["max_index_num"]))
    for name in sorted(os.listdir(index_dir)):
        p = os.path.join(index_dir, name)
        if not (is_index_file_name(name) and os.path.isfile(p)):
            continue
        size = os.path.getsize(p)
        geometry: tuple[int, int] | None
        if configured is not None and index_file_size(*configured) == size:
            geometry = configured
        else:
            geometry = index_geometry(size)
        if geometry is None:
            out.add("index", p, None, "%d bytes: not an index file of a known geometry" % size)
            continue
        mf = MappedFile(p, size, read_only=True, from_offset=0)
        try:
            f = IndexFileCore(mf, *geometry)
            for pos, what in f.check_chains(out.max):
                out.add("index", p, pos, what)
            if first < 0 and f.index_count > 1:
                first = f.begin_phy_offset
        finally:
            mf.close()
    return first


def _check_index(
    root: str,
    picks: list[tuple[str, str, int, int]],
    report: VerifyReport,
    out: _Collector,
    progress: Progress | None,
    sample: int,
    overrides: dict[str, Any],
) -> None:
    from pystore.engine.store import MessageStore
    from pystore.log.geometry import detect_overrides

    index_dir = os.path.join(root, "index")
    report.index_present = os.path.isdir(index_dir) and any(is_index_file_name(n) for n in os.listdir(index_dir))
    first_indexed = -1
    if report.index_present:
        first_indexed = _check_index_files(index_dir, report, out, overrides)
    if not report.keys_total:
        return
    if not report.index_present:
        report.notes.append(
            "no index files: %d key(s) not checked (message_index_enable off, or cleaned)" % report.keys_total
        )
        return
    if sample <= 0:
        report.notes.append("index not checked (sample 0)")
        return
    picks.sort(key=lambda k: k[2])
    report.keys_sampled = len(picks)
    over = detect_overrides(root)
    over.update(overrides)
    try:
        store = MessageStore.open(root, read_only=True, **over)
    except (StoreError, OSError, ValueError, OverflowError) as e:
        # a file the store's open refuses (or did not foresee) is a finding, not a crash of the check
        out.add("index", getattr(e, "path", None) or index_dir, getattr(e, "offset", None),
                "cannot open the store read-only to query the index: %s" % e)
        return
    try:
        for i, (topic, key, phy, ts) in enumerate(picks):
            if phy < store.get_min_phy_offset():
                continue
            if phy < first_indexed:
                # written before indexing began (a store written without an index, then opened by pystore)
                report.keys_before_index += 1
                continue
            # the index keeps times in whole seconds from its file's start: a window of +-1 s
            res = store.query_message(topic, key, max_num=_QUERY_MAX, begin=ts - 1000, end=ts + 1000)
            if not any(m.commit_log_offset == phy for m in res.messages) and len(res.messages) < _QUERY_MAX:
                # a store time before its index file's start (the clock went back) is indexed at the start
                res = store.query_message(topic, key, max_num=_QUERY_MAX)
                if any(m.commit_log_offset == phy for m in res.messages):
                    report.keys_out_of_window += 1
            if any(m.commit_log_offset == phy for m in res.messages):
                report.keys_checked += 1
            elif len(res.messages) >= _QUERY_MAX:
                report.keys_too_common += 1  # a full answer without it: cannot tell
            else:
                report.keys_checked += 1
                out.add("index", index_dir, phy, "key %r of %s does not find its message" % (key, topic))
            if progress is not None and (i & 63) == 0:
                progress("index", i, len(picks))
    finally:
        store.shutdown()
    if progress is not None:
        progress("index", len(picks), len(picks))
    if report.keys_before_index:
        report.notes.append("%d sampled key(s) not checked: their messages precede the index's first entry "
                            "(offset %d)" % (report.keys_before_index, first_indexed))
    if report.keys_out_of_window:
        report.notes.append("%d sampled key(s) found only outside a second of their store time (the index "
                            "keeps times from its file's start; the store clock went back)"
                            % report.keys_out_of_window)
    if report.keys_too_common:
        report.notes.append(
            "%d sampled key(s) not decided: more than %d messages share the key within a second "
            "of theirs (one query returns at most %d)" % (report.keys_too_common, _QUERY_MAX, _QUERY_MAX)
        )
