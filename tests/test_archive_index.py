"""Keys of archived messages (``pystore.archive.archive``: ``index_below``, ``select_index``): after a crash, the
index files recovery drops (newer than the checkpoint's index time; always the newest, never full, so never
archived) also indexed messages that a short local retention left only in the archive; recovery indexes those
again from the archived commit log (``RecoveryPlan.archive_index``), so ``query_message`` finds every key of
every acknowledged message. A damaged or missing archived object refuses the open, naming it."""

from __future__ import annotations

import json
import os
import time

import pytest
from writer_procs import kill, read_line

from pystore import MessageStore
from pystore.archive.manifest import Manifest
from pystore.archive.target import open_target
from pystore.errors import StoreCorruptedError, StoreError

pytest_plugins = ["s3server"]       # the s3_archive fixture (moto's S3 on 127.0.0.1)

TOPIC = "Orders"
N = 1500
#: 64 KiB commit-log files (about 300 messages each), one index file of room for every key (never full: never
#: archived), local retention of one file: most messages are only in the archive when the writer is killed
OPTIONS = {"mapped_file_size_commit_log": 64 * 1024, "mapped_file_size_consume_queue": 20 * 64,
           "max_hash_slot_num": 512, "max_index_num": 20_000, "archive_local_retention_bytes": 64 * 1024,
           "archive_on_seal": False, "archive_interval_ms": 3_600_000}

# The writer: puts N keyed messages, archives and cleans (the store's own services, run now), says how far the
# local log was cleaned, and waits to be SIGKILLed (its index file never flushed full: dropped at the next open).
WRITER = r"""
import json, sys, time
from pystore import Message, MessageStore
root, uri, options, n = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), int(sys.argv[4])
store = MessageStore.open(root, archive_uri=uri, **options)
for i in range(n):
    body = b"m%06d-" % i + bytes([i % 251]) * 190
    assert store.put_message(Message("Orders", body, queue_id=i % 2, keys="k%d key-%d" % (i, i % 7))).is_ok()
store.flush()
store._cq_store.flush(0)
service = store._parts.archive.service
deadline = time.monotonic() + 60
while not service.passes and time.monotonic() < deadline:
    time.sleep(0.005)
service.run_once()
store.execute_delete_files_manually()
store.clean_files()
print("DONE", store.get_min_phy_offset(), flush=True)
time.sleep(600)
"""


def _body(i: int) -> bytes:
    return b"m%06d-" % i + bytes([i % 251]) * 190


def _killed_writer(procs, root, uri, options) -> int:
    """Run the writer to its end and SIGKILL it; the local log's head it left."""
    p = procs.start(str(root), uri, json.dumps({**OPTIONS, "archive_options": options}), str(N), script=WRITER)
    low = int(read_line(p, "DONE", timeout=120).split()[1])
    kill(p)
    assert os.path.exists(root / "abort")
    return low


def _reopen(root, uri, options, **kw):
    return MessageStore.open(str(root), archive_uri=uri, archive_options=options, **{**OPTIONS, **kw})


def _check_every_key(store) -> None:
    for i in range(N):
        r = store.query_message(TOPIC, "k%d" % i)
        assert [m.body for m in r.messages] == [_body(i)], i
    # a key many messages share: the newest max_num of them (below and above the local head alike)
    r = store.query_message(TOPIC, "key-3", max_num=64)
    assert sorted(m.body for m in r.messages) == sorted(_body(i) for i in range(N) if i % 7 == 3)[-64:]


@pytest.mark.parametrize("where", ["file", "s3"])
def test_every_key_is_found_after_a_crash_with_a_short_local_retention(tmp_path, procs, where, request):
    """A writer SIGKILLed with most of its log only in the archive: the reopened store finds every key (before the
    fix, the keys of every archived message were lost with the dropped index file)."""
    if where == "s3":
        uri, options = request.getfixturevalue("s3_archive")
    else:
        uri, options = "file://" + str(tmp_path / "archive"), {}
    root = tmp_path / "store"
    low = _killed_writer(procs, root, uri, options)
    assert low >= 3 * OPTIONS["mapped_file_size_commit_log"]       # most of the log is only in the archive
    assert not Manifest(open_target(uri, options)).load().index_files()     # the index file was never archived
    with _reopen(root, uri, options) as store:
        assert store._parts.recovery.abnormal and store.get_min_phy_offset() == low
        _check_every_key(store)
        files = store._parts.index.files
        assert len(files) == 1 and files[0].begin_phy_offset == 0    # rebuilt from the archive's start
    with _reopen(root, uri, options) as store:                     # and kept by a clean shutdown
        _check_every_key(store)
    with _reopen(root, uri, options, read_only=True) as store:
        _check_every_key(store)


def test_a_damaged_archived_commit_log_refuses_the_open_naming_it(tmp_path, procs):
    """The re-index reads each archived file checked (a file:// object against its CRC32): one changed behind the
    store's back refuses the open with ``StoreCorruptedError`` naming it; restored, the open goes on."""
    archive = tmp_path / "archive"
    uri = "file://" + str(archive)
    root = tmp_path / "store"
    _killed_writer(procs, root, uri, {})
    obj = archive / "commitlog" / ("%020d" % OPTIONS["mapped_file_size_commit_log"])
    original = obj.read_bytes()
    obj.write_bytes(original[:5000] + b"\xff" + original[5001:])
    t0 = time.monotonic()
    with pytest.raises(StoreCorruptedError) as e:
        _reopen(root, uri, {})
    assert "commitlog/%020d" % OPTIONS["mapped_file_size_commit_log"] in str(e.value) and time.monotonic() - t0 < 60
    assert os.path.exists(root / "abort")          # still to recover
    obj.write_bytes(original)
    with _reopen(root, uri, {}) as store:
        _check_every_key(store)


def test_a_missing_archived_commit_log_refuses_the_open_naming_it(tmp_path, procs):
    archive = tmp_path / "archive"
    uri = "file://" + str(archive)
    root = tmp_path / "store"
    _killed_writer(procs, root, uri, {})
    obj = archive / "commitlog" / ("%020d" % 0)
    os.rename(obj, str(obj) + ".away")
    with pytest.raises(StoreCorruptedError) as e:
        _reopen(root, uri, {})
    assert "commitlog/%020d" % 0 in str(e.value) and "missing" in str(e.value)
    os.rename(str(obj) + ".away", obj)
    with _reopen(root, uri, {}) as store:
        _check_every_key(store)


def test_no_room_for_an_index_file_refuses_the_open_as_such_not_as_damage(tmp_path, procs, monkeypatch):
    """The re-index cannot make an index file (a full disk): the open is refused with a ``StoreError`` that says
    so, not a ``StoreCorruptedError`` blaming the archived record it stopped at; with room again it goes on."""
    from pystore.index.service import IndexService

    uri = "file://" + str(tmp_path / "archive")
    root = tmp_path / "store"
    _killed_writer(procs, root, uri, {})

    def no_space(self, path):
        raise OSError(28, "No space left on device", path)

    with monkeypatch.context() as m:
        m.setattr(IndexService, "_create", no_space)
        with pytest.raises(StoreError) as e:
            _reopen(root, uri, {})
    assert not isinstance(e.value, StoreCorruptedError)
    assert "no index file could be made" in str(e.value) and "disk full" in str(e.value)
    assert os.path.exists(root / "abort")          # still to recover
    with _reopen(root, uri, {}) as store:
        _check_every_key(store)


def test_the_re_index_reads_by_ranges_and_records_crossing_them(tmp_path, s3_archive, monkeypatch):
    """Objects copied with 4 KiB ranges and a re-index holding one range at a time: records crossing a range's
    end, and one larger than a range, are indexed whole (the abnormal exit simulated: a clean close, then the
    abort file, which makes recovery drop the index file that is not full)."""
    from pystore import Message
    from pystore.archive import archive as archive_mod
    from pystore.archive import plan

    monkeypatch.setattr(plan, "RANGE_SIZE", 4096)
    monkeypatch.setattr(archive_mod, "_REINDEX_BYTES", 4096)
    uri, options = s3_archive
    root = tmp_path / "store"
    bodies = {}
    with _reopen(root, uri, options) as store:
        for i in range(N):
            body = _body(i) if i % 100 != 50 else b"big-%d-" % i + b"x" * 9000     # larger than a range
            bodies[i] = body
            assert store.put_message(Message(TOPIC, body, queue_id=i % 2, keys="k%d" % i)).is_ok()
        store.flush()
        store._cq_store.flush(0)
        service = store._parts.archive.service
        deadline = time.monotonic() + 30
        while not service.passes and time.monotonic() < deadline:
            time.sleep(0.005)
        service.run_once()
        store.execute_delete_files_manually()
        store.clean_files()
        low = store.get_min_phy_offset()
    assert low >= 3 * OPTIONS["mapped_file_size_commit_log"]
    (root / "abort").write_bytes(b"")
    with _reopen(root, uri, options) as store:
        assert store._parts.recovery.abnormal
        info = store.archive_info()
        assert info["cache_fetches"] > 3 * OPTIONS["mapped_file_size_commit_log"] // 4096 // 16
        for i, body in bodies.items():
            assert [m.body for m in store.query_message(TOPIC, "k%d" % i).messages] == [body], i
