"""The streaming sink: ``df.writeStream.format("pystore").option("checkpointLocation", c).start(root)``.

Rows take the batch writer's columns and checks (:mod:`pystore.spark.writer`): each task stages its rows as
an Arrow IPC file under ``<root>/.spark-staging/stream-<query>/``; the driver's ``commit(messages,
batch_id)`` appends them through the put path (:func:`pystore.spark.append.append_staged`, under the store
lock). Each query's progress is kept in ``<root>/config/sparkSinkCommits.json``, replaced atomically with a
``.bak`` as the broker's own config files are, each change made holding an exclusive ``flock`` on the config
folder (with ``shared_writers`` the store lock is shared, and two queries may commit at once)::

    {"<query>": {"committed": 6}}                                 between micro-batches
    {"<query>": {"committed": 6, "appending": 7, "from": 81920}}  while micro-batch 7 is appended

``appending`` and ``from`` (the commit log's end before the append) are written, the lock held, before the
first message; once the messages are flushed the entry becomes ``{"committed": 7}``. A micro-batch Spark
replays after a restart is dropped when its id is at or below ``committed``; when it is the one being
appended, the records from ``from`` on that match its rows in order (a crash cut the append short) are
passed over and only the rest is appended. So a micro-batch is stored once across crashes, provided Spark
hands a replayed micro-batch the same rows in the same order (its offsets are fixed by the source's offset
log; the partitions are appended in partition order).

A query is known by its checkpoint folder (``checkpointLocation``, made absolute), else by its
``queryName``; a query with neither has no identity across restarts and is refused.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from pystore.consumer.config_json import load_config_file, persist_config_file
from pystore.spark.options import OptionError, check_options, option_value
from pystore.spark.writer import STAGING_DIR, StagedPart, stage_rows, write_target

__all__ = ["PystoreStreamWriter", "COMMITS_FILE", "committed_batches"]

log = logging.getLogger(__name__)

#: Under the store's ``config/``: the last committed micro-batch of each query.
COMMITS_FILE = "sparkSinkCommits.json"


def _decode(text: str) -> dict[str, dict[str, int]]:
    table = json.loads(text)
    if not isinstance(table, dict) or not all(
        isinstance(e, dict) and isinstance(e.get("committed"), int)
        and all(isinstance(v, int) for v in e.values()) for e in table.values()
    ):
        raise ValueError('not a {query: {"committed": batch id, ...}} object')
    return table


def _progress(root: str) -> dict[str, dict[str, int]]:
    return load_config_file(os.path.join(root, "config", COMMITS_FILE), _decode) or {}


@contextlib.contextmanager
def _progress_locked(root: str) -> Iterator[dict[str, dict[str, int]]]:
    """The table, read with an exclusive ``flock`` on the config folder held until the block ends (a change is
    written with ``_record`` inside it). Each change rewrites the whole file, and with several writer processes
    (``shared_writers``) the store lock no longer keeps two queries' commits apart: one would write back a
    table without the other's entry, whose next replay would then be stored twice."""
    folder = os.path.join(root, "config")
    os.makedirs(folder, exist_ok=True)
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield _progress(root)
    finally:
        os.close(fd)            # the lock goes with the descriptor


def _record(root: str, table: dict[str, dict[str, int]]) -> None:
    persist_config_file(os.path.join(root, "config", COMMITS_FILE), json.dumps(table, indent=1, sort_keys=True))


def committed_batches(root: str) -> dict[str, int]:
    """``{query: last committed batch id}`` of the streaming sinks that wrote to the store at ``root``."""
    return {q: e["committed"] for q, e in _progress(root).items()}


class PystoreStreamWriter(DataSourceStreamArrowWriter):
    """Stages rows per task; appends them in the driver's commit once per micro-batch id."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        check_options(options, "stream_write")
        t = write_target(options, schema, "streaming write")
        self.root, self.config, self.max_message_size = t.root, t.config, t.max_message_size
        ckpt, name = option_value(options, "checkpointLocation"), option_value(options, "queryName")
        if ckpt:
            self.query = "checkpoint:" + os.path.abspath(ckpt)
        elif name:
            self.query = "query:" + name
        else:
            raise OptionError(
                "a pystore streaming write needs option checkpointLocation (or a queryName): it is how a "
                "restarted query is known, so a replayed micro-batch is not stored twice"
            )
        digest = hashlib.sha1(self.query.encode("utf-8")).hexdigest()[:16]
        self.staging = os.path.join(self.root, STAGING_DIR, "stream-" + digest)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedPart:
        return stage_rows(iterator, self.staging, self.max_message_size)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        from pystore.spark.append import append_staged, stored_prefix

        parts = sorted(
            (m for m in messages if isinstance(m, StagedPart) and m.path), key=lambda m: m.partition
        )
        paths = [p.path for p in parts if p.path]
        replay = False

        def guard(store: Any) -> int | None:
            nonlocal replay
            with _progress_locked(self.root) as table:
                entry = table.get(self.query, {"committed": -1})
                replay = batchId <= entry["committed"]
                if replay:
                    return None
                if entry.get("appending") == batchId:
                    done = stored_prefix(store, entry["from"], paths)
                    log.warning("pystore streaming write to %s: micro-batch %d was cut short by a crash after %d "
                                "message(s); appending the rest", self.root, batchId, done)
                    return done
                table[self.query] = {"committed": entry["committed"], "appending": batchId,
                                     "from": store.get_max_phy_offset()}
                _record(self.root, table)
                return 0

        def after(store: Any, total: int) -> None:
            store.flush()  # the messages on disk before the record that says they are
            with _progress_locked(self.root) as table:
                table[self.query] = {"committed": batchId}
                _record(self.root, table)
            log.info("pystore streaming write to %s: micro-batch %d, %d message(s)", self.root, batchId, total)

        try:
            append_staged(self.root, paths, self.config, guard, after)
            if replay:
                log.info("pystore streaming write to %s: micro-batch %d of %s was committed before; dropped",
                         self.root, batchId, self.query)
        finally:
            for p in parts:
                if p.path:
                    _remove(p.path)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning("pystore streaming write to %s: micro-batch %d aborted; staged rows dropped",
                    self.root, batchId)
        for m in messages:
            if isinstance(m, StagedPart) and m.path:
                _remove(m.path)


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
