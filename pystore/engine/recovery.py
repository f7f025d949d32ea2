"""Recovery: find where the commit log's valid data ends, cut it there, say where dispatch resumes
(docs/format.md §8; cf. Kafka's ``LogLoader``).

* **normal** (no ``abort`` file: the last writer shut down cleanly): walk from the third-last file.
* **abnormal** (``abort`` present): walk from the newest file whose first message is not newer than the
  checkpoint's min timestamp (``StoreCheckpoint.min_timestamp``; with ``message_index_safe`` also the index
  time), or from the first file; the consume queues and the index are rebuilt from there.

The walk is the Cython scan (sizes, magic codes and, with ``check_crc_on_recover``, body CRCs) with the GIL
released. A file's blank record moves the walk to the next file; the first record that is not whole and
valid ends it, and everything after that point is truncated (``truncateDirtyFiles``): the torn tail a
crash leaves behind.

pystore adds one guard to RocketMQ's rule: if *valid* records follow the damage and the checkpoint says
they were already flushed, the damage is not a crash's torn tail but corruption in the middle of durable
data, and truncating would silently drop acknowledged messages. Then recovery raises
:class:`~pystore.errors.StoreCorruptedError` naming the file and offset, unless
``recover_truncate_corrupted`` asks for RocketMQ's behaviour (``pystore recover --truncate``).

A read-only opener runs the same walk and judges the same way, but writes nothing: a torn tail (or a live
writer's record in flight) ends its view; damage before durable records is refused as a writer refuses it.

This module reads and writes; the deciding is ``pystore.engine.recovery_plan``'s (pure functions over what was read):
``recover_commit_log`` reads where to start (``walk_start``), walks (a ``LogScan``), asks ``judge_log`` and
cuts the log; ``recover_queues`` runs the queues' own recovery, reads their ends (``QueueEnd``), asks
``plan_recovery`` and applies the ``RecoveryPlan``: rebuild the queues whose units are not theirs, re-dispatch
(``ReputService.redispatch``, whose gaps ``queues_to_rebuild`` and ``judge_rebuilt_walk`` judge), or, for a
reader, walk for lost units (``queues_behind``, judged by ``judge_reader_walk``).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, overload

from pystore.engine.checkpoint import StoreCheckpoint, writer_holds_lock
from pystore.engine.recovery_plan import (
    ArchiveView,
    CheckpointView,
    LogEnds,
    LogScan,
    Note,
    QueueEnd,
    RecoveryPlan,
    Refusal,
    Stop,
    judge_log,
    judge_reached,
    judge_reader_walk,
    judge_rebuilt_walk,
    plan_recovery,
    queues_to_rebuild,
    takeover_walk_start,
    walk_start,
)
from pystore.errors import StoreCorruptedError
from pystore.format._codec import RECORD_BLANK
from pystore.log._mapped_file import MappedFile
from pystore.log._records import QueueTally, find_valid_record_after, first_store_timestamp, read_message, scan_file
from pystore.log.mapped_file_queue import MappedFileQueue
from pystore.queue._dispatch import queues_behind
from pystore.queue._units import FILLER_SIZE, read_unit
from pystore.system.crashpoint import crashpoint

if TYPE_CHECKING:
    from pystore.archive.archive import Archive
    from pystore.config import StoreConfig
    from pystore.index.service import IndexService
    from pystore.log.commitlog import CommitLog
    from pystore.queue.consume_queue import ConsumeQueue
    from pystore.queue.dispatch import ReputService
    from pystore.queue.queue_store import ConsumeQueueStore

__all__ = ["RecoveryResult", "corrupted", "recover_commit_log", "recover_queues"]

log = logging.getLogger(__name__)


@dataclass
class RecoveryResult:
    process_offset: int          # end of the last whole valid record: the log is cut here
    dispatch_from: int           # where consume queues and the index must be rebuilt from
    abnormal: bool
    start_file: str | None
    records: int = 0
    bytes_scanned: int = 0
    seconds: float = 0.0
    damage: str | None = None    # what stopped the walk, when it was not a clean end
    follows: int = -1            # offset of the first valid record after the damage (-1: a torn tail)
    #: what the walk saw of each queue: ``{(topic, queue_id): (first record, highest queue offset)}``; None
    #: when it could not tell (the tally overflowed) or nothing was walked
    walked: dict[tuple[str, int], tuple[int, int]] | None = None

    @property
    def scan_rate(self) -> float:
        """Bytes per second of the walk."""
        return self.bytes_scanned / self.seconds if self.seconds > 0 else 0.0


# -- reads -------------------------------------------------------------------------------------------------------

class _FirstTimestamps(Sequence[int]):
    """Each commit-log file's first store time, read when ``walk_start`` asks (it looks newest first and stops
    at the first that fits)."""

    def __init__(self, files: list[MappedFile]) -> None:
        self._files = files

    def __len__(self) -> int:
        return len(self._files)

    @overload
    def __getitem__(self, i: int) -> int: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[int]: ...

    def __getitem__(self, i: int | slice) -> int | Sequence[int]:
        if isinstance(i, slice):
            return [first_store_timestamp(mf) for mf in self._files[i]]
        return first_store_timestamp(self._files[i])


def _checkpoint_view(checkpoint: StoreCheckpoint) -> CheckpointView:
    return CheckpointView(checkpoint.trusted, checkpoint.physic_msg_timestamp, checkpoint.logics_msg_timestamp,
                          checkpoint.min_timestamp(), checkpoint.min_timestamp_index())


def _walk(files: list[MappedFile], start: int, check_crc: bool,
          log_end: int | None = None) -> tuple[LogScan, MappedFile | None, int]:
    """The recovery walk from ``files[start]`` (the Cython scan, GIL released): a file's blank record moves it
    to the next file; the first record that is not whole and valid ends it, as does ``log_end`` when given (a
    takeover of several writers: the published end; what lies past it is the other writers'). The scan, and
    the file and position it stopped at (None: it ran to the end of the files, or to ``log_end``)."""
    t0 = time.perf_counter()
    records = scanned = 0
    i = start
    offset = files[start].file_from_offset
    tally = QueueTally()
    stopped: MappedFile | None = None
    pos = reason = 0
    while i < len(files):
        mf = files[i]
        limit = -1 if log_end is None or log_end >= mf.file_from_offset + mf.file_size else log_end - mf.file_from_offset
        end, reason, count, _ = scan_file(mf, 0, check_crc, limit, tally)
        records += count
        scanned += end
        if reason == RECORD_BLANK:
            offset = mf.file_from_offset + mf.file_size
            i += 1
            continue
        offset = mf.file_from_offset + end
        if offset != log_end:
            stopped, pos = mf, end
        break
    seconds = time.perf_counter() - t0
    stop = _what_follows(files, i, pos, reason) if stopped is not None else None
    return (LogScan(files[start].file_name, files[start].file_from_offset, offset, stop, records, scanned, seconds,
                    None if tally.overflow else tally.queues()), stopped, pos)


def _what_follows(files: list[MappedFile], index: int, pos: int, reason: int) -> Stop:
    """The walk stopped at ``pos`` of ``files[index]``: the first valid record after it, and its store time."""
    mf = files[index]
    # from pos + 1: the record at pos may pass the per-record checks yet be torn (it ends in zeros)
    follow_file, follow_pos = mf, find_valid_record_after(mf, pos + 1)
    if follow_pos < 0:
        for later in files[index + 1:]:
            p = find_valid_record_after(later, 0)
            if p >= 0:
                follow_file, follow_pos = later, p
                break
    where = mf.file_from_offset + pos
    if follow_pos < 0:
        return Stop(mf.file_name, where, reason)
    follower = read_message(follow_file, follow_pos)
    return Stop(mf.file_name, where, reason, follow_file.file_from_offset + follow_pos,
                None if follower is None else follower.store_timestamp)


def _starts_with_filler(mf: MappedFile) -> bool:
    """Does a queue's first file open with filler units (RocketMQ's ``fillPreBlank``: the queue began at that
    offset, its earlier messages never had units in this store)?"""
    try:
        return bool(read_unit(mf, 0)[1] == FILLER_SIZE)
    except (ValueError, OSError):
        return False


def _queue_end(cq: ConsumeQueue, low: int, was_cut: bool = False) -> QueueEnd:
    """What the plan needs of a queue. Its first unit is read only where the plan asks about it: a queue whose
    first file starts past 0 in a log that was never cleaned (``low`` 0); a store of many cleaned queues
    reads no page of each."""
    last = cq.queue.last()
    first = cq.queue.first()
    first_from = first.file_from_offset if first is not None else -1
    return QueueEnd(cq.topic, cq.queue_id, cq.folder, cq.get_max_offset_in_queue(), cq.max_physic_offset,
                    cq.queue.get_max_offset(), last.file_name if last is not None else cq.folder,
                    last is not None, last.read_position if last is not None else 0,
                    last.file_size if last is not None else 0, first_from,
                    first is not None and low == 0 and first_from > 0 and _starts_with_filler(first), was_cut)


def _log_ends(commitlog: CommitLog, result: RecoveryResult) -> LogEnds:
    files = commitlog.queue.files
    return LogEnds(bool(files), commitlog.get_min_offset(), result.process_offset, result.dispatch_from,
                   result.walked, result.start_file is not None, files[-1].file_from_offset if files else 0,
                   os.path.dirname(files[0].file_name) if files else "")


# -- the commit log ----------------------------------------------------------------------------------------------

def recover_commit_log(commitlog: CommitLog, checkpoint: StoreCheckpoint, config: StoreConfig, abnormal: bool,
                       read_only: bool = False, log_end: int | None = None,
                       dispatched_end: int | None = None) -> RecoveryResult:
    """Walk the commit log (``walk_start``), judge where it ends (``judge_log``: refused with
    :class:`StoreCorruptedError` before anything is written), and cut it there.

    ``log_end`` (a follower of several writers taking over as their leader, without the append lock): the
    published end, below which every record is whole; the others go on appending past it, so the walk ends
    there and nothing past it is cut or zeroed (the view just ends there: ``view_until``); with the dead leader's
    ``dispatched_end``, the walk starts at the file holding it (``takeover_walk_start``)."""
    queue = commitlog.queue
    files = queue.files
    if not files:
        queue.flushed_where = queue.committed_where = 0
        return RecoveryResult(0, 0, abnormal, None)
    cp = _checkpoint_view(checkpoint)
    if dispatched_end is not None:
        start = takeover_walk_start([mf.file_from_offset for mf in files], dispatched_end)
    else:
        start = walk_start(_FirstTimestamps(files), cp, abnormal=abnormal, read_only=read_only,
                           index_safe=config.message_index_enable and config.message_index_safe)
    scan, stopped, pos = _walk(files, start, config.check_crc_on_recover, log_end)
    verdict = judge_log(scan, cp, read_only=read_only, truncate_corrupted=config.recover_truncate_corrupted)
    _log_notes(verdict.notes)
    if verdict.refuse is not None:
        raise corrupted(queue, verdict.refuse)
    offset = verdict.cut
    result = RecoveryResult(offset, scan.walk_from, abnormal, scan.start_file, scan.records, scan.bytes_scanned,
                            scan.seconds, verdict.damage, verdict.follows,
                            None if scan.walked is None else dict(scan.walked))
    if verdict.fence and stopped is not None and scan_file(stopped, pos, config.check_crc_on_recover)[0] == pos:
        # damage with valid records after it: a reader's later refreshes stay before it (a torn tail is
        # no fence: a writer's recovery zeroes it and appends there). Judged again once followers were
        # found: on a live store the record at the stop was being written, and the writer appends in
        # order, so by now it is whole unless it really is damaged.
        commitlog.damage_fence = offset
    log.info("commit log %s recovery from %s: %d messages, valid end at %d (%.1f MB/s)",
             "abnormal" if abnormal else "normal", result.start_file, result.records, offset,
             result.scan_rate / 1e6)
    crashpoint("recovery.scanned")
    if not read_only:
        queue.flushed_where = queue.committed_where = offset
    if log_end is not None:
        queue.view_until(offset)
    else:
        queue.truncate_dirty_files(offset)
    crashpoint("recovery.truncated")
    return result


# -- the queues --------------------------------------------------------------------------------------------------

def recover_queues(commitlog: CommitLog, cq_store: ConsumeQueueStore, reput: ReputService,
                   index: IndexService | None, result: RecoveryResult, checkpoint: StoreCheckpoint,
                   config: StoreConfig, abnormal: bool, read_only: bool = False,
                   dispatched_end: int | None = None, archive: Archive | None = None) -> RecoveryPlan:
    """RocketMQ ``recover`` once ``recover_commit_log`` judged the log (its ``result``): the consume queues'
    valid ends, cut units pointing past the log's end, re-dispatch what the queues miss (``reput``, the
    ``ReputService``; it writes ``index`` too), and rebuild the topic-queue table (``recoverTopicQueueTable``:
    next offsets from the queues, min offsets corrected). Returns the plan it applied. ``archive``: the store's
    archive tier, whose copies of the commit log give back, after a crash, the index entries of messages no
    longer local (``RecoveryPlan.archive_index``).

    Two steps, so that the caller builds the index and the dispatch between them: when the commit log refuses
    to open (:class:`StoreCorruptedError`) nothing has been written, neither in the log nor in the queues or
    the index (an abnormal recovery drops index files newer than the checkpoint, which must not happen for an
    open that is refused)."""
    cq_store.recover()
    has_log = bool(commitlog.queue.files)
    cut: set[tuple[str, int]] = set()
    if not read_only and has_log:
        # no choice here: units pointing past the log's end point at nothing (a cut queue's records after its
        # new end, if a damaged unit rather than a crash put it there, are re-dispatched: plan_recovery)
        cut = {(cq.topic, cq.queue_id) for cq in _cut_queues(cq_store, result.process_offset)}
    low = commitlog.get_min_offset()
    queues = [_queue_end(cq, low, (cq.topic, cq.queue_id) in cut) for cq in cq_store.queues()]
    abort = read_only and has_log and os.path.exists(config.abort_path())
    index_end = index.last_end_phy_offset() if index is not None else None
    # the archive's manifest is read only when the index may lack keys below the local log
    archived = _archive_view(archive) if (archive is not None and abnormal and not read_only and index_end is not None
                                          and index_end < low) else None
    plan = plan_recovery(_log_ends(commitlog, result), queues, _checkpoint_view(checkpoint), read_only=read_only,
                         abnormal=abnormal, rebuilt=bool(cq_store.rebuilt), index_end=index_end, abort_exists=abort,
                         writer_running=writer_holds_lock(config.lock_path()) if abort else None,
                         dispatched_end=dispatched_end, archive=archived)
    if plan.archive_index is not None and archive is not None and index is not None:
        # before the re-dispatch: an index file takes entries in commit-log order (``index_message`` skips a
        # record below its newest file's end)
        start, end = plan.archive_index
        t0 = time.perf_counter()
        entries = archive.index_below(index, start, end)
        log.warning("index: keys of the archived commit log [%d, %d) indexed again after the crash (the index files "
                    "newer than the checkpoint, dropped, also held them): %d entries in %.1f s", start, end, entries,
                    time.perf_counter() - t0)
    _apply(plan, commitlog, cq_store, reput, index, result, queues)
    _attach_queues(commitlog, cq_store)
    return plan


def _archive_view(archive: Archive) -> ArchiveView:
    """What the plan needs of the archive: its commit log's span and where its index copies end."""
    archive.ensure_loaded()
    m = archive.manifest
    return ArchiveView(m.min_phy_offset(), m.contiguous_end(),
                       max((int(r.get("end_phy", 0)) for r in m.index_files()), default=0))


def _cut_queues(cq_store: ConsumeQueueStore, phy_offset: int) -> list[ConsumeQueue]:
    """Cut units pointing at or past ``phy_offset``; the queues that were cut."""
    cut = [cq for cq in cq_store.queues() if cq.max_physic_offset > phy_offset]
    cq_store.truncate_dirty(phy_offset)
    return cut


def _apply(plan: RecoveryPlan, commitlog: CommitLog, cq_store: ConsumeQueueStore, reput: ReputService,
           index: IndexService | None, result: RecoveryResult, queues: list[QueueEnd]) -> None:
    """Do what ``plan`` says: drop everything (no log), rebuild queues and re-dispatch (a writer), refuse or
    walk for lost units (a reader)."""
    queue = commitlog.queue
    if plan.refuse is not None:
        raise corrupted(queue, plan.refuse)
    if plan.drop_all:
        if len(cq_store):
            log.warning("no commit log: dropping %d consume queues (docs/format.md §8.6)", len(cq_store))
        cq_store.destroy_all()
        if index is not None and index.files:
            # its entries point into the lost log, and its end offset would make every new message look
            # already indexed (_index.index_message skips what lies below it): dropped with the queues
            log.warning("no commit log: dropping %d index files", len(index.files))
            index.destroy()
        return
    if plan.gap_check is not None:
        check = plan.gap_check
        gaps, reached = queues_behind(queue.files, queue.mapped_file_size, check.start, check.end,
                                      dict(cq_store.table), check.tails, check.stored_before, check.dispatched_end)
        refusal, note = judge_reader_walk(check, gaps, reached, queues, _log_ends(commitlog, result))
        if refusal is not None:
            raise corrupted(queue, refusal)
        if note is not None:
            _log_notes((note,))
    for rebuild in plan.rebuild:
        cq = cq_store.find(*rebuild.key)
        if cq is not None:
            cq_store.rebuild_or_refuse(cq, rebuild.why)
    if plan.dispatch_from >= 0:
        _redispatch(reput, cq_store, queue, plan)
        _flush_repaired(cq_store)


def _redispatch(reput: ReputService, cq_store: ConsumeQueueStore, queue: MappedFileQueue, plan: RecoveryPlan) -> None:
    """Re-dispatch ``[plan.dispatch_from, plan.cut)``; queues found lacking units before a record of theirs
    (``queues_to_rebuild``) are deleted and rebuilt by a second walk from the log's head."""
    reached = reput.redispatch(plan.dispatch_from, plan.cut)
    lost = queues_to_rebuild(reached.gaps)
    if lost:
        for topic, queue_id in lost:
            cq = cq_store.find(topic, queue_id)
            if cq is not None:
                first = cq.unit(cq.get_min_offset_in_queue())
                if 0 < cq_store.keep_below and first is not None and first[0] < cq_store.keep_below:
                    # units missing between the archived messages' and the local log's: the kept ones cannot be
                    # joined to what the local log rebuilds, and the archive's queue files are the only copy left
                    log.error("consume queue %s/%d: units lost between its units of archived messages and the "
                              "local commit log; its archived messages below queue offset %d are served only "
                              "where the archive holds their queue files", topic, queue_id,
                              cq.get_max_offset_in_queue())
                gone = cq.discard_files()
                log.warning("consume queue %s/%d: units missing before commit-log records of it; its %d file(s) "
                            "are deleted and the queue is rebuilt from the commit log's head", topic, queue_id,
                            len(gone))
        reached = reput.redispatch(plan.low, plan.cut)
        refusal = judge_rebuilt_walk(reached.gaps)
        if refusal is not None:
            raise corrupted(queue, refusal)
    refusal = judge_reached(reached.offset, plan.cut)
    if refusal is not None:
        raise corrupted(queue, refusal)


def _flush_repaired(cq_store: ConsumeQueueStore) -> None:
    """Force the queue files whose units the re-dispatch rewrote (``repair_unit``): their pages lie below
    what the flush service will flush again, and the checkpoint must not claim them before they are on disk."""
    for cq in cq_store.queues():
        if cq.repaired:
            log.warning("consume queue %s/%d: %d unit(s) rewritten from the commit log", cq.topic, cq.queue_id,
                        cq.repaired)
            for mf in cq.queue.files:
                mf.flush(0)
            cq.repaired = 0


def _attach_queues(commitlog: CommitLog, cq_store: ConsumeQueueStore) -> None:
    """The topic-queue table (``recoverTopicQueueTable``): each queue's cell with its next offset, min offsets
    corrected to the log's head."""
    low = commitlog.get_min_offset()
    for cq in cq_store.queues():
        cell = commitlog.get_cell(cq.topic, cq.queue_id)
        cell.consume_queue = cq.core
        cell.next_offset = cq.get_max_offset_in_queue()
        if low >= 0:
            cq.correct_min_offset(low)


def _log_notes(notes: Sequence[Note]) -> None:
    for level, text in notes:
        log.log(level, "%s", text)


def corrupted(queue: MappedFileQueue, refusal: Refusal) -> StoreCorruptedError:
    """The error of a refusal; one without a path names the commit-log file that holds its offset (or would)."""
    path = refusal.path
    if path is None:
        mf = queue.find_mapped_file_by_offset(refusal.offset)
        path = mf.file_name if mf is not None else queue.path_for(refusal.offset)
    return StoreCorruptedError(path, refusal.offset, refusal.reason)
