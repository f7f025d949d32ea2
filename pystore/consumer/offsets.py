r"""Committed consumer offsets: ``(group, topic, queue id) -> next queue offset to consume``, kept in
``config/consumerOffset.json`` as a RocketMQ broker keeps them (``ConsumerOffsetManager``).

The file is standard JSON (keys quoted, as pystore writes ``delayOffset.json``; RocketMQ reads quoted keys too)
in fastjson's pretty layout, table keys ``topic@group``, queue ids ascending, no trailing newline::

    {
    \t"offsetTable":{
    \t\t"T@g":{"0":12,"1":5
    \t\t}
    \t}
    }

and ``{\n\t"offsetTable":{}\n}`` while empty. A broker's own file (fastjson's bare integer keys, a
``dataVersion``) is read too; reading, the ``.bak`` fallback and the atomic write are ``pystore.consumer.config_json``'s.

A writer keeps the table in memory: ``commit`` only updates it, the service thread writes the file every
``flush_consumer_offset_interval`` ms when something changed (RocketMQ's broker persists on a fixed rate too),
and ``shutdown`` writes it a last time. A crash loses at most one interval of commits: their consumers get
those messages again (at-least-once, as RocketMQ). A read-only store re-reads the file when it changed on disk
(a live writer's commits show up there once persisted) and refuses ``commit`` with ``StoreError``.

Several writer processes (``journal``): every process appends its commits to ``config/consumerOffset.journal``
(pystore's own: one JSON array ``[key, queue id, offset]`` a line, each append under an exclusive ``flock`` of the
journal), the leader too, so the journal orders every commit made since the file was last written. The leader
keeps the table and writes the file as a writer does: it applies the journal's lines in order (all of them when
it loads, as a new leader; then the new ones at each commit and fetch), and at each write of the file takes the
rest under that lock, writes the file, and empties the journal before it lets go (a commit is in the file or in
the journal, never in neither; a kill between the two leaves lines the file holds already, which applied again
in order give the same table). The others read the file and the journal's lines on top, both under the
journal's shared lock. Two processes committing one queue for one group: the later in the journal wins.

Thread-safety: every method may be called from any thread.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import threading
from collections.abc import Callable
from typing import Any

from pystore.consumer.config_json import load_config_file, offset_value, persist_config_file, read_offset_table
from pystore.errors import StoreError
from pystore.system.service import ServiceThread

__all__ = ["ConsumerOffsets", "encode_consumer_offsets", "decode_consumer_offsets", "CONSUMER_OFFSET_FILE",
           "JOURNAL_FILE"]

log = logging.getLogger(__name__)

CONSUMER_OFFSET_FILE = "consumerOffset.json"
#: several writers: the commits of the processes that do not lead, until the leader writes them into the file
JOURNAL_FILE = "consumerOffset.journal"
#: RocketMQ's ``TOPIC_GROUP_SEPARATOR``: a topic name cannot hold it, so the key splits at its first one
SEPARATOR = "@"

#: ``topic@group -> {queue id: offset}``
OffsetTable = dict[str, dict[int, int]]


def encode_consumer_offsets(table: OffsetTable) -> str:
    """``consumerOffset.json``'s text for ``table`` (see the module docstring)."""
    if not table:
        return '{\n\t"offsetTable":{}\n}'
    entries = ",".join(
        "\n\t\t%s:{%s\n\t\t}" % (_quoted(key), ",".join('"%d":%d' % item for item in sorted(queues.items())))
        for key, queues in sorted(table.items()))
    return '{\n\t"offsetTable":{' + entries + "\n\t}\n}"


def _quoted(key: str) -> str:
    return json.dumps(key, ensure_ascii=False)


def decode_consumer_offsets(text: str) -> OffsetTable:
    """The ``offsetTable`` of a ``consumerOffset.json``; ValueError if the text is not one."""
    out: OffsetTable = {}
    for key, queues in read_offset_table(text).items():
        if not isinstance(queues, dict):
            raise ValueError("offsets of %s are not an object" % key)
        out[key] = {int(qid): offset_value(value, "%s queue %s" % (key, qid)) for qid, value in queues.items()}
    return out


def _check(group: Any, topic: Any, queue_id: Any) -> str:
    if not isinstance(group, str):
        raise TypeError("group must be str, got %s" % type(group).__name__)
    if not isinstance(topic, str):
        raise TypeError("topic must be str, got %s" % type(topic).__name__)
    if isinstance(queue_id, bool) or not isinstance(queue_id, int):
        raise TypeError("queue_id must be int, got %s" % type(queue_id).__name__)
    if not group or not topic:
        raise ValueError("group and topic must not be empty")
    if SEPARATOR in topic:
        raise ValueError("a topic cannot contain %r: %r" % (SEPARATOR, topic))
    if queue_id < 0:
        raise ValueError("queue_id must be >= 0, got %d" % queue_id)
    return topic + SEPARATOR + group


class ConsumerOffsets(ServiceThread):
    """The offset table of one store (see the module docstring). ``min_offset(topic, queue_id)`` is the
    queue's min offset: a committed offset below it reads as it (the messages there were cleaned)."""

    def __init__(self, config_dir: str, interval_ms: int, min_offset: Callable[[str, int], int], *,
                 read_only: bool, clock: Callable[[], int] | None = None, journal: bool = False) -> None:
        super().__init__("ConsumerOffsetService", clock)
        self.path = os.path.join(config_dir, CONSUMER_OFFSET_FILE)
        self.interval_ms = interval_ms
        self.read_only = read_only
        self._min_offset = min_offset
        self._table: OffsetTable = {}
        self._lock = threading.Lock()
        self._persist_lock = threading.Lock()
        self._dirty = False
        #: a reader's view of the file it last read: (inode, size, mtime), None before any
        self._seen: tuple[int, int, int] | None = None
        self._next_persist = 0
        #: several writers: the journal's path, and how far the leader applied it
        self.journal = os.path.join(config_dir, JOURNAL_FILE) if journal else None
        self._journal_pos = 0

    def load(self) -> None:
        """Read the file (or its ``.bak``); ``StoreError`` when neither is readable."""
        table = load_config_file(self.path, decode_consumer_offsets) or {}
        with self._lock:
            self._table = table
            self._journal_pos = 0
        log.debug("%s: %d topic@group entries loaded", self.path, len(table))
        if not self.read_only and self.journal is not None:
            # a new leader: the journal's lines now, before any commit of its own can be applied under them
            with _JournalLock(self.journal, fcntl.LOCK_SH) as fd:
                assert fd is not None
                self._apply_journal(fd)
        leftover = os.path.join(os.path.dirname(self.path), JOURNAL_FILE)
        if not self.read_only and self.journal is None and os.path.exists(leftover):
            # several writers' commits that no leader wrote into the file: taken in now, then the journal goes
            self.journal = leftover
            try:
                self.persist()
            finally:
                self.journal = None
            os.unlink(leftover)

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        key = _check(group, topic, queue_id)
        if isinstance(offset, bool) or not isinstance(offset, int):
            raise TypeError("offset must be int, got %s" % type(offset).__name__)
        if offset < 0:
            raise ValueError("offset must be >= 0, got %d" % offset)
        if self.journal is not None:
            # every process, the leader too: the journal then orders all commits since the file was last written,
            # so a follower reads the leader's at once and a new leader (or one whose write of the file a kill cut
            # short) applies each line over the file in that order, never an older commit over a newer one
            with _JournalLock(self.journal, fcntl.LOCK_EX) as fd:
                assert fd is not None
                os.write(fd, _journal_line(key, queue_id, offset))
                if not self.read_only:
                    self._apply_journal(fd)
            return
        if self.read_only:
            raise StoreError("a read-only store cannot commit offsets (%s)" % self.path)
        with self._lock:
            self._table.setdefault(key, {})[queue_id] = offset
            self._dirty = True

    def fetch(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, raised to the queue's min offset; -1 when the group never committed."""
        key = _check(group, topic, queue_id)
        offset = -1
        if self.journal is not None:
            offset = self._journal_offset(key, queue_id)
        elif self.read_only:
            self._follow()
        if offset < 0:
            with self._lock:
                offset = self._table.get(key, {}).get(queue_id, -1)
        if offset < 0:
            return -1
        return max(offset, self._min_offset(topic, queue_id))

    def _follow(self) -> None:
        """A reader: load the file again if it changed since the last read (a writer replaces it whole)."""
        try:
            st = os.stat(self.path)
            seen: tuple[int, int, int] | None = (st.st_ino, st.st_size, st.st_mtime_ns)
        except FileNotFoundError:
            seen = None
        if seen != self._seen or seen is None:
            self.load()
            self._seen = seen

    def persist(self) -> None:
        """Write the table now (atomically, the previous file kept as ``.bak``); with a journal, its lines first,
        and the journal emptied once the file holds them."""
        if self.read_only:
            return
        with self._persist_lock, _JournalLock(self.journal, fcntl.LOCK_EX) as fd:
            if fd is not None:
                self._apply_journal(fd)
            with self._lock:
                text = encode_consumer_offsets({k: dict(v) for k, v in self._table.items()})
                self._dirty = False
            try:
                persist_config_file(self.path, text)
            except BaseException:
                self._dirty = True
                raise
            if fd is not None:
                os.ftruncate(fd, 0)
                self._journal_pos = 0

    def _journal_offset(self, key: str, queue_id: int) -> int:
        """Several writers: the leader applies the journal's new lines to its table (-1: look there); another
        writer answers from the journal's last line for the queue, if any."""
        with _JournalLock(self.journal, fcntl.LOCK_SH) as fd:
            if fd is None:
                return -1
            if not self.read_only:
                self._apply_journal(fd)
                return -1
            # the file read under the journal's lock too: the leader writes the file and empties the journal
            # under it, so the two are read as one state, never the old file beside the emptied journal
            self._follow()
            found = -1
            for k, qid, offset in _journal_lines(fd, 0)[0]:
                if k == key and qid == queue_id:
                    found = offset
            return found

    def _apply_journal(self, fd: int) -> None:
        lines, self._journal_pos = _journal_lines(fd, self._journal_pos)
        if lines:
            with self._lock:
                for key, qid, offset in lines:
                    self._table.setdefault(key, {})[qid] = offset
                self._dirty = True

    def _persist_if_changed(self) -> None:
        if self._dirty or (self.journal is not None and os.path.exists(self.journal)
                           and os.path.getsize(self.journal) > self._journal_pos):
            try:
                self.persist()
            except OSError:
                log.exception("%s: persisting consumer offsets failed", self.path)

    def start(self) -> None:
        self._next_persist = self.clock() + self.interval_ms
        super().start()

    def run(self) -> None:
        while not self.is_stopped():
            # the clock decides (a test's fake clock too); re-read at least every second, as every policy loop
            self.wait_for_running(min(max(self._next_persist - self.clock(), 1), 1000))
            now = self.clock()
            if now >= self._next_persist and not self.is_stopped():
                self._next_persist = now + self.interval_ms
                self._persist_if_changed()

    def shutdown(self, join: bool = True) -> None:
        """Stop the thread and write what changed since the last write."""
        super().shutdown(join)
        self._persist_if_changed()


class _JournalLock:
    """The journal (created when missing) opened and ``flock``-ed for a block: its fd, or None without one."""

    def __init__(self, path: str | None, mode: int) -> None:
        self.path, self.mode, self.fd = path, mode, -1

    def __enter__(self) -> int | None:
        if self.path is None:
            return None
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        fcntl.flock(self.fd, self.mode)
        return self.fd

    def __exit__(self, *exc: object) -> None:
        if self.fd >= 0:
            os.close(self.fd)       # drops the flock


def _journal_line(key: str, queue_id: int, offset: int) -> bytes:
    return (json.dumps([key, queue_id, offset], ensure_ascii=False) + "\n").encode("utf-8")


def _journal_lines(fd: int, start: int) -> tuple[list[tuple[str, int, int]], int]:
    """The whole lines of the journal from byte ``start`` and where they end (a line cut by a killed writer,
    or one that does not parse, is skipped with a warning)."""
    size = os.fstat(fd).st_size
    if size <= start:
        return [], min(start, size)
    data = os.pread(fd, size - start, start)
    end = data.rfind(b"\n") + 1
    out = []
    for raw in data[:end].split(b"\n")[:-1]:
        try:
            key, qid, offset = json.loads(raw)
            if isinstance(key, str) and type(qid) is int and type(offset) is int and qid >= 0 and offset >= 0:
                out.append((key, qid, offset))
                continue
        except ValueError:
            pass
        log.warning("consumer offsets' journal: a line that is not a commit was skipped: %r", raw[:200])
    return out, start + end
