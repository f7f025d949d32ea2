"""The archive's read cache (``pystore.archive.cache``): fetched copies bounded by their capacity and evicted
least recently used first (never a file a read holds, never the one asked for last), objects of a ``file://``
archive mapped where they lie without taking room of the cache and checked once while unchanged, and every
object that is missing, of the wrong size or changed refused by name."""

from __future__ import annotations

import os
import zlib

import pyarrow.fs as pafs
import pytest

from pystore.archive import cache as cache_mod
from pystore.archive.cache import ArchiveCache
from pystore.archive.target import ArchiveTarget
from pystore.errors import StoreCorruptedError

SIZE = 64 * 1024


def _objects(folder, n):
    """``n`` objects of SIZE bytes under ``folder``; their manifest-like records."""
    os.makedirs(folder / "commitlog", exist_ok=True)
    records = []
    for i in range(n):
        data = bytes([i + 1]) * SIZE
        name = "commitlog/%020d" % (i * SIZE)
        (folder / name).write_bytes(data)
        records.append({"name": name, "size": SIZE, "crc32": zlib.crc32(data)})
    return records


def _cache(tmp_path, local, capacity):
    root = str(tmp_path / "archive")
    target = ArchiveTarget("file://" + root, pafs.LocalFileSystem(), root, local)
    return ArchiveCache(target, str(tmp_path / "cache"), capacity)


@pytest.fixture
def crc_calls(monkeypatch):
    calls: list[str] = []
    check = ArchiveCache._check_crc

    def counting(path, record, shown):
        calls.append(record["name"])
        return check(path, record, shown)

    monkeypatch.setattr(ArchiveCache, "_check_crc", staticmethod(counting))
    return calls


def _read(cache, record):
    h = cache.mapped(record)
    try:
        return h.mf.read_any(0, 4)
    finally:
        h.release()


def test_fetched_copies_stay_within_the_capacity_least_recently_used_out(tmp_path):
    records = _objects(tmp_path / "archive", 4)
    cache = _cache(tmp_path, local=False, capacity=2 * SIZE)
    try:
        for r in records[:2]:
            _read(cache, r)
        assert cache.bytes == 2 * SIZE and cache.fetched == 2
        _read(cache, records[0])                      # now the most recently used
        _read(cache, records[2])                      # evicts records[1]
        assert cache.bytes == 2 * SIZE and cache.fetched == 3
        copies = sorted(os.listdir(os.path.join(cache.folder, "commitlog")))
        assert copies == [records[0]["name"].split("/")[1], records[2]["name"].split("/")[1]]
        _read(cache, records[0])
        assert cache.fetched == 3 and cache.hits == 2
        _read(cache, records[1])                      # fetched again
        assert cache.fetched == 4
    finally:
        cache.close()
    assert not os.path.exists(cache.folder)


def test_a_held_file_is_not_evicted_and_the_last_one_asked_for_is_kept_even_when_larger(tmp_path):
    records = _objects(tmp_path / "archive", 3)
    cache = _cache(tmp_path, local=False, capacity=SIZE // 2)
    try:
        held = cache.mapped(records[0])
        assert held.mf.read_any(0, 1) == b"\x01"
        assert _read(cache, records[1]) == b"\x02" * 4         # over capacity: both stay (one held, one last)
        assert cache.bytes == 2 * SIZE
        assert held.mf.read_any(SIZE - 1, 1) == b"\x01"
        held.release()
        _read(cache, records[2])
        assert cache.bytes == SIZE                              # the two before it, no longer held, went
    finally:
        cache.close()


def test_file_archive_objects_take_no_room_of_the_cache_and_are_checked_once(tmp_path, crc_calls):
    records = _objects(tmp_path / "archive", 3)
    cache = _cache(tmp_path, local=True, capacity=SIZE // 2)
    try:
        for _ in range(3):
            for i, r in enumerate(records):
                assert _read(cache, r) == bytes([i + 1]) * 4
        assert cache.bytes == 0 and cache.borrowed_bytes == 3 * SIZE
        assert cache.fetched == 3 and cache.hits == 6
        assert sorted(crc_calls) == [r["name"] for r in records]
        assert not os.path.exists(os.path.join(cache.folder, "commitlog"))     # nothing copied
    finally:
        cache.close()
    assert all(os.path.getsize(tmp_path / "archive" / r["name"]) == SIZE for r in records)   # never deleted


def test_file_archive_mappings_beyond_their_budget_are_unmapped_and_not_checked_again(tmp_path, monkeypatch,
                                                                                       crc_calls):
    monkeypatch.setattr(cache_mod, "MAP_BUDGET", SIZE)
    records = _objects(tmp_path / "archive", 2)
    cache = _cache(tmp_path, local=True, capacity=1 << 30)
    try:
        for _ in range(3):
            for r in records:
                _read(cache, r)
        assert cache.fetched == 6 and cache.borrowed_bytes == SIZE      # mapped again each time
        assert sorted(crc_calls) == [r["name"] for r in records]       # but read for its CRC once
    finally:
        cache.close()


def test_a_file_archive_object_changed_after_its_check_is_refused_by_name(tmp_path, monkeypatch):
    monkeypatch.setattr(cache_mod, "MAP_BUDGET", 0)                    # every mapping let go at once
    records = _objects(tmp_path / "archive", 2)
    cache = _cache(tmp_path, local=True, capacity=1 << 30)
    try:
        _read(cache, records[0])
        _read(cache, records[1])                                        # records[0] unmapped
        path = tmp_path / "archive" / records[0]["name"]
        with open(path, "r+b") as f:                                    # same size, one byte changed
            f.seek(100)
            f.write(b"\xff")
        with pytest.raises(StoreCorruptedError, match="changed behind the store's back") as e:
            cache.mapped(records[0])
        assert records[0]["name"] in e.value.path
    finally:
        cache.close()


@pytest.mark.parametrize("local", [True, False], ids=["file-mapped", "fetched"])
def test_missing_short_or_changed_objects_are_refused_and_nothing_half_fetched_stays(tmp_path, local):
    records = _objects(tmp_path / "archive", 3)
    folder = tmp_path / "archive"
    os.unlink(folder / records[0]["name"])
    with open(folder / records[1]["name"], "r+b") as f:
        f.truncate(SIZE - 1)
    with open(folder / records[2]["name"], "r+b") as f:
        f.seek(SIZE - 1)
        f.write(b"\x00")
    cache = _cache(tmp_path, local=local, capacity=1 << 30)
    try:
        for r, why in zip(records, ["missing", "the manifest says %d" % SIZE, "changed behind"], strict=True):
            with pytest.raises(StoreCorruptedError, match=why) as e:
                cache.mapped(r)
            assert r["name"] in e.value.path
        assert cache.bytes == cache.borrowed_bytes == 0
        leftovers = [n for _, _, files in os.walk(cache.folder) for n in files]
        assert leftovers == []
    finally:
        cache.close()


def test_a_file_archive_object_with_the_stamp_of_its_copy_is_not_read_for_its_crc(tmp_path, crc_calls):
    records = _objects(tmp_path / "archive", 2)
    cache = _cache(tmp_path, local=True, capacity=1 << 30)
    try:
        for r in records:
            r["stamp"] = cache.target.local_stamp(r["name"])
        path = tmp_path / "archive" / records[1]["name"]
        with open(path, "r+b") as f:                   # changed after its stamp was taken: checked, refused
            f.write(b"\xee")
        assert _read(cache, records[0]) == b"\x01" * 4
        with pytest.raises(StoreCorruptedError, match="changed behind the store's back"):
            cache.mapped(records[1])
        assert crc_calls == [records[1]["name"]]
    finally:
        cache.close()


def test_a_stamp_of_another_object_does_not_spare_the_check(tmp_path, crc_calls):
    records = _objects(tmp_path / "archive", 1)
    cache = _cache(tmp_path, local=True, capacity=1 << 30)
    try:
        stamp = cache.target.local_stamp(records[0]["name"])
        path = tmp_path / "archive" / records[0]["name"]
        os.replace(tmp_path / "archive" / records[0]["name"], tmp_path / "old")
        path.write_bytes(b"\x09" * SIZE)               # another file of the same size under the name
        records[0]["stamp"] = stamp
        with pytest.raises(StoreCorruptedError, match="changed behind the store's back"):
            cache.mapped(records[0])
        assert crc_calls == [records[0]["name"]]
    finally:
        cache.close()
