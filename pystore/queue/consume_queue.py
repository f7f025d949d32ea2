"""Consume queues: one ``consumequeue/<topic>/<queue_id>/`` log of 20-byte units per queue (docs/format.md §2,
§8.1, §8.4, §8.5; RocketMQ ``ConsumeQueue``), and ``ConsumeQueueStore``, the table of all of them.

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

Thread-safety: one writer per queue (the put path under the put lock, or the dispatch/recovery thread);
readers take the copy-on-write file list. ``ConsumeQueueStore`` guards its table with a lock.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
from collections.abc import Callable, Iterator

from pystore.engine.queue_damage import (
    QueueAction,
    QueueFile,
    WalkedFile,
    judge_queue_files,
    judge_unit_walk,
    queue_layout,
    repair,
    unit_walk_start,
    units_to_check,
)
from pystore.engine.recovery_plan import Refusal
from pystore.errors import StoreCorruptedError
from pystore.log._mapped_file import MappedFile
from pystore.log.mapped_file_queue import MappedFileQueue
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

__all__ = ["ConsumeQueue", "ConsumeQueueStore", "queue_id_of"]

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
        self.queue.close()
        paths = self.queue.list_file_paths()
        for path in paths:
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
        return paths

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
                phy, size, _ = read_unit(mf, pos)
                walked.append(WalkedFile(mf.file_name, mf.file_from_offset, mf.file_size, pos, mx, last, phy, size,
                                         followed))
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
        return bool(self.queue.flush(least_pages))

    def delete_expired_file(self, min_commit_log_offset: int) -> int:
        n = int(self.queue.delete_expired_file_by_offset(min_commit_log_offset, UNIT_SIZE))
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
        self.queue.close()
        self.last_file = None

    def destroy(self) -> None:
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


class ConsumeQueueStore:
    """Every consume queue of a store, keyed by (topic, queue id)."""

    def __init__(self, store_path: str, file_size: int, read_only: bool = False,
                 on_error: Callable[[str], None] | None = None, window: int = -1, clock: Clock | None = None) -> None:
        self.store_path = store_path
        #: the store's clock, handed to each queue's files (the destroys' forcing time)
        self.clock = clock
        self.file_size = file_size
        self.read_only = read_only
        #: disk blocks allocated ahead of each queue's writer (``MappedFile(window=)``)
        self.window = window
        self.on_error = on_error
        self._queues: dict[tuple[str, int], ConsumeQueue] = {}
        #: the same keys to the queues' compiled cores (``table``), changed with ``_queues`` under the lock
        self._cores: dict[tuple[str, int], ConsumeQueueCore] = {}
        self._lock = threading.Lock()
        #: queues whose files could not be trusted, deleted to be rebuilt from the commit log (load, recover)
        self.rebuilt: list[ConsumeQueue] = []
        self.load_error: StoreCorruptedError | None = None
        #: folders skipped as not a queue id, each warned about once
        self._skipped: set[tuple[str, str]] = set()

    def __len__(self) -> int:
        return len(self._queues)

    def queues(self) -> list[ConsumeQueue]:
        return list(self._queues.values())

    def items(self) -> list[tuple[tuple[str, int], ConsumeQueue]]:
        return list(self._queues.items())

    def find(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self._queues.get((topic, queue_id))

    @property
    def table(self) -> dict[tuple[str, int], ConsumeQueueCore]:
        """The live table of the queues' compiled cores, for the compiled reader's lookups without a Python frame
        (``_queue_reader.QueueReader``) and recovery's gap walk: read it, never change it (this class adds and
        removes, under its lock)."""
        return self._cores

    def find_or_create_core(self, topic: str, queue_id: int) -> ConsumeQueueCore:
        """``find_or_create``'s queue's core: what dispatch's ``create_queue`` hands a cell (once per queue)."""
        return self.find_or_create(topic, queue_id).core

    def find_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        key = (topic, queue_id)
        cq = self._queues.get(key)
        if cq is None:
            with self._lock:
                cq = self._queues.get(key)
                if cq is None:
                    if topic in ("", ".", "..") or "/" in topic or "\0" in topic:
                        # only a damaged record can carry such a topic (puts refuse it); never let it name a
                        # folder outside consumequeue/
                        raise ValueError("topic %r cannot name a consume-queue folder" % topic)
                    cq = ConsumeQueue(topic, queue_id, self.store_path, self.file_size, self.read_only, self.window,
                                      self.clock)
                    cq.on_error = self.on_error
                    self._cores[key] = cq.core
                    self._queues[key] = cq
        return cq

    def load(self) -> bool:
        """Map every ``<topic>/<int queue id>`` folder (other names are skipped, as RocketMQ does).

        A queue whose files cannot be trusted as a whole (``ConsumeQueue.load``: a hole, a file cut short or
        grown) is not read as it is: a writer deletes its files and lists it in ``rebuilt``, and recovery
        builds it again from the commit log, the source of truth; a read-only opener cannot rebuild, so the
        open fails with ``load_error`` (a ``StoreCorruptedError`` naming the file): ``rebuild_or_refuse``."""
        self.rebuilt = []
        self.load_error = None
        for topic, qid in self._folders():
            cq = self.find_or_create(topic, qid)
            if not cq.load():
                self.load_error = self.rebuild_or_refuse(cq)
                if self.load_error is not None:
                    log.error("%s", self.load_error)
                    return False
        return True

    def rebuild_or_refuse(self, cq: ConsumeQueue, damage: Refusal | None = None) -> StoreCorruptedError | None:
        """A queue whose files cannot be trusted (``damage``, else ``cq.damage``), as ``queue_damage.repair``
        decides: a writer deletes them, to be rebuilt from the commit log (``rebuilt``); a reader cannot
        rebuild, and gets the error to refuse the store with."""
        damage = damage if damage is not None else cq.damage
        assert damage is not None
        decision = repair(damage, read_only=self.read_only)
        why = decision.why
        if decision.action is QueueAction.REFUSE:
            return StoreCorruptedError(why.path if why.path is not None else cq.folder, why.offset, why.reason)
        gone = cq.discard_files()
        log.warning("consume queue %s/%d: %s at offset %d; its %d file(s) are deleted and the queue is rebuilt from "
                    "the commit log", cq.topic, cq.queue_id, why.reason, why.offset, len(gone))
        self.rebuilt.append(cq)
        return None

    def _folders(self) -> list[tuple[str, int]]:
        """``(topic, queue id)`` of every queue folder. A name that is not a Java int (RocketMQ's
        ``Integer.parseInt`` fails) is skipped with a warning, as RocketMQ skips it."""
        found: list[tuple[str, int]] = []
        if not os.path.isdir(self.store_path):
            return found
        for topic in sorted(os.listdir(self.store_path)):
            tdir = os.path.join(self.store_path, topic)
            if not os.path.isdir(tdir):
                continue
            for qname in sorted(os.listdir(tdir)):
                qid = queue_id_of(qname)
                if qid is None:
                    if qname.lstrip("-").isdigit() and (topic, qname) not in self._skipped:
                        # once: a reader lists the folders again at every refresh
                        self._skipped.add((topic, qname))
                        log.warning("%s: not a queue id (beyond 32 bits, or not written as a store writes one); skipped",
                                    os.path.join(tdir, qname))
                    continue
                if os.path.isdir(os.path.join(tdir, qname)):
                    found.append((topic, qid))
        return found

    def recover(self) -> int:
        """Recover every queue; the highest commit-log offset any of them references (-1 if none). A queue
        whose units have a hole (``ConsumeQueue.recover``) is rebuilt like one whose files could not be
        loaded; a read-only opener refuses it (``StoreCorruptedError``)."""
        max_phy = -1
        for cq in self.queues():
            if not cq.recover():
                error = self.rebuild_or_refuse(cq)
                if error is not None:
                    raise error
            if cq.get_max_offset_in_queue() > 0:
                max_phy = max(max_phy, cq.max_physic_offset)
        return max_phy

    def truncate_dirty(self, phy_offset: int) -> list[int]:
        """Cut units pointing at or past ``phy_offset``; returns where each queue that was cut now ends (its
        records after that point, if a damaged unit rather than a crash put it there, are re-dispatched)."""
        cut = []
        for cq in self.queues():
            if cq.max_physic_offset > phy_offset:
                cq.truncate_dirty_logic_files(phy_offset)
                cut.append(cq.max_physic_offset)
        return cut

    def flush(self, least_pages: int) -> bool:
        """Flush each queue's file at its flushed position. A full flush (``least_pages`` 0: the thorough
        one, whose checkpoint claims every unit built before it began, and shutdown's) goes on file by file
        to each queue's end: RocketMQ flushes one file a call, so a queue more than a file ahead of its
        flusher had units the checkpoint claimed that no sync had written. False when a queue's flush failed
        (logged): the checkpoint must then not claim the queues."""
        ok = True
        for cq in self.queues():
            try:
                for _ in range(len(cq.queue.files) + 1 if least_pages == 0 else 1):
                    if cq.flush(least_pages):
                        break
            except OSError:
                ok = False
                log.exception("flushing consume queue %s/%d failed", cq.topic, cq.queue_id)
        return ok

    def remove(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        with self._lock:
            self._cores.pop((topic, queue_id), None)
            return self._queues.pop((topic, queue_id), None)

    def destroy_all(self) -> None:
        with self._lock:
            for cq in self._queues.values():
                cq.destroy()
            self._queues.clear()
            self._cores.clear()
        if not self.read_only:
            shutil.rmtree(self.store_path, ignore_errors=True)
            fsync_dir(os.path.dirname(os.path.abspath(self.store_path)))

    def close(self) -> None:
        with self._lock:
            for cq in self._queues.values():
                cq.close()

    def refresh_read_only(self, min_commit_log_offset: int = -1) -> None:
        self.load_new()
        for cq in self.queues():
            cq.refresh_read_only(min_commit_log_offset)

    def refresh_queue_read_only(self, topic: str, queue_id: int,
                                min_commit_log_offset: int = -1) -> ConsumeQueue | None:
        """Read-only: follow one queue (mapping it if the writer created it since)."""
        cq = self._queues.get((topic, queue_id))
        if cq is None:
            if not os.path.isdir(os.path.join(self.store_path, topic, str(queue_id))):
                return None
            cq = self.find_or_create(topic, queue_id)
            _load_live(cq)
        cq.refresh_read_only(min_commit_log_offset)
        return cq

    def load_new(self) -> None:
        """Read-only: map queues created since load (a queue whose files cannot be trusted stays unmapped)."""
        for key in self._folders():
            if key not in self._queues:
                cq = self.find_or_create(*key)
                _load_live(cq)


#: times a reader's recovery of a queue looks again at a hole with units after it
_LIVE_RECOVER_TRIES = 3


def _load_live(cq: ConsumeQueue) -> None:
    """A reader maps a queue a live writer may be filling: its recovery walks the units while the writer adds
    more, so an empty unit it stopped at may be written by the time it finds the valid ones after it (a hole,
    to a recovery that assumes nobody writes). It looks again before it leaves the queue damaged."""
    if not cq.load():
        return
    tries = _LIVE_RECOVER_TRIES
    while not cq.recover() and tries:
        tries -= 1
        cq.damage = None
