"""The streaming sink: ``df.writeStream.format("pystore").option("checkpointLocation", c).start(root)``.

Rows take the batch writer's columns and checks (:mod:`pystore.spark.writer`): each task stages its rows as
an Arrow IPC file under ``<root>/.spark-staging/stream-<query>/``; the driver's ``commit(messages,
batch_id)`` appends them through the put path (:func:`pystore.spark.append.append_staged`, under the store
lock) and then, the lock still held, records ``batch_id`` as the query's last committed micro-batch in
``<root>/config/sparkSinkCommits.json`` (``{"<query>": batch_id}``, replaced atomically with a ``.bak`` as
the broker's own config files are). A micro-batch Spark replays after a restart (its id at or below the one
recorded) is dropped, so it is not stored twice.

A query is known by its checkpoint folder (``checkpointLocation``, made absolute), else by its
``queryName``; a query with neither has no identity across restarts and is refused. The record is written
under the store lock, right after the batch's messages are flushed: a crash in between (after the messages
are on disk, before the record is) replays that one micro-batch, which is then stored twice.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from pystore.config_json import load_config_file, persist_config_file
from pystore.spark.options import OptionError, check_options, option_value
from pystore.spark.writer import STAGING_DIR, StagedPart, stage_rows, write_target

__all__ = ["PystoreStreamWriter", "COMMITS_FILE", "committed_batches"]

log = logging.getLogger(__name__)

#: Under the store's ``config/``: the last committed micro-batch of each query.
COMMITS_FILE = "sparkSinkCommits.json"


def _decode(text: str) -> dict[str, int]:
    table = json.loads(text)
    if not isinstance(table, dict) or not all(isinstance(v, int) for v in table.values()):
        raise ValueError("not a {query: batch id} object")
    return table


def committed_batches(root: str) -> dict[str, int]:
    """``{query: last committed batch id}`` of the streaming sinks that wrote to the store at ``root``."""
    return load_config_file(os.path.join(root, "config", COMMITS_FILE), _decode) or {}


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
        from pystore.spark.append import append_staged

        parts = sorted(
            (m for m in messages if isinstance(m, StagedPart) and m.path), key=lambda m: m.partition
        )
        replay = False

        def guard(store: Any) -> bool:
            nonlocal replay
            last = committed_batches(self.root).get(self.query, -1)
            replay = batchId <= last
            return not replay

        def after(store: Any, total: int) -> None:
            store.flush()  # the messages on disk before the record that says they are
            table = committed_batches(self.root)
            table[self.query] = batchId
            persist_config_file(
                os.path.join(self.root, "config", COMMITS_FILE), json.dumps(table, indent=1, sort_keys=True)
            )
            log.info("pystore streaming write to %s: micro-batch %d, %d message(s)", self.root, batchId, total)

        try:
            append_staged(self.root, [p.path for p in parts if p.path], self.config, guard, after)
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
