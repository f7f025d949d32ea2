"""Helpers of ``test_spark.py`` that need no Spark: a RocketMQ-format store writer built on the tests'
independent record codec (``reference_codec``, written from docs/format.md with ``struct``), a reference
scan of a store's commit log, and the conversion of both sides into comparable rows.

``RocketMQStoreWriter`` lays files out as a broker does: ``commitlog/`` files preallocated to their full
size (zeros after the data), an 8-byte end-of-file blank when a record does not fit, consume-queue units
``(offset, size, tags hash)`` under ``consumequeue/<topic>/<queue_id>/`` (fillers before a queue that
starts at a non-zero offset), and no consume-queue unit for prepared/rollback transaction records.
"""

from __future__ import annotations

import os
import struct
import sys
from typing import Any

import reference_codec as ref

UNIT = 20
FILLER = (0, 0x7FFFFFFF, 0)


def name(offset: int) -> str:
    return "%020d" % offset


class RocketMQStoreWriter:
    """Writes a RocketMQ-format store at ``root`` (commit-log files of ``cl_size`` bytes, consume-queue
    files of ``cq_units`` units) with :meth:`put`, then :meth:`close` writes the files."""

    def __init__(
        self,
        root: str,
        cl_size: int = 4096,
        cq_units: int = 8,
        store_host: tuple[str, int] = ("192.168.0.1", 10911),
    ) -> None:
        self.root = root
        self.cl_size = cl_size
        self.cq_size = cq_units * UNIT
        self.store_host = store_host
        self.files: list[bytearray] = [bytearray(cl_size)]
        self.pos = 0
        self.queues: dict[tuple[str, int], list[tuple[int, int, int]]] = {}
        self.queue_start: dict[tuple[str, int], int] = {}
        self.next_offset: dict[tuple[str, int], int] = {}
        self.records: list[dict[str, Any]] = []

    def start_queue_at(self, topic: str, queue_id: int, offset: int) -> None:
        """The queue's first unit will be ``offset`` (fillers before it, as ``fillPreBlank`` writes)."""
        self.queue_start[(topic, queue_id)] = offset
        self.next_offset[(topic, queue_id)] = offset

    def put(
        self,
        topic: str,
        body: bytes,
        props: bytes,
        queue_id: int = 0,
        *,
        born_host=("10.0.0.1", 40000),
        born_ts: int = 1_700_000_000_000,
        store_ts: int = 1_700_000_000_500,
        flag: int = 0,
        sys_flag: int = 0,
        reconsume_times: int = 0,
        prepared_tx_offset: int = 0,
        version: int | None = None,
    ) -> int:
        """Append one record; returns its commit-log offset."""
        key = (topic, queue_id)
        tx = sys_flag & 0xC
        in_queue = tx in (0x0, 0x8)
        qoff = self.next_offset.get(key, 0) if in_queue else 0
        size = len(
            ref.encode(
                topic,
                body,
                props,
                queue_id,
                flag,
                0,
                0,
                sys_flag,
                born_ts,
                born_host,
                store_ts,
                self.store_host,
                reconsume_times,
                prepared_tx_offset,
                version,
            )
        )
        if self.pos + size + 8 > self.cl_size:
            blank = ref.encode_blank(self.cl_size - self.pos)
            self.files[-1][self.pos : self.pos + 8] = blank
            self.files.append(bytearray(self.cl_size))
            self.pos = 0
        phy = (len(self.files) - 1) * self.cl_size + self.pos
        rec = ref.encode(
            topic,
            body,
            props,
            queue_id,
            flag,
            qoff,
            phy,
            sys_flag,
            born_ts,
            born_host,
            store_ts,
            self.store_host,
            reconsume_times,
            prepared_tx_offset,
            version,
        )
        self.files[-1][self.pos : self.pos + size] = rec
        self.pos += size
        if in_queue:
            tags = ref.parse_properties(props.decode("utf-8", "replace")).get("TAGS")
            self.queues.setdefault(key, []).append((phy, size, ref.java_hash(tags) if tags else 0))
            self.next_offset[key] = qoff + 1
        self.records.append(ref.decode(rec))
        return phy

    def close(self) -> None:
        cl = os.path.join(self.root, "commitlog")
        os.makedirs(cl, exist_ok=True)
        for i, data in enumerate(self.files):
            with open(os.path.join(cl, name(i * self.cl_size)), "wb") as f:
                f.write(data)
        for (topic, qid), units in self.queues.items():
            start = self.queue_start.get((topic, qid), 0)
            qdir = os.path.join(self.root, "consumequeue", topic, str(qid))
            os.makedirs(qdir, exist_ok=True)
            first_file = (start * UNIT) // self.cq_size * self.cq_size
            raw = bytearray()
            for _ in range((start * UNIT - first_file) // UNIT):
                raw += struct.pack(">qiq", *FILLER)
            for u in units:
                raw += struct.pack(">qiq", *u)
            off = 0
            while off < len(raw):
                chunk = raw[off : off + self.cq_size]
                with open(os.path.join(qdir, name(first_file + off)), "wb") as f:
                    f.write(chunk + bytes(self.cq_size - len(chunk)))
                off += self.cq_size


def scan_commit_log(root: str) -> list[dict[str, Any]]:
    """Every record of ``root``'s commit log, decoded by the reference codec (a blank or a zero size ends
    a file)."""
    folder = os.path.join(root, "commitlog")
    out = []
    for n in sorted(os.listdir(folder)):
        with open(os.path.join(folder, n), "rb") as f:
            buf = f.read()
        pos = 0
        while pos + 8 <= len(buf):
            total, magic = struct.unpack_from(">iI", buf, pos)
            if total == 0 or magic == ref.BLANK_MAGIC:
                break
            out.append(ref.decode(buf, pos))
            pos += total
    return out


def host_text(host: tuple[str, int]) -> str:
    addr, port = host
    return "[%s]:%d" % (addr, port) if ":" in addr else "%s:%d" % (addr, port)


def ref_row(d: dict[str, Any]) -> dict[str, Any]:
    """A reference-decoded record as the row the source must produce (timestamps as epoch microseconds)."""
    return {
        "topic": d["topic"],
        "queue_id": d["queue_id"],
        "queue_offset": d["queue_offset"],
        "commit_log_offset": d["phy_offset"],
        "store_size": d["total_size"],
        "body": bytes(d["body"]),
        "tags": d["tags"],
        "keys": d["keys"],
        "properties": d["properties"],
        "flag": d["flag"],
        "sys_flag": d["sys_flag"],
        "born_timestamp": d["born_timestamp"] * 1000,
        "store_timestamp": d["store_timestamp"] * 1000,
        "born_host": host_text(d["born_host"]),
        "store_host": host_text(d["store_host"]),
        "reconsume_times": d["reconsume_times"],
        "prepared_transaction_offset": d["prepared_tx_offset"],
        "body_crc": d["body_crc"],
        "msg_id": d["msg_id"],
    }


def spark_rows(df: Any) -> list[dict[str, Any]]:
    """Collect a pystore DataFrame as plain dicts: timestamps as epoch microseconds (``unix_micros``: no
    time-zone conversion anywhere), properties as dicts, bodies as bytes; sorted by (msg_id)."""
    from pyspark.sql import functions as F

    cols = [F.unix_micros(c).alias(c) if c.endswith("_timestamp") else F.col(c) for c in df.columns]
    out = []
    for r in df.select(*cols).collect():
        d = r.asDict()
        d["body"] = bytes(d["body"])
        d["properties"] = dict(d["properties"])
        out.append(d)
    out.sort(key=lambda d: (d["store_host"], d["commit_log_offset"]))
    return out


def sort_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda d: (d["store_host"], d["commit_log_offset"]))


def plain_rows(df: Any) -> list[dict[str, Any]]:
    """Collect any DataFrame of the source's columns (all, some, in any order) as plain dicts of the same
    shapes as :func:`ref_row`'s (timestamps as epoch microseconds, bodies as bytes, properties as dicts,
    headers as ``(key, value bytes)`` lists), in a canonical order of rows; the key order is the columns'."""
    from pyspark.sql import functions as F

    cols = [F.unix_micros(c).alias(c) if c.endswith("_timestamp") else F.col(c) for c in df.columns]
    out = []
    for r in df.select(*cols).collect():
        d = r.asDict()
        if "body" in d:
            d["body"] = bytes(d["body"])
        if "properties" in d:
            d["properties"] = dict(d["properties"])
        if "headers" in d:
            d["headers"] = [(h.key, bytes(h.value)) for h in d["headers"]]
        out.append(d)
    return canonical(out)


def canonical(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` in an order that depends only on their values."""
    return sorted(rows, key=lambda d: repr(sorted(d.items())))


def project_rows(rows: list[dict[str, Any]], names: list[str]) -> list[dict[str, Any]]:
    """Reference rows (:func:`ref_row`) cut to ``names`` in that order (``headers`` from ``properties``, as
    the source's Kafka-style column, in the stored order of the properties), canonically ordered."""
    out = []
    for r in rows:
        d = {}
        for n in names:
            d[n] = [(k, v.encode("utf-8")) for k, v in r["properties"].items()] if n == "headers" else r[n]
        out.append(d)
    return canonical(out)


def start_spark(app: str) -> Any:
    """A local[2] session for the tests (2 partitions, UTC, quiet, a small JVM), with the pystore source
    registered; the Python workers import pystore and these helpers from the tests' own path."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    session = (
        SparkSession.builder.master("local[2]")
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.extraJavaOptions", "-XX:+UseSerialGC -XX:TieredStopAtLevel=1")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    import pystore.spark

    pystore.spark.register(session)
    return session
