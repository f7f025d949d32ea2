"""A consume queue's damage: the decisions about one queue's files, apart from their reads and writes
(``pystore.queue.consume_queue`` lists and maps the files, walks the units, asks these functions and applies
what they answer). Pure like ``pystore.engine.recovery_plan``, beside which it stands: it reads no file, writes
none, logs nothing, so each case of docs/integrity.md about a queue's files is a unit test without files
(tests/test_queue_damage.py).

The order, for one queue (``ConsumeQueue.load``, then ``ConsumeQueue.recover``):

1. ``queue_layout``: from the files' sizes, the size the queue's files have (its geometry: a queue keeps the
   one it was made with), or damage when that size is not whole units. The log's own load then maps the files
   and refuses one of another size (cut short or grown), which the geometry chosen here names.
2. ``units_to_check``, then ``judge_queue_files``: which units of the mapped files are read (each full file's
   first and last), then the files judged as a whole: a load refused, a name off the grid, an invalid unit
   inside a full file, a file missing between two others (a hole).
3. ``unit_walk_start``, then ``judge_unit_walk``: the walk of the last files' units (RocketMQ's), judged: the
   queue's valid end, or damage when an invalid unit is not that end.
4. ``repair``: damage found in 1-3 (or by ``plan_recovery``: units of another queue at a queue's end) is
   rebuilt from the commit log by a writer, refused by a reader (:class:`QueueRepair`).

Damage is a :class:`~pystore.engine.recovery_plan.Refusal` naming the queue's file and the absolute byte offset
in the queue's logical space (``StoreCorruptedError(path, offset, reason)`` when refused).
"""

from __future__ import annotations

import enum
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass

from pystore.engine.recovery_plan import Note, Refusal
from pystore.format._codec import UNIT_SIZE

__all__ = ["QueueAction", "QueueFile", "QueueLayout", "QueueRepair", "UnitWalk", "WalkedFile", "judge_queue_files",
           "judge_unit_walk", "queue_layout", "repair", "unit_walk_start", "units_to_check"]

#: files of a consume queue the recovery walk reads from the end (RocketMQ ``ConsumeQueue.recover``)
WALKED_FILES = 3


@dataclass(frozen=True)
class QueueFile:
    """One file of a queue as listed (or mapped): its path, the offset its name says, its size in bytes."""

    path: str
    offset: int
    size: int = 0


@dataclass(frozen=True)
class QueueLayout:
    """``queue_layout``'s answer: the size the queue's files are mapped at, or why they cannot be."""

    file_size: int
    damage: Refusal | None = None
    note: Note | None = None


@dataclass(frozen=True)
class WalkedFile:
    """One file the recovery walk read (``recover_units`` from its start), and where it stopped in it."""

    path: str
    offset: int                 # the file's offset in the queue (its name)
    size: int                   # its size in bytes
    end: int                    # the position after its last valid unit from the start
    max_phy: int                # where the last real (non-filler) unit's record ends (-1: none)
    last: bool = False          # it is the queue's last file
    #: when ``end`` < ``size``: the unit there (its commit-log offset and size), and whether a valid unit
    #: follows it in the file
    stop_phy: int = 0
    stop_size: int = 0
    followed: bool = False


@dataclass(frozen=True)
class UnitWalk:
    """``judge_unit_walk``'s answer: the queue's valid end, or the damage that refuses to take one."""

    end: int                    # the queue's valid end (absolute bytes): the units after it are cut
    #: where the last unit's record ends, from the walked files (-1: they hold no real unit)
    max_phy: int = -1
    #: no walked file holds a real unit, but files before the walk exist: take it from the one before
    from_before: bool = False
    damage: Refusal | None = None


class QueueAction(enum.Enum):
    """What is done with a queue whose files cannot be trusted."""

    #: a writer deletes its files; the re-dispatch builds it again from the commit log, the source of truth
    REBUILD = "rebuild"
    #: a reader cannot rebuild: the open (or the queue's live load) is refused
    REFUSE = "refuse"


@dataclass(frozen=True)
class QueueRepair:
    """``repair``'s answer: the action and the damage (for a refusal, the error's path, offset and reason)."""

    action: QueueAction
    why: Refusal


# -- the files -------------------------------------------------------------------------------------------------

def _common_size(sizes: Sequence[int], configured: int) -> int | None:
    """The size most of a queue's files have (the configured one on a tie; empty files left out), None when
    no file has one: so that the one file cut short or grown is the one named as damaged."""
    counts: dict[int, int] = {}
    for size in sizes:
        if size:
            counts[size] = counts.get(size, 0) + 1
    if not counts:
        return None
    return max(counts, key=lambda size: (counts[size], size == configured))


def queue_layout(files: Sequence[QueueFile], configured: int, folder: str = "") -> QueueLayout:
    """The size the queue's ``files`` (listed, with their sizes, in offset order) are mapped at: the size most
    of them have when it differs from the ``configured`` one (the store keeps the geometry it was made with),
    else the configured one. Damage when that size is not a whole number of units: named at the first file,
    where its first partial unit would start."""
    size = _common_size([f.size for f in files], configured)
    if size is None or size == configured:
        return QueueLayout(configured)
    if size % UNIT_SIZE:
        first = files[0]
        return QueueLayout(configured, Refusal(first.offset + size - size % UNIT_SIZE, "files of %d bytes are not a "
                                               "whole number of %d-byte units" % (size, UNIT_SIZE), first.path))
    return QueueLayout(size, note=(logging.INFO, "%s: files of %d bytes; the queue keeps its geometry" % (folder, size)))


def units_to_check(files: Sequence[QueueFile], file_size: int) -> list[int]:
    """The queue offsets (in units) whose units are read before the files are trusted: each full file's (every
    file but the last) first and last. Fillers count as valid, so a whole file never fails; a file zeroed or
    cut inside shows here at the cost of two units a file (the recovery walk reads only the last files, as
    RocketMQ's does)."""
    return [(f.offset + pos) // UNIT_SIZE for f in files[:-1] for pos in (0, file_size - UNIT_SIZE)]


def judge_queue_files(folder: str, files: Sequence[QueueFile], file_size: int, *, mapped: bool = True,
                      load_error: Refusal | None = None, bad_unit: int = -1) -> Refusal | None:
    """Whether the queue's mapped ``files`` (in offset order) can be trusted as a whole; the first damage found,
    in this order: the log's load refused them (``mapped`` False, ``load_error`` its reason: a file of
    another size), a file named off the grid of ``file_size``-byte files, an invalid unit among
    ``units_to_check``'s (``bad_unit``: the first, in units; -1: none), a file missing between two others.
    Such a queue is never read as it is (``repair``)."""
    if not mapped:
        return load_error if load_error is not None else Refusal(0, "the queue's files cannot be mapped", folder)
    for f in files:
        if f.offset % file_size:
            return Refusal(f.offset, "a file name off the queue's grid of %d-byte files" % file_size, f.path)
    if bad_unit >= 0:
        at = bad_unit * UNIT_SIZE
        path = next((f.path for f in files if f.offset <= at < f.offset + file_size), folder)
        return Refusal(at, "an empty or invalid unit inside a full consume-queue file", path)
    for a, b in zip(files, files[1:]):
        if b.offset != a.offset + file_size:
            gap = a.offset + file_size
            return Refusal(gap, "consume-queue file missing: the queue has a hole from queue offset %d"
                           % (gap // UNIT_SIZE), os.path.join(folder, "%020d" % gap))
    return None


# -- the units -------------------------------------------------------------------------------------------------

def unit_walk_start(files: int) -> int:
    """The index of the file the recovery walk starts from, of a queue of ``files`` files: the third-last."""
    return max(0, files - WALKED_FILES)


def judge_unit_walk(walked: Sequence[WalkedFile], start: int) -> UnitWalk:
    """The queue's valid end from the walk of its files from ``files[start]`` (``walked``: each file walked,
    up to the first where the valid units stop before its end). The end of a queue's units is an empty unit in
    its last file, or one torn by a crash (its size, written last, still 0), with no valid unit after it:
    one writer writes a queue's units in order, so an invalid unit in a file that is not the last, one with a
    negative offset or size (written by something else), or one with valid units after it, is damage, and
    nothing is cut (docs/format.md §8.1)."""
    if not walked:
        return UnitWalk(0)
    max_phy = -1
    end = walked[0].offset
    for f in walked:
        if f.max_phy >= 0:
            max_phy = f.max_phy
        end = f.offset + f.end
        if f.end < f.size:
            if not f.last or f.stop_phy < 0 or f.stop_size < 0 or f.followed:
                return UnitWalk(end, damage=Refusal(end, "an empty or invalid unit with units after it" if f.last
                                                    else "an empty or invalid unit inside a full consume-queue file",
                                                    f.path))
            break
    return UnitWalk(end, max_phy, max_phy < 0 and start > 0)


# -- what is done ------------------------------------------------------------------------------------------------

def repair(damage: Refusal, *, read_only: bool) -> QueueRepair:
    """A queue whose files cannot be trusted (``damage``): a writer deletes them and rebuilds the queue from the
    commit log; a reader cannot, and refuses, saying who can."""
    if read_only:
        return QueueRepair(QueueAction.REFUSE, damage.for_reader())
    return QueueRepair(QueueAction.REBUILD, damage)
