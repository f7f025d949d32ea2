"""The PySpark data source ``pystore`` (docs/api.md "Spark — pystore.spark"), with a real local Spark session.

One ``local[2]`` session serves the whole module (startup costs 7-14 s on two cores); every DataFrame is
built afresh per query. What a read returns is checked against ``reference_codec`` (the tests' own
docs/format.md decoder, with ``struct``), never against pystore's decoder. The module skips when PySpark or
Java is missing.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="the spark extra (pyspark) is not installed")
pytest.importorskip("pyarrow", reason="the spark extra (pyarrow) is not installed")
if not (shutil.which("java") or os.environ.get("JAVA_HOME")):
    pytest.skip("Spark needs Java (no java on PATH, no JAVA_HOME)", allow_module_level=True)

import reference_codec as ref  # noqa: E402
from spark_helpers import (  # noqa: E402
    RocketMQStoreWriter,
    plain_rows,
    project_rows,
    ref_row,
    scan_commit_log,
    sort_rows,
    spark_rows,
    start_spark,
)

from pystore import Message, MessageStore  # noqa: E402

pytestmark = pytest.mark.spark

BASE = 1_700_000_000_000
TOPICS = ("T0", "T1", "T2")
N_MAIN = 1200


class StepClock:
    """Store time under the test's control: ``now`` milliseconds, moved by the test."""

    def __init__(self, now: int = BASE) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


@pytest.fixture(scope="module")
def spark():
    session = start_spark("pystore-tests")
    yield session
    session.stop()


def message(
    i: int, topic: str | None = None, queue_id: int | None = None, body: bytes | None = None
) -> Message:
    """Message ``i`` of the main store: varied bodies (empty, binary, up to ~300 B), tags, keys, properties
    (non-ASCII too) and born hosts (IPv4 and IPv6)."""
    if body is None:
        body = b"" if i % 97 == 0 else (b"m%d-" % i + bytes(range(256)))[: 5 + (i * 37) % 300]
    props = {"seq": str(i), "ключ": "значение %d" % i} if i % 4 else None
    return Message(
        topic or TOPICS[i % 3],
        body,
        tags=("tag%d" % (i % 5)) if i % 3 else None,
        keys=["k%d" % i, "grp%d" % (i % 7)] if i % 2 else None,
        properties=props,
        queue_id=(i % 4) if queue_id is None else queue_id,
        flag=i % 3,
        born_timestamp=BASE - 1000 + i,
        born_host=("2001:db8::%x" % (i + 1), 30000 + i)
        if i % 11 == 0
        else ("10.1.%d.%d" % (i // 250, i % 250), 40000),
    )


#: Small files for every store of this module (a default index file alone preallocates 420 MB).
SMALL = {
    "mapped_file_size_commit_log": 64 * 1024,
    "mapped_file_size_consume_queue": 64 * 20,
    "max_hash_slot_num": 1024,
    "max_index_num": 4096,
}


def put_all(root: str, msgs: list[Message], clock: StepClock | None = None, **config: Any) -> None:
    for k, v in SMALL.items():
        config.setdefault(k, v)
    if clock is not None:
        config["clock"] = clock
    with MessageStore.open(root, **config) as store:
        for m in msgs:
            if clock is not None:
                clock.now += 1
            r = store.put_message(m)
            assert r.status.name == "PUT_OK", r


@pytest.fixture(scope="module")
def main_store(tmp_path_factory) -> dict[str, Any]:
    """The main store (64 KiB commit-log files, 64-unit consume-queue files) and its reference rows."""
    root = str(tmp_path_factory.mktemp("spark") / "main")
    msgs = [message(i) for i in range(N_MAIN)]
    put_all(root, msgs, StepClock())
    rows = [ref_row(d) for d in scan_commit_log(root)]
    assert len(rows) == N_MAIN
    return {"root": root, "msgs": msgs, "rows": rows}


def read(spark, root: str, **options: Any):
    r = spark.read.format("pystore")
    for k, v in options.items():
        r = r.option(k, str(v))
    return r.load(root)


# -----------------------------------------------------------------------------------------------------
# batch read
# -----------------------------------------------------------------------------------------------------


def test_schema_is_exact(spark, main_store):
    from pystore.spark import DDL, spark_schema

    df = read(spark, main_store["root"])
    assert df.schema == spark_schema()
    assert df.columns == [
        "topic",
        "queue_id",
        "queue_offset",
        "commit_log_offset",
        "store_size",
        "body",
        "tags",
        "keys",
        "properties",
        "flag",
        "sys_flag",
        "born_timestamp",
        "store_timestamp",
        "born_host",
        "store_host",
        "reconsume_times",
        "prepared_transaction_offset",
        "body_crc",
        "msg_id",
    ]
    want = ("struct<" + ",".join(part.replace(" ", ":", 1) for part in DDL.split(", ")) + ">").lower()
    assert df.schema.simpleString().lower() == want


def test_every_message_reads_back_exactly(spark, main_store):
    got = spark_rows(read(spark, main_store["root"]))
    assert got == sort_rows(main_store["rows"])
    # and every body equals what was put, in put order
    assert [r["body"] for r in got] == [m.body for m in main_store["msgs"]]
    assert [r["keys"] for r in got] == [m.keys for m in main_store["msgs"]]


def test_timestamps_are_instants(spark, main_store):
    """The same instant whatever the session time zone."""
    from pyspark.sql import functions as F

    first = main_store["rows"][0]
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    try:
        r = (
            read(spark, main_store["root"])
            .where("commit_log_offset = 0")
            .select(
                F.unix_micros("store_timestamp").alias("us"),
                F.col("store_timestamp").cast("string").alias("s"),
            )
            .first()
        )
    finally:
        spark.conf.set("spark.sql.session.timeZone", "UTC")
    assert r.us == first["store_timestamp"]
    ny = datetime.fromtimestamp(first["store_timestamp"] / 1e6, UTC) - timedelta(hours=5)
    assert r.s.startswith(ny.strftime("%Y-%m-%d %H:%M"))


@pytest.mark.parametrize(
    "options, keep",
    [
        ({"topic": "T1"}, lambda r: r["topic"] == "T1"),
        ({"topic": "T0,T2"}, lambda r: r["topic"] in ("T0", "T2")),
        ({"queue_id": 2}, lambda r: r["queue_id"] == 2),
        ({"topic": "T2", "queue_id": 1}, lambda r: r["topic"] == "T2" and r["queue_id"] == 1),
        ({"topic": "nope"}, lambda r: False),
        (
            {"start_time": BASE + 301, "end_time": BASE + 700},
            lambda r: (BASE + 301) * 1000 <= r["store_timestamp"] < (BASE + 700) * 1000,
        ),
        (
            {"start_time": "2023-11-14T22:13:20.301", "end_time": "2023-11-14T23:13:20.700+01:00"},
            lambda r: (BASE + 301) * 1000 <= r["store_timestamp"] < (BASE + 700) * 1000,
        ),
        (
            {"topic": "T1", "start_time": "2023-11-14T22:13:21Z"},
            lambda r: r["topic"] == "T1" and r["store_timestamp"] >= (BASE + 1000) * 1000,
        ),
    ],
)
def test_options_filter(spark, main_store, options, keep):
    assert datetime.fromtimestamp(BASE / 1000, UTC).isoformat() == "2023-11-14T22:13:20+00:00"
    got = spark_rows(read(spark, main_store["root"], **options))
    want = sort_rows([r for r in main_store["rows"] if keep(r)])
    assert got == want
    assert options.get("topic") == "nope" or got


def test_bad_options_are_named(spark, main_store):
    with pytest.raises(Exception, match="start_time"):
        read(spark, main_store["root"], start_time="yesterday").count()
    with pytest.raises(Exception, match="no store at"):
        read(spark, main_store["root"] + "-missing").count()


def test_partitioned_read_equals_single_partition(spark, main_store):
    root = main_store["root"]
    one = read(spark, root, bytes_per_partition=1 << 30)
    many = read(spark, root, bytes_per_partition=12_000)
    n_files = len(os.listdir(os.path.join(root, "commitlog")))
    assert one.rdd.getNumPartitions() == n_files
    assert many.rdd.getNumPartitions() > 3 * n_files
    assert spark_rows(many) == spark_rows(one) == sort_rows(main_store["rows"])
    by_queue = read(spark, root, topic="T0,T1,T2", messages_per_partition=60)
    assert by_queue.rdd.getNumPartitions() == 12 * 2  # 12 queues of 100 messages
    assert spark_rows(by_queue) == spark_rows(one)


def test_several_roots_read_as_one(spark, main_store, tmp_path):
    other = str(tmp_path / "other")
    put_all(
        other,
        [message(i, topic="T9") for i in range(150)],
        StepClock(BASE + 50_000),
        store_host=("2001:db8::42", 10911),
    )
    want = sort_rows(main_store["rows"] + [ref_row(d) for d in scan_commit_log(other)])
    got = spark_rows(read(spark, main_store["root"] + "," + other))
    assert got == want
    assert any(r["store_host"] == "[2001:db8::42]:10911" and len(r["msg_id"]) == 56 for r in got)
    agg = {
        r.topic: r["count"]
        for r in read(spark, main_store["root"] + "," + other).groupBy("topic").count().collect()
    }
    assert agg == {"T0": 400, "T1": 400, "T2": 400, "T9": 150}


def test_bad_crc_fails_naming_file_and_offset(spark, main_store, tmp_path):
    root = str(tmp_path / "bad")
    shutil.copytree(main_store["root"], root)
    victim = main_store["rows"][5]
    assert victim["body"]
    files = sorted(os.listdir(os.path.join(root, "commitlog")))
    path = os.path.join(root, "commitlog", files[0])
    rec = ref.decode(open(path, "rb").read(), victim["commit_log_offset"])
    body_pos = victim["commit_log_offset"] + rec["body_len_pos"] + 4
    with open(path, "r+b") as f:
        f.seek(body_pos)
        b = f.read(1)
        f.seek(body_pos)
        f.write(bytes([b[0] ^ 0xFF]))
    with pytest.raises(Exception) as exc:
        read(spark, root).count()
    text = str(exc.value)
    assert "CRC" in text and path in text and "offset %d" % victim["commit_log_offset"] in text
    with pytest.raises(Exception, match="CRC"):  # through the consume queue too
        read(spark, root, topic=victim["topic"]).count()
    rows = spark_rows(read(spark, root, verify_crc="false"))
    assert len(rows) == N_MAIN
    bad = [r for r in rows if r["commit_log_offset"] == victim["commit_log_offset"]][0]
    assert bad["body"] != victim["body"] and len(bad["body"]) == len(victim["body"])


def test_live_store_read_only(spark, tmp_path):
    """A store with a running writer: a read sees every message put before it."""
    root = str(tmp_path / "live")
    with MessageStore.open(root, **SMALL) as store:
        for i in range(300):
            assert store.put_message(message(i)).status.name == "PUT_OK"
        assert read(spark, root).count() == 300
        for i in range(300, 400):
            store.put_message(message(i))
        assert read(spark, root).count() == 400
        assert read(spark, root, topic="T1").count() == len([i for i in range(400) if i % 3 == 1])


# -----------------------------------------------------------------------------------------------------
# a store written in RocketMQ's own format (by the reference codec)
# -----------------------------------------------------------------------------------------------------

LONG_TOPIC = "L" * 140  # > 127 characters: a V2 record


@pytest.fixture(scope="module")
def rocketmq_store(tmp_path_factory) -> dict[str, Any]:
    root = str(tmp_path_factory.mktemp("rmq") / "store")
    w = RocketMQStoreWriter(root, cl_size=4096, cq_units=8, store_host=("2001:db8:0:0:1::1", 10911))
    w.start_queue_at("TopicTest", 1, 5)
    v6 = ["::1", "::", "1::", "1:0:0:2:0:0:0:3", "fe80::1:0:0:1", "2001:db8::ff00:42:8329", "1:2:3:4:5:6:7:8"]
    for i in range(90):
        # properties in a Java HashMap order, UNIQ_KEY and CLUSTER as a broker adds them
        props = (
            "KEYS\x01key%d other\x02UNIQ_KEY\x01UNIQ%04d\x02CLUSTER\x01DefaultCluster\x02TAGS\x01Tag%d\x02"
            % (i, i, i % 3)
        ).encode()
        if i % 10 == 3:
            props += "bad\x01va\udcffl\x02".encode("utf-8", "surrogateescape")  # invalid UTF-8 in a value
        if i % 10 == 4:
            props += b"dup\x01first\x02dup\x01second\x02\x01novalue\x02noname\x01\x02"
        born = (v6[i % len(v6)], 50000 + i) if i % 5 == 0 else ("127.0.0.1", 50000 + i)
        topic = LONG_TOPIC if i % 15 == 7 else "TopicTest"
        w.put(
            topic,
            b"Hello RocketMQ %d" % i * (1 + i % 4),
            props,
            queue_id=i % 3,
            born_host=born,
            born_ts=BASE + i,
            store_ts=BASE + 500 + i,
            flag=i,
            reconsume_times=i % 2,
            sys_flag=0x4 if i == 40 else 0,
        )  # record 40: a prepared transaction (no consume-queue unit)
    w.close()
    return {"root": root, "writer": w, "rows": [ref_row(d) for d in w.records]}


def test_rocketmq_store_reads_like_the_reference(spark, rocketmq_store):
    root = rocketmq_store["root"]
    assert len(os.listdir(os.path.join(root, "commitlog"))) > 3
    got = spark_rows(read(spark, root))
    want = sort_rows(rocketmq_store["rows"])
    assert got == want
    assert {len(r["msg_id"]) for r in got} == {56}
    assert any(r["topic"] == LONG_TOPIC for r in got)
    weird = [r for r in got if "bad" in r["properties"]]
    assert weird and all(r["properties"]["bad"] == "va\ufffdl" for r in weird)
    dup = [r for r in got if "dup" in r["properties"]]
    assert dup and all(r["properties"]["dup"] == "second" and "" not in r["properties"] for r in dup)
    hosts = {r["born_host"] for r in got}
    for a in ["::1", "::", "1::", "1:0:0:2::3", "fe80::1:0:0:1", "2001:db8::ff00:42:8329", "1:2:3:4:5:6:7:8"]:
        assert "[%s]:" % a in "".join(hosts), a


def test_rocketmq_store_through_consume_queues(spark, rocketmq_store):
    root = rocketmq_store["root"]
    got = spark_rows(read(spark, root, topic="TopicTest"))
    want = sort_rows(
        [r for r in rocketmq_store["rows"] if r["topic"] == "TopicTest" and r["sys_flag"] & 0xC == 0]
    )
    assert got == want
    q1 = spark_rows(read(spark, root, topic="TopicTest", queue_id=1))
    assert [r["queue_offset"] for r in q1] == list(range(5, 5 + len(q1)))  # the queue starts at 5 (fillers)
    assert spark_rows(read(spark, root, topic=LONG_TOPIC)) == sort_rows(
        [r for r in rocketmq_store["rows"] if r["topic"] == LONG_TOPIC]
    )


# -----------------------------------------------------------------------------------------------------
# streaming read
# -----------------------------------------------------------------------------------------------------


def await_available_now(q) -> None:
    """Wait for an availableNow query to finish, and raise what it failed with. ``awaitTermination(t)``
    returns False when ``t`` passes first, and the query is then still running: going on would check a part
    of its output (a slow 2-core machine runs Spark many times slower than a workstation)."""
    try:
        finished = q.awaitTermination(240)
    finally:
        if q.isActive:
            q.stop()
    if q.exception() is not None:
        raise q.exception()
    assert finished, "the availableNow query did not finish within 240 s"


def _run_stream(spark, root: str, out: str, ckpt: str, **options: Any) -> int:
    """One availableNow run into a Parquet sink; the number of micro-batches it made."""
    r = spark.readStream.format("pystore").option("topics", "S1,S2")
    for k, v in options.items():
        r = r.option(k, str(v))
    q = (
        r.load(root)
        .writeStream.format("parquet")
        .option("path", out)
        .option("checkpointLocation", ckpt)
        .trigger(availableNow=True)
        .start()
    )
    await_available_now(q)
    return len([p for p in q.recentProgress if p["numInputRows"] > 0])


def test_stream_two_runs_on_one_checkpoint_read_each_message_once(spark, tmp_path):
    import pyspark

    root, out, ckpt = str(tmp_path / "s"), str(tmp_path / "out"), str(tmp_path / "ckpt")
    clock = StepClock()
    put_all(root, [message(i, topic=("S1", "S2", "S3")[i % 3], queue_id=i % 2) for i in range(240)], clock)
    batches = _run_stream(spark, root, out, ckpt, maxMessagesPerTrigger=70)
    first = spark.read.parquet(out).count()
    assert first == 160  # S1 and S2 only, S3 is not subscribed
    if tuple(int(x) for x in pyspark.__version__.split(".")[:2]) >= (4, 2):
        assert batches >= 3  # 160 messages, at most 70 per micro-batch
    # more messages, and two new queues (S1/5, S2/7), while the store keeps running
    with MessageStore.open(root, clock=clock, **SMALL) as store:
        for i in range(240, 420):
            clock.now += 1
            m = message(
                i, topic=("S1", "S2", "S3")[i % 3], queue_id=(i % 2) if i < 400 else (5 if i % 2 else 7)
            )
            assert store.put_message(m).status.name == "PUT_OK"
        _run_stream(spark, root, out, ckpt, maxMessagesPerTrigger=70)
    got = spark_rows(spark.read.parquet(out))
    want = sort_rows([ref_row(d) for d in scan_commit_log(root) if d["topic"] in ("S1", "S2")])
    assert len(want) == 280
    assert got == want  # exactly once: no loss, no duplicate
    offsets = sorted((n for n in os.listdir(os.path.join(ckpt, "offsets")) if n.isdigit()), key=int)
    last = json.loads(open(os.path.join(ckpt, "offsets", offsets[-1])).read().splitlines()[-1])
    assert sum(last.values()) == 280 and {"S1/0", "S1/1", "S2/0", "S2/1"} < set(last)
    assert {k for k in last if k.endswith(("/5", "/7"))}  # the queues that appeared later


def test_stream_starting_offsets_and_data_loss(spark, tmp_path):
    root = str(tmp_path / "loss")
    put_all(root, [message(i, topic="S1", queue_id=0, body=b"x" * 200) for i in range(700)], StepClock())
    files = sorted(os.listdir(os.path.join(root, "commitlog")))
    assert len(files) >= 3
    os.unlink(os.path.join(root, "commitlog", files[0]))  # the store's cleaning deleted the oldest file
    kept = [d for d in scan_commit_log(root)]
    lo = kept[0]["queue_offset"]
    assert lo > 0

    def run(name: str, **options: Any) -> list[Any]:
        r = spark.readStream.format("pystore").option("topics", "S1")
        for k, v in options.items():
            r = r.option(k, str(v))
        q = (
            r.load(root)
            .writeStream.format("memory")
            .queryName(name)
            .option("checkpointLocation", str(tmp_path / ("ck-" + name)))
            .trigger(availableNow=True)
            .start()
        )
        await_available_now(q)
        return spark.sql("select queue_offset from %s" % name).collect()

    assert sorted(r.queue_offset for r in run("earliest")) == list(range(lo, 700))
    assert run("latest", startingOffsets="latest") == []
    assert sorted(r.queue_offset for r in run("json", startingOffsets=json.dumps({"S1/0": 690}))) == list(
        range(690, 700)
    )
    with pytest.raises(Exception, match="failOnDataLoss"):
        run("lossy", startingOffsets=json.dumps({"S1/0": 0}))
    got = run("skip", startingOffsets=json.dumps({"S1/0": 0}), failOnDataLoss="false")
    assert sorted(r.queue_offset for r in got) == list(range(lo, 700))
    with pytest.raises(Exception, match='"topics" is required'):
        q = (
            spark.readStream.format("pystore")
            .load(root)
            .writeStream.format("memory")
            .queryName("nope")
            .option("checkpointLocation", str(tmp_path / "ck-nope"))
            .start()
        )
        try:
            q.awaitTermination(60)
        finally:
            q.stop()


def test_share_limit_is_fair_and_exact():
    from pystore.spark.stream import share_limit

    start = {"a/0": 0, "a/1": 10, "b/0": 5}
    latest = {"a/0": 100, "a/1": 11, "b/0": 5}
    end = share_limit(start, latest, 50)
    assert sum(end[k] - start[k] for k in end) == 50 and end["b/0"] == 5 and end["a/1"] <= 11
    assert share_limit(start, latest, 1000) == latest
    assert sum(v - start[k] for k, v in share_limit(start, {"a/0": 3, "a/1": 13, "b/0": 8}, 1).items()) == 1


class _Conf:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)


class _Registry:
    def __init__(self) -> None:
        self.registered: list[type] = []

    def register(self, cls: type) -> None:
        self.registered.append(cls)


class _ClassicSession:
    """What register() uses of a classic SparkSession: sparkContext.defaultParallelism, dataSource."""

    def __init__(self, parallelism: int) -> None:
        self.sparkContext = type("SC", (), {"defaultParallelism": parallelism})()
        self.conf = _Conf({})
        self.dataSource = _Registry()


class _ConnectSession:
    """A Spark Connect session: no sparkContext (PySparkNotImplementedError), settings through conf."""

    def __init__(self, conf: dict[str, str]) -> None:
        self.conf = _Conf(conf)
        self.dataSource = _Registry()

    @property
    def sparkContext(self) -> Any:
        from pyspark.errors import PySparkNotImplementedError

        raise PySparkNotImplementedError(errorClass="NOT_IMPLEMENTED", messageParameters={"feature": "sparkContext"})


def test_register_carries_spark_default_parallelism_to_the_planner(main_store):
    from pyspark import cloudpickle

    import pystore.spark
    from pystore.spark.source import PystoreDataSource

    classic = _ClassicSession(5)
    pystore.spark.register(classic)
    (cls,) = classic.dataSource.registered
    assert issubclass(cls, PystoreDataSource) and cls.name() == "pystore" and cls.parallelism == 5
    connect = _ConnectSession({"spark.default.parallelism": "3"})
    pystore.spark.register(connect)
    assert connect.dataSource.registered[0].parallelism == 3
    for conf in ({}, {"spark.default.parallelism": "lots"}):
        bare = _ConnectSession(conf)
        pystore.spark.register(bare)
        assert bare.dataSource.registered == [PystoreDataSource]  # planner's cores
    # Spark ships the class to its Python workers with cloudpickle: by value, the parallelism with it
    shipped = cloudpickle.loads(cloudpickle.dumps(cls))
    assert shipped is not PystoreDataSource and shipped.parallelism == 5
    # one queue of 100 messages: 5 partitions for parallelism 5, minPartitions over it
    options = {"path": main_store["root"], "assign": '{"T0": [0]}'}
    ds = shipped(dict(options))
    schema = ds.schema()
    assert len(ds.reader(schema).partitions()) == 5
    assert len(shipped({**options, "minpartitions": "2"}).reader(schema).partitions()) == 2
    assert len(pystore.spark.with_parallelism(7)(dict(options)).reader(schema).partitions()) == 7
    stream = shipped({"path": main_store["root"], "assign": '{"T0": [0]}'}).streamReader(schema)
    start = stream.initialOffset()
    parts = stream.partitions(start, stream.latestOffset(start, None))
    assert len(parts) == 5 and [(p.start, p.end) for p in parts] == [(0, 20), (20, 40), (40, 60), (60, 80), (80, 100)]
    with pytest.raises(ValueError, match="parallelism"):
        pystore.spark.with_parallelism(0)


def test_spark_session_parallelism_sets_the_partitions(spark, main_store):
    import pystore.spark

    assert pystore.spark.default_parallelism(spark) == spark.sparkContext.defaultParallelism == 2
    one_queue = {"assign": '{"T0": [0]}'}
    assert read(spark, main_store["root"], **one_queue).rdd.getNumPartitions() == 2
    try:
        spark.dataSource.register(pystore.spark.with_parallelism(3))  # as register() does on a 3-core session
        df = read(spark, main_store["root"], **one_queue)
        assert df.rdd.getNumPartitions() == 3
        assert [r.queue_offset for r in df.select("queue_offset").collect()] == list(range(100))
        assert read(spark, main_store["root"], minPartitions=4, **one_queue).rdd.getNumPartitions() == 4
    finally:
        pystore.spark.register(spark)
    assert read(spark, main_store["root"], **one_queue).rdd.getNumPartitions() == 2


def test_offsets_behind_latest_as_kafka():
    from pystore.spark import offsets_behind_latest

    p = {"sources": [{"endOffset": '{"a/0": 10, "a/1": 40}', "latestOffset": '{"a/0": 50, "a/1": 40, "b/0": 7}'}]}
    assert offsets_behind_latest(p) == {
        "avgOffsetsBehindLatest": (40 + 0 + 7) / 3,
        "maxOffsetsBehindLatest": 40,
        "minOffsetsBehindLatest": 0,
    }
    p2 = {"sources": [{"endOffset": {"a/0": 5}, "latestOffset": None}, {"endOffset": {"a/0": 5}, "latestOffset": {"a/0": 9}}]}
    assert offsets_behind_latest(p2) is None
    assert offsets_behind_latest(p2, source=1) == {
        "avgOffsetsBehindLatest": 4.0, "maxOffsetsBehindLatest": 4, "minOffsetsBehindLatest": 4,
    }
    assert offsets_behind_latest({"sources": [{"endOffset": None, "latestOffset": {"a/0": 1}}]}) is None


# -----------------------------------------------------------------------------------------------------
# write
# -----------------------------------------------------------------------------------------------------

WRITE_SCHEMA = (
    "topic string, body binary, tags string, keys array<string>, queue_id int, properties map<string,string>"
)


def test_write_round_trip_new_store(spark, tmp_path):
    from pystore.tools import iter_commitlog

    root = str(tmp_path / "w")
    rows = [
        (
            "W%d" % (i % 2),
            b"payload-%d" % i,
            "t%d" % i if i % 2 else None,
            ["a%d" % i, "b"] if i % 3 else None,
            i % 3,
            {"p": str(i), "ü": "ß"} if i % 4 else None,
        )
        for i in range(500)
    ]
    df = spark.createDataFrame(rows, WRITE_SCHEMA).repartition(3)
    (
        df.write.format("pystore")
        .mode("append")
        .option("mapped_file_size_commit_log", 1 << 20)
        .option("max_hash_slot_num", 1024)
        .option("max_index_num", 4096)
        .save(root)
    )
    assert os.path.getsize(os.path.join(root, "commitlog", "%020d" % 0)) == 1 << 20  # a new store's option
    assert (
        not os.listdir(os.path.join(root, ".spark-staging"))
        if os.path.exists(os.path.join(root, ".spark-staging"))
        else True
    )
    stored = list(iter_commitlog(root))
    assert len(stored) == 500
    got = sorted((m.topic, m.body, m.tags, m.keys, m.queue_id, m.properties) for m in stored)
    want = []
    for t, body, tags, keys, q, props in rows:
        p = {}
        if tags:
            p["TAGS"] = tags
        if keys:
            p["KEYS"] = " ".join(keys)
        p.update(props or {})
        want.append((t, body, tags, keys or [], q, p))
    assert got == sorted(want)
    # queue offsets are dense per queue, as the put path assigns them
    for t, q in {(m.topic, m.queue_id) for m in stored}:
        offs = sorted(m.queue_offset for m in stored if (m.topic, m.queue_id) == (t, q))
        assert offs == list(range(len(offs)))
    # keys as one string, body as string, queue_id as long, extra read-only columns ignored: append
    df2 = spark.createDataFrame(
        [("W0", "text body", "k1 k2  k3", 1, 123)],
        "topic string, body string, keys string, queue_id long, queue_offset long",
    )
    (
        df2.write.format("pystore")
        .mode("append")
        .option("mapped_file_size_commit_log", 4096)
        .option("max_hash_slot_num", 1024)
        .option("max_index_num", 4096)
        .save(root)
    )
    last = list(iter_commitlog(root))[-1]
    assert (last.body, last.keys, last.queue_id) == (b"text body", ["k1", "k2", "k3"], 1)
    assert (
        os.path.getsize(os.path.join(root, "commitlog", "%020d" % 0)) == 1 << 20
    )  # the store keeps its geometry


def test_write_what_was_read(spark, main_store, tmp_path):
    """A pystore read written back to another store: the same messages (topic, body, tags, keys, props)."""
    root = str(tmp_path / "copy")
    (
        read(spark, main_store["root"], topic="T2")
        .write.format("pystore")
        .mode("append")
        .option("message_index_enable", "false")
        .save(root)
    )
    got = spark_rows(read(spark, root))
    want = [r for r in main_store["rows"] if r["topic"] == "T2"]

    def key(r: dict[str, Any]) -> tuple[Any, ...]:
        return (
            r["queue_id"],
            r["body"],
            r["tags"],
            tuple(r["keys"]),
            tuple(sorted(r["properties"].items())),
        )

    assert sorted(map(key, got)) == sorted(map(key, want))


@pytest.mark.parametrize(
    "rows, schema, options, problem",
    [
        ([("W", b"x"), (None, b"y")], "topic string, body binary", {}, "row 1: topic is null"),
        (
            [("W", b"x"), ("bad topic!", b"y")],
            "topic string, body binary",
            {},
            "topic 'bad topic!' has characters outside [%|a-zA-Z0-9_-]",
        ),
        ([("W", None)], "topic string, body binary", {}, "row 0: body is null"),
        (
            [("W", b"x" * 300)],
            "topic string, body binary",
            {"max_message_size": 200},
            "body of 300 bytes is larger than max_message_size (200)",
        ),
        ([("W", 5)], "topic string, body int", {}, "column 'body' is int, expected binary or string"),
        ([(b"x",)], "body binary", {}, "column 'topic' is missing"),
        (
            [("W", b"x", "t")],
            "topic string, body binary, tag string",
            {},
            "column 'tag' is not a message field",
        ),
        (
            [("W", b"x", {"k": "v\x01"})],
            "topic string, body binary, properties map<string,string>",
            {},
            "contains \\x01 or \\x02",
        ),
        ([("W", b"x", -1)], "topic string, body binary, queue_id int", {}, "queue_id -1 is out of range"),
        (
            [("W", b"x", {"k": "v" * 40000})],
            "topic string, body binary, properties map<string,string>",
            {},
            "more than the record format's 32767",
        ),
    ],
)
def test_write_refuses_bad_rows(spark, tmp_path, rows, schema, options, problem):
    root = str(tmp_path / "w")
    put_all(root, [Message("W", b"before")])
    df = spark.createDataFrame(rows, schema).coalesce(1)
    w = df.write.format("pystore").mode("append")
    for k, v in options.items():
        w = w.option(k, str(v))
    with pytest.raises(Exception) as exc:
        w.save(root)
    assert problem in str(exc.value)
    from pystore.tools import iter_commitlog

    assert [m.body for m in iter_commitlog(root)] == [b"before"]  # nothing became visible
    staging = os.path.join(root, ".spark-staging")
    assert not os.path.exists(staging) or not os.listdir(staging)


def test_write_needs_append_mode(spark, tmp_path):
    df = spark.createDataFrame([("W", b"x")], "topic string, body binary")
    with pytest.raises(Exception, match="(?i)append"):
        df.write.format("pystore").save(str(tmp_path / "w"))
    with pytest.raises(Exception, match="only appends"):
        df.write.format("pystore").mode("overwrite").save(str(tmp_path / "w"))


def test_reference_struct_layout_matches_format_doc():
    """The test writer itself: a record the reference codec encodes is what docs/format.md's hexdump shows."""
    rec = ref.encode(
        "TopicTest",
        b"Hello RocketMQ 0",
        b"a\x011\x02",
        0,
        0,
        0,
        0,
        0,
        0x18BCFE56800,
        ("127.0.0.1", 50000),
        0x18BCFE56864,
        ("192.168.0.1", 10911),
        0,
        0,
    )
    assert struct.unpack_from(">iI", rec) == (len(rec), ref.MAGIC_V1)


# -----------------------------------------------------------------------------------------------------
# the decoder alone (no Spark): small batches, growing buffers
# -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("rows_per_batch", [1, 7, 1000])
def test_decoder_batches_of_any_size(main_store, rocketmq_store, rows_per_batch):
    import pyarrow as pa

    from pystore.spark.batch import Filters, plan_commit_log_slices, read_slice
    from pystore.spark.schema import arrow_schema

    schema = arrow_schema()
    for store in (main_store, rocketmq_store):
        batches = []
        for part in plan_commit_log_slices(store["root"], 1 << 30):
            batches.extend(read_slice(part, Filters([], -1, None, None, True), schema, rows_per_batch))
        assert all(b.num_rows <= rows_per_batch for b in batches)
        for b in batches:
            b.validate(full=True)  # valid UTF-8, offsets, children
        got = pa.Table.from_batches(batches, schema).to_pylist()
        for r in got:
            r["properties"] = dict(r["properties"])
            for c in ("born_timestamp", "store_timestamp"):
                r[c] = (r[c] - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
        assert got == store["rows"]


# -----------------------------------------------------------------------------------------------------
# the decoder on a log that ends mid-record (a slave's transfer, a writer mid-append)
# -----------------------------------------------------------------------------------------------------


def _small_log(root, n=120):
    from pystore import Message, MessageStore

    offsets = []
    with MessageStore.open(root, mapped_file_size_commit_log=64 * 1024, max_hash_slot_num=64,
                           max_index_num=256) as s:
        for i in range(n):
            offsets.append(s.put_message(Message("T0", b"m%d-" % i * 200)).append_message_result.wrote_offset)
    return offsets


def _decode_all(root):
    from pystore.spark.batch import Filters, plan_commit_log_slices, read_slice
    from pystore.spark.schema import arrow_schema

    schema = arrow_schema()
    out = []
    for part in plan_commit_log_slices(str(root), 1 << 30):
        for b in read_slice(part, Filters([], -1, None, None, True), schema):
            out.extend(b.column("commit_log_offset").to_pylist())
    return out


# -----------------------------------------------------------------------------------------------------
# planning a commit-log read: cuts from the consume queues, checked in place and by the readers
# -----------------------------------------------------------------------------------------------------


def _queued_log(root, n=900, queues=3):
    """A store of several 64 KiB commit-log files and ``queues`` queues; the offsets of its records."""
    offsets = []
    with MessageStore.open(root, mapped_file_size_commit_log=64 * 1024, max_hash_slot_num=64,
                           max_index_num=256) as s:
        for i in range(n):
            r = s.put_message(Message("T0", b"m%d-" % i * (10 + i % 37), queue_id=i % queues))
            offsets.append(r.append_message_result.wrote_offset)
    return offsets


def _read_offsets(root, parts):
    from pystore.spark.batch import Filters, read_slice
    from pystore.spark.schema import arrow_schema

    out = []
    for part in parts:
        for b in read_slice(part, Filters([], -1, None, None, True), arrow_schema()):
            out.extend(b.column("commit_log_offset").to_pylist())
    return out


def test_plan_cuts_at_queue_boundaries_without_walking_the_records(tmp_path, monkeypatch):
    import pystore.spark.batch as batch

    offsets = _queued_log(tmp_path)
    walk = batch.split_points
    monkeypatch.setattr(batch, "_WALK_BELOW", 0)            # a small store: walked unless told otherwise
    monkeypatch.setattr(batch, "split_points", lambda *a: pytest.fail("the planner walked a file's records"))
    parts = batch.plan_commit_log_slices(str(tmp_path), 8 * 1024)
    files = {p.path for p in parts}
    assert len(files) > 3 and len(parts) > 2 * len(files)
    for path in files:
        mine = [p for p in parts if p.path == path]
        starts = [p.start for p in mine]
        mf = batch.MappedFile(path, -1, read_only=True)
        try:
            every = walk(mf, 1)[0]                          # every record's start in the file
        finally:
            mf.close()
        assert starts[0] == 0 and set(starts) <= set(every) and starts == sorted(set(starts))
        assert [p.end for p in mine] == starts[1:] + [-1]
    assert _read_offsets(tmp_path, parts) == offsets         # every record once, in order
    # at least the parallelism asked for, still without a walk
    few = batch.plan_commit_log_slices(str(tmp_path), 1 << 30, 6)
    assert len(few) >= 6 and _read_offsets(tmp_path, few) == offsets


def test_plan_without_consume_queues_walks_the_files(tmp_path):
    from pystore.spark.batch import plan_commit_log_slices

    offsets = _queued_log(tmp_path)
    with_queues = plan_commit_log_slices(str(tmp_path), 8 * 1024)
    shutil.rmtree(tmp_path / "consumequeue")
    parts = plan_commit_log_slices(str(tmp_path), 8 * 1024)
    assert len(parts) > len({p.path for p in parts})
    assert _read_offsets(tmp_path, parts) == offsets == _read_offsets(tmp_path, with_queues)


def test_plan_skips_a_queue_unit_pointing_inside_a_record(tmp_path, monkeypatch):
    import pystore.spark.batch as batch

    monkeypatch.setattr(batch, "_WALK_BELOW", 0)
    offsets = _queued_log(tmp_path, queues=1)
    # every unit of the queue's first file moved 4 bytes into its record: refused in place, the records walked
    cq = tmp_path / "consumequeue" / "T0" / "0" / ("%020d" % 0)
    units = bytearray(cq.read_bytes())
    for at in range(0, len(units), 20):
        phy, size = struct.unpack_from(">qi", units, at)
        if size > 0:
            struct.pack_into(">q", units, at, phy + 4)
    cq.write_bytes(bytes(units))
    parts = batch.plan_commit_log_slices(str(tmp_path), 8 * 1024)
    assert len({p.path for p in parts if p.start > 0}) > 3
    every = set(offsets)
    assert all(p.start == 0 or int(os.path.basename(p.path)) + p.start in every for p in parts)
    assert _read_offsets(tmp_path, parts) == offsets


def test_a_slice_ending_between_records_is_refused(tmp_path):
    from pystore.errors import StoreCorruptedError
    from pystore.spark.batch import CommitLogSlice

    offsets = _queued_log(tmp_path, n=60)
    path = str(tmp_path / "commitlog" / ("%020d" % 0))
    end = offsets[10] + 4                                   # inside the eleventh record
    with pytest.raises(StoreCorruptedError) as ei:
        _read_offsets(tmp_path, [CommitLogSlice(str(tmp_path), path, 0, end)])
    assert ei.value.path == path and ei.value.offset == end
    assert "not a record boundary" in ei.value.reason
    assert _read_offsets(tmp_path, [CommitLogSlice(str(tmp_path), path, 0, offsets[10])]) == offsets[:10]


def test_a_record_naming_another_offset_is_refused(tmp_path):
    """A record whose PHYSICALOFFSET field is damaged (its body and CRC intact) is not served with that offset
    as its ``commit_log_offset`` (found by the fuzzer: case 39:178)."""
    from pystore.errors import StoreCorruptedError
    from pystore.spark.batch import plan_commit_log_slices

    offsets = _queued_log(tmp_path, n=60)
    path = tmp_path / "commitlog" / ("%020d" % 0)
    data = bytearray(path.read_bytes())
    data[offsets[20] + 28] ^= 0x80                       # the field's high byte
    path.write_bytes(bytes(data))
    with pytest.raises(StoreCorruptedError) as ei:
        _read_offsets(tmp_path, plan_commit_log_slices(str(tmp_path), 1 << 30))
    assert ei.value.offset == offsets[20] and "PHYSICALOFFSET" in ei.value.reason


def test_a_zero_size_record_with_records_after_it_is_refused(tmp_path):
    """A TOTALSIZE zeroed mid-file is not the end of the data when whole records follow: the read refuses
    rather than hide them (found by the fuzzer: case 39:184); zeros after the last record stay the end."""
    from pystore.errors import StoreCorruptedError
    from pystore.spark.batch import plan_commit_log_slices

    offsets = _queued_log(tmp_path, n=60)
    assert _read_offsets(tmp_path, plan_commit_log_slices(str(tmp_path), 1 << 30)) == offsets
    path = tmp_path / "commitlog" / ("%020d" % 0)
    data = bytearray(path.read_bytes())
    data[offsets[30]:offsets[30] + 4] = bytes(4)
    path.write_bytes(bytes(data))
    with pytest.raises(StoreCorruptedError) as ei:
        _read_offsets(tmp_path, plan_commit_log_slices(str(tmp_path), 1 << 30))
    assert ei.value.offset == offsets[30] and "a size of zero" in ei.value.reason


@pytest.mark.parametrize("keep", [8, 40, 300])
def test_decoder_stops_at_a_torn_tail(tmp_path, keep):
    import struct

    from pystore.tools import iter_commitlog

    root = tmp_path / "s"
    offsets = _small_log(root)
    last = list(iter_commitlog(root))[-1]
    end = last.commit_log_offset + last.store_size
    rec = bytearray(last.raw)
    struct.pack_into(">q", rec, 28, end)
    path = os.path.join(str(root), "commitlog", "%020d" % (end - end % (64 * 1024)))
    with open(path, "r+b") as fh:                      # a record half written after the last one
        fh.seek(end % (64 * 1024))
        fh.write(bytes(rec[:keep]))
    assert _decode_all(root) == offsets


def test_decoder_still_refuses_damage_before_valid_records(tmp_path):
    import struct

    from pystore.errors import StoreCorruptedError

    root = tmp_path / "s"
    offsets = _small_log(root)
    k = 10
    path = os.path.join(str(root), "commitlog", "%020d" % 0)
    with open(path, "r+b") as fh:
        fh.seek(offsets[k])
        fh.write(struct.pack(">i", 100))
    with pytest.raises(StoreCorruptedError) as ei:
        _decode_all(root)
    assert (ei.value.path, ei.value.offset) == (path, offsets[k])


def test_decoder_refuses_a_truncated_last_file(tmp_path):
    from pystore.errors import StoreCorruptedError

    root = tmp_path / "s"
    offsets = _small_log(root, 400)
    folder = os.path.join(str(root), "commitlog")
    last = sorted(os.listdir(folder))[-1]
    start = int(last)
    assert start > 0
    k = max(i for i, o in enumerate(offsets) if o >= start) - 1
    os.truncate(os.path.join(folder, last), offsets[k] - start + 50)
    with pytest.raises(StoreCorruptedError) as ei:
        _decode_all(root)
    assert (ei.value.path, ei.value.offset) == (os.path.join(folder, last), offsets[k])


def test_export_timestamps_have_one_type_through_spark_and_pyarrow(tmp_path):
    """``pystore export`` and ``export --spark`` write the same Parquet timestamp type (UTC milliseconds),
    holding the same instants: Spark's default (INT96) read back as naive nanoseconds. A subprocess, because
    the verb owns (and stops) its Spark session."""
    import subprocess

    import pyarrow as pa
    import pyarrow.dataset as pads
    import pyarrow.parquet as pq

    root = tmp_path / "s"
    with MessageStore.open(str(root), mapped_file_size_commit_log=1 << 20) as s:
        for i in range(20):
            s.put_message(Message("T", b"m%d" % i, born_timestamp=BASE + 1234 * i))
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    outs = {"pyarrow": tmp_path / "a.parquet", "spark": tmp_path / "b"}
    for how, out in outs.items():
        p = subprocess.run([sys.executable, "-m", "pystore", "export", str(root), str(out)]
                           + (["--spark"] if how == "spark" else []),
                           capture_output=True, text=True, env=env, timeout=300)
        assert p.returncode == 0, p.stdout + p.stderr
    a = pq.read_table(outs["pyarrow"])
    b = pads.dataset(outs["spark"], format="parquet").to_table().sort_by("commit_log_offset")
    for col in ("born_timestamp", "store_timestamp"):
        assert a.schema.field(col).type == b.schema.field(col).type == pa.timestamp("ms", tz="UTC"), (a.schema, b.schema)
        assert a.column(col).to_pylist() == b.column(col).to_pylist()
    assert a.column("born_timestamp").to_pylist()[3] == datetime.fromtimestamp((BASE + 1234 * 3) / 1000, UTC)


# -----------------------------------------------------------------------------------------------------
# options: refused when unknown or misapplied; the Kafka source's names
# -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "options, use, words",
    [
        ({"startingOffset": "earliest"}, "batch", ["unknown option startingOffset", "did you mean startingOffsets"]),
        ({"subscribe_pattern": "T.*"}, "stream", ["subscribe_pattern", "did you mean subscribePattern"]),
        ({"endingoffsets": "latest"}, "stream", ["endingoffsets", "batch reads"]),
        ({"topic": "T1"}, "stream", ["option topic does not apply to a pystore stream", "topics, subscribe"]),
        (
            {"maxOffsetsPerTrigger": "5"},
            "batch",
            ["option maxOffsetsPerTrigger does not apply to a pystore batch read: it is for a pystore stream"],
        ),
        ({"topics": "T1"}, "write", ["option topics does not apply to a pystore write"]),
        ({"mapped_file_size_commitlog": "4096"}, "write", ["did you mean mapped_file_size_commit_log"]),
        ({"checkpointLocation": "/x"}, "write", ["checkpointLocation", "does not apply"]),
    ],
)
def test_check_options_names_the_option(options, use, words):
    from pystore.spark.options import OptionError, check_options

    with pytest.raises(OptionError) as e:
        check_options({k.lower(): v for k, v in options.items()} | {"path": "/r"}, use)
    for w in words:
        assert w.lower() in str(e.value).lower(), (w, str(e.value))


def test_check_options_accepts_what_spark_and_the_docs_give():
    from pystore.spark.options import check_options

    check_options({"path": "/r", "subscribepattern": "T.*", "startingoffsets": "{}", "minpartitions": "4",
                   "includeheaders": "true", "endingoffsets": "latest", "failondataloss": "false"}, "batch")
    check_options({"path": "/r", "topics": "T", "maxoffsetspertrigger": "5", "minoffsetspertrigger": "2",
                   "maxtriggerdelay": "1s", "startingtimestamp": "0"}, "stream")
    check_options({"path": "/r", "checkpointlocation": "/c", "queryname": "q",
                   "mapped_file_size_commit_log": "4096"}, "stream_write")
    check_options({"paths": '["/a", "/b"]'}, "batch")


def test_offsets_json_both_forms():
    from pystore.spark.options import OptionError, parse_assign, parse_offsets

    assert parse_offsets("o", '{"T1": {"0": 23, "1": -2}, "T2/3": -1}') == {("T1", 0): 23, ("T1", 1): -2,
                                                                             ("T2", 3): -1}
    with pytest.raises(OptionError, match="endingOffsets.*T1/0.*-1"):
        parse_offsets("endingOffsets", '{"T1": {"0": -2}}', lowest=-1)
    with pytest.raises(OptionError, match="not a topic and queue id"):
        parse_offsets("o", '{"T1": 5}')
    assert parse_assign('{"T1": [1, 0], "T2": [3]}') == [("T1", 0), ("T1", 1), ("T2", 3)]
    with pytest.raises(OptionError, match="assign"):
        parse_assign('{"T1": 0}')


def _stream_failure(q) -> str:
    """The error a started streaming query ends with: the source's own (Spark wraps it), never the runner's
    ``UnboundLocalError`` that masked option errors raised late."""
    try:
        with pytest.raises(Exception) as e:  # noqa: PT011 - Spark wraps it; the words are checked
            q.awaitTermination(120)
    finally:
        q.stop()
    err = str(e.value)
    assert "UnboundLocalError" not in err, err
    return err


def test_batch_read_refuses_a_typo_at_load(spark, main_store):
    with pytest.raises(Exception, match="did you mean startingOffsets"):
        read(spark, main_store["root"], startingOffset="earliest")
    with pytest.raises(Exception, match="maxOffsetsPerTrigger.*does not apply to a pystore batch read"):
        read(spark, main_store["root"], maxOffsetsPerTrigger=5).count()
    with pytest.raises(Exception, match="startingOffsets: latest is for streams"):
        read(spark, main_store["root"], startingOffsets="latest").count()


def test_stream_option_errors_surface_as_themselves(spark, main_store, tmp_path):
    for i, (options, words) in enumerate(
        [
            ({"topic": "T1"}, "option topic does not apply to a pystore stream"),
            ({"topics": "T1", "endingOffsets": "latest"}, "a stream has no end"),
            ({"topics": "T1", "startingOffsets": "{bad"}, "option startingOffsets: expected earliest"),
        ]
    ):
        r = spark.readStream.format("pystore")
        for k, v in options.items():
            r = r.option(k, v)
        q = (
            r.load(main_store["root"])
            .writeStream.format("memory")
            .queryName("refused%d" % i)
            .option("checkpointLocation", str(tmp_path / ("ck%d" % i)))
            .start()
        )
        err = _stream_failure(q)
        assert words in err, err


def test_write_refuses_an_unknown_option(spark, tmp_path):
    df = spark.createDataFrame([("T", b"x")], "topic string, body binary")
    with pytest.raises(Exception, match="unknown option mapped_file_size_commitlog.*mapped_file_size_commit_log"):
        df.write.format("pystore").mode("append").option("mapped_file_size_commitlog", "4096").save(
            str(tmp_path / "w")
        )


@pytest.mark.parametrize(
    "options, keep",
    [
        ({"subscribe": "T0,T2"}, lambda r: r["topic"] in ("T0", "T2")),
        ({"subscribePattern": "T[12]"}, lambda r: r["topic"] in ("T1", "T2")),
        ({"subscribePattern": "T"}, lambda r: False),  # matches whole names only, as Kafka's
        ({"assign": '{"T1": [0, 3], "T2": [2]}'}, lambda r: (r["topic"], r["queue_id"]) in
         {("T1", 0), ("T1", 3), ("T2", 2)}),
        (
            {"assign": '{"T1": [0, 1]}', "startingOffsets": '{"T1": {"0": 10, "1": -2}}',
             "endingOffsets": '{"T1": {"0": 20, "1": -1}}'},
            lambda r: r["topic"] == "T1" and (r["queue_offset"] in range(10, 20) if r["queue_id"] == 0
                                              else r["queue_id"] == 1),
        ),
        (
            {"subscribe": "T0", "startingOffsets": '{"T0/2": 95}'},
            lambda r: r["topic"] == "T0" and (r["queue_id"] != 2 or r["queue_offset"] >= 95),
        ),
        # store times are BASE + 1 + i for message i
        ({"subscribe": "T1", "startingTimestamp": BASE + 1101}, lambda r: r["topic"] == "T1"
         and r["store_timestamp"] >= (BASE + 1101) * 1000),
        (
            {"subscribe": "T1", "startingOffsetsByTimestamp": json.dumps({"T1": {"1": BASE + 1100}})},
            lambda r: r["topic"] == "T1" and (r["queue_id"] != 1 or r["store_timestamp"] >= (BASE + 1100) * 1000),
        ),
    ],
)
def test_kafka_names_in_a_batch_read(spark, main_store, options, keep):
    got = spark_rows(read(spark, main_store["root"], **options))
    want = sort_rows([r for r in main_store["rows"] if keep(r)])
    assert got == want
    assert options.get("subscribePattern") == "T" or got


def test_min_partitions_split_a_small_store_keeping_queue_order(spark, main_store):
    root = main_store["root"]
    n_files = len(os.listdir(os.path.join(root, "commitlog")))
    for options in ({}, {"subscribe": "T0,T1,T2"}):
        df = read(spark, root, minPartitions=3 * n_files, **options)
        assert df.rdd.getNumPartitions() >= 3 * n_files
        rows = df.select("topic", "queue_id", "queue_offset", "commit_log_offset").collect()
        assert sorted(r.commit_log_offset for r in rows) == sorted(r["commit_log_offset"] for r in main_store["rows"])
        per_queue: dict[tuple[str, int], list[int]] = {}
        for r in rows:  # collect() keeps the partitions' order
            per_queue.setdefault((r.topic, r.queue_id), []).append(r.queue_offset)
        assert all(v == list(range(100)) for v in per_queue.values()), per_queue
    # a queue range splits too: one queue of 100 messages into at least 7 partitions
    df = read(spark, root, assign='{"T0": [0]}', minPartitions=7)
    assert df.rdd.getNumPartitions() >= 7
    assert [r.queue_offset for r in df.select("queue_offset").collect()] == list(range(100))


def test_include_headers_as_kafka(spark, main_store):
    df = read(spark, main_store["root"], subscribe="T1", includeHeaders="true")
    assert df.schema.simpleString().endswith(",headers:array<struct<key:string,value:binary>>>")
    rows = df.select("queue_offset", "queue_id", "properties", "headers").collect()
    assert len(rows) == 400
    for r in rows:
        assert {h.key: bytes(h.value).decode("utf-8") for h in r.headers} == dict(r.properties)
    assert any("ключ" in dict(r.properties) for r in rows)
    assert "headers" not in read(spark, main_store["root"]).columns


@pytest.mark.slow
def test_stream_kafka_names_limits_and_progress(spark, tmp_path):
    root = str(tmp_path / "k")
    put_all(root, [message(i, topic=("K1", "K2", "X")[i % 3], queue_id=i % 2) for i in range(300)], StepClock())
    r = (
        spark.readStream.format("pystore")
        .option("subscribePattern", "K[0-9]")
        .option("startingOffsets", json.dumps({"K1": {"0": 10}, "K2": {"1": -1}}))
        .option("maxOffsetsPerTrigger", "40")
        .option("includeHeaders", "true")
    )
    q = (
        r.load(root)
        .writeStream.format("memory")
        .queryName("kafkanames")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    await_available_now(q)
    got = spark.sql("select topic, queue_id, queue_offset, headers from kafkanames").collect()
    # K1/0 from 10, K1/1 from 0, K2/0 from 0, K2/1 from its end: 50 - 10 + 50 + 50
    assert len(got) == 140
    assert {(r.topic, r.queue_id) for r in got} == {("K1", 0), ("K1", 1), ("K2", 0)}
    assert min(r.queue_offset for r in got if (r.topic, r.queue_id) == ("K1", 0)) == 10
    batches = [p for p in q.recentProgress if p["numInputRows"] > 0]
    assert len(batches) >= 4 and all(p["numInputRows"] <= 40 for p in batches)
    latest = batches[-1]["sources"][0]["latestOffset"]
    assert json.loads(latest) == {"K1/0": 50, "K1/1": 50, "K2/0": 50, "K2/1": 50}
    from pystore.spark import offsets_behind_latest

    behind = [offsets_behind_latest(p) for p in batches]
    assert behind[-1] == {"avgOffsetsBehindLatest": 0.0, "maxOffsetsBehindLatest": 0, "minOffsetsBehindLatest": 0}
    # after the first batch of 40, 100 of the 140 messages are left, spread over the four queues
    first = behind[0]
    assert first is not None and first["avgOffsetsBehindLatest"] * 4 == 100 and first["maxOffsetsBehindLatest"] >= 25


@pytest.mark.slow
def test_streaming_sink_stores_a_replayed_batch_once(spark, tmp_path):
    from pystore.spark.sink import committed_batches

    src, dst, ck = str(tmp_path / "src"), str(tmp_path / "dst"), str(tmp_path / "ck")
    put_all(src, [message(i, topic="A", queue_id=i % 2) for i in range(120)], StepClock())

    def run() -> None:
        q = (
            spark.readStream.format("pystore")
            .option("topics", "A")
            .option("maxOffsetsPerTrigger", "50")
            .load(src)
            .select("topic", "body", "tags", "keys", "queue_id", "properties")
            .writeStream.format("pystore")
            .option("checkpointLocation", ck)
            .option("mapped_file_size_commit_log", str(64 * 1024))
            .option("mapped_file_size_consume_queue", str(64 * 20))
            .option("max_hash_slot_num", "1024")
            .option("max_index_num", "4096")
            .trigger(availableNow=True)
            .start(dst)
        )
        await_available_now(q)

    run()
    (last,) = committed_batches(dst).values()
    assert last >= 2  # 120 messages, at most 50 per micro-batch
    # a crash after the sink's commit, before Spark recorded it: the restarted query replays the batch
    os.unlink(os.path.join(ck, "commits", str(last)))
    os.unlink(os.path.join(ck, "commits", ".%d.crc" % last))
    run()
    got = [d for d in scan_commit_log(dst)]
    assert len(got) == 120
    assert sorted((d["queue_id"], bytes(d["body"])) for d in got) == sorted(
        (m.queue_id, m.body) for m in (message(i, topic="A", queue_id=i % 2) for i in range(120))
    )
    assert committed_batches(dst) == {"checkpoint:" + os.path.abspath(ck): last}
    assert not os.listdir(os.path.join(dst, ".spark-staging", os.listdir(os.path.join(dst, ".spark-staging"))[0]))


SINK_CRASH = r"""
import os, signal, sys
from pyspark.sql.types import BinaryType, IntegerType, StringType, StructField, StructType
from pystore import MessageStore
from pystore.spark.sink import PystoreStreamWriter
from pystore.spark.writer import StagedPart
root, staged, (kind, cut) = sys.argv[1], sys.argv[2].split(","), sys.argv[3].split(":")
cut = int(cut)
schema = StructType([StructField("topic", StringType()), StructField("body", BinaryType()),
                     StructField("queue_id", IntegerType())])
w = PystoreStreamWriter({"path": root, "queryname": "q", "mapped_file_size_commit_log": "4096"}, schema)
if kind != "none":
    real_open = MessageStore.open
    def open_(root, **kw):
        store = real_open(root, **kw)
        puts = [0]
        def counted(put):
            def put_and_maybe_die(*args, **kwargs):
                r = put(*args, **kwargs)
                puts[0] += 1
                if puts[0] == cut:
                    store.flush()
                    os.kill(os.getpid(), signal.SIGKILL)   # the driver dies in the middle of the append
                return r
            return put_and_maybe_die
        if kind == "put":
            # the append's puts: put_columns for rows without properties, put_messages for the others
            store.put_messages = counted(store.put_messages)
            store.put_columns = counted(store.put_columns)
        else:
            # a new commit-log file: inside a put, between two records of it
            store._commitlog.roll_file = counted(store._commitlog.roll_file)
            store._commitlog.core.files_lock = None     # every roll through the hook (none from the ready file in C)
        return store
    MessageStore.open = open_
w.commit([StagedPart(i, p, 60) for i, p in enumerate(staged)], 5)
print("COMMITTED", flush=True)
"""


@pytest.mark.parametrize("cut", ["put:1", "put:2", "put:3", "roll:2", "roll:4"])
def test_streaming_sink_replay_after_a_crash_mid_append_stores_the_batch_once(tmp_path, cut):
    """The driver is SIGKILLed after ``cut`` puts of a micro-batch's append (one a partition's queue), or as
    a put takes its ``cut``-th new commit-log file (files of 4 KiB roll on the way);
    Spark replays the micro-batch: every row is stored exactly once, in its queue's order."""
    import subprocess

    import pyarrow as pa

    from pystore.spark.sink import committed_batches
    from pystore.spark.writer import stage_rows

    root = str(tmp_path / "dst")
    rows = [("T", b"r%04d" % i + b"x" * 100, i % 3 // 2) for i in range(120)]   # queues 0,0,1 0,0,1 ...

    def stage() -> list[str]:
        out = []
        for part in range(2):
            chunk = rows[part * 60:(part + 1) * 60]
            batch = pa.record_batch([pa.array([r[0] for r in chunk]), pa.array([r[1] for r in chunk]),
                                     pa.array([None] * 60, pa.string()),
                                     pa.array([None] * 60, pa.list_(pa.string())),
                                     pa.array([r[2] for r in chunk], pa.int32()),
                                     pa.array([None] * 60, pa.map_(pa.string(), pa.string()))],
                                    names=["topic", "body", "tags", "keys", "queue_id", "properties"])
            out.append(stage_rows(iter([batch]), str(tmp_path / "staging"), 1 << 20).path)
        return out

    def run(paths: list[str], c: str) -> subprocess.CompletedProcess[str]:
        from writer_procs import WORKTREE

        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(WORKTREE), os.environ.get("PYTHONPATH", "")]))
        return subprocess.run([sys.executable, "-c", SINK_CRASH, root, ",".join(paths), str(c)], env=env,
                              capture_output=True, text=True, timeout=300)

    r = run(stage(), cut)
    assert r.returncode == -9, r.stderr
    assert committed_batches(root) == {"query:q": -1}            # noted as being appended, not committed
    r = run(stage(), "none:-1")                                   # the replay of micro-batch 5
    assert r.returncode == 0 and "COMMITTED" in r.stdout, r.stderr
    assert committed_batches(root) == {"query:q": 5}
    got = [(d["topic"], bytes(d["body"]), d["queue_id"]) for d in scan_commit_log(root)]
    # each queue holds its rows once, in their order (the append groups a staged batch's rows by queue)
    assert sorted(got) == sorted(rows)
    for q in (0, 1):
        assert [g for g in got if g[2] == q] == [r for r in rows if r[2] == q]


def test_streaming_sink_needs_a_query_identity(spark, tmp_path):
    from pyspark.sql.types import BinaryType, StringType, StructField, StructType

    from pystore.spark.options import OptionError
    from pystore.spark.sink import PystoreStreamWriter

    schema = StructType([StructField("topic", StringType()), StructField("body", BinaryType())])
    with pytest.raises(OptionError, match="checkpointLocation"):
        PystoreStreamWriter({"path": str(tmp_path)}, schema)
    w = PystoreStreamWriter({"path": str(tmp_path), "queryname": "q1"}, schema)
    assert w.query == "query:q1"


def test_stream_min_offsets_per_trigger_and_pattern_joins(tmp_path):
    from pyspark.sql.streaming.datasource import ReadMaxRows, ReadMinRows

    from pystore.spark.stream import PystoreStreamReader

    root = str(tmp_path / "m")
    put_all(root, [message(i, topic="M1", queue_id=0) for i in range(10)], StepClock())
    opts = {"path": root, "subscribepattern": "M[0-9]", "minoffsetspertrigger": "20", "maxtriggerdelay": "1h"}
    r = PystoreStreamReader(opts, None)
    assert r.getDefaultReadLimit() == ReadMinRows(20)
    start = r.initialOffset()
    assert start == {"M1/0": 0}
    assert r.latestOffset(start, ReadMinRows(20)) == start  # 10 new messages: wait for 20
    put_all(root, [message(i, topic=("M2", "X")[i % 2], queue_id=0) for i in range(30)], StepClock(BASE + 10_000))
    assert r.latestOffset(start, ReadMinRows(20)) == {"M1/0": 10, "M2/0": 15}  # a new matching topic joins
    assert r.reportLatestOffset() == {"M1/0": 10, "M2/0": 15}
    # maxTriggerDelay passed: what there is, even below the minimum
    late = PystoreStreamReader(opts | {"maxtriggerdelay": "0ms"}, None)
    assert late.latestOffset(start, ReadMinRows(100)) == {"M1/0": 10, "M2/0": 15}
    # both limits: the engine passes the max only, the min still holds
    both = PystoreStreamReader(opts | {"maxoffsetspertrigger": "30", "minoffsetspertrigger": "30"}, None)
    assert both.getDefaultReadLimit() == ReadMaxRows(30)
    assert both.latestOffset(start, ReadMaxRows(30)) == start
    # under Trigger.AvailableNow the minimum never holds a query back
    both.prepareForTriggerAvailableNow()
    assert both.latestOffset(start, ReadMaxRows(30)) == {"M1/0": 10, "M2/0": 15}
    with pytest.raises(ValueError, match="maxTriggerDelay.*minOffsetsPerTrigger"):
        PystoreStreamReader({"path": root, "topics": "M1", "maxtriggerdelay": "1s"}, None)
    with pytest.raises(ValueError, match="maxOffsetsPerTrigger and maxMessagesPerTrigger"):
        PystoreStreamReader({"path": root, "topics": "M1", "maxoffsetspertrigger": "1",
                             "maxmessagespertrigger": "2"}, None)


def test_stream_max_trigger_delay_runs_on_the_injected_clock(tmp_path):
    """``maxTriggerDelay`` is measured on the reader's clock: a fake one moved by hand releases a batch below
    ``minOffsetsPerTrigger`` exactly when the delay has passed since the last batch, with no sleep."""
    from pyspark.sql.streaming.datasource import ReadMinRows

    from pystore.spark.stream import PystoreStreamReader

    root = str(tmp_path / "m")
    put_all(root, [message(i, topic="M1", queue_id=0) for i in range(10)], StepClock())
    now = [1000.0]
    opts = {"path": root, "topics": "M1", "minoffsetspertrigger": "20", "maxtriggerdelay": "30s"}
    r = PystoreStreamReader(opts, None, clock=lambda: now[0])
    start = r.initialOffset()
    assert r.latestOffset(start, ReadMinRows(20)) == start          # 10 of 20, no time passed
    now[0] += 29.999
    assert r.latestOffset(start, ReadMinRows(20)) == start          # 1 ms short of the delay
    now[0] += 0.001
    end = r.latestOffset(start, ReadMinRows(20))
    assert end == {"M1/0": 10}                                      # the delay passed: what there is
    # the batch restarts the delay
    put_all(root, [message(i, topic="M1", queue_id=0) for i in range(10, 15)], StepClock(BASE + 10_000))
    assert r.latestOffset(end, ReadMinRows(20)) == end
    now[0] += 30.0
    assert r.latestOffset(end, ReadMinRows(20)) == {"M1/0": 15}


# -----------------------------------------------------------------------------------------------------
# a user schema is the projection
# -----------------------------------------------------------------------------------------------------

HEADERS_DDL = "headers array<struct<key:string,value:binary>>"


def read_as(spark, root: str, schema: Any, **options: Any):
    r = spark.read.format("pystore").schema(schema)
    for k, v in options.items():
        r = r.option(k, str(v))
    return r.load(root)


def ddl_names(ddl: str) -> list[str]:
    return [part.split()[0] for part in ddl.split(", ")]


@pytest.mark.parametrize(
    "ddl, options, keep",
    [
        ("queue_offset long, body binary", {}, lambda r: True),
        # every kind of column, none in the source's order; through the consume queues
        (
            "msg_id string, tags string, store_timestamp timestamp, keys array<string>, topic string, "
            "properties map<string,string>, born_host string, queue_id int",
            {"subscribe": "T0,T2"},
            lambda r: r["topic"] in ("T0", "T2"),
        ),
        # store times are BASE + 1 + i for message i: messages 300 to 899
        ("body_crc int", {"start_time": BASE + 301, "end_time": BASE + 901},
         lambda r: BASE + 301 <= r["store_timestamp"] // 1000 < BASE + 901),
    ],
)
def test_user_schema_reads_those_columns_in_its_order(spark, main_store, ddl, options, keep):
    names = ddl_names(ddl)
    df = read_as(spark, main_store["root"], ddl, **options)
    assert df.columns == names
    got = plain_rows(df)
    assert got == project_rows([r for r in main_store["rows"] if keep(r)], names)
    assert got == plain_rows(read(spark, main_store["root"], **options).select(*names))
    assert all(list(r) == names for r in got)


def test_user_schema_count_and_filters_on_one_column(spark, main_store):
    root = main_store["root"]
    assert read_as(spark, root, "queue_offset long").count() == N_MAIN
    assert read_as(spark, root, "topic string", subscribe="T1").count() == N_MAIN // 3
    got = read_as(spark, root, "queue_offset long, queue_id int").where("queue_offset < 5").count()
    assert got == sum(1 for r in main_store["rows"] if r["queue_offset"] < 5)


def test_user_schema_struct_type_with_not_null_columns(spark, main_store):
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    schema = StructType([StructField("commit_log_offset", LongType(), False), StructField("tags", StringType(), True)])
    df = read_as(spark, main_store["root"], schema)
    assert df.schema == schema
    assert plain_rows(df) == project_rows(main_store["rows"], ["commit_log_offset", "tags"])


def test_user_schema_with_headers(spark, main_store):
    root = main_store["root"]
    for ddl in (HEADERS_DDL + ", queue_offset long, properties map<string,string>", "queue_id int, " + HEADERS_DDL):
        names = ddl_names(ddl)
        df = read_as(spark, root, ddl, subscribe="T1", includeHeaders="true")
        assert df.columns == names
        got = plain_rows(df)
        assert len(got) == N_MAIN // 3
        assert got == project_rows([r for r in main_store["rows"] if r["topic"] == "T1"], names)
        assert got == plain_rows(read(spark, root, subscribe="T1", includeHeaders="true").select(*names))
    assert any(h for r in got for h in r["headers"])


@pytest.mark.parametrize(
    "schema, options, words",
    [
        ("queue_offsets long", {}, "field queue_offsets: the pystore source has no such column (did you mean "
         "queue_offset?)"),
        ("body binary, queue_offset int", {}, "field queue_offset: the pystore source's type for it is bigint, the "
         "schema gives int"),
        ("store_timestamp timestamp_ntz", {}, "field store_timestamp: the pystore source's type for it is timestamp"),
        ("keys string", {"subscribe": "T1"}, "field keys: the pystore source's type for it is array<string>"),
        (HEADERS_DDL, {}, 'field headers: the pystore source has it only with .option("includeHeaders", "true")'),
        ("headers array<struct<key:string,value:string>>", {"includeHeaders": "true"},
         "field headers: the pystore source's type for it is array<struct<key:string,value:binary>>"),
    ],
)
def test_user_schema_refused_naming_the_field(spark, main_store, schema, options, words):
    import re

    with pytest.raises(Exception, match=re.escape(words)):
        read_as(spark, main_store["root"], schema, **options).collect()


def test_check_read_schema_refusals_without_spark():
    from pyspark.sql.types import ArrayType, LongType, StringType, StructField, StructType

    from pystore.spark.schema import SchemaError, check_read_schema, spark_schema

    assert check_read_schema(None) == spark_schema()
    assert check_read_schema(None, headers=True) == spark_schema(True)
    ok = StructType([StructField("msg_id", StringType()), StructField("queue_offset", LongType(), False)])
    assert check_read_schema(ok) is ok
    cases = [
        (StructType([]), "needs at least one column"),
        (StructType([StructField("tags", StringType(), False)]), "field tags: the pystore source's string holds nulls"),
        (StructType([StructField("topic", StringType()), StructField("topic", StringType())]),
         "field topic appears twice"),
        (StructType([StructField("keys", ArrayType(StringType(), False))]),
         "field keys: the pystore source's type for it is array<string> (nested fields nullable)"),
        (StructType([StructField("Topic", StringType())]), "(did you mean topic?)"),
    ]
    for schema, words in cases:
        with pytest.raises(SchemaError) as e:
            check_read_schema(schema)
        assert words in str(e.value), (words, str(e.value))


def test_projection_shares_the_decoders_buffers(main_store):
    from pyspark.sql.types import StructType

    from pystore.spark.batch import Filters, decoder_schema, plan_commit_log_slices, read_slice
    from pystore.spark.schema import arrow_schema, project

    part = plan_commit_log_slices(main_store["root"], 1 << 30)[0]
    full = next(read_slice(part, Filters([], -1, None, None, True), decoder_schema()))
    names = ["body", "queue_offset", "topic"]
    narrow = project(full, arrow_schema(StructType([spark_field(n) for n in names])))
    assert narrow.schema.names == names and narrow.num_rows == full.num_rows
    for n in names:
        assert [b.address for b in narrow.column(n).buffers() if b is not None] == [
            b.address for b in full.column(n).buffers() if b is not None
        ]
    got = next(read_slice(part, Filters([], -1, None, None, True), narrow.schema))
    assert got.equals(narrow)


def spark_field(name: str) -> Any:
    from pystore.spark.schema import spark_schema

    return spark_schema(True)[name]


def test_stream_with_a_narrow_schema_resumes_from_its_checkpoint(spark, tmp_path):
    root, out, ckpt = str(tmp_path / "s"), str(tmp_path / "out"), str(tmp_path / "ckpt")
    ddl = "body binary, queue_offset long, queue_id int, topic string"
    names = ddl_names(ddl)
    clock = StepClock()
    msgs = [message(i, topic=("S1", "S2", "S3")[i % 3], queue_id=i % 2) for i in range(420)]
    put_all(root, msgs[:240], clock)

    def run() -> None:
        q = (
            spark.readStream.format("pystore").schema(ddl).option("topics", "S1,S2")
            .option("maxMessagesPerTrigger", 70).load(root)
            .writeStream.format("parquet").option("path", out).option("checkpointLocation", ckpt)
            .trigger(availableNow=True).start()
        )
        await_available_now(q)

    run()
    assert spark.read.parquet(out).count() == 160
    put_all(root, msgs[240:], clock)
    run()
    got = plain_rows(spark.read.parquet(out).select(*names))
    want = project_rows([ref_row(d) for d in scan_commit_log(root) if d["topic"] in ("S1", "S2")], names)
    assert len(want) == 280
    assert got == want  # exactly once: no loss, no duplicate
    offsets = sorted((n for n in os.listdir(os.path.join(ckpt, "offsets")) if n.isdigit()), key=int)
    last = json.loads(open(os.path.join(ckpt, "offsets", offsets[-1])).read().splitlines()[-1])
    assert last == {"S1/0": 70, "S1/1": 70, "S2/0": 70, "S2/1": 70}


def test_stream_refuses_a_schema_as_itself(spark, main_store, tmp_path):
    q = (
        spark.readStream.format("pystore").schema("queue_offset int").option("topics", "T1")
        .load(main_store["root"])
        .writeStream.format("memory").queryName("badschema")
        .option("checkpointLocation", str(tmp_path / "ck")).start()
    )
    err = _stream_failure(q)
    assert "field queue_offset: the pystore source's type for it is bigint, the schema gives int" in err, err


def test_streaming_sinks_of_several_writer_processes_keep_each_others_progress(tmp_path, monkeypatch):
    """Two queries commit micro-batches into one store opened with ``shared_writers``: each rewrites the
    progress table, and the store lock (shared there) no longer keeps them apart. A commit of Q2 made while Q1
    has read the table and not yet written it back must survive, or Q2's replay would be stored twice."""
    import threading

    import pyarrow as pa
    from pyspark.sql.types import BinaryType, StringType, StructField, StructType

    import pystore.spark.sink as sink

    root = str(tmp_path / "dst")
    schema = StructType([StructField("topic", StringType()), StructField("body", BinaryType())])

    def writer(query: str) -> Any:
        return sink.PystoreStreamWriter({"path": root, "queryName": query, "shared_writers": "true",
                                         "mapped_file_size_commit_log": "65536"}, schema)

    def commit(w: Any, topic: str, body: bytes) -> None:
        part = w.write(iter([pa.RecordBatch.from_pydict({"topic": [topic], "body": [body]})]))
        w.commit([part], 0)

    q1, q2 = writer("Q1"), writer("Q2")
    read = sink._progress
    in_window, q2_done = threading.Event(), threading.Event()

    def q1_reads(r: str) -> dict:
        table = read(r)
        if threading.current_thread() is first and not in_window.is_set():
            in_window.set()                                  # Q1 read the table: Q2 commits now if it can
            q2_done.wait(1.0)
        return table

    monkeypatch.setattr(sink, "_progress", q1_reads)
    first = threading.Thread(target=commit, args=(q1, "T1", b"q1-b0"))
    second = threading.Thread(target=lambda: (commit(q2, "T2", b"q2-b0"), q2_done.set()))
    first.start()
    assert in_window.wait(60)
    second.start()
    first.join(120)
    second.join(120)
    assert not first.is_alive() and not second.is_alive()
    assert sink.committed_batches(root) == {"query:Q1": 0, "query:Q2": 0}
    commit(writer("Q2"), "T2", b"q2-b0")                     # Spark's replay of Q2's micro-batch 0: dropped
    with MessageStore.open(root, read_only=True) as s:
        assert [m.body for m in s.get_message("g", "T2", 0, 0, 32).messages] == [b"q2-b0"]
