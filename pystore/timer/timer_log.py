"""The timer log: RocketMQ 5's ``timerlog/`` folder, the append-only list of timer units that the timer wheel's slots
point into (RocketMQ ``org.apache.rocketmq.store.timer.TimerLog``: ``append``, ``getOffsetForLastUnit``; the unit is
built by ``TimerMessageStore.doEnqueue``, recovered by ``TimerMessageStore.recover``/``recoverAndRevise`` and its head
cleaned by ``MappedFileQueue.deleteExpiredFileByOffsetForTimerLog``).

The folder is a log of equal-size mapped files named by their 20-digit base offset, like the commit log
(``mapped_file_size_timer_log``, 100 MiB by default). Positions are absolute offsets in that log. A unit is 52 bytes,
big-endian (Java's ``ByteBuffer``)::

    0     4        12      16            24      28               36       40              44         52
    | size | prevPos | magic | writeTimeMs | delay | commitLogOffset | msgSize | realTopicHash | reserved |
      i32     i64      i32      i64          i32        i64            i32          i32          i64
      =52   -1 or an  1|2|4   the wheel's   delayed                              Java String   0
            earlier   bits    write time    time -                               .hashCode of
            unit of                         write time                           the real topic
            the slot

``prevPos`` links the units of one wheel slot backwards (the slot keeps ``lastPos``; -1 ends the list). ``magic`` is
``MAGIC_DEFAULT`` (1), or'ed with ``MAGIC_ROLL`` (2: the message is re-put to the timer topic, its delivery is past
the roll window) and ``MAGIC_DELETE`` (4: a delete marker for the message of ``TIMER_DEL_UNIQKEY``).

A unit never straddles two files. ``append`` keeps room for a 16-byte blank at the end of every file: when a unit
and a blank no longer fit (``52 + 16 > file size - write position``) it writes the blank and starts the next file::

    ... | unit | unit | size=remaining i32 | prevPos=0 i64 | magic=BLANK_MAGIC_CODE i32 | zeros ... |  next file
                      `-- the blank: the last (file size - write position) bytes of the file ---------'

``BLANK_MAGIC_CODE`` is Java's ``0xBBCCDDEE ^ 1880681586 + 8``; ``+`` binds first, so it is
``0xBBCCDDEE ^ 1880681594`` = ``0xCBD43194`` (-875286124 as an int). RocketMQ writes only the 16 bytes of the blank;
the rest of the file is zeros in a file it created, and pystore writes those zeros explicitly (a truncated file is
zeroed from the cut, so the bytes are RocketMQ's either way).

Recovery (``TimerMessageStore.recoverAndRevise(checkTimerLog=true)``) scans from the file holding the checkpoint's
``lastTimerLogFlushPos`` minus one file size, 52 bytes at a time: a blank ends a file, and the log there goes on at
the next file's start (RocketMQ's ``position + size``; the scan goes on with the next file, if there is one: a full
file whose next one never reached the disk is whole, and the next append makes that file; pystore checks that the
blank's size reaches the file's end, else it is damage),
a unit whose size is not 52 or whose magic is not within 0xF ends the log, and the log is cut there (later files
deleted, the cut file zeroed from the cut). Each whole unit found is handed to ``on_unit`` (RocketMQ revises the
wheel slot of its delayed time: ``reviseSlot(delayedTime, IGNORE, pos, true)``). pystore is stricter about what a
whole unit is, so that a unit torn by a crash (its header on disk, the rest of its page not) is cut too: its magic
must have ``MAGIC_DEFAULT`` (every unit RocketMQ writes does), its ``prevPos`` must be -1 or an earlier position
and its ``msgSize`` positive; and the timer store cuts the log at the first unit whose message lies past the
commit log's end (a power cut kept the unit and took its record back; the units are in commit-log order). A cut
below what the checkpoint says was flushed is damage and is refused.

Reads are checked: a unit whose size is not 52, whose magic is wrong, whose ``prevPos`` points forward (or to
itself) or past the written log, or a position that is not a unit's, raises ``StoreCorruptedError`` with the file
and the absolute offset. A backward walk is bounded by the number of units in the log. A ``prevPos`` below the log's
first file ends the walk (RocketMQ's ``getWholeBuffer`` finds no file and stops: the head was cleaned because the
commit log no longer holds those messages).
"""

from __future__ import annotations

import logging
import os
import struct
import threading
from collections.abc import Callable, Iterator
from typing import NamedTuple

from pystore.errors import ConfigError, StoreCorruptedError
from pystore.format._jstring import java_string_hash
from pystore.log._mapped_file import MappedFile
from pystore.log.mapped_file_queue import MappedFileQueue

__all__ = [
    "UNIT_SIZE", "MIN_BLANK_LEN", "UNIT_PRE_SIZE_FOR_MSG", "UNIT_PRE_SIZE_FOR_METRIC", "BLANK_MAGIC_CODE",
    "MAGIC_DEFAULT", "MAGIC_ROLL", "MAGIC_DELETE", "DEFAULT_FILE_SIZE", "TimerUnit", "TimerLog",
    "encode_unit", "is_magic_ok", "topic_hash", "offset_for_last_unit",
]

log = logging.getLogger(__name__)

#: ``TimerLog.UNIT_SIZE``
UNIT_SIZE = 52
#: ``TimerLog.MIN_BLANK_LEN``: size, prevPos and magic of the blank that ends a file
MIN_BLANK_LEN = 16
#: where commitLogOffset and msgSize start in a unit (``TimerLog.UNIT_PRE_SIZE_FOR_MSG``)
UNIT_PRE_SIZE_FOR_MSG = 28
#: where realTopicHash starts (``TimerLog.UNIT_PRE_SIZE_FOR_METRIC``)
UNIT_PRE_SIZE_FOR_METRIC = 40
#: ``TimerLog.BLANK_MAGIC_CODE`` = ``0xBBCCDDEE ^ (1880681586 + 8)`` as a Java int
BLANK_MAGIC_CODE = -875286124
#: ``TimerMessageStore.MAGIC_DEFAULT``, ``MAGIC_ROLL``, ``MAGIC_DELETE``
MAGIC_DEFAULT = 1
MAGIC_ROLL = 1 << 1
MAGIC_DELETE = 1 << 2
#: ``MessageStoreConfig.mappedFileSizeTimerLog``
DEFAULT_FILE_SIZE = 100 * 1024 * 1024

_UNIT = struct.Struct(">iqiqiqiiq")
_BLANK = struct.Struct(">iqi")
_HEAD = struct.Struct(">iqi")
_MAX_I32 = (1 << 31) - 1
_SCAN_CHUNK = UNIT_SIZE * 20164           # about 1 MiB of units per read during recovery
_ZEROS = "no unit written there (zeros)"    # the normal end of the log

assert _UNIT.size == UNIT_SIZE and _BLANK.size == MIN_BLANK_LEN


class TimerUnit(NamedTuple):
    """One 52-byte unit, field by field."""

    size: int
    prev_pos: int
    magic: int
    write_time_ms: int
    delay_ms: int
    commit_log_offset: int
    msg_size: int
    real_topic_hash: int
    reserved: int = 0

    @property
    def delayed_time_ms(self) -> int:
        """When the message is due (``writeTimeMs + delay``): the time of the slot it is linked in."""
        return self.write_time_ms + self.delay_ms

    def encode(self) -> bytes:
        return _UNIT.pack(*self)


def is_magic_ok(magic: int) -> bool:
    """``TimerMessageStore.isMagicOK``: no bit outside 0xF (0 passes: RocketMQ's own rule)."""
    return (magic | 0xF) == 0xF


def _whole_magic(magic: int) -> bool:
    # what a unit RocketMQ writes always carries: MAGIC_DEFAULT, and nothing outside 0xF
    return is_magic_ok(magic) and magic & MAGIC_DEFAULT != 0


def topic_hash(topic: str | None) -> int:
    """``TimerMessageStore.hashTopicForMetrics``: Java's ``String.hashCode`` of the real topic, 0 for none."""
    return 0 if topic is None else java_string_hash(topic)


def offset_for_last_unit(file_size: int) -> int:
    """``TimerLog.getOffsetForLastUnit``: the position of the last unit a full file holds (the cleaning reads the
    commit-log offset there)."""
    return file_size - (file_size - MIN_BLANK_LEN) % UNIT_SIZE - MIN_BLANK_LEN - UNIT_SIZE


def encode_unit(prev_pos: int, magic: int, write_time_ms: int, delayed_time_ms: int, commit_log_offset: int,
                msg_size: int, real_topic_hash: int, reserved: int = 0) -> bytes:
    """The unit ``TimerMessageStore.doEnqueue`` writes: ``prev_pos`` is the slot's lastPos (-1 for an empty slot),
    the delay is stored as ``delayed_time_ms - write_time_ms`` (an int)."""
    delay = delayed_time_ms - write_time_ms
    if not -_MAX_I32 - 1 <= delay <= _MAX_I32:
        raise ValueError("delay %d ms does not fit the unit's 32-bit field" % delay)
    return _UNIT.pack(UNIT_SIZE, prev_pos, magic, write_time_ms, delay, commit_log_offset, msg_size,
                      real_topic_hash, reserved)


class TimerLog:
    """The ``timerlog/`` folder.

    ``TimerLog(store_path, file_size=DEFAULT_FILE_SIZE, read_only=False)`` maps nothing yet: ``load()`` then
    ``recover(...)``, or ``TimerLog.open(...)`` for both. ``append(unit) -> position``, ``read_unit(position)``,
    ``walk(last_pos)`` (a slot's list, newest first), ``flush()``, ``delete_files_before(offset)``,
    ``delete_expired(min_commit_log_offset)``, ``close()``.

    One thread appends (RocketMQ's enqueue-put service); reads may run beside it (the file list is copy-on-write).
    """

    def __init__(self, store_path: str, file_size: int = DEFAULT_FILE_SIZE, read_only: bool = False) -> None:
        if file_size < UNIT_SIZE + MIN_BLANK_LEN:
            raise ConfigError("mapped_file_size_timer_log", file_size,
                              "a timer log file must hold a unit and a blank (%d bytes)" % (UNIT_SIZE + MIN_BLANK_LEN))
        self.store_path = store_path
        self.file_size = file_size
        self.read_only = read_only
        self.queue = MappedFileQueue(store_path, file_size, read_only=read_only)
        self._lock = threading.Lock()

    @classmethod
    def open(cls, store_path: str, file_size: int = DEFAULT_FILE_SIZE, last_flush_pos: int = 0,
             on_unit: Callable[[int, TimerUnit], None] | None = None, read_only: bool = False,
             valid: Callable[[TimerUnit], str | None] | None = None) -> TimerLog:
        """Load the folder and recover it as ``TimerMessageStore.recover`` does: the scan starts one file before the
        checkpoint's ``lastTimerLogFlushPos``; a cut below ``last_flush_pos`` is refused."""
        tl = cls(store_path, file_size, read_only)
        tl.load()
        try:
            tl.recover(max(0, last_flush_pos - file_size), on_unit=on_unit, flushed_pos=last_flush_pos, valid=valid)
        except BaseException:
            tl.close()
            raise
        return tl

    # -- loading and recovery ----------------------------------------------------------------------

    def load(self) -> None:
        """Map every file (each exactly ``file_size`` bytes; a short one, never flushed, is extended with zeros for
        recovery to judge). Raises ``StoreCorruptedError`` for a file of another size."""
        if not self.queue.load(pad_short=not self.read_only):
            path, offset, reason = self.queue.load_error or (self.store_path, 0, "the timer log cannot be loaded")
            raise StoreCorruptedError(path, offset, reason)

    def recover(self, begin_offset: int = 0, on_unit: Callable[[int, TimerUnit], None] | None = None,
                check: bool = True, flushed_pos: int = -1,
                valid: Callable[[TimerUnit], str | None] | None = None) -> int:
        """Find the end of the log and return it (``recoverAndRevise``). The scan starts at the file holding
        ``begin_offset`` (the first file if none does) and calls ``on_unit(position, unit)`` for every whole unit.
        ``valid(unit)``, when given, says why a whole unit cannot be kept (None: it can), and such a unit counts as
        not whole (pystore's: the timer store passes one that refuses a unit whose message lies past the commit
        log's end, which a crash took back).

        ``check=True`` (RocketMQ's first pass, ``checkTimerLog``): whole files are scanned, the first unit that is
        not whole ends the log, which is cut there; a cut below ``flushed_pos`` raises ``StoreCorruptedError``
        and cuts nothing. ``check=False`` (the second pass, from the wheel's smallest firstPos past the end): only
        the written part of each file is scanned, units that are not whole are skipped, nothing is cut."""
        with self._lock:
            files = self.queue.files
            if not files:
                return 0
            index = len(files) - 1
            while index > 0 and begin_offset < files[index].file_from_offset:
                index -= 1
            end = files[index].file_from_offset
            damage: tuple[str, int, str] | None = None
            for mf in files[index:]:
                pos, damage = self._scan_file(mf, on_unit, check, valid)
                end = mf.file_from_offset + pos
                if damage is not None:
                    break
            if check:
                if end < flushed_pos:
                    path, offset, reason = damage or (self.path_for(end), end, "the timer log ends early")
                    raise StoreCorruptedError(path, offset, "%s, below the flushed position %d" % (reason, flushed_pos))
                if damage is not None and damage[2] != _ZEROS:
                    log.warning("timer log cut at %d: %s in %s", end, damage[2], damage[0])
                self.queue.truncate_dirty_files(end)        # a reader's view only narrows
                # the files were loaded as flushed to their ends, but past the checkpoint's flushed position the
                # units may be pages a killed writer left dirty: synced now, or the next checkpoint would count
                # them durable unsynced, and a power cut then would leave zeros below its flushed position
                self._sync_tail(max(flushed_pos, files[index].file_from_offset), end)
                self.queue.flushed_where = self.queue.committed_where = end
            return end

    def _sync_tail(self, start: int, end: int) -> None:
        """Sync ``[start, end)`` of the log (``OSError`` when a sync fails: the store is not opened)."""
        for mf in self.queue.files:
            lo, hi = mf.file_from_offset, mf.file_from_offset + mf.file_size
            if hi <= start or lo >= end:
                continue
            mf.unflush_from(max(0, start - lo))
            mf.flush(0)

    def _scan_file(self, mf: MappedFile, on_unit: Callable[[int, TimerUnit], None] | None, check: bool,
                   valid: Callable[[TimerUnit], str | None] | None = None) -> tuple[int, tuple[str, int, str] | None]:
        """Scan one file: (where the log goes on after its units: the file's size when a blank closes it; why the
        log ends there, or None when a blank closes the file or it is whole)."""
        limit = mf.file_size if check else mf.read_position
        base = mf.file_from_offset
        pos = 0
        while pos < limit:
            chunk = mf.read_any(pos, min(_SCAN_CHUNK, limit - pos))
            at = 0
            while at < len(chunk):
                here = base + pos + at
                if len(chunk) - at < MIN_BLANK_LEN:
                    return pos + at, (mf.file_name, here, "a truncated unit")
                size, prev, magic = _HEAD.unpack_from(chunk, at)
                if magic == BLANK_MAGIC_CODE:
                    # the blank closes its file: the log goes on at the next file's start (RocketMQ's
                    # ``position + size``), which is where a flush of the whole file puts the flushed position
                    if size == mf.file_size - (pos + at):
                        return mf.file_size, None
                    if check:
                        return pos + at, (mf.file_name, here, "a blank of %d bytes where %d remain in the file"
                                          % (size, mf.file_size - (pos + at)))
                    return pos + at, None
                whole = len(chunk) - at >= UNIT_SIZE
                unit = TimerUnit._make(_UNIT.unpack_from(chunk, at)) if whole else None
                reason = _unit_problem(unit, here) if unit is not None else "a truncated unit"
                if reason is None and valid is not None and unit is not None:
                    reason = valid(unit)
                if reason is not None:
                    if check:
                        return pos + at, (mf.file_name, here, _ZEROS if not any(chunk[at:at + UNIT_SIZE]) else reason)
                elif on_unit is not None and unit is not None:
                    on_unit(here, unit)
                at += UNIT_SIZE
            pos += len(chunk)
        return pos, None

    # -- appending ---------------------------------------------------------------------------------

    def append(self, unit: bytes) -> int:
        """Append one 52-byte unit (``encode_unit``); its absolute position. A unit that does not fit with a blank
        after it goes to a new file, the blank written first (``TimerLog.append``). Raises ``OSError`` when no file
        can be created and ``ValueError`` for bytes that are not a unit or a ``prevPos`` that is not before it."""
        if len(unit) != UNIT_SIZE:
            raise ValueError("a timer unit is %d bytes, got %d" % (UNIT_SIZE, len(unit)))
        size, prev, magic = _HEAD.unpack_from(unit)
        if size != UNIT_SIZE or not _whole_magic(magic):
            raise ValueError("not a timer unit: size %d, magic %d" % (size, magic))
        with self._lock:
            mf = self.writable_tail()
            position = mf.file_from_offset + mf.wrote_position
            if prev != -1 and not 0 <= prev < position:
                raise ValueError("prevPos %d is not before the unit's position %d" % (prev, position))
            if not mf.append_message(unit):
                raise OSError("cannot append to %s" % mf.file_name)
            return position

    @property
    def append_lock(self) -> threading.Lock:
        """Held by ``append``, and by the compiled enqueue (``pystore.timer._enqueue``) while it appends."""
        return self._lock

    def last_file(self) -> MappedFile | None:
        """The log's last file as it is (None when it has none): where the compiled enqueue appends."""
        return self.queue.last()

    def writable_tail(self) -> MappedFile:
        """The file the next unit goes to, the caller holding ``append_lock``: the last file, or a new one when
        there is none, or, when a unit and the blank after it no longer fit the last one, the next one once the
        blank is written (``TimerLog.append``'s roll). Raises ``OSError`` when no file can be created."""
        mf = self.queue.get_last_mapped_file(0)
        if mf is None:
            raise OSError("cannot create a timer log file in %s" % self.store_path)
        room = self.file_size - mf.wrote_position
        if UNIT_SIZE + MIN_BLANK_LEN > room:
            blank = _BLANK.pack(room, 0, BLANK_MAGIC_CODE) + bytes(room - MIN_BLANK_LEN)
            if not mf.append_message(blank):
                raise OSError("cannot write the blank at the end of %s" % mf.file_name)
            mf = self.queue.get_last_mapped_file(0)
            if mf is None:
                raise OSError("cannot create a timer log file in %s" % self.store_path)
        return mf

    # -- reading -----------------------------------------------------------------------------------

    @property
    def min_offset(self) -> int:
        """The first position the log still holds (its first file's name), 0 when it has no file."""
        return max(0, self.queue.get_min_offset())

    @property
    def max_offset(self) -> int:
        """The end of the written log: the next unit goes here (or to the next file)."""
        return self.queue.get_max_offset()

    @property
    def flushed_where(self) -> int:
        return self.queue.flushed_where

    def path_for(self, position: int) -> str:
        """The file that holds (or would hold) ``position``."""
        return self.queue.path_for(position - position % self.file_size)

    def read_unit(self, position: int) -> TimerUnit:
        """The unit at ``position``, checked: ``StoreCorruptedError`` if no unit of the written log starts there
        or its bytes are not a whole unit."""
        mf = self.queue.find_mapped_file_by_offset(position)
        if mf is None or position < 0:
            raise StoreCorruptedError(self.path_for(max(position, 0)), position,
                                      "no timer log file holds this position (log [%d, %d))" % (self.min_offset,
                                                                                                 self.max_offset))
        rel = position - mf.file_from_offset
        if rel % UNIT_SIZE != 0:
            raise StoreCorruptedError(mf.file_name, position, "not a timer unit's position (not a multiple of %d "
                                      "from the file's start)" % UNIT_SIZE)
        if rel + UNIT_SIZE > mf.read_position:
            raise StoreCorruptedError(mf.file_name, position, "past the written timer log (ends at %d)" % self.max_offset)
        unit = TimerUnit._make(_UNIT.unpack(mf.read_any(rel, UNIT_SIZE)))
        reason = _unit_problem(unit, position)
        if reason is not None:
            raise StoreCorruptedError(mf.file_name, position, reason)
        return unit

    def walk(self, last_pos: int, slot_time_ms: int | None = None, precision_ms: int = 1000
             ) -> Iterator[tuple[int, TimerUnit]]:
        """A slot's units, newest first, from its ``lastPos`` back through the ``prevPos`` links: (position, unit)
        pairs. Ends at -1 or at a link below the log's first file (a cleaned head). With ``slot_time_ms``, a unit
        whose delayed time is in another slot is damage. At most as many steps as the log holds units; every
        damage raises ``StoreCorruptedError`` (file, absolute offset)."""
        end = self.max_offset
        if last_pos >= end:
            raise StoreCorruptedError(self.path_for(last_pos), last_pos,
                                      "a slot's lastPos is past the timer log's end %d" % end)
        steps = (end - self.min_offset) // UNIT_SIZE + 1
        pos = last_pos
        want = None if slot_time_ms is None else slot_time_ms // precision_ms
        while pos != -1:
            if pos < -1:
                raise StoreCorruptedError(self.path_for(0), pos, "a negative timer log position")
            if pos < self.min_offset:
                log.debug("timer slot list reaches %d, below the log's first file %d: ends there", pos, self.min_offset)
                return
            if steps <= 0:
                raise StoreCorruptedError(self.path_for(pos), pos, "the slot's list is longer than the timer log")
            steps -= 1
            unit = self.read_unit(pos)
            if want is not None and unit.delayed_time_ms // precision_ms != want:
                raise StoreCorruptedError(self.path_for(pos), pos, "a unit due at %d in the list of the slot of %d"
                                          % (unit.delayed_time_ms, want * precision_ms))
            yield pos, unit
            pos = unit.prev_pos

    # -- flushing, cleaning, closing ---------------------------------------------------------------

    def flush(self) -> int:
        """Force what was appended to disk (every file behind the writer); the flushed position."""
        for _ in range(len(self.queue) + 1):
            if self.queue.flush(0):
                break
        return self.queue.flushed_where

    def delete_files_before(self, offset: int) -> int:
        """Delete the files that end at or before ``offset`` (never the last file); how many were deleted."""
        with self._lock:
            gone = [f for f in self.queue.files[:-1] if f.file_from_offset + self.file_size <= offset]
            return self._delete(gone)

    def delete_expired(self, min_commit_log_offset: int) -> int:
        """``deleteExpiredFileByOffsetForTimerLog``: delete files from the head (never the last) while the unit at
        ``offset_for_last_unit`` of the file points below ``min_commit_log_offset`` in the commit log; stop at the
        first file that does not, or whose last unit is not whole."""
        check = offset_for_last_unit(self.file_size)
        with self._lock:
            gone: list[MappedFile] = []
            for f in self.queue.files[:-1]:
                unit = TimerUnit._make(_UNIT.unpack(f.read_any(check, UNIT_SIZE)))
                if unit.size != UNIT_SIZE or not is_magic_ok(unit.magic):
                    log.warning("found error data in %s at %d: its last unit is not whole", f.file_name, check)
                    break
                if unit.commit_log_offset >= min_commit_log_offset:
                    break
                log.info("timer log file %s: its last unit points to %d, below the commit log's %d: deleting",
                         f.file_name, unit.commit_log_offset, min_commit_log_offset)
                gone.append(f)
            return self._delete(gone)

    def _delete(self, gone: list[MappedFile]) -> int:
        if self.read_only:
            return 0
        done = []
        for f in gone:
            if not f.destroy(60_000, self.queue.clock()):
                break
            done.append(f)
        # the queue's own bookkeeping: drop them from the list and make the unlinking durable
        self.queue._remove(done)
        return len(done)

    def close(self) -> None:
        """Unmap every file (nothing is flushed: ``flush`` first)."""
        self.queue.close()

    def __repr__(self) -> str:
        return "TimerLog(%r, [%d, %d))" % (os.path.basename(self.store_path), self.min_offset, self.max_offset)


def _unit_problem(unit: TimerUnit, position: int) -> str | None:
    """Why the bytes at ``position`` are not a whole unit, or None."""
    if unit.size != UNIT_SIZE:
        return "a timer unit of size %d (expected %d)" % (unit.size, UNIT_SIZE)
    if not _whole_magic(unit.magic):
        return "a timer unit of magic %d" % unit.magic
    if unit.prev_pos != -1 and not 0 <= unit.prev_pos < position:
        return "a timer unit whose prevPos %d is not before it" % unit.prev_pos
    if unit.msg_size <= 0:
        return "a timer unit of message size %d" % unit.msg_size
    return None
