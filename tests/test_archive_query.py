"""``query_message`` through archived index files (``Archive.select_index``): a file copied by ranges is read only
where the key's chain walk goes (the header's range, the key's slot's, each entry's), not fetched whole; the
answers are those the same store gave before its local files were cleaned. A range changed behind the store's
back, or a header that disagrees with the manifest, is refused naming the object; a chain broken in the copy
itself (a link forward, a slot past the entries) ends the walk as in a local file (docs/format.md §3.4), never
a wrong answer or a hang. Copies recorded before ranged reads are fetched whole and walked in one call, as a
``file://`` archive's objects (mapped where they lie) are. Ranges are 4 KiB here, the index files 8192 slots and
400 entries (40 KiB: 10 ranges)."""

from __future__ import annotations

import os
import zlib

import pytest
from test_archive import TOPIC, _archive_and_clean, _fill, _open

from pystore.archive import plan
from pystore.archive.manifest import COPY_FINISHED, FOLDER, Manifest, decode_record, encode_record
from pystore.archive.target import open_target
from pystore.errors import StoreCorruptedError
from pystore.index._index import HEADER_SIZE, INDEX_SIZE, key_hash

pytest_plugins = ["s3server"]

RANGE = 4096
N = 1200
SLOTS, ENTRIES = 8192, 400
INDEX = {"max_hash_slot_num": SLOTS, "max_index_num": ENTRIES}
SIZE = HEADER_SIZE + SLOTS * 4 + ENTRIES * INDEX_SIZE


@pytest.fixture(autouse=True)
def small_ranges(monkeypatch):
    monkeypatch.setattr(plan, "RANGE_SIZE", RANGE)


@pytest.fixture(params=["s3", "file"])
def any_archive(request, tmp_path):
    if request.param == "file":
        return "file://" + str(tmp_path / "archive"), {}
    return request.getfixturevalue("s3_archive")


def _archived(root, uri, options):
    """A store of N keyed messages whose sealed files and full index files are archived and the local ones
    cleaned; ``{key: [commit-log offsets]}`` as ``query_message`` answered before the cleaning."""
    with _open(root, uri, options, file_reserved_time=0, **INDEX) as store:
        _fill(store, N)
        store._parts.index.flush()
        want = {"k%d" % i: [m.commit_log_offset for m in store.query_message(TOPIC, "k%d" % i).messages]
                for i in range(N)}
        assert all(len(v) == 1 for v in want.values())
        _archive_and_clean(store)
    return want


def _gone(store):
    """The archived index files no longer local (the ones ``select_index`` reads)."""
    arch = store._parts.archive
    arch.ensure_loaded()
    local = {os.path.basename(f.mapped_file.file_name) for f in store._parts.index.files}
    return [r for r in arch.manifest.index_files() if r["name"].rsplit("/", 1)[-1] not in local]


def _below(gone, want):
    """Keys whose entries are only in archived index files no longer local."""
    return [k for k, v in want.items() if any(r["begin_phy"] <= v[0] <= r["end_phy"] for r in gone)]


def _select(store, key, max_num=32):
    out: list[int] = []
    local = {os.path.basename(f.mapped_file.file_name) for f in store._parts.index.files}
    store._parts.archive.select_index(TOPIC + "#" + key, max_num, 0, 2**63 - 1, out, local)
    return out


def test_every_key_is_found_as_before_the_cleaning(tmp_path, any_archive):
    uri, options = any_archive
    want = _archived(tmp_path / "store", uri, options)
    with _open(tmp_path / "store", uri, options, **INDEX) as store:
        gone = _gone(store)
        assert len(gone) >= 2 and all(int(r["size"]) == SIZE for r in gone)
        assert all(r["end_phy"] < store.get_min_phy_offset() for r in gone)
        for key, offsets in want.items():
            assert [m.commit_log_offset for m in store.query_message(TOPIC, key).messages] == offsets, key
        assert store.query_message(TOPIC, "no-such-key").messages == []
    with _open(tmp_path / "store", uri, options, read_only=True, **INDEX) as store:
        for key in ("k0", "k1", "k399", "k400", "k777"):
            assert [m.commit_log_offset for m in store.query_message(TOPIC, key).messages] == want[key], key


def test_a_key_lookup_fetches_a_few_ranges_not_the_index_files(tmp_path, s3_archive):
    uri, options = s3_archive
    want = _archived(tmp_path / "store", uri, options)
    with _open(tmp_path / "store", uri, options, **INDEX) as store:
        gone = _gone(store)
        assert len(gone) >= 2 and all(r["range_size"] == RANGE for r in gone)
        keys = _below(gone, want)
        assert len(keys) >= 2 * (ENTRIES - 1)
    for key in (keys[0], keys[len(keys) // 2], keys[-1]):
        # a cold cache each: the walk of every archived file no longer local (a unique key: none reaches max_num)
        with _open(tmp_path / "store", uri, options, read_only=True, **INDEX) as store:
            store._parts.archive.ensure_loaded()
            r = store._parts.archive.cache.ranges
            assert _select(store, key) == want[key]
            # per file: its header's range, its key's slot's, the entries' of its chain (a short one here); the
            # whole files would be len(gone) * SIZE
            assert r.fetched_bytes <= len(gone) * 4 * RANGE < len(gone) * SIZE, (key, r.fetched_bytes)
            assert r.fetched_ranges <= 4 * len(gone) and r.requests == r.fetched_ranges
            # and the message itself: the commit-log range of its record on top
            before = r.fetched_bytes
            assert [m.commit_log_offset for m in store.query_message(TOPIC, key).messages] == want[key]
            assert r.fetched_bytes - before <= 2 * RANGE


def test_max_num_counts_what_the_local_index_found(tmp_path, any_archive):
    """``select_index`` adds at most ``max_num`` offsets to those already found."""
    uri, options = any_archive
    _archived(tmp_path / "store", uri, options)
    with _open(tmp_path / "store", uri, options, **INDEX) as store:
        key = TOPIC + "#k3"
        out = [1, 2, 3]
        local = {os.path.basename(f.mapped_file.file_name) for f in store._parts.index.files}
        store._parts.archive.select_index(key, 1, 0, 2**63 - 1, out, local)
        assert len(out) == 4


def _damage(uri, options, record, at, data, recrc):
    """Change bytes ``[at, at + len(data))`` of the archived object of ``record``; with ``recrc`` its manifest
    record is rewritten to match (the copy as if the local file had been so when copied)."""
    target = open_target(uri, options)
    body = bytearray(target.read(record["name"]))
    body[at:at + len(data)] = data
    target.put(record["name"], bytes(body))
    if not recrc:
        return
    for obj in target.list(FOLDER):
        r = decode_record(target.read(obj))
        if r is not None and r["name"] == record["name"] and r["state"] == COPY_FINISHED:
            r["crc32"] = zlib.crc32(body)
            r["range_crc32"] = [zlib.crc32(body[i:i + RANGE]) for i in range(0, len(body), RANGE)]
            r.pop("stamp", None)
            target.put(obj, encode_record(r))


def _slot_pos(key):
    return HEADER_SIZE + key_hash(TOPIC + "#" + key) % SLOTS * 4


def _newest_gone_with_key(uri, options, root, want):
    """A key whose entry is in the newest archived index file no longer local, and that file's record."""
    with _open(root, uri, options, read_only=True, **INDEX) as store:
        gone = _gone(store)
        r = gone[-1]
        key = next(k for k, v in want.items() if r["begin_phy"] < v[0] <= r["end_phy"])
        return r, key


def test_a_changed_range_of_an_index_file_is_refused_naming_it(tmp_path, s3_archive):
    uri, options = s3_archive
    root = tmp_path / "store"
    want = _archived(root, uri, options)
    r, key = _newest_gone_with_key(uri, options, root, want)
    _damage(uri, options, r, _slot_pos(key), b"\x00\x00\x00\x00", recrc=False)    # the key's slot: now empty
    with _open(root, uri, options, read_only=True, **INDEX) as store:
        with pytest.raises(StoreCorruptedError, match="changed behind the store's back") as e:
            store.query_message(TOPIC, key)
        assert r["name"] in e.value.path and e.value.offset == _slot_pos(key) // RANGE * RANGE


@pytest.mark.parametrize("what", ["forward", "slot-past-the-entries", "loop-to-itself"])
def test_a_chain_broken_in_the_copy_ends_the_walk_as_in_a_local_file(tmp_path, any_archive, what, caplog):
    """A copy that passes its CRCs but whose chain is broken (the local file was so when copied): the walk stops
    at the break, logged once per object; the entries before the break are found, nothing wrong, no hang."""
    uri, options = any_archive
    root = tmp_path / "store"
    want = _archived(root, uri, options)
    r, key = _newest_gone_with_key(uri, options, root, want)
    slot = _slot_pos(key)
    entries = HEADER_SIZE + SLOTS * 4
    with _open(root, uri, options, read_only=True, **INDEX) as store:
        h = store._parts.archive.cache.mapped(r)
        try:
            head = int.from_bytes(h.mf.read_any(slot, 4), "big", signed=True)
        finally:
            h.release()
    assert 1 <= head < ENTRIES
    if what == "slot-past-the-entries":
        at, data = slot, (ENTRIES + 5).to_bytes(4, "big")
    elif what == "forward":
        at, data = entries + head * INDEX_SIZE + 16, (head + 1).to_bytes(4, "big")
    else:
        at, data = entries + head * INDEX_SIZE + 16, head.to_bytes(4, "big")
    _damage(uri, options, r, at, data, recrc=True)
    with _open(root, uri, options, read_only=True, **INDEX) as store:
        for _ in range(2):
            got = [m.commit_log_offset for m in store.query_message(TOPIC, key).messages]
            if what == "slot-past-the-entries":
                assert got == []                          # the chain is cut at its start
            else:
                assert got == want[key]                   # the newest entry (the key's) read before the break
        assert sum("broken index chain" in m and r["name"] in m for m in caplog.messages) == 1
        # other keys of the file are found
        other = next(k for k, v in want.items() if r["begin_phy"] < v[0] <= r["end_phy"] and _slot_pos(k) != slot)
        assert [m.commit_log_offset for m in store.query_message(TOPIC, other).messages] == want[other]


def test_a_header_that_disagrees_with_the_manifest_is_refused(tmp_path, any_archive):
    uri, options = any_archive
    root = tmp_path / "store"
    want = _archived(root, uri, options)
    r, key = _newest_gone_with_key(uri, options, root, want)
    _damage(uri, options, r, 36, (ENTRIES + 1).to_bytes(4, "big"), recrc=True)     # counts more entries than it has
    with _open(root, uri, options, read_only=True, **INDEX) as store:
        with pytest.raises(StoreCorruptedError, match="counts %d entries" % (ENTRIES + 1)) as e:
            store.query_message(TOPIC, key)
        assert r["name"] in e.value.path
    _damage(uri, options, r, 36, ENTRIES.to_bytes(4, "big") + b"", recrc=True)
    _damage(uri, options, r, 24, (r["end_phy"] + 1).to_bytes(8, "big"), recrc=True)  # another end offset
    with _open(root, uri, options, read_only=True, **INDEX) as store:
        with pytest.raises(StoreCorruptedError, match="header says") as e:
            store.query_message(TOPIC, key)
        assert r["name"] in e.value.path
    m = Manifest(open_target(uri, options)).load()
    assert any(x["name"] == r["name"] for x in m.index_files())


def test_copies_recorded_before_ranged_reads_are_walked_whole(tmp_path, s3_archive):
    """Index copies whose records have no ``range_crc32`` (an earlier pystore's) are fetched whole, checked against
    their CRC32, and walked in one call, as before."""
    uri, options = s3_archive
    want = _archived(tmp_path / "store", uri, options)
    target = open_target(uri, options)
    for obj in target.list(FOLDER):
        record = decode_record(target.read(obj))
        if record is not None and ("range_crc32" in record or "range_size" in record):
            record.pop("range_crc32", None)
            record.pop("range_size", None)
            target.put(obj, encode_record(record))
    with _open(tmp_path / "store", uri, options, read_only=True, **INDEX) as store:
        gone = _gone(store)
        keys = _below(gone, want)
        for key in (keys[0], keys[-1]):
            assert _select(store, key) == want[key]
        cache = store._parts.archive.cache
        assert cache.ranges.requests == 0 and cache.fetched == len(gone)
        for key in keys[::50]:
            assert [m.commit_log_offset for m in store.query_message(TOPIC, key).messages] == want[key]
