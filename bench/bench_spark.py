"""Spark batch read of a store (issue 7): ``spark.read.format("pystore")`` on 1 M messages of 128 B, against

* ``spark.read.parquet`` of the same rows (the same 19 columns, written by Spark from a pystore read):
  target >= 0.5x its rows/s;
* a pure-Python data source an afternoon would produce (``struct.unpack_from`` over an ``mmap``, one tuple
  per row, the same schema and the same partitions): target >= 3x its rows/s.

Every timed query reads every column of every row (a sum of ``xxhash64`` over all columns but the map,
plus the map's size) and returns the row count and the sum of ``crc32(body)``; both are checked against
what was put, so a fast wrong read fails. One ``local[2]`` session serves the module (PySpark + Java
needed, else the module is skipped).

Narrow reads (``test_spark_read_narrow_pystore_vs_parquet_paired``): a user ``.schema(...)`` of a few columns,
which the source yields alone (its projection), against ``spark.read.parquet(p).select(...)`` of the same
columns, alternating; and a streaming drain with such a schema against a full one
(``test_spark_stream_drain_narrow_vs_full_paired``).

And the write (``test_spark_write_pystore_vs_parquet_paired``): ``df.write.format("pystore")`` of N_WRITE rows
against ``df.write.parquet`` of the same cached DataFrame, paired round by round (target >= 0.5x).

Run: ``cd bench && PYTHONPATH=.. python -m pytest bench_spark.py --benchmark-only -s``.
"""

from __future__ import annotations

import mmap
import os
import shutil
import socket
import struct
import time
import zlib
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import benchlib
import pytest

pytest.importorskip("pyspark", reason="the spark extra (pyspark) is not installed")
pytest.importorskip("pyarrow", reason="the spark extra (pyarrow) is not installed")
if not (shutil.which("java") or os.environ.get("JAVA_HOME")):
    pytest.skip("Spark needs Java", allow_module_level=True)

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition  # noqa: E402

N = int(os.environ.get("PYSTORE_BENCH_SPARK_N", 1_000_000))
SIZE = 128
ROUNDS = 3
QUEUES = 4


# ---------------------------------------------------------------------------------------------------------
# the pure-Python baseline source
# ---------------------------------------------------------------------------------------------------------

_UTC = UTC
_MAGICS = (0xDAA320A7 - (1 << 32), 0xDAA320AB - (1 << 32))
_BLANK = 0xCBD43194 - (1 << 32)


def _host(raw: bytes) -> str:
    if len(raw) == 8:
        return "%s:%d" % (socket.inet_ntop(socket.AF_INET, raw[:4]), struct.unpack(">i", raw[4:])[0])
    return "[%s]:%d" % (socket.inet_ntop(socket.AF_INET6, raw[:16]), struct.unpack(">i", raw[16:])[0])


def py_records(path: str, start: int, end: int) -> Iterator[tuple[Any, ...]]:
    """The rows of one commit-log file range, decoded with ``struct`` (what a user would write)."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        mm = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ)
    try:
        pos = start
        end = size if end < 0 else end
        unpack = struct.unpack_from
        while pos + 8 <= end:
            total, magic = unpack(">ii", mm, pos)
            if total == 0 or magic == _BLANK:
                break
            if magic not in _MAGICS:
                raise ValueError("bad magic at %d of %s" % (pos, path))
            crc, qid, flag, qoff, phy, sysf, born = unpack(">iiiqqiq", mm, pos + 8)
            p = pos + 48
            bl = 20 if sysf & 0x10 else 8
            born_host = _host(mm[p : p + bl])
            p += bl
            (store_ts,) = unpack(">q", mm, p)
            p += 8
            sl = 20 if sysf & 0x20 else 8
            sh_raw = mm[p : p + sl]
            p += sl
            rc, prep, blen = unpack(">iqi", mm, p)
            p += 16
            body = mm[p : p + blen]
            p += blen
            if magic == _MAGICS[1]:
                (tl,) = unpack(">h", mm, p)
                p += 2
            else:
                tl = mm[p]
                p += 1
            topic = mm[p : p + tl].decode("utf-8", "replace")
            p += tl
            (pl,) = unpack(">h", mm, p)
            props: dict[str, str] = {}
            for item in mm[p + 2 : p + 2 + pl].decode("utf-8", "replace").split("\x02"):
                k, sep, v = item.partition("\x01")
                if k and sep and v:
                    props[k] = v
            keys = [k for k in props.get("KEYS", "").split(" ") if k]
            yield (
                topic,
                qid,
                qoff,
                phy,
                total,
                body,
                props.get("TAGS"),
                keys,
                props,
                flag,
                sysf,
                datetime.fromtimestamp(born / 1000, _UTC),
                datetime.fromtimestamp(store_ts / 1000, _UTC),
                born_host,
                _host(sh_raw),
                rc,
                prep,
                crc,
                (sh_raw + struct.pack(">q", phy)).hex().upper(),
            )
            pos += total
    finally:
        mm.close()


class PyTupleReader(DataSourceReader):
    def __init__(self, options: Any) -> None:
        self.root = options["path"]

    def partitions(self) -> list[InputPartition]:
        from pystore.spark.batch import DEFAULT_BYTES_PER_PARTITION, plan_commit_log_slices

        return list(plan_commit_log_slices(self.root, DEFAULT_BYTES_PER_PARTITION))  # the same partitions

    def read(self, partition: Any) -> Iterator[tuple[Any, ...]]:
        yield from py_records(partition.path, partition.start, partition.end)


class PyTupleSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "pytuple"

    def schema(self) -> Any:
        from pystore.spark import spark_schema

        return spark_schema()

    def reader(self, schema: Any) -> DataSourceReader:
        return PyTupleReader(self.options)


# ---------------------------------------------------------------------------------------------------------
# the transport floor: a Python source that reads nothing and only hands Spark fresh Arrow batches
# ---------------------------------------------------------------------------------------------------------


class ArrowFloorReader(DataSourceReader):
    """``rows`` rows in ``partitions`` partitions of the read schema's columns (long, timestamp, binary of
    SIZE bytes), in batches of the pystore reader's size, each batch's buffers fresh copies of one template
    (as a decoder's would be): what any Python source pays to get Arrow batches into Spark, with no decoding."""

    def __init__(self, schema: Any, options: Any) -> None:
        self.schema = schema
        self.rows = int(options["rows"])
        self.parts = int(options["partitions"])

    def partitions(self) -> list[InputPartition]:
        per = -(-self.rows // self.parts)
        return [InputPartition((i * per, min(self.rows, (i + 1) * per))) for i in range(self.parts)]

    def read(self, partition: Any) -> Iterator[Any]:
        import numpy as np
        import pyarrow as pa
        from pyspark.sql.types import BinaryType, LongType, TimestampType

        from pystore.spark.batch import ROWS_PER_BATCH

        start, end = partition.value
        n = ROWS_PER_BATCH
        ints = np.arange(n, dtype=np.int64)
        values = np.frombuffer(benchlib.payloads(1, SIZE)[0] * n, dtype=np.uint8)
        offsets = np.arange(0, n * SIZE + 1, SIZE, dtype=np.int32)
        names = [f.name for f in self.schema.fields]
        for lo in range(start, end, n):
            k = min(n, end - lo)
            cols = []
            for f in self.schema.fields:
                if isinstance(f.dataType, LongType):
                    cols.append(pa.array(ints[:k] + lo))
                elif isinstance(f.dataType, TimestampType):
                    cols.append(pa.array(ints[:k] * 1000, type=pa.timestamp("us", tz="UTC")))
                elif isinstance(f.dataType, BinaryType):
                    cols.append(pa.Array.from_buffers(
                        pa.binary(), k, [None, pa.py_buffer(offsets[: k + 1].copy()),
                                         pa.py_buffer(values[: k * SIZE].copy())]))
                else:
                    raise TypeError("the floor source makes long, timestamp and binary columns, not %s" % f)
            yield pa.RecordBatch.from_arrays(cols, names=names)


class ArrowFloorSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "arrowfloor"

    def schema(self) -> Any:
        return "queue_offset long"

    def reader(self, schema: Any) -> DataSourceReader:
        return ArrowFloorReader(schema, self.options)


# ---------------------------------------------------------------------------------------------------------
# fixtures
# ---------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def spark():
    session = benchlib.spark_session(2, "pystore-bench")
    session.dataSource.register(PyTupleSource)
    session.dataSource.register(ArrowFloorSource)
    yield session
    session.stop()


@pytest.fixture(scope="module")
def data(spark, tmp_path_factory) -> dict[str, Any]:
    """The store (N messages of SIZE bytes, QUEUES queues, a tag and a key each), its Parquet copy, and the
    expected count and body checksum."""
    api = benchlib.store_api()
    Message, MessageBatch = api["Message"], api["MessageBatch"]
    base = tmp_path_factory.mktemp("bench-spark")
    root = str(base / "store")
    bodies = benchlib.payloads(N, SIZE)
    with api["MessageStore"].open(
        root, mapped_file_size_commit_log=256 << 20, message_index_enable=False
    ) as store:
        for q in range(QUEUES):
            idx = range(q, N, QUEUES)
            for s in range(0, len(idx), 64):
                batch = MessageBatch(
                    [
                        Message(benchlib.TOPIC, bodies[i], tags="TagA", keys=["k%07d" % i], queue_id=q)
                        for i in idx[s : s + 64]
                    ]
                )
                r = store.put_messages(batch)
                assert r.status.name == "PUT_OK", r
    crc_sum = sum(zlib.crc32(b) for b in bodies)
    parquet = str(base / "parquet")
    spark.read.format("pystore").load(root).write.parquet(parquet)
    yield {"root": root, "parquet": parquet, "count": N, "crc_sum": crc_sum}
    shutil.rmtree(str(base), ignore_errors=True)


def _query(df: Any) -> tuple[int, int, int]:
    from pyspark.sql import functions as F

    flat = [c for c in df.columns if c != "properties"]
    r = df.agg(
        F.count(F.lit(1)).alias("n"),
        F.sum(F.crc32("body")).alias("crc"),
        F.sum(F.xxhash64(*flat) % 1000003 + F.size("properties")).alias("h"),
    ).first()
    return int(r.n), int(r.crc), int(r.h)


RESULTS: dict[str, Any] = {}


def _run(benchmark: Any, record: Any, label: str, make_df: Any, data: dict[str, Any]) -> dict[str, Any]:
    out = benchmark.pedantic(lambda: _query(make_df()), rounds=ROUNDS, iterations=1, warmup_rounds=1)
    n, crc, h = out
    assert n == data["count"], "%s read %d rows, %d were put" % (label, n, data["count"])
    assert crc == data["crc_sum"], "%s: the bodies' CRC sum differs from what was put" % label
    RESULTS.setdefault("hash", h)
    assert h == RESULTS["hash"], "%s: the rows differ from the other readers' (hash of every column)" % label
    m = record(label, msgs_per_op=n, payload_per_op=n * SIZE)
    RESULTS[label] = m
    return m


# ---------------------------------------------------------------------------------------------------------
# benchmarks (run in this order: pystore, parquet, pure Python)
# ---------------------------------------------------------------------------------------------------------


def test_spark_read_pystore(benchmark, record, spark, data):
    m = _run(
        benchmark,
        record,
        "spark_read_pystore_1m_128",
        lambda: spark.read.format("pystore").load(data["root"]),
        data,
    )
    assert m.get("msgs_per_s") or benchmark.disabled


def test_spark_read_parquet(benchmark, record, spark, data):
    _run(benchmark, record, "spark_read_parquet_1m_128", lambda: spark.read.parquet(data["parquet"]), data)


def test_spark_read_pure_python_source(benchmark, record, spark, data):
    _run(
        benchmark,
        record,
        "spark_read_pytuple_1m_128",
        lambda: spark.read.format("pytuple").load(data["root"]),
        data,
    )
    ours = RESULTS["spark_read_pystore_1m_128"]
    for other, target in (("spark_read_parquet_1m_128", 0.5), ("spark_read_pytuple_1m_128", 3.0)):
        theirs = RESULTS.get(other)
        if not theirs or not theirs.get("msgs_per_s") or not ours.get("msgs_per_s"):
            continue        # not run, or run without timings (--benchmark-disable)
        ratio = ours["msgs_per_s"] / theirs["msgs_per_s"]
        ratio_med = ours["msgs_per_s_median"] / theirs["msgs_per_s_median"]
        RESULTS["ratio " + other] = ratio
        record(
            "pystore vs %s (target >= %.1fx)" % (other.split("_")[2], target),
            msgs_per_op=0,
            paired_ratio=ratio,
            paired_ratios=sorted([ratio, ratio_med]),
        )


# ---------------------------------------------------------------------------------------------------------
# pystore vs Parquet paired: the two reads alternate round by round, for several query shapes (a loaded
# machine slows both alike within a pair; the ratio is the median of the pairs' ratios)
# ---------------------------------------------------------------------------------------------------------

PAIRED_ROUNDS = int(os.environ.get("PYSTORE_BENCH_SPARK_PAIRED_ROUNDS", 5))


def _shapes() -> dict[str, Any]:
    from pyspark.sql import functions as F

    return {
        # every column of every row (the hash query above)
        "all columns": lambda df: _query(df)[0],
        "count()": lambda df: df.count(),
        "noop write": lambda df: df.write.format("noop").mode("overwrite").save() or -1,
        "sum(length(body))": lambda df: int(df.agg(F.sum(F.length("body"))).first()[0]),
    }


def _report_paired(record: Any, times: dict[str, dict[str, list[float]]], label: str) -> None:
    """Each shape's rows/s per source and the median of the per-pair ratios (Parquet's time over pystore's),
    recorded and printed; with the floor source in the rounds, also the floor against Parquet (the most a
    Python source can reach) and pystore against the floor (what decoding costs on top of the transport)."""
    import statistics

    def ratios(fast: list[float], slow: list[float]) -> list[float]:
        return sorted(f / s for f, s in zip(fast, slow, strict=True))

    for shape, by in times.items():
        pairs = ratios(by["parquet"], by["pystore"])
        med = {n: statistics.median(ts) for n, ts in by.items()}
        record(
            "paired %s%s: pystore %.2f M rows/s, parquet %.2f M rows/s" % (
                label, shape, N / med["pystore"] / 1e6, N / med["parquet"] / 1e6),
            msgs_per_op=0,
            paired_ratio=statistics.median(pairs),
            paired_ratios=pairs,
        )
        print("paired %s%-20s pystore %.3f s  parquet %.3f s  ratio (parquet time / pystore time) median %.2f, "
              "pairs %s" % (label, shape, med["pystore"], med["parquet"], statistics.median(pairs),
                            " ".join("%.2f" % r for r in pairs)))
        if "floor" in by:
            for what, fast, slow in (("floor vs parquet", "parquet", "floor"), ("pystore vs floor", "floor",
                                                                                 "pystore")):
                rs = ratios(by[fast], by[slow])
                record("paired %s%s: %s (floor %.2f M rows/s)" % (label, shape, what, N / med["floor"] / 1e6),
                       msgs_per_op=0, paired_ratio=statistics.median(rs), paired_ratios=rs)
                print("paired %s%-20s %s: median %.2f, pairs %s" % (
                    label, shape, what, statistics.median(rs), " ".join("%.2f" % r for r in rs)))


def test_spark_read_pystore_vs_parquet_paired(benchmark, record, spark, data):
    """Each shape on both sources, alternating; rows/s per source and the median of the per-pair ratios."""
    import time

    sources = {
        "pystore": lambda: spark.read.format("pystore").load(data["root"]),
        "parquet": lambda: spark.read.parquet(data["parquet"]),
    }
    want = {"all columns": N, "count()": N, "noop write": -1, "sum(length(body))": N * SIZE}

    def run_all() -> dict[str, dict[str, list[float]]]:
        times: dict[str, dict[str, list[float]]] = {}
        for shape, q in _shapes().items():
            for name in sources:                       # warm-up round of each
                q(sources[name]())
            for _ in range(PAIRED_ROUNDS):
                for name in sources:
                    t = time.perf_counter()
                    got = q(sources[name]())
                    times.setdefault(shape, {}).setdefault(name, []).append(time.perf_counter() - t)
                    assert got == want[shape], "%s on %s gave %r" % (shape, name, got)
        return times

    _report_paired(record, benchmark.pedantic(run_all, rounds=1, iterations=1), "")


# ---------------------------------------------------------------------------------------------------------
# narrow reads paired: a user schema of a few columns (the source's projection) against Parquet reading the
# same columns (.select), alternating as above
# ---------------------------------------------------------------------------------------------------------

NARROW = "queue_offset long, store_timestamp timestamp, body binary"


def _narrow_shapes() -> dict[str, tuple[str, Any]]:
    """shape: (the pystore read schema, the query on the DataFrame of those columns)."""
    from pyspark.sql import functions as F

    def hashed(df: Any) -> tuple[int, int, int]:
        r = df.agg(
            F.count(F.lit(1)).alias("n"),
            F.sum(F.crc32("body")).alias("crc"),
            F.sum(F.xxhash64(*df.columns) % 1000003).alias("h"),
        ).first()
        return int(r.n), int(r.crc), int(r.h)

    return {
        "3 columns hashed": (NARROW, hashed),
        "3 columns noop write": (NARROW, lambda df: df.write.format("noop").mode("overwrite").save() or -1),
        "count() of 1 column": ("queue_offset long", lambda df: df.count()),
        "sum(length(body))": ("body binary", lambda df: int(df.agg(F.sum(F.length("body"))).first()[0])),
    }


def test_spark_read_narrow_pystore_vs_parquet_paired(benchmark, record, spark, data):
    """Each shape: ``spark.read.format("pystore").schema(<columns>)`` against
    ``spark.read.parquet(p).select(<columns>)`` (``count()``: Parquet's own count, which reads no column),
    alternating; rows/s per source and the median of the per-pair ratios (Parquet's time over pystore's)."""
    import time

    from pyspark.sql.types import StructType

    from pystore.spark.source import PystoreDataSource

    def sources(ddl: str) -> dict[str, Any]:
        names = [c.split()[0] for c in ddl.split(", ")]
        schema = StructType.fromDDL(ddl)
        # the floor gets as many partitions and rows as pystore's read
        parts = len(PystoreDataSource({"path": data["root"]}).reader(schema).partitions())
        return {
            "pystore": lambda: spark.read.format("pystore").schema(ddl).load(data["root"]),
            "parquet": lambda: spark.read.parquet(data["parquet"]).select(*names),
            "floor": lambda: (spark.read.format("arrowfloor").schema(ddl).option("rows", N)
                              .option("partitions", parts).load()),
        }

    def run_all() -> dict[str, dict[str, list[float]]]:
        times: dict[str, dict[str, list[float]]] = {}
        for shape, (ddl, q) in _narrow_shapes().items():
            src = sources(ddl)
            if shape == "count() of 1 column":
                src["parquet"] = lambda: spark.read.parquet(data["parquet"])
            seen = {name: q(src[name]()) for name in src}  # warm-up round of each
            assert seen["pystore"] == seen["parquet"], "%s: pystore %r, parquet %r" % (shape, seen["pystore"],
                                                                                          seen["parquet"])
            if isinstance(seen["floor"], tuple):  # the floor's rows differ, their number does not
                assert seen["floor"][0] == N, seen["floor"]
            elif seen["floor"] != -1:
                assert seen["floor"] in (N, N * SIZE), seen["floor"]
            if shape.endswith("hashed"):
                assert seen["pystore"][:2] == (data["count"], data["crc_sum"]), seen
            for _ in range(PAIRED_ROUNDS):
                for name in src:
                    t = time.perf_counter()
                    got = q(src[name]())
                    times.setdefault(shape, {}).setdefault(name, []).append(time.perf_counter() - t)
                    assert got == seen[name], "%s on %s gave %r" % (shape, name, got)
        return times

    _report_paired(record, benchmark.pedantic(run_all, rounds=1, iterations=1), "narrow ")


# ---------------------------------------------------------------------------------------------------------
# planning a commit-log read on the driver: before every query's tasks start
# ---------------------------------------------------------------------------------------------------------


def test_spark_plan_commit_log(benchmark, record, data):
    """``plan_commit_log_slices`` of the 1 M-message store into two slices (what a ``local[2]`` read plans),
    against a walk of every record header of its files (what the planner did before it cut at the records
    the consume queues point at); ``paired_ratio`` is the walk's time over the plan's, round by round."""
    import time

    from pystore.columns._arrow_plan import split_points
    from pystore.log._mapped_file import MappedFile
    from pystore.spark import layout
    from pystore.spark.batch import plan_commit_log_slices

    def walk() -> int:
        ends = 0
        for path in layout.commit_log_files(data["root"]):
            mf = MappedFile(path, -1, read_only=True)
            try:
                ends += split_points(mf, 0)[1]
            finally:
                mf.close()
        return ends

    walks: list[float] = []

    def timed_walk() -> None:                   # untimed by the benchmark: its setup before each round
        t = time.perf_counter()
        walk()
        walks.append(time.perf_counter() - t)

    parts = benchmark.pedantic(lambda: plan_commit_log_slices(data["root"], 256 << 20, 2), setup=timed_walk,
                               rounds=10, iterations=1, warmup_rounds=1)
    assert len(parts) == 2, parts
    mine = list(benchmark.stats.stats.data)
    ratios = sorted(w / m for w, m in zip(walks[-len(mine):], mine, strict=True))
    record("plan a commit-log read of 1 M records (2 slices) vs walking their headers", msgs_per_op=0,
           paired_ratio=ratios[len(ratios) // 2], paired_ratios=ratios)


# ---------------------------------------------------------------------------------------------------------
# a streaming query draining the store: readStream (Trigger.AvailableNow) into the noop sink
# ---------------------------------------------------------------------------------------------------------


def _drain(
    spark: Any,
    root: str,
    checkpoint: str,
    steady: list[float] | None = None,
    schema: str | None = None,
    spark_rates: list[float] | None = None,
    **options: Any,
) -> float:
    """One drain's wall time (``start()`` to the end of ``awaitTermination()``); ``steady`` gets the seconds
    of its micro-batches' ``addBatch`` (the tasks: decode, Arrow into the JVM, the sink), ``spark_rates`` the
    rate Spark's progress reports for the drain (its rows over its micro-batches' ``triggerExecution``: what
    ``processedRowsPerSecond`` says of each). ``schema``: a user read schema (the columns the stream reads)."""
    import time

    reader = spark.readStream.format("pystore").option("topics", benchlib.TOPIC)
    if schema is not None:
        reader = reader.schema(schema)
    for k, v in options.items():
        reader = reader.option(k, v)
    t = time.perf_counter()
    q = (reader.load(root).writeStream.format("noop").option("checkpointLocation", checkpoint)
         .trigger(availableNow=True).start())
    q.awaitTermination(600)
    took = time.perf_counter() - t
    if q.exception() is not None:
        raise RuntimeError(str(q.exception()))
    batches = [p for p in q.recentProgress if p["numInputRows"] > 0]
    rows = sum(p["numInputRows"] for p in batches)
    assert rows == N, "the stream read %d rows, %d were put" % (rows, N)
    if steady is not None:
        steady.append(sum(p["durationMs"].get("addBatch", 0) for p in batches) / 1000.0)
    if spark_rates is not None:
        spark_rates.append(rows / (sum(p["durationMs"].get("triggerExecution", 0) for p in batches) / 1000.0))
    return took


def test_spark_stream_drain(benchmark, record, spark, data, tmp_path):
    """A query started on the store drains its N messages (4 queues) and stops: rows/s from the start of
    the query to its end (the query's start, planning and Spark's per-batch commit included), and the
    steady rate inside the drain, N over the micro-batches' summed ``addBatch`` (``steady_msgs_per_s``,
    median of the rounds)."""
    import statistics

    rounds = iter(range(100))
    steady: list[float] = []
    spark_rates: list[float] = []
    took = benchmark.pedantic(
        lambda: _drain(spark, data["root"], str(tmp_path / ("c%d" % next(rounds))), steady, None, spark_rates),
        rounds=ROUNDS, iterations=1, warmup_rounds=1,
    )
    rate = N / statistics.median(steady[1:] or steady)        # the warm-up round left out
    spark_rate = statistics.median(spark_rates[1:] or spark_rates)
    m = record("spark_stream_drain_1m_128", msgs_per_op=N, payload_per_op=N * SIZE, steady_msgs_per_s=rate,
               spark_processed_rows_per_s=spark_rate)
    print("stream drain: %.2f M rows/s wall (last round %.2f s), %.2f M rows/s steady (over addBatch: %s s), "
          "%.2f M rows/s as Spark's progress reports it (over triggerExecution)"
          % ((m.get("msgs_per_s") or 0) / 1e6, took, rate / 1e6, " ".join("%.2f" % x for x in steady[1:]),
             spark_rate / 1e6))


def test_spark_stream_drain_narrow_vs_full_paired(benchmark, record, spark, data, tmp_path):
    """Drains of the N messages alternating: every column, and a narrow schema (``queue_offset,
    store_timestamp, body``) into the noop sink; wall rows/s, steady rows/s (over ``addBatch``) and the
    median ratio of the pairs (the full drain's time over the narrow one's)."""
    import statistics

    turn = iter(range(1000))
    times: dict[str, list[float]] = {"full": [], "narrow": []}
    steady: dict[str, list[float]] = {"full": [], "narrow": []}
    spark_rates: dict[str, list[float]] = {"full": [], "narrow": []}

    def run_all() -> None:
        for r in range(PAIRED_ROUNDS // 2 + 2):     # the first pair warms up
            for name, schema in (("full", None), ("narrow", NARROW)):
                ck = str(tmp_path / ("d%d" % next(turn)))
                took = _drain(spark, data["root"], ck, steady[name] if r else None, schema,
                              spark_rates[name] if r else None)
                if r:
                    times[name].append(took)

    benchmark.pedantic(run_all, rounds=1, iterations=1)
    print("stream drain as Spark's progress reports it (over triggerExecution): narrow %.2f M rows/s, full %.2f M"
          % (statistics.median(spark_rates["narrow"]) / 1e6, statistics.median(spark_rates["full"]) / 1e6))
    for what, by in (("wall", times), ("addBatch", steady)):
        ratios = sorted(f / n for f, n in zip(by["full"], by["narrow"], strict=True))
        med = {n: statistics.median(ts) for n, ts in by.items()}
        record(
            "stream drain narrow vs full (%s): %.2f vs %.2f M rows/s" % (
                what, N / med["narrow"] / 1e6, N / med["full"] / 1e6),
            msgs_per_op=0,
            paired_ratio=statistics.median(ratios),
            paired_ratios=ratios,
        )
        print("stream drain %-8s narrow %.3f s (%.2f M rows/s)  full %.3f s (%.2f M rows/s)  ratio median %.2f, "
              "pairs %s" % (what, med["narrow"], N / med["narrow"] / 1e6, med["full"], N / med["full"] / 1e6,
                            statistics.median(ratios), " ".join("%.2f" % r for r in ratios)))


# ---------------------------------------------------------------------------------------------------------
# a small store: one commit-log file, split for every core (minPartitions default) or not (minPartitions=1)
# ---------------------------------------------------------------------------------------------------------

N_SMALL = int(os.environ.get("PYSTORE_BENCH_SPARK_SMALL_N", 250_000))


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> dict[str, Any]:
    api = benchlib.store_api()
    Message, MessageBatch = api["Message"], api["MessageBatch"]
    base = tmp_path_factory.mktemp("bench-spark-small")
    root = str(base / "store")
    bodies = benchlib.payloads(N_SMALL, SIZE)
    with api["MessageStore"].open(root, mapped_file_size_commit_log=256 << 20, message_index_enable=False) as store:
        for s in range(0, N_SMALL, 64):
            r = store.put_messages(MessageBatch([Message(benchlib.TOPIC, b) for b in bodies[s : s + 64]]))
            assert r.status.name == "PUT_OK", r
    yield {"root": root, "count": N_SMALL, "crc_sum": sum(zlib.crc32(b) for b in bodies)}
    shutil.rmtree(str(base), ignore_errors=True)


def _run_small(benchmark: Any, record: Any, label: str, df: Any, data: dict[str, Any]) -> dict[str, Any]:
    from pyspark.sql import functions as F

    def q() -> tuple[int, int]:
        r = df.agg(F.count(F.lit(1)).alias("n"), F.sum(F.crc32("body")).alias("crc")).first()
        return int(r.n), int(r.crc)

    n, crc = benchmark.pedantic(q, rounds=ROUNDS, iterations=1, warmup_rounds=1)
    assert (n, crc) == (data["count"], data["crc_sum"]), label
    m = record(label, msgs_per_op=n, payload_per_op=n * SIZE)
    RESULTS[label] = m
    return m


def test_spark_read_small_store_one_partition(benchmark, record, spark, small):
    df = spark.read.format("pystore").option("minPartitions", 1).option("bytes_per_partition", 1 << 40).load(small["root"])
    assert df.rdd.getNumPartitions() == 1
    _run_small(benchmark, record, "spark_read_small_1_partition", df, small)


def test_spark_read_small_store_every_core(benchmark, record, spark, small):
    df = spark.read.format("pystore").load(small["root"])
    assert df.rdd.getNumPartitions() >= min(2, os.cpu_count() or 1)
    ours = _run_small(benchmark, record, "spark_read_small_every_core", df, small)
    one = RESULTS.get("spark_read_small_1_partition")
    if one and one.get("msgs_per_s") and ours.get("msgs_per_s"):
        ratio = ours["msgs_per_s"] / one["msgs_per_s"]
        record("small store: every core vs one partition", msgs_per_op=0, paired_ratio=ratio, paired_ratios=[ratio])


# ---------------------------------------------------------------------------------------------------------
# Spark write: df.write.format("pystore") against df.write.parquet of the same DataFrame
# ---------------------------------------------------------------------------------------------------------

N_WRITE = int(os.environ.get("PYSTORE_BENCH_SPARK_WRITE_N", 500_000))


def test_spark_write_pystore_vs_parquet_paired(benchmark, record, spark, tmp_path_factory):
    """One operation: ``df.write.format("pystore").mode("append").save(root)`` of N_WRITE rows (topic, 128 B
    body, a tag, one key, four queues; the DataFrame cached in Spark) into a new store; before each round,
    untimed, ``df.write.parquet`` of the same DataFrame into a new folder. ``paired_ratio``: pystore's rows/s
    over Parquet's, round by round (target >= 0.5x)."""
    from pyspark.sql import functions as F

    api = benchlib.store_api()
    base = tmp_path_factory.mktemp("bench-spark-write")
    df = spark.range(N_WRITE).select(
        F.lit(benchlib.TOPIC).alias("topic"),
        F.unhex(F.lpad(F.hex(F.col("id") * 7919), 2 * SIZE, "a")).alias("body"),
        F.concat(F.lit("Tag"), (F.col("id") % 10).cast("string")).alias("tags"),
        F.array(F.format_string("k%07d", F.col("id"))).alias("keys"),
        (F.col("id") % QUEUES).cast("int").alias("queue_id"),
    ).cache()
    assert df.count() == N_WRITE
    turn = iter(range(1 << 30))
    roots: list[str] = []

    def parquet() -> None:
        i = next(turn)
        df.write.parquet(str(base / ("parquet-%d" % i)))
        shutil.rmtree(str(base / ("parquet-%d" % i)), ignore_errors=True)

    def setup() -> tuple[tuple[Any, ...], dict[str, Any]]:
        for r in roots:
            shutil.rmtree(r, ignore_errors=True)
        roots.clear()
        t0 = time.perf_counter()
        parquet()
        ref.append(time.perf_counter() - t0)
        roots.append(str(base / ("store-%d" % next(turn))))
        return (roots[-1],), {}

    def write(root: str) -> None:
        df.write.format("pystore").mode("append").option("mapped_file_size_commit_log", 256 << 20).save(root)

    ref: list[float] = []
    benchmark.group = "spark write"
    benchmark.pedantic(write, setup=setup, rounds=ROUNDS, warmup_rounds=1)
    with api["MessageStore"].open(roots[-1], read_only=True) as store:
        stored = sum(store.get_max_offset_in_queue(benchlib.TOPIC, q) for q in range(QUEUES))
        last = store.get_message("g", benchlib.TOPIC, 0, 0, 1).messages[0]
    assert stored == N_WRITE and len(last.body) == SIZE and last.tags == "Tag0" and last.keys == ["k0000000"]
    benchlib.record_paired(benchmark, record, "spark_write_pystore_vs_parquet", N_WRITE, ref, N_WRITE)
    df.unpersist()
    shutil.rmtree(str(base), ignore_errors=True)
