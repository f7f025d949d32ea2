"""Regression tests for bugs once found in pystore's core (all fixed).

Crashing cases run in a subprocess so that a segfault fails one test instead of the whole run.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from conftest import SMALL_FILE, make_message

from pystore import Message, MessageBatch
from pystore.config import StoreConfig
from pystore.engine.store import MessageStore
from pystore.tools import iter_commitlog

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_python(code: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True,
                          text=True, timeout=120)


# BUG 1: the topic-queue table is not rebuilt when a store is reopened, so queue offsets restart at 0.
def test_bug1_queue_table_survives_a_restart(store_factory):
    s = store_factory()
    for i in range(5):
        s.put_message(make_message(i, queue_id=i % 2))
    assert s.get_topic_queue_table() == {("TopicTest", 0): 3, ("TopicTest", 1): 2}
    s.shutdown()
    s2 = store_factory()
    assert s2.get_topic_queue_table() == {("TopicTest", 0): 3, ("TopicTest", 1): 2}
    r = s2.put_message(make_message(5, queue_id=0))
    assert r.append_message_result.logics_offset == 3          # actual: 0, a duplicate queue offset


# BUG 2: a SelectMappedBufferResult whose buffer was not touched yet does not pin the mapping; after the
# store shuts down (or the file is force-destroyed) `.buffer` maps address NULL+pos and reading segfaults.
def test_bug2_commit_log_data_buffer_after_shutdown_does_not_crash(tmp_path):
    proc = run_python("""
        from pystore.engine.store import MessageStore
        from pystore import Message
        from pystore.errors import StoreError
        s = MessageStore.open(%r, mapped_file_size_commit_log=65536)
        s.put_message(Message("T", b"hello"))
        r = s.get_commit_log_data(0)
        s.shutdown()
        try:
            data = bytes(r.buffer)
            print("READ", data[4:8].hex())
        except StoreError as e:
            print("RAISED", type(e).__name__)
    """ % str(tmp_path / "s"))
    assert proc.returncode == 0, "crashed with %d: %s" % (proc.returncode, proc.stderr[-300:])
    assert proc.stdout.split()[0] in ("READ", "RAISED")


def test_bug2_selected_buffer_after_forced_destroy_does_not_crash(tmp_path):
    proc = run_python("""
        from pystore.log._mapped_file import MappedFile
        from pystore.errors import StoreError
        f = MappedFile(%r, 8192, create=True)
        f.append_message(b"abcdef")
        r = f.select_mapped_buffer(0)
        f.destroy(0, now=0)
        f.destroy(0, now=0)                     # forced: the reader's reference is overridden
        try:
            print("READ", bytes(r.buffer))
        except StoreError as e:
            print("RAISED", type(e).__name__)
    """ % str(tmp_path / "00000000000000000000"))
    assert proc.returncode == 0, "crashed with %d: %s" % (proc.returncode, proc.stderr[-300:])


# BUG 3: RecordIterator holds its file but does not check the mapping on each step; a forced destroy
# while iterating makes the next step read NULL+pos.
def test_bug3_record_iterator_after_forced_destroy_does_not_crash(tmp_path):
    proc = run_python("""
        from pystore.log._mapped_file import MappedFile
        from pystore.log._records import RecordIterator
        from pystore.format._codec import encode_record
        from pystore import Message
        from pystore.errors import StoreError
        f = MappedFile(%r, 8192, create=True)
        a = encode_record(Message("T", b"abc"), 0, 0, 1)
        f.append_message(a)
        f.append_message(encode_record(Message("T", b"abc"), 1, len(a), 1))
        it = RecordIterator(f, 0, True)
        next(it)
        f.destroy(0, now=0)
        f.destroy(0, now=0)
        try:
            print("NEXT", next(it))
        except (StoreError, StopIteration) as e:
            print("STOPPED", type(e).__name__)
    """ % str(tmp_path / "00000000000000000000"))
    assert proc.returncode == 0, "crashed with %d: %s" % (proc.returncode, proc.stderr[-300:])


# BUG 4: a read-only store following a live writer counts the writer's pre-allocated (empty) next file:
# get_max_phy_offset() returns that file's start offset instead of the end of written data.
def test_bug4_read_only_max_phy_offset_of_a_live_store(store_factory):
    w = store_factory()
    w.put_message(make_message(0))
    ro = store_factory(read_only=True)
    assert ro.get_max_phy_offset() == w.get_max_phy_offset()         # actual: 65536
    r = w.put_message(make_message(1))
    assert ro.get_max_phy_offset() == r.next_offset
    assert ro.look_message_by_offset(r.append_message_result.wrote_offset).body == b"Hello RocketMQ 1"


# BUG 5: a batch's msg_id is computed lazily from the Message objects, so mutating a message after the
# put changes the ids already returned.
def test_bug5_batch_msg_ids_do_not_follow_later_message_changes(store_factory):
    s = store_factory()
    ms = [Message("T", b"a"), Message("T", b"b")]
    r = s.put_messages(MessageBatch(ms))
    ms[0].body = b"x" * 100
    ids = r.append_message_result.msg_id.split(",")
    second = int(ids[1][-16:], 16)
    assert second == s.look_message_by_offset(0).store_size          # actual: 93 + 99 = 192
    assert s.view_message_by_id(ids[1]).body == b"b"


# BUG 6: destroy() on a store that never took the lock deletes the files of a live writer, which then
# keeps acknowledging puts into unlinked files: every message is lost.
def test_bug6_destroy_without_the_lock_leaves_a_live_store_alone(store_factory):
    w = store_factory()
    w.put_message(make_message(0))
    other = MessageStore(StoreConfig(store_path_root_dir=w.root, mapped_file_size_commit_log=SMALL_FILE))
    try:
        other.destroy()
    except Exception:
        pass                                   # refusing (StoreLockedError) is fine; deleting is not
    assert w.put_message(make_message(1)).is_ok()
    w.shutdown()
    assert [m.body for m in iter_commitlog(w.root)] == [b"Hello RocketMQ 0", b"Hello RocketMQ 1"]


# BUG 7 (RocketMQ divergence): getCommitLogData / selectMappedBuffer(pos) return null when pos is the
# end of readable data; pystore returns an empty result that holds the file until released.
def test_bug7_get_commit_log_data_at_the_max_offset_is_none(store_factory):
    s = store_factory()
    s.put_message(make_message(0))
    r = s.get_commit_log_data(s.get_max_phy_offset())
    try:
        assert r is None                                             # actual: size-0 result
    finally:
        if r is not None:
            r.release()


# BUG 8 (docs/api.md contract): the top-level package does not export MessageStore, StoreConfig, TagFilter,
# FlushDiskType, BrokerRole (docs/api.md "Exported from pystore").
@pytest.mark.parametrize("name", ["MessageStore", "StoreConfig", "TagFilter", "FlushDiskType", "BrokerRole"])
def test_bug8_api_names_are_exported(name):
    import pystore

    assert hasattr(pystore, name)
