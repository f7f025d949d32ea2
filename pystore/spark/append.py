"""The driver half of a write: append staged Arrow IPC files to a store through its put path.

Runs in the driver's commit step (one process): opens the store with ``MessageStore.open(root,
**config)`` (a writer: it takes the store lock, creates a new store, keeps an existing store's geometry),
groups the rows of each staged record batch by topic and queue (their order within a queue kept) and
stores each run of rows of one topic and queue without properties by one ``put_columns`` call (the
compiled column put: bodies, tags and keys straight from the Arrow columns, no ``Message`` per row); rows
with properties become ``Message``s, put as ``MessageBatch``es of consecutive rows of one topic and queue
(at most 1024 messages and a quarter of a commit-log file); all in the order of the staged files. Rows were
checked by the tasks, so a refusal here means the store itself failed (disk full ...) or has settings the
tasks did not see: it raises, naming how many messages were already appended and why the store refused
(:func:`pystore.log.refusal.refusal_reason`, the words ``pystore put`` prints).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pystore import Message, MessageBatch, MessageStore, PutMessageStatus
from pystore.format._codec import record_length
from pystore.log._file_names import is_file_name
from pystore.log.refusal import refusal_reason

__all__ = ["append_staged", "staged_rows", "stored_prefix"]

log = logging.getLogger(__name__)

_APPENDED = (
    PutMessageStatus.PUT_OK,
    PutMessageStatus.FLUSH_DISK_TIMEOUT,
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT,
    PutMessageStatus.SLAVE_NOT_AVAILABLE,
)
MAX_BATCH = 1024


def _file_size(store: MessageStore) -> int:
    folder = store.config.commit_log_paths()[0]
    try:
        names = sorted(n for n in os.listdir(folder) if is_file_name(n))
    except FileNotFoundError:
        names = []
    for n in names:
        size = os.path.getsize(os.path.join(folder, n))
        if size > 0:
            return size
    return int(store.config.mapped_file_size_commit_log)


def _staged_batches(paths: list[str]) -> Iterator[pa.RecordBatch]:
    """The staged record batches in the order they are appended, the rows of each grouped by topic and queue
    (a stable sort: rows keep their order within a queue, which is all a queue's consumers see; rows of many
    queues interleaved would otherwise go in one put per row)."""
    for path in paths:
        with pa.memory_map(path) as src:
            reader = pa.ipc.open_file(src)
            for bi in range(reader.num_record_batches):
                b = reader.get_batch(bi)
                if b.num_rows > 1:
                    b = b.take(pc.sort_indices(b, sort_keys=[("topic", "ascending"), ("queue_id", "ascending")]))
                yield b


def _messages(b: pa.RecordBatch) -> Iterator[Message]:
    cols = [b.column(i).to_pylist() for i in range(6)]
    for topic, body, tags, keys, qid, props in zip(*cols, strict=True):
        yield Message(topic, body, tags=tags, keys=keys, properties=dict(props) if props else None, queue_id=qid)


def staged_rows(paths: list[str]) -> Iterator[Message]:
    """The rows of the staged files at ``paths`` as messages, in the order they are appended."""
    for b in _staged_batches(paths):
        yield from _messages(b)


def _runs(b: pa.RecordBatch) -> list[tuple[int, int, bool]]:
    """``(start, end, with_properties)`` of each run of consecutive rows of one topic and queue that all have
    properties or all have none, found by whole-column compares."""
    n = b.num_rows
    props = b.column(5)
    off = props.offsets.to_numpy()
    has_props = np.diff(off) > 0
    if n > 1:
        topic, qid = b.column(0), b.column(4)
        change = pc.or_(pc.not_equal(topic.slice(1), topic.slice(0, n - 1)),
                        pc.not_equal(qid.slice(1), qid.slice(0, n - 1)))
        cuts = np.flatnonzero(pc.fill_null(change, True).to_numpy(zero_copy_only=False)
                              | (has_props[1:] != has_props[:-1])) + 1
    else:
        cuts = np.empty(0, dtype=np.int64)
    bounds = [0, *cuts.tolist(), n]
    return [(bounds[i], bounds[i + 1], bool(has_props[bounds[i]])) for i in range(len(bounds) - 1)]


def stored_prefix(store: MessageStore, start: int, paths: list[str]) -> int:
    """How many of the staged rows at ``paths`` the commit log holds from ``start`` on, in the order
    ``append_staged`` stores them (``staged_rows``): the part of an append that a crash interrupted. A
    record that differs from the next row (topic, queue, body, tags, keys), or the end of the log, ends the
    count; a file's blank tail is passed over."""
    end = store.get_max_phy_offset()
    size = _file_size(store)
    off, n = start, 0
    for row in staged_rows(paths):
        if off >= end:
            break
        m = store.look_message_by_offset(off)
        if m is None and (off // size + 1) * size < end:
            off = (off // size + 1) * size  # the blank record that ends a file
            m = store.look_message_by_offset(off)
        if m is None or (m.topic, m.queue_id, m.body, m.tags, m.keys) != (
                row.topic, row.queue_id, row.body, row.tags, row.keys):
            break
        n += 1
        off += m.store_size
    return n


def append_staged(
    root: str,
    paths: list[str],
    config: dict[str, Any],
    guard: Callable[[MessageStore], int | None] | None = None,
    after: Callable[[MessageStore, int], None] | None = None,
) -> int:
    """Append the rows of the staged files at ``paths`` to the store at ``root``; the number appended.
    ``guard(store)``, called with the store open (and its lock held), says how many leading rows to pass
    over (stored before), or None not to append at all; ``after(store, appended)`` runs after the last
    append, the lock still held."""
    total = 0
    with MessageStore.open(root, **config) as store:
        skip = 0 if guard is None else guard(store)
        if skip is None:
            return 0
        limit = max(1, min(1 << 20, _file_size(store) // 4))
        pending: list[Message] = []
        pending_key: tuple[str, int] | None = None
        pending_bytes = 0

        def flush() -> None:
            nonlocal total, pending, pending_bytes
            if not pending:
                return
            r = (
                store.put_message(pending[0])
                if len(pending) == 1
                else store.put_messages(MessageBatch(pending))
            )
            if r.status not in _APPENDED:
                # the first message the put path's checks refuse, else what the status itself means
                why = next((w for w in (refusal_reason(m, store.config) for m in pending) if w), None)
                raise RuntimeError(
                    "pystore write to %s: the store refused %d message(s) of %s/%d with %s (%s) after %d "
                    "were appended"
                    % (
                        root,
                        len(pending),
                        pending[0].topic,
                        pending[0].queue_id,
                        r.status.name,
                        why or refusal_reason(pending[0], store.config, r.status),
                        total,
                    )
                )
            if r.status != PutMessageStatus.PUT_OK:
                log.warning("%s: put returned %s (appended)", root, r.status.name)
            total += len(pending)
            pending = []
            pending_bytes = 0

        row = 0
        for b in _staged_batches(paths):
            if row + b.num_rows <= skip:
                row += b.num_rows
                continue
            if row < skip:
                b = b.slice(skip - row)
                row = skip
            # keys as Message takes a list of them: joined by spaces
            keys = pc.binary_join(b.column(3), " ")
            for start, end, with_props in _runs(b):
                part = b.slice(start, end - start)
                if with_props:
                    for m in _messages(part):
                        size = record_length(m)
                        key = (m.topic, m.queue_id)
                        if pending and (key != pending_key or pending_bytes + size > limit
                                        or len(pending) >= MAX_BATCH):
                            flush()
                        pending.append(m)
                        pending_key = key
                        pending_bytes += size
                    continue
                flush()
                topic, qid = part.column(0)[0].as_py(), part.column(4)[0].as_py()
                r = store.put_columns(topic, part.column(1), qid, keys=keys.slice(start, end - start),
                                      tags=part.column(2))
                total += r.count
                if r.status not in _APPENDED:
                    refused = next(_messages(part.slice(r.count, 1)))
                    raise RuntimeError(
                        "pystore write to %s: the store refused a message of %s/%d with %s (%s) after %d were "
                        "appended" % (root, topic, qid, r.status.name,
                                      refusal_reason(refused, store.config, r.status), total))
                if r.status != PutMessageStatus.PUT_OK:
                    log.warning("%s: put returned %s (appended)", root, r.status.name)
            row += b.num_rows
        flush()
        if after is not None:
            after(store, total)
    return total
