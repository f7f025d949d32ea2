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

Thread-safety: every method may be called from any thread.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable
from typing import Any

from pystore.consumer.config_json import load_config_file, offset_value, persist_config_file, read_offset_table
from pystore.errors import StoreError
from pystore.system.service import ServiceThread

__all__ = ["ConsumerOffsets", "encode_consumer_offsets", "decode_consumer_offsets", "CONSUMER_OFFSET_FILE"]

log = logging.getLogger(__name__)

CONSUMER_OFFSET_FILE = "consumerOffset.json"
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
                 read_only: bool, clock: Callable[[], int] | None = None) -> None:
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

    def load(self) -> None:
        """Read the file (or its ``.bak``); ``StoreError`` when neither is readable."""
        table = load_config_file(self.path, decode_consumer_offsets) or {}
        with self._lock:
            self._table = table
        log.debug("%s: %d topic@group entries loaded", self.path, len(table))

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        key = _check(group, topic, queue_id)
        if isinstance(offset, bool) or not isinstance(offset, int):
            raise TypeError("offset must be int, got %s" % type(offset).__name__)
        if offset < 0:
            raise ValueError("offset must be >= 0, got %d" % offset)
        if self.read_only:
            raise StoreError("a read-only store cannot commit offsets (%s)" % self.path)
        with self._lock:
            self._table.setdefault(key, {})[queue_id] = offset
            self._dirty = True

    def fetch(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, raised to the queue's min offset; -1 when the group never committed."""
        key = _check(group, topic, queue_id)
        if self.read_only:
            self._follow()
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
        """Write the table now (atomically, the previous file kept as ``.bak``)."""
        if self.read_only:
            return
        with self._persist_lock:
            with self._lock:
                text = encode_consumer_offsets({k: dict(v) for k, v in self._table.items()})
                self._dirty = False
            try:
                persist_config_file(self.path, text)
            except BaseException:
                self._dirty = True
                raise

    def _persist_if_changed(self) -> None:
        if self._dirty:
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
