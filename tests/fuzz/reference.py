"""The reference store of a fuzz run, built once (``python -m tests.fuzz.reference OUT``, a child process).

``OUT/clean``: shut down cleanly. ``OUT/crashed``: the same files with an ``abort`` file (the last writer
"died" after everything was flushed: the checkpoint covers every message, so every record is durable).
``OUT/manifest.json``: every record of the commit log (topic, queue id, queue offset, commit-log offset,
size, body, tags, keys, msg id, its file and position), taken from the puts and checked against a walk of
the files. ``OUT/layout.json``: where the structures are (record starts, consume-queue files and their
units, index files and their entry counts, metadata files), from an independent ``struct`` walk; the
mutator picks its targets there.

Everything is deterministic (fixed seed, fake clock, fixed born times and host): case I of seed S damages
the same bytes on every run.
"""

from __future__ import annotations

import os
import random
import shutil
import struct
import sys
import time

from tests.fuzz.common import (
    BASE_MS,
    CL_FILE,
    CONFIG,
    CQ_FILE,
    CQ_UNIT,
    HASH_SLOTS,
    INDEX_HEADER,
    TIMER_UNIT,
    dump,
    half_full,
)

TOPICS = [("TopicA", 4), ("TopicB", 2), ("TopicC", 1)]
TAGS = ["TagA", "TagB", "TagC", None]
BLANK_MAGIC = {0xCBD43194, 0xCBD43195}          # v1/v2 end-of-file blank (RocketMQ BLANK_MAGIC_CODE)


class Clock:
    def __init__(self, now: int) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def build(out: str, messages: int = 420, seed: int = 20261126) -> None:
    from pystore import Message, MessageBatch, MessageStore, PutMessageStatus
    from pystore.tools import iter_commitlog

    clean = os.path.join(out, "clean")
    rng = random.Random(seed)
    clock = Clock(BASE_MS)
    puts: dict[int, tuple[str, bytes]] = {}           # commit-log offset -> (topic, body) as put
    i = 0

    def message(topic: str, qid: int, **kw) -> Message:
        nonlocal i
        body = rng.randbytes(rng.choice((0, 1, 17, 60, 120, 200, 400, 700)))
        tags = rng.choice(TAGS)
        keys = ["k%d" % i] + (["shared%d" % (i % 7)] if i % 3 == 0 else [])
        m = Message(topic, body, tags=tags, keys=keys, queue_id=qid, born_timestamp=BASE_MS + i,
                    born_host=("10.0.0.7", 40000 + i % 3), **kw)
        i += 1
        return m

    store = MessageStore.open(clean, clock=clock, disk_usage=half_full, **CONFIG)
    try:
        while i < messages:
            clock.now += 10
            topic, nq = TOPICS[rng.randrange(len(TOPICS))]
            qid = rng.randrange(nq)
            roll = rng.random()
            if roll < 0.12:
                batch = [message(topic, qid) for _ in range(rng.randint(2, 5))]
                r = store.put_messages(MessageBatch(batch))
                assert r.status == PutMessageStatus.PUT_OK, r
                off = r.append_message_result.wrote_offset
                for m in batch:
                    puts[off] = (topic, m.body)
                    off = -1                              # the others are found by the walk
            elif roll < 0.14:
                m = message("TopicDelay", 0, delay_time_level=18)   # 2 h: stays in SCHEDULE_TOPIC_XXXX
                r = store.put_message(m)
                assert r.status == PutMessageStatus.PUT_OK, r
                puts[r.append_message_result.wrote_offset] = ("SCHEDULE_TOPIC_XXXX", m.body)
            else:
                m = message(topic, qid)
                r = store.put_message(m)
                assert r.status == PutMessageStatus.PUT_OK, r
                puts[r.append_message_result.wrote_offset] = (topic, m.body)
    finally:
        store.shutdown()
    puts.pop(-1, None)

    manifest = []
    for m in iter_commitlog(os.path.join(clean, "commitlog")):
        off = m.commit_log_offset
        start = off - off % CL_FILE
        manifest.append({
            "off": off, "size": m.store_size, "topic": m.topic, "qid": m.queue_id, "qoff": m.queue_offset,
            "body": m.body.hex(), "tags": m.tags, "keys": list(m.keys), "msg_id": m.msg_id,
            "ts": m.store_timestamp, "crc": m.body_crc,
            "file": "commitlog/%020d" % start, "pos": off - start,
        })
    assert len(manifest) == i, (len(manifest), i)
    by_off = {r["off"]: r for r in manifest}
    for off, (topic, body) in puts.items():
        assert by_off[off]["topic"] == topic and by_off[off]["body"] == body.hex(), off
    layout = walk(clean)
    assert [r for f in layout["cl"] for r in f["records"]] == [[r["pos"], r["size"]] for r in manifest]
    crashed = os.path.join(out, "crashed")
    shutil.copytree(clean, crashed)
    open(os.path.join(crashed, "abort"), "wb").close()
    dump(os.path.join(out, "manifest.json"), manifest)
    dump(os.path.join(out, "layout.json"), layout)


def build_timers(out: str, messages: int = 160, seed: int = 20261127) -> None:
    """The timer reference, ``OUT/clean`` and ``OUT/crashed`` with their ``manifest.json`` and ``layout.json``
    (the same structure as the main one, so the driver reads it unchanged): plain messages beside RocketMQ 5 timer
    messages to ``TopicTimer`` (queues 0 and 1), half of them delivered before the shutdown (due within 1.2 s of
    the fake clock, which then moves on 3 s) and half pending (due two hours later, past every case's clock), so
    the store has a timer log of several files, occupied wheel slots of both kinds and a checkpoint. A timer
    record's manifest entry says its real topic and queue (``real``)."""
    from pystore import Message, MessageStore
    from pystore.timer import TIMER_TOPIC
    from pystore.tools import iter_commitlog

    clean = os.path.join(out, "clean")
    rng = random.Random(seed)
    clock = Clock(BASE_MS)
    store = MessageStore.open(clean, clock=clock, disk_usage=half_full, **CONFIG)
    try:
        for i in range(messages):
            clock.now += 10
            body = rng.randbytes(rng.choice((0, 17, 60, 200)))
            kw = dict(tags=rng.choice(TAGS), keys=["k%d" % i], born_timestamp=BASE_MS + i,
                      born_host=("10.0.0.7", 40000 + i % 3))
            if rng.random() < 0.5:
                delay = rng.randint(100, 1200) if rng.random() < 0.5 else 7_200_000 + rng.randint(0, 600_000)
                m = Message("TopicTimer", body, queue_id=rng.randrange(2), delay_ms=delay, **kw)
            else:
                m = Message(rng.choice(("TopicA", "TopicB")), body, queue_id=0, **kw)
            assert store.put_message(m).is_ok()
        clock.now += 3000
        ts = store.timer_message_store
        deadline = time.monotonic() + 60
        while not (ts.curr_queue_offset >= store.get_max_offset_in_queue(TIMER_TOPIC, 0)
                   and ts.curr_read_time_ms >= clock.now // 1000 * 1000):
            assert time.monotonic() < deadline, "the timer reference did not deliver its due timers"
            time.sleep(0.02)
    finally:
        store.shutdown()
    manifest = []
    for m in iter_commitlog(os.path.join(clean, "commitlog")):
        off = m.commit_log_offset
        start = off - off % CL_FILE
        r = {"off": off, "size": m.store_size, "topic": m.topic, "qid": m.queue_id, "qoff": m.queue_offset,
             "body": m.body.hex(), "tags": m.tags, "keys": list(m.keys), "msg_id": m.msg_id,
             "ts": m.store_timestamp, "crc": m.body_crc, "file": "commitlog/%020d" % start, "pos": off - start}
        if m.topic == TIMER_TOPIC:
            r["real"] = [m.properties["REAL_TOPIC"], int(m.properties["REAL_QID"])]
        manifest.append(r)
    delivered = sum(r["topic"] == "TopicTimer" for r in manifest)
    timers = sum(r["topic"] == TIMER_TOPIC for r in manifest)
    assert 0 < delivered < timers, (delivered, timers)
    layout = walk(clean)
    crashed = os.path.join(out, "crashed")
    shutil.copytree(clean, crashed)
    open(os.path.join(crashed, "abort"), "wb").close()
    dump(os.path.join(out, "manifest.json"), manifest)
    dump(os.path.join(out, "layout.json"), layout)


def walk(root: str) -> dict:
    """Where things are, read with ``struct`` only (independent of the library)."""
    cl = []
    cl_dir = os.path.join(root, "commitlog")
    for name in sorted(os.listdir(cl_dir)):
        with open(os.path.join(cl_dir, name), "rb") as f:
            data = f.read()
        records, pos, blank = [], 0, -1
        while pos + 8 <= len(data):
            size, magic = struct.unpack_from(">iI", data, pos)
            if size == 0:
                break
            if magic in BLANK_MAGIC:
                blank = pos
                break
            records.append([pos, size])
            pos += size
        cl.append({"file": "commitlog/" + name, "size": len(data), "records": records, "blank": blank,
                   "end": pos})
    cq: dict[str, list] = {}
    cq_dir = os.path.join(root, "consumequeue")
    for topic in sorted(os.listdir(cq_dir)):
        for qid in sorted(os.listdir(os.path.join(cq_dir, topic)), key=int):
            files = []
            d = os.path.join(cq_dir, topic, qid)
            for name in sorted(os.listdir(d)):
                with open(os.path.join(d, name), "rb") as f:
                    data = f.read()
                units = 0
                while units * CQ_UNIT < len(data) and data[units * CQ_UNIT:(units + 1) * CQ_UNIT] != bytes(CQ_UNIT):
                    units += 1
                files.append({"file": "consumequeue/%s/%s/%s" % (topic, qid, name), "size": len(data),
                              "units": units})
            cq["%s/%s" % (topic, qid)] = files
    index = []
    idx_dir = os.path.join(root, "index")
    for name in sorted(os.listdir(idx_dir)):
        with open(os.path.join(idx_dir, name), "rb") as f:
            data = f.read()
        count = struct.unpack_from(">i", data, 36)[0]
        slots = [s for s in range(HASH_SLOTS) if struct.unpack_from(">i", data, INDEX_HEADER + 4 * s)[0] != 0]
        chains = []                 # per used slot, its entries newest first (following prevIndex)
        for s in slots:
            e, chain = struct.unpack_from(">i", data, INDEX_HEADER + 4 * s)[0], []
            while 0 < e < count and e not in chain:
                chain.append(e)
                e = struct.unpack_from(">i", data, INDEX_HEADER + 4 * HASH_SLOTS + 20 * e + 16)[0]
            chains.append(chain)
        index.append({"file": "index/" + name, "size": len(data), "count": count, "slots": slots,
                      "chains": chains})
    meta = sorted(os.path.relpath(os.path.join(d, n), root) for d, _, ns in os.walk(root) for n in ns
                  if os.path.relpath(d, root).split(os.sep)[0] not in ("commitlog", "consumequeue", "index"))
    assert all(f["size"] == CQ_FILE for q in cq.values() for f in q)
    out = {"cl": cl, "cq": cq, "index": index, "meta": meta}
    if os.path.exists(os.path.join(root, "timerwheel")):
        out["timer"] = walk_timers(root)
    return out


def walk_timers(root: str) -> dict:
    """The timer files: each timer-log file and its units (their commit-log offsets), the occupied wheel slots."""
    log_files = []
    tl_dir = os.path.join(root, "timerlog")
    for name in sorted(os.listdir(tl_dir)):
        with open(os.path.join(tl_dir, name), "rb") as f:
            data = f.read()
        units = []
        while (len(units) + 1) * TIMER_UNIT <= len(data) and struct.unpack_from(">i", data, len(units) * TIMER_UNIT)[0] \
                == TIMER_UNIT:
            units.append(struct.unpack_from(">q", data, len(units) * TIMER_UNIT + 28)[0])
        log_files.append({"file": "timerlog/" + name, "size": len(data), "units": units})
    with open(os.path.join(root, "timerwheel"), "rb") as f:
        wheel = f.read()
    slots = [i for i, (t,) in enumerate(struct.iter_unpack(">q24x", wheel)) if t]
    return {"log": log_files, "slots": slots, "wheel_size": len(wheel)}


if __name__ == "__main__":
    import logging
    logging.disable(logging.CRITICAL)
    if sys.argv[1] == "--timers":
        build_timers(sys.argv[2])
    else:
        build(sys.argv[1])
