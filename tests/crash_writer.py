"""A store writer for crash tests, run as a separate process, and the checks the tests run afterwards.

Writer (the process the tests SIGKILL)::

    python tests/crash_writer.py write ROOT --ack ACKFILE [--mode sync|async] [--threads N]
        [--sizes small|mixed|big] [--file-size BYTES] [--run K] [--seed S] [--batch-prob P]
        [--max-puts N] [--shutdown] [--max-seconds T]

opens the store at ROOT (recovering it if a previous writer was killed), prints ``READY <max offset>`` on
stdout, then puts messages in a loop from ``--threads`` threads: single puts and batches, over three
topics and four queues. Every body encodes its own index, topic, queue and payload length, and ends
with a checksum of all that (:func:`make_body`), so any record can be checked on its own. After each
put that returned ``PUT_OK`` the writer appends one line per message to the ack log::

    <index> <commit-log offset> <record size> <flushed offset when the put returned>

with a single unbuffered ``write`` to an ``O_APPEND`` descriptor, *after* the put returned: the ack log
never claims more than was acknowledged (a line may be lost at the kill, which only weakens the check).
Indexes are unique across runs on one root: ``run * 10**8 + thread * 10**6 + n``.

``--async-window N`` puts with ``async_put_message(s)`` instead, keeping N futures outstanding, and acks
each message once its future completed with ``PUT_OK``. ``--max-puts N`` stops after N puts per thread;
with ``--shutdown`` the store is then shut down cleanly (crash points in the shutdown path fire there) and
the writer prints ``DONE``; without it, ``--linger T`` keeps the open store (and its services) running T
seconds after ``DONE`` for the test to kill it. ``--max-seconds`` bounds a writer nobody kills.

``--pool`` turns ``transient_store_pool_enable`` on (used with ASYNC_FLUSH only, as in RocketMQ 4.8).

``--sync-master`` makes the writer a SYNC_MASTER listening for slaves on a free port (``READY <max offset>
<port>``): a put is acknowledged only once a slave holds it, so the ack log is what a slave must hold after
the master is killed.

``python tests/crash_writer.py follow ROOT --master HOST:PORT [--file-size BYTES] [--mode sync|async]`` opens a
slave (ASYNC_FLUSH unless ``--mode sync``) of that master and prints ``READY <max offset>``, then follows it
until killed (or ``--max-seconds``).

``python tests/crash_writer.py open ROOT [--file-size BYTES]`` only opens (recovers) and shuts down:
the tests use it to crash recovery itself with ``PYSTORE_CRASHPOINT=recovery.*``.

``python tests/crash_writer.py verify ROOT ACKFILE`` reopens the store in a new process, runs
:func:`verify_recovered` and prints a JSON summary (exit status 1 and the failure on stderr otherwise).

Checks (used by ``test_crash.py`` in-process too): :func:`walk_log` is an independent, ``struct``-based
walk of the raw commit-log files; :func:`check_chain` asserts the log is a gap-free sequence of whole
records (each PHYSICALOFFSET = previous offset + previous size, an end-of-file blank before each roll);
:func:`check_acked` asserts every acknowledged message is at its offset with its own body.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import struct
import sys
import threading
import time
import zlib
from dataclasses import dataclass, field

if __package__ in (None, ""):  # run as a script from anywhere: make the work tree importable
    _here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.dirname(_here))

TOPICS = ("CrashTopicA", "CrashTopicB", "CrashTopicC")
QUEUES = 4
RUN_STRIDE = 10**8
THREAD_STRIDE = 10**6

MESSAGE_MAGIC_CODE = 0xDAA320A7
MESSAGE_MAGIC_CODE_V2 = 0xDAA320AB
BLANK_MAGIC_CODE = 0xCBD43194
_HEAD = struct.Struct(">iI")  # TOTALSIZE, MAGICCODE


# ----------------------------------------------------------------------------------------------
# self-describing bodies
# ----------------------------------------------------------------------------------------------


def payload(idx: int, plen: int) -> bytes:
    """The deterministic payload of message ``idx``: an 8-byte pattern derived from the index, repeated."""
    word = struct.pack(">Q", (idx * 0x9E3779B97F4A7C15 + plen) & 0xFFFFFFFFFFFFFFFF)
    return (word * (plen // 8 + 1))[:plen]


def make_body(idx: int, topic: str, queue_id: int, plen: int) -> bytes:
    """``idx:topic:queue:plen:`` + payload + ``:crc32hex`` (the checksum covers everything before it)."""
    head = b"%d:%s:%d:%d:" % (idx, topic.encode(), queue_id, plen)
    data = head + payload(idx, plen)
    return data + b":%08x" % zlib.crc32(data)


def parse_body(body: bytes) -> tuple[int, str, int, int]:
    """``(idx, topic, queue_id, plen)`` of a body made by :func:`make_body`; ValueError if it is not one
    (wrong shape, wrong checksum, wrong payload)."""
    parts = body.split(b":", 4)
    if len(parts) != 5:
        raise ValueError("not a crash-writer body: %r" % body[:60])
    idx, topic, qid, plen = int(parts[0]), parts[1].decode(), int(parts[2]), int(parts[3])
    if body != make_body(idx, topic, qid, plen):
        raise ValueError("body of message %d is damaged" % idx)
    return idx, topic, qid, plen


def check_message(m, expect_idx: int | None = None) -> int:
    """Assert that a ``MessageExt`` is an intact crash-writer message; returns its index."""
    body = m.body
    idx, topic, qid, _ = parse_body(body)
    assert m.topic == topic, "message %d: topic %r, body says %r" % (idx, m.topic, topic)
    assert m.queue_id == qid, "message %d: queue %d, body says %d" % (idx, m.queue_id, qid)
    assert m.body_crc == zlib.crc32(body) & 0x7FFFFFFF, "message %d: stored BODYCRC is wrong" % idx
    assert m.keys == ["k%d" % idx], "message %d: keys %r" % (idx, m.keys)
    if expect_idx is not None:
        assert idx == expect_idx, "expected message %d, found %d at offset %d" % (
            expect_idx,
            idx,
            m.commit_log_offset,
        )
    return idx


# ----------------------------------------------------------------------------------------------
# the ack log
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ack:
    idx: int
    offset: int
    size: int
    flushed: int  # the queue's flushed offset seen right after the put returned


def read_acks(path: str) -> list[Ack]:
    """The whole lines of an ack log (a line cut by the kill is ignored)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return []
    out = []
    for line in data.split(b"\n")[:-1]:  # the last element is "" or a cut line
        parts = line.split()
        if len(parts) == 4:
            out.append(Ack(*map(int, parts)))
    return out


# ----------------------------------------------------------------------------------------------
# the writer
# ----------------------------------------------------------------------------------------------

SIZES = {
    # name: (min payload, max payload, chance of a large one, large max)
    "small": (0, 120, 0.0, 0),
    "mixed": (0, 900, 0.05, 5000),
    "big": (1500, 5000, 0.0, 0),
}


#: Small consume-queue and index files for every store the crash tests open (the defaults, 6 MB per queue
#: and a 420 MB index file, would make each test store hundreds of megabytes). The queue files hold 256
#: units, so queues roll and their recovery walks several files.
SMALL_FILES = {
    "mapped_file_size_consume_queue": 256 * 20,
    "max_hash_slot_num": 512,
    "max_index_num": 2048,
}


def open_store(root, file_size: int, **kw):
    """``MessageStore.open`` with the crash tests' small files (commit log of ``file_size`` bytes)."""
    from pystore.engine.store import MessageStore

    opts = dict(SMALL_FILES, mapped_file_size_commit_log=file_size)
    opts.update(kw)
    return MessageStore.open(str(root), **opts)


def _store_options(args) -> dict:
    from pystore.config import BrokerRole, FlushDiskType

    ha = {"broker_role": BrokerRole.SYNC_MASTER, "ha_listen_port": 0} if args.sync_master else {}
    return {
        **SMALL_FILES,
        "mapped_file_size_commit_log": args.file_size,
        "flush_disk_type": FlushDiskType.SYNC_FLUSH if args.mode == "sync" else FlushDiskType.ASYNC_FLUSH,
        "flush_interval_commit_log": args.flush_interval,
        "flush_commit_log_least_pages": 1,
        **({"transient_store_pool_enable": True, "transient_store_pool_size": 3} if args.pool else {}),
        **ha,
    }


class _Writer:
    def __init__(self, store, args) -> None:
        self.store = store
        self.args = args
        self.fd = os.open(args.ack, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        self.deadline = time.monotonic() + args.max_seconds
        self.failures: dict[str, int] = {}
        self.puts = 0
        self.lock = threading.Lock()

    def run_thread(self, tid: int) -> None:
        from pystore import Message, MessageBatch
        from pystore.format._codec import record_length

        args = self.args
        rng = random.Random(args.seed * 1000 + args.run * 100 + tid)
        lo, hi, big_p, big_hi = SIZES[args.sizes]
        budget = args.file_size // 3  # a batch must fit a file with room to spare
        store = self.store
        flushed_of = store._commitlog.queue  # white-box: the flushed offset when a put returns
        seq = 0
        puts = 0
        pending: collections.deque = collections.deque()
        base = args.run * RUN_STRIDE + tid * THREAD_STRIDE
        while time.monotonic() < self.deadline and (args.max_puts < 0 or puts < args.max_puts):
            topic = TOPICS[rng.randrange(len(TOPICS))]
            qid = rng.randrange(QUEUES)
            n = rng.randint(2, 6) if rng.random() < args.batch_prob else 1
            msgs = []
            total = 0
            for _ in range(n):
                idx = base + seq
                seq += 1
                plen = (
                    rng.randint(big_hi // 2, big_hi)
                    if big_p and rng.random() < big_p
                    else rng.randint(lo, hi)
                )
                m = Message(
                    topic,
                    make_body(idx, topic, qid, plen),
                    tags="Tag%d" % (idx % 3),
                    keys="k%d" % idx,
                    queue_id=qid,
                )
                size = record_length(m)
                if msgs and total + size > budget:
                    break
                msgs.append((idx, m, size))
                total += size
            puts += 1
            if args.async_window > 0:
                # async_put_message(s): the future completes once the group commit (or the append) is done
                fut = (
                    store.async_put_message(msgs[0][1])
                    if len(msgs) == 1
                    else store.async_put_messages(MessageBatch([m for _, m, _ in msgs]))
                )
                pending.append((fut, msgs))
                while len(pending) >= args.async_window:
                    f, ms = pending.popleft()
                    self._ack(f.result(), ms, flushed_of)
                continue
            r = (
                store.put_message(msgs[0][1])
                if len(msgs) == 1
                else store.put_messages(MessageBatch([m for _, m, _ in msgs]))
            )
            self._ack(r, msgs, flushed_of)
        while pending:
            f, ms = pending.popleft()
            self._ack(f.result(), ms, flushed_of)
        with self.lock:
            self.puts += puts

    def _ack(self, r, msgs, queue) -> None:
        """Log the messages of a put that returned PUT_OK (after it returned), with the flushed offset."""
        from pystore.status import PutMessageStatus

        if r.status != PutMessageStatus.PUT_OK:
            with self.lock:
                self.failures[r.status.name] = self.failures.get(r.status.name, 0) + 1
            return
        flushed = queue.flushed_where
        off = r.wrote_offset
        lines = []
        for idx, _, size in msgs:
            lines.append(b"%d %d %d %d\n" % (idx, off, size, flushed))
            off += size
        if off != r.wrote_offset + r.append_message_result.wrote_bytes:
            raise AssertionError("record sizes disagree with the put result %r" % r)
        os.write(self.fd, b"".join(lines))


def cmd_write(args) -> int:
    from pystore.engine.store import MessageStore

    store = MessageStore.open(args.root, **_store_options(args))
    if args.sync_master:
        print("READY %d %d" % (store.get_max_phy_offset(), store.ha_port), flush=True)
        deadline = time.monotonic() + args.max_seconds
        conns = store._ha._connections
        while not (conns and conns[0].next_transfer_from >= 0) and time.monotonic() < deadline:
            time.sleep(0.005)  # puts start once a slave's stream starts, so it holds the log from offset 0
            conns = store._ha._connections
    else:
        print("READY %d" % store.get_max_phy_offset(), flush=True)
    w = _Writer(store, args)
    threads = [
        threading.Thread(target=w.run_thread, args=(t,), name="writer-%d" % t) for t in range(args.threads)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if args.shutdown:
        store.shutdown()
    print("DONE %s" % json.dumps({"puts": w.puts, "failures": w.failures}), flush=True)
    if args.linger > 0 and not args.shutdown:
        time.sleep(args.linger)  # the store's services keep running: the test kills the writer meanwhile
    os.close(w.fd)
    if not args.shutdown:
        os._exit(0)  # like a crash, but at a known point: no shutdown, abort file stays
    return 0


def cmd_follow(args) -> int:
    from pystore.config import BrokerRole, FlushDiskType

    flush = FlushDiskType.SYNC_FLUSH if args.mode == "sync" else FlushDiskType.ASYNC_FLUSH
    store = open_store(args.root, args.file_size, broker_role=BrokerRole.SLAVE, ha_master_address=args.master,
                       flush_disk_type=flush)
    print("READY %d" % store.get_max_phy_offset(), flush=True)
    time.sleep(args.max_seconds)
    store.shutdown()
    return 0


def cmd_open(args) -> int:
    store = open_store(args.root, args.file_size)
    print("OPENED %d" % store.get_max_phy_offset(), flush=True)
    store.shutdown()
    return 0


# ----------------------------------------------------------------------------------------------
# checks
# ----------------------------------------------------------------------------------------------


@dataclass
class RawRecord:
    offset: int  # where it is (file start + position)
    size: int
    phy: int  # what its PHYSICALOFFSET field says
    body: bytes
    topic: str = ""
    queue_id: int = -1
    queue_offset: int = -1  # what its QUEUEOFFSET field says
    tags: str | None = None
    _idx: int | None = None

    @property
    def idx(self) -> int:
        """The message index its body encodes (the body is checked the first time)."""
        if self._idx is None:
            self._idx = parse_body(self.body)[0]
        return self._idx


@dataclass
class Walk:
    records: list[RawRecord] = field(default_factory=list)
    end: int = 0  # the offset after the last whole record (after a final blank, if any)
    stop: str = "end"  # "end" (zeros / end of files) or what was wrong
    stop_offset: int = 0
    files: list[str] = field(default_factory=list)
    data_after_end: list[str] = field(default_factory=list)  # files past the end holding non-zero bytes
    bad_blanks: list[int] = field(default_factory=list)  # blanks whose TOTALSIZE is not the bytes left


def commitlog_dir(root: str) -> str:
    return os.path.join(root, "commitlog")


def log_files(root: str) -> list[str]:
    d = commitlog_dir(root)
    if not os.path.isdir(d):
        return []
    return sorted(n for n in os.listdir(d) if len(n) == 20 and n.isdigit())


def parse_record(buf: bytes, pos: int) -> tuple[int, int, bytes, str, int, int, bytes] | str:
    """``(size, phy, body, topic, queue_id, queue_offset, properties)`` of a whole valid record at ``pos``
    (CRC checked), or why not."""
    if pos + 8 > len(buf):
        return "end"
    total, magic = _HEAD.unpack_from(buf, pos)
    if total == 0:
        return "end"
    if magic == BLANK_MAGIC_CODE:
        return "blank"
    if magic not in (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2):
        return "bad magic"
    if total < 91 or pos + total > len(buf):
        return "bad size"
    rec = buf[pos : pos + total]
    (crc, qid) = struct.unpack_from(">ii", rec, 8)
    (qoff,) = struct.unpack_from(">q", rec, 20)
    phy, sysflag = struct.unpack_from(">qi", rec, 28)
    p = 48 + (20 if sysflag & 0x10 else 8) + 8 + (20 if sysflag & 0x20 else 8) + 4 + 8
    (blen,) = struct.unpack_from(">i", rec, p)
    if blen < 0 or p + 4 + blen > total:
        return "bad body length"
    body = rec[p + 4 : p + 4 + blen]
    p += 4 + blen
    if magic == MESSAGE_MAGIC_CODE_V2:
        (tlen,) = struct.unpack_from(">h", rec, p)
        p += 2
    else:
        tlen = rec[p]
        p += 1
    topic = rec[p : p + tlen]
    p += tlen
    if p + 2 > total:
        return "bad topic length"
    (plen,) = struct.unpack_from(">h", rec, p)
    if p + 2 + plen != total:
        return "bad properties length"
    if blen and zlib.crc32(body) & 0x7FFFFFFF != crc:
        return "bad crc"
    if (rec[-1] if plen else (topic[-1] if topic else 1)) == 0:
        # the properties' last byte (0x02), or without properties the topic's last character, is never
        # zero: a page lost after the body
        return "torn (ends in zeros)"
    return total, phy, body, topic.decode("utf-8", "replace"), qid, qoff, rec[p + 2 :]


def walk_log(root: str) -> Walk:
    """Walk the raw commit-log files from offset 0, independently of pystore."""
    w = Walk(files=log_files(root))
    d = commitlog_dir(root)
    expect = 0
    ended = False
    for name in w.files:
        with open(os.path.join(d, name), "rb") as f:
            buf = f.read()
        start = int(name)
        if ended:
            if buf.count(0) != len(buf):
                w.data_after_end.append(name)
            continue
        if start != expect:
            w.stop, w.stop_offset, ended = "gap before %s (expected offset %d)" % (name, expect), expect, True
            if buf.count(0) != len(buf):
                w.data_after_end.append(name)
            continue
        pos = 0
        while True:
            r = parse_record(buf, pos)
            if r == "blank":
                total, _ = _HEAD.unpack_from(buf, pos)
                if total != len(buf) - pos or total < 8:
                    w.bad_blanks.append(start + pos)
                expect = start + len(buf)
                w.end = expect
                break
            if isinstance(r, str):
                w.stop, w.stop_offset, ended = r, start + pos, True
                w.end = start + pos
                if r == "end" and buf.count(0, pos) != len(buf) - pos:
                    w.stop = "zero TOTALSIZE followed by data"
                break
            size, phy, body, topic, qid, qoff, props = r
            w.records.append(RawRecord(start + pos, size, phy, body, topic, qid, qoff, _tags(props)))
            pos += size
            w.end = start + pos
    return w


def _tags(props: bytes) -> str | None:
    """The ``TAGS`` property (RocketMQ 5.x decoding: items split on 0x02, name and value on the first 0x01)."""
    tags = None
    for item in props.split(b"\x02"):
        name, sep, value = item.partition(b"\x01")
        if sep and name == b"TAGS" and value:
            tags = value.decode("utf-8", "replace")
    return tags


def java_hash(s: str) -> int:
    """Java ``String.hashCode`` (UTF-16 code units), as a signed 32-bit int: a consume queue's tags code."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i : i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def queues_of(w: Walk) -> dict[tuple[str, int], list[RawRecord]]:
    """The log's records by (topic, queue id), in log order."""
    out: dict[tuple[str, int], list[RawRecord]] = {}
    for r in w.records:
        out.setdefault((r.topic, r.queue_id), []).append(r)
    return out


def check_queues(store, w: Walk) -> dict[tuple[str, int], int]:
    """The consume queues of an open (recovered) store agree with the commit log ``w``: in every queue the
    records' QUEUEOFFSET fields run 0, 1, 2 ... without a gap; the topic-queue table gives each queue's
    next offset (the number of its records); and reading each queue from 0 returns exactly its records, in
    order, unit by unit (each unit points at a whole record of that topic and queue, with its size and the
    tags code of its TAGS). Returns the table."""
    from pystore.status import GetMessageStatus

    by_queue = queues_of(w)
    expect = {k: len(v) for k, v in by_queue.items()}
    for k, recs in by_queue.items():
        got = [r.queue_offset for r in recs]
        assert got == list(range(len(recs))), "queue %s: the records' queue offsets are %s" % (k, got[:50])
    table = {k: v for k, v in store.get_topic_queue_table().items() if v > 0}
    assert table == expect, "topic-queue table %s, the commit log holds %s" % (table, expect)
    for (topic, qid), recs in by_queue.items():
        assert store.get_min_offset_in_queue(topic, qid) == 0
        assert store.get_max_offset_in_queue(topic, qid) == len(recs), (topic, qid)
        cq = store._cq_store.find(topic, qid)  # white-box: the units themselves
        for i, r in enumerate(recs):
            unit = cq.unit(i)
            want = (r.offset, r.size, java_hash(r.tags) if r.tags else 0)
            assert unit == want, "queue %s/%d offset %d: unit %s, the record is %s" % (
                topic,
                qid,
                i,
                unit,
                want,
            )
        offset = 0
        while offset < len(recs):
            res = store.get_message("crash-check", topic, qid, offset, 32)
            assert res.status == GetMessageStatus.FOUND and res.messages, (topic, qid, offset, res)
            for m in res.messages:
                r = recs[offset]
                assert (m.commit_log_offset, m.queue_offset, m.topic, m.queue_id) == (
                    r.offset,
                    offset,
                    topic,
                    qid,
                ), "queue %s/%d offset %d" % (topic, qid, offset)
                offset += 1
            assert res.next_begin_offset == offset
        res = store.get_message("crash-check", topic, qid, len(recs), 32)
        assert not res.messages and res.max_offset == len(recs)
    return table


def check_index(store, w: Walk, sample: int = 25, touched: int = -1) -> None:
    """The key index of an open (recovered) store finds a sample of the log's messages (the first, the last
    and some between) by their key, at their offsets; nothing past the log's end is found. A record holding
    offset ``touched`` may have damaged properties (keys), which nothing checks: it is left out."""
    recs = [r for r in w.records if not r.offset <= touched < r.offset + r.size]
    if not recs:
        return
    picks = {0, len(recs) - 1} | set(
        random.Random(len(recs)).sample(range(len(recs)), min(sample, len(recs)))
    )
    for i in sorted(picks):
        r = recs[i]
        found = store.query_message(r.topic, "k%d" % r.idx, 32)
        offsets = [m.commit_log_offset for m in found.messages]
        assert r.offset in offsets, "the index does not find message %d (key k%d) at %d: %s" % (
            r.idx,
            r.idx,
            r.offset,
            offsets,
        )
        assert all(o < w.end for o in offsets)


def check_chain(w: Walk, allow_torn_tail: bool = False) -> None:
    """The log is a gap-free sequence of whole records: each record names its own offset, and nothing but
    zeros follows the end (unless ``allow_torn_tail``: a crashed, not yet recovered log may end in one
    damaged record)."""
    for r in w.records:
        assert r.phy == r.offset, "record at %d says PHYSICALOFFSET %d" % (r.offset, r.phy)
    assert not w.bad_blanks, "end-of-file blanks of the wrong size at %s" % w.bad_blanks
    if not allow_torn_tail:
        assert w.stop == "end", "the log stops at %d: %s" % (w.stop_offset, w.stop)
    assert not w.data_after_end, "files past the end of the log hold data: %s" % w.data_after_end


def index_records(w: Walk) -> dict[int, RawRecord]:
    """``{offset: record}``, checking every body on the way."""
    return {r.offset: r for r in w.records if r.idx >= 0}


def check_acked(by_offset: dict[int, RawRecord], acks: list[Ack]) -> None:
    """Every acknowledged message is at its offset, with its size and its own intact body."""
    for a in acks:
        r = by_offset.get(a.offset)
        assert r is not None, "acknowledged message %d at offset %d is gone" % (a.idx, a.offset)
        assert r.size == a.size, "message %d at %d: size %d, acknowledged %d" % (
            a.idx,
            a.offset,
            r.size,
            a.size,
        )
        assert r.idx == a.idx, "offset %d holds message %d, acknowledged %d" % (a.offset, r.idx, a.idx)


def check_unique(w: Walk) -> None:
    """No message is stored twice."""
    seen: dict[int, int] = {}
    for r in w.records:
        assert r.idx not in seen, "message %d stored twice, at %d and %d" % (r.idx, seen[r.idx], r.offset)
        seen[r.idx] = r.offset


def verify_recovered(root: str, acks: list[Ack], file_size: int, reopen: int = 2) -> dict:
    """Open the store (recovering it), check it against the raw walk and the ack log, then reopen it
    ``reopen`` more times: recovery is idempotent (same max offset, the same bytes on disk). Returns a
    summary."""
    from pystore.tools import iter_commitlog

    store = open_store(root, file_size)
    try:
        summary: dict = {"abnormal": not store.last_exit_ok}
        max_off = store.get_max_phy_offset()
        w = walk_log(root)
        check_chain(w)
        assert max_off == w.end, "store max offset %d, the log ends at %d" % (max_off, w.end)
        check_acked(index_records(w), acks)
        check_unique(w)
        # every record reads back through the store, and nothing is readable past the end
        for r in w.records:
            m = store.look_message_by_offset(r.offset)
            assert m is not None, "no message at %d through the store" % r.offset
            assert m.commit_log_offset == r.offset and m.store_size == r.size
            check_message(m, r.idx)
        assert store.look_message_by_offset(max_off) is None
        _check_zero_tail(root, max_off, file_size)
        table = check_queues(store, w)
        check_index(store, w)
    finally:
        store.shutdown()
    digest = log_digest(root)
    for _ in range(reopen):
        store = open_store(root, file_size)
        try:
            again = store.get_max_phy_offset()
            again_table = {k: v for k, v in store.get_topic_queue_table().items() if v > 0}
        finally:
            store.shutdown()
        assert again == max_off, "recovery is not idempotent: max offset %d, then %d" % (max_off, again)
        assert again_table == table, "the topic-queue table changed on reopen: %s, then %s" % (
            table,
            again_table,
        )
        assert log_digest(root) == digest, "reopening changed the commit-log files"
    seen = [(m.commit_log_offset, m.store_size) for m in iter_commitlog(root, verify_crc=True)]
    assert seen == [(r.offset, r.size) for r in w.records], "iter_commitlog disagrees with the raw log"
    summary.update(records=len(w.records), acked=len(acks), max_offset=max_off, files=len(w.files))
    return summary


def log_digest(root: str) -> str:
    """A digest of the commit-log files' names and bytes."""
    import hashlib

    h = hashlib.sha256()
    for name in log_files(root):
        h.update(name.encode())
        with open(os.path.join(commitlog_dir(root), name), "rb") as f:
            h.update(f.read())
    return h.hexdigest()


def _check_zero_tail(root: str, end: int, file_size: int) -> None:
    """After recovery nothing but zeros follows the end in its file, and no later file exists."""
    names = log_files(root)
    later = [n for n in names if int(n) > end - end % file_size]
    if end % file_size == 0:
        later = [n for n in names if int(n) > end]
    assert not later, "files after the recovered end %d: %s" % (end, later)
    name = "%020d" % (end - end % file_size)
    path = os.path.join(commitlog_dir(root), name)
    if end % file_size and os.path.exists(path):
        with open(path, "rb") as f:
            f.seek(end % file_size)
            tail = f.read()
        assert tail.count(0) == len(tail), "non-zero bytes after the recovered end %d" % end


def cmd_verify(args) -> int:
    acks = read_acks(args.ack)
    try:
        summary = verify_recovered(args.root, acks, args.file_size)
    except AssertionError as e:
        print("VERIFY FAILED: %s" % e, file=sys.stderr, flush=True)
        return 1
    print(json.dumps(summary), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write")
    w.add_argument("root")
    w.add_argument("--ack", required=True)
    w.add_argument("--mode", choices=("sync", "async"), default="sync")
    w.add_argument("--threads", type=int, default=1)
    w.add_argument("--sizes", choices=tuple(SIZES), default="mixed")
    w.add_argument("--file-size", type=int, default=32768)
    w.add_argument("--flush-interval", type=int, default=20)
    w.add_argument("--run", type=int, default=0)
    w.add_argument("--seed", type=int, default=0)
    w.add_argument("--batch-prob", type=float, default=0.25)
    w.add_argument("--max-puts", type=int, default=-1)
    w.add_argument("--shutdown", action="store_true")
    w.add_argument("--max-seconds", type=float, default=30.0)
    w.add_argument(
        "--linger",
        type=float,
        default=0.0,
        help="after the puts (and DONE), keep the store open this many seconds before exiting",
    )
    w.add_argument(
        "--async-window",
        type=int,
        default=0,
        help="put with async_put_message(s), keeping this many futures outstanding",
    )
    w.add_argument("--pool", action="store_true", help="transient_store_pool_enable (3 buffers)")
    w.add_argument("--sync-master", action="store_true", help="a SYNC_MASTER with an HA port (READY says it)")
    f = sub.add_parser("follow")
    f.add_argument("root")
    f.add_argument("--master", required=True)
    f.add_argument("--file-size", type=int, default=32768)
    f.add_argument("--max-seconds", type=float, default=60.0)
    f.add_argument("--mode", choices=("sync", "async"), default="async", help="the slave's flush_disk_type")
    o = sub.add_parser("open")
    o.add_argument("root")
    o.add_argument("--file-size", type=int, default=32768)
    v = sub.add_parser("verify")
    v.add_argument("root")
    v.add_argument("ack")
    v.add_argument("--file-size", type=int, default=32768)
    args = p.parse_args(argv)
    return {"write": cmd_write, "follow": cmd_follow, "open": cmd_open, "verify": cmd_verify}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
