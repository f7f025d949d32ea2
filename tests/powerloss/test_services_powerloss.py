"""Power cuts on the layer (``docs/powerloss.md``) of a store whose background services move data: new
commit-log files made ahead by the allocation service, the transient store pool's commit service, and the
cleaning service deleting old files while a writer goes on.

Each scenario repeats at several random moments (seeded, printed): the writer process is SIGKILLed, the
power cut (``drop`` or ``torn``), and the store reopened from what the disk holds.
"""

from __future__ import annotations

import os
import time

import crash_writer as cw  # tests/ is on sys.path (tests/conftest.py)
import pytest
from writer_procs import kill, read_line

from .powercut import durable, seeded

pytestmark = pytest.mark.powerloss

FILE = 32768


def test_strict_async_flush_store_with_unflushed_files_reopens(powercut):
    """ASYNC_FLUSH, nothing flushed yet, several commit-log files made: under strict POSIX metadata a file's
    size is durable only with its own fsync. Before the allocation service fsynced each new file, the cut left
    every such file named but 0 bytes long, and the store refused to open ("the file is 0 bytes, every file
    of this log is 32768")."""
    from pystore import Message
    from pystore.config import FlushDiskType

    fs = powercut("strict")
    store = cw.open_store(fs.mount / "store", FILE, flush_disk_type=FlushDiskType.ASYNC_FLUSH,
                          flush_commit_log_least_pages=10_000, flush_interval_commit_log=60_000,
                          flush_commit_log_thorough_interval=600_000)
    try:
        for i in range(400):                                   # ~100 KiB: 4 files, none flushed
            assert store.put_message(Message("T", b"x" * 200, queue_id=0)).status.name == "PUT_OK"
        assert len(store._commitlog.queue.files) >= 3
        out = fs.crash(mode="drop")
    finally:
        store.shutdown()                                       # after the cut: changes nothing on its disk
    reopened = cw.open_store(out / "store", FILE)
    try:
        assert reopened.get_max_phy_offset() == cw.walk_log(str(out / "store")).end
    finally:
        reopened.shutdown()


# -- transient store pool ----------------------------------------------------------------------------------


POOL_POINTS = 2


@pytest.mark.parametrize("model", ["journal", "strict"])
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_transient_store_pool_power_cut(powercut, procs, tmp_path, model, mode):
    """``transient_store_pool_enable``: puts land in a pool buffer, the commit service copies them into the
    file, the flush service flushes the file. SYNC_FLUSH (the pool is not used then, as in RocketMQ 4.8):
    every acknowledged message is there, intact. ASYNC_FLUSH: a gap-free prefix without a torn record, holding
    every acknowledged message the flush had reached when its put returned."""
    rng = seeded()
    for point in range(POOL_POINTS):
        fs = powercut(model)
        ack = str(tmp_path / ("acks-%d" % point))
        p = procs.start("write", str(fs.mount / "store"), "--ack", ack, "--mode", mode, "--pool", "--threads", "2",
                         "--file-size", str(FILE), "--max-seconds", "60", env=fs.writer_env())
        read_line(p, "READY", 60.0)
        delay = rng.uniform(0.05, 1.0)
        time.sleep(delay)
        kill(p)
        acks = cw.read_acks(ack)
        promised = acks if mode == "sync" else durable(acks)
        for crash_mode in ("drop", "torn"):
            out = fs.crash(mode=crash_mode, seed=rng.randrange(1 << 30))
            summary = cw.verify_recovered(str(out / "store"), promised, FILE, reopen=0)
            print("pool %s %s point %d (%.2f s) %s: %d acked, %d promised durable, %d records after the cut"
                  % (model, mode, point, delay, crash_mode, len(acks), len(promised), summary["records"]))
        fs.close()



# -- the cleaning service deleting files under a writer --------------------------------------------------------

CLEAN_WRITER = r'''
import os, random, sys, time
import crash_writer as cw
from pystore import Message
from pystore.config import FlushDiskType
root, ack, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
store = cw.open_store(root, 32768, flush_disk_type=FlushDiskType.SYNC_FLUSH, file_reserved_time=0,
                      clean_resource_interval=50, delete_commit_log_files_interval=0,
                      delete_consume_queue_files_interval=0, delete_file_batch_max=1)
print("READY", flush=True)
fd = os.open(ack, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
rng = random.Random(seed)
last = 0.0
for i in range(10**7):
    if time.monotonic() - last > 0.2:
        store.execute_delete_files_manually()       # file_reserved_time 0: every file but the last expires
        last = time.monotonic()
    topic, qid = cw.TOPICS[rng.randrange(3)], rng.randrange(cw.QUEUES)
    m = Message(topic, cw.make_body(i, topic, qid, rng.randint(0, 600)), tags="Tag%d" % (i % 3), keys="k%d" % i,
                queue_id=qid)
    r = store.put_message(m)
    if r.status.name == "PUT_OK":
        os.write(fd, b"%d %d %d 0\n" % (i, r.wrote_offset, r.append_message_result.wrote_bytes))
'''


def walk_from_head(root: str) -> cw.Walk:
    """``crash_writer.walk_log`` from the first commit-log file, wherever cleaning left it."""
    files = cw.log_files(root)
    if not files:
        return cw.Walk()
    head = int(files[0])
    moved = []
    w = cw.Walk(files=files)
    # walk_log starts at offset 0: walk the same files as if the first started there, then shift back
    import shutil
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        d = os.path.join(tmp, "commitlog")
        os.mkdir(d)
        for name in files:
            shutil.copyfile(os.path.join(cw.commitlog_dir(root), name), os.path.join(d, "%020d" % (int(name) - head)))
        w = cw.walk_log(tmp)
    for r in w.records:
        r.offset += head
        moved.append(r)
    w.records = moved
    w.end += head
    return w


CLEAN_POINTS = 3


@pytest.mark.parametrize("model", ["journal", "strict"])
def test_cleaning_under_a_writer_power_cut(powercut, procs, tmp_path, model):
    rng = seeded()
    for point in range(CLEAN_POINTS):
        fs = powercut(model)
        ack = str(tmp_path / ("acks-%d" % point))
        p = procs.start(str(fs.mount / "store"), ack, str(rng.randrange(1 << 30)), env=fs.writer_env(),
                        script=CLEAN_WRITER)
        read_line(p, "READY", 60.0)
        delay = rng.uniform(0.3, 1.5)
        time.sleep(delay)
        kill(p)
        acks = cw.read_acks(ack)
        for crash_mode in ("drop", "torn"):
            out = fs.crash(mode=crash_mode, seed=rng.randrange(1 << 30))
            root = str(out / "store")
            store = cw.open_store(root, FILE)
            try:
                check_cleaned(store, root, acks, "%s point %d (%.2f s) %s" % (model, point, delay, crash_mode))
            finally:
                store.shutdown()
        fs.close()


def check_cleaned(store, root: str, acks: list[cw.Ack], what: str) -> None:
    w = walk_from_head(root)
    for r in w.records:
        assert r.phy == r.offset, "record at %d says PHYSICALOFFSET %d" % (r.offset, r.phy)
    assert w.stop == "end" and not w.data_after_end and not w.bad_blanks, (w.stop, w.stop_offset)
    lo, hi = store.get_min_phy_offset(), store.get_max_phy_offset()
    assert hi == w.end, "max offset %d, the log ends at %d" % (hi, w.end)
    by_offset = {r.offset: r for r in w.records}
    assert not w.records or lo <= w.records[0].offset
    live = [a for a in acks if a.offset >= lo]
    for a in live:
        r = by_offset.get(a.offset)
        assert r is not None and r.size == a.size and r.idx == a.idx, "acknowledged message %d at %d" % (a.idx, a.offset)
    units = 0
    for (topic, qid), end in store.get_topic_queue_table().items():
        first = store.get_min_offset_in_queue(topic, qid)
        cq = store._cq_store.find(topic, qid)           # white-box: the units themselves
        for i in range(first, end):
            off, size, _ = cq.unit(i)
            r = by_offset.get(off)
            assert r is not None and r.size == size and (r.topic, r.queue_id, r.queue_offset) == (topic, qid, i), (
                "%s queue %s/%d unit %d points at %d (log %d..%d): no such record" % (what, topic, qid, i, off, lo, hi))
            units += 1
        if first < end:
            res = store.get_message("clean-check", topic, qid, first, 8)
            assert res.messages, (topic, qid, first, res)
            for m in res.messages:
                cw.check_message(m)
    for r in w.records[:: max(1, len(w.records) // 10)]:
        found = [m.commit_log_offset for m in store.query_message(r.topic, "k%d" % r.idx, 8).messages]
        assert r.offset in found and all(lo <= o < hi for o in found), (r.idx, found)
    print("clean %s: %d acked, %d above the min offset %d, all present; %d records, %d queue units checked"
          % (what, len(acks), len(live), lo, len(w.records), units))


# -- several writer processes (shared_writers) ---------------------------------------------------------------

SHARED_WRITER = r'''
import os, random, sys
import crash_writer as cw
from pystore import Message
from pystore.config import FlushDiskType
root, ack, seed, who = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
store = cw.open_store(root, 32768, shared_writers=True, flush_disk_type=FlushDiskType.SYNC_FLUSH)
print("READY", flush=True)
fd = os.open(ack, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
rng = random.Random(seed)
for n in range(10**7):
    i = who * 10**7 + n                       # unique across the writers: bodies say which put they are
    topic, qid = cw.TOPICS[rng.randrange(3)], rng.randrange(cw.QUEUES)
    r = store.put_message(Message(topic, cw.make_body(i, topic, qid, rng.randint(0, 600)), tags="Tag%d" % (i % 3),
                                  keys="k%d" % i, queue_id=qid))
    if r.status.name == "PUT_OK":
        os.write(fd, b"%d %d %d 0\n" % (i, r.wrote_offset, r.append_message_result.wrote_bytes))
'''

SHARED_POINTS = 2


@pytest.mark.parametrize("model", ["journal", "strict"])
def test_three_shared_writers_power_cut(powercut, procs, tmp_path, model):
    """Three processes put into one store opened with ``shared_writers`` and SYNC_FLUSH (the first leads; the
    others flush before they acknowledge); the power is cut while all three run, and at the second point after
    the leader was SIGKILLed 0.2-1 s before (another has taken over, or is taking over: its recovery is not a
    crash recovery, it trusts the page cache, which the cut then takes back). The store recovered from what the
    disk holds has every SYNC-acknowledged message of every writer, intact, once, with each queue's offsets
    continuous."""
    rng = seeded()
    for point in range(SHARED_POINTS):
        fs = powercut(model)
        acks_files = [str(tmp_path / ("acks-%d-%d" % (point, k))) for k in range(3)]
        ps = []
        for k in range(3):
            ps.append(procs.start(str(fs.mount / "store"), acks_files[k], str(rng.randrange(1 << 30)), str(k + 1),
                                  env=fs.writer_env(), script=SHARED_WRITER))
            read_line(ps[-1], "READY", 60.0)        # one after the other: the first recovers and leads
        delay = rng.uniform(0.3, 1.5)
        time.sleep(delay)
        if point == 1:
            kill(ps[0])                 # the leader: one of the others takes over, then the power is cut
            time.sleep(rng.uniform(0.2, 1.0))
        for p in ps:
            kill(p)
        acks = [a for f in acks_files for a in cw.read_acks(f)]
        assert {a.idx // 10**7 for a in acks} == {1, 2, 3}, "a writer acknowledged nothing"
        for crash_mode in ("drop", "torn"):
            out = fs.crash(mode=crash_mode, seed=rng.randrange(1 << 30))
            summary = cw.verify_recovered(str(out / "store"), acks, FILE, reopen=0)
            print("shared writers %s point %d (%.2f s) %s: %d acked, %d records after the cut"
                  % (model, point, delay, crash_mode, len(acks), summary["records"]))
        fs.close()
