"""``pystore.engine.queue_damage``: a consume queue's damage decided without files. The cases of docs/integrity.md
about a queue's own files (a hole, a file cut short or grown, a name off the grid, an invalid unit inside a full
file or with units after it; a writer rebuilds, a reader refuses) as values in, a decision out; test_consume_queue.py
and test_corruption.py cover the same through real files."""

from __future__ import annotations

import logging

import pytest

from pystore.engine.queue_damage import (
    QueueAction,
    QueueFile,
    QueueLayout,
    QueueRepair,
    UnitWalk,
    WalkedFile,
    judge_queue_files,
    judge_unit_walk,
    queue_layout,
    repair,
    unit_walk_start,
    units_to_check,
)
from pystore.engine.recovery_plan import Refusal

SIZE = 6000            # 300 units a file
FOLDER = "/cq/T/0"


def f(offset, size=SIZE):
    return QueueFile("%s/%020d" % (FOLDER, offset), offset, size)


def files(*offsets):
    return [f(o) for o in offsets]


# -- the layout --------------------------------------------------------------------------------------------------

def test_files_of_the_configured_size_keep_it():
    assert queue_layout(files(0, SIZE), SIZE, FOLDER) == QueueLayout(SIZE)


def test_no_file_or_only_empty_ones_keep_the_configured_size():
    assert queue_layout([], SIZE, FOLDER) == QueueLayout(SIZE)
    assert queue_layout([f(0, 0)], SIZE, FOLDER) == QueueLayout(SIZE)


def test_a_queue_made_with_another_file_size_keeps_it():
    layout = queue_layout([f(0, 4000), f(4000, 4000)], SIZE, FOLDER)
    assert layout.file_size == 4000 and layout.damage is None
    assert layout.note == (logging.INFO, "%s: files of 4000 bytes; the queue keeps its geometry" % FOLDER)


def test_one_file_cut_short_does_not_change_the_geometry():
    # the size most files have wins, so the short file is the one the load names
    layout = queue_layout([f(0), f(SIZE, 120), f(2 * SIZE)], SIZE, FOLDER)
    assert layout == QueueLayout(SIZE)


def test_a_tie_keeps_the_configured_size():
    assert queue_layout([f(0), f(SIZE, 4000)], SIZE, FOLDER) == QueueLayout(SIZE)
    assert queue_layout([f(0, 4000), f(SIZE)], SIZE, FOLDER) == QueueLayout(SIZE)


def test_files_that_are_not_whole_units_are_damage_named_at_the_first_file():
    layout = queue_layout([f(0, 4010), f(4010, 4010)], SIZE, FOLDER)
    assert layout.damage == Refusal(4000, "files of 4010 bytes are not a whole number of 20-byte units", f(0).path)
    assert layout.file_size == SIZE and layout.note is None


# -- the files ---------------------------------------------------------------------------------------------------

def test_the_units_checked_are_each_full_files_first_and_last():
    assert units_to_check(files(0, SIZE, 2 * SIZE), SIZE) == [0, 299, 300, 599]
    assert units_to_check(files(0), SIZE) == []
    assert units_to_check([], SIZE) == []


def test_whole_files_are_trusted():
    assert judge_queue_files(FOLDER, files(0, SIZE, 2 * SIZE), SIZE) is None
    assert judge_queue_files(FOLDER, [], SIZE) is None
    assert judge_queue_files(FOLDER, files(3 * SIZE, 4 * SIZE), SIZE) is None    # cleaned from the head


def test_a_load_refused_by_the_log_is_the_damage():
    why = Refusal(SIZE + 120, "the file is 120 bytes, every file of this log is 6000", f(SIZE).path)
    assert judge_queue_files(FOLDER, [], SIZE, mapped=False, load_error=why) == why
    assert judge_queue_files(FOLDER, [], SIZE, mapped=False) == Refusal(0, "the queue's files cannot be mapped",
                                                                        FOLDER)


def test_a_file_named_off_the_grid():
    assert judge_queue_files(FOLDER, files(0, SIZE + 20), SIZE) == Refusal(
        SIZE + 20, "a file name off the queue's grid of 6000-byte files", f(SIZE + 20).path)


def test_an_invalid_unit_inside_a_full_file_names_its_file():
    assert judge_queue_files(FOLDER, files(0, SIZE, 2 * SIZE), SIZE, bad_unit=599) == Refusal(
        599 * 20, "an empty or invalid unit inside a full consume-queue file", f(SIZE).path)


def test_a_file_missing_between_two_others_is_a_hole():
    assert judge_queue_files(FOLDER, files(0, 2 * SIZE), SIZE) == Refusal(
        SIZE, "consume-queue file missing: the queue has a hole from queue offset 300", f(SIZE).path)


def test_the_first_damage_found_is_named():
    # a name off the grid, then an invalid unit, then a hole
    assert "grid" in judge_queue_files(FOLDER, files(0, SIZE + 20, 3 * SIZE), SIZE, bad_unit=0).reason
    assert judge_queue_files(FOLDER, files(0, 2 * SIZE, 3 * SIZE), SIZE, bad_unit=0).offset == 0
    why = Refusal(5, "refused", "/x")
    assert judge_queue_files(FOLDER, files(0, SIZE + 20), SIZE, mapped=False, load_error=why, bad_unit=0) == why


# -- the units ---------------------------------------------------------------------------------------------------

def walked(offset, end, max_phy=-1, *, last=False, stop=(0, 0), followed=False):
    return WalkedFile(f(offset).path, offset, SIZE, end, max_phy, last, stop[0], stop[1], followed)


def test_the_walk_starts_at_the_third_last_file():
    assert [unit_walk_start(n) for n in (0, 1, 2, 3, 4, 10)] == [0, 0, 0, 0, 1, 7]


def test_the_end_is_the_first_empty_unit_of_the_last_file():
    walk = [walked(0, SIZE, 5000), walked(SIZE, SIZE, 9000), walked(2 * SIZE, 400, 9800, last=True)]
    assert judge_unit_walk(walk, 0) == UnitWalk(2 * SIZE + 400, 9800)


def test_a_unit_torn_by_a_crash_ends_the_queue():
    # its size, written last, still 0: the end, not damage
    walk = [walked(0, 400, 9800, last=True, stop=(9800, 0))]
    assert judge_unit_walk(walk, 0) == UnitWalk(400, 9800)


def test_files_full_to_their_end():
    walk = [walked(0, SIZE, 5000), walked(SIZE, SIZE, 9000, last=True)]
    assert judge_unit_walk(walk, 0) == UnitWalk(2 * SIZE, 9000)


def test_an_invalid_unit_in_a_file_that_is_not_the_last_is_damage():
    walk = [walked(0, SIZE, 5000), walked(SIZE, 200, 6000)]
    assert judge_unit_walk(walk, 0).damage == Refusal(
        SIZE + 200, "an empty or invalid unit inside a full consume-queue file", f(SIZE).path)


@pytest.mark.parametrize("stop, followed", [((0, 0), True), ((-5, 0), False), ((100, -1), False)])
def test_an_invalid_unit_with_units_after_it_or_written_by_something_else_is_damage(stop, followed):
    walk = [walked(0, SIZE, 5000), walked(SIZE, 200, 6000, last=True, stop=stop, followed=followed)]
    verdict = judge_unit_walk(walk, 0)
    assert verdict.damage == Refusal(SIZE + 200, "an empty or invalid unit with units after it", f(SIZE).path)


def test_walked_files_without_a_real_unit_take_the_max_from_the_file_before():
    walk = [walked(3 * SIZE, SIZE), walked(4 * SIZE, SIZE), walked(5 * SIZE, 0, last=True)]
    assert judge_unit_walk(walk, 3) == UnitWalk(5 * SIZE, -1, from_before=True)
    # no file before the walk: nothing to take
    assert judge_unit_walk([walked(0, 0, last=True)], 0) == UnitWalk(0, -1, from_before=False)


def test_the_last_real_unit_walked_gives_the_max():
    walk = [walked(0, SIZE, 5000), walked(SIZE, SIZE), walked(2 * SIZE, 40, last=True)]
    assert judge_unit_walk(walk, 0) == UnitWalk(2 * SIZE + 40, 5000)


# -- rebuild or refuse -------------------------------------------------------------------------------------------

def test_a_writer_rebuilds_a_damaged_queue():
    why = Refusal(SIZE, "consume-queue file missing", f(SIZE).path)
    assert repair(why, read_only=False) == QueueRepair(QueueAction.REBUILD, why)


def test_a_reader_refuses_it_naming_the_file():
    why = Refusal(SIZE, "consume-queue file missing", f(SIZE).path)
    decision = repair(why, read_only=True)
    assert decision.action is QueueAction.REFUSE
    assert (decision.why.path, decision.why.offset) == (why.path, why.offset)
    assert decision.why.reason == "consume-queue file missing (a writer's open rebuilds the queue from the commit log)"
