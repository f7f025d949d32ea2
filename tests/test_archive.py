"""The archive tier (``pystore.archive``) on a ``file://`` archive: sealed files copied byte for byte with their
manifest records, local cleaning that deletes only what was copied, and reads below the local minimum served
from the archive exactly as the same reads of local files (statuses, offsets, messages), through
``get_message``, ``look_message_by_offset``, ``get_columns``, consumers, a reopened store and a read-only one.
Damage: an archived object changed or deleted behind the store's back is refused, naming the object; an
archive that cannot be written keeps every local file."""

from __future__ import annotations

import os
import shutil
import time
import zlib

import pytest

from pystore import Message, MessageStore
from pystore.archive.manifest import COPY_FINISHED, FOLDER, LOCAL_DELETED, Manifest, decode_record, encode_record
from pystore.archive.target import ArchiveError, open_target
from pystore.errors import StoreCorruptedError
from pystore.status import GetMessageStatus

pytest_plugins = ["s3server"]       # the s3_archive and s3_server fixtures (moto's S3 on 127.0.0.1)

GEOMETRY = {"mapped_file_size_commit_log": 64 * 1024, "mapped_file_size_consume_queue": 20 * 64}
TOPIC = "Orders"


def _open(root, archive, options=None, **kw):
    # the service's own passes an hour apart and none on a seal: each test runs the passes it needs (``_archive_pass``)
    kw.setdefault("archive_on_seal", False)
    store = MessageStore.open(str(root), archive_uri=archive, archive_options=options or {},
                              archive_interval_ms=3_600_000, **GEOMETRY, **kw)
    service = store._parts.archive.service if store._parts is not None and store._parts.archive else None
    deadline = time.monotonic() + 30
    while service is not None and not service.passes and time.monotonic() < deadline:
        time.sleep(0.005)          # its first pass (as it starts) over before the test goes on: no pass races the test's
    return store


def _fill(store, n=1200, queues=2):
    """``n`` messages of 200 B over ``queues`` queues (about 4 commit-log files); ``{queue: [bodies]}``."""
    put: dict[int, list[bytes]] = {q: [] for q in range(queues)}
    for i in range(n):
        q = i % queues
        body = b"m%06d-" % i + bytes([i % 251]) * 190
        assert store.put_message(Message(TOPIC, body, queue_id=q, keys="k%d" % i)).is_ok()
        put[q].append(body)
    store.flush()
    store._cq_store.flush(0)        # the consume queues' flush service's work, done now
    return put


def _archive_pass(store):
    return store._parts.archive.service.run_once()


def _clean_all(store):
    store.execute_delete_files_manually()
    return store.clean_files()


def _archive_and_clean(store):
    """A pass of the archiving service, then a cleaning pass that may delete every copied file."""
    _archive_pass(store)
    return _clean_all(store)


def _read_all(store, queue_id, start=0, batch=32):
    """Every message of the queue from ``start``, page by page through next_begin_offset: (bodies, offsets)."""
    bodies, offsets, offset = [], [], start
    for _ in range(10_000):
        r = store.get_message("g", TOPIC, queue_id, offset, batch)
        if r.status is not GetMessageStatus.FOUND:
            assert r.status in (GetMessageStatus.OFFSET_OVERFLOW_ONE, GetMessageStatus.NO_MATCHED_MESSAGE), r
            if r.status is GetMessageStatus.OFFSET_OVERFLOW_ONE:
                break
        for m in r.messages:
            bodies.append(m.body)
            offsets.append(m.queue_offset)
        assert r.next_begin_offset > offset or r.status is GetMessageStatus.OFFSET_OVERFLOW_ONE
        offset = r.next_begin_offset
    return bodies, offsets


@pytest.fixture
def archive(tmp_path):
    return "file://" + str(tmp_path / "archive")


def test_sealed_files_are_copied_byte_for_byte_with_finished_records(tmp_path, archive):
    root = tmp_path / "store"
    with _open(root, archive) as store:
        _fill(store)
        copied = _archive_pass(store)
        files = [os.path.basename(mf.file_name) for mf in store._commitlog.queue.files]
        assert len(files) >= 3 and copied >= len(files) - 1
        target = open_target(archive)
        for name in files[:-1]:                     # every sealed file, the last (open) one never
            assert target.read("commitlog/" + name) == (root / "commitlog" / name).read_bytes()
        assert target.size("commitlog/" + files[-1]) is None
        manifest = Manifest(target).load()
        assert [r["base"] for r in manifest.commitlog_files()] == [int(n) for n in files[:-1]]
        first = manifest.commitlog_files()[0]
        assert first["state"] == COPY_FINISHED and first["size"] == 64 * 1024 and first["min_ts"] > 0
        assert set(first["queues"]) == {TOPIC + "/0", TOPIC + "/1"}
        st = os.stat(os.path.join(archive[len("file://"):], first["name"]))
        assert first["stamp"] == [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
        assert first["crc32"] == zlib.crc32(target.read(first["name"]))
        # sealed consume-queue files whose records are archived, byte for byte too
        for q in (0, 1):
            qfiles = sorted(os.listdir(root / "consumequeue" / TOPIC / str(q)))
            archived = manifest.queue_files(TOPIC, q)
            assert archived and len(archived) <= len(qfiles) - 1
            for r in archived:
                assert target.read(r["name"]) == (root / "consumequeue" / TOPIC / str(q) / r["name"].rsplit("/", 1)[1]
                                                  ).read_bytes()
                assert r["last"] - r["first"] + 1 == 64
        info = store.archive_info()
        assert info["uri"] == archive and info["last_error"] is None and info["min_phy_offset"] == 0
        assert info["end_phy_offset"] == int(files[-1]) and info["lag_bytes"] == store.get_max_phy_offset() - int(
            files[-1])
        assert _archive_pass(store) == 0              # nothing copied twice


def test_cleaning_deletes_only_copied_files_and_reads_come_back_from_the_archive(tmp_path, archive):
    root = tmp_path / "store"
    with _open(root, archive, file_reserved_time=0) as store:
        put = _fill(store)
        cl_files = [os.path.basename(mf.file_name) for mf in store._commitlog.queue.files]
        # nothing copied yet: nothing may go
        assert _clean_all(store) == (0, 0)
        assert [os.path.basename(mf.file_name) for mf in store._commitlog.queue.files] == cl_files
        _archive_pass(store)
        deleted, _ = _clean_all(store)
        assert deleted == len(cl_files) - 1
        states = Manifest(open_target(archive)).load()
        assert all(states.state_of("commitlog/" + n) == LOCAL_DELETED for n in cl_files[:-1])
        assert store.get_min_phy_offset() == int(cl_files[-1]) > 0
        assert store.get_archive_min_phy_offset() == 0
        for q in (0, 1):
            assert store.get_min_offset_in_queue(TOPIC, q) == 0
            bodies, offsets = _read_all(store, q)
            assert bodies == put[q] and offsets == list(range(len(put[q])))
        m = store.look_message_by_offset(0)
        assert m is not None and m.body == put[0][0] and m.commit_log_offset == 0 and m.queue_offset == 0
        assert store.look_message_by_offset(1) is None            # no message starts there, archived or not


def test_a_reopened_and_a_read_only_store_read_the_archive(tmp_path, archive):
    root = tmp_path / "store"
    with _open(root, archive, file_reserved_time=0) as store:
        put = _fill(store)
        _archive_and_clean(store)
        local_min = store.get_min_phy_offset()
        with _open(root, archive, read_only=True) as reader:
            assert reader.get_min_phy_offset() == local_min and reader.get_archive_min_phy_offset() == 0
            assert _read_all(reader, 1)[0] == put[1]
    with _open(root, archive) as store:
        for q in (0, 1):
            assert _read_all(store, q)[0] == put[q]
        # a mid-queue start inside the archive, with a small page: the same messages a local read gives
        r = store.get_message("g", TOPIC, 0, 100, 5)
        assert r.status is GetMessageStatus.FOUND and [m.queue_offset for m in r.messages] == list(range(100, 105))
        assert r.next_begin_offset == 105 and r.min_offset == 0 and r.max_offset == len(put[0])


def test_columns_and_consumers_read_archived_messages(tmp_path, archive):
    pytest.importorskip("pyarrow")
    root = tmp_path / "store"
    with _open(root, archive, file_reserved_time=0) as store:
        put = _fill(store, n=600)
        _archive_and_clean(store)
        assert store.get_min_phy_offset() > 0
        status, next_offset, batch = store.get_columns("g", TOPIC, 0, 0, 50, columns=["queue_offset", "body"])
        assert status is GetMessageStatus.FOUND and batch.num_rows >= 1
        assert batch.column("queue_offset").to_pylist() == list(range(batch.num_rows))
        assert batch.column("body").to_pylist() == put[0][:batch.num_rows] and next_offset == batch.num_rows
        consumer = store.consumer("g", TOPIC, queue_ids=[1])
        got = []
        while len(got) < len(put[1]):
            msgs = consumer.poll(timeout_ms=0)
            if not msgs:
                break
            got.extend(m.body for m in msgs)
        assert got == put[1]


def test_an_offset_below_the_archive_is_too_small(tmp_path, archive):
    root = tmp_path / "store"
    with _open(root, archive, file_reserved_time=0) as store:
        _fill(store, n=300)
        r = store.get_message("g", TOPIC, 0, -5, 4)
        assert r.status is GetMessageStatus.OFFSET_TOO_SMALL and r.next_begin_offset == 0


def test_an_archived_object_changed_or_deleted_is_refused_naming_it(tmp_path, archive):
    root = tmp_path / "store"
    with _open(root, archive, file_reserved_time=0) as store:
        _fill(store)
        _archive_and_clean(store)
        obj = tmp_path / "archive" / "commitlog" / ("%020d" % 0)
        data = bytearray(obj.read_bytes())
        data[5000] ^= 0xFF
        obj.write_bytes(bytes(data))
        with pytest.raises(StoreCorruptedError, match="commitlog/%020d" % 0):
            store.get_message("g", TOPIC, 0, 0, 8)
        obj.unlink()
        with pytest.raises(StoreCorruptedError, match="missing"):
            store.look_message_by_offset(0)


def test_an_archive_that_cannot_be_written_keeps_every_local_file(tmp_path):
    blocker = tmp_path / "not-a-folder"
    blocker.write_bytes(b"x")
    with pytest.raises(ArchiveError, match="not-a-folder"):          # refused at open, naming it
        _open(tmp_path / "other", "file://" + str(blocker))
    root, folder = tmp_path / "store", tmp_path / "archive"
    with _open(root, "file://" + str(folder), file_reserved_time=0) as store:
        _fill(store, n=600)
        shutil.rmtree(folder)
        folder.write_bytes(b"the archive went away")                 # every write to it fails from now on
        files = sorted(os.listdir(root / "commitlog"))
        assert _archive_pass(store) == 0
        info = store.archive_info()
        assert "not-a-folder" not in info["last_error"] and str(folder) in info["last_error"]
        assert info["end_phy_offset"] == -1 and info["lag_bytes"] == store.get_max_phy_offset()
        assert _clean_all(store) == (0, 0) and sorted(os.listdir(root / "commitlog")) == files
        assert store.put_message(Message(TOPIC, b"still accepted")).is_ok()


def test_manifest_records_torn_or_changed_are_skipped(tmp_path, archive):
    target = open_target(archive)
    m = Manifest(target)
    m.append(COPY_FINISHED, "commitlog", "commitlog/%020d" % 0, 0, 100)
    good = encode_record({"seq": 2, "state": COPY_FINISHED, "kind": "commitlog", "name": "commitlog/%020d" % 100,
                          "base": 100, "size": 100})
    assert decode_record(good) is not None and decode_record(good[:-3]) is None
    target.put("%s/%020d.json" % (FOLDER, 2), good[:-3])                       # torn
    target.put("%s/%020d.json" % (FOLDER, 3), good.replace(b'"base":100', b'"base":200'))   # changed
    fresh = Manifest(target).load()
    assert [r["base"] for r in fresh.commitlog_files()] == [0] and fresh.skipped == 2
    assert fresh.next_seq == 4 and fresh.contiguous_end() == 100


def test_a_reader_opened_before_the_copies_follows_the_manifest(tmp_path, archive):
    root = tmp_path / "store"
    with _open(root, archive, file_reserved_time=0) as store:
        put = _fill(store)
        with _open(root, archive, read_only=True) as reader:
            assert reader.get_archive_min_phy_offset() == -1 and reader.archive_info()["commitlog_files"] == 0
            _archive_pass(store)
            _clean_all(store)
            reader.refresh()
            assert reader.get_min_phy_offset() > 0
            assert _read_all(reader, 0)[0] == put[0]
            assert reader.get_archive_min_phy_offset() == 0


def test_on_s3_every_message_comes_back_after_the_local_files_are_gone(tmp_path, s3_archive):
    uri, options = s3_archive
    root = tmp_path / "store"
    with _open(root, uri, options, file_reserved_time=0) as store:
        put = _fill(store)
        assert _archive_pass(store) > 0 and store.archive_info()["last_error"] is None
        sealed = store._commitlog.queue.files[:-1]
        target = open_target(uri, options)
        for mf in sealed:                                   # byte for byte on the server
            name = "commitlog/" + os.path.basename(mf.file_name)
            assert target.read(name) == (root / "commitlog" / os.path.basename(mf.file_name)).read_bytes()
            assert "stamp" not in store._parts.archive.manifest.record_of(name)     # a file:// archive's only
        _clean_all(store)
        assert store.get_min_phy_offset() > 0
    with _open(root, uri, options) as store:                 # a new process' view: the manifest from the server
        for q in (0, 1):
            bodies, offsets = _read_all(store, q)
            assert bodies == put[q] and offsets == list(range(len(put[q])))
        assert store.look_message_by_offset(0).body == put[0][0]


def test_a_server_killed_in_the_middle_of_the_copies_leaves_nothing_half_finished(tmp_path, s3_server):
    bucket = s3_server.create_bucket()
    uri, options = "s3://%s/archive" % bucket, s3_server.options()
    root = tmp_path / "store"
    with _open(root, uri, options, file_reserved_time=0) as store:
        put = _fill(store)
        service = store._parts.archive.service
        real_put_file, calls = service.target.put_file, []

        def dying_put_file(name, path, *a, **kw):
            calls.append(name)
            if len(calls) == 2:
                s3_server.stop()                            # the server dies as the second file's copy starts
            return real_put_file(name, path, *a, **kw)

        service.target.put_file = dying_put_file
        assert service.run_once() == 0                      # the pass ends at the failure
        assert service.last_error is not None and s3_server.endpoint in service.last_error
        files = [os.path.basename(mf.file_name) for mf in store._commitlog.queue.files]
        assert calls[0] == "commitlog/%020d" % 0
        assert _clean_all(store)[0] == 1                    # only the file whose copy finished goes
        s3_server.start()
        manifest = Manifest(open_target(uri, options)).load()
        assert manifest.state_of(calls[1]) == "copy-started"        # begun, never finished: not readable
        assert manifest.commitlog_file_for(int(os.path.basename(calls[1]))) is None
        service.target.put_file = real_put_file
        assert service.run_once() > 0 and service.last_error is None
        assert Manifest(open_target(uri, options)).load().state_of(calls[1]) == COPY_FINISHED
        _clean_all(store)
        assert [os.path.basename(mf.file_name) for mf in store._commitlog.queue.files] == files[-1:]
        for q in (0, 1):
            assert _read_all(store, q)[0] == put[q]


def test_inspect_shows_the_archive_beside_the_local_data(tmp_path, archive):
    from click.testing import CliRunner

    from pystore.cli import cli

    root = tmp_path / "store"
    with _open(root, archive, file_reserved_time=0) as store:
        _fill(store)
        _archive_and_clean(store)
        end = store.archive_info()["end_phy_offset"]
    r = CliRunner().invoke(cli, ["inspect", str(root), "-o", "archive_uri=" + archive, "--json"])
    assert r.exit_code == 0, r.output
    import json

    info = json.loads(r.output)
    assert info["archive"]["min_phy_offset"] == 0 and info["archive"]["end_phy_offset"] == end
    assert info["commit_log"]["min_offset"] == end and all(q["min_offset"] == 0 for q in info["queues"])
    r = CliRunner().invoke(cli, ["inspect", str(root), "-o", "archive_uri=" + archive])
    assert r.exit_code == 0 and "archive" in r.output and "0 .. %d" % end in r.output, r.output


def test_full_index_files_are_archived_and_query_message_reads_them(tmp_path, archive):
    """Full index files are copied once their messages are, cleaning deletes them only then, and
    ``query_message`` finds keys of messages below the local data through the archived files, as a store that
    kept everything local finds them (a reopened and a read-only store too)."""
    root = tmp_path / "s"
    small_index = {"max_hash_slot_num": 64, "max_index_num": 200}
    with _open(root, archive, file_reserved_time=0, **small_index) as store:
        _fill(store, 1200)
        store._parts.index.flush()
        want = {k: store.query_message(TOPIC, k).messages[0].body for k in ("k0", "k7", "k555", "k1100")}
        n_local = len(store._parts.index.files)
        assert n_local > 3
        _archive_and_clean(store)
        m = Manifest(open_target(archive)).load()
        archived = m.index_files()
        assert archived and all(r["state"] in (COPY_FINISHED, LOCAL_DELETED) for r in archived)
        assert len(store._parts.index.files) < n_local          # some were deleted, after their copy
        local = {os.path.basename(f.mapped_file.file_name) for f in store._parts.index.files}
        gone = [r for r in archived if r["name"].split("/")[-1] not in local]
        assert gone and all(r["end_phy"] < store.get_min_phy_offset() for r in gone)
        # the archived object is the local file byte for byte (its header names its range)
        assert open(str(tmp_path / "archive" / archived[0]["name"]), "rb").read(8) != bytes(8)
        for k, body in want.items():
            r = store.query_message(TOPIC, k)
            assert [x.body for x in r.messages] == [body], k
        assert store.query_message(TOPIC, "no-such-key").messages == []
    for opts in ({}, {"read_only": True}):
        with _open(root, archive, **small_index, **opts) as store:
            for k, body in want.items():
                assert [x.body for x in store.query_message(TOPIC, k).messages] == [body], (k, opts)


def test_index_files_stay_local_until_archived(tmp_path):
    """An archive that cannot be written: cleaning keeps every index file (as it keeps the other files)."""
    folder = tmp_path / "gone"
    root = tmp_path / "s"
    with _open(root, "file://" + str(folder), file_reserved_time=0, max_hash_slot_num=64, max_index_num=200) as store:
        _fill(store, 1200)
        store._parts.index.flush()
        shutil.rmtree(folder)
        folder.write_bytes(b"the archive went away")                 # every write to it fails from now on
        n = len(store._parts.index.files)
        assert n > 3
        _archive_and_clean(store)
        assert len(store._parts.index.files) == n
        assert [m.body for m in store.query_message(TOPIC, "k3").messages]


def test_cli_get_query_and_verify_archive(tmp_path, archive):
    """``pystore get`` and ``query`` read below the local data with ``-o archive_uri=``; ``verify --archive``
    checks every archived object, and names one changed behind the store's back."""
    import json

    from click.testing import CliRunner

    from pystore.cli import cli

    root = tmp_path / "store"
    small_index = {"max_hash_slot_num": 64, "max_index_num": 200}
    with _open(root, archive, file_reserved_time=0, **small_index) as store:
        put = _fill(store, 1200)
        store._parts.index.flush()
        _archive_and_clean(store)
        assert store.get_min_phy_offset() > 0
    o = ["-o", "archive_uri=" + archive, "-o", "max_hash_slot_num=64", "-o", "max_index_num=200"]
    run = CliRunner().invoke
    r = run(cli, ["get", str(root), TOPIC, "0", "0", "--json", *o])
    assert r.exit_code == 0, r.output
    got = json.loads(r.output)
    assert got["status"] == "FOUND" and got["messages"][0]["queue_offset"] == 0
    r = run(cli, ["query", str(root), TOPIC, "k2", "--json", *o])
    assert r.exit_code == 0, r.output
    assert [m["keys"] for m in json.loads(r.output)["messages"]] == [["k2"]]
    r = run(cli, ["verify", str(root), "--archive", "--json", *o])
    assert r.exit_code == 0, r.output
    report = json.loads(r.output)
    assert report["ok"] and report["archive"]["commitlog_files"] >= 3 and report["archive"]["index_files"] >= 1
    assert report["archive"]["records"] >= 1200 - len(put[0]) // 2
    r = run(cli, ["verify", str(root), "--archive"])
    assert r.exit_code != 0 and "archive_uri" in r.output                  # no archive to check: said so
    # a byte of an archived commit-log object changed: named, with the exit status of a problem
    name = sorted(os.listdir(tmp_path / "archive" / "commitlog"))[1]
    path = tmp_path / "archive" / "commitlog" / name
    data = bytearray(path.read_bytes())
    data[500] ^= 0xFF
    path.write_bytes(bytes(data))
    r = run(cli, ["verify", str(root), "--archive", "--json", *o])
    report = json.loads(r.output)
    assert r.exit_code != 0 and not report["ok"]
    assert any(p["path"].endswith("commitlog/" + name) for p in report["archive"]["problems"])


def test_local_retention_bytes_deletes_copied_files_at_any_age(tmp_path, archive):
    """``archive_local_retention_bytes``: the oldest copied files go at once, whatever their age, until the local
    log fits; files not yet copied stay however large the log; every message still reads back."""
    size = GEOMETRY["mapped_file_size_commit_log"]
    with _open(tmp_path / "s", archive, archive_local_retention_bytes=2 * size) as store:
        put = _fill(store, 1500)
        n_files = len(store._parts.commitlog.queue.files)
        assert n_files > 4
        assert store.clean_files()[0] == 0                       # nothing copied yet: nothing deleted
        assert len(store._parts.commitlog.queue.files) == n_files
        _archive_pass(store)
        store.clean_files()
        files = store._parts.commitlog.queue.files
        assert len(files) <= 2 and store.get_min_phy_offset() > 0
        assert store.get_min_phy_offset() <= store.archive_info()["end_phy_offset"]
        for q in put:
            assert _read_all(store, q)[0] == put[q]


def _finished_commitlog(store):
    return [r["name"] for r in store._parts.archive.manifest.commitlog_files()]


@pytest.mark.parametrize("on_seal", [True, False])
def test_a_sealed_file_is_copied_as_soon_as_it_is_flushed_with_archive_on_seal(tmp_path, archive, on_seal):
    # the passes an hour apart: only the look for a sealed file (every 50 ms) can copy it
    with _open(tmp_path / "store", archive, archive_on_seal=on_seal) as store:
        store._parts.archive.service.wakeup()
        _fill(store, n=700)                 # more than two commit-log files
        sealed = ["commitlog/" + os.path.basename(mf.file_name) for mf in store._commitlog.queue.files[:-1]]
        assert len(sealed) >= 2
        manifest = store._parts.archive.manifest
        deadline = time.monotonic() + 30
        while on_seal and _finished_commitlog(store) != sealed and time.monotonic() < deadline:
            time.sleep(0.02)
        if on_seal:
            assert _finished_commitlog(store) == sealed
            assert open(os.path.join(str(tmp_path / "archive"), sealed[0]), "rb").read() == open(
                store._commitlog.queue.files[0].file_name, "rb").read()
        else:
            time.sleep(0.5)                 # ten looks' worth: none copies
            assert _finished_commitlog(store) == [] and manifest.state_of(sealed[0]) is None


def test_the_seal_look_works_on_a_machine_booted_less_than_an_interval_ago(tmp_path, archive, monkeypatch):
    """The monotonic clock counts from the machine's boot: a service that dated its "last pass" at that clock's
    zero made no pass (and so never loaded the manifest its seal look needs) until the machine had been up for a
    whole interval. A clock that reads 5 s since boot: the sealed files are copied all the same."""
    import types

    from pystore.archive import uploader

    offset = time.monotonic() - 5.0
    monkeypatch.setattr(uploader, "time", types.SimpleNamespace(monotonic=lambda: time.monotonic() - offset,
                                                                time=time.time))
    with _open(tmp_path / "store", archive, archive_on_seal=True) as store:
        _fill(store, n=700)
        sealed = ["commitlog/" + os.path.basename(mf.file_name) for mf in store._commitlog.queue.files[:-1]]
        deadline = time.monotonic() + 30
        while _finished_commitlog(store) != sealed and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _finished_commitlog(store) == sealed


def test_unit_bytes_give_the_archived_queue_units_that_size_a_columns_page(tmp_path, archive):
    root = tmp_path / "store"
    with _open(root, archive, file_reserved_time=0) as store:
        _fill(store)
        qdir = root / "consumequeue" / TOPIC / "0"
        first_file = (qdir / sorted(os.listdir(qdir))[0]).read_bytes()
        _archive_pass(store)
        _archive_and_clean(store)
        arch = store._parts.archive
        assert arch.unit_bytes(TOPIC, 0, 3, 5) == first_file[3 * 20:8 * 20]
        assert arch.unit_bytes(TOPIC, 0, 60, 1000) == first_file[60 * 20:]        # to the end of its file
        assert arch.unit_bytes(TOPIC, 0, 10_000, 5) is None                       # not in the archive
        assert arch.unit_bytes("Nope", 0, 0, 5) is None
        # the page those units size is the archived messages' page
        status, nxt, batch = store.get_columns("g", TOPIC, 0, 3, 5, columns=["queue_offset"])
        assert status.name == "FOUND" and batch.column(0).to_pylist() == [3, 4, 5, 6, 7] and nxt == 8


def test_cleaning_makes_the_queue_units_durable_before_it_deletes_archived_files(tmp_path, archive):
    """The consume-queue units pointing into archived commit-log files are flushed before cleaning deletes those
    files: after a power cut, recovery can rebuild lost units only from the local commit log, which no longer holds
    them (found by tests/powerloss/test_archive_powerloss.py: acknowledged messages in the archive, in no queue)."""
    size = GEOMETRY["mapped_file_size_commit_log"]
    with _open(tmp_path / "s", archive, archive_local_retention_bytes=2 * size, flush_interval_consume_queue=3_600_000,
               flush_consume_queue_least_pages=1000) as store:
        for i in range(1200):
            assert store.put_message(Message(TOPIC, b"x" * 200, queue_id=i % 2)).is_ok()
        store.flush()                                   # the commit log only: the queues' units are not flushed
        queues = [store._cq_store.find(TOPIC, q) for q in (0, 1)]
        assert all(cq.queue.flushed_where < cq.queue.get_max_offset() for cq in queues)
        _archive_pass(store)
        assert store.clean_files()[0] > 0
        assert all(cq.queue.flushed_where == cq.queue.get_max_offset() for cq in queues)


@pytest.mark.parametrize("where", ["full-file", "walked-file"])
def test_a_damaged_queue_keeps_its_units_of_archived_messages_when_rebuilt(tmp_path, archive, where):
    """A queue whose files cannot be trusted is rebuilt from the local commit log; with an archive, its units of
    messages below the local log (archived, their local files deleted) are kept, since no walk of the local log
    can write them again: every message reads back at its offset (found by tests/powerloss/
    test_archive_powerloss.py: a full queue file left unflushed by a cut before a later one lost them).
    ``full-file``: the last unit of a full file inside the queue (the open's check of whole files);
    ``walked-file``: a unit followed by others in the last file (the recovery walk)."""
    root = tmp_path / "store"
    size = GEOMETRY["mapped_file_size_commit_log"]
    with _open(root, archive, archive_local_retention_bytes=size) as store:
        put = _fill(store, 1500, queues=1)[0]
        _archive_pass(store)
        # more puts after the pass: the queue file that was being written fills (not archived: the pass found it
        # open), and cleaning deletes the commit-log files the pass copied, some of whose units it holds
        put += [b"late-%d" % i for i in range(300)]
        for body in put[1500:]:
            assert store.put_message(Message(TOPIC, body, queue_id=0)).is_ok()
        store.flush()
        store._cq_store.flush(0)
        store.clean_files()
        local_min = store.get_min_phy_offset()
        cq = store._cq_store.find(TOPIC, 0)
        first_local = cq.queue.files[0].file_from_offset // 20
        below = next(i for i in range(first_local, cq.get_max_offset_in_queue()) if cq.unit(i)[0] >= local_min)
        records = store._parts.archive.manifest.queue_files(TOPIC, 0)
        # the units of the last archived messages are only in a local queue file: the rebuild must keep them
        assert local_min > 0 and first_local < below and int(records[-1]["last"]) < first_local
        if where == "full-file":
            target = next(mf.file_from_offset // 20 for mf in cq.queue.files[:-1] if mf.file_from_offset // 20 > below)
            target += 63
        else:
            target = cq.get_max_offset_in_queue() - 3
    _zero_unit_on_disk(root, 0, target)
    with _open(root, archive, archive_local_retention_bytes=size) as store:
        assert store._cq_store.rebuilt        # the damage was seen, the queue rebuilt
        bodies, offsets = _read_all(store, 0)
        assert bodies == put and offsets == list(range(len(put)))
        assert store.get_min_offset_in_queue(TOPIC, 0) == 0


def _zero_unit_on_disk(root, queue_id, index):
    folder = root / "consumequeue" / TOPIC / str(queue_id)
    file_size = GEOMETRY["mapped_file_size_consume_queue"]
    base = index * 20 // file_size * file_size
    with open(folder / ("%020d" % base), "r+b") as f:
        f.seek(index * 20 - base)
        f.write(bytes(20))


def test_time_searches_and_store_times_answer_below_the_local_data_as_if_it_were_local(tmp_path, archive):
    """``get_offset_in_queue_by_time`` (both boundaries), ``get_message_store_timestamp`` and
    ``get_earliest_message_time`` give the same answers once the local files were cleaned away (the records in the
    archive) as they gave while every file was local; also from a reopened store (an empty cache)."""
    root = tmp_path / "store"
    size = GEOMETRY["mapped_file_size_commit_log"]

    def answers(store, times):
        out = {"earliest": store.get_earliest_message_time()}
        for q in (0, 1):
            hi = store.get_max_offset_in_queue(TOPIC, q)
            out[q] = ([store.get_message_store_timestamp(TOPIC, q, i) for i in range(hi)],
                      [store.get_offset_in_queue_by_time(TOPIC, q, t, b) for t in times for b in ("lower", "upper")],
                      store.get_earliest_message_time(TOPIC, q))
        return out

    with _open(root, archive, archive_local_retention_bytes=size) as store:
        for i in range(1500):
            if i % 100 == 0:
                time.sleep(0.003)       # store times a few milliseconds apart
            assert store.put_message(Message(TOPIC, b"t%06d-" % i + bytes(190), queue_id=i % 2)).is_ok()
        store.flush()
        store._cq_store.flush(0)
        stamps = sorted({store.get_message_store_timestamp(TOPIC, 0, i) for i in range(750)})
        assert len(stamps) > 5
        times = [0, stamps[0] - 1] + [t + d for t in stamps for d in (-1, 0, 1)] + [stamps[-1] + 10**6]
        local = answers(store, times)
        _archive_pass(store)
        store.clean_files()
        assert store.get_min_phy_offset() > 0
        assert store.get_min_offset_in_queue(TOPIC, 0) == 0 and store._cq_store.find(TOPIC, 0).get_min_offset_in_queue() > 0
        assert answers(store, times) == local
    with _open(root, archive, archive_local_retention_bytes=size) as store:
        assert answers(store, times) == local


def test_timers_whose_records_only_the_archive_holds_keep_their_timer_log_and_are_delivered(tmp_path, archive):
    # The timer store reads a waiting timer's record from the archive once the local log's retention deleted its
    # file; the timer-log files its units are in must stay too (they went with the local log's first offset:
    # the units of timers still waiting were gone, and the timers never delivered).
    from pystore.timer.timer_services import TimerServices

    now = [1_700_000_000_000]
    with _open(tmp_path / "s", archive, archive_local_retention_bytes=1, mapped_file_size_timer_log=4096,
               clock=lambda: now[0]) as store:
        for s in store._services:                           # the test runs the timer store's steps itself
            if isinstance(s, TimerServices):
                for t in s.threads:
                    t.shutdown(True)
        ts = store.timer_message_store
        deliver = now[0] + 60_000
        for i in range(200):                                # several 4 KiB timer-log files of units
            assert store.put_message(Message(TOPIC, b"timer %d" % i, deliver_at_ms=deliver,
                                             properties={"UNIQ_KEY": "k%d" % i})).is_ok()
        while ts.enqueue():
            pass
        for _ in range(600):                                # their commit-log file sealed, archived, cleaned
            assert store.put_message(Message("Filler", b"f" * 400)).is_ok()
        store.flush()
        store._cq_store.flush(0)
        _archive_pass(store)
        _clean_all(store)
        assert store.get_min_phy_offset() > 0 and ts.look(0) is not None     # record 0: from the archive
        files = len(ts.timer_log.queue.files)
        assert files > 1
        ts.delete_expired()                                 # what the timer flush service does after each flush
        assert len(ts.timer_log.queue.files) == files
        now[0] = deliver + 1001
        for _ in range(100_000):
            if not ts.enqueue() and ts.dequeue() == -1:
                break
        store.flush()
        got = []
        while len(got) < 200:
            r = store.get_message("g", TOPIC, 0, len(got), 32)
            if not r.messages:
                break
            got += [m.body for m in r.messages]
        assert sorted(got) == sorted(b"timer %d" % i for i in range(200))
