"""Consume queues: one ``consumequeue/<topic>/<queue_id>/`` log of 20-byte units per queue (docs/format.md §2,
§8.1, §8.4, §8.5; RocketMQ ``ConsumeQueue``); the table of all of them is ``queue_store.ConsumeQueueStore``.

Units are written by ``_dispatch.QueueDispatcher`` (compiled) through each queue's compiled core
(``ConsumeQueue.core``, a ``_units.ConsumeQueueCore``: what dispatch, the readers and the time search take; the
store's ``table`` maps each queue's key to it); this module holds the policy: loading the folders,
recovering each queue's valid end, cutting units that point past the commit log's end, moving the min
offset up after the commit log's head was deleted (``correctMinOffset``), deleting whole files below the
commit log's min offset, and following a live writer from a read-only store.

Whether a queue's files can be trusted (a hole between files, a file cut short or grown, an invalid unit
inside a full file or with units after it) and what is then done (a writer rebuilds the queue, a reader
refuses) is decided by ``pystore.engine.queue_damage``'s pure functions: this module reads the files, asks
them, and applies the answer.

Queue offsets count units: offset *i* is byte ``i * 20`` of the queue's logical space. ``max offset`` is
the number of units ever written; ``min offset`` the first one whose message still exists.

A queue's folders and files are created on the put path (inline dispatch, under the put lock); their names
are made durable by the queue's next flush, before it counts anything as flushed (``MappedFileQueue``,
``pystore.system.durable``: RocketMQ does not fsync directories, pystore does). Deleting a queue's files (a
damaged queue rebuilt, a queue destroyed) fsyncs the folders at once.

A queue's next file may be made ahead (``queue_store.ConsumeQueueStore.keep_ready``): ``fill_ready`` makes it
outside the queue's folder and hands it to the core, whose roll renames it in (``_units.ConsumeQueueCore``).

Thread-safety: one writer per queue (the put path under the put lock, or the dispatch/recovery thread);
readers take the copy-on-write file list.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator

from pystore.engine.queue_damage import (
    QueueFile,
    WalkedFile,
    judge_queue_files,
    judge_unit_walk,
    queue_layout,
    unit_walk_start,
    units_to_check,
)
from pystore.engine.recovery_plan import Refusal
from pystore.errors import StoreCorruptedError
from pystore.log._mapped_file import MappedFile
from pystore.log.mapped_file_queue import MappedFileQueue, destroy_now
from pystore.queue._units import (
    FILLER_SIZE,
    UNIT_SIZE,
    ConsumeQueueCore,
    first_unit_at_or_above,
    next_valid_unit,
    read_unit,
    recover_units,
    unit_at,
    units_below,
)
from pystore.system.core_field import CoreField
from pystore.system.durable import fsync_dir, sync_dirs
from pystore.system.service import Clock

__all__ = ["ConsumeQueue", "queue_id_of"]

log = logging.getLogger(__name__)

_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1


def queue_id_of(name: str) -> int | None:
    """The queue id a ``consumequeue/<topic>/<name>`` folder stands for: a Java int written as the store
    writes it (ASCII decimal, no sign but ``-``, no leading zero: the folder a queue of that id opens), else
    None (RocketMQ's ``Integer.parseInt`` fails on other names and skips the folder). The one reading of a
    queue folder's name, for the store, ``verify`` and Spark."""
    digits = name[1:] if name.startswith("-") else name
    if not digits or not digits.isascii() or not digits.isdigit() or len(digits) > 10:
        return None
    qid = int(name)
    return qid if _INT_MIN <= qid <= _INT_MAX and str(qid) == name else None


def _file_queue(folder: str, file_size: int, read_only: bool, window: int, clock: Clock | None) -> MappedFileQueue:
    """A queue's files: new ones are mapped without read-ahead (see ``MappedFileQueue.fresh_random``), with
    ``window`` bytes allocated ahead of the writer; ``clock`` times their destroys (the store's)."""
    queue = MappedFileQueue(folder, file_size, read_only=read_only, clock=clock)
    queue.fresh_random = True
    queue.window = window
    return queue


def _zero_tail(path: str, pos: int, size: int) -> None:
    """Zero ``[pos, size)`` of the file at ``path`` and sync it: units past a kept prefix, durably gone."""
    fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    try:
        zeros = bytes(min(size - pos, 1 << 20))
        at = pos
        while at < size:
            at += os.pwrite(fd, zeros[:size - at], at)
        os.fsync(fd)
    finally:
        os.close(fd)


def _walk_on_live(mf: MappedFile, pos: int, mx: int) -> tuple[int, int, bool]:
    """A reader's walk of a live writer's last queue file that stopped at ``pos`` with valid units after it: the
    unit at ``pos`` may have been written after the walk passed it and before the units after it were read (a
    writer writes a queue's units in order). Walk on from it while it moves; ``(end, max_phy, units after)``, the
    end where a unit stayed invalid (damage: nothing changed between the two reads) or the valid units ran out."""
    while True:
        end, more = recover_units(mf, pos)
        if end == pos:
            return pos, mx, True
        pos, mx = end, max(mx, more)
        if pos >= mf.file_size or next_valid_unit(mf, pos + UNIT_SIZE) < 0:
            return pos, mx, False


class ConsumeQueue:
    """One queue: its compiled core (``core``: the units' writer, the end and min offsets, the time samples),
    which compiled code takes, and the policy around it. The core's fields read and set through the queue."""

    topic: CoreField[str] = CoreField()
    topic_utf8: CoreField[bytes] = CoreField()
    queue_id: CoreField[int] = CoreField()
    file_size: CoreField[int] = CoreField()
    queue: CoreField[MappedFileQueue] = CoreField()
    last_file: CoreField[MappedFile | None] = CoreField()
    max_physic_offset: CoreField[int] = CoreField()
    min_logic_offset: CoreField[int] = CoreField()
    last_store_ts: CoreField[int] = CoreField()
    on_error: CoreField[Callable[[str], object] | None] = CoreField()
    repaired: CoreField[int] = CoreField()
    #: why ``load`` or ``recover`` did not trust the files (its path names the queue's file)
    damage: Refusal | None = None

    def __init__(self, topic: str, queue_id: int, store_path: str, file_size: int, read_only: bool = False,
                 window: int = -1, clock: Clock | None = None) -> None:
        folder = os.path.join(store_path, topic, str(queue_id))
        self.core = ConsumeQueueCore(topic, queue_id, file_size,
                                     _file_queue(folder, file_size, read_only, window, clock))
        self.folder = folder
        self.read_only = read_only
        self.window = window
        self._rolls_synced = 0      # ``core.ready_rolls`` whose renames the last flush made durable

    def __repr__(self) -> str:
        return "ConsumeQueue(%r, %d, min=%d, max=%d)" % (self.topic, self.queue_id, self.get_min_offset_in_queue(),
                                                        self.get_max_offset_in_queue())

    # -- the core's ----------------------------------------------------------------------------------

    def put_message_position_info(self, phy: int, size: int, tags_code: int, cq_offset: int) -> None:
        """Write the unit of queue offset ``cq_offset`` (the core's writer; dispatch calls it in C)."""
        self.core.put_message_position_info(phy, size, tags_code, cq_offset)

    def get_max_offset_in_queue(self) -> int:
        return self.core.get_max_offset_in_queue()

    def get_min_offset_in_queue(self) -> int:
        return self.core.get_min_offset_in_queue()

    def forget_time_samples(self) -> None:
        self.core.forget_time_samples()

    # -- loading and recovery ----------------------------------------------------------------------

    def load(self) -> bool:
        """Map the queue's files. False, with ``damage`` set, when they cannot be trusted as a whole: a file of
        another size than its neighbours (cut short or grown), a size that is not whole units, a name off the
        files' grid, an invalid unit inside a full file, or a file missing between two others (a hole). Such a
        queue is rebuilt from the commit log by a writer (``ConsumeQueueStore.load``), never read as is. What
        is read here is judged by ``pystore.engine.queue_damage`` (``queue_layout``, ``judge_queue_files``)."""
        self.damage = None
        listed = [QueueFile(p, int(os.path.basename(p)), os.path.getsize(p)) for p in self.queue.list_file_paths()]
        layout = queue_layout(listed, self.queue.mapped_file_size, self.folder)
        if layout.damage is not None:
            self.damage = layout.damage
            return False
        if layout.note is not None:
            log.log(*layout.note)
        size = self.queue.mapped_file_size = layout.file_size
        mapped = self.queue.load()
        files = [QueueFile(mf.file_name, mf.file_from_offset) for mf in self.queue.files]
        bad = -1
        if mapped:
            bad = next((i for i in units_to_check(files, size) if not unit_at(self.queue.files, size, i)), -1)
        error = self.queue.load_error
        self.damage = judge_queue_files(self.folder, files, size, mapped=mapped, bad_unit=bad,
                                        load_error=None if error is None else Refusal(error[1], error[2], error[0]))
        if self.damage is not None:
            self.queue.close()
            return False
        return True

    def discard_files(self) -> list[str]:
        """Delete every file of the queue (mapped or not: they may not have loaded); returns their paths. For a
        queue that is rebuilt from the commit log."""
        self.drop_ready()
        self.queue.close()
        paths = self.queue.list_file_paths()
        self._start_over(paths, [])
        return paths

    def _start_over(self, paths: list[str], kept: list[str]) -> None:
        """Delete the queue's files ``paths`` but ``kept`` and start it again on an empty file list (its files
        closed already)."""
        for path in paths:
            if path not in kept:
                os.unlink(path)
        # durable at once: deleted files coming back after a power cut would be the damage again; and the
        # folders this queue created but did not sync yet, which the new file list would not know about
        self.queue.pending_dirs.sync()
        sync_dirs(os.path.dirname(p) for p in paths)
        self.queue = _file_queue(self.folder, self.file_size, self.read_only, self.window, self.queue.clock)
        self.forget_time_samples()
        self.last_file = None
        self.max_physic_offset = 0
        self.min_logic_offset = 0

    def keep_units_below(self, limit: int) -> int:
        """(A writer rebuilding this queue, whose files cannot be trusted as a whole, when the commit log's head
        below ``limit`` is no longer local but in the archive.) Keep the queue's leading units whose records end
        at or below ``limit``, delete the rest; returns the queue offset where the kept units end, 0 when no
        message's unit was kept (every file deleted, as ``discard_files``).

        The re-dispatch that rebuilds the queue walks the local commit log only, so it cannot write those units
        again: without them the archived messages would be in no queue. Kept: the files in order from the first,
        each of the queue's file size and following the one before, up to the first invalid unit or the first
        unit whose record does not end at or below ``limit`` (``units_below``); the tail of the file where that
        walk stopped is zeroed and synced, later files deleted, and the queue's recovery finds the new end. The
        re-dispatch then continues the queue where the kept units end, or, if the local log's first record of
        the queue does not follow them (units lost in between), rebuilds it from nothing as before."""
        size = self.queue.mapped_file_size
        self.drop_ready()
        self.queue.close()
        paths = self.queue.list_file_paths()
        kept_paths: list[str] = []
        real = False
        end = 0
        expected = -1
        for path in paths:
            base = int(os.path.basename(path))
            if (expected >= 0 and base != expected) or base % size or os.path.getsize(path) != size:
                break
            mf = MappedFile(path, size, read_only=True, from_offset=base)
            try:
                pos, mx = units_below(mf, limit)
            finally:
                mf.close()
            if pos == 0:
                break
            kept_paths.append(path)
            real = real or mx >= 0
            end = (base + pos) // UNIT_SIZE
            if pos < size:
                _zero_tail(path, pos, size)
                break
            expected = base + size
        if not real:
            kept_paths, end = [], 0
        self._start_over(paths, kept_paths)
        if kept_paths:
            self.queue.mapped_file_size = size
            if not self.queue.load() or not self.recover():
                raise StoreCorruptedError(kept_paths[-1], 0, "the units kept below the local commit log cannot "
                                          "be loaded again")
            first = self.queue.first()
            self.min_logic_offset = first.file_from_offset if first is not None else 0
        return end

    def recover(self) -> bool:
        """Find the end of valid units (the walk of the last files), cut the rest (docs/format.md §8.1). False,
        with ``damage`` set and nothing cut, when an invalid unit is not the end of the queue's units
        (``pystore.engine.queue_damage.judge_unit_walk`` judges the walk); such a queue is rebuilt from the
        commit log (``ConsumeQueueStore``)."""
        self.forget_time_samples()
        files = self.queue.files
        if not files:
            self.last_file = None
            return True
        start = unit_walk_start(len(files))
        walked = []
        for mf in files[start:]:
            pos, mx = recover_units(mf, 0)
            last = mf is files[-1]
            if pos < mf.file_size:
                followed = next_valid_unit(mf, pos + UNIT_SIZE) >= 0
                if followed and last and self.read_only:
                    pos, mx, followed = _walk_on_live(mf, pos, mx)
                # the live walk may have reached the file's end (the writer filled it meanwhile): a whole file
                if pos < mf.file_size:
                    phy, size, _ = read_unit(mf, pos)
                    walked.append(WalkedFile(mf.file_name, mf.file_from_offset, mf.file_size, pos, mx, last, phy,
                                             size, followed))
                    break
            walked.append(WalkedFile(mf.file_name, mf.file_from_offset, mf.file_size, pos, mx, last))
        verdict = judge_unit_walk(walked, start)
        if verdict.damage is not None:
            self.damage = verdict.damage
            return False
        if verdict.max_phy >= 0:
            self.max_physic_offset = verdict.max_phy
        elif verdict.from_before:
            _, mx = recover_units(files[start - 1], 0)
            self.max_physic_offset = max(mx, 0)
        end = verdict.end
        if not self.read_only:
            self.queue.flushed_where = self.queue.committed_where = end
        self.queue.truncate_dirty_files(end)
        first = self.queue.first()
        if first is not None and self.min_logic_offset < first.file_from_offset:
            self.min_logic_offset = first.file_from_offset
        self.last_file = self.queue.last()
        return True

    def truncate_dirty_logic_files(self, phy_offset: int) -> None:
        """Drop units whose message starts at or after ``phy_offset`` (docs/format.md §8.4): whole files from the end
        while their first unit is beyond it, then the tail of the file that straddles it."""
        self.max_physic_offset = phy_offset
        self.forget_time_samples()
        while True:
            last = self.queue.last()
            if last is None:
                break
            phy, size, _ = read_unit(last, 0)
            if phy >= phy_offset and size > 0 and size != FILLER_SIZE:
                self.queue.delete_last_file()
                continue
            pos, mx = units_below(last, phy_offset)
            self.queue.truncate_dirty_files(last.file_from_offset + pos)
            if mx >= 0:
                self.max_physic_offset = mx
            break
        self.last_file = self.queue.last()
        max_logic = self.queue.get_max_offset()
        if self.min_logic_offset > max_logic:
            self.min_logic_offset = max_logic

    def correct_min_offset(self, min_commit_log_offset: int) -> None:
        """5.x ``correctMinOffset``: the min offset moves to the first unit whose message still exists; if even
        the last unit points below the commit log's min, the queue is empty from its end."""
        max_logic = self.queue.get_max_offset()
        if self.min_logic_offset >= max_logic:
            return
        last_unit = self.unit(max_logic // UNIT_SIZE - 1)
        if last_unit is not None and last_unit[0] < min_commit_log_offset and last_unit[1] != FILLER_SIZE:
            self.min_logic_offset = max_logic
            return
        files = self.queue.files
        for mf in files:
            end = mf.file_from_offset + mf.read_position
            if end <= self.min_logic_offset:
                continue
            low = max(self.min_logic_offset - mf.file_from_offset, 0)
            pos = first_unit_at_or_above(mf, low, mf.read_position, min_commit_log_offset)
            if pos < mf.read_position:
                self.min_logic_offset = mf.file_from_offset + pos
                return
        self.min_logic_offset = max_logic

    # -- reading -----------------------------------------------------------------------------------

    def unit(self, index: int) -> tuple[int, int, int] | None:
        """``(commit_log_offset, size, tags_code)`` of queue offset ``index``, or None."""
        if index < 0 or index >= self.get_max_offset_in_queue():
            return None
        return unit_at(self.queue.files, self.queue.mapped_file_size, index)

    def get_index_buffer(self, index: int) -> tuple[MappedFile, int, int] | None:
        """The file holding queue offset ``index`` and the readable byte range from it in that file."""
        offset = index * UNIT_SIZE
        if offset < self.min_logic_offset:
            return None
        mf = self.queue.find_mapped_file_by_offset(offset)
        if mf is None:
            return None
        pos = offset - mf.file_from_offset
        end = mf.read_position
        if pos >= end:
            return None
        return mf, pos, end

    def roll_next_file(self, index: int) -> int:
        units = self.queue.mapped_file_size // UNIT_SIZE
        return index + units - index % units

    def get_last_offset(self) -> int:
        """``phy + size`` of the last unit (-1 without units): what expiry of whole queues compares."""
        u = self.unit(self.get_max_offset_in_queue() - 1)
        return -1 if u is None else u[0] + u[1]

    def units(self, start: int = 0) -> Iterator[tuple[int, int, int]]:
        """Units from queue offset ``start`` to the end (fillers included)."""
        for i in range(max(start, self.get_min_offset_in_queue()), self.get_max_offset_in_queue()):
            u = self.unit(i)
            if u is None:
                return
            yield u

    # -- maintenance -------------------------------------------------------------------------------

    def flush(self, least_pages: int) -> bool:
        rolls = self.core.ready_rolls
        if rolls != self._rolls_synced:
            # a roll renamed a ready file into the folder: its name is synced before its units count
            self.queue.pending_dirs.add([self.folder])
            self._rolls_synced = rolls
        return bool(self.queue.flush(least_pages))

    # -- the next file, made ahead -----------------------------------------------------------------

    def fill_ready(self, ready_dir: str, name: Callable[[], str]) -> bool:
        """(The flush service.) Drop a ready file that no longer follows the queue's last file; make the next
        one, as ``ready_dir/name()`` (the folder made when missing), once the last is half full. True when a file
        was made."""
        last = self.queue.last()
        core = self.core
        if last is None or self.read_only:
            return False
        follows = last.file_from_offset + self.file_size
        ready = core.ready
        if ready is not None:
            if ready.file_from_offset == follows:
                return False
            self.drop_ready()
        if last.wrote_position * 2 < self.file_size:
            return False
        os.makedirs(ready_dir, exist_ok=True)
        mf = MappedFile(os.path.join(ready_dir, name()), self.file_size, create=True, from_offset=follows,
                        fresh_random=True, window=self.window)
        try:
            core.offer_ready(mf, self.queue.path_for(follows))
        except ValueError:      # made meanwhile (a user's flush beside the service's)
            destroy_now(mf, self.queue.clock())
            return False
        return True

    def drop_ready(self) -> None:
        """Delete the made-ahead file, if any (closing, and before the queue's files are deleted)."""
        ready = self.core.take_back_ready()
        if ready is not None:
            destroy_now(ready, self.queue.clock())

    def delete_expired_file(self, min_commit_log_offset: int,
                            archived: Callable[[str, int, MappedFile], bool] | None = None) -> int:
        """Drop the files whose units all point below ``min_commit_log_offset`` (with ``archived``: only those
        whose archive copy is finished) and correct the min offset."""
        keep = None if archived is None else (lambda mf: archived(self.topic, self.queue_id, mf))
        n = int(self.queue.delete_expired_file_by_offset(min_commit_log_offset, UNIT_SIZE, keep))
        self.correct_min_offset(min_commit_log_offset)
        return n

    def refresh_read_only(self, min_commit_log_offset: int = -1) -> None:
        """Read-only: map files the writer created, drop ones it deleted, and move the end to the last whole
        unit. Units are append-only, so a file is scanned from where the last refresh stopped; files seen full
        are not scanned again. With ``min_commit_log_offset``, the min offset follows the commit log's head."""
        known = {mf.file_name: mf.read_position for mf in self.queue.files}
        files = self.queue.refresh()
        for mf in files:
            start = known.get(mf.file_name, 0)
            if start >= mf.file_size:
                continue
            pos, mx = recover_units(mf, start)
            # a file with a successor was filled before it: all of it is the queue's, and an invalid unit
            # inside is damage that a read reports (never a quiet end of the file)
            mf.set_positions(pos if mf is files[-1] else mf.file_size)
            if mx >= 0:
                self.max_physic_offset = mx
        first = self.queue.first()
        if first is not None and self.min_logic_offset < first.file_from_offset:
            self.min_logic_offset = first.file_from_offset
        self.last_file = self.queue.last()
        if min_commit_log_offset >= 0:
            self.correct_min_offset(min_commit_log_offset)

    def close(self) -> None:
        self.drop_ready()
        self.queue.close()
        self.last_file = None

    def destroy(self) -> None:
        self.drop_ready()
        self.forget_time_samples()
        self.queue.destroy()
        self.last_file = None
        self.max_physic_offset = 0
        self.min_logic_offset = 0
        topic_folder = os.path.dirname(self.folder)
        try:
            os.rmdir(topic_folder)
        except OSError:
            return
        fsync_dir(os.path.dirname(topic_folder))
