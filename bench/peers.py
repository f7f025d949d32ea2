#!/usr/bin/env python
"""pystore side by side with what a Python user would otherwise pick, in one process and one run.

    python bench/peers.py                      # the full run (a few minutes on 2 cores)
    python bench/peers.py --quick              # small counts: a smoke test for CI
    python bench/peers.py --only pystore,lmdb  # some contenders (the floors always run)
    python bench/peers.py --json out.json --markdown table.md

Contenders (one small adapter class each, same methods: ``append_batch``, ``append_durable``, ``read_seq``,
``read_random``, ``put_one``): pystore (batches of the caller's bytes through ``MessageBatch.from_bodies``,
single puts through a ``Message`` built per put), pystore-messages (a ``Message`` built per body of a batch),
pystore-prebuilt (``Message`` objects built before timing: the store alone), the ``mmap`` + ``struct``
appender (``benchlib.MmapAppender``, the afternoon baseline), ``lmdb``, stdlib ``sqlite3`` (WAL, synchronous
OFF, and NORMAL as a second row), ``persistqueue.Queue`` (files), ``persistqueue.SQLiteQueue``, ``litequeue``
and ``diskcache.Index``. Every one gets the same payloads (``benchlib.payloads``), one temporary folder under
one ``tempfile.TemporaryDirectory()`` (same file system), untimed setup (pystore: files pre-created and
pre-faulted; the ``mmap`` appender: pre-faulted too), and is timed with the same loops.

Measures, per contender:
* ``append 128 B`` / ``append 1 KiB``: batches of 32, no sync (msgs/s and MB/s of payload);
* ``durable 128 B``: batches of 32, each durable before the next (fdatasync/msync/group commit);
* ``read seq``: every 128 B message back in order (queues consume them);
* ``read rand p50/p99``: 128 B messages by key/offset, each call timed;
* ``put one p50/p99``: single 128 B puts, no sync, each call timed;
* ``append 128 B bulk``: 4096 bodies per call, no sync, each contender's own bulk insert: pystore
  ``put_columns`` (a list of bytes, stored by one compiled call), lmdb ``cursor.putmulti`` in one write txn,
  sqlite3 ``executemany`` in one transaction; persist-queue (both queues), litequeue and diskcache have no
  bulk insert (n/a).
Each append/read runs for a fixed count or a time cap, whichever comes first (slow contenders write less);
every result is checked (count and CRC of bodies read back, each random read's body) outside the timing.

Machine floors in the same run: ``memcpy`` into a warm mapping (``mmap`` slice assignment of a 64 MiB
``bytes``, and ``ctypes.memmove``), and a plain file ``write`` + ``os.fdatasync`` every 32 records of 128 B.

Repetitions are interleaved: every repetition runs every contender once (in a rotated order), and the table
shows the median over repetitions, with ratios to the best peer and to the floor; against lmdb also the worst
repetition's ratio (each repetition's pystore over the same repetition's lmdb).
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import json
import mmap
import os
import shlex
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import benchlib  # noqa: E402
from benchlib import MIB, TOPIC  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
BATCH = 32
BULK = 4096  # bodies per bulk insert

FULL = dict(reps=5, n128=320_000, n1k=64_000, ndur=32_000, none=20_000, nrand=20_000,
            t_append=1.0, t_durable=1.0, t_read=1.0, t_lat=0.5, floor_mb=64)
QUICK = dict(reps=3, n128=6_400, n1k=3_200, ndur=640, none=2_000, nrand=2_000,
             t_append=0.2, t_durable=0.2, t_read=0.2, t_lat=0.1, floor_mb=8)

MEASURES = [
    # key, title, unit, higher is better, floor key
    ("append_128", "append 128 B", "msg/s", True, "memcpy"),
    ("append_1k", "append 1 KiB", "msg/s", True, "memcpy"),
    ("durable_128", "durable 128 B (sync/32)", "msg/s", True, "fdatasync"),
    ("read_seq", "read seq 128 B", "msg/s", True, "memcpy"),
    ("read_rand_p50", "read rand p50", "us", False, None),
    ("read_rand_p99", "read rand p99", "us", False, None),
    ("put_one_p50", "put one p50", "us", False, None),
    ("put_one_p99", "put one p99", "us", False, None),
    ("append_bulk_128", "append 128 B bulk", "msg/s", True, "memcpy"),
]
SIZES = {"append_128": 128, "append_1k": 1024, "durable_128": 128, "read_seq": 128, "append_bulk_128": 128}


class NotSupported(Exception):
    """The contender has no such operation (e.g. a FIFO queue has no read by key)."""


# ===========================================================================================================
# adapters
# ===========================================================================================================


class Adapter:
    """One contender. ``__init__(folder, durable)`` opens it (untimed); ``durable=True`` configures it so that
    ``append_durable`` returns only once the batch is on disk. ``prepare`` turns the shared payloads into what
    the timed calls take (identity for everyone but pystore-prebuilt). ``key(i)`` is the read key of the
    i-th 128 B message appended by ``append_batch``."""

    name = "?"
    description = ""
    durable_note = ""
    read_note = ""

    def __init__(self, folder: str, durable: bool) -> None:
        self.folder = folder
        self.durable = durable
        os.makedirs(folder, exist_ok=True)

    def prepare_batch(self, bodies: list[bytes]) -> Any:
        return bodies

    def prepare_one(self, body: bytes) -> Any:
        return body

    def append_batch(self, batch: Any) -> None:
        raise NotImplementedError

    def append_durable(self, batch: Any) -> None:
        raise NotSupported("no durable append")

    def append_bulk(self, bodies: list[bytes]) -> None:
        """``BULK`` bodies in one call of the contender's own bulk insert."""
        raise NotSupported("no bulk insert")

    def read_seq(self) -> Iterator[bytes]:
        raise NotImplementedError

    def key(self, i: int) -> Any:
        raise NotSupported("no read by key")

    def read_random(self, key: Any) -> bytes:
        raise NotSupported("no read by key")

    def put_one(self, item: Any) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass


class PystoreAdapter(Adapter):
    name = "pystore"
    description = ("put_messages(MessageBatch.from_bodies(topic, bodies)): the caller's bytes, no Message per "
                   "body; single puts build a Message")
    durable_note = "SYNC_FLUSH (group commit, msync)"
    read_note = "look_message_by_offset walk"

    def __init__(self, folder: str, durable: bool) -> None:
        super().__init__(folder, durable)
        file_size = 64 * MIB if durable else 256 * MIB
        api = benchlib.store_api()
        self.Message, self.MessageBatch = api["Message"], api["MessageBatch"]
        over: dict[str, Any] = {}
        if durable:
            over["flush_disk_type"] = api["FlushDiskType"].SYNC_FLUSH
        self.store = benchlib.open_warm_store(os.path.join(folder, "store"), file_size, **over)
        # put_columns imports numpy on its first call: here, untimed, as the other adapters import their module
        # in __init__ (else the first repetition's bulk row times the import)
        import numpy  # noqa: F401
        self.put_messages = self.store.put_messages
        self.from_bodies = self.MessageBatch.from_bodies
        self.put_message = self.store.put_message
        self.look = self.store.look_message_by_offset
        # each append_batch's result: the read keys (first offset, record size) are taken from them after the
        # timing, as the other contenders' keys cost them nothing while appending
        self.results: list[Any] = []
        self.has_get_message = hasattr(self.store, "get_message")
        if self.has_get_message:
            self.read_note = "get_message pages of 32"

    def _put_batch(self, batch: Any) -> Any:
        return self.put_messages(self.from_bodies(TOPIC, batch))

    def append_batch(self, batch: Any) -> None:
        # one frame, as a caller would write it (lmdb's append_batch is one frame too)
        self.results.append(self.put_messages(self.from_bodies(TOPIC, batch)))

    def append_bulk(self, bodies: list[bytes]) -> None:
        r = self.store.put_columns(TOPIC, bodies)
        if r.count != len(bodies):
            raise RuntimeError("bulk put: %r" % (r,))

    def _batch_start(self, j: int) -> tuple[int, int]:
        a = self.results[j].append_message_result
        return a.wrote_offset, a.wrote_bytes // a.msg_num

    def append_durable(self, batch: Any) -> None:
        r = self._put_batch(batch)
        if r.status.name != "PUT_OK":
            raise RuntimeError("durable put: %r" % (r,))

    def key(self, i: int) -> int:
        first, size = self._batch_start(i // BATCH)
        return first + (i % BATCH) * size

    def read_random(self, key: int) -> bytes:
        return self.look(key).body

    def read_seq(self) -> Iterator[bytes]:
        if self.has_get_message:
            get = self.store.get_message
            off = 0
            while True:
                r = get("peers", TOPIC, 0, off, 32)
                if not r.messages:
                    return
                yield from [m.body for m in r.messages]
                off = r.next_begin_offset
        look = self.look
        o = self._batch_start(0)[0] if self.results else 0
        end = self.store.get_max_phy_offset()
        while o < end:
            m = look(o)
            if m is None or m.topic != TOPIC:
                return
            yield m.body
            o += m.store_size

    def put_one(self, item: Any) -> None:
        self.put_message(self.Message(TOPIC, item))

    def close(self) -> None:
        self.store.destroy()


class PystoreMessagesAdapter(PystoreAdapter):
    name = "pystore-messages"
    description = "put_messages(MessageBatch([Message(topic, b) ...])): a Message built for every body"

    def _put_batch(self, batch: Any) -> Any:
        M = self.Message
        return self.put_messages(self.MessageBatch([M(TOPIC, b) for b in batch]))

    append_bulk = Adapter.append_bulk  # the bulk row is pystore's (put_columns)

    def append_batch(self, batch: Any) -> None:
        self.results.append(self._put_batch(batch))


class PystorePrebuiltAdapter(PystoreAdapter):
    name = "pystore-prebuilt"
    description = ("Message/MessageBatch objects built before timing (the store alone; the body CRC is still "
                   "computed by the first put)")

    def prepare_batch(self, bodies: list[bytes]) -> Any:
        return self.MessageBatch([self.Message(TOPIC, b) for b in bodies])

    def prepare_one(self, body: bytes) -> Any:
        return self.Message(TOPIC, body)

    def _put_batch(self, batch: Any) -> Any:
        return self.put_messages(batch)

    append_bulk = Adapter.append_bulk  # the bulk row is pystore's (put_columns)

    def append_batch(self, batch: Any) -> None:
        self.results.append(self.put_messages(batch))

    def put_one(self, item: Any) -> None:
        self.put_message(item)


class MmapStructAdapter(Adapter):
    name = "mmap+struct"
    description = "pure Python: struct header (len, crc32, seq) + slice assignment into a pre-faulted mmap"
    durable_note = "mmap.flush (msync) of the written range"
    read_note = "header unpack + slice"

    def __init__(self, folder: str, durable: bool, file_size: int = 256 * MIB) -> None:
        super().__init__(folder, durable)
        self.app = benchlib.MmapAppender(os.path.join(folder, "log"), file_size, prefault=True)
        self.firsts: list[int] = []

    def append_batch(self, batch: Any) -> None:
        self.firsts.append(self.app.append_batch(batch))

    def append_durable(self, batch: Any) -> None:
        self.app.append_batch(batch)
        self.app.flush()

    def key(self, i: int) -> int:
        return self.firsts[i // BATCH] + (i % BATCH) * (16 + 128)

    def read_random(self, key: int) -> bytes:
        return self.app.read(key)

    def read_seq(self) -> Iterator[bytes]:
        return self.app.iter_records()

    def put_one(self, item: Any) -> None:
        self.app.append(item)

    def close(self) -> None:
        self.app.close()


class LmdbAdapter(Adapter):
    name = "lmdb"
    description = "one write txn per batch, cursor.putmulti(append=True), 8-byte big-endian keys"
    durable_note = "sync=True (fdatasync per txn)"
    read_note = "cursor scan / txn.get in one read txn"

    def __init__(self, folder: str, durable: bool) -> None:
        super().__init__(folder, durable)
        import lmdb

        self.env = lmdb.open(folder, map_size=8 << 30, sync=durable, metasync=durable, lock=True,
                             max_dbs=0, readahead=True)
        self.next = 0
        self.rtxn = None

    def append_batch(self, batch: Any) -> None:
        i = self.next
        self.next = i + len(batch)
        with self.env.begin(write=True) as txn:
            txn.cursor().putmulti(zip([k.to_bytes(8, "big") for k in range(i, self.next)], batch, strict=True),
                                  append=True)

    append_durable = append_batch
    append_bulk = append_batch

    def key(self, i: int) -> bytes:
        return i.to_bytes(8, "big")

    def read_random(self, key: bytes) -> bytes:
        if self.rtxn is None:
            self.rtxn = self.env.begin()
        return self.rtxn.get(key)

    def read_seq(self) -> Iterator[bytes]:
        with self.env.begin() as txn:
            for _k, v in txn.cursor():
                yield v

    def put_one(self, item: Any) -> None:
        k = self.next.to_bytes(8, "big")
        self.next += 1
        with self.env.begin(write=True) as txn:
            txn.put(k, item, append=True)

    def close(self) -> None:
        if self.rtxn is not None:
            self.rtxn.abort()
        self.env.close()


class SqliteAdapter(Adapter):
    name = "sqlite3"
    nosync = "OFF"
    description = "stdlib sqlite3, WAL, synchronous=OFF, executemany in one transaction per batch"
    durable_note = "WAL, synchronous=FULL"
    read_note = "SELECT ... ORDER BY id / WHERE id=?"

    def __init__(self, folder: str, durable: bool) -> None:
        super().__init__(folder, durable)
        self.conn = sqlite3.connect(os.path.join(folder, "log.db"), isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=%s" % ("FULL" if durable else self.nosync))
        self.conn.execute("CREATE TABLE log (id INTEGER PRIMARY KEY, body BLOB NOT NULL)")
        self.ins = "INSERT INTO log (body) VALUES (?)"

    def append_batch(self, batch: Any) -> None:
        c = self.conn
        c.execute("BEGIN")
        c.executemany(self.ins, zip(batch))
        c.execute("COMMIT")

    append_durable = append_batch
    append_bulk = append_batch

    def key(self, i: int) -> int:
        return i + 1

    def read_random(self, key: int) -> bytes:
        return self.conn.execute("SELECT body FROM log WHERE id=?", (key,)).fetchone()[0]

    def read_seq(self) -> Iterator[bytes]:
        for (b,) in self.conn.execute("SELECT body FROM log ORDER BY id"):
            yield b

    def put_one(self, item: Any) -> None:
        self.conn.execute(self.ins, (item,))

    def close(self) -> None:
        self.conn.close()


class SqliteNormalAdapter(SqliteAdapter):
    name = "sqlite3-normal"
    nosync = "NORMAL"
    description = "the same with synchronous=NORMAL (WAL: fsync at checkpoints only)"


class PersistQueueFileAdapter(Adapter):
    name = "persistqueue.Queue"
    description = "file-based persistqueue.Queue: put() per message (pickles, writes, rewrites its info file)"
    durable_note = "n/a (no fsync per put)"
    read_note = "get() (consumes)"

    def __init__(self, folder: str, durable: bool) -> None:
        super().__init__(folder, durable)
        import persistqueue

        tmp = os.path.join(folder, "tmp")
        os.makedirs(tmp, exist_ok=True)
        self.q = persistqueue.Queue(os.path.join(folder, "q"), tempdir=tmp)

    def append_batch(self, batch: Any) -> None:
        put = self.q.put
        for b in batch:
            put(b)

    def read_seq(self) -> Iterator[bytes]:
        get = self.q.get_nowait
        import persistqueue

        while True:
            try:
                yield get()
            except persistqueue.Empty:
                return

    def put_one(self, item: Any) -> None:
        self.q.put(item)

    def close(self) -> None:
        for f in (self.q.headf, self.q.tailf):
            f.close()


class PersistQueueSqliteAdapter(Adapter):
    name = "persistqueue.SQLiteQueue"
    description = "persistqueue.SQLiteQueue(auto_commit=False): 32 put() then task_done() (one commit)"
    durable_note = "WAL, synchronous=FULL, commit per 32"
    read_note = "get() (cursor, no delete)"

    def __init__(self, folder: str, durable: bool) -> None:
        super().__init__(folder, durable)
        import persistqueue

        self.q = persistqueue.SQLiteQueue(os.path.join(folder, "q"), auto_commit=False, multithreading=False)
        self.q._putter.execute("PRAGMA synchronous=%s" % ("FULL" if durable else "OFF"))

    def append_batch(self, batch: Any) -> None:
        put = self.q.put
        for b in batch:
            put(b)
        self.q.task_done()

    append_durable = append_batch

    def read_seq(self) -> Iterator[bytes]:
        import persistqueue

        get = self.q.get
        while True:
            try:
                yield get(block=False)
            except persistqueue.Empty:
                return

    def put_one(self, item: Any) -> None:
        self.q.put(item)
        self.q.task_done()

    def close(self) -> None:
        self.q.close()


class LitequeueAdapter(Adapter):
    name = "litequeue"
    description = "litequeue.LiteQueue: put() per message inside one transaction per batch, synchronous=OFF"
    durable_note = "WAL, synchronous=FULL, transaction per 32"
    read_note = "pop() (consumes) / get(message_id)"

    def __init__(self, folder: str, durable: bool) -> None:
        super().__init__(folder, durable)
        import litequeue

        self.q = litequeue.LiteQueue(os.path.join(folder, "q.db"))
        self.q.conn.execute("PRAGMA synchronous=%s" % ("FULL" if durable else "OFF"))
        self.ids: list[str] = []

    def append_batch(self, batch: Any) -> None:
        q = self.q
        add = self.ids.append
        with q.transaction():
            for b in batch:
                add(q.put(b).message_id)

    append_durable = append_batch

    def key(self, i: int) -> str:
        return self.ids[i]

    def read_random(self, key: str) -> bytes:
        return self.q.get(key).data

    def read_seq(self) -> Iterator[bytes]:
        pop = self.q.pop
        while True:
            m = pop()
            if m is None:
                return
            yield m.data

    def put_one(self, item: Any) -> None:
        self.q.put(item)

    def close(self) -> None:
        self.q.close()


class DiskcacheAdapter(Adapter):
    name = "diskcache.Index"
    description = "diskcache.Index (int keys, insertion order), one transact() per batch, synchronous=OFF"
    durable_note = "sqlite_synchronous=FULL, transact per 32"
    read_note = "values() / index[key]"

    def __init__(self, folder: str, durable: bool) -> None:
        super().__init__(folder, durable)
        import diskcache

        cache = diskcache.Cache(folder, eviction_policy="none", sqlite_synchronous=2 if durable else 0)
        self.idx = diskcache.Index.fromcache(cache)
        self.next = 0

    def append_batch(self, batch: Any) -> None:
        idx = self.idx
        i = self.next
        with idx.transact():
            for b in batch:
                idx[i] = b
                i += 1
        self.next = i

    append_durable = append_batch

    def key(self, i: int) -> int:
        return i

    def read_random(self, key: int) -> bytes:
        return self.idx[key]

    def read_seq(self) -> Iterator[bytes]:
        return iter(self.idx.values())

    def put_one(self, item: Any) -> None:
        self.idx[self.next] = item
        self.next += 1

    def close(self) -> None:
        self.idx.cache.close()


CONTENDERS: list[type[Adapter]] = [
    PystoreAdapter,
    PystoreMessagesAdapter,
    PystorePrebuiltAdapter,
    MmapStructAdapter,
    LmdbAdapter,
    SqliteAdapter,
    SqliteNormalAdapter,
    PersistQueueFileAdapter,
    PersistQueueSqliteAdapter,
    LitequeueAdapter,
    DiskcacheAdapter,
]
PYSTORE = {"pystore", "pystore-messages", "pystore-prebuilt"}


# ===========================================================================================================
# timed loops (shared by every contender)
# ===========================================================================================================


def timed_batches(fn: Callable[[Any], Any], batches: Sequence[Any], max_s: float) -> tuple[int, float]:
    """Call ``fn`` on each batch until done or ``max_s`` passed: (batches done, seconds)."""
    pc = time.perf_counter
    t0 = pc()
    deadline = t0 + max_s
    n = 0
    for b in batches:
        fn(b)
        n += 1
        if (n & 7) == 0 and pc() > deadline:
            break
    return n, pc() - t0


def timed_read_seq(it: Iterator[bytes], limit: int, max_s: float) -> tuple[list[bytes], float]:
    pc = time.perf_counter
    out: list[bytes] = []
    add = out.append
    t0 = pc()
    deadline = t0 + max_s
    for b in it:
        add(bytes(b))
        if len(out) >= limit or ((len(out) & 1023) == 0 and pc() > deadline):
            break
    return out, pc() - t0


def run_contender(
    cls: type[Adapter], folder: str, cfg: dict[str, Any], data: dict[str, Any]
) -> dict[str, Any]:
    """Every measure for one contender, one repetition: ``{measure: value}`` plus notes."""
    out: dict[str, Any] = {}
    # untimed: write back what earlier contenders left dirty, so the kernel does not write it back (two cores
    # of CPU, and the disk) while this one is timed; every contender starts from the same clean page cache
    os.sync()
    a = cls(os.path.join(folder, "main"), durable=False)
    try:
        # append 128 B, no sync
        batches = [a.prepare_batch(b) for b in data["batches128"]]
        n, dt = timed_batches(a.append_batch, batches, cfg["t_append"])
        msgs128 = n * BATCH
        out["append_128"] = msgs128 / dt
        out["append_128_n"] = msgs128
        # read back in order
        try:
            got, dt = timed_read_seq(a.read_seq(), msgs128, cfg["t_read"])
            exp = data["p128"][: len(got)]
            if len(got) == 0 or benchlib.bodies_checksum(got) != benchlib.bodies_checksum(exp):
                raise AssertionError("%s: sequential read returned wrong bodies" % cls.name)
            out["read_seq"] = len(got) / dt
            out["read_seq_n"] = len(got)
        except NotSupported:
            pass
        # random reads by key
        try:
            keys_idx = [i for i in data["rand_idx"] if i < msgs128][: cfg["nrand"]]
            keys = [a.key(i) for i in keys_idx]
            lat = benchlib.time_each(a.read_random, keys, max_seconds=cfg["t_lat"])
            for i, k in list(zip(keys_idx, keys, strict=True))[: len(lat)][:: max(1, len(lat) // 500)]:
                if bytes(a.read_random(k)) != data["p128"][i]:
                    raise AssertionError(
                        "%s: random read of message %d returned a wrong body" % (cls.name, i)
                    )
            p = benchlib.percentiles(lat)
            out["read_rand_p50"], out["read_rand_p99"] = p["p50"] / 1e3, p["p99"] / 1e3
            out["read_rand_n"] = len(lat)
        except NotSupported:
            pass
        # single puts, no sync
        items = [a.prepare_one(b) for b in data["p128"][: cfg["none"]]]
        lat = benchlib.time_each(a.put_one, items, max_seconds=cfg["t_lat"])
        p = benchlib.percentiles(lat)
        out["put_one_p50"], out["put_one_p99"] = p["p50"] / 1e3, p["p99"] / 1e3
        out["put_one_n"] = len(lat)
        # append 128 B in bulk, no sync (before the 1 KiB appends: pystore's pre-faulted file holds both)
        try:
            n, dt = timed_batches(a.append_bulk, data["bulk128"], cfg["t_append"])
            done = sum(len(b) for b in data["bulk128"][:n])
            out["append_bulk_128"] = done / dt
            out["append_bulk_128_n"] = done
        except NotSupported:
            pass
        # append 1 KiB, no sync
        batches = [a.prepare_batch(b) for b in data["batches1k"]]
        n, dt = timed_batches(a.append_batch, batches, cfg["t_append"])
        out["append_1k"] = n * BATCH / dt
        out["append_1k_n"] = n * BATCH
    finally:
        a.close()
    # durable batches of 32 x 128 B: first write back what earlier phases (and contenders) left dirty, then
    # measure the write+fdatasync floor right here, so each contender's ratio is to a floor of the same
    # moment (this VM's fsync latency drifts by 2x over a run)
    os.sync()
    out["durable_floor"] = floor_fdatasync(folder, data["p128"], cfg["ndur"] // BATCH, cfg["t_durable"] / 2)
    try:
        d = cls(os.path.join(folder, "durable"), durable=True)
    except NotSupported:
        return out
    try:
        batches = [d.prepare_batch(b) for b in data["batches128"][: cfg["ndur"] // BATCH]]
        try:
            n, dt = timed_batches(d.append_durable, batches, cfg["t_durable"])
            out["durable_128"] = n * BATCH / dt
            out["durable_128_n"] = n * BATCH
            out["durable_x_floor"] = out["durable_128"] / out["durable_floor"]
        except NotSupported:
            pass
    finally:
        d.close()
    return out


# ===========================================================================================================
# floors
# ===========================================================================================================


def floor_memcpy(folder: str, mb: int) -> dict[str, float]:
    """GB/s of copying a big ``bytes`` into a warm (pre-faulted, already written) shared file mapping:
    ``mmap`` slice assignment and ``ctypes.memmove``; the best of 5 each."""
    n = mb * MIB
    src = os.urandom(n)
    path = os.path.join(folder, "memcpy")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.posix_fallocate(fd, 0, n)
        mm = mmap.mmap(fd, n)
        mm[0:n] = src  # fault every page in and dirty it once
        cbuf = (ctypes.c_char * n).from_buffer(mm)
        dst = ctypes.addressof(cbuf)
        srcbuf = ctypes.c_char_p(src)
        best_slice = best_memmove = float("inf")
        for _ in range(5):
            t = time.perf_counter()
            mm[0:n] = src
            best_slice = min(best_slice, time.perf_counter() - t)
            t = time.perf_counter()
            ctypes.memmove(dst, srcbuf, n)
            best_memmove = min(best_memmove, time.perf_counter() - t)
        assert mm[n - 64 : n] == src[n - 64 : n]
        del cbuf
        mm.close()
    finally:
        os.close(fd)
        os.unlink(path)
    return {"memcpy_slice_gbs": n / best_slice / 1e9, "memcpy_memmove_gbs": n / best_memmove / 1e9}


def floor_fdatasync(folder: str, bodies: Sequence[bytes], max_batches: int, max_s: float) -> float:
    """msgs/s of a plain file: one ``write`` of 32 length-prefixed 128 B records, then ``os.fdatasync``."""
    path = os.path.join(folder, "fdatasync")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    chunks = [
        b"".join(len(b).to_bytes(4, "big") + b for b in bodies[i : i + BATCH])
        for i in range(0, min(len(bodies), max_batches * BATCH), BATCH)
    ]
    try:

        def w(c: bytes) -> None:
            os.write(fd, c)
            os.fdatasync(fd)

        n, dt = timed_batches(w, chunks, max_s)
        assert os.fstat(fd).st_size == sum(len(c) for c in chunks[:n])
    finally:
        os.close(fd)
        os.unlink(path)
    return n * BATCH / dt


# ===========================================================================================================
# the run
# ===========================================================================================================


def build_data(cfg: dict[str, Any]) -> dict[str, Any]:
    import random

    p128 = benchlib.payloads(max(cfg["n128"], cfg["ndur"], cfg["none"]), 128)
    p1k = benchlib.payloads(cfg["n1k"], 1024)
    rng = random.Random(11)
    return {
        "p128": p128,
        "batches128": [p128[i : i + BATCH] for i in range(0, cfg["n128"], BATCH)],
        "batches1k": [p1k[i : i + BATCH] for i in range(0, cfg["n1k"], BATCH)],
        "bulk128": [p128[i : i + BULK] for i in range(0, cfg["n128"], BULK)],
        "rand_idx": [rng.randrange(cfg["n128"]) for _ in range(cfg["nrand"] * 4)],
    }


def median_of(reps: list[dict[str, Any]], key: str) -> float | None:
    vals = [r[key] for r in reps if isinstance(r.get(key), (int, float))]
    return statistics.median(vals) if vals else None


def summarize(results: dict[str, list[dict[str, Any]]], floors: list[dict[str, float]]) -> dict[str, Any]:
    med = {
        name: {m[0]: median_of(reps, m[0]) for m in MEASURES}
        | {m[0] + "_n": median_of(reps, m[0] + "_n") for m in MEASURES}
        | {"durable_x_floor": median_of(reps, "durable_x_floor")}
        for name, reps in results.items()
    }
    fl = {k: median_of(floors, k) for k in ("memcpy_slice_gbs", "memcpy_memmove_gbs")}
    fl["fdatasync_msgs"] = median_of([r for reps in results.values() for r in reps], "durable_floor")
    memcpy = (
        max(v for v in (fl["memcpy_slice_gbs"], fl["memcpy_memmove_gbs"]) if v is not None)
        if floors
        else None
    )
    ratios: dict[str, dict[str, Any]] = {}
    peers = [n for n in med if n not in PYSTORE]
    for key, _title, _unit, higher, floor in MEASURES:
        vals = {n: med[n][key] for n in peers if med[n][key] is not None}
        best = (max if higher else min)(vals, key=vals.get) if vals else None
        for who in ("pystore", "pystore-prebuilt"):
            v = med.get(who, {}).get(key)
            if v is None:
                continue
            r: dict[str, Any] = {
                "value": v,
                "best_peer": best,
                "best_peer_value": vals.get(best) if best else None,
            }
            if best:
                r["x_best_peer"] = v / vals[best] if higher else vals[best] / v
            for peer in ("lmdb", "mmap+struct"):
                if peer in vals:
                    r["x_" + peer] = v / vals[peer] if higher else vals[peer] / v
            if "lmdb" in vals:
                # the ratio in each repetition (both ran in it, minutes apart at most), and the worst of them:
                # a median ratio can hide repetitions where pystore was not ahead by as much
                per_rep = [(a[key] / b[key] if higher else b[key] / a[key])
                           for a, b in zip(results[who], results["lmdb"], strict=True)
                           if isinstance(a.get(key), (int, float)) and isinstance(b.get(key), (int, float))
                           and a[key] > 0 and b[key] > 0]
                if per_rep:
                    r["x_lmdb_reps"] = per_rep
                    r["x_lmdb_min"] = min(per_rep)
            if floor == "memcpy" and memcpy:
                fv = memcpy * 1e9 / SIZES[key]  # msgs/s if only the payload bytes were copied
                r["floor"], r["x_floor"] = fv, v / fv
            elif floor == "fdatasync" and fl["fdatasync_msgs"]:
                # each repetition's durable rate over the floor measured just before it, median over reps
                r["floor"], r["x_floor"] = fl["fdatasync_msgs"], median_of(results[who], "durable_x_floor")
            ratios.setdefault(who, {})[key] = r
    return {"medians": med, "floors": fl, "memcpy_gbs": memcpy, "ratios": ratios}


def fmt(v: float | None, unit: str) -> str:
    if v is None:
        return "n/a"
    if unit == "msg/s":
        return "%.2f M" % (v / 1e6) if v >= 1e6 else ("%.0f k" % (v / 1e3) if v >= 1e4 else "%.0f" % v)
    if unit == "us":
        return "%.2f" % v if v < 10 else "%.0f" % v
    if unit == "x":
        return "%.2fx" % v
    return "%.3g" % v


def mbs(msgs: float | None, size: int) -> str:
    return "n/a" if msgs is None else "%.0f" % (msgs * size / 1e6)


def render(summary: dict[str, Any], meta: dict[str, Any], console: Any) -> None:
    from rich.table import Table

    med = summary["medians"]
    t = Table(
        title="pystore and peers: medians of %d interleaved repetitions" % meta["reps"], title_justify="left"
    )
    t.add_column("contender", style="bold")
    for key, title, unit, _h, _f in MEASURES:
        t.add_column("%s\n%s" % (title, "msgs/s" if unit == "msg/s" else "us"), justify="right")
        if key in ("append_128", "append_1k"):
            t.add_column("%s\nMB/s" % title, justify="right")
        if key == "durable_128":
            t.add_column("durable\n÷ floor", justify="right")
    for name, m in med.items():
        row = [name]
        for key, _title, unit, _h, _f in MEASURES:
            row.append(fmt(m[key], unit))
            if key in ("append_128", "append_1k"):
                row.append(mbs(m[key], SIZES[key]))
            if key == "durable_128":
                row.append(fmt(m.get("durable_x_floor"), "x"))
        t.add_row(*row, style="green" if name in PYSTORE else None)
    fl = summary["floors"]
    if summary["memcpy_gbs"]:
        mc = summary["memcpy_gbs"] * 1e9
        t.add_row(
            "floor: memcpy %.1f GB/s" % summary["memcpy_gbs"],
            fmt(mc / 128, "msg/s"),
            "%.0f" % (mc / 1e6),
            fmt(mc / 1024, "msg/s"),
            "%.0f" % (mc / 1e6),
            "",
            "",
            fmt(mc / 128, "msg/s"),
            "",
            "",
            "",
            "",
            fmt(mc / 128, "msg/s"),
            style="dim",
        )
    if fl.get("fdatasync_msgs"):
        t.add_row(
            "floor: write+fdatasync/32",
            "",
            "",
            "",
            "",
            fmt(fl["fdatasync_msgs"], "msg/s"),
            "1.00x",
            "",
            "",
            "",
            "",
            "",
            "",
            style="dim",
        )
    console.print(t)

    r = Table(title="ratios (>1: pystore better; latencies as best/pystore)", title_justify="left")
    for c in (
        "measure",
        "contender",
        "value",
        "best peer",
        "x best",
        "x lmdb",
        "x lmdb\nworst rep",
        "x mmap+struct",
        "floor",
        "x floor",
    ):
        r.add_column(c, justify="left" if c in ("measure", "contender", "best peer") else "right")
    for key, title, unit, _h, _f in MEASURES:
        for who in ("pystore", "pystore-prebuilt"):
            x = summary["ratios"].get(who, {}).get(key)
            if not x:
                continue
            r.add_row(
                title,
                who,
                fmt(x["value"], unit),
                "%s (%s)" % (x["best_peer"], fmt(x["best_peer_value"], unit)) if x["best_peer"] else "n/a",
                fmt(x.get("x_best_peer"), "x"),
                fmt(x.get("x_lmdb"), "x"),
                fmt(x.get("x_lmdb_min"), "x"),
                fmt(x.get("x_mmap+struct"), "x"),
                fmt(x.get("floor"), unit) if "floor" in x else "",
                fmt(x.get("x_floor"), "x") if "x_floor" in x else "",
            )
    console.print(r)


def markdown(summary: dict[str, Any], meta: dict[str, Any]) -> str:
    med = summary["medians"]
    heads = ["contender"]
    for key, title, unit, _h, _f in MEASURES:
        heads.append("%s %s" % (title, "msgs/s" if unit == "msg/s" else "µs"))
        if key in ("append_128", "append_1k"):
            heads.append("%s MB/s" % title)
        if key == "durable_128":
            heads.append("durable ÷ floor")
    lines = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    for name, m in med.items():
        row = ["**%s**" % name if name in PYSTORE else name]
        for key, _title, unit, _h, _f in MEASURES:
            row.append(fmt(m[key], unit))
            if key in ("append_128", "append_1k"):
                row.append(mbs(m[key], SIZES[key]))
            if key == "durable_128":
                row.append(fmt(m.get("durable_x_floor"), "x"))
        lines.append("| " + " | ".join(row) + " |")
    fl = summary["floors"]
    if summary["memcpy_gbs"]:
        mc = summary["memcpy_gbs"] * 1e9
        lines.append(
            "| *floor: memcpy into a warm mapping (%.1f GB/s)* | %s | %.0f | %s | %.0f | | | %s | | | | | %s |"
            % (
                summary["memcpy_gbs"],
                fmt(mc / 128, "msg/s"),
                mc / 1e6,
                fmt(mc / 1024, "msg/s"),
                mc / 1e6,
                fmt(mc / 128, "msg/s"),
                fmt(mc / 128, "msg/s"),
            )
        )
    if fl.get("fdatasync_msgs"):
        lines.append(
            "| *floor: file write + fdatasync every 32* | | | | | %s | 1.00x | | | | | | |"
            % fmt(fl["fdatasync_msgs"], "msg/s")
        )
    lines.append("")
    lines.append(
        "| measure | pystore | pystore-prebuilt | best peer | pystore ÷ best peer | pystore ÷ lmdb "
        "| pystore ÷ lmdb, worst repetition | pystore ÷ mmap+struct | pystore ÷ floor |"
    )
    lines.append("|---|---|---|---|---|---|---|---|---|")
    for key, title, unit, _h, _f in MEASURES:
        x = summary["ratios"].get("pystore", {}).get(key)
        xp = summary["ratios"].get("pystore-prebuilt", {}).get(key)
        if not x and not xp:
            continue
        x = x or {}
        xp = xp or {}
        base = x or xp
        lines.append(
            "| %s | %s | %s | %s | %s | %s | %s | %s | %s |"
            % (
                title,
                fmt(x.get("value"), unit),
                fmt(xp.get("value"), unit),
                "%s (%s)" % (base["best_peer"], fmt(base["best_peer_value"], unit))
                if base.get("best_peer")
                else "n/a",
                " / ".join(fmt(y.get("x_best_peer"), "x") for y in (x, xp)),
                " / ".join(fmt(y.get("x_lmdb"), "x") for y in (x, xp)),
                " / ".join(fmt(y.get("x_lmdb_min"), "x") for y in (x, xp)),
                " / ".join(fmt(y.get("x_mmap+struct"), "x") for y in (x, xp)),
                " / ".join(fmt(y.get("x_floor"), "x") for y in (x, xp)) if "x_floor" in base else "",
            )
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__,
    )
    p.add_argument("--quick", action="store_true", help="small counts (CI smoke test)")
    p.add_argument("--only", default=None, help="comma-separated contender names (floors always run)")
    p.add_argument("--reps", type=int, default=None, help="repetitions (default 5; 3 with --quick)")
    p.add_argument("--json", default=os.path.join(HERE, "results", "peers.json"), help="JSON output path")
    p.add_argument("--markdown", default=None, help="also write the README table (Markdown) here")
    p.add_argument("--tmpdir", default=None, help="parent of the temporary folder (default: $TMPDIR)")
    p.add_argument("--list", action="store_true", help="list the contenders and exit")
    a = p.parse_args(argv)

    from rich.console import Console

    console = Console(width=None if sys.stdout.isatty() else 200)
    if a.list:
        for c in CONTENDERS:
            console.print("%-26s %s" % (c.name, c.description))
        return 0
    cfg = dict(QUICK if a.quick else FULL)
    if a.reps is not None:
        if a.reps < 1:
            p.error("--reps must be >= 1")
        cfg["reps"] = a.reps
    contenders = CONTENDERS
    if a.only:
        wanted = [w.strip() for w in a.only.split(",") if w.strip()]
        known = {c.name: c for c in CONTENDERS}
        bad = [w for w in wanted if w not in known]
        if bad:
            p.error("unknown contender(s) %s; known: %s" % (", ".join(bad), ", ".join(known)))
        contenders = [known[w] for w in wanted]

    with tempfile.TemporaryDirectory(prefix="pystore-peers-", dir=a.tmpdir) as top:
        m = benchlib.machine(a.tmpdir or tempfile.gettempdir())
        command = "python bench/peers.py" + (
            " " + shlex.join(argv if argv is not None else sys.argv[1:])
            if (argv if argv is not None else sys.argv[1:])
            else ""
        )
        when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
        console.print("[bold]pystore peers run[/bold]  %s" % when)
        console.print("machine: " + benchlib.machine_line(m))
        console.print(
            "command: %s   (%s; %d repetitions, interleaved)"
            % (command, "quick" if a.quick else "full", cfg["reps"])
        )
        try:
            import pystore

            console.print(
                "pystore %s from %s"
                % (getattr(pystore, "__version__", "?"), os.path.dirname(pystore.__file__))
            )
        except ImportError as e:
            console.print("[red]pystore does not import: %s[/red]" % e)
            return 1
        data = build_data(cfg)
        results: dict[str, list[dict[str, Any]]] = {c.name: [] for c in contenders}
        floors: list[dict[str, float]] = []
        errors: list[str] = []
        t_start = time.perf_counter()
        for rep in range(cfg["reps"]):
            order = contenders[rep % len(contenders) :] + contenders[: rep % len(contenders)]
            floors.append(floor_memcpy(top, cfg["floor_mb"]))
            for c in order:
                folder = os.path.join(top, "r%d-%s" % (rep, c.name.replace(".", "-")))
                t0 = time.perf_counter()
                try:
                    res = run_contender(c, folder, cfg, data)
                except Exception as e:  # noqa: BLE001 - one broken peer must not sink the run
                    errors.append("%s rep %d: %s: %s" % (c.name, rep + 1, type(e).__name__, e))
                    console.print("[red]  %s failed: %s[/red]" % (c.name, e))
                    res = {"error": str(e)}
                results[c.name].append(res)
                console.print(
                    "  rep %d/%d  %-26s %5.1f s" % (rep + 1, cfg["reps"], c.name, time.perf_counter() - t0),
                    highlight=False,
                )
                import shutil

                shutil.rmtree(folder, ignore_errors=True)
        elapsed = time.perf_counter() - t_start
        summary = summarize(results, floors)
        meta = {
            "date": when,
            "machine": m,
            "machine_line": benchlib.machine_line(m),
            "command": command,
            "config": cfg,
            "reps": cfg["reps"],
            "seconds": elapsed,
            "quick": a.quick,
            "contenders": {
                c.name: {"description": c.description, "durable": c.durable_note, "read": c.read_note}
                for c in contenders
            },
        }
        # pystore's sequential read path depends on the branch
        for c in contenders:
            if c.name in PYSTORE:
                meta["contenders"][c.name]["read"] = (
                    "get_message pages of 32"
                    if hasattr(benchlib.store_api()["MessageStore"], "get_message")
                    else "look_message_by_offset walk"
                )
        console.print()
        render(summary, meta, console)
        console.print("total %.0f s" % elapsed)
        for e in errors:
            console.print("[red]error: %s[/red]" % e)
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
        with open(a.json, "w") as f:
            json.dump(
                {"meta": meta, "summary": summary, "reps": results, "floors": floors, "errors": errors},
                f,
                indent=1,
                default=str,
            )
        console.print("JSON: %s" % a.json)
        if a.markdown:
            with open(a.markdown, "w") as f:
                f.write("%s, `%s`, %s\n\n" % (when, command, benchlib.machine_line(m)))
                f.write(markdown(summary, meta))
            console.print("Markdown: %s" % a.markdown)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
