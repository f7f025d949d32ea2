"""Export a store's messages to Parquet with pyarrow (no Spark needed).

:func:`export_parquet` streams the commit log (:func:`pystore.tools.iter_commitlog`: no lock, no writes, a
live store too) into Arrow record batches and writes them with ``pyarrow.parquet.ParquetWriter``, one row
per message, with the columns of the Spark data source (docs/api.md "Spark", :data:`COLUMNS`):
``born_timestamp``/``store_timestamp`` are UTC instants (millisecond precision), hosts are
``"address:port"`` (IPv6 as ``"[address]:port"``). Memory stays bounded by ``batch_rows``.

pyarrow is an optional dependency (the ``spark`` extra: ``pip install pystore-mq[spark]``); importing this
module works without it, calling :func:`export_parquet` raises ``ImportError`` saying so.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pystore.message._message_ext import MessageExt
from pystore.tools import commit_log_files, iter_commitlog

__all__ = ["COLUMNS", "ExportResult", "arrow_schema", "export_parquet", "format_host", "record_batch"]

#: Column names and Spark SQL types, in order (docs/api.md).
COLUMNS: list[tuple[str, str]] = [
    ("topic", "string"),
    ("queue_id", "int"),
    ("queue_offset", "long"),
    ("commit_log_offset", "long"),
    ("store_size", "int"),
    ("body", "binary"),
    ("tags", "string"),
    ("keys", "array<string>"),
    ("properties", "map<string,string>"),
    ("flag", "int"),
    ("sys_flag", "int"),
    ("born_timestamp", "timestamp"),
    ("store_timestamp", "timestamp"),
    ("born_host", "string"),
    ("store_host", "string"),
    ("reconsume_times", "int"),
    ("prepared_transaction_offset", "long"),
    ("body_crc", "int"),
    ("msg_id", "string"),
]

MISSING_PYARROW = "pyarrow is not installed: install pystore-mq[spark] (or `pip install pyarrow`)"


def _pa() -> Any:
    try:
        import pyarrow
        import pyarrow.parquet  # noqa: F401
    except ImportError as e:
        raise ImportError(MISSING_PYARROW) from e
    return pyarrow


def arrow_schema() -> Any:
    """The Arrow schema of :data:`COLUMNS`."""
    pa = _pa()
    types = {
        "string": pa.string(),
        "int": pa.int32(),
        "long": pa.int64(),
        "binary": pa.binary(),
        "array<string>": pa.list_(pa.string()),
        "map<string,string>": pa.map_(pa.string(), pa.string()),
        "timestamp": pa.timestamp("ms", tz="UTC"),
    }
    return pa.schema([pa.field(name, types[t]) for name, t in COLUMNS])


def record_batch(messages: Sequence[MessageExt], schema: Any = None) -> Any:
    """The messages as one Arrow record batch of :data:`COLUMNS` (``schema``: :func:`arrow_schema`'s, made
    when not given); ``get_columns`` and the export share it."""
    pa = _pa()
    cols: dict[str, list[Any]] = {n: [] for n, _ in COLUMNS}
    for m in messages:
        cols["topic"].append(m.topic)
        cols["queue_id"].append(m.queue_id)
        cols["queue_offset"].append(m.queue_offset)
        cols["commit_log_offset"].append(m.commit_log_offset)
        cols["store_size"].append(m.store_size)
        cols["body"].append(m.body)
        cols["tags"].append(m.tags)
        cols["keys"].append(m.keys)
        cols["properties"].append(list(m.properties.items()))
        cols["flag"].append(m.flag)
        cols["sys_flag"].append(m.sys_flag)
        cols["born_timestamp"].append(m.born_timestamp)
        cols["store_timestamp"].append(m.store_timestamp)
        cols["born_host"].append(format_host(m.born_host))
        cols["store_host"].append(format_host(m.store_host))
        cols["reconsume_times"].append(m.reconsume_times)
        cols["prepared_transaction_offset"].append(m.prepared_transaction_offset)
        cols["body_crc"].append(m.body_crc)
        cols["msg_id"].append(m.msg_id)
    return pa.record_batch([cols[n] for n, _ in COLUMNS], schema=schema if schema is not None else arrow_schema())


def format_host(host: tuple[str, int]) -> str:
    """``"address:port"``; IPv6 as ``"[address]:port"``."""
    addr, port = host
    return ("[%s]:%d" if ":" in addr else "%s:%d") % (addr, port)


@dataclass
class ExportResult:
    path: str
    rows: int
    bytes_in: int  # store bytes of the exported records
    batches: int
    seconds: float


def export_parquet(
    root: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    topics: Iterable[str] | None = None,
    verify_crc: bool = True,
    batch_rows: int = 8192,
    compression: str = "zstd",
    progress: Callable[[int, int], None] | None = None,
) -> ExportResult:
    """Write every message of the store at ``root`` (or of ``topics``) to the Parquet file ``out``.

    ``progress(records, record_bytes)`` counts what was exported so far (every 1024 records, and once at the
    end): the data, not the commit-log files, which are allocated at their full size before they fill. With
    ``verify_crc`` a damaged record stops the export with :class:`~pystore.errors.StoreCorruptedError` and
    ``out`` is removed.
    """
    import time

    _pa()
    import pyarrow.parquet as pq

    t0 = time.perf_counter()
    root = os.fspath(root)
    out = os.fspath(out)
    wanted = set(topics) if topics else None
    commit_log_files(root)  # no commit log: FileNotFoundError before the output is created
    schema = arrow_schema()
    rows = nbytes = batches = 0
    tmp = out + ".part"
    writer = pq.ParquetWriter(tmp, schema, compression=compression)
    try:
        pending: list[MessageExt] = []
        for m in iter_commitlog(root, verify_crc=verify_crc):
            if wanted is not None and m.topic not in wanted:
                continue
            pending.append(m)
            rows += 1
            nbytes += m.store_size
            if progress is not None and (rows & 1023) == 0:
                progress(rows, nbytes)
            if len(pending) >= batch_rows:
                writer.write_batch(record_batch(pending, schema))
                batches += 1
                pending = []
        if pending:
            writer.write_batch(record_batch(pending, schema))
            batches += 1
        writer.close()
        os.replace(tmp, out)
    except BaseException:
        writer.close()
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    if progress is not None:
        progress(rows, nbytes)
    return ExportResult(out, rows, nbytes, batches, time.perf_counter() - t0)
