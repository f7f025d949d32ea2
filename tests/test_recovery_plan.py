"""``pystore.engine.recovery_plan``: recovery's decisions, without files. Each case of docs/integrity.md's "When a
store is opened" that recovery decides (and those test_recovery.py, test_crash.py and test_corruption.py
cover through real stores) as values in, a verdict or a plan out: where the walk starts, where the log is cut
or why the open is refused, which queues are rebuilt (a writer) or refused (a reader), where the re-dispatch
and the index start, and how what the walks found is judged."""

from __future__ import annotations

import dataclasses
import logging

import pytest

from pystore.engine.recovery_plan import (
    ArchiveView,
    CheckpointView,
    GapCheck,
    LogEnds,
    LogScan,
    QueueEnd,
    RecoveryPlan,
    Refusal,
    Stop,
    abnormal_open,
    judge_log,
    judge_reached,
    judge_reader_walk,
    judge_rebuilt_walk,
    log_geometry,
    log_hole,
    plan_recovery,
    queues_to_rebuild,
    takeover_walk_start,
    walk_start,
)
from pystore.format._codec import RECORD_END

FILE = 1 << 20
TS = 1_700_000_000_000
BAD_CRC = 3        # any reason other than RECORD_END: a record that is not whole and valid

CP = CheckpointView(trusted=True, physic_msg_timestamp=TS + 500, logics_msg_timestamp=TS + 400,
                    min_timestamp=TS - 3000, min_timestamp_index=TS - 9000)
UNTRUSTED = dataclasses.replace(CP, trusted=False, physic_msg_timestamp=0, logics_msg_timestamp=0)


def queue(topic="T", qid=0, units=10, max_phy=1000, *, last_pos=None, file_size=600, first_from=0, filler=False,
          cut=False):
    """A consume queue's ends: ``units`` units whose last record ends at commit-log ``max_phy``."""
    pos = units * 20 if last_pos is None else last_pos
    return QueueEnd(topic, qid, "/cq/%s/%d" % (topic, qid), units, max_phy, units * 20,
                    "/cq/%s/%d/%020d" % (topic, qid, 0), units > 0 or last_pos is not None, pos, file_size,
                    first_from if units > 0 or last_pos is not None else -1, filler, cut)


def ends(*, low=0, cut=4000, walk_from=2 * FILE, walked=None, walked_any=True, last_file_from=3 * FILE,
         has_files=True):
    return LogEnds(has_files, low, cut, walk_from, walked, walked_any, last_file_from, "/log")


def writer(log, queues, *, abnormal=False, **kw):
    return plan_recovery(log, queues, CP, read_only=False, abnormal=abnormal, **kw)


# -- where the walk starts ----------------------------------------------------------------------------------------

class Lazy:
    """First store times that may be read only from the newest down to the first that fits."""

    def __init__(self, values, floor):
        self.values, self.floor, self.read = values, floor, []

    def __len__(self):
        return len(self.values)

    def __getitem__(self, i):
        assert i >= self.floor, "read a file older than the one the walk starts from"
        self.read.append(i)
        return self.values[i]


@pytest.mark.parametrize("n, start", [(1, 0), (3, 0), (5, 2)])
def test_a_normal_recovery_walks_from_the_third_last_file(n, start):
    assert walk_start(Lazy([TS] * n, n), CP, abnormal=False, read_only=False, index_safe=False) == start


def test_an_abnormal_recovery_walks_from_the_newest_file_not_newer_than_the_checkpoint():
    times = [TS - 20000, TS - 10000, TS - 3000, TS - 2999, TS]
    seq = Lazy(times, 2)
    assert walk_start(seq, CP, abnormal=True, read_only=False, index_safe=False) == 2
    assert seq.read == [4, 3, 2]
    # with message_index_safe the index's time is the horizon too
    assert walk_start(times, CP, abnormal=True, read_only=False, index_safe=True) == 1
    # no file old enough (a checkpoint older than the log), or empty first records: the first file
    assert walk_start([TS, TS + 1], CP, abnormal=True, read_only=False, index_safe=False) == 0
    assert walk_start([0, TS - 10000, 0], CP, abnormal=True, read_only=False, index_safe=False) == 1


def test_a_reader_walks_from_the_third_last_file_even_after_a_crash():
    assert walk_start([TS - 20000] * 6, CP, abnormal=True, read_only=True, index_safe=False) == 3


# -- where the commit log is cut -----------------------------------------------------------------------------------

def scan(stop=None, end=2 * FILE + 700):
    return LogScan("/log/%020d" % (2 * FILE), 2 * FILE, end, stop)


def test_a_clean_end_is_cut_nowhere_but_at_the_end():
    v = judge_log(scan(), CP, read_only=False, truncate_corrupted=False)
    assert (v.cut, v.damage, v.follows, v.refuse, v.fence, v.notes) == (2 * FILE + 700, None, -1, None, False, ())
    # the zeros after the last record, nothing valid after them: the end of the data
    v = judge_log(scan(Stop("/log/f", 2 * FILE + 700, RECORD_END)), CP, read_only=False, truncate_corrupted=False)
    assert (v.damage, v.refuse, v.notes) == (None, None, ())


@pytest.mark.parametrize("read_only", [False, True])
def test_a_torn_tail_is_cut_with_a_warning_and_ends_a_readers_view(read_only):
    v = judge_log(scan(Stop("/log/f", 2 * FILE + 700, BAD_CRC)), CP, read_only=read_only, truncate_corrupted=False)
    assert v.cut == 2 * FILE + 700 and v.refuse is None and v.follows == -1 and not v.fence
    assert v.damage.endswith("at %d in /log/f" % (2 * FILE + 700))
    [(level, text)] = v.notes
    assert level == (logging.INFO if read_only else logging.WARNING)
    assert ("the writer's tail" if read_only else "torn tail and is cut") in text


@pytest.mark.parametrize("read_only", [False, True])
def test_damage_followed_by_flushed_records_is_refused(read_only):
    """Damage before durable data is corruption, not a crash's tail: cutting would drop acknowledged
    messages. A reader refuses it too (a view ending there would hide them)."""
    stop = Stop("/log/f", 2 * FILE + 700, BAD_CRC, follows=2 * FILE + 900, follower_timestamp=TS + 500)
    v = judge_log(scan(stop), CP, read_only=read_only, truncate_corrupted=False)
    assert v.refuse == Refusal(2 * FILE + 700, v.refuse.reason, "/log/f")
    assert "followed by valid flushed messages from offset %d" % (2 * FILE + 900) in v.refuse.reason
    assert "recover --truncate" in v.refuse.reason


def test_recover_truncate_cuts_damage_before_flushed_records():
    stop = Stop("/log/f", 2 * FILE + 700, BAD_CRC, follows=2 * FILE + 900, follower_timestamp=TS + 500)
    v = judge_log(scan(stop), CP, read_only=False, truncate_corrupted=True)
    assert v.refuse is None and v.cut == 2 * FILE + 700 and v.follows == 2 * FILE + 900
    [(level, text)] = v.notes
    assert level == logging.WARNING and "dropped with it (forced)" in text


def test_damage_followed_by_records_newer_than_the_flush_is_cut():
    stop = Stop("/log/f", 2 * FILE + 700, RECORD_END, follows=2 * FILE + 900, follower_timestamp=TS + 501)
    v = judge_log(scan(stop), CP, read_only=False, truncate_corrupted=False)
    assert v.refuse is None and v.damage == "zeroed region at %d in /log/f" % (2 * FILE + 700)
    assert "not yet flushed when the writer stopped" in v.notes[0][1]
    # a follower that cannot be read as a message is not a durable one either
    stop = dataclasses.replace(stop, follower_timestamp=None)
    assert judge_log(scan(stop), CP, read_only=False, truncate_corrupted=False).refuse is None


def test_a_checkpoint_that_cannot_be_trusted_makes_a_writer_refuse_and_a_reader_fence():
    """A writer that cannot tell flushed from unflushed followers takes them as flushed; a reader only ends
    its view there (a live writer's record in flight looks the same)."""
    stop = Stop("/log/f", 2 * FILE + 700, BAD_CRC, follows=2 * FILE + 900, follower_timestamp=TS + 10**6)
    v = judge_log(scan(stop), UNTRUSTED, read_only=False, truncate_corrupted=False)
    assert v.refuse is not None and "cannot be trusted" in v.refuse.reason
    v = judge_log(scan(stop), UNTRUSTED, read_only=True, truncate_corrupted=False)
    assert v.refuse is None and v.fence and v.notes[0][0] == logging.INFO


def test_a_live_writers_record_in_flight_fences_a_readers_view():
    stop = Stop("/log/f", 2 * FILE + 700, BAD_CRC, follows=2 * FILE + 900, follower_timestamp=TS + 10**6)
    v = judge_log(scan(stop), CP, read_only=True, truncate_corrupted=False)
    assert (v.cut, v.refuse, v.fence, v.follows) == (2 * FILE + 700, None, True, 2 * FILE + 900)
    assert "this reader's view ends there" in v.notes[0][1]


# -- the queues: a writer ------------------------------------------------------------------------------------------

def test_no_commit_log_drops_every_queue_and_the_index():
    plan = writer(ends(has_files=False, low=-1, cut=0, walked_any=False), [queue()], index_end=500)
    assert plan == RecoveryPlan(0, -1, drop_all=True)


def test_a_clean_store_re_dispatches_nothing():
    """Every queue whole (the walk saw each up to its last unit): the re-dispatch starts at the queues'
    furthest record, which is the log's end."""
    walked = {("T", 0): (2 * FILE, 9), ("T", 1): (2 * FILE + 50, 4)}
    qs = [queue("T", 0, 10, 4000), queue("T", 1, 5, 3900)]
    plan = writer(ends(walked=walked), qs)
    assert plan == RecoveryPlan(4000, 0, dispatch_from=4000)


def test_an_abnormal_open_re_dispatches_from_the_walk_and_the_index():
    walked = {("T", 0): (2 * FILE, 9)}
    qs = [queue("T", 0, 10, 4000)]
    assert writer(ends(walked=walked, walk_from=3000), qs, abnormal=True).dispatch_from == 3000
    plan = writer(ends(walked=walked, walk_from=3000), qs, abnormal=True, index_end=1200)
    assert (plan.dispatch_from, plan.index_from) == (1200, 1200)
    # the index start never lies below the log's head
    plan = writer(ends(walked=walked, walk_from=3000, low=2000), qs, abnormal=True, index_end=1200)
    assert (plan.dispatch_from, plan.index_from) == (2000, 2000)
    # a normal open keeps the index as it is
    assert writer(ends(walked=walked, walk_from=3000), qs, index_end=1200).index_from == -1


def test_an_abnormal_open_re_indexes_the_archived_log_below_the_local_one():
    """The index files dropped after a crash also held keys of messages now only in the archive: the archived
    commit log from where the kept (or archived) index files end to the local log's head is indexed again."""
    walked = {("T", 0): (2 * FILE, 9)}
    qs = [queue("T", 0, 10, 4000)]
    log = ends(walked=walked, walk_from=3000, low=2000)
    arch = ArchiveView(low=0, end=2000, index_end=0)
    plan = writer(log, qs, abnormal=True, index_end=1200, archive=arch)
    assert plan.archive_index == (1200, 2000) and (plan.dispatch_from, plan.index_from) == (2000, 2000)
    # no index file kept: from the archive's start, or from where its index copies end
    assert writer(log, qs, abnormal=True, index_end=0, archive=arch).archive_index == (0, 2000)
    assert writer(log, qs, abnormal=True, index_end=0,
                  archive=ArchiveView(low=0, end=2000, index_end=1500)).archive_index == (1500, 2000)
    # nor below the archive's own start, nor past its contiguous end
    assert writer(log, qs, abnormal=True, index_end=0,
                  archive=ArchiveView(low=800, end=1900, index_end=0)).archive_index == (800, 1900)
    # nothing when the kept index reaches the local log, without an archive or an index, or on a normal open
    assert writer(log, qs, abnormal=True, index_end=2500, archive=arch).archive_index is None
    assert writer(log, qs, abnormal=True, index_end=1200).archive_index is None
    assert writer(log, qs, abnormal=True, archive=arch).archive_index is None
    assert writer(log, qs, index_end=1200, archive=arch).archive_index is None
    assert writer(log, qs, abnormal=True, index_end=0,
                  archive=ArchiveView(low=-1, end=-1, index_end=0)).archive_index is None


def test_a_takeover_re_dispatches_from_the_dead_leaders_dispatched_end_and_keeps_the_index():
    """A takeover of several writers' lead is not abnormal (the machine did not die), but the records from the
    dead leader's dispatched end on may lack units or have one it was writing when it died: re-dispatched (with
    the checked walk) from there, even below the queues' ends; never below the log's head; the index kept."""
    walked = {("T", 0): (2 * FILE, 9)}
    qs = [queue("T", 0, 10, 4000)]
    assert writer(ends(walked=walked, walk_from=3000), qs).dispatch_from == 4000
    plan = writer(ends(walked=walked, walk_from=3000), qs, dispatched_end=3500, index_end=1200)
    assert (plan.dispatch_from, plan.index_from) == (3500, -1)
    assert writer(ends(walked=walked, walk_from=3000, low=3800), qs, dispatched_end=3500).dispatch_from == 3800


def test_a_queue_cut_at_the_logs_end_re_dispatches_after_its_new_end():
    walked = {("T", 0): (2 * FILE, 9), ("T", 1): (2 * FILE, 4)}
    qs = [queue("T", 0, 10, 4000), queue("T", 1, 5, 3500, cut=True)]
    assert writer(ends(walked=walked), qs).dispatch_from == 3500


def test_a_queue_that_lost_its_last_units_re_dispatches_from_its_records_walked():
    """Its highest queue offset walked is at or past its end: its missing records follow its last unit's."""
    walked = {("T", 0): (2 * FILE + 10, 14), ("T", 1): (2 * FILE, 4)}
    qs = [queue("T", 0, 10, 3000), queue("T", 1, 5, 4000)]
    assert writer(ends(walked=walked), qs).dispatch_from == 3000
    # a queue with no units at all: from its first record walked
    qs = [queue("T", 1, 5, 2 * FILE + 400)]
    assert writer(ends(walked=walked, cut=2 * FILE + 500), qs).dispatch_from == 2 * FILE + 10
    # the tally overflowed: from the walk's start
    assert writer(ends(walked=None, walk_from=2 * FILE), qs).dispatch_from == 2 * FILE


def test_a_queue_that_may_have_lost_files_is_walked_for_gaps():
    walked = {("T", 0): (2 * FILE, 9)}
    # its last file exactly full: the file after it may be gone; walked from its end, within the window
    full = queue("T", 0, 10, 4000, last_pos=600, file_size=600)
    assert writer(ends(walked=walked, walk_from=3000), [full]).dispatch_from == 3000
    assert writer(ends(walked=walked, walk_from=5000), [full]).dispatch_from == 4000
    # its first file starts past 0 in a log never cleaned: its first files are gone, walked from the head
    headless = queue("T", 0, 10, 4000, first_from=200)
    assert writer(ends(walked=walked), [headless]).dispatch_from == 0
    # unless it opens with filler units (it began there in this store)
    began = queue("T", 0, 10, 4000, first_from=200, filler=True)
    assert writer(ends(walked=walked), [began]).dispatch_from == 4000
    # left without units
    empty = queue("T", 0, 0, 0, last_pos=0)
    assert writer(ends(walked={}, low=100), [empty]).dispatch_from == 100


def test_a_queue_whose_last_units_are_not_its_own_is_rebuilt_from_the_head():
    """Foreign units: a queue's last unit points into the range walked, but its records there stop short of
    its end (a file of another queue swapped in): a re-dispatch cannot take units away, so it is rebuilt."""
    walked = {("T", 0): (2 * FILE, 6), ("T", 1): (2 * FILE, 4)}
    qs = [queue("T", 0, 10, 2 * FILE + 300), queue("T", 1, 5, 4000)]
    plan = writer(ends(walked=walked, cut=3 * FILE), qs)
    assert plan.dispatch_from == 0
    [rebuild] = plan.rebuild
    assert rebuild.key == ("T", 0)
    assert rebuild.why.path == qs[0].last_path and rebuild.why.offset == 200
    assert "ends at offset 10 but its records in the commit log's last files go up to 6" in rebuild.why.reason
    # a queue whose last unit's record lies before the walk was not seen by it: not judged
    assert writer(ends(walked=walked, walk_from=3 * FILE, cut=4 * FILE), qs).rebuild == ()


def test_queues_rebuilt_at_load_are_re_dispatched_from_the_head():
    walked = {("T", 0): (2 * FILE, 9)}
    assert writer(ends(walked=walked, low=100), [queue("T", 0, 10, 4000)], rebuilt=True).dispatch_from == 100


# -- the queues: a reader ------------------------------------------------------------------------------------------

def reader(log, queues, checkpoint=CP, **kw):
    return plan_recovery(log, queues, checkpoint, read_only=True, abnormal=False, **kw)


def test_a_reader_of_a_live_writer_checks_nothing():
    walked = {("T", 0): (2 * FILE, 9)}
    for running in (True, None):
        assert reader(ends(walked=walked), [queue()], abort_exists=True, writer_running=running) == \
            RecoveryPlan(4000, 0)


def test_a_reader_of_a_clean_store_checks_every_queues_tail():
    walked = {("T", 0): (2 * FILE, 9), ("T", 1): (2 * FILE, 4)}
    qs = [queue("T", 0, 10, 3 * FILE + 100), queue("T", 1, 5, 3 * FILE + 50)]
    plan = reader(ends(walked=walked, cut=3 * FILE + 200), qs, abort_exists=False)
    assert plan.gap_check == GapCheck(3 * FILE + 50, 3 * FILE + 200, True, 0, 3 * FILE + 100)
    assert plan.refuse is None and plan.dispatch_from == -1 and plan.rebuild == ()


def test_a_reader_of_a_crashed_store_allows_a_lag_at_the_end():
    walked = {("T", 0): (2 * FILE, 9)}
    qs = [queue("T", 0, 10, 3 * FILE + 100)]
    plan = reader(ends(walked=walked, cut=3 * FILE + 200), qs, abort_exists=True, writer_running=False)
    assert plan.gap_check == GapCheck(3 * FILE + 100, 3 * FILE + 200, False, CP.logics_msg_timestamp, 3 * FILE + 100)
    # a checkpoint that cannot be read tells no time: any lag may be lost units
    plan = reader(ends(walked=walked, cut=3 * FILE + 200), qs, UNTRUSTED, abort_exists=True, writer_running=False)
    assert plan.gap_check.tails


def test_a_reader_refuses_a_queue_whose_last_units_are_not_its_own():
    walked = {("T", 0): (2 * FILE, 6)}
    qs = [queue("T", 0, 10, 2 * FILE + 300)]
    plan = reader(ends(walked=walked, cut=3 * FILE), qs, abort_exists=False)
    assert plan.refuse.path == qs[0].last_path and plan.refuse.offset == 200
    assert plan.refuse.reason.endswith("(a writer's open rebuilds the queue from the commit log)")


def test_a_reader_with_nothing_suspect_walks_nothing():
    assert reader(ends(walked={}), [], abort_exists=False).gap_check is None
    assert reader(ends(has_files=False, low=-1, walked_any=False), [queue()], abort_exists=False) == \
        RecoveryPlan(4000, -1)


# -- what the walks found ------------------------------------------------------------------------------------------

def test_queues_found_behind_are_rebuilt_in_order():
    assert queues_to_rebuild({("U", 1): -1, ("T", 2): 500, ("T", 0): 100}) == [("T", 0), ("T", 2), ("U", 1)]
    assert queues_to_rebuild({}) == []


def test_a_queue_offset_that_jumps_in_the_rebuilding_walk_is_refused():
    assert judge_rebuilt_walk({("T", 0): -1}) is None
    refusal = judge_rebuilt_walk({("T", 0): 900, ("T", 1): 300, ("T", 2): -1})
    assert refusal.offset == 300 and refusal.path is None and "header is damaged" in refusal.reason
    assert judge_rebuilt_walk({("T", 0): 0}).offset == 0           # the log's first record


def test_a_record_the_re_dispatch_cannot_read_is_refused():
    assert judge_reached(4000, 4000) is None
    refusal = judge_reached(1000, 4000)
    assert refusal.offset == 1000 and refusal.path is None and "before the log's end 4000" in refusal.reason


def test_a_readers_walk_is_judged():
    qs = [queue("T", 0, 10, 3000), queue("T", 1, 5, 2000)]
    log = ends(cut=4000)
    clean = GapCheck(2000, 4000, True, 0, 3000)
    assert judge_reader_walk(clean, set(), 4000, qs, log) == (None, None)
    # a queue lacking units for records of it
    refusal, note = judge_reader_walk(clean, {("T", 1)}, 4000, qs, log)
    assert (refusal.path, refusal.offset, note) == ("/cq/T/1", 100, None)
    # a record the check cannot pass
    refusal, _ = judge_reader_walk(clean, set(), 3500, qs, log)
    assert refusal.offset == 3500 and refusal.path is None
    # a crashed writer's lag: served up to each queue's last unit, said in the log
    crashed = GapCheck(2000, 4000, False, TS, 3000)
    refusal, (level, text) = judge_reader_walk(crashed, set(), 4000, qs, log)
    assert refusal is None and level == logging.WARNING and "1000 bytes of records" in text


def test_plans_and_verdicts_are_values():
    plan = RecoveryPlan(1, 0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.cut = 2
    assert plan == RecoveryPlan(1, 0) and hash(plan) == hash(RecoveryPlan(1, 0))


# -- the open ------------------------------------------------------------------------------------------------------

def test_only_a_writer_after_a_crash_opens_abnormally():
    assert abnormal_open(last_exit_ok=False, read_only=False)
    assert not abnormal_open(last_exit_ok=True, read_only=False)
    assert not abnormal_open(last_exit_ok=False, read_only=True)
    # a takeover of several writers' lead: a process died, not the machine
    assert not abnormal_open(last_exit_ok=False, read_only=False, takeover=True)


def test_a_takeover_walks_from_the_file_holding_the_dead_leaders_dispatched_end():
    offsets = [0, 1024, 2048, 3072]
    assert takeover_walk_start(offsets, 0) == 0
    assert takeover_walk_start(offsets, 1023) == 0
    assert takeover_walk_start(offsets, 1024) == 1
    assert takeover_walk_start(offsets, 3000) == 2
    assert takeover_walk_start(offsets, 5000) == 3
    assert takeover_walk_start([4096, 5120], 100) == 0        # below the first file (cleaned): from the first


def test_the_store_keeps_the_geometry_of_its_files():
    names = ["/log/%020d" % (i * 8192) for i in range(3)]
    assert log_geometry(4096, None, names) == 4096              # no files, or files of different sizes
    assert log_geometry(8192, 8192, names) == 8192
    assert log_geometry(4096, 8192, names) == 8192              # files of another size, on its grid
    assert log_geometry(4096, 6000, names) == 4096              # not whole pages: a file cut short
    assert log_geometry(4096, 16384, names) == 4096             # names off the grid of that size


def test_a_hole_in_the_commit_log_refuses_the_open():
    assert log_hole(-1) is None
    assert log_hole(8192) == Refusal(8192, "commit-log file missing: the log has a hole from offset 8192")
