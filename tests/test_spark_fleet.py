"""The Spark source over a fleet of stores (``pystore.spark.fleet``, ``pystore.spark.archive_read``): several
stores in one read, each a root, an archive (``file://`` or S3 on a local moto server) or both; rows compared
with each store's own reads through ``MessageStore`` (which serves archived offsets itself); planning from the
manifests alone; ``maxRecordsPerPartition``; offsets keyed by store in batch and streaming reads;
``failOnDataLoss`` per store; a damaged archived object refused by name."""

from __future__ import annotations

import json
import os
import pickle
import shutil
from collections import Counter
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="the spark extra (pyspark) is not installed")
pytest.importorskip("pyarrow", reason="the spark extra (pyarrow) is not installed")

import pyarrow as pa  # noqa: E402
from spark_helpers import start_spark  # noqa: E402
from store_rows import store_rows  # noqa: E402

from pystore import Message, MessageStore
from pystore.archive.archive import Archive
from pystore.archive.target import ArchiveTarget
from pystore.config import StoreConfig
from pystore.errors import StoreCorruptedError
from pystore.spark.archive_read import ArchiveLogSlice, ArchiveQueueSlice
from pystore.spark.batch import DataLossError, PystoreBatchReader, QueueGroup
from pystore.spark.fleet import Member, member_options, members
from pystore.spark.options import OptionError
from pystore.spark.stream import PystoreStreamReader

pytest_plugins = ["s3server"]
pytestmark = pytest.mark.spark

GEOMETRY = {"mapped_file_size_commit_log": 64 * 1024, "mapped_file_size_consume_queue": 20 * 64,
            "max_hash_slot_num": 1024, "max_index_num": 4096}
TOPICS = ("Orders", "Audit")


def _body(store: str, i: int) -> bytes:
    return ("%s-%06d-" % (store, i)).encode() + bytes([i % 251]) * (60 + i % 140)


def _put(store: MessageStore, name: str, first: int, n: int) -> None:
    for i in range(first, first + n):
        m = Message(TOPICS[i % 5 == 0], _body(name, i), queue_id=i % 3, tags="t%d" % (i % 4), keys="k%d" % i)
        assert store.put_message(m).is_ok()
    store.flush()
    store._cq_store.flush(0)


def _archive_and_clean(store: MessageStore) -> None:
    store._parts.archive.service.run_once()
    store.execute_delete_files_manually()
    store.clean_files()


def _make_store(root: str, archive: str, name: str, options: dict[str, Any] | None = None, n: int = 1500,
                tail: int = 300) -> None:
    """A store of ``n`` messages whose head was archived and deleted locally, then ``tail`` more messages."""
    with MessageStore.open(root, archive_uri=archive, archive_options=options or {}, archive_interval_ms=3_600_000,
                           archive_on_seal=False, file_reserved_time=0, **GEOMETRY) as store:
        _put(store, name, 0, n)
        _archive_and_clean(store)
        _put(store, name, n, tail)
        assert store.archive_info()["min_phy_offset"] == 0
        assert store.get_min_phy_offset() > 0          # the head is only in the archive


def _store_rows(root: str, archive: str, options: dict[str, Any] | None = None, topics=TOPICS,
                archived_only: bool = False) -> Counter:
    """Every message of ``topics`` as the store's own reads give it (``store_rows``)."""
    return store_rows(root, archive, options, topics, 3, archived_only, **GEOMETRY)


def _collect(options: dict[str, str]) -> tuple[Counter, list[Any]]:
    """A batch read run as Spark runs it (partitions pickled to the tasks), without a Spark session."""
    reader = PystoreBatchReader({k.lower(): v for k, v in options.items()}, None, parallelism=2)
    parts = [pickle.loads(pickle.dumps(p)) for p in reader.partitions()]
    rows: Counter = Counter()
    for p in parts:
        for rb in reader.read(p):
            t = pa.Table.from_batches([rb])
            for topic, q, qo, body in zip(*(t.column(c).to_pylist() for c in ("topic", "queue_id", "queue_offset",
                                                                                "body")), strict=True):
                rows[(topic, q, qo, body)] += 1
    return rows, parts


@pytest.fixture(scope="module")
def fleet(tmp_path_factory) -> dict[str, Any]:
    """broker-a: a root with its archive (the head archived and deleted locally); broker-b: an archive alone
    (its root removed); broker-c: a root without an archive."""
    base = tmp_path_factory.mktemp("fleet")
    a_root, a_arch = str(base / "broker-a" / "store"), "file://" + str(base / "arch" / "broker-a")
    b_root, b_arch = str(base / "broker-b" / "store"), "file://" + str(base / "arch" / "broker-b")
    c_root = str(base / "broker-c" / "store")
    _make_store(a_root, a_arch, "a")
    _make_store(b_root, b_arch, "b", n=1200, tail=0)
    want_b = _store_rows(b_root, b_arch, archived_only=True)
    shutil.rmtree(b_root)
    with MessageStore.open(c_root, file_reserved_time=0, **GEOMETRY) as store:
        _put(store, "c", 0, 400)
        store.execute_delete_files_manually()
        store.clean_files()                     # no archive: the head is gone
        _put(store, "c", 400, 100)
    return {"a": (a_root, a_arch), "b": (None, b_arch), "c": (c_root, None),
            "want": {"a": _store_rows(a_root, a_arch), "b": want_b, "c": _store_rows(c_root, "")}}


def _locations(fleet: dict[str, Any]) -> str:
    a_root, a_arch = fleet["a"]
    return ",".join([a_root, a_arch, "broker-b=" + fleet["b"][1], fleet["c"][0]])


# -- who is in the fleet ----------------------------------------------------------------------------------------

def test_members_are_named_and_a_root_joins_its_archive(fleet):
    ms = members({"path": _locations(fleet)})
    assert [m.name for m in ms] == ["broker-a", "broker-b", "broker-c"]
    assert ms[0] == Member("broker-a", fleet["a"][0], fleet["a"][1], "{}")
    assert ms[1].root is None and ms[1].archive == fleet["b"][1]
    assert ms[2].archive is None
    # the stores option, explicit names, archive options carried as canonical JSON
    ms = members({"stores": "x=%s" % fleet["c"][0], "archive_options": '{"b": 1, "a": 2}'})
    assert ms == [Member("x", fleet["c"][0], None, '{"a": 2, "b": 1}')]
    # storeNames: one name per location, in order (a root and an archive of one name are one store)
    ms = members({"path": "%s,%s,%s" % (fleet["a"][0], fleet["a"][1], fleet["c"][0]), "storenames": "x,x,y"})
    assert [(m.name, m.root is not None, m.archive is not None) for m in ms] == [("x", True, True), ("y", True, False)]
    with pytest.raises(OptionError, match="storeNames"):
        members({"path": fleet["c"][0], "storenames": "x,y"})
    with pytest.raises(OptionError, match="stores and load"):
        members({"stores": fleet["c"][0], "path": fleet["c"][0]})
    with pytest.raises(OptionError, match="two archives"):
        members({"path": "x=file:///a,x=file:///b"})
    with pytest.raises(OptionError, match="archive_options"):
        members({"path": fleet["c"][0], "archive_options": "[1]"})
    with pytest.raises(FileNotFoundError):
        members({"path": "/no/such/store"})
    # two roots that would share a name keep their whole paths as names
    ms = members({"path": "%s,%s" % (fleet["c"][0], fleet["a"][0] + "/../../broker-c/store")})
    assert len({m.name for m in ms}) == 2


def test_offsets_and_fail_on_data_loss_narrowed_per_store():
    fleet = [Member("a", "/x"), Member("b", "/y")]
    opts = {"startingoffsets": json.dumps({"a": {"T": {"0": 5}}, "b": {"T/1": 7}}),
            "failondataloss": '{"b": false}'}
    a, b = (member_options(opts, fleet, m) for m in fleet)
    assert json.loads(a["startingoffsets"]) == {"T": {"0": 5}} and a["failondataloss"] == "true"
    assert json.loads(b["startingoffsets"]) == {"T/1": 7} and b["failondataloss"] == "false"
    # the one-store form applies to every store
    one = {"startingoffsets": '{"T": {"0": 5}}'}
    assert member_options(one, fleet, fleet[1])["startingoffsets"] == '{"T": {"0": 5}}'
    with pytest.raises(OptionError, match="failOnDataLoss"):
        member_options({"failondataloss": '{"nobody": false}'}, fleet, fleet[0])


# -- batch reads -------------------------------------------------------------------------------------------------

def test_fleet_read_by_topic_equals_the_stores_own_reads(fleet):
    rows, parts = _collect({"path": _locations(fleet), "subscribe": "Orders,Audit"})
    want = fleet["want"]["a"] + fleet["want"]["b"] + fleet["want"]["c"]
    assert sum(fleet["want"]["a"].values()) == 1800 and 0 < sum(fleet["want"]["b"].values()) < 1200
    assert rows == want
    kinds = Counter(type(p).__name__ for p in parts for p in (p.slices if isinstance(p, QueueGroup) else [p]))
    assert kinds["ArchiveQueueSlice"] and kinds["QueueSlice"]


def test_max_records_per_partition_splits_hot_queues(fleet):
    rows, parts = _collect({"path": _locations(fleet), "topic": "Orders", "maxRecordsPerPartition": "97"})
    want = Counter({k: v for s in "abc" for k, v in fleet["want"][s].items() if k[0] == "Orders"})
    assert rows == want
    flat = [p for p in parts for p in (p.slices if isinstance(p, QueueGroup) else [p])]
    assert all(p.end - p.start <= 97 for p in flat)
    assert len(flat) >= sum(want.values()) // 97
    # both ways of the archive's queue slices were taken: through archived units, and walking the records
    arch = [p for p in flat if isinstance(p, ArchiveQueueSlice)]
    assert any(p.covered >= p.end for p in arch) and any(p.covered < p.end for p in arch)
    with pytest.raises(OptionError, match="one limit"):
        PystoreBatchReader({"path": fleet["c"][0], "maxrecordsperpartition": "5", "messages_per_partition": "5"},
                           None)


def test_fleet_read_of_every_topic_walks_archived_files_once(fleet):
    rows, parts = _collect({"path": _locations(fleet)})
    want = fleet["want"]["a"] + fleet["want"]["b"] + fleet["want"]["c"]
    assert rows == want
    logs = [p for p in parts if isinstance(p, ArchiveLogSlice)]
    assert len({(p.member.name, p.record["name"]) for p in logs}) == len(logs) > 0


def test_offsets_keyed_by_store_in_a_batch_read(fleet):
    start = {"broker-a": {"Orders": {"0": 10}}, "broker-b": {"Audit": {"1": 20}}}
    end = {"broker-a": {"Orders": {"0": 30}}}
    rows, _ = _collect({"path": _locations(fleet), "subscribe": "Orders,Audit", "startingOffsets": json.dumps(start),
                        "endingOffsets": json.dumps(end)})
    a0 = {k for k in rows if k[0] == "Orders" and k[1] == 0 and k[3].startswith(b"a-")}
    assert sorted(k[2] for k in a0) == list(range(10, 30))
    b1 = sorted(k[2] for k in rows if k[0] == "Audit" and k[1] == 1 and k[3].startswith(b"b-"))
    assert b1[0] == 20


def test_a_start_by_time_searches_a_root_with_its_archive_and_an_archive_alone(fleet, tmp_path):
    """``startingTimestamp`` on a store whose head is only in its archive starts each queue where the store's own
    time search (which searches the archive below the local data) says; on an archive named alone, where a walk of
    the archived messages' store times says."""
    a_root, a_arch = fleet["a"]
    with MessageStore.open(a_root, read_only=True, archive_uri=a_arch, **GEOMETRY) as store:
        local = {q: store._cq_store.find("Orders", q).get_min_offset_in_queue() for q in range(3)}
        # an archived offset whose message was stored later than the one before it: the search must land on it
        stamps = [store.get_message_store_timestamp("Orders", 0, i) for i in range(local[0])]
        first = next(i for i in range(1, local[0]) if stamps[i] > stamps[i - 1])
        ms = stamps[first]
        starts = {q: store.get_offset_in_queue_by_time("Orders", q, ms, "lower") for q in range(3)}
    assert starts[0] == first < local[0] and all(starts[q] <= local[q] for q in range(3))
    rows, _ = _collect({"path": "%s,%s" % (a_root, a_arch), "subscribe": "Orders", "startingTimestamp": str(ms)})
    want = Counter({k: v for k, v in fleet["want"]["a"].items() if k[0] == "Orders" and k[2] >= starts[k[1]]})
    assert rows == want
    # an archive named without its root: the archive's own search, on the driver
    b_arch = fleet["b"][1]
    arch = Archive(StoreConfig(store_path_root_dir=str(tmp_path), archive_uri=b_arch))
    try:
        def times(q):
            return [arch.store_time(arch.unit(None, "Orders", q, i)[0])
                    for i in range(arch.queue_min_offset("Orders", q), arch.queue_end("Orders", q))]
        stamps = {q: times(q) for q in range(3)}
    finally:
        arch.close()
    ms = sorted(stamps[1])[len(stamps[1]) // 2]
    b_starts = {q: next((i for i, t in enumerate(stamps[q]) if t >= ms), len(stamps[q])) for q in range(3)}
    rows, _ = _collect({"path": "broker-b=" + b_arch, "subscribe": "Orders", "startingTimestamp": str(ms)})
    want = Counter({k: v for k, v in fleet["want"]["b"].items() if k[0] == "Orders" and k[2] >= b_starts[k[1]]})
    assert rows == want and 0 < sum(want.values()) < sum(1 for k in fleet["want"]["b"] if k[0] == "Orders")


def test_planning_reads_only_the_manifests(fleet, monkeypatch):
    seen: list[str] = []
    real_read, real_download = ArchiveTarget.read, ArchiveTarget.download

    def read(self, name, *a, **k):
        seen.append(name)
        return real_read(self, name, *a, **k)

    def download(self, name, *a, **k):
        seen.append(name)
        return real_download(self, name, *a, **k)

    monkeypatch.setattr(ArchiveTarget, "read", read)
    monkeypatch.setattr(ArchiveTarget, "download", download)
    reader = PystoreBatchReader({"path": _locations(fleet), "subscribe": "Orders"}, None)
    assert reader.partitions()
    assert seen and all(n.startswith("manifest/") for n in seen)


def test_archive_on_s3_reads_like_the_store(s3_archive, tmp_path):
    uri, options = s3_archive
    root = str(tmp_path / "s3store")
    _make_store(root, uri, "s", options, n=900, tail=100)
    want = _store_rows(root, uri, options)
    opts = {"path": "broker-s=%s,broker-s=%s" % (root, uri), "archive_options": json.dumps(options),
            "subscribe": "Orders,Audit", "maxRecordsPerPartition": "150"}
    rows, parts = _collect(opts)
    assert rows == want and sum(want.values()) == 1000
    shutil.rmtree(root)
    rows, _ = _collect({**opts, "path": "broker-s=" + uri})
    # the archive alone holds the head: every archived row is one of the store's, none twice, and per queue the
    # offsets run from 0 without a gap
    assert not rows - want and max(rows.values()) == 1 and 0 < sum(rows.values()) < 1000
    for topic in ("Orders", "Audit"):
        for q in range(3):
            got = sorted(k[2] for k in rows if k[:2] == (topic, q))
            assert got == list(range(len(got)))


def test_a_changed_archived_object_is_refused_by_name(tmp_path):
    root, arch = str(tmp_path / "d" / "store"), "file://" + str(tmp_path / "arch")
    _make_store(root, arch, "d", n=600, tail=0)
    obj = sorted(os.listdir(str(tmp_path / "arch" / "commitlog")))[0]
    path = str(tmp_path / "arch" / "commitlog" / obj)
    with open(path, "r+b") as f:
        f.seek(300)
        f.write(b"\xff" * 8)
    with pytest.raises(StoreCorruptedError) as e:
        _collect({"path": "d=" + arch, "subscribe": "Orders,Audit"})
    assert "commitlog/" + obj in e.value.path


# -- streaming ---------------------------------------------------------------------------------------------------

def _stream_reader(opts: dict[str, str]) -> PystoreStreamReader:
    return PystoreStreamReader({k.lower(): v for k, v in opts.items()}, None, parallelism=2)


def _drain(reader: PystoreStreamReader, start: dict, end: dict) -> Counter:
    rows: Counter = Counter()
    for p in reader.partitions(json.loads(json.dumps(start)), json.loads(json.dumps(end))):
        for rb in reader.read(pickle.loads(pickle.dumps(p))):
            t = pa.Table.from_batches([rb])
            for k in zip(*(t.column(c).to_pylist() for c in ("topic", "queue_id", "queue_offset", "body")),
                         strict=True):
                rows[k] += 1
    return rows


def test_stream_offsets_are_keyed_by_store(fleet):
    reader = _stream_reader({"path": _locations(fleet), "topics": "Orders,Audit", "maxOffsetsPerTrigger": "700"})
    start = reader.initialOffset()
    assert set(start) == {"broker-a", "broker-b", "broker-c"}
    assert start["broker-b"]["Orders"]["0"] == 0 and start["broker-a"]["Orders"]["0"] == 0
    seen: Counter = Counter()
    for _ in range(20):
        from pyspark.sql.streaming.datasource import ReadMaxRows

        end = reader.latestOffset(start, ReadMaxRows(700))
        if end == start:
            break
        seen += _drain(reader, start, end)
        start = end
    want = fleet["want"]["a"] + fleet["want"]["b"] + fleet["want"]["c"]
    assert seen == want
    # a one-store stream keeps the one-store form of its offsets
    one = _stream_reader({"path": fleet["c"][0], "topics": "Orders"}).initialOffset()
    assert set(one) == {"Orders/0", "Orders/1", "Orders/2"}


def test_stream_fail_on_data_loss_per_store(fleet):
    locs = _locations(fleet)
    # broker-a's local queue files start above 0: the offsets below are in its archive, not lost
    reader = _stream_reader({"path": locs, "topics": "Orders"})
    start = {"broker-a": {"Orders": {"0": 0}}}
    end = {"broker-a": {"Orders": {"0": 40}}}
    assert sum(_drain(reader, start, end).values()) == 40
    # a store without an archive whose cleaning passed the wanted offset
    c_root = fleet["c"][0]
    with MessageStore.open(c_root, **GEOMETRY) as store:
        lo = store.get_min_offset_in_queue("Orders", 0)
    if lo == 0:
        pytest.skip("broker-c's cleaning deleted nothing")
    start = {"broker-c": {"Orders": {"0": 0}}}
    end = {"broker-c": {"Orders": {"0": lo + 5}}}
    with pytest.raises(DataLossError, match="broker-c"):
        _stream_reader({"path": locs, "topics": "Orders"}).partitions(start, end)
    lenient = _stream_reader({"path": locs, "topics": "Orders", "failOnDataLoss": '{"broker-c": false}'})
    assert sum(_drain(lenient, start, end).values()) == 5


# -- through Spark -----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def spark():
    session = start_spark("pystore-fleet-tests")
    yield session
    session.stop()


def _spark_rows(df) -> Counter:
    return Counter((r.topic, r.queue_id, r.queue_offset, bytes(r.body))
                   for r in df.select("topic", "queue_id", "queue_offset", "body").collect())


def test_spark_batch_and_stream_over_the_fleet(spark, fleet, tmp_path):
    want = fleet["want"]["a"] + fleet["want"]["b"] + fleet["want"]["c"]
    df = spark.read.format("pystore").option("subscribe", "Orders,Audit").option("maxRecordsPerPartition", "400")
    assert _spark_rows(df.load(_locations(fleet))) == want
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    q = (spark.readStream.format("pystore").option("topics", "Orders,Audit").option("maxOffsetsPerTrigger", "1500")
         .load(_locations(fleet)).writeStream.format("parquet").option("path", out)
         .option("checkpointLocation", ckpt).trigger(availableNow=True).start())
    try:
        assert q.awaitTermination(240)
    finally:
        if q.isActive:
            q.stop()
    assert q.exception() is None
    assert _spark_rows(spark.read.parquet(out)) == want
    offsets = sorted((n for n in os.listdir(os.path.join(ckpt, "offsets")) if n.isdigit()), key=int)
    last = json.loads(open(os.path.join(ckpt, "offsets", offsets[-1])).read().splitlines()[-1])
    assert set(last) == {"broker-a", "broker-b", "broker-c"}
    ends: dict[str, dict[str, dict[str, int]]] = {}
    for topic, q, qo, body in want:
        store = {b"a": "broker-a", b"b": "broker-b", b"c": "broker-c"}[body[:1]]
        mine = ends.setdefault(store, {}).setdefault(topic, {})
        mine[str(q)] = max(mine.get(str(q), 0), qo + 1)
    assert last == ends
