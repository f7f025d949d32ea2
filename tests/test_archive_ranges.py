"""Ranged reads of archived files (``pystore.archive.plan``, ``ranges``): a read below the local data fetches only
the ranges its records lie in, each checked against its CRC32 from the manifest, into a sparse local copy whose
ranges are evicted (holes punched) beyond ``archive_cache_bytes``; the answers are those of the same reads of
local files. A range changed or an object deleted behind the store's back is refused naming the object; copies
recorded before ranged reads (no ``range_crc32``) are fetched whole as before; a ``file://`` archive is mapped
where it lies. Ranges are 4 KiB here (``plan.RANGE_SIZE``), the commit-log files 64 KiB: 16 ranges a file."""

from __future__ import annotations

import os
import time
import zlib

import pytest
from test_archive import TOPIC, _archive_and_clean, _archive_pass, _fill, _open, _read_all

from pystore.archive import plan
from pystore.archive.manifest import FOLDER, decode_record, encode_record
from pystore.archive.target import open_target
from pystore.archive.uploader import _crc_of_file, crc32_combine
from pystore.archive.verify import verify_archive
from pystore.errors import StoreCorruptedError
from pystore.status import GetMessageStatus

pytest_plugins = ["s3server"]

RANGE = 4096
FILE = 64 * 1024


@pytest.fixture(autouse=True)
def small_ranges(monkeypatch):
    monkeypatch.setattr(plan, "RANGE_SIZE", RANGE)


def _archived(root, uri, options, n=1200):
    """A store whose sealed files are all archived and deleted locally; ``{queue: [bodies]}``."""
    with _open(root, uri, options, file_reserved_time=0) as store:
        put = _fill(store, n=n)
        _archive_pass(store)
        _archive_and_clean(store)
        assert store.get_min_phy_offset() >= 3 * FILE
    return put


def _allocated(folder):
    """Disk bytes taken by the files under ``folder`` (a sparse copy's holes take none)."""
    return sum(os.stat(os.path.join(d, f)).st_blocks * 512 for d, _, fs in os.walk(folder) for f in fs)


def _ranges(store):
    return store._parts.archive.cache.ranges


def _quiet(store):
    """Wait for the read-aheads under way (their fetches count as the cache's)."""
    r = _ranges(store)
    for _ in range(2000):
        with r._lock:
            if not any(c.pending for c in r._copies.values()):
                return
        time.sleep(0.005)
    raise AssertionError("read-aheads still under way")


def test_a_lookup_fetches_only_the_ranges_its_record_lies_in(tmp_path, s3_archive):
    uri, options = s3_archive
    put = _archived(tmp_path / "store", uri, options)
    with _open(tmp_path / "store", uri, options) as store:
        arch = store._parts.archive
        arch.ensure_loaded()
        record = arch.manifest.commitlog_file_for(FILE + 1)
        assert record["range_size"] == RANGE and len(record["range_crc32"]) == FILE // RANGE
        # a message in the middle of the second file
        m = store.get_message("g", TOPIC, 0, 200, 1).messages[0]
        assert m.body == put[0][200]
        _quiet(store)
        before = _ranges(store).fetched_bytes
        got = store.look_message_by_offset(m.commit_log_offset)
        assert got is not None and got.body == m.body
        r = _ranges(store)
        assert r.fetched_bytes - before <= 2 * RANGE        # found in the cache, or its range (or two: straddling)
        # a fresh store: one lookup alone
    with _open(tmp_path / "store", uri, options) as store:
        got = store.look_message_by_offset(m.commit_log_offset)
        assert got is not None and got.body == m.body and got.queue_offset == 200
        r = _ranges(store)
        assert 1 <= r.requests <= 2 and RANGE <= r.fetched_bytes <= 2 * RANGE
        assert _allocated(store._parts.archive.cache.folder) <= 2 * RANGE
        assert store.look_message_by_offset(m.commit_log_offset + 1) is None     # no record starts there
        # one get_message of one message: its queue file (one range of 1280 bytes), the ranges of the records of
        # the 32 units a read below the local data plans at least (8 KiB of the other queue's between each two:
        # about 4), and two ahead
        r0 = r.fetched_bytes
        page = store.get_message("g", TOPIC, 1, 300, 1)
        _quiet(store)
        assert page.status is GetMessageStatus.FOUND and [x.body for x in page.messages] == [put[1][300]]
        assert r.fetched_bytes - r0 <= 1280 + 7 * RANGE
        assert store.archive_info()["cache_bytes"] == r.bytes > 0


def test_sequential_reads_fetch_each_range_once_and_give_what_local_files_give(tmp_path, s3_archive):
    uri, options = s3_archive
    put = _archived(tmp_path / "store", uri, options)
    with _open(tmp_path / "store", uri, options) as store:
        for q in (0, 1):
            bodies, offsets = _read_all(store, q)
            assert bodies == put[q] and offsets == list(range(len(put[q])))
        _quiet(store)
        r = _ranges(store)
        archived = sum(int(x["size"]) for x in store._parts.archive.manifest.commitlog_files())
        queues = sum(int(x["size"]) for q in (0, 1) for x in store._parts.archive.manifest.queue_files(TOPIC, q))
        assert r.fetched_bytes <= archived + queues            # nothing twice (the cache holds it all)
        # get_columns reads the same pages
        status, nxt, batch = store.get_columns("g", TOPIC, 0, 0, 64, columns=["queue_offset", "body"])
        assert status is GetMessageStatus.FOUND and batch.column("body").to_pylist() == put[0][:64] and nxt == 64


def test_eviction_keeps_the_cache_within_its_bytes_and_reads_stay_right(tmp_path, s3_archive):
    uri, options = s3_archive
    put = _archived(tmp_path / "store", uri, options)
    with _open(tmp_path / "store", uri, options) as store:
        cache = store._parts.archive.cache
        cache.capacity = 3 * RANGE                     # below the config's floor: a few ranges only
        for q in (0, 1):
            bodies, _ = _read_all(store, q, batch=8)
            assert bodies == put[q]
            _quiet(store)
            cache._evict_now()
            assert cache.total_bytes <= cache.capacity
            assert _allocated(cache.folder) <= cache.capacity + RANGE      # evicted ranges' blocks given back
        for i in range(0, 600, 37):                    # random lookups, over ranges fetched again and again
            m = store.get_message("g", TOPIC, 0, i, 1).messages[0]
            assert m.body == put[0][i]
            assert store.look_message_by_offset(m.commit_log_offset).body == put[0][i]
        assert cache.ranges.fetched_bytes > 2 * sum(int(x["size"]) for x in store._parts.archive.manifest.commitlog_files())


def test_a_held_range_is_not_evicted(tmp_path, s3_archive):
    uri, options = s3_archive
    _archived(tmp_path / "store", uri, options)
    with _open(tmp_path / "store", uri, options) as store:
        cache = store._parts.archive.cache
        cache.capacity = 0
        store._parts.archive.ensure_loaded()
        records = store._parts.archive.manifest.commitlog_files()
        h = cache.open(records[0])
        try:
            h.need(0, FILE)
            want = h.mf.read_any(0, FILE)
            other = cache.mapped(records[1])           # fetching more evicts: only what no read holds
            other.release()
            cache._evict_now()
            assert h.mf.read_any(0, FILE) == want and cache.ranges.bytes == FILE
        finally:
            h.release()
        cache._evict_now()
        assert cache.total_bytes == 0 and _allocated(cache.folder) == 0


def _overwrite(uri, options, name, at, data):
    target = open_target(uri, options)
    body = bytearray(target.read(name))
    body[at:at + len(data)] = data
    target.put(name, bytes(body))


def test_a_range_changed_behind_the_stores_back_is_refused_naming_the_object(tmp_path, s3_archive):
    uri, options = s3_archive
    put = _archived(tmp_path / "store", uri, options)
    with _open(tmp_path / "store", uri, options) as store:
        m = store.get_message("g", TOPIC, 0, 200, 1).messages[0]
        name = store._parts.archive.manifest.commitlog_file_for(m.commit_log_offset)["name"]
        pos = m.commit_log_offset % FILE
    _overwrite(uri, options, name, pos + 100, b"\xee")             # a byte of the message's body
    with _open(tmp_path / "store", uri, options, check_crc_on_read=False) as store:
        with pytest.raises(StoreCorruptedError, match="changed behind the store's back") as e:
            store.look_message_by_offset(m.commit_log_offset)
        assert name in e.value.path and e.value.offset == pos - pos % RANGE
        with pytest.raises(StoreCorruptedError, match="changed behind") as e:
            store.get_message("g", TOPIC, 0, 200, 1)
        assert name in e.value.path
        assert store.get_message("g", TOPIC, 0, 0, 1).messages[0].body == put[0][0]   # other files still read
    report = verify_archive(uri, options)
    assert not report.ok and any(name in p.path and "changed behind" in p.detail for p in report.problems)
    target = open_target(uri, options)
    target.delete(name)
    with _open(tmp_path / "store", uri, options) as store:
        with pytest.raises(StoreCorruptedError, match="missing") as e:
            store.look_message_by_offset(m.commit_log_offset)
        assert name in e.value.path


def test_copies_recorded_before_ranged_reads_are_fetched_whole(tmp_path, s3_archive):
    uri, options = s3_archive
    put = _archived(tmp_path / "store", uri, options)
    target = open_target(uri, options)
    for obj in target.list(FOLDER):                               # the records an earlier pystore wrote
        record = decode_record(target.read(obj))
        assert record is not None
        if "range_crc32" in record or "range_size" in record:
            record.pop("range_crc32", None)
            record.pop("range_size", None)
            target.put(obj, encode_record(record))
    with _open(tmp_path / "store", uri, options) as store:
        for q in (0, 1):
            assert _read_all(store, q)[0] == put[q]
        cache = store._parts.archive.cache
        assert cache.fetched > 0 and cache.ranges.requests == 0
    assert verify_archive(uri, options).ok


def test_a_file_archive_is_mapped_where_it_lies(tmp_path):
    uri = "file://" + str(tmp_path / "archive")
    put = _archived(tmp_path / "store", uri, {})
    with _open(tmp_path / "store", uri, {}) as store:
        store._parts.archive.ensure_loaded()
        assert "range_crc32" in store._parts.archive.manifest.commitlog_files()[0]
        for q in (0, 1):
            assert _read_all(store, q)[0] == put[q]
        cache = store._parts.archive.cache
        assert cache.ranges.requests == 0 and cache.total_bytes == 0
        assert not os.path.exists(os.path.join(cache.folder, "commitlog"))
    assert verify_archive(uri).ok


def test_plans_cover_what_the_record_checks_read():
    assert plan.record_end(100, 300, 1000) == 400
    assert plan.record_end(100, 0, 1000) == 108              # refused on its first 8 bytes
    assert plan.record_end(100, 5000, 1000) == 108           # past the file: refused on them too
    assert plan.record_end(996, 300, 1000) == 1000           # never past the file
    assert list(plan.ranges_of(4095, 4097, 4096, 10000)) == [0, 1]
    assert list(plan.ranges_of(0, 0, 4096, 10000)) == []
    record = {"size": 10000, "range_size": 4096, "range_crc32": [1, 2, 3]}
    assert plan.range_fields(record) == (4096, [1, 2, 3])
    for bad in ({"range_crc32": [1, 2]}, {"range_size": 1000, "range_crc32": list(range(10))},
                {"range_crc32": [1, 2, -3]}, {"range_size": None}):
        assert plan.range_fields({**record, **bad}) is None
    assert plan.range_fields({"size": 10000}) is None


def test_the_whole_crc_is_combined_from_the_ranges(tmp_path):
    data = os.urandom(3 * RANGE + 123)
    path = tmp_path / "f"
    path.write_bytes(data)
    crc, crcs = _crc_of_file(str(path), len(data), RANGE)
    assert crc == zlib.crc32(data) and crcs == [zlib.crc32(data[i:i + RANGE]) for i in range(0, len(data), RANGE)]
    assert crc32_combine(zlib.crc32(b"ab"), zlib.crc32(b"cd"), 2) == zlib.crc32(b"abcd")
