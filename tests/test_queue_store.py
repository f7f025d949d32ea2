"""The table of consume queues (``pystore.queue.queue_store``): each busy queue's next file made ahead outside
the queues' folders (``consumequeue.ready/``), renamed in by the roll in C, dropped when it no longer fits or the
queue's files go, and left behind by a SIGKILLed writer without touching what RocketMQ reads. Loading, recovery
and flushing of the table: test_consume_queue.py, test_recovery.py."""

from __future__ import annotations

import os
import struct

from conftest import make_message

from pystore import GetMessageStatus, MessageStore
from pystore.queue.queue_store import ConsumeQueueStore

UNIT = struct.Struct(">qiq")
TOPIC = "TopicTest"
GROUP = "G"


def cq_dir(root, topic=TOPIC, qid=0):
    return os.path.join(str(root), "consumequeue", topic, str(qid))


def units_of(data):
    return [UNIT.unpack_from(data, i) for i in range(0, len(data) - 19, 20)]


# ------------------------------------------------------------------------------------------------------
# the next file, made ahead (ConsumeQueueStore.keep_ready; the roll takes it in C)
# ------------------------------------------------------------------------------------------------------


def _ready_store(tmp_path, units_per_file=10):
    cqs = ConsumeQueueStore(str(tmp_path / "consumequeue"), 20 * units_per_file)
    cqs.keep_ready()
    return cqs, cqs.find_or_create("T", 0)


def test_the_next_file_is_made_ahead_once_the_last_is_half_full_and_renamed_in_by_the_roll(tmp_path):
    cqs, cq = _ready_store(tmp_path)
    ready_dir = str(tmp_path / "consumequeue.ready")
    for i in range(4):
        cq.put_message_position_info(i * 100, 100, 0, i)
    cqs.flush(0)
    assert cq.core.ready is None and not os.listdir(cq.folder)[1:]        # under half: nothing made
    cq.put_message_position_info(400, 100, 0, 4)
    cqs.flush(0)
    ready = cq.core.ready
    assert ready is not None and ready.file_from_offset == 200
    assert os.listdir(ready_dir) == [os.path.basename(ready.file_name)]
    assert sorted(os.listdir(cq.folder)) == ["%020d" % 0]                   # not the queue's until taken
    cqs.flush(0)
    assert cq.core.ready is ready                                           # one at a time
    for i in range(5, 13):
        cq.put_message_position_info(i * 100, 100, 7, i)
    assert cq.core.ready_rolls == 1 and cq.core.ready is None
    assert cq.queue.files[1] is ready and ready.file_name == os.path.join(cq.folder, "%020d" % 200)
    assert sorted(os.listdir(cq.folder)) == ["%020d" % 0, "%020d" % 200] and os.listdir(ready_dir) == []
    assert [cq.unit(i) for i in (9, 10, 12)] == [(900, 100, 7), (1000, 100, 7), (1200, 100, 7)]
    assert cq.get_max_offset_in_queue() == 13
    cqs.flush(0)
    assert cq.queue.flushed_where == 13 * 20
    with open(os.path.join(cq.folder, "%020d" % 200), "rb") as f:
        assert units_of(f.read())[:3] == [(1000, 100, 7), (1100, 100, 7), (1200, 100, 7)]
    cqs.close()
    assert not os.path.exists(ready_dir)


def test_a_ready_file_that_no_longer_follows_the_queue_is_deleted(tmp_path):
    cqs, cq = _ready_store(tmp_path)
    for i in range(16):
        cq.put_message_position_info(i * 100, 100, 0, i)
    cqs.flush(0)
    stale = cq.core.ready
    assert stale is not None and stale.file_from_offset == 400
    cq.truncate_dirty_logic_files(500)                  # back into the first file
    cqs.flush(0)
    assert not os.path.exists(stale.file_name)
    assert cq.core.ready is not None and cq.core.ready.file_from_offset == 200
    assert cq.core.ready is not stale


def test_a_roll_whose_ready_file_went_away_makes_the_file_in_place(tmp_path, caplog):
    cqs, cq = _ready_store(tmp_path)
    for i in range(6):
        cq.put_message_position_info(i * 100, 100, 0, i)
    cqs.flush(0)
    lost = cq.core.ready
    os.unlink(lost.file_name)
    for i in range(6, 12):
        cq.put_message_position_info(i * 100, 100, 0, i)
    assert cq.core.ready_rolls == 0 and "cannot move the ready file" in caplog.text
    assert cq.queue.files[1] is not lost and cq.unit(11) == (1100, 100, 0)
    cqs.flush(0)                                        # the stale offer is dropped, no error
    assert cq.core.ready is None or cq.core.ready.file_from_offset == 400


def test_deleting_a_queue_drops_its_ready_file(tmp_path):
    cqs, cq = _ready_store(tmp_path)
    for i in range(6):
        cq.put_message_position_info(i * 100, 100, 0, i)
    cqs.flush(0)
    ready = cq.core.ready.file_name
    cq.discard_files()
    assert cq.core.ready is None and not os.path.exists(ready)
    for i in range(6):
        cq.put_message_position_info(i * 100, 100, 0, i)
    cqs.flush(0)
    assert cq.core.ready is not None
    assert cqs.remove("T", 0) is cq and cq.core.ready is None
    assert os.listdir(str(tmp_path / "consumequeue.ready")) == []


_KILLED_WITH_READY = """
import os, sys, time
from conftest import make_message
from pystore import MessageStore
store = MessageStore.open(sys.argv[1], mapped_file_size_commit_log=64 * 1024,
                          mapped_file_size_consume_queue=20 * 8, flush_interval_consume_queue=10)
for i in range(20):
    assert store.put_message(make_message(i)).is_ok()
ready_dir = os.path.join(sys.argv[1], "consumequeue.ready")
deadline = time.monotonic() + 30
while not (os.path.isdir(ready_dir) and os.listdir(ready_dir)) and time.monotonic() < deadline:
    time.sleep(0.01)
print(len(os.listdir(ready_dir)), flush=True)
time.sleep(60)
"""


def test_a_writer_killed_with_a_ready_file_leaves_the_queues_as_rocketmq_would(tmp_path, procs):
    """The made-ahead file lies outside the queues' folders: a SIGKILLed writer leaves it in the ready
    folder, which the next writer empties; the queue's folder holds its three files and nothing else."""
    root = str(tmp_path / "store")
    p = procs.start(root, script=_KILLED_WITH_READY)
    assert p.stdout.readline().strip() == b"1"
    p.kill()
    p.wait()
    ready_dir = os.path.join(root, "consumequeue.ready")
    assert len(os.listdir(ready_dir)) == 1
    assert sorted(os.listdir(cq_dir(root))) == ["%020d" % (160 * k) for k in range(3)]
    store = MessageStore.open(root, mapped_file_size_commit_log=64 * 1024, mapped_file_size_consume_queue=20 * 8)
    try:
        assert not os.path.exists(ready_dir) or os.listdir(ready_dir) == []
        assert sorted(os.listdir(cq_dir(root))) == ["%020d" % (160 * k) for k in range(3)]
        assert store.get_max_offset_in_queue(TOPIC, 0) == 20
        offset, bodies = 0, []
        while offset < 20:
            got = store.get_message(GROUP, TOPIC, 0, offset, 32)
            assert got.status is GetMessageStatus.FOUND
            bodies += [m.body for m in got.messages]
            offset = got.next_begin_offset
        assert bodies == [make_message(i).body for i in range(20)]
    finally:
        store.shutdown()
