"""Recovery's decisions, apart from its reads and writes (``pystore.engine.recovery`` reads the files, asks these
functions, and applies what they answer). Every function here is pure: it reads no file, writes none, logs
nothing; what it decides is a value (a :class:`LogVerdict`, a :class:`RecoveryPlan`, a :class:`Refusal`,
the messages to log as :data:`Note`), so each case of docs/integrity.md is a unit test without files
(tests/test_recovery_plan.py).

The order of an open, and who decides what:

0. ``abnormal_open``, ``log_geometry``, ``log_hole`` (``parts.open_parts``): normal or abnormal, the commit
   log's file size, a missing file refusing the open.
1. ``walk_start``: which commit-log file the walk starts from (normal: the third-last; abnormal: the newest
   whose first message is not newer than the checkpoint's horizon).
2. the walk (``recovery``, reading): a :class:`LogScan`, what it found and where it stopped.
3. ``judge_log``: where the log is cut, whether damage with durable records after it refuses the open, or a
   reader's view is fenced there (:class:`LogVerdict`). Nothing was written yet when it refuses.
4. the cut, and the consume queues' own recovery (``recovery``, writing): each queue's valid end, and for a
   writer, units pointing past the log's cut dropped (no choice there: they point at nothing). Whether a
   queue's files can be trusted, at its load and in its walk, is decided beside this module
   (``pystore.engine.queue_damage``: a hole, a file cut short, an invalid unit; rebuild or refuse).
5. ``plan_recovery``: from the log's ends (:class:`LogEnds`), the queues' ends (:class:`QueueEnd`) and the
   checkpoint (:class:`CheckpointView`), the :class:`RecoveryPlan`: queues whose last units are not theirs
   (a writer rebuilds them, a reader refuses), where the re-dispatch starts (with the index's start folded
   in), the span of the archived commit log the index is rebuilt from (:class:`ArchiveView`), or a reader's check
   for lost units (:class:`GapCheck`).
6. the re-dispatch (``recovery``, writing), whose findings are judged again: ``queues_to_rebuild`` (queues
   lacking units before a record of theirs, rebuilt from the log's head), ``judge_rebuilt_walk`` (a record
   whose queue offset jumps: refused), ``judge_reached`` (a record before the log's end that cannot be read:
   refused); a reader's check is judged by ``judge_reader_walk``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace

from pystore.format._codec import REASONS, RECORD_END

__all__ = ["ArchiveView", "CheckpointView", "GapCheck", "LogEnds", "LogScan", "LogVerdict", "Note", "QueueEnd", "QueueKey",
           "QueueRebuild", "RecoveryPlan", "Refusal", "Stop", "abnormal_open", "judge_log", "judge_reached",
           "judge_reader_walk", "judge_rebuilt_walk", "log_geometry", "log_hole", "plan_recovery",
           "queues_to_rebuild", "walk_start"]

#: a queue: ``(topic, queue id)``
QueueKey = tuple[str, int]
#: a message for the log: ``(logging level, text)``
Note = tuple[int, str]
#: per queue, what the recovery walk saw of it: ``(offset of its first record, highest queue offset)``
Walked = Mapping[QueueKey, tuple[int, int]]


@dataclass(frozen=True)
class Refusal:
    """The open is refused: a :class:`~pystore.errors.StoreCorruptedError` at ``offset`` (absolute in the log
    the file belongs to). ``path`` None: the commit-log file that holds ``offset`` (the executor names it)."""

    offset: int
    reason: str
    path: str | None = None

    def for_reader(self) -> Refusal:
        """The refusal a reader gives for a queue a writer would rebuild: saying who can."""
        return replace(self, reason=self.reason + " (a writer's open rebuilds the queue from the commit log)")


@dataclass(frozen=True)
class CheckpointView:
    """What recovery reads of the checkpoint (``StoreCheckpoint``)."""

    trusted: bool
    physic_msg_timestamp: int
    logics_msg_timestamp: int
    #: ``StoreCheckpoint.min_timestamp()`` and ``min_timestamp_index()``
    min_timestamp: int
    min_timestamp_index: int


@dataclass(frozen=True)
class Stop:
    """Where the commit-log walk stopped before a clean end, and what lies beyond it."""

    file_name: str
    offset: int                 # absolute offset of the record the walk could not pass
    reason: int                 # ``_codec`` RECORD_* code (RECORD_END: a size of zero, a zeroed region)
    #: offset of the first valid record after it, in its file or a later one (-1: none)
    follows: int = -1
    #: that record's store time; None when there is none or it cannot be read as a message
    follower_timestamp: int | None = None


@dataclass(frozen=True)
class LogScan:
    """What the recovery walk of the commit log read (``recovery``)."""

    start_file: str
    walk_from: int              # the first walked file's offset
    end: int                    # end of the last whole valid record (or of the last file, when all were whole)
    stop: Stop | None = None    # None: the walk ended at the end of the files
    records: int = 0
    bytes_scanned: int = 0
    seconds: float = 0.0
    #: None when the tally overflowed (too many queues, a topic too long)
    walked: Walked | None = None


@dataclass(frozen=True)
class LogVerdict:
    """``judge_log``'s answer."""

    cut: int                    # the log's valid end: the log is cut here
    damage: str | None = None   # what stopped the walk, when it was not a clean end
    follows: int = -1           # offset of the first valid record after the damage (-1: a torn tail)
    refuse: Refusal | None = None
    #: a reader's view ends at the cut for good (``CommitLog.damage_fence``), unless the record there is
    #: found whole when read again (a live writer's record in flight)
    fence: bool = False
    notes: tuple[Note, ...] = ()


@dataclass(frozen=True)
class LogEnds:
    """What recovery reads of the commit log once it was judged (and, for a writer, cut)."""

    has_files: bool
    low: int                    # ``CommitLog.get_min_offset()`` (-1: no log)
    cut: int                    # the verdict's cut
    walk_from: int              # the scan's first file's offset
    #: the scan's per-queue tally (None: it overflowed, or nothing was walked)
    walked: Walked | None
    walked_any: bool            # the scan walked a file
    last_file_from: int = 0     # the last file's offset
    folder: str = ""            # the commit log's folder (for messages)


@dataclass(frozen=True)
class QueueEnd:
    """What recovery reads of one consume queue after its own recovery (and a writer's cut at the log's end)."""

    topic: str
    queue_id: int
    folder: str
    units: int                  # ``get_max_offset_in_queue()``: its end, in units
    max_physic_offset: int      # the commit-log offset its last unit's record ends at
    end_offset: int             # its end in bytes (``queue.get_max_offset()``)
    last_path: str              # its last file (its folder when it has none)
    has_last: bool = True
    last_read_position: int = 0
    last_file_size: int = 0
    first_from: int = -1        # its first file's offset (-1: no file)
    #: its first file opens with filler units (it began at that offset in this store); read only when
    #: ``first_from`` > 0 in a log never cleaned (its head at 0), the only case ``plan_recovery`` asks
    starts_with_filler: bool = False
    was_cut: bool = False       # a writer cut units past the log's end from it

    @property
    def key(self) -> QueueKey:
        return (self.topic, self.queue_id)

    def emptied(self) -> QueueEnd:
        """The queue once its files were deleted, to be rebuilt."""
        return replace(self, units=0, max_physic_offset=0, end_offset=0, has_last=False, last_read_position=0,
                       last_file_size=0, first_from=-1, starts_with_filler=False)


@dataclass(frozen=True)
class QueueRebuild:
    """A queue a writer deletes and rebuilds from the commit log, and why (its ``damage``)."""

    key: QueueKey
    why: Refusal


@dataclass(frozen=True)
class GapCheck:
    """A reader's walk of ``[start, end)`` looking for records past their queue's units (``queues_behind``)."""

    start: int
    end: int
    #: True: any record past its queue's units counts (a store shut down cleanly); False (a crashed writer):
    #: only one stored before ``stored_before`` or ending at or below ``dispatched_end``
    tails: bool
    stored_before: int
    dispatched_end: int


@dataclass(frozen=True)
class ArchiveView:
    """What recovery reads of a store's archive (its manifest) when the index may lack keys below the local log."""

    low: int                    # the archive's first commit-log offset (-1: it holds none)
    end: int                    # where its commit log ends without a gap
    index_end: int              # where its index copies end (their newest's last entry's offset; 0: none)


@dataclass(frozen=True)
class RecoveryPlan:
    """What recovery does to the queues and the index once the commit log was judged."""

    cut: int                    # the commit log's valid end (the re-dispatch's end)
    low: int                    # the log's head: queues found behind are rebuilt from here
    #: no commit log: every consume queue and the index are dropped (they point into nothing)
    drop_all: bool = False
    #: a writer's queues whose last units are not theirs: deleted, rebuilt by the re-dispatch
    rebuild: tuple[QueueRebuild, ...] = ()
    #: a writer's re-dispatch start (-1: no re-dispatch); ``index_from`` already folded in
    dispatch_from: int = -1
    #: an abnormal writer's index: where the files it kept end (-1: no index, or a normal open)
    index_from: int = -1
    #: an abnormal writer's index with an archive: ``[start, end)`` of the archived commit log (below the local
    #: log) whose records are indexed again, before the re-dispatch indexes the local ones (None: nothing)
    archive_index: tuple[int, int] | None = None
    #: a reader: the store cannot be served
    refuse: Refusal | None = None
    #: a reader: the walk looking for lost units, judged by ``judge_reader_walk``
    gap_check: GapCheck | None = None


# -- the open -----------------------------------------------------------------------------------------------------

def abnormal_open(*, last_exit_ok: bool, read_only: bool, takeover: bool = False) -> bool:
    """A writer whose last writer did not shut down cleanly (its ``abort`` file is there) recovers abnormally:
    its walk starts at the checkpoint, short last files are padded, the queues and the index are rebuilt from
    there. A reader never does: it writes nothing, so it walks as after a clean shutdown and judges a crashed
    writer's queues by the abort file itself (``plan_recovery``). Nor does a takeover of several writers' lead
    (``takeover``): the leader's process died but the machine did not, so every page it wrote is in the page
    cache (what abnormal recovery guards against, pages lost with the machine, cannot have happened); its walk
    starts where the dead leader had dispatched to (``takeover_walk_start``) instead of at a checkpoint whose
    queue time moves once a minute (RocketMQ's thorough flush), which at full speed is gigabytes of log."""
    return not last_exit_ok and not read_only and not takeover


def takeover_walk_start(file_offsets: Sequence[int], dispatched_end: int) -> int:
    """A takeover's walk starts at the commit-log file holding the dead leader's dispatched end (every record
    below it has its consume-queue unit and index entries: the leader published that end after writing them),
    so the records it had yet to dispatch are walked, checked and counted per queue (``file_offsets``: each
    file's first offset, oldest first)."""
    start = 0
    for i, first in enumerate(file_offsets):
        if first <= dispatched_end:
            start = i
    return start


def log_geometry(configured: int, existing: int | None, paths: Sequence[str]) -> int:
    """The commit log's file size: the size its existing files share (``existing``, None when they do not
    agree or there are none) when it differs from the configured one yet may be the store's: whole pages, and
    every file name on its grid; a single file must not be mistaken for the geometry when it was cut short
    (it is then refused, naming the file). Else the configured size."""
    if existing is None or existing == configured or existing % 4096:
        return configured
    if all(int(os.path.basename(p)) % existing == 0 for p in paths):
        return existing
    return configured


def log_hole(gap: int) -> Refusal | None:
    """A commit-log file missing between two others (``first_gap``, -1: none) refuses the open: cleaning only
    ever deletes from the front, so a hole is lost data."""
    if gap < 0:
        return None
    return Refusal(gap, "commit-log file missing: the log has a hole from offset %d" % gap)


# -- the commit log ---------------------------------------------------------------------------------------------

def walk_start(first_timestamps: Sequence[int], checkpoint: CheckpointView, *, abnormal: bool, read_only: bool,
               index_safe: bool) -> int:
    """The index of the file the walk starts from, given each file's first store time (0: none; read lazily,
    newest first, so pass a lazy sequence). Normal (and any reader): the third-last file. Abnormal: the
    newest file whose first message is not newer than the checkpoint's horizon (``min_timestamp``, or with
    ``index_safe`` the index's too), or the first."""
    n = len(first_timestamps)
    if not abnormal or read_only:
        return max(0, n - 3)
    horizon = checkpoint.min_timestamp_index if index_safe else checkpoint.min_timestamp
    for i in range(n - 1, -1, -1):
        ts = first_timestamps[i]
        if ts != 0 and ts <= horizon:
            return i
    return 0


def judge_log(scan: LogScan, checkpoint: CheckpointView, *, read_only: bool, truncate_corrupted: bool) -> LogVerdict:
    """Where the log is cut, and whether it may be. The walk stopped at ``scan.stop``: with nothing valid
    after it, a torn tail (cut; a reader's view ends there). With valid records after it that the checkpoint
    says were flushed, the damage is in durable data: refused unless ``truncate_corrupted``."""
    stop = scan.stop
    if stop is None:
        return LogVerdict(scan.end)
    damaged = stop.reason != RECORD_END
    if stop.follows < 0:
        if not damaged:
            return LogVerdict(scan.end)
        damage = "%s at %d in %s" % (REASONS.get(stop.reason, "invalid record"), stop.offset, stop.file_name)
        note: Note = (logging.INFO, "commit log: %s; nothing valid follows: the writer's tail, read up to it"
                      % damage) if read_only else \
            (logging.WARNING, "commit log: %s; nothing valid follows, so it is a torn tail and is cut" % damage)
        return LogVerdict(scan.end, damage, notes=(note,))
    what = REASONS.get(stop.reason, "invalid record") if damaged else "zeroed region"
    # A writer that cannot trust the checkpoint cannot tell flushed from unflushed followers, so it takes them
    # as flushed: refusing costs a `recover --truncate` after a rare double fault, cutting could drop every
    # acknowledged message after the damage. A reader then only ends its view at the damage (it cuts nothing,
    # and a live writer's record in flight looks the same).
    unknown = not checkpoint.trusted and not read_only
    ts = stop.follower_timestamp
    durable = ts is not None and (unknown or (checkpoint.trusted and ts <= checkpoint.physic_msg_timestamp))
    damage = "%s at %d in %s" % (what, stop.offset, stop.file_name)
    if durable and not truncate_corrupted:
        # a reader refuses it too: a view ending at the damage would hide every durable message after it
        # (a live writer's record in flight is newer than the checkpoint's flush, so it is never "durable")
        return LogVerdict(scan.end, damage, stop.follows, refuse=Refusal(
            stop.offset,
            "%s, followed by valid %s from offset %d: refusing to truncate durable data "
            "(set recover_truncate_corrupted or run `pystore recover --truncate` to cut the log here)"
            % (what, "messages and a checkpoint that cannot be trusted to tell whether they were flushed"
               if unknown else "flushed messages", stop.follows), stop.file_name))
    if read_only:
        # a reader drops nothing: a live writer may be appending there (a record not whole yet, records
        # after it already written); the reader's view ends at it until a refresh finds it whole
        return LogVerdict(scan.end, damage, stop.follows, fence=True, notes=((
            logging.INFO, "commit log: %s with valid records from offset %d after it: this reader's view ends "
            "there (a record in flight, or damage a writer's open will judge)" % (damage, stop.follows)),))
    return LogVerdict(scan.end, damage, stop.follows, notes=((
        logging.WARNING, "commit log: %s; valid messages from offset %d are dropped with it (%s)"
        % (damage, stop.follows, "not yet flushed when the writer stopped" if not durable else "forced")),))


# -- the queues ------------------------------------------------------------------------------------------------

def plan_recovery(log: LogEnds, queues: Sequence[QueueEnd], checkpoint: CheckpointView, *, read_only: bool,
                  abnormal: bool, rebuilt: bool = False, index_end: int | None = None, abort_exists: bool = False,
                  writer_running: bool | None = None, dispatched_end: int | None = None,
                  archive: ArchiveView | None = None) -> RecoveryPlan:
    """RocketMQ ``recover`` once the log was judged: what to do to the queues and the index.

    ``rebuilt``: queues were already deleted to be rebuilt (their files could not be trusted); ``index_end``:
    where the index's kept files end (None: no index). A reader's facts: ``abort_exists`` (no clean
    shutdown), and whether a writer holds the lock (``writer_running``: None when it cannot tell; asked only
    with an abort file). ``dispatched_end``: a takeover of several writers' lead, where the dead leader had
    dispatched to: every record below it has its units and index entries, whole (it published that end after
    writing them); the records from there on may have none, or a unit it was writing when it died, so they are
    re-dispatched (checked: a unit that disagrees with its record is rewritten). ``archive``: what the store's
    archive holds (None: no archive, or nothing asked of it)."""
    if read_only:
        return _plan_reader(log, queues, checkpoint, abort_exists, writer_running)
    if not log.has_files:
        return RecoveryPlan(log.cut, log.low, drop_all=True)
    low = log.low
    foreign = _queues_past_their_records(queues, log)
    rebuild = tuple(QueueRebuild(q.key, _foreign_units(q, top)) for q, top in foreign)
    gone = {q.key for q, _ in foreign}
    after = [q.emptied() if q.key in gone else q for q in queues]
    ends = [q.max_physic_offset for q in after if q.units > 0]
    start = low if not ends else max(low, max(ends))
    cut = [q.max_physic_offset for q in queues if q.was_cut]
    if cut:
        start = max(low, min(start, min(cut)))    # a cut queue's records after its new end, if any
    suspect = _maybe_cut_short(after, low, log.walk_from)
    if suspect >= 0:
        # a queue that may have lost files: walk from where its records may be, so that a record beyond
        # its end shows the gap (queues_to_rebuild)
        start = min(start, suspect)
    behind = _tally_start(after, log, low)
    if behind >= 0:
        start = min(start, behind)
    if rebuilt or rebuild:
        start = low                 # queues whose files could not be trusted: rebuilt from the head
    if dispatched_end is not None:
        start = min(start, max(low, dispatched_end))
    index_from = -1
    if abnormal:
        start = min(start, log.walk_from)
        # the index dropped its files newer than the checkpoint's index time (their content may be torn):
        # rebuild it from where the files it kept end, or messages between that point and the queues' start
        # would stay unfindable by key (RocketMQ only does this with messageIndexSafe; the cost is re-reading
        # at most one index file's worth of the log)
        if index_end is not None:
            index_from = max(low, index_end)
            start = min(start, index_from)
    archive_index = _archive_index(low, index_end, archive) if abnormal else None
    return RecoveryPlan(log.cut, low, rebuild=rebuild, dispatch_from=start, index_from=index_from,
                        archive_index=archive_index)


def _archive_index(low: int, index_end: int | None, archive: ArchiveView | None) -> tuple[int, int] | None:
    """The span of the archived commit log an abnormal writer's index is rebuilt from. The index dropped its
    files newer than the checkpoint's index time, among them always the newest (never full, so never archived);
    with a short local retention those files also indexed messages whose commit-log files are now only in the
    archive, which no walk of the local log reaches. Their keys come back from the archive's copies of the
    commit log: from where the index's kept files end (or the archived index files, when they end further: those
    the lookups read), or the archive's start, to the local log's head (or the archive's contiguous end)."""
    if index_end is None or archive is None or archive.low < 0:
        return None
    start = max(index_end, archive.index_end, archive.low)
    end = min(low, archive.end)
    return (start, end) if start < end else None


def _plan_reader(log: LogEnds, queues: Sequence[QueueEnd], checkpoint: CheckpointView, abort_exists: bool,
                 writer_running: bool | None) -> RecoveryPlan:
    """A reader of a store no writer is running checks, as a writer's recovery does, that no queue lacks
    units for records of it (lost files at its end or head): it cannot rebuild the queue, so it refuses the
    store rather than hide those messages. Shut down cleanly (no abort file): every record past its queue's
    end counts. A crashed writer (abort file, no lock held): its queues may lag its log at their end (its next
    open re-dispatches), but not at their head, nor before the checkpoint's time of their last flush. A
    checkpoint that cannot be read tells no such time: any lag may be lost units, refused until a writer's
    open. Nor before the furthest unit any queue holds (dispatch follows the log in order: a crash leaves the
    queues lagging only as a common suffix); a power cut the writer did not recover from may break that rule,
    and the reader then refuses what the writer's open would re-dispatch. A live writer: no check."""
    plan = RecoveryPlan(log.cut, log.low)
    if not log.has_files or log.low < 0:
        return plan
    if not abort_exists:
        tails, stored_before = True, 0
    elif writer_running is False:
        tails, stored_before = not checkpoint.trusted, checkpoint.logics_msg_timestamp
    else:
        return plan
    low = log.low
    for q, top in _queues_past_their_records(queues, log):
        return replace(plan, refuse=_foreign_units(q, top).for_reader())
    start = _maybe_cut_short(queues, low, log.walk_from)
    # a queue's last units lost: records of it after its end, found in the last commit-log file
    ends = [q.max_physic_offset for q in queues if q.units > 0]
    if ends:
        tail = max(low, min(ends), log.last_file_from)
        start = tail if start < 0 else min(start, tail)
    if start < 0:
        return plan
    dispatched_end = min(max(ends, default=0), log.cut)
    return replace(plan, gap_check=GapCheck(start, log.cut, tails, stored_before, dispatched_end))


def _queues_past_their_records(queues: Sequence[QueueEnd], log: LogEnds) -> list[tuple[QueueEnd, int]]:
    """Queues whose last unit points into the range recovery walked, yet whose end lies past the highest
    queue offset of their records there: the units at their end are not theirs (a file of another queue
    swapped in, a unit's offset rewritten), and a re-dispatch cannot take units away. The last unit's record
    is in the walk, so it was tallied: a whole queue always has ``top >= end - 1``. Each with ``top``."""
    seen = log.walked
    if seen is None:
        return []
    out = []
    for q in queues:
        end = q.units
        if end == 0 or not log.walk_from < q.max_physic_offset <= log.cut:
            continue                # its last unit's record was not walked (a reader's units past the end)
        top = seen.get(q.key, (0, -1))[1]
        if top < end - 1:
            out.append((q, top))
    return out


def _foreign_units(q: QueueEnd, top: int) -> Refusal:
    """Why a queue found by ``_queues_past_their_records`` is rebuilt (or refused)."""
    return Refusal(q.end_offset, "consume queue %s/%d ends at offset %d but its records in the commit log's last "
                   "files go up to %d: its last units point at records of another queue"
                   % (q.topic, q.queue_id, q.units, top), q.last_path)


def _maybe_cut_short(queues: Sequence[QueueEnd], low: int, window: int) -> int:
    """Where a walk must start to see every record of the queues that may have lost files at their end
    (-1: none may have). A queue whose last file is exactly full (the file after it may be gone: a queue
    rolls to a new file with its next unit, so this is rare) is walked from its end, within the window
    recovery scanned; one left without units (every file gone, cut or zeroed), or whose first file starts
    past offset 0 in a log that was never cleaned (its first files are gone), from the log's head."""
    start = -1
    for q in queues:
        if not q.has_last or q.units == 0 or q.last_read_position == 0:
            at = low
        elif low == 0 and q.first_from > 0 and not q.starts_with_filler:
            at = low
        elif q.last_read_position >= q.last_file_size:
            at = max(low, min(q.max_physic_offset, window))
        else:
            continue
        start = at if start < 0 else min(start, at)
    return start


def _tally_start(queues: Sequence[QueueEnd], log: LogEnds, low: int) -> int:
    """Where a walk must start to give units to the records recovery walked whose queue lacks them (-1:
    none): a queue whose highest queue offset walked is at or past its end lost units at its end (a zeroed
    or damaged last unit, a cut last file), so its missing records follow its last unit's record; a queue
    with no units at all, from its first record walked (the dispatch's gap check decides whether that is
    its first message ever or a queue to rebuild). Read off the recovery walk, so a clean open walks no
    further than before when every queue is whole."""
    walked = log.walked
    if walked is None:
        return max(low, log.walk_from) if log.walked_any else -1
    by_key = {q.key: q for q in queues}
    start = -1
    for key, (first, top) in walked.items():
        q = by_key.get(key)
        end = q.units if q is not None else 0
        if q is None or end == 0:
            at = first
        elif top >= end:
            # from its first record walked, not from its last unit's: a damaged last unit may point past
            # the records it lacks (the walk is longer only for a queue that lost units)
            at = min(first, q.max_physic_offset)
        else:
            continue
        at = max(low, at)
        start = at if start < 0 else min(start, at)
    return start


# -- what the walks found --------------------------------------------------------------------------------------

def queues_to_rebuild(gaps: Mapping[QueueKey, int]) -> list[QueueKey]:
    """The re-dispatch found these queues lacking the units before a record of theirs (``Reached.gaps``: the
    queue's tail was lost, a file of it deleted, or a queue folder is gone while its records are not at the
    log's head): they cannot be trusted, so each is deleted and rebuilt by a walk from the log's head, and
    every acknowledged message stays readable while new puts continue its offsets instead of reusing them."""
    return sorted(gaps)


def judge_rebuilt_walk(gaps: Mapping[QueueKey, int]) -> Refusal | None:
    """The walk from the log's head that rebuilt queues: a queue's records follow each other there, so one
    whose queue offset jumps past its queue's end is a record with a damaged header (a hole in the queue, or
    a wrong answer)."""
    jumps = sorted(at for at in gaps.values() if at >= 0)
    if jumps:
        return Refusal(jumps[0], "a record whose queue offset does not follow its queue's (its header is damaged)")
    return None


def judge_reached(reached: int, end: int) -> Refusal | None:
    """Recovery judged the log whole up to ``end`` from its last files; a record before them that cannot be
    read stops the re-dispatch, and the queues would silently end there."""
    if reached < end:
        return Refusal(reached, "a commit-log record the re-dispatch cannot read, before the log's end %d (set "
                       "recover_truncate_corrupted or run `pystore recover --truncate` to cut the log here)" % end)
    return None


def judge_reader_walk(check: GapCheck, gaps: Collection[QueueKey], reached: int,
                      queues: Sequence[QueueEnd], log: LogEnds) -> tuple[Refusal | None, Note | None]:
    """A reader's gap check found ``gaps`` and reached ``reached``: a refusal, or a note for the log."""
    if reached < check.end and not gaps:
        # a record the check cannot pass: the records after it may be a queue's lost units (a writer's open
        # refuses the same record in its re-dispatch)
        return Refusal(reached, "a commit-log record that cannot be read, before the log's end %d (a writer's "
                       "open refuses it too; `pystore recover --truncate` cuts the log here)" % check.end), None
    by_key = {q.key: q for q in queues}
    for key in sorted(gaps):
        q = by_key[key]
        return Refusal(q.end_offset, "consume queue %s/%d lacks units for records of it in the commit log (files "
                       "lost): a writer's open rebuilds it from the commit log" % key, q.folder), None
    if not check.tails and check.dispatched_end < check.end:
        # a crash's lag, or last units lost (zeroed) that look the same: not served until a writer's open
        return None, (logging.WARNING, "%s: the commit log holds %d bytes of records after the furthest "
                      "consume-queue unit (from offset %d): the writer stopped before dispatching them, or their "
                      "units were lost; this reader serves each queue up to its last unit, a writer's open "
                      "(`pystore recover`) dispatches the rest" % (log.folder, check.end - check.dispatched_end,
                                                                   check.dispatched_end))
    return None, None
