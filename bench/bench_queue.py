"""Consume-queue reads at scale (issue 4): 1 M messages of 128 B read back by ``get_message`` in pages of 32
and by ``pystore.tools.iter_consume_queue``; the filtered unit scan ``get_message`` runs in C over the
20-byte units; ``get_offset_in_queue_by_time`` on a 10 M-unit queue.

Targets (issue 4): ``get_message`` >= 3 M msg/s, unit scan >= 50 M units/s, time search <= 5 us.

Inputs are built before any timing (module fixtures); every benchmark checks what its last operation
returned against what was put (counts, an order-sensitive checksum, offsets), so a fast wrong read fails.
``bench_read.py`` covers the same calls on a 200 k store next to an ``mmap`` + ``struct`` baseline; this
file is the 1 M / 10 M scale and the issue-4 targets.

Run: ``PYTHONPATH=. python -m pytest -q -p no:cacheprovider bench/bench_queue.py --benchmark-only``
(``-m "not slow"`` skips the 10 M-unit store: a 1.1 GB commit log built in ~15 s).
"""

from __future__ import annotations

import bisect
import os
import random
import tempfile
import time
from types import SimpleNamespace

import benchlib
import pytest
from benchlib import TOPIC

API = benchlib.store_api()
MessageStore = API["MessageStore"]
Message = API["Message"]
MessageBatch = API["MessageBatch"]

N = 1_000_000                  # messages in the 1 M store
SIZE = 128
PAGE = 32
BIG = 10_000_000               # units in the time-search queue
LOOKUPS = 10_000               # time searches per timed operation
GROUP = "bench-group"
#: an index is not what these benchmarks read; without it the puts that build the inputs are faster and
#: the store holds no 420 MB index file
NO_INDEX = {"message_index_enable": False}


def _mean_rate(benchmark, per_op):
    stats = getattr(getattr(benchmark, "stats", None), "stats", None)
    return per_op / stats.mean if stats is not None and stats.mean > 0 else None


@pytest.fixture(scope="module")
def data():
    """1 M messages of 128 B in queue 0 (TagA on every 1000th, TagB on the rest), put in batches of 128."""
    from pystore import TagFilter  # noqa: F401 - fail early if the read API is missing

    bodies = benchlib.payloads(N, SIZE)
    tags = ["TagA" if i % 1000 == 0 else "TagB" for i in range(N)]
    msgs = [Message(TOPIC, b, tags=t) for b, t in zip(bodies, tags, strict=True)]
    rec = API["record_length"](msgs[1])
    with tempfile.TemporaryDirectory(prefix="pystore-bench-queue-") as d:
        size = benchlib.file_size_for(N * rec)
        store = benchlib.open_warm_store(os.path.join(d, "store"), size, **NO_INDEX)
        try:
            offsets = []
            for i in range(0, N, 128):
                r = store.put_messages(MessageBatch(msgs[i:i + 128]))
                assert r.is_ok(), r
                a = r.append_message_result
                offsets.extend(a.wrote_offset + j * rec for j in range(a.msg_num))
            del msgs
            # write back what the puts left dirty now, not during the timed reads
            store.flush()
            os.sync()
            assert store.get_max_offset_in_queue(TOPIC, 0) == N
            folder = os.path.join(store.root, "consumequeue", TOPIC, "0")
            yield SimpleNamespace(store=store, bodies=bodies, offsets=offsets, rec=rec, folder=folder,
                                  checksum=benchlib.bodies_checksum(bodies))
        finally:
            store.destroy()


# -----------------------------------------------------------------------------------------------------------
# get_message
# -----------------------------------------------------------------------------------------------------------


def test_get_message_pages_of_32(benchmark, data, record):
    """One operation: the whole 1 M queue through ``get_message`` in pages of 32 (the messages decoded and
    handed over; bodies not copied out). Checked: every queue offset once, in order, at its commit-log
    offset; then the bodies of a sample of pages."""
    from pystore import GetMessageStatus

    get = data.store.get_message
    found = GetMessageStatus.FOUND

    def read() -> tuple[int, int, int]:
        count = off = 0
        offset_sum = 0
        while off < N:
            r = get(GROUP, TOPIC, 0, off, PAGE)
            if r.status is not found:
                raise AssertionError("get_message at %d: %r" % (off, r))
            ms = r.messages
            count += len(ms)
            offset_sum += ms[-1].commit_log_offset
            off = r.next_begin_offset
        return count, off, offset_sum

    benchmark.group = "queue read 1M"
    count, end, offset_sum = benchmark.pedantic(read, rounds=5, warmup_rounds=1)
    assert count == N and end == N
    assert offset_sum == sum(data.offsets[i] for i in range(PAGE - 1, N, PAGE))
    rng = random.Random(3)
    for off in (rng.randrange(N) for _ in range(200)):
        r = get(GROUP, TOPIC, 0, off, PAGE)
        assert [m.body for m in r.messages] == data.bodies[off:off + len(r.messages)]
    record("get_message_pages_32_1m", N, N * SIZE, target_msgs_per_s=3e6,
           msgs_per_s_mean=_mean_rate(benchmark, N))


def test_get_message_pages_of_32_with_bodies(benchmark, data, record):
    """One operation: the same pages, every body copied out (what a consumer does); checked: the bodies'
    order-sensitive CRC equals the CRC of the bodies put."""
    get = data.store.get_message

    def read() -> list[bytes]:
        out: list[bytes] = []
        off = 0
        while off < N:
            r = get(GROUP, TOPIC, 0, off, PAGE)
            out += [m.body for m in r.messages]
            off = r.next_begin_offset
        return out

    benchmark.group = "queue read 1M"
    got = benchmark.pedantic(read, rounds=3, warmup_rounds=1)
    assert len(got) == N and benchlib.bodies_checksum(got) == data.checksum
    record("get_message_pages_32_bodies_1m", N, N * SIZE)


# -----------------------------------------------------------------------------------------------------------
# unit scans
# -----------------------------------------------------------------------------------------------------------


def test_iter_consume_queue(benchmark, data, record):
    """One operation: every unit of the 1 M queue through ``pystore.tools.iter_consume_queue`` (a Python
    tuple per unit). Checked: count, and each unit's offset and size against the puts."""
    from pystore.tools import iter_consume_queue

    folder = data.folder

    def scan() -> tuple[int, int, int]:
        n = phy_sum = size_sum = 0
        for phy, size, _tags in iter_consume_queue(folder):
            n += 1
            phy_sum += phy
            size_sum += size
        return n, phy_sum, size_sum

    benchmark.group = "unit scan 1M"
    n, phy_sum, size_sum = benchmark.pedantic(scan, rounds=5, warmup_rounds=1)
    assert n == N and phy_sum == sum(data.offsets) and size_sum == N * data.rec
    record("iter_consume_queue_1m", N, units_per_s=_mean_rate(benchmark, N))


def test_filtered_unit_scan(benchmark, data, record):
    """One operation: the whole 1 M queue through ``get_message(..., TagFilter("TagA"))``: the units are
    scanned in C against the tags hash (800 units a call, RocketMQ's 16 000-byte window) and only every
    1000th message is read from the commit log. Checked: the 1000 TagA messages, in order, and that the
    scan covered every unit."""
    from pystore import TagFilter

    get = data.store.get_message
    flt = TagFilter("TagA")

    def scan() -> tuple[list[int], int]:
        off = 0
        found: list[int] = []
        while off < N:
            r = get(GROUP, TOPIC, 0, off, PAGE, flt)
            found += [m.queue_offset for m in r.messages]
            off = r.next_begin_offset
        return found, off

    benchmark.group = "unit scan 1M"
    found, end = benchmark.pedantic(scan, rounds=5, warmup_rounds=1)
    assert end == N and found == list(range(0, N, 1000))
    record("filtered_unit_scan_1m", N, units_per_s=_mean_rate(benchmark, N), target_units_per_s=50e6)


# -----------------------------------------------------------------------------------------------------------
# time search on a 10 M-unit queue
# -----------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def big():
    """10 M messages of 8 B in one queue (batches of 1000: one store time per batch, as the put lock takes
    it), with the first queue offset and the store time of every batch."""
    body = Message(TOPIC, b"\0" * 8)
    batch = MessageBatch([body] * 1000)
    rec = API["record_length"](body)
    with tempfile.TemporaryDirectory(prefix="pystore-bench-queue-big-") as d:
        store = benchlib.open_warm_store(os.path.join(d, "store"), benchlib.file_size_for(BIG * rec // 2),
                                         warm=False, **NO_INDEX)
        try:
            firsts, times = [], []
            for _ in range(BIG // 1000):
                r = store.put_messages(batch)
                assert r.is_ok(), r
                a = r.append_message_result
                firsts.append(a.logics_offset)
                times.append(a.store_timestamp)
            assert store.get_max_offset_in_queue(TOPIC, 0) == BIG
            yield SimpleNamespace(store=store, firsts=firsts, times=times)
        finally:
            store.destroy()


def _expected_lower(big, t: int) -> int:
    """The first queue offset stored at or after ``t`` (batches share one store time)."""
    k = bisect.bisect_left(big.times, t)
    return BIG if k == len(big.times) else big.firsts[k]


@pytest.mark.slow
def test_get_offset_in_queue_by_time_10m(benchmark, big, record):
    """One operation: 10 000 ``get_offset_in_queue_by_time`` (``lower``) at random times across the queue's
    span, each checked against the store times of the puts."""
    rng = random.Random(11)
    lo, hi = big.times[0] - 5, big.times[-1] + 5
    times = [rng.randint(lo, hi) for _ in range(LOOKUPS)]
    find = big.store.get_offset_in_queue_by_time

    def run(times: list[int] = times) -> list[int]:
        return [find(TOPIC, 0, t) for t in times]

    benchmark.group = "time search 10M"
    got = benchmark.pedantic(run, rounds=10, warmup_rounds=1)
    assert got == [_expected_lower(big, t) for t in times]
    lat = []
    for t in times[:2000]:
        t0 = time.perf_counter_ns()
        find(TOPIC, 0, t)
        lat.append(time.perf_counter_ns() - t0)
    p = benchlib.percentiles(lat)
    stats = getattr(benchmark.stats, "stats", None)         # none with --benchmark-disable (a smoke run)
    record("get_offset_in_queue_by_time_10m", LOOKUPS,
           us_per_search=stats.mean / LOOKUPS * 1e6 if stats is not None else None,
           p50_ns=p["p50"], p99_ns=p["p99"], target_us=5)
