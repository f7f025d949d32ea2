"""MessageStore lifecycle: load/start/shutdown/destroy, the folder lock, read-only opens, use after
shutdown (docs/api.md "The store"; docs/format.md §4.2-4.3; RocketMQ DefaultMessageStoreTest.test_repeat_restart)."""

from __future__ import annotations

import hashlib
import os
import struct
import subprocess
import sys
import textwrap
import time

import pytest
from conftest import SMALL_FILE, make_message

from pystore import MessageBatch, PutMessageStatus
from pystore.config import StoreConfig
from pystore.engine.checkpoint import StoreCheckpoint
from pystore.engine.store import MessageStore
from pystore.errors import StoreClosedError, StoreError, StoreLockedError

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def disk_state(root) -> dict[str, tuple[int, int, bytes]]:
    """Every file under ``root``: size, mtime (ns) and, for small files, the bytes."""
    out = {}
    for folder, _, files in os.walk(root):
        for name in files:
            p = os.path.join(folder, name)
            st = os.stat(p)
            data = open(p, "rb").read() if st.st_size <= 4096 else b""
            out[os.path.relpath(p, root)] = (st.st_size, st.st_mtime_ns, data)
    return out


#: Folders of files a live writer keeps mapped: its prefault worker populates their pages ahead of the writer
#: in the background (a few milliseconds after a put, later on a loaded machine), which moves their mtime
#: without changing a byte.
MAPPED_FOLDERS = ("commitlog", "consumequeue", "index")


def live_disk_state(root) -> dict[str, tuple]:
    """``disk_state`` of a folder a writer has open: the mapped files by size and digest of their bytes (not
    mtime, see MAPPED_FOLDERS), every other file by size, mtime and bytes."""
    out: dict[str, tuple] = {}
    for rel, (size, mtime, data) in disk_state(root).items():
        if rel.split(os.sep, 1)[0] in MAPPED_FOLDERS:
            with open(os.path.join(root, rel), "rb") as fh:
                out[rel] = (size, hashlib.sha256(fh.read()).hexdigest())
        else:
            out[rel] = (size, mtime, data)
    return out


def settled_writer_state(store: MessageStore, last_store_timestamp: int) -> dict[str, tuple]:
    """``live_disk_state`` once the writer's own background writes are done: its flush service writes the
    checkpoint (created then) about half a second after the first put, on a slow machine later. Afterwards
    it writes nothing on its own for a long while (the next checkpoint write is the queue flush's, 60 s on)."""
    path = store.config.checkpoint_path()
    deadline = time.monotonic() + 60
    while StoreCheckpoint(path, read_only=True).physic_msg_timestamp != last_store_timestamp:
        assert time.monotonic() < deadline, "the flush service did not write the checkpoint within 60 s"
        time.sleep(0.01)
    return live_disk_state(store.root)


def run_python(code: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True,
                          text=True, timeout=120)


# -- the state machine -----------------------------------------------------------------------------


def test_load_start_shutdown_state_machine(store_factory):
    cfg = store_factory.config()
    s = store_factory.track(MessageStore(cfg))
    assert s.state == "new"
    assert not os.path.exists(cfg.store_path_root_dir)          # nothing touched yet
    assert s.load() is True
    assert s.state == "loaded"
    with pytest.raises(StoreError):
        s.load()
    s.start()
    assert s.state == "started"
    with pytest.raises(StoreError):
        s.start()
    with pytest.raises(StoreError):
        s.load()
    assert s.put_message(make_message(0)).is_ok()
    s.shutdown()
    assert s.state == "shutdown"
    s.shutdown()                                                 # idempotent
    assert s.state == "shutdown"
    with pytest.raises(StoreError):
        s.load()
    with pytest.raises(StoreError):
        s.start()
    store_factory.expect_messages(1)


def test_start_without_load_loads(store_factory):
    s = store_factory.track(MessageStore(store_factory.config()))
    s.start()
    assert s.state == "started"
    assert s.put_message(make_message(0)).is_ok()
    store_factory.expect_messages(1)


def test_shutdown_of_a_new_store(store_factory):
    cfg = store_factory.config()
    s = MessageStore(cfg)
    s.shutdown()
    assert s.state == "shutdown"
    assert not os.path.exists(cfg.store_path_root_dir)
    with pytest.raises(StoreError):
        s.load()


def test_open_is_a_context_manager(store_factory):
    root = store_factory.path()
    with MessageStore.open(root, mapped_file_size_commit_log=SMALL_FILE) as s:
        assert isinstance(s, MessageStore)
        assert s.state == "started"
        assert s.root == str(root)
        assert os.path.exists(root / "abort")
        assert s.put_message(make_message(0)).is_ok()
    assert s.state == "shutdown"
    assert not os.path.exists(root / "abort")
    with pytest.raises(StoreClosedError):
        s.get_max_phy_offset()
    with MessageStore.open(root, mapped_file_size_commit_log=SMALL_FILE) as s2:   # the lock was released
        assert s2.look_message_by_offset(0).body == b"Hello RocketMQ 0"
    store_factory.roots[str(root)] = [str(root / "commitlog")]
    store_factory.expect_messages(1)


def test_open_shuts_down_on_an_exception(store_factory):
    root = store_factory.path()
    with pytest.raises(RuntimeError):
        with MessageStore.open(root, mapped_file_size_commit_log=SMALL_FILE) as s:
            s.put_message(make_message(0))
            raise RuntimeError("boom")
    assert s.state == "shutdown"
    with MessageStore.open(root, mapped_file_size_commit_log=SMALL_FILE) as s2:
        assert s2.get_max_phy_offset() == s2.look_message_by_offset(0).store_size


def test_shutdown_writes_the_checkpoint_and_keeps_the_lock_file(store_factory):
    s = store_factory()
    last = None
    for i in range(3):
        last = s.put_message(make_message(i)).append_message_result
    s.shutdown()
    root = s.root
    # config/ holds delayOffset.json, persisted at shutdown (docs/format.md §4.4, §10); wakeup is pystore's own (§15)
    assert sorted(os.listdir(root)) == ["checkpoint", "commitlog", "config", "consumequeue", "index", "lock", "wakeup"]
    with open(os.path.join(root, "checkpoint"), "rb") as fh:
        cp = fh.read()
    assert len(cp) == 4096
    physic, logics, index = struct.unpack_from(">qqq", cp)
    assert physic == last.store_timestamp
    assert cp[40:] == bytes(4096 - 40)
    with open(os.path.join(root, "lock"), "rb") as fh:
        assert fh.read(4) == b"lock"
    store_factory.expect_messages(3)


def test_default_commit_log_file_size_is_applied(store_factory):
    """The only test with the 1 GiB default: nothing is put, so no file is created."""
    root = store_factory.path("default")
    with MessageStore.open(root) as s:
        assert s.config.mapped_file_size_commit_log == 1 << 30
        assert s.config.store_path_commit_log is None
        assert s.config.commit_log_paths() == [os.path.join(str(root), "commitlog")]
        assert s.get_max_phy_offset() == 0
        assert s.get_min_phy_offset() == -1
    assert not os.path.exists(root / "commitlog") or os.listdir(root / "commitlog") == []


def test_config_must_be_a_store_config(tmp_path):
    for bad in ({"store_path_root_dir": str(tmp_path)}, str(tmp_path), 42):
        with pytest.raises(TypeError):
            MessageStore(bad)
    assert os.listdir(tmp_path) == []
    assert MessageStore().config == StoreConfig()


def test_open_rejects_unknown_settings(tmp_path):
    with pytest.raises(TypeError):
        MessageStore.open(tmp_path / "s", no_such_setting=1)
    assert not os.path.exists(tmp_path / "s" / "lock")


# -- the lock --------------------------------------------------------------------------------------


def test_second_writer_in_the_same_process_is_locked_out(store_factory):
    """test_repeat_restart: a second writer on a live folder gets StoreLockedError; nothing changes."""
    s = store_factory()
    results = [s.put_message(make_message(i)) for i in range(5)]
    s.flush()
    before = settled_writer_state(s, results[-1].append_message_result.store_timestamp)
    with pytest.raises(StoreLockedError) as ei:
        MessageStore.open(s.root, mapped_file_size_commit_log=SMALL_FILE)
    assert isinstance(ei.value, StoreError)
    assert ei.value.path == os.path.join(s.root, "lock")
    bare = MessageStore(StoreConfig(store_path_root_dir=s.root, mapped_file_size_commit_log=SMALL_FILE))
    with pytest.raises(StoreLockedError):
        bare.load()
    assert live_disk_state(s.root) == before
    assert s.put_message(make_message(5)).is_ok()                # the first writer is unharmed
    store_factory.expect_messages(6)


def test_second_writer_in_another_process_is_locked_out(store_factory):
    s = store_factory()
    results = [s.put_message(make_message(i)) for i in range(5)]
    s.flush()
    before = settled_writer_state(s, results[-1].append_message_result.store_timestamp)
    proc = run_python("""
        from pystore.engine.store import MessageStore
        from pystore.errors import StoreLockedError
        try:
            MessageStore.open(%r, mapped_file_size_commit_log=%d)
        except StoreLockedError as e:
            print("LOCKED", e.path)
        else:
            print("OPENED")
    """ % (s.root, SMALL_FILE))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["LOCKED", os.path.join(s.root, "lock")]
    assert live_disk_state(s.root) == before
    end = s.get_max_phy_offset()
    s.shutdown()
    proc = run_python("""
        from pystore.engine.store import MessageStore
        with MessageStore.open(%r, mapped_file_size_commit_log=%d) as s:
            print(s.get_max_phy_offset())
    """ % (s.root, SMALL_FILE))
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout) == end                               # the lock went with the first writer
    store_factory.expect_messages(5)


def test_lock_is_released_when_load_fails(store_factory):
    s = store_factory()
    s.put_message(make_message(0))
    s.shutdown()
    path = os.path.join(s.root, "commitlog", "%020d" % SMALL_FILE)
    with open(path, "wb") as fh:                                 # a second file of the wrong size
        fh.write(b"\x00" * 1000)
    with pytest.raises(StoreError):
        MessageStore.open(s.root, mapped_file_size_commit_log=SMALL_FILE)
    bare = MessageStore(StoreConfig(store_path_root_dir=s.root, mapped_file_size_commit_log=SMALL_FILE))
    assert bare.load() is False                                  # not StoreLockedError: nothing held it
    assert os.path.getsize(path) == 1000                         # the odd file is left for a human
    os.unlink(path)
    s2 = store_factory()
    assert s2.look_message_by_offset(0).body == b"Hello RocketMQ 0"
    store_factory.expect_messages(1)


# -- read-only opens -------------------------------------------------------------------------------


def test_read_only_open_of_a_live_store(store_factory):
    w = store_factory()
    first = [w.put_message(make_message(i)).append_message_result for i in range(3)]
    ro = store_factory(read_only=True)
    assert ro.read_only
    assert ro.look_message_by_offset(first[2].wrote_offset).body == b"Hello RocketMQ 2"
    later = [w.put_message(make_message(10 + i, body_size=3000)).append_message_result for i in range(30)]
    assert later[-1].wrote_offset > SMALL_FILE                   # the writer rolled to a second file
    for i in (0, 14, 29):
        m = ro.look_message_by_offset(later[i].wrote_offset)
        assert m is not None and m.body == make_message(10 + i, body_size=3000).body
    assert ro.look_message_by_offset(later[-1].wrote_offset + later[-1].wrote_bytes) is None
    r = ro.put_message(make_message(99))
    assert r.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    assert ro.put_messages(MessageBatch([make_message(99)])).status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    assert w.put_message(make_message(100)).is_ok()              # the reader did not take the lock
    ro.shutdown()
    assert w.put_message(make_message(101)).is_ok()
    store_factory.expect_messages(3 + 30 + 2)


def test_read_only_open_in_another_process_sees_the_writers_messages(store_factory):
    w = store_factory()
    results = [w.put_message(make_message(i, body_size=2000)).append_message_result for i in range(40)]
    proc = run_python("""
        from pystore.engine.store import MessageStore
        with MessageStore.open(%r, read_only=True) as ro:
            for off in %r:
                m = ro.look_message_by_offset(off)
                print(m.queue_offset, len(m.body))
    """ % (w.root, [a.wrote_offset for a in results]))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:40] == ["%d 2000" % i for i in range(40)]
    store_factory.expect_messages(40)


def test_read_only_open_writes_nothing(store_factory):
    s = store_factory()
    for i in range(20):
        s.put_message(make_message(i, body_size=4000))
    s.shutdown()
    before = disk_state(s.root)
    with MessageStore.open(s.root, read_only=True) as ro:
        assert ro.look_message_by_offset(0).body == make_message(0, body_size=4000).body
        assert ro.flush() >= 0
    assert disk_state(s.root) == before
    assert not os.path.exists(os.path.join(s.root, "abort"))
    store_factory.expect_messages(20)


def test_read_only_open_after_a_crash_does_not_recover_on_disk(store_factory):
    s = store_factory()
    for i in range(5):
        s.put_message(make_message(i))
    s.shutdown()
    open(os.path.join(s.root, "abort"), "wb").close()            # looks like a crash
    before = disk_state(s.root)
    with MessageStore.open(s.root, read_only=True) as ro:
        assert ro.look_message_by_offset(0) is not None
    assert disk_state(s.root) == before                          # abort still there, nothing rewritten
    store_factory.expect_messages(5)


def test_read_only_open_of_a_missing_folder(tmp_path):
    with pytest.raises(StoreError):
        MessageStore.open(tmp_path / "missing", read_only=True)
    assert not os.path.exists(tmp_path / "missing")


def test_read_only_store_cannot_destroy(store_factory):
    s = store_factory()
    s.put_message(make_message(0))
    ro = store_factory(read_only=True)
    with pytest.raises(StoreError):
        ro.destroy()
    assert s.look_message_by_offset(0) is not None
    store_factory.expect_messages(1)


# -- use after shutdown ----------------------------------------------------------------------------

READS = [
    ("get_max_phy_offset", ()),
    ("get_min_phy_offset", ()),
    ("look_message_by_offset", (0,)),
    ("view_message_by_id", ("7F00000100002A9F0000000000000000",)),
    ("get_commit_log_data", (0,)),
    ("get_topic_queue_table", ()),
    ("flush", ()),
    ("dispatch_behind_bytes", ()),
    ("get_runtime_info", ()),
    ("get_message", ("g", "TopicTest", 0, 0)),
    ("get_max_offset_in_queue", ("TopicTest", 0)),
    ("query_message", ("TopicTest", "k")),
]


@pytest.mark.parametrize("method, args", READS, ids=[m for m, _ in READS])
def test_reads_after_shutdown_raise_store_closed(store_factory, method, args):
    s = store_factory()
    s.put_message(make_message(0))
    getattr(s, method)(*args)                                     # works while open
    s.shutdown()
    with pytest.raises(StoreClosedError) as ei:
        getattr(s, method)(*args)
    assert isinstance(ei.value, StoreError)
    assert s.root in str(ei.value)


@pytest.mark.parametrize("method, args", READS, ids=[m for m, _ in READS])
def test_reads_before_load_raise_store_closed(store_factory, method, args):
    s = MessageStore(store_factory.config())
    with pytest.raises(StoreClosedError):
        getattr(s, method)(*args)


def test_read_only_store_after_shutdown(store_factory):
    s = store_factory()
    s.put_message(make_message(0))
    ro = store_factory(read_only=True)
    ro.shutdown()
    for method, args in READS:
        with pytest.raises(StoreClosedError):
            getattr(ro, method)(*args)
    assert s.look_message_by_offset(0) is not None


def test_puts_after_shutdown_are_service_not_available(store_factory):
    s = store_factory()
    s.put_message(make_message(0))
    s.shutdown()
    for r in (s.put_message(make_message(1)), s.put_messages(MessageBatch([make_message(1)])),
              s.async_put_message(make_message(1)).result(5)):
        assert r.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    with pytest.raises(TypeError):
        s.put_message("not a message")
    store_factory.expect_messages(1)


def test_closed_and_unreadable_stores_answer_puts_with_a_status_and_reads_with_an_error(store_factory):
    """The one rule for a store that cannot serve: a put is refused with SERVICE_NOT_AVAILABLE (docs/api.md: a
    refused put is a status), a read raises (StoreError; StoreClosedError once shut down), get_message too:
    it never answers None."""
    s = store_factory()
    s.put_message(make_message(0))
    s.running_flags.get_and_make_not_writeable()
    s.running_flags.get_and_make_not_readable()
    assert s.put_message(make_message(1)).status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    with pytest.raises(StoreError, match="not readable"):
        s.get_message("g", "TopicTest", 0, 0)
    s.running_flags.get_and_make_readable()
    s.running_flags.get_and_make_writeable()
    assert s.get_message("g", "TopicTest", 0, 0).message_count == 1
    s.shutdown()
    assert s.put_message(make_message(1)).status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    with pytest.raises(StoreClosedError):
        s.get_message("g", "TopicTest", 0, 0)
    store_factory.expect_messages(1)


def test_messages_read_before_shutdown_stay_usable(store_factory):
    s = store_factory()
    s.put_message(make_message(0, properties={"p": "v"}))
    m = s.look_message_by_offset(0)
    s.shutdown()
    assert m.body == b"Hello RocketMQ 0" and m.properties["p"] == "v" and m.topic == "TopicTest"


def test_get_commit_log_data_released_before_shutdown(store_factory):
    s = store_factory()
    s.put_message(make_message(0))
    r = s.get_commit_log_data(0)
    data = bytes(r.buffer)
    r.release()
    s.shutdown()
    assert data[4:8] == bytes.fromhex("daa320a7")
    with pytest.raises(StoreClosedError):
        r.buffer


def test_buffer_view_taken_before_shutdown_stays_readable(store_factory):
    s = store_factory()
    s.put_message(make_message(0))
    with s.get_commit_log_data(0) as r:
        view = r.buffer[:8]
        s.shutdown()
        assert bytes(view)[4:8] == bytes.fromhex("daa320a7")
    assert bytes(view)[4:8] == bytes.fromhex("daa320a7")
    view.release()


# -- destroy ---------------------------------------------------------------------------------------


def test_destroy_removes_the_store_files(store_factory):
    s = store_factory()
    for i in range(40):
        s.put_message(make_message(i, body_size=3000))
    root = s.root
    s.destroy()
    assert s.state == "shutdown"
    assert not os.path.exists(root)
    with pytest.raises(StoreClosedError):
        s.get_max_phy_offset()
    assert s.put_message(make_message(0)).status is PutMessageStatus.SERVICE_NOT_AVAILABLE


def test_destroy_keeps_foreign_files(store_factory):
    s = store_factory()
    s.put_message(make_message(0))
    with open(os.path.join(s.root, "notes.txt"), "w") as fh:
        fh.write("mine")
    s.destroy()
    assert os.listdir(s.root) == ["notes.txt"]


def test_destroy_of_a_multi_folder_store(store_factory, tmp_path):
    a, b = tmp_path / "disk1" / "cl", tmp_path / "disk2" / "cl"
    s = store_factory(store_path_commit_log="%s;%s" % (a, b))
    while s.get_max_phy_offset() < 3 * SMALL_FILE:
        s.put_message(make_message(0, body_size=5000))
    assert os.listdir(a) and os.listdir(b)
    s.destroy()
    assert not os.path.exists(a) and not os.path.exists(b)
    assert not os.path.exists(s.root)


def test_destroy_then_reopen_starts_empty(store_factory):
    s = store_factory()
    s.put_message(make_message(0))
    s.destroy()
    s2 = store_factory()
    assert s2.get_max_phy_offset() == 0
    r = s2.put_message(make_message(1))
    assert r.append_message_result.wrote_offset == 0
    assert r.append_message_result.logics_offset == 0
    store_factory.expect_messages(1)


# -- geometry --------------------------------------------------------------------------------------


def test_existing_files_keep_their_geometry(store_factory):
    s = store_factory(mapped_file_size_commit_log=SMALL_FILE)
    for i in range(25):
        s.put_message(make_message(i, body_size=3000))
    end = s.get_max_phy_offset()
    assert end > SMALL_FILE
    s.shutdown()
    s2 = store_factory(mapped_file_size_commit_log=SMALL_FILE // 2)
    assert s2.get_max_phy_offset() == end
    assert s2.look_message_by_offset(0).body == make_message(0, body_size=3000).body
    while s2.get_max_phy_offset() < 3 * SMALL_FILE:
        s2.put_message(make_message(0, body_size=3000))
    # listed once the store is shut down: before, the allocator may be creating the next file (an instant at
    # size 0 before its ftruncate); shutdown waits for it and deletes the file if never used
    s2.shutdown()
    names = sorted(os.listdir(os.path.join(s2.root, "commitlog")))
    assert len(names) >= 3
    for n in names:
        assert int(n) % SMALL_FILE == 0
        assert os.path.getsize(os.path.join(s2.root, "commitlog", n)) == SMALL_FILE


def test_read_only_open_reads_the_geometry_from_disk(store_factory):
    s = store_factory(mapped_file_size_commit_log=SMALL_FILE)
    results = [s.put_message(make_message(i, body_size=3000)).append_message_result for i in range(25)]
    s.shutdown()
    with MessageStore.open(s.root, read_only=True) as ro:                 # 1 GiB configured
        assert ro.look_message_by_offset(results[-1].wrote_offset).body == make_message(
            24, body_size=3000).body
        assert ro.get_max_phy_offset() == results[-1].wrote_offset + results[-1].wrote_bytes
    store_factory.expect_messages(25)


def test_multi_folder_store_reopens(store_factory, tmp_path):
    a, b = tmp_path / "d1", tmp_path / "d2"
    paths = "%s;%s" % (a, b)
    s = store_factory(store_path_commit_log=paths)
    results = [s.put_message(make_message(i, body_size=4000)).append_message_result for i in range(50)]
    s.shutdown()
    used = sorted({r.wrote_offset // SMALL_FILE for r in results})
    assert len(used) >= 3
    assert sorted(os.listdir(a)) == ["%020d" % (k * SMALL_FILE) for k in used if k % 2 == 0]
    assert sorted(os.listdir(b)) == ["%020d" % (k * SMALL_FILE) for k in used if k % 2 == 1]
    s2 = store_factory(store_path_commit_log=paths)
    assert s2.get_max_phy_offset() == results[-1].wrote_offset + results[-1].wrote_bytes
    for i in (0, 20, 49):
        assert s2.look_message_by_offset(results[i].wrote_offset).body == make_message(i, body_size=4000).body
    store_factory.expect_messages(50)


def test_existing_index_keeps_its_geometry(store_factory):
    s = store_factory(max_hash_slot_num=100, max_index_num=400)
    for i in range(50):
        s.put_message(make_message(i))
    s.shutdown()
    names = os.listdir(os.path.join(s.root, "index"))
    size = os.path.getsize(os.path.join(s.root, "index", names[0]))
    assert size == 40 + 100 * 4 + 400 * 20
    s2 = store_factory()                        # opened with the factory's own, different index geometry
    assert [m.body for m in s2.query_message("TopicTest", "key7").messages] == [make_message(7).body]
    s2.put_message(make_message(50))
    assert [m.body for m in s2.query_message("TopicTest", "key50").messages] == [make_message(50).body]
    s2.shutdown()
    assert {os.path.getsize(os.path.join(s.root, "index", n)) for n in os.listdir(os.path.join(s.root, "index"))} \
        == {size}
    store_factory.expect_messages(51)


def test_flush_writes_the_checkpoints_commit_log_time_at_once(store_factory):
    """``flush()`` makes the checkpoint's commit-log time the last flushed message's, on disk, at once (the flush
    service moves it only when it flushes something itself: after a user's flush, at its thorough pass 10 s on)."""
    s = store_factory()
    results = [s.put_message(make_message(i)) for i in range(3)]
    s.flush()
    cp = StoreCheckpoint(s.config.checkpoint_path(), read_only=True)
    assert cp.physic_msg_timestamp == results[-1].append_message_result.store_timestamp
