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
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from typing import Any

from pystore._codec import REASONS, RECORD_BLANK, RECORD_END
from pystore._dispatch import queues_behind
from pystore._records import QueueTally, find_valid_record_after, first_store_timestamp, read_message, scan_file
from pystore._units import FILLER_SIZE, read_unit
from pystore.checkpoint import writer_holds_lock
from pystore.crashpoint import crashpoint
from pystore.errors import StoreCorruptedError

__all__ = ["RecoveryResult", "recover_commit_log", "recover_queues"]

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


def _abnormal_start_index(files: list[Any], checkpoint: Any, config: Any) -> int:
    min_ts = checkpoint.min_timestamp()
    if config.message_index_enable and config.message_index_safe:
        min_ts = checkpoint.min_timestamp_index()
    for i in range(len(files) - 1, -1, -1):
        ts = first_store_timestamp(files[i])
        if ts != 0 and ts <= min_ts:
            return i
    return 0


def recover_commit_log(commitlog: Any, checkpoint: Any, config: Any, abnormal: bool,
                       read_only: bool = False) -> RecoveryResult:
    queue = commitlog.queue
    files = queue.files
    if not files:
        queue.flushed_where = queue.committed_where = 0
        return RecoveryResult(0, 0, abnormal, None)
    start = _abnormal_start_index(files, checkpoint, config) if abnormal and not read_only else max(0, len(files) - 3)
    check_crc = config.check_crc_on_recover
    t0 = time.perf_counter()
    records = scanned = 0
    i = start
    offset = files[start].file_from_offset
    stop: tuple[Any, int, int] | None = None
    tally = QueueTally()
    while i < len(files):
        mf = files[i]
        end, reason, count, _ = scan_file(mf, 0, check_crc, -1, tally)
        records += count
        scanned += end
        if reason == RECORD_BLANK:
            offset = mf.file_from_offset + mf.file_size
            i += 1
            continue
        offset = mf.file_from_offset + end
        stop = (mf, end, reason)
        break
    seconds = time.perf_counter() - t0
    result = RecoveryResult(offset, files[start].file_from_offset, abnormal, files[start].file_name, records,
                            scanned, seconds, walked=None if tally.overflow else tally.queues())
    if stop is not None:
        _judge_damage(stop, files, i, checkpoint, config, result, read_only)
        if read_only and result.follows >= 0 and scan_file(stop[0], stop[1], check_crc)[0] == stop[1]:
            # damage with valid records after it: a reader's later refreshes stay before it (a torn tail is
            # no fence: a writer's recovery zeroes it and appends there). Judged again once followers were
            # found: on a live store the record at the stop was being written, and the writer appends in
            # order, so by now it is whole unless it really is damaged.
            commitlog.damage_fence = offset
    log.info("commit log %s recovery from %s: %d messages, valid end at %d (%.1f MB/s)",
             "abnormal" if abnormal else "normal", result.start_file, records, offset,
             result.scan_rate / 1e6)
    crashpoint("recovery.scanned")
    if not read_only:
        queue.flushed_where = queue.committed_where = offset
    queue.truncate_dirty_files(offset)
    crashpoint("recovery.truncated")
    return result


def _judge_damage(stop: tuple[Any, int, int], files: list[Any], index: int, checkpoint: Any, config: Any,
                  result: RecoveryResult, read_only: bool) -> None:
    """The walk stopped at ``stop`` (file, position, reason). Is anything valid beyond it, and may we drop it?"""
    mf, pos, reason = stop
    where = mf.file_from_offset + pos
    # from pos + 1: the record at pos may pass the per-record checks yet be torn (it ends in zeros)
    follow_file, follow_pos = mf, find_valid_record_after(mf, pos + 1)
    if follow_pos < 0:
        for later in files[index + 1:]:
            p = find_valid_record_after(later, 0)
            if p >= 0:
                follow_file, follow_pos = later, p
                break
    if reason != RECORD_END:
        result.damage = "%s at %d in %s" % (REASONS.get(reason, "invalid record"), where, mf.file_name)
    if follow_pos < 0:
        if reason != RECORD_END:
            if read_only:
                log.info("commit log: %s; nothing valid follows: the writer's tail, read up to it", result.damage)
            else:
                log.warning("commit log: %s; nothing valid follows, so it is a torn tail and is cut", result.damage)
        return
    follower = read_message(follow_file, follow_pos)
    follow_offset = follow_file.file_from_offset + follow_pos
    result.follows = follow_offset
    what = REASONS.get(reason, "invalid record") if reason != RECORD_END else "zeroed region"
    # A writer that cannot trust the checkpoint cannot tell flushed from unflushed followers, so it takes them
    # as flushed: refusing costs a `recover --truncate` after a rare double fault, cutting could drop every
    # acknowledged message after the damage. A reader then only ends its view at the damage (it cuts nothing,
    # and a live writer's record in flight looks the same).
    unknown = not checkpoint.trusted and not read_only
    durable = follower is not None and (
        unknown or (checkpoint.trusted and follower.store_timestamp <= checkpoint.physic_msg_timestamp))
    if durable and not config.recover_truncate_corrupted:
        # a reader refuses it too: a view ending at the damage would hide every durable message after it
        # (a live writer's record in flight is newer than the checkpoint's flush, so it is never "durable")
        raise StoreCorruptedError(
            mf.file_name, where,
            "%s, followed by valid %s from offset %d: refusing to truncate durable data "
            "(set recover_truncate_corrupted or run `pystore recover --truncate` to cut the log here)"
            % (what, "messages and a checkpoint that cannot be trusted to tell whether they were flushed"
               if unknown else "flushed messages", follow_offset))
    result.damage = "%s at %d in %s" % (what, where, mf.file_name)
    if read_only:
        # a reader drops nothing: a live writer may be appending there (a record not whole yet, records
        # after it already written); the reader's view ends at it until a refresh finds it whole
        log.info("commit log: %s with valid records from offset %d after it: this reader's view ends there (a "
                 "record in flight, or damage a writer's open will judge)", result.damage, follow_offset)
        return
    log.warning("commit log: %s; valid messages from offset %d are dropped with it (%s)", result.damage,
                follow_offset, "not yet flushed when the writer stopped" if not durable else "forced")


def _maybe_cut_short(cq_store: Any, low: int, window: int) -> int:
    """Where a walk must start to see every record of the queues that may have lost files at their end
    (-1: none may have). A queue whose last file is exactly full (the file after it may be gone: a queue
    rolls to a new file with its next unit, so this is rare) is walked from its end, within the window
    recovery scanned; one left without units (every file gone, cut or zeroed), or whose first file starts
    past offset 0 in a log that was never cleaned (its first files are gone), from the log's head."""
    start = -1
    for cq in cq_store.queues():
        last = cq.queue.last()
        first = cq.queue.first()
        if last is None or cq.get_max_offset_in_queue() == 0 or last.read_position == 0:
            at = low
        elif low == 0 and first is not None and first.file_from_offset > 0 and not _starts_with_filler(first):
            at = low
        elif last.read_position >= last.file_size:
            at = max(low, min(cq.max_physic_offset, window))
        else:
            continue
        start = at if start < 0 else min(start, at)
    return start


def _tally_start(cq_store: Any, result: RecoveryResult, low: int) -> int:
    """Where a walk must start to give units to the records recovery walked whose queue lacks them (-1:
    none): a queue whose highest queue offset walked is at or past its end lost units at its end (a zeroed
    or damaged last unit, a cut last file), so its missing records follow its last unit's record; a queue
    with no units at all, from its first record walked (the dispatch's gap check decides whether that is
    its first message ever or a queue to rebuild). Read off the recovery walk, so a clean open walks no
    further than before when every queue is whole."""
    walked = result.walked
    if walked is None:
        return max(low, result.dispatch_from) if result.start_file is not None else -1
    start = -1
    for (topic, queue_id), (first, top) in walked.items():
        cq = cq_store.find(topic, queue_id)
        end = cq.get_max_offset_in_queue() if cq is not None else 0
        if end == 0:
            at = first
        elif top >= end:
            # from its first record walked, not from its last unit's: a damaged last unit may point past
            # the records it lacks (the walk is longer only for a queue that lost units)
            at = min(first, cq.max_physic_offset)
        else:
            continue
        at = max(low, at)
        start = at if start < 0 else min(start, at)
    return start


def _queues_past_their_records(cq_store: Any, result: RecoveryResult) -> list[tuple[Any, int]]:
    """Queues whose last unit points into the range recovery walked, yet whose end lies past the highest
    queue offset of their records there: the units at their end are not theirs (a file of another queue
    swapped in, a unit's offset rewritten), and a re-dispatch cannot take units away. The last unit's record
    is in the walk, so it was tallied: a whole queue always has ``top >= end - 1``. Each with ``top``."""
    seen = result.walked
    if seen is None:
        return []
    out = []
    for cq in cq_store.queues():
        end = cq.get_max_offset_in_queue()
        if end == 0 or not result.dispatch_from < cq.max_physic_offset <= result.process_offset:
            continue                # its last unit's record was not walked (a reader's units past the end)
        top = seen.get((cq.topic, cq.queue_id), (0, -1))[1]
        if top < end - 1:
            out.append((cq, top))
    return out


def _foreign_units(cq: Any, top: int) -> tuple[str, int, str]:
    """``cq.damage`` for a queue found by ``_queues_past_their_records``."""
    last = cq.queue.last()
    return (last.file_name if last is not None else cq.folder, cq.queue.get_max_offset(),
            "consume queue %s/%d ends at offset %d but its records in the commit log's last files go up to %d: "
            "its last units point at records of another queue" % (cq.topic, cq.queue_id,
                                                                  cq.get_max_offset_in_queue(), top))


def _rebuild_foreign(cq_store: Any, result: RecoveryResult) -> None:
    """A writer rebuilds from the log's head each queue ``_queues_past_their_records`` finds (a reader
    refuses the store: ``_check_readers_queues``)."""
    for cq, top in _queues_past_their_records(cq_store, result):
        cq.damage = _foreign_units(cq, top)
        cq_store.rebuild_or_refuse(cq)


def _flush_repaired(cq_store: Any) -> None:
    """Force the queue files whose units the re-dispatch rewrote (``repair_unit``): their pages lie below
    what the flush service will flush again, and the checkpoint must not claim them before they are on disk."""
    for cq in cq_store.queues():
        if cq.repaired:
            log.warning("consume queue %s/%d: %d unit(s) rewritten from the commit log", cq.topic, cq.queue_id,
                        cq.repaired)
            for mf in cq.queue.files:
                mf.flush(0)
            cq.repaired = 0


def _starts_with_filler(mf: Any) -> bool:
    """Does a queue's first file open with filler units (RocketMQ's ``fillPreBlank``: the queue began at that
    offset, its earlier messages never had units in this store)?"""
    try:
        return bool(read_unit(mf, 0)[1] == FILLER_SIZE)
    except (ValueError, OSError):
        return False


def _check_readers_queues(commitlog: Any, cq_store: Any, result: RecoveryResult, tails: bool,
                          stored_before: int = 0) -> None:
    """A reader of a store no writer is running (no ``abort`` file) checks, as a writer's recovery does, that
    no queue lacks units for records of it (lost files at its end or head): it cannot rebuild the queue, so
    it refuses the store rather than hide those messages. With ``tails`` False (a crashed writer), a record
    past its queue's end counts when stored before ``stored_before`` or before the furthest unit any queue
    holds (dispatch follows the log in order: a crash leaves the queues lagging only as a common suffix)."""
    low = commitlog.get_min_offset()
    queue = commitlog.queue
    if low < 0 or not queue.files:
        return
    for cq, top in _queues_past_their_records(cq_store, result):
        path, offset, reason = _foreign_units(cq, top)
        raise StoreCorruptedError(path, offset, reason + " (a writer's open rebuilds the queue from the commit log)")
    start = _maybe_cut_short(cq_store, low, result.dispatch_from)
    # a queue's last units lost: records of it after its end, found in the last commit-log file
    ends = [cq.max_physic_offset for cq in cq_store.queues() if cq.get_max_offset_in_queue() > 0]
    if ends:
        tail = max(low, min(ends), queue.files[-1].file_from_offset)
        start = tail if start < 0 else min(start, tail)
    if start < 0:
        return
    dispatched_end = min(max(ends, default=0), result.process_offset)
    gaps, reached = queues_behind(queue.files, queue.mapped_file_size, start, result.process_offset,
                                  dict(cq_store.items()), tails, stored_before, dispatched_end)
    if reached < result.process_offset and not gaps:
        # a record the check cannot pass: the records after it may be a queue's lost units (a writer's
        # open refuses the same record in its re-dispatch)
        raise _corrupted_at(queue, reached, "a commit-log record that cannot be read, before the log's end %d "
                            "(a writer's open refuses it too; `pystore recover --truncate` cuts the log here)"
                            % result.process_offset)
    for topic, queue_id in sorted(gaps):
        cq = cq_store.find(topic, queue_id)
        raise StoreCorruptedError(cq.folder, cq.queue.get_max_offset(),
                                  "consume queue %s/%d lacks units for records of it in the commit log (files lost): "
                                  "a writer's open rebuilds it from the commit log" % (topic, queue_id))
    if not tails and dispatched_end < result.process_offset:
        # a crash's lag, or last units lost (zeroed) that look the same: not served until a writer's open
        log.warning("%s: the commit log holds %d bytes of records after the furthest consume-queue unit (from "
                    "offset %d): the writer stopped before dispatching them, or their units were lost; this "
                    "reader serves each queue up to its last unit, a writer's open (`pystore recover`) "
                    "dispatches the rest", os.path.dirname(queue.files[0].file_name),
                    result.process_offset - dispatched_end, dispatched_end)


def _dispatch_checking_gaps(reput: Any, cq_store: Any, start: int, low: int, end: int) -> None:
    """Re-dispatch ``[start, end)``. A record whose queue lacks the units before it (``QueueDispatcher.gaps``:
    the queue's tail was lost, a file of it deleted, or a queue folder is gone while its records are not at
    the log's head) means that queue cannot be trusted: its files are deleted and it is rebuilt by a walk
    from the log's head ``low``, so every acknowledged message stays readable and new puts continue its
    offsets instead of reusing them."""
    dispatcher = getattr(reput, "dispatcher", None)
    if dispatcher is not None:
        dispatcher.gaps = {}
    try:
        reput.reput_from = start
        reached = reput.dispatch_until(end)
        gaps = dict(dispatcher.gaps) if dispatcher is not None else {}
        if gaps and dispatcher is not None:
            for topic, queue_id in sorted(gaps):
                cq = cq_store.find(topic, queue_id)
                if cq is not None:
                    gone = cq.discard_files()
                    log.warning("consume queue %s/%d: units missing before commit-log records of it; its %d file(s) "
                                "are deleted and the queue is rebuilt from the commit log's head", topic, queue_id,
                                len(gone))
            dispatcher.gaps = {}
            reput.reput_from = low
            reached = reput.dispatch_until(end)
            # walked from the head, a queue's records follow each other; one whose queue offset jumps past
            # its queue's end is a record with a damaged header (a hole in the queue, or a wrong answer)
            jumps = sorted(at for at in dispatcher.gaps.values() if at >= 0)
            if jumps:
                raise _corrupted_at(reput.commitlog.queue, jumps[0], "a record whose queue offset does not follow "
                                    "its queue's (its header is damaged)")
    finally:
        if dispatcher is not None:
            dispatcher.gaps = None
    if reached < end:
        # recovery judged the log whole up to ``end`` from its last files; a record before them that cannot
        # be read stops the re-dispatch, and the queues would silently end there
        raise _corrupted_at(reput.commitlog.queue, reached, "a commit-log record the re-dispatch cannot read, "
                            "before the log's end %d (set recover_truncate_corrupted or run `pystore recover "
                            "--truncate` to cut the log here)" % end)


def _corrupted_at(queue: Any, offset: int, reason: str) -> StoreCorruptedError:
    """The error naming the commit-log file that holds ``offset`` (or would)."""
    mf = queue.find_mapped_file_by_offset(offset)
    return StoreCorruptedError(mf.file_name if mf is not None else queue.path_for(offset), offset, reason)


def recover_queues(commitlog: Any, cq_store: Any, reput: Any, result: RecoveryResult, checkpoint: Any, config: Any,
                   abnormal: bool, read_only: bool = False) -> None:
    """RocketMQ ``recover`` once ``recover_commit_log`` judged the log (its ``result``): the consume queues'
    valid ends, cut units pointing past the log's end, re-dispatch what the queues miss (``reput``, the
    ``ReputService``), and rebuild the topic-queue table (``recoverTopicQueueTable``: next offsets from the
    queues, min offsets corrected).

    Two steps, so that the caller builds the index and the dispatch between them: when the commit log refuses
    to open (:class:`StoreCorruptedError`) nothing has been written, neither in the log nor in the queues or
    the index (an abnormal recovery drops index files newer than the checkpoint, which must not happen for an
    open that is refused)."""
    cq_store.recover()
    queue = commitlog.queue
    if read_only and queue.files:
        if not os.path.exists(config.abort_path()):
            _check_readers_queues(commitlog, cq_store, result, True)       # shut down cleanly: all judged
        elif writer_holds_lock(config.lock_path()) is False:
            # the writer crashed: its queues may lag its log at their end (its next open re-dispatches), but
            # not at their head, nor before the checkpoint's time of their last flush. A checkpoint that
            # cannot be read tells no such time: any lag may be lost units, refused until a writer's open.
            # Nor before the furthest unit any queue holds; a power cut the writer did not recover from may
            # break that rule, and the reader then refuses what the writer's open would re-dispatch
            _check_readers_queues(commitlog, cq_store, result, not checkpoint.trusted,
                                  checkpoint.logics_msg_timestamp)
    if not read_only:
        if not queue.files:
            if len(cq_store):
                log.warning("no commit log: dropping %d consume queues (docs/format.md §8.6)", len(cq_store))
            cq_store.destroy_all()
            index = getattr(getattr(reput, "dispatcher", None), "index", None)
            if index is not None and index.files:
                # its entries point into the lost log, and its end offset would make every new message look
                # already indexed (_index.index_message skips what lies below it): dropped with the queues
                log.warning("no commit log: dropping %d index files", len(index.files))
                index.destroy()
        else:
            cut = cq_store.truncate_dirty(result.process_offset)
            _rebuild_foreign(cq_store, result)
            ends = [cq.max_physic_offset for cq in cq_store.queues() if cq.get_max_offset_in_queue() > 0]
            low = commitlog.get_min_offset()
            start = low if not ends else max(low, max(ends))
            if cut:
                start = max(low, min(start, min(cut)))    # a cut queue's records after its new end, if any
            suspect = _maybe_cut_short(cq_store, low, result.dispatch_from)
            if suspect >= 0:
                # a queue that may have lost files: walk from where its records may be, so that a record
                # beyond its end shows the gap (see _dispatch_checking_gaps)
                start = min(start, suspect)
            behind = _tally_start(cq_store, result, low)
            if behind >= 0:
                start = min(start, behind)
            if getattr(cq_store, "rebuilt", None):
                start = low                 # queues whose files could not be trusted: rebuilt from the head
            if abnormal:
                start = min(start, result.dispatch_from)
                # the index dropped its files newer than the checkpoint's index time (their content may be
                # torn): rebuild it from where the files it kept end, or messages between that point and
                # the queues' start would stay unfindable by key (RocketMQ only does this with
                # messageIndexSafe; the cost is re-reading at most one index file's worth of the log)
                index = getattr(getattr(reput, "dispatcher", None), "index", None)
                if index is not None:
                    start = min(start, max(low, index.last_end_phy_offset()))
            _dispatch_checking_gaps(reput, cq_store, start, low, result.process_offset)
            _flush_repaired(cq_store)
    low = commitlog.get_min_offset()
    for cq in cq_store.queues():
        cell = commitlog.get_cell(cq.topic, cq.queue_id)
        cell.consume_queue = cq
        cell.next_offset = cq.get_max_offset_in_queue()
        if low >= 0:
            cq.correct_min_offset(low)
