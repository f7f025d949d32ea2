"""``pystore verify --archive``: every object an archive's manifest lists as finished, checked against it.

For each visible record (``copy-finished`` or ``local-deleted``): the object exists with the recorded size and
CRC32 (fetched or mapped as a read would, through ``ArchiveCache``; an object with per-range CRCs is checked
range by range); a commit-log object's records are walked
with their body CRCs, and must run to the file's end-of-file record; a consume-queue object's units must point
into the archive's commit log or below it; an index object's header must name the range its record says. The
commit-log objects must follow each other without a gap (a gap is data the archive never received). Records
torn or changed (skipped by every reader) are counted, not failed: the copy they describe was redone.
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pystore.archive.cache import ArchiveCache
from pystore.archive.manifest import Manifest
from pystore.archive.target import open_target
from pystore.errors import StoreCorruptedError
from pystore.format._codec import RECORD_BLANK, RECORD_END
from pystore.index._index import IndexFileCore
from pystore.log._records import scan_file
from pystore.system.report import ProblemsReport

__all__ = ["ArchiveProblem", "ArchiveReport", "verify_archive"]

log = logging.getLogger(__name__)

_UNIT = 20


@dataclass
class ArchiveProblem:
    kind: str
    path: str
    offset: int | None
    detail: str


@dataclass
class ArchiveReport(ProblemsReport):
    uri: str
    objects: int = 0
    object_bytes: int = 0
    commitlog_files: int = 0
    queue_files: int = 0
    index_files: int = 0
    records: int = 0
    min_phy_offset: int = -1
    end_phy_offset: int = -1
    skipped_records: int = 0
    seconds: float = 0.0
    problems: list[ArchiveProblem] = field(default_factory=list)
    problems_dropped: int = 0



def verify_archive(uri: str, options: dict[str, Any] | None = None,
                   progress: Callable[[str, int, int], None] | None = None, max_problems: int = 100) -> ArchiveReport:
    """Check the archive at ``uri`` (see the module docstring); ``progress(phase, done, total)`` as it goes."""
    started = time.monotonic()
    target = open_target(uri, options or {})
    report = ArchiveReport(target.shown)
    manifest = Manifest(target).load()
    report.skipped_records = manifest.skipped

    def problem(kind: str, name: str, offset: int | None, detail: str) -> None:
        if len(report.problems) < max_problems:
            report.problems.append(ArchiveProblem(kind, "%s/%s" % (target.shown, name), offset, detail))
        else:
            report.problems_dropped += 1

    cl = manifest.commitlog_files()
    queues = [r for q in manifest.queues() for r in manifest.queue_files(*q)]
    index = manifest.index_files()
    todo = [*cl, *queues, *index]
    report.min_phy_offset = manifest.min_phy_offset()
    report.end_phy_offset = manifest.contiguous_end()
    if cl and report.end_phy_offset < cl[-1]["base"] + cl[-1]["size"]:
        problem("commitlog", "commitlog", report.end_phy_offset,
                "a gap in the archived commit log: no finished copy holds this offset, later ones do")
    with tempfile.TemporaryDirectory(prefix="pystore-verify-archive-") as parent:
        cache = ArchiveCache(target, parent, 0)
        try:
            for i, r in enumerate(todo):
                if progress is not None:
                    progress("archive", i, len(todo))
                try:
                    h = cache.mapped(r)
                except StoreCorruptedError as e:
                    problem(r["kind"], r["name"], e.offset, e.reason)
                    continue
                mf = h.mf
                try:
                    report.objects += 1
                    report.object_bytes += mf.file_size
                    if r["kind"] == "commitlog":
                        report.commitlog_files += 1
                        _check_commitlog(mf, r, report, problem)
                    elif r["kind"] == "consumequeue":
                        report.queue_files += 1
                        _check_queue(mf, r, report, problem)
                    else:
                        report.index_files += 1
                        _check_index(mf, r, problem)
                finally:
                    h.release()
            if progress is not None:
                progress("archive", len(todo), len(todo))
        finally:
            cache.close()
    report.seconds = time.monotonic() - started
    return report


def _check_commitlog(mf: Any, r: dict[str, Any], report: ArchiveReport, problem: Callable[..., None]) -> None:
    end, reason, count, _ts = scan_file(mf, 0, True)
    report.records += count
    if reason not in (RECORD_BLANK, RECORD_END) or (reason == RECORD_END and end < mf.file_size):
        problem("commitlog", r["name"], r["base"] + end,
                "the records stop before the file's end-of-file record (reason %d)" % reason)


def _check_queue(mf: Any, r: dict[str, Any], report: ArchiveReport, problem: Callable[..., None]) -> None:
    data = mf.read_any(0, mf.file_size)
    end = report.end_phy_offset
    for pos in range(0, len(data) - _UNIT + 1, _UNIT):
        phy = int.from_bytes(data[pos:pos + 8], "big", signed=True)
        size = int.from_bytes(data[pos + 8:pos + 12], "big", signed=True)
        if size == 0x7FFFFFFF:              # a filler unit before a queue's first
            continue
        if phy < 0 or size <= 0 or phy + size > end:
            problem("consumequeue", r["name"], r["base"] + pos,
                    "a unit (%d, %d) that does not point into the archived commit log (its end is %d)"
                    % (phy, size, end))
            return


def _check_index(mf: Any, r: dict[str, Any], problem: Callable[..., None]) -> None:
    if "slots" not in r:
        return
    core = IndexFileCore(mf, int(r["slots"]), int(r["entries"]))
    core.load_header()
    have = (core.begin_timestamp, core.end_timestamp, core.begin_phy_offset, core.end_phy_offset)
    want = (r["begin_ts"], r["end_ts"], r["begin_phy"], r["end_phy"])
    if have != want:
        problem("index", r["name"], 0, "the header says %s, the manifest %s" % (have, want))
    for offset, detail in core.check_chains(10):
        problem("index", r["name"], offset, detail)
