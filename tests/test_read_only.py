"""Readers in other processes (docs/api.md ``MessageStore.open(root, read_only=True)``; docs/architecture.md "The read path").

A real writer process appends while this process reads the same folder read-only: every message read is
whole (its body and CRC are what the writer put, its queue offset is its place in the queue), new files,
new queues and new topics appear, nothing the reader does writes to the folder, and at the end the reader
sees exactly what the writer wrote.

The writer is driven over stdin/stdout (``put N``, ``race N``, ``newtopic``, ``quit``) so each step is
deterministic except ``race``, where the reader polls while the writer appends as fast as it can.
"""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import textwrap
import threading
import zlib

import pytest
from conftest import SMALL_INDEX  # the writer's index geometry; a reader is told the same

from pystore import GetMessageStatus, MessageStore
from pystore.tools import iter_commitlog, iter_consume_queue

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOPIC = "LiveTopic"
GROUP = "G"
CL_FILE = 256 * 1024
CQ_UNITS = 100

WRITER = textwrap.dedent('''
    import sys
    from pystore import Message
    from pystore import MessageBatch
    from pystore import MessageStore

    root, cl_file, cq_units = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])

    def body(i, q, seq):
        head = b"m%07d q%d s%07d " % (i, q, seq)
        return head + bytes((i * 7 + k) % 251 for k in range((i * 37) % 400))

    store = MessageStore.open(root, mapped_file_size_commit_log=cl_file,
                              mapped_file_size_consume_queue=cq_units * 20, max_hash_slot_num=1000,
                              max_index_num=4000)
    seq = {}
    i = 0

    def one(topic, q):
        global i
        s = seq.get((topic, q), 0)
        m = Message(topic, body(i, q, s), tags="T%d" % (i % 3), keys=["k%d" % i], queue_id=q)
        assert store.put_message(m).is_ok()
        seq[(topic, q)] = s + 1
        i += 1

    def batch(topic, q, n):
        global i
        s = seq.get((topic, q), 0)
        ms = [Message(topic, body(i + k, q, s + k), tags="T%d" % ((i + k) % 3), keys=["k%d" % (i + k)],
                      queue_id=q) for k in range(n)]
        assert store.put_messages(MessageBatch(ms)).is_ok()
        seq[(topic, q)] = s + n
        i += n

    def write(n):
        end = i + n
        while i < end:
            if i % 50 == 0:
                batch("LiveTopic", 2, min(16, end - i))
            else:
                one("LiveTopic", i % 2)

    print("ready", flush=True)
    for line in sys.stdin:
        cmd = line.split()
        if cmd[0] in ("put", "race"):
            write(int(cmd[1]))
        elif cmd[0] == "newtopic":
            for _ in range(5):
                one("NewTopic", 0)
        elif cmd[0] == "quit":
            store.shutdown()
            print("bye", flush=True)
            break
        print("ok %d %s" % (i, ";".join("%s/%d=%d" % (t, q, n) for (t, q), n in sorted(seq.items()))), flush=True)
''')


def expected_body(i, q, seq):
    head = b"m%07d q%d s%07d " % (i, q, seq)
    return head + bytes((i * 7 + k) % 251 for k in range((i * 37) % 400))


class Writer:
    def __init__(self, root):
        env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self.proc = subprocess.Popen([sys.executable, "-c", WRITER, root, str(CL_FILE), str(CQ_UNITS)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        self.lines: queue.Queue[str] = queue.Queue()
        self.reader = threading.Thread(target=self._pump, daemon=True)
        self.reader.start()
        assert self.line() == "ready"

    def _pump(self):
        for line in self.proc.stdout:
            self.lines.put(line.strip())
        self.lines.put("<eof>")

    def send(self, cmd):
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()

    def line(self, timeout=300):
        return self.lines.get(timeout=timeout)

    def ack(self, timeout=300):
        """The ``ok`` reply: total written and ``{(topic, queue): count}``."""
        parts = self.line(timeout).split()
        assert parts[0] == "ok", parts
        table = {}
        for item in parts[2].split(";") if len(parts) > 2 else []:
            tq, n = item.split("=")
            t, q = tq.rsplit("/", 1)
            table[(t, int(q))] = int(n)
        return int(parts[1]), table

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(30)


class Follower:
    """Reads every queue forward and checks each message; ``seen`` maps a global index to its message."""

    def __init__(self, store):
        self.store = store
        self.next = {}
        self.seen = {}

    def poll(self, topic, q):
        off = self.next.get((topic, q), 0)
        got = 0
        while True:
            r = self.store.get_message(GROUP, topic, q, off, 32)
            if r.status is not GetMessageStatus.FOUND:
                assert r.status in (GetMessageStatus.OFFSET_OVERFLOW_ONE, GetMessageStatus.NO_MESSAGE_IN_QUEUE), r
                assert r.next_begin_offset == off or r.status is GetMessageStatus.NO_MESSAGE_IN_QUEUE
                break
            for m in r.messages:
                check_whole(m, topic, q, off)
                i = int(m.body[1:8])
                assert i not in self.seen
                self.seen[i] = m
                off += 1
                got += 1
            assert r.next_begin_offset == off
        self.next[(topic, q)] = off
        return got


def check_whole(m, topic, q, off):
    """A whole message: exactly the bytes the writer put at that queue offset."""
    assert m.topic == topic and m.queue_id == q and m.queue_offset == off
    i, mq, seq = int(m.body[1:8]), int(m.body[10:11]), int(m.body[13:20])
    assert (mq, seq) == (q, off)
    assert m.body == expected_body(i, q, seq)
    assert m.body_crc == zlib.crc32(m.body) & 0x7FFFFFFF
    assert m.tags == "T%d" % (i % 3) and m.keys == ["k%d" % i]


def folder_state(root):
    out = {}
    for dirpath, _, names in os.walk(root):
        for n in names:
            p = os.path.join(dirpath, n)
            if n in ("lock", "abort", "checkpoint"):
                continue
            st = os.stat(p)
            out[p] = (st.st_size, st.st_mtime_ns)
    return out


@pytest.fixture
def writer(tmp_path):
    w = Writer(str(tmp_path / "live"))
    yield w
    w.close()


def test_live_reader_process(writer, tmp_path):
    root = str(tmp_path / "live")
    writer.send("put 100")
    total, table = writer.ack()
    with MessageStore.open(root, read_only=True, **SMALL_INDEX) as reader:
        f = Follower(reader)
        for q in range(3):
            f.poll(TOPIC, q)
        assert len(f.seen) == total == 100
        assert reader.get_topic_queue_table() == table

        # more data: new commit-log and consume-queue files appear
        writer.send("put 3000")
        total, table = writer.ack()
        assert reader.get_max_offset_in_queue(TOPIC, 0) == table[(TOPIC, 0)]
        for q in range(3):
            f.poll(TOPIC, q)
        assert len(f.seen) == total
        assert len(os.listdir(os.path.join(root, "commitlog"))) > 3
        assert len(os.listdir(os.path.join(root, "consumequeue", TOPIC, "0"))) > 3

        # a topic created after the reader opened
        assert reader.get_message(GROUP, "NewTopic", 0, 0).status is GetMessageStatus.NO_MESSAGE_IN_QUEUE
        writer.send("newtopic")
        total, table = writer.ack()
        assert f.poll("NewTopic", 0) == 5
        assert reader.get_topic_queue_table() == table

        # the race: poll while the writer appends as fast as it can
        writer.send("race 20000")
        done = None
        polls = 0
        while True:
            try:
                done = writer.lines.get_nowait()
            except queue.Empty:
                pass
            for q in range(3):
                f.poll(TOPIC, q)
            polls += 1
            # the other reads on a moving store stay consistent
            mx = reader.get_max_offset_in_queue(TOPIC, 1)
            if mx:
                phy = reader.get_commit_log_offset_in_queue(TOPIC, 1, mx - 1)
                m = reader.look_message_by_offset(phy)
                check_whole(m, TOPIC, 1, mx - 1)
                t = reader.get_message_store_timestamp(TOPIC, 1, mx - 1)
                assert t == m.store_timestamp
                # the writer may add messages stored in the same millisecond meanwhile
                up = reader.get_offset_in_queue_by_time(TOPIC, 1, t, "upper")
                assert up >= mx - 1 and reader.get_message_store_timestamp(TOPIC, 1, up) == t
                low = reader.get_offset_in_queue_by_time(TOPIC, 1, t)
                assert low <= mx - 1 and reader.get_message_store_timestamp(TOPIC, 1, low) == t
                assert low == 0 or reader.get_message_store_timestamp(TOPIC, 1, low - 1) < t
            if done is not None:
                break
        assert done.startswith("ok")
        total = int(done.split()[1])
        for q in range(3):
            f.poll(TOPIC, q)
        assert len(f.seen) == total                           # every message of every queue, once
        assert reader.dispatch_behind_bytes() == 0

        writer.send("quit")
        assert writer.line() == "bye"
        assert writer.proc.wait(30) == 0
        assert not os.path.exists(os.path.join(root, "abort"))
        # after the writer is gone, the reader still reads what it wrote, and writes nothing (looked at once
        # the writer is gone: its own flushes and index builder move file times until it exits)
        before = folder_state(root)
        for q in range(3):
            assert f.poll(TOPIC, q) == 0
            reader.get_message(GROUP, TOPIC, q, 0, 32)
        assert [m.body[:8] for m in reader.query_message(TOPIC, "k10").messages] == [b"m0000010"]
        assert folder_state(root) == before
    units = list(iter_consume_queue(os.path.join(root, "consumequeue", TOPIC, "0")))
    assert len(units) == f.next[(TOPIC, 0)]
    assert sum(1 for _ in iter_commitlog(os.path.join(root, "commitlog"))) == total


def test_read_only_store_refuses_writes_and_does_not_lock(writer, tmp_path):
    root = str(tmp_path / "live")
    writer.send("put 10")
    writer.ack()
    with MessageStore.open(root, read_only=True, **SMALL_INDEX) as reader:
        from pystore import Message, PutMessageStatus

        r = reader.put_message(Message(TOPIC, b"no"))
        assert r.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
        with MessageStore.open(root, read_only=True, **SMALL_INDEX) as second:
            assert second.get_max_offset_in_queue(TOPIC, 0) == reader.get_max_offset_in_queue(TOPIC, 0)
        writer.send("put 10")
        writer.ack()
        assert Follower(reader).poll(TOPIC, 0) == reader.get_max_offset_in_queue(TOPIC, 0) > 0
    writer.send("quit")
    assert writer.line() == "bye"


def test_a_record_in_flight_is_no_damage_to_a_reader(tmp_path, caplog):
    """A reader that opens while a writer is appending can find a record not whole yet with whole records
    after it (the writer's tail in flight). It reads up to that record and drops nothing: no warning that
    messages are dropped (before: in about 1 open in 8 of a live store), and a later look finds the rest
    once the record is whole."""
    import logging
    import struct

    from conftest import make_message

    root = str(tmp_path / "s")
    with MessageStore.open(root, mapped_file_size_commit_log=CL_FILE) as w:
        put = [w.put_message(make_message(i)).append_message_result for i in range(5)]
    offsets = [a.wrote_offset for a in put]
    # a live writer's checkpoint lags what it appends: the flush it records is before records 3 and 4
    with open(os.path.join(root, "checkpoint"), "r+b") as f:
        f.write(struct.pack(">q", put[3].store_timestamp - 1))
    path = os.path.join(root, "commitlog", "%020d" % 0)
    with open(path, "r+b") as f:
        f.seek(offsets[3] + 40)          # record 3's tail is not written yet; record 4 is
        whole = f.read(offsets[4] - offsets[3] - 40)
        f.seek(offsets[3] + 40)
        f.write(bytes(len(whole)))
    with caplog.at_level(logging.INFO):
        with MessageStore.open(root, read_only=True, mapped_file_size_commit_log=CL_FILE) as r:
            assert r.get_max_phy_offset() == offsets[3]
            assert [m.commit_log_offset for m in r.get_message(GROUP, "TopicTest", 0, 0).messages] == offsets[:3]
            with open(path, "r+b") as f:     # the writer finishes the record
                f.seek(offsets[3] + 40)
                f.write(whole)
            assert r.look_message_by_offset(offsets[4]) is not None
    assert not [rec for rec in caplog.records if rec.levelno >= logging.WARNING], caplog.text
    assert "dropped" not in caplog.text
