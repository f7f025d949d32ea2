"""Put path: ``put_message`` / ``put_messages`` (ASYNC_FLUSH and SYNC_FLUSH), against the same run's
pure-Python ``mmap`` + ``struct`` baseline (``benchlib.MmapAppender``) and a write+fdatasync floor.

Labels say what is timed:
* ``prebuilt``: the ``Message``/``MessageBatch`` is built once at module level and put again and again, so
  the figure is the store's (a ``Message`` pre-encodes topic, properties and hosts and caches its body CRC);
* ``construct``: a new ``Message`` (or 32 of them and a ``MessageBatch``) is built for every put, as a
  caller holding plain ``bytes`` would;
* ``warm`` (default): the commit-log file is created and pre-faulted before timing
  (``warm_mapped_file_enable``, the allocate service idle: "files pre-created"); ``cold``: created
  (fallocated) but never touched, so the first write to every page takes a page fault.

Every benchmark checks what it measured: all results ``PUT_OK``, the topic-queue table counts every put,
a CRC-checked scan of the commit log finds exactly that many records ending at the max offset, and the
last record reads back with the body that was put.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import benchlib
import pytest
from benchlib import MIB, TOPIC, pedantic_calls

API = benchlib.store_api()
Message = API["Message"]
MessageBatch = API["MessageBatch"]
SYNC_FLUSH = API["FlushDiskType"].SYNC_FLUSH

BODY128 = benchlib.payloads(1, 128)[0]
MSG128 = Message(TOPIC, BODY128)  # prebuilt: encoded once, CRC cached after the first put
BATCH_BODIES = {(n, size): benchlib.payloads(n, size) for n in (32, 128) for size in (128, 1024)}
BATCHES = {k: MessageBatch([Message(TOPIC, b) for b in v]) for k, v in BATCH_BODIES.items()}
RECORD = API["record_length"](MSG128)  # bytes of one stored 128 B message on TOPIC
RECORD_KEYED = API["record_length"](Message(TOPIC, BODY128, keys="k0000000"))  # the same with one key
PCT_CALLS = 200_000  # individually timed puts for p50/p99
# (rounds, iterations) per batch shape: ~200 MB written, a fraction of a second each
BATCH_PLAN = {(32, 128): (100, 300), (128, 128): (100, 80), (32, 1024): (100, 60), (128, 1024): (50, 30)}


def _record_size(n: int, size: int) -> int:
    return n * (RECORD - 128 + size)


def check_store(store: object, expected: int | None, last_body: bytes, at_least: int = 1) -> int:
    """The store holds ``expected`` messages on TOPIC (at least ``at_least`` when the call count is not
    known), every record passes its CRC, and the last one reads back as ``last_body``."""
    count = benchlib.queue_count(store)
    if expected is not None:
        assert count == expected, "queue table says %d messages, %d were put" % (count, expected)
    assert count >= at_least
    records, end = benchlib.scan_store(store)
    assert records == count + 1, "scan found %d records, expected %d + the warm-up" % (records, count)
    assert end == store.get_max_phy_offset()
    last = store.look_message_by_offset(end - (RECORD - 128 + len(last_body)))
    assert last is not None and last.body == last_body and last.topic == TOPIC
    assert last.queue_offset == count - 1
    return count


def _single_percentiles(fn, arg, n: int = PCT_CALLS) -> dict[str, float]:
    lat = benchlib.time_each(fn, [arg] * n, check=lambda r: r.is_ok())
    p = benchlib.percentiles(lat)
    return {
        "p50_ns": p["p50"],
        "p90_ns": p["p90"],
        "p99_ns": p["p99"],
        "p99.9_ns": p["p99.9"],
        "timer_overhead_ns": benchlib.timer_overhead_ns(),
        "pct_calls": len(lat),
    }


# -----------------------------------------------------------------------------------------------------------
# single puts, ASYNC_FLUSH
# -----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])
def test_put_single_128_prebuilt(benchmark, store_factory, record, warm):
    rounds, iters = 200, 1000
    store = store_factory((rounds + 1) * iters * RECORD + PCT_CALLS * RECORD, warm=warm)
    benchmark.group = "put single 128 B"
    r = benchmark.pedantic(
        store.put_message, args=(MSG128,), rounds=rounds, iterations=iters, warmup_rounds=1
    )
    assert r.is_ok() and r.append_message_result.wrote_bytes == RECORD
    pct = _single_percentiles(store.put_message, MSG128)
    calls = pedantic_calls(benchmark, rounds, iters, 1)
    check_store(store, None if calls is None else calls + pct["pct_calls"], BODY128)
    record("put_single_128_prebuilt" + ("" if warm else "_cold"), 1, 128, **pct)


KEYED_N = 200_000  # prebuilt keyed messages: one key each, all different
KEYED_CHUNK = 1000  # puts per timed operation


def _key(i: int, random_keys: bool = False) -> str:
    """The key of the ``i``-th keyed message: ``k0000000``... (neighbours' hashes differ by little, so their
    hash slots are neighbours), or 32 hex digits of a hash of ``i`` (as a ``UNIQ_KEY`` is: slots all over
    the table)."""
    return hashlib.md5(b"%d" % i).hexdigest() if random_keys else "k%07d" % i


def _keyed_messages(random_keys: bool = False) -> list[object]:
    return [Message(TOPIC, BODY128, keys=_key(i, random_keys)) for i in range(KEYED_N)]


def _put_each(put, msgs: list[object]) -> object:
    r = None
    for m in msgs:
        r = put(m)
    return r


class _Counted:
    """The chunks of keyed messages handed out, counted (how many keyed puts a run made)."""

    def __init__(self, chunks: Iterator[list[object]]) -> None:
        self.chunks, self.count = chunks, 0

    def next(self) -> list[object]:
        chunk = next(self.chunks)
        self.count += len(chunk)
        return chunk


def _keys_put(n: int, random_keys: bool = False) -> list[str]:
    """Keys of the first, middle and last of the ``n`` keyed messages put (all of them once ``n`` passes
    ``KEYED_N``; a smoke run with ``--benchmark-disable`` puts one chunk)."""
    n = min(n, KEYED_N)
    return [_key(i, random_keys) for i in sorted({0, n // 2, n - 1})]


def _check_keys_found(store: object, keys: list[str]) -> None:
    for k in keys:
        found = store.query_message(TOPIC, k, 4).messages
        assert any(m.keys == [k] and m.body == BODY128 for m in found), "key %s not found" % k


def test_put_single_128_prebuilt_keyed(benchmark, store_factory, record):
    """``test_put_single_128_prebuilt`` with 200 k prebuilt messages, each with its own key (``KEYS``), put
    one by one: every put also writes an index entry under the put lock. One operation: 1000 puts."""
    msgs = _keyed_messages()
    rounds = KEYED_N // KEYED_CHUNK
    store = store_factory((rounds + 2) * KEYED_CHUNK * RECORD_KEYED)
    chunks = itertools.cycle([msgs[i : i + KEYED_CHUNK] for i in range(0, KEYED_N, KEYED_CHUNK)])
    put = store.put_message
    benchmark.group = "put single 128 B"
    r = benchmark.pedantic(lambda: _put_each(put, next(chunks)), rounds=rounds, iterations=1, warmup_rounds=1)
    assert r.is_ok() and r.append_message_result.wrote_bytes == RECORD_KEYED
    calls = pedantic_calls(benchmark, rounds, 1, 1)
    assert calls is None or benchlib.queue_count(store) == calls * KEYED_CHUNK
    _check_keys_found(store, _keys_put(benchlib.queue_count(store)))
    record("put_single_128_prebuilt_keyed", KEYED_CHUNK, KEYED_CHUNK * 128)


@pytest.mark.parametrize("reference, random_keys", [("distinct", False), ("same", False), ("distinct", True)],
                         ids=["distinct", "same", "distinct-random-keys"])
def test_put_keyed_vs_unkeyed_paired(benchmark, store_factory, record, reference, random_keys):
    """One operation: 1000 single puts of prebuilt 128 B messages with one key each (200 k different
    messages in turn); before each round, untimed, 1000 single puts without keys into the same store:
    ``distinct``, of 200 k different prebuilt messages in turn as well (the two differ only by the key);
    ``same``, of one prebuilt message, whose object stays in the CPU caches. ``paired_ratio`` is the keyed
    rate over the unkeyed one. Keys ``k0000000``... fill the hash slot table a few neighbouring pages at a
    time (a new page takes a page fault); ``random-keys`` (32 hex digits, as a ``UNIQ_KEY``) hit a random
    slot of the 20 MB table on every put (a cache and TLB miss, pages faulted in early)."""
    msgs = _keyed_messages(random_keys)
    rounds = KEYED_N // KEYED_CHUNK
    store = store_factory((rounds + 2) * KEYED_CHUNK * (API["record_length"](msgs[0]) + RECORD))
    chunks = itertools.cycle([msgs[i : i + KEYED_CHUNK] for i in range(0, KEYED_N, KEYED_CHUNK)])
    if reference == "same":
        plain_chunks = itertools.repeat([MSG128] * KEYED_CHUNK)
    else:
        plain = [Message(TOPIC, BODY128) for _ in range(KEYED_N)]
        plain_chunks = itertools.cycle([plain[i : i + KEYED_CHUNK] for i in range(0, KEYED_N, KEYED_CHUNK)])
    put = store.put_message
    kw, ref = benchlib.paired(benchmark, lambda: _put_each(put, next(plain_chunks)), rounds)
    benchmark.group = "put single 128 B"
    keyed = _Counted(chunks)
    r = benchmark.pedantic(lambda: _put_each(put, keyed.next()), **kw)
    assert r.is_ok() and r.append_message_result.wrote_bytes == API["record_length"](msgs[0])
    _check_keys_found(store, _keys_put(keyed.count, random_keys))
    label = "put_keyed_vs_unkeyed_paired_" + reference + ("_random_keys" if random_keys else "")
    benchlib.record_paired(benchmark, record, label, KEYED_CHUNK, ref, KEYED_CHUNK)


def test_put_single_128_prebuilt_timed_flush(benchmark, store_factory, record):
    """The same, with ``flush_commit_log_timed=True``: the flush service sleeps its interval instead of
    being woken by puts (shows what the wake-ups cost on 2 cores)."""
    rounds, iters = 200, 1000
    store = store_factory((rounds + 1) * iters * RECORD + PCT_CALLS * RECORD, flush_commit_log_timed=True)
    benchmark.group = "put single 128 B"
    r = benchmark.pedantic(
        store.put_message, args=(MSG128,), rounds=rounds, iterations=iters, warmup_rounds=1
    )
    assert r.is_ok()
    pct = _single_percentiles(store.put_message, MSG128)
    calls = pedantic_calls(benchmark, rounds, iters, 1)
    check_store(store, None if calls is None else calls + pct["pct_calls"], BODY128)
    record("put_single_128_prebuilt_timed_flush", 1, 128, **pct)


def test_put_single_128_construct(benchmark, store_factory, record):
    rounds, iters = 100, 1000
    store = store_factory((rounds + 1) * iters * RECORD + PCT_CALLS * RECORD)
    put = store.put_message

    def put_new(body: bytes = BODY128) -> object:
        return put(Message(TOPIC, body))

    benchmark.group = "put single 128 B"
    r = benchmark.pedantic(put_new, rounds=rounds, iterations=iters, warmup_rounds=1)
    assert r.is_ok()
    lat = benchlib.time_each(
        lambda b: put(Message(TOPIC, b)), [BODY128] * PCT_CALLS, check=lambda r: r.is_ok()
    )
    p = benchlib.percentiles(lat)
    calls = pedantic_calls(benchmark, rounds, iters, 1)
    check_store(store, None if calls is None else calls + len(lat), BODY128)
    record("put_single_128_construct", 1, 128, p50_ns=p["p50"], p99_ns=p["p99"], **{"p99.9_ns": p["p99.9"]})


# -----------------------------------------------------------------------------------------------------------
# batches, ASYNC_FLUSH
# -----------------------------------------------------------------------------------------------------------


def _bench_prebuilt_batch(benchmark, store_factory, record, n: int, size: int, label: str, **store_opts) -> None:
    """``put_messages`` of the prebuilt batch of ``n`` x ``size`` B, checked on disk, recorded as ``label``."""
    rounds, iters = BATCH_PLAN[(n, size)]
    store = store_factory((rounds + 2) * iters * _record_size(n, size), **store_opts)
    benchmark.group = "put batch %d x %d B" % (n, size)
    r = benchmark.pedantic(
        store.put_messages, args=(BATCHES[(n, size)],), rounds=rounds, iterations=iters, warmup_rounds=1
    )
    assert r.is_ok() and r.append_message_result.msg_num == n
    calls = pedantic_calls(benchmark, rounds, iters, 1)
    check_store(store, None if calls is None else calls * n, BATCH_BODIES[(n, size)][-1], at_least=n)
    record(label, n, n * size, _record_size(n, size))   # GB/s: commit-log bytes written


@pytest.mark.parametrize("n,size", list(BATCH_PLAN), ids=["32x128B", "128x128B", "32x1KiB", "128x1KiB"])
def test_put_batch_prebuilt(benchmark, store_factory, record, n, size):
    _bench_prebuilt_batch(benchmark, store_factory, record, n, size, "put_batch_%dx%d_prebuilt" % (n, size))


def test_put_batch_32x128_prebuilt_cold(benchmark, store_factory, record):
    _bench_prebuilt_batch(benchmark, store_factory, record, 32, 128, "put_batch_32x128_prebuilt_cold", warm=False)


def test_put_batch_32x128_prebuilt_timed_flush(benchmark, store_factory, record):
    _bench_prebuilt_batch(benchmark, store_factory, record, 32, 128, "put_batch_32x128_prebuilt_timed_flush",
                          flush_commit_log_timed=True)


def test_put_batch_32x128_prebuilt_deferred_flush(benchmark, store_factory, record):
    """The same batches with the flush service asleep for the whole run (``flush_commit_log_timed=True``,
    ``flush_interval_commit_log`` 60 s): nothing is written back while timing, as for lmdb, sqlite and the
    mmap baseline without sync. What the put path costs alone; the default figure adds the write-back of
    ~1.8 GB/s of log (at 8 M msg/s), several times what this VM's disk absorbs (``floor_disk_write``)."""
    _bench_prebuilt_batch(benchmark, store_factory, record, 32, 128, "put_batch_32x128_prebuilt_deferred_flush",
                          flush_commit_log_timed=True, flush_interval_commit_log=60_000)


def test_put_batch_32x128_construct(benchmark, store_factory, record):
    n, size = 32, 128
    rounds, iters = 100, 50
    store = store_factory((rounds + 2) * iters * _record_size(n, size))
    bodies = BATCH_BODIES[(n, size)]
    put = store.put_messages

    def put_new() -> object:
        return put(MessageBatch([Message(TOPIC, b) for b in bodies]))

    benchmark.group = "put batch 32 x 128 B"
    r = benchmark.pedantic(put_new, rounds=rounds, iterations=iters, warmup_rounds=1)
    assert r.is_ok() and r.append_message_result.msg_num == n
    calls = pedantic_calls(benchmark, rounds, iters, 1)
    check_store(store, None if calls is None else calls * n, bodies[-1], at_least=n)
    record("put_batch_32x128_construct", n, n * size)


FROM_BODIES_POOL = 10_000      # distinct batches of 32 x 128 B (320 k bodies, 41 MB): no batch is hot in cache


def test_put_batch_32x128_from_bodies(benchmark, store_factory, record):
    """``put_messages(MessageBatch.from_bodies(TOPIC, bodies))`` over 10 000 distinct batches of fresh
    bodies, cycled: what a caller holding ``bytes`` gets, cache misses on its bodies included (the prebuilt
    figure puts one hot batch again and again)."""
    n, size = 32, 128
    rounds, iters = 100, 100
    store = store_factory((rounds + 2) * iters * _record_size(n, size))
    bodies = benchlib.payloads(FROM_BODIES_POOL * n, size)
    pool = [bodies[i:i + n] for i in range(0, len(bodies), n)]
    nxt = itertools.cycle(pool).__next__
    put = store.put_messages
    from_bodies = MessageBatch.from_bodies

    def put_fresh() -> object:
        return put(from_bodies(TOPIC, nxt()))

    benchmark.group = "put batch 32 x 128 B"
    r = benchmark.pedantic(put_fresh, rounds=rounds, iterations=iters, warmup_rounds=1)
    assert r.is_ok() and r.append_message_result.msg_num == n
    calls = pedantic_calls(benchmark, rounds, iters, 1)
    last = pool[(calls - 1) % len(pool)][-1] if calls is not None else pool[0][-1]
    check_store(store, None if calls is None else calls * n, last, at_least=n)
    record("put_batch_32x128_from_bodies", n, n * size)


# -----------------------------------------------------------------------------------------------------------
# durable puts, SYNC_FLUSH (group commit)
# -----------------------------------------------------------------------------------------------------------


def _sync_commitlog_files(store: object) -> None:
    """fdatasync every commit-log file: writes back the zeros the warm-up left dirty and turns the files'
    unwritten extents into written ones, so later flushes carry data only (no extent conversion)."""
    folder = os.path.join(store.root, "commitlog")
    for name in os.listdir(folder):
        fd = os.open(os.path.join(folder, name), os.O_RDONLY)
        try:
            os.fdatasync(fd)
        finally:
            os.close(fd)


@pytest.mark.parametrize("zeros_synced", [False, True], ids=["default", "zeros-synced"])
def test_put_sync_batch_32x128(benchmark, store_factory, record, zeros_synced):
    """SYNC_FLUSH ``put_messages`` of 32 x 128 B from one thread: each put returns once its batch is on disk.
    ``zeros-synced`` (diagnostic, not a pystore setting): the pre-faulted files are written back first."""
    n, size = 32, 128
    rounds, iters = 50, 20
    store = store_factory((rounds + 2) * iters * _record_size(n, size), flush_disk_type=SYNC_FLUSH)
    if zeros_synced:
        _sync_commitlog_files(store)
    benchmark.group = "durable 32 x 128 B"
    r = benchmark.pedantic(
        store.put_messages, args=(BATCHES[(n, size)],), rounds=rounds, iterations=iters, warmup_rounds=1
    )
    assert r.is_ok() and r.status == API["PutMessageStatus"].PUT_OK  # not FLUSH_DISK_TIMEOUT
    assert store._commitlog.queue.flushed_where >= r.next_offset  # durable when it returned
    calls = pedantic_calls(benchmark, rounds, iters, 1)
    check_store(store, None if calls is None else calls * n, BATCH_BODIES[(n, size)][-1], at_least=n)
    record("put_sync_batch_32x128" + ("_zeros_synced" if zeros_synced else ""), n, n * size)


def test_floor_write_fdatasync_32x128(benchmark, tmp_root, record):
    """Machine floor for durable batches: a plain file, one ``write`` of 32 length-prefixed 128 B records,
    then ``os.fdatasync``."""
    bodies = BATCH_BODIES[(32, 128)]
    chunk = b"".join(len(b).to_bytes(4, "big") + b for b in bodies)
    fd = os.open(os.path.join(tmp_root, "floor"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:

        def write_sync() -> int:
            w = os.write(fd, chunk)
            os.fdatasync(fd)
            return w

        benchmark.group = "durable 32 x 128 B"
        w = benchmark.pedantic(write_sync, rounds=50, iterations=20, warmup_rounds=1)
        assert w == len(chunk)
        calls = pedantic_calls(benchmark, 50, 20, 1)
        if calls is not None:
            assert os.fstat(fd).st_size == calls * len(chunk)
    finally:
        os.close(fd)
    record("floor_write_fdatasync_32x128", 32, 32 * 128)


DISK_FLOOR_BYTES = 256 * 1024 * 1024


def test_floor_disk_write(benchmark, tmp_root, record):
    """Machine floor for sustained appends: how fast this disk takes sequential data, 256 MiB written in
    1 MiB ``write`` calls and made durable by one ``fdatasync``. A commit log that must reach disk
    (ASYNC_FLUSH still flushes as it goes) cannot be appended faster than this for long."""
    chunk = os.urandom(1 << 20)
    path = os.path.join(tmp_root, "disk-floor")

    def write_all() -> int:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            n = 0
            while n < DISK_FLOOR_BYTES:
                n += os.write(fd, chunk)
            os.fdatasync(fd)
            return n
        finally:
            os.close(fd)
            os.unlink(path)

    benchmark.group = "machine floors"
    os.sync()                      # start from a clean page cache: earlier benchmarks' dirty pages
    n = benchmark.pedantic(write_all, rounds=3, iterations=1, warmup_rounds=0)
    assert n == DISK_FLOOR_BYTES
    record("floor_disk_write", 0, 0, DISK_FLOOR_BYTES)


def _run_threads(put, msg, threads: int, per: int) -> list[object]:
    """``threads`` threads each put ``msg`` ``per`` times (started together); the failed results."""
    failures: list[object] = []
    ok = API["PutMessageStatus"].PUT_OK
    barrier = threading.Barrier(threads)

    def worker() -> None:
        barrier.wait()
        for _ in range(per):
            r = put(msg)
            if r.status != ok:
                failures.append(r)

    ts = [threading.Thread(target=worker) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return failures


@pytest.mark.parametrize("threads", [1, 4, 16])
def test_group_commit_put_message(benchmark, store_factory, record, threads):
    """SYNC_FLUSH single puts from 1, 4 or 16 threads: one operation is 1024 durable puts spread over the
    threads; concurrent puts share one flush (group commit)."""
    total, rounds = 1024, 5
    per = total // threads
    store = store_factory((rounds + 2) * total * RECORD, flush_disk_type=SYNC_FLUSH)
    failures: list[object] = []

    def run() -> int:
        failures.extend(_run_threads(store.put_message, MSG128, threads, per))
        return threads * per

    benchmark.group = "group commit"
    done = benchmark.pedantic(run, rounds=rounds, warmup_rounds=1)
    assert done == total and not failures, failures[:3]
    calls = pedantic_calls(benchmark, rounds, 1, 1)
    check_store(store, None if calls is None else calls * total, BODY128)
    record("group_commit_%d_threads" % threads, total, total * 128, threads=threads)


def test_group_commit_async_put_message(benchmark, store_factory, record):
    """SYNC_FLUSH ``async_put_message`` from one thread, 16 futures in flight: one operation is 1024 durable
    puts submitted 16 at a time, each window awaited; the in-flight puts can share one flush."""
    total, window, rounds = 1024, 16, 5
    store = store_factory((rounds + 2) * total * RECORD, flush_disk_type=SYNC_FLUSH)
    aput = store.async_put_message
    ok = API["PutMessageStatus"].PUT_OK

    def run() -> int:
        done = 0
        for _ in range(total // window):
            futures = [aput(MSG128) for _ in range(window)]
            for f in futures:
                r = f.result()
                if r.status != ok:
                    raise AssertionError("async put: %r" % (r,))
                done += 1
        return done

    benchmark.group = "group commit"
    assert benchmark.pedantic(run, rounds=rounds, warmup_rounds=1) == total
    calls = pedantic_calls(benchmark, rounds, 1, 1)
    check_store(store, None if calls is None else calls * total, BODY128)
    record("group_commit_async_16_in_flight", total, total * 128)


# -----------------------------------------------------------------------------------------------------------
# paired ratios: this VM's fsync latency drifts by 2x within minutes, so a ratio of two benchmarks run a
# minute apart is noise. These benchmarks time their reference in the untimed ``setup`` of every round, so
# each round yields a ratio of two measurements taken back to back; the median over rounds is reported.
# -----------------------------------------------------------------------------------------------------------


DEEP = 48 * 1024 * 1024  # "deep": past the first ~30 MiB of the file, where large page-cache folios used to start


@pytest.mark.parametrize("depth", [0, DEEP], ids=["start", "deep"])
def test_durable_vs_floor_paired(benchmark, store_factory, record, depth):
    """One operation: 100 SYNC_FLUSH ``put_messages`` of 32 x 128 B; before each round, untimed, the floor:
    100 x (one ``write`` of the same 32 records + ``os.fdatasync``) on a plain file in the same folder.

    ``deep``: the same, after 48 MiB of durable batches of 128 x 128 B were put (untimed) into the same
    file. Where the kernel keeps a file's page cache in large folios (ext4 since Linux 6.16, XFS), a file
    mapped with read-ahead grows folios of up to 2 MiB past its first tens of MiB, and each flush then
    wrote a whole folio: this figure was 6-15 x below ``start`` before the commit log was written page by
    page under SYNC_FLUSH (``_warm.write_page_by_page``)."""
    n, size, k, rounds = 32, 128, 100, 11
    store = store_factory(depth + (rounds + 2) * k * _record_size(n, size), flush_disk_type=SYNC_FLUSH)
    fill = BATCHES[(128, size)]
    filled = 0
    while store.get_max_phy_offset() < depth:
        assert store.put_messages(fill).status == API["PutMessageStatus"].PUT_OK
        filled += 128
    batch = BATCHES[(n, size)]
    chunk = b"".join(len(b).to_bytes(4, "big") + b for b in BATCH_BODIES[(n, size)])
    fd = os.open(os.path.join(store.root, "floor"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    put = store.put_messages

    def floor() -> None:
        for _ in range(k):
            os.write(fd, chunk)
            os.fdatasync(fd)

    def durable() -> object:
        r = None
        for _ in range(k):
            r = put(batch)
        return r

    try:
        kw, ref = benchlib.paired(benchmark, floor, rounds)
        benchmark.group = "durable 32 x 128 B"
        r = benchmark.pedantic(durable, **kw)
        assert r.status == API["PutMessageStatus"].PUT_OK
        assert store._commitlog.queue.flushed_where >= r.next_offset
        assert len(store._commitlog.queue.files) == 1 and r.wrote_offset > depth  # timed in the same file
    finally:
        os.close(fd)
    calls = pedantic_calls(benchmark, rounds, 1, 1)
    check_store(store, None if calls is None else filled + calls * k * n, BATCH_BODIES[(n, size)][-1],
                at_least=filled + n)
    benchlib.record_paired(benchmark, record, "durable_vs_floor_paired" + ("_deep" if depth else ""), k * n, ref, k * n)


def test_group_commit_scaling_paired(benchmark, store_factory, record):
    """One operation: 1024 SYNC_FLUSH ``put_message`` from 16 threads (64 each); before each round, untimed,
    the same 1024 puts from one thread."""
    total, threads, rounds = 1024, 16, 5
    store = store_factory((2 * rounds + 4) * total * RECORD, flush_disk_type=SYNC_FLUSH)
    failures: list[object] = []

    def one() -> None:
        failures.extend(_run_threads(store.put_message, MSG128, 1, total))

    def many() -> int:
        failures.extend(_run_threads(store.put_message, MSG128, threads, total // threads))
        return total

    kw, ref = benchlib.paired(benchmark, one, rounds)
    benchmark.group = "group commit"
    assert benchmark.pedantic(many, **kw) == total and not failures, failures[:3]
    calls = pedantic_calls(benchmark, rounds, 1, 1)
    check_store(store, None if calls is None else 2 * calls * total, BODY128)
    benchlib.record_paired(benchmark, record, "group_commit_16_vs_1_paired", total, ref, total)


# -----------------------------------------------------------------------------------------------------------
# the afternoon baseline: mmap + struct, same payloads, same shapes
# -----------------------------------------------------------------------------------------------------------


@pytest.fixture
def appender(tmp_root):
    apps = []

    def make(nbytes: int) -> benchlib.MmapAppender:
        os.sync()
        a = benchlib.MmapAppender(
            os.path.join(tmp_root, "mmap-%d" % len(apps)), benchlib.file_size_for(nbytes)
        )
        apps.append(a)
        return a

    yield make
    for a in apps:
        a.close()


def _check_appender(app: benchlib.MmapAppender, expected: int | None, last_body: bytes) -> None:
    n = 0
    last = None
    for body in app.iter_records(verify=True):
        n += 1
        last = body
    if expected is not None:
        assert n == expected
    assert last == last_body


def test_baseline_single_128(benchmark, appender, record):
    rounds, iters = 200, 1000
    app = appender((rounds + 1) * iters * 144 + PCT_CALLS * 144)
    benchmark.group = "put single 128 B"
    pos = benchmark.pedantic(app.append, args=(BODY128,), rounds=rounds, iterations=iters, warmup_rounds=1)
    assert app.read(pos) == BODY128
    lat = benchlib.time_each(app.append, [BODY128] * PCT_CALLS)
    p = benchlib.percentiles(lat)
    calls = pedantic_calls(benchmark, rounds, iters, 1)
    _check_appender(app, None if calls is None else calls + len(lat), BODY128)
    record("baseline_single_128", 1, 128, p50_ns=p["p50"], p99_ns=p["p99"], **{"p99.9_ns": p["p99.9"]})


@pytest.mark.parametrize("n,size", list(BATCH_PLAN), ids=["32x128B", "128x128B", "32x1KiB", "128x1KiB"])
def test_baseline_batch(benchmark, appender, record, n, size):
    rounds, iters = BATCH_PLAN[(n, size)]
    bodies = BATCH_BODIES[(n, size)]
    app = appender((rounds + 2) * iters * n * (size + 16))
    benchmark.group = "put batch %d x %d B" % (n, size)
    first = benchmark.pedantic(
        app.append_batch, args=(bodies,), rounds=rounds, iterations=iters, warmup_rounds=1
    )
    assert app.read(first) == bodies[0]
    calls = pedantic_calls(benchmark, rounds, iters, 1)
    _check_appender(app, None if calls is None else calls * n, bodies[-1])
    record("baseline_batch_%dx%d" % (n, size), n, n * size)


# -----------------------------------------------------------------------------------------------------------
# bulk puts from columns: put_columns (one compiled call per call, no Python object per message)
# -----------------------------------------------------------------------------------------------------------

COLUMNS_N = 32_768         # 128 B bodies per put_columns call (4 MiB of payload)
COLUMNS_POOL = 8           # distinct columns, cycled: no call puts bodies still hot in cache from the last


def _columns(n: int, size: int, count: int = COLUMNS_POOL) -> list[tuple[object, object]]:
    """``count`` distinct bodies columns of ``n`` x ``size`` B as (uint8 values, int64 offsets) pairs."""
    import numpy as np

    rng = np.random.default_rng(20240601)
    offsets = np.arange(0, n * size + 1, size, dtype=np.int64)
    return [(rng.integers(0, 256, n * size, dtype=np.uint8), offsets) for _ in range(count)]


class _RunQueue:
    """The time this thread spent waiting for a CPU while runnable (Linux ``/proc/thread-self/schedstat``,
    second field, ns): on a shared machine a round's wall time is its own work plus the other processes'
    turns, and this says how much was the latter. ``wait()`` is 0 where the file does not exist."""

    def __init__(self) -> None:
        try:
            self.fd: int | None = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
        except OSError:
            self.fd = None

    def wait(self) -> float:
        if self.fd is None:
            return 0.0
        return int(os.pread(self.fd, 128, 0).split()[1]) / 1e9

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)


def _runq_pedantic(benchmark: Any, fn: Any, kw: dict[str, Any]) -> tuple[Any, list[float]]:
    """``benchmark.pedantic(fn, **kw)`` noting each call's run-queue wait (``_RunQueue``): the last result and
    the waits, call by call."""
    runq = _RunQueue()
    waits: list[float] = []

    def timed() -> object:
        w0 = runq.wait()
        r = fn()
        waits.append(runq.wait() - w0)
        return r

    try:
        return benchmark.pedantic(timed, **kw), waits
    finally:
        runq.close()


def _runq_figures(mine: list[float], waits: list[float], nbytes: float) -> dict[str, float]:
    """``runq_share`` (the part of the timed rounds spent waiting for a CPU) and ``gb_per_s_off_runq`` (the
    median round's rate with its wait taken out) of rounds ``mine`` (seconds) writing ``nbytes`` each."""
    waits = waits[-len(mine):]
    own = sorted(max(m_s - w, 1e-9) for m_s, w in zip(mine, waits, strict=True))
    return {"runq_share": sum(waits) / sum(mine), "gb_per_s_off_runq": nbytes / own[len(own) // 2] / 1e9}


def test_put_columns_128_prefaulted_paired(benchmark, store_factory, record):
    """One operation: ``put_columns`` of 32 768 bodies of 128 B (a numpy values/offsets pair, 8 distinct
    columns cycled) into a pre-faulted store; before each round, untimed, the same messages through
    ``put_messages(MessageBatch.from_bodies(...))`` in batches of 32 into the same store (the fastest put
    path before columns). ``paired_ratio``: columns over from_bodies, round by round; ``runq_share`` and
    ``gb_per_s_off_runq`` as ``test_put_columns_1k_prefaulted`` has them."""
    n, size, rounds = COLUMNS_N, 128, 12
    store = store_factory((rounds + 2) * 2 * n * RECORD)
    cols = _columns(n, size)
    lists = [[bytes(v[o[i]:o[i + 1]]) for i in range(n)] for v, o in cols[:2]]
    batches = [[b[i:i + 32] for i in range(0, n, 32)] for b in lists]
    turn = itertools.count()
    put, from_bodies = store.put_messages, MessageBatch.from_bodies

    def reference() -> None:
        for b in batches[next(turn) % 2]:
            put(from_bodies(TOPIC, b))

    kw, ref = benchlib.paired(benchmark, reference, rounds)
    put_columns, done = _cycling_put_columns(store, cols)
    benchmark.group = "put columns 128 B"
    r, waits = _runq_pedantic(benchmark, put_columns, kw)
    assert r.status.name == "PUT_OK" and r.count == n
    # every round put the reference's n messages too, in batches: the count checks both paths
    check_store(store, len(done) * n + len(ref) * n, bytes(done[-1][0][-size:]), at_least=n)
    benchlib.record_paired(benchmark, record, "put_columns_128_prefaulted_paired", n, ref, n)
    benchmark.extra_info.update(_runq_figures(list(benchmark.stats.stats.data), waits, n * RECORD))


def _cycling_put_columns(store: Any, cols: list[Any]) -> tuple[Any, list[Any]]:
    """A ``put_columns`` of the next of ``cols`` (cycled) per call, and the list of the columns it put."""
    nxt = itertools.cycle(cols).__next__
    done: list[Any] = []

    def put_columns() -> object:
        c = nxt()
        done.append(c)
        return store.put_columns(TOPIC, c)

    return put_columns, done


def test_put_columns_1k_prefaulted(benchmark, store_factory, record):
    """One operation: ``put_columns`` of 4096 bodies of 1 KiB (a numpy pair, 8 distinct columns cycled) into a
    pre-faulted store (no file rolls: the store's one file holds every round); ``gb_per_s`` counts record
    bytes (header, body, topic). Before each round, untimed, the floor: one memcpy of as many bytes (8 distinct
    sources cycled) into the next part of a pre-faulted buffer. ``paired_ratio``: the store's rate over the
    floor's, round by round. ``runq_share``: the part of the timed rounds this thread waited for a CPU held by
    others (``gb_per_s_off_runq``: the rate with those waits taken out, the figure a quiet machine would give)."""
    import numpy as np

    n, size, rounds = 4096, 1024, 40
    rec = RECORD - 128 + size
    nbytes = n * rec
    store = store_factory((rounds + 2) * nbytes)
    cols = _columns(n, size)
    put_columns, done = _cycling_put_columns(store, cols)
    rng = np.random.default_rng(11)
    srcs = [rng.integers(0, 256, nbytes, dtype=np.uint8) for _ in range(COLUMNS_POOL)]
    dst = np.ones((rounds + 2) * nbytes, dtype=np.uint8)       # written once: every page faulted in
    turn = itertools.count()

    def floor() -> None:
        i = next(turn)
        dst[i * nbytes:(i + 1) * nbytes] = srcs[i % COLUMNS_POOL]

    kw, ref = benchlib.paired(benchmark, floor, rounds)
    benchmark.group = "put columns 1 KiB"
    r, waits = _runq_pedantic(benchmark, put_columns, kw)
    assert r.status.name == "PUT_OK" and r.count == n
    assert len(store._commitlog.queue.files) == 1, "the store rolled a file: rounds not comparable"
    check_store(store, len(done) * n, bytes(done[-1][0][-size:]), at_least=n)
    mine = list(benchmark.stats.stats.data)
    ratios = sorted(r_s / m_s for m_s, r_s in zip(mine, ref[-len(mine):], strict=True))
    record("put_columns_1k_prefaulted", n, n * size, bytes_per_op=nbytes,
           paired_ratio=ratios[len(ratios) // 2], paired_ratios=ratios,
           floor_gb_per_s=nbytes / sorted(ref)[len(ref) // 2] / 1e9, **_runq_figures(mine, waits, nbytes))


#: MiB of records the fresh-store benchmark writes per round (1024 for the issue's "first 1 GiB"; the default is
#: smaller, as each round writes it twice to a disk other work shares)
FRESH_MB = int(os.environ.get("PYSTORE_BENCH_FRESH_MB", "128"))


def _cold_memcpy(path: str, src: object, nbytes: int) -> None:
    """The cold-write floor: one copy of ``nbytes`` into a fresh sparse shared mapping of that size (each page
    faulted in by the copy), unmapped and deleted after."""
    import mmap

    import numpy as np

    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.ftruncate(fd, nbytes)
        mm = mmap.mmap(fd, nbytes)
        dst = np.frombuffer(mm, dtype=np.uint8)
        dst[:] = src
        assert dst[-1] == src[-1]
        del dst
        mm.close()
    finally:
        os.close(fd)
        os.unlink(path)


def test_put_columns_fresh_vs_cold_floor_paired(benchmark, tmp_root, record):
    """One operation: ``put_columns`` of FRESH_MB MiB of 128 B records (one call) into a store opened just
    before (untimed), its commit-log files created but never written (``warm=False``): page faults included.
    Before each round, untimed, the floor: one copy of the same number of bytes into a fresh sparse file
    mapping. ``paired_ratio``: the store's record bytes per second over the floor's, round by round.
    ``PYSTORE_BENCH_FRESH_MB=1024`` for the first 1 GiB."""
    import numpy as np

    n = FRESH_MB * MIB // RECORD
    nbytes = n * RECORD
    rounds = 3
    rng = np.random.default_rng(7)
    values = rng.integers(0, 256, n * 128, dtype=np.uint8)
    offsets = np.arange(0, n * 128 + 1, 128, dtype=np.int64)
    src = rng.integers(0, 256, nbytes, dtype=np.uint8)
    stores: list[object] = []
    ref: list[float] = []
    turn = itertools.count()

    def setup() -> tuple[tuple[object, ...], dict[str, object]]:
        for s in stores:
            s.destroy()
        stores.clear()
        os.sync()
        s = benchlib.open_warm_store(os.path.join(tmp_root, "fresh-%d" % next(turn)),
                                     benchlib.file_size_for(nbytes + MIB), warm=False)
        stores.append(s)
        t0 = time.perf_counter()
        _cold_memcpy(os.path.join(tmp_root, "floor"), src, nbytes)
        ref.append(time.perf_counter() - t0)
        return (s,), {}

    def put(s: object) -> object:
        return s.put_columns(TOPIC, (values, offsets))

    benchmark.group = "put columns fresh store"
    r = benchmark.pedantic(put, setup=setup, rounds=rounds, warmup_rounds=0)
    assert r.status.name == "PUT_OK" and r.count == n
    check_store(stores[-1], n, bytes(values[-128:]))
    mine = list(benchmark.stats.stats.data)
    ratios = sorted(r_s / m_s for m_s, r_s in zip(mine, ref[-len(mine):], strict=True))
    record("put_columns_fresh_%dMiB_vs_cold_floor" % FRESH_MB, n, n * 128, bytes_per_op=nbytes,
           paired_ratio=ratios[len(ratios) // 2], paired_ratios=ratios,
           floor_gb_per_s=nbytes / sorted(ref)[len(ref) // 2] / 1e9)
    for s in stores:
        s.destroy()
