"""The Spark source's queue slices of an archive on S3 (``pystore.spark.archive_read``) fetch only the ranges
their records lie in when the archived commit-log files have per-range CRCs: a thin queue spread through the
files reads a small part of them, with the rows of the store's own reads; a changed range is refused naming
the object. Ranges are 4 KiB here (``plan.RANGE_SIZE``), the commit-log files 64 KiB. Run without a Spark
session: the partitions are planned and read as Spark's tasks do (pickled)."""

from __future__ import annotations

import json
import pickle
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="the spark extra (pyspark) is not installed")
pytest.importorskip("pyarrow", reason="the spark extra (pyarrow) is not installed")

import pyarrow as pa  # noqa: E402
from store_rows import store_rows  # noqa: E402

from pystore import Message, MessageStore  # noqa: E402
from pystore.archive import plan  # noqa: E402
from pystore.archive.target import open_target  # noqa: E402
from pystore.errors import StoreCorruptedError  # noqa: E402
from pystore.spark import archive_read  # noqa: E402
from pystore.spark.archive_read import ArchiveQueueSlice  # noqa: E402
from pystore.spark.batch import PystoreBatchReader  # noqa: E402

pytest_plugins = ["s3server"]

RANGE = 4096
FILE = 64 * 1024
GEOMETRY = {"mapped_file_size_commit_log": FILE, "mapped_file_size_consume_queue": 20 * 8,
            "max_hash_slot_num": 1024, "max_index_num": 4096}
THIN, BUSY = "Thin", "Busy"


@pytest.fixture(autouse=True)
def small_ranges(monkeypatch):
    monkeypatch.setattr(plan, "RANGE_SIZE", RANGE)
    monkeypatch.setattr(archive_read, "_caches", {})      # a fresh executor cache: its counters are this test's


@pytest.fixture(scope="module")
def archived(tmp_path_factory) -> Iterator[tuple[str, str, dict[str, Any], Counter]]:
    """``(root, uri, options, want)``: the store archived once for the module's tests (its upload, a few
    hundred small objects to moto, is most of their time), and the thin queue's rows as the store reads them.
    A test that changes an object puts it back."""
    import s3server  # here: the module is this file's plugin (``pytest_plugins``), imported by pytest first

    server = s3server._start_or_skip(s3server.shared_server)
    bucket = server.create_bucket()
    uri, options = "s3://%s/archive" % bucket, server.options()
    root = str(tmp_path_factory.mktemp("archived") / "store")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(plan, "RANGE_SIZE", RANGE)           # the per-range CRCs the upload writes
        _archived_store(root, uri, options)
        want = _store_rows(root, uri, options)
    yield root, uri, options, want
    if server.running:
        server.delete_bucket(bucket)


def _archived_store(root: str, uri: str, options: dict[str, Any]) -> None:
    """A busy topic (1 KB messages) with a small message of a thin topic every 40: one every 40 KB; all sealed files
    archived and deleted locally."""
    with MessageStore.open(root, archive_uri=uri, archive_options=options, archive_interval_ms=3_600_000,
                           archive_on_seal=False, file_reserved_time=0, **GEOMETRY) as store:
        for i in range(3200):
            topic = THIN if i % 40 == 0 else BUSY
            body = ("%s-%05d-" % (topic, i)).encode() + bytes([i % 251]) * (100 if topic == THIN else 900 + i % 100)
            assert store.put_message(Message(topic, body, queue_id=0, tags="t")).is_ok()
        store.flush()
        store._cq_store.flush(0)
        store._parts.archive.service.run_once()
        store.execute_delete_files_manually()
        store.clean_files()
        assert store.get_min_phy_offset() >= 4 * FILE        # the head is only in the archive


def _store_rows(root: str, uri: str, options: dict[str, Any]) -> Counter:
    """The thin queue's archived messages as the store's own reads give them."""
    return store_rows(root, uri, options, [THIN], 1, True, **GEOMETRY)


def _collect(uri: str, options: dict[str, Any]) -> tuple[Counter, list[Any]]:
    reader = PystoreBatchReader({"path": "s=" + uri, "archive_options": json.dumps(options), "subscribe": THIN},
                                None, parallelism=2)
    parts = [pickle.loads(pickle.dumps(p)) for p in reader.partitions()]
    rows: Counter = Counter()
    for p in parts:
        for rb in reader.read(p):
            t = pa.Table.from_batches([rb])
            for k in zip(*(t.column(c).to_pylist() for c in ("topic", "queue_id", "queue_offset", "body")),
                         strict=True):
                rows[k] += 1
    return rows, parts


def _cache():
    (cache,) = archive_read._caches.values()
    return cache


def test_a_thin_queue_fetches_only_the_ranges_of_its_records(archived):
    root, uri, options, want = archived
    assert len(want) >= 60
    rows, parts = _collect(uri, options)
    assert rows == want
    slices = [p for p in parts if isinstance(p, ArchiveQueueSlice)]
    assert slices and all(p.spans and None not in p.spans for p in slices)     # through the archived units
    files = {r["name"]: r["size"] for p in slices for r in p.commitlog}
    # the queue's last offsets, whose queue file is not archived yet, are read by walking their files (whole)
    walked = {r["name"] for p in slices for r, (a, z) in zip(p.commitlog, p.spans, strict=True)
              if max(p.start, a) < min(p.end, z + 1) and min(p.end, z + 1) > p.covered}
    through_units = sum(n for name, n in files.items() if name not in walked)
    assert len(files) - len(walked) >= 30
    cache = _cache()
    r = cache.ranges
    # a record of ~250 bytes every ~40 KB: one or two 4 KiB ranges each, a small part of the 64 KiB files
    assert 0 < r.fetched_bytes - sum(files[name] for name in walked) <= through_units // 6
    assert r.requests >= len(want) // 2
    assert not any(name in cache._files for name in files)          # no commit-log file fetched whole


def test_a_queue_slice_read_in_small_pieces_reads_the_same(archived, monkeypatch):
    root, uri, options, want = archived
    # each piece: at most 3 units, and one range (a piece takes at least one unit whatever its ranges)
    monkeypatch.setattr(archive_read, "_UNITS", 3)
    monkeypatch.setattr(archive_read, "_SPAN_BYTES", 1)
    rows, _ = _collect(uri, options)
    assert rows == want
    r = _cache().ranges
    assert r.fetched_bytes > 0 and not any(c.holds or c.users for c in r._copies.values())   # none held past the read


def test_a_changed_range_is_refused_naming_the_object(archived):
    root, uri, options, want = archived
    with MessageStore.open(root, read_only=True, archive_uri=uri, archive_options=options, **GEOMETRY) as store:
        m = store.get_message("g", THIN, 0, 3, 1).messages[0]
        assert (THIN, 0, 3, m.body) in want
        name = store._parts.archive.manifest.commitlog_file_for(m.commit_log_offset)["name"]
    pos = m.commit_log_offset % FILE
    target = open_target(uri, options)
    original = target.read(name)
    body = bytearray(original)
    body[pos + 100] ^= 0xFF                                      # a byte of the thin message's body
    target.put(name, bytes(body))
    try:
        with pytest.raises(StoreCorruptedError, match="changed behind the store's back") as e:
            _collect(uri, options)
        assert name in e.value.path and e.value.offset == pos - pos % RANGE
    finally:
        target.put(name, original)                              # the module's other tests read the archive
