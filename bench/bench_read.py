"""Reads: ``look_message_by_offset`` (random and sequential), ``tools.iter_commitlog``, and the consume-queue
and index reads of docs/api.md (``get_message``, ``get_columns``, ``get_offset_in_queue_by_time``, ``query_message``),
against the same run's ``mmap`` + ``struct`` reader (and, for ``get_columns``, a memcpy of the records it reads).

One module-level store holds ``N`` messages of 128 B, each with a key ``k%07d`` (so ``query_message`` has
something to find), put before any timing. A benchmark whose API is not on this branch yet is skipped with
the reason, never faked: ``git merge main`` brings it in.

Each benchmark's operation reads many messages (a page of 32 for ``get_message``, 1000 random offsets for
``look_message_by_offset`` ...) and returns what it read; the last operation's output is checked against the
bodies that were put (count and an order-sensitive CRC of the bodies), so a fast wrong read fails.
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

N = 200_000                     # messages in the read store
SIZE = 128
LOOKUPS = 1000                  # random reads per timed operation
PCT_CALLS = 200_000             # individually timed calls for p50/p99
GROUP = "bench-group"


def _needs(name: str) -> None:
    if not hasattr(MessageStore, name):
        pytest.skip("MessageStore.%s is not on this branch yet (consume-queue/index layer); "
                    "`git merge main` brings it in" % name)


def _wait_dispatched(store: object, timeout: float = 60) -> None:
    """When dispatch is asynchronous, wait until the consume queues and index caught up with the log."""
    behind = getattr(store, "dispatch_behind_bytes", None)
    if behind is None:
        return
    deadline = time.monotonic() + timeout
    while behind() > 0:
        if time.monotonic() > deadline:
            raise TimeoutError("dispatch still %d bytes behind after %.0f s" % (behind(), timeout))
        time.sleep(0.01)


@pytest.fixture(scope="module")
def data():
    """The read store and what was put into it (offsets, bodies, keys, store timestamps)."""
    bodies = benchlib.payloads(N, SIZE)
    keys = ["k%07d" % i for i in range(N)]
    msgs = [Message(TOPIC, b, keys=k) for b, k in zip(bodies, keys, strict=True)]
    rec = API["record_length"](msgs[0])
    with tempfile.TemporaryDirectory(prefix="pystore-bench-read-") as d:
        store = benchlib.open_warm_store(os.path.join(d, "store"), benchlib.file_size_for(N * rec))
        try:
            offsets = []
            for i in range(0, N, 128):
                r = store.put_messages(MessageBatch(msgs[i:i + 128]))
                assert r.is_ok()
                a = r.append_message_result
                offsets.extend(a.wrote_offset + j * rec for j in range(a.msg_num))
            assert len(offsets) == N and store.get_max_phy_offset() == offsets[-1] + rec
            _wait_dispatched(store)
            # write back what the puts left dirty (log, queue, index) now, not during the timed reads
            store.flush()
            os.sync()
            ts = [store.look_message_by_offset(o).store_timestamp for o in offsets]
            app = benchlib.MmapAppender(os.path.join(d, "mmap"), benchlib.file_size_for(N * (SIZE + 16)))
            positions = [app.append(b) for b in bodies]
            rng = random.Random(7)
            yield SimpleNamespace(store=store, offsets=offsets, bodies=bodies, keys=keys, ts=ts, rec=rec,
                                  app=app, positions=positions, rng=rng)
            app.close()
        finally:
            store.destroy()


def _random_indices(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(N) for _ in range(n)]


# -----------------------------------------------------------------------------------------------------------
# look_message_by_offset
# -----------------------------------------------------------------------------------------------------------


def test_look_message_by_offset_random(benchmark, data, record):
    """One operation: 1000 ``look_message_by_offset`` at random offsets, each message's body taken."""
    idx = _random_indices(data.rng, LOOKUPS)
    offs = [data.offsets[i] for i in idx]
    look = data.store.look_message_by_offset

    def read(offs: list[int] = offs) -> list[bytes]:
        return [look(o).body for o in offs]

    benchmark.group = "random read"
    got = benchmark.pedantic(read, rounds=50, warmup_rounds=2)
    assert len(got) == LOOKUPS
    assert benchlib.bodies_checksum(got) == benchlib.bodies_checksum(data.bodies[i] for i in idx)

    pidx = _random_indices(data.rng, PCT_CALLS)
    poffs = [data.offsets[i] for i in pidx]
    lat = benchlib.time_each(look, poffs, check=lambda e: e is not None)
    for i in pidx[:: max(1, PCT_CALLS // 1000)]:
        assert look(data.offsets[i]).body == data.bodies[i]
    p = benchlib.percentiles(lat)
    record("look_message_by_offset_random", LOOKUPS, LOOKUPS * SIZE, p50_ns=p["p50"], p99_ns=p["p99"],
           **{"p99.9_ns": p["p99.9"], "timer_overhead_ns": benchlib.timer_overhead_ns()})


def test_baseline_read_random(benchmark, data, record):
    """The same random reads through the ``mmap`` + ``struct`` appender (header unpack + slice)."""
    idx = _random_indices(data.rng, LOOKUPS)
    pos = [data.positions[i] for i in idx]
    read_one = data.app.read

    def read(pos: list[int] = pos) -> list[bytes]:
        return [read_one(p) for p in pos]

    benchmark.group = "random read"
    got = benchmark.pedantic(read, rounds=50, warmup_rounds=2)
    assert benchlib.bodies_checksum(got) == benchlib.bodies_checksum(data.bodies[i] for i in idx)
    pidx = _random_indices(data.rng, PCT_CALLS)
    lat = benchlib.time_each(read_one, [data.positions[i] for i in pidx])
    p = benchlib.percentiles(lat)
    record("baseline_read_random", LOOKUPS, LOOKUPS * SIZE, p50_ns=p["p50"], p99_ns=p["p99"])


def test_look_message_by_offset_sequential(benchmark, data, record):
    """One operation: every message in offset order through ``look_message_by_offset`` (offset += size)."""
    look = data.store.look_message_by_offset
    start = data.offsets[0]
    end = data.offsets[-1] + data.rec

    def read() -> list[bytes]:
        out = []
        add = out.append
        o = start
        while o < end:
            m = look(o)
            add(m.body)
            o += m.store_size
        return out

    benchmark.group = "sequential read"
    got = benchmark.pedantic(read, rounds=3, warmup_rounds=1)
    assert len(got) == N and benchlib.bodies_checksum(got) == benchlib.bodies_checksum(data.bodies)
    record("look_message_by_offset_sequential", N, N * SIZE)


def test_iter_commitlog_sequential(benchmark, data, record):
    """One operation: ``pystore.tools.iter_commitlog`` over the whole log (CRC verified), bodies taken."""
    from pystore.tools import iter_commitlog

    folder = os.path.join(data.store.root, "commitlog")

    def read() -> list[bytes]:
        return [m.body for m in iter_commitlog(folder, verify_crc=True) if m.topic == TOPIC]

    benchmark.group = "sequential read"
    got = benchmark.pedantic(read, rounds=3, warmup_rounds=1)
    assert len(got) == N and benchlib.bodies_checksum(got) == benchlib.bodies_checksum(data.bodies)
    record("iter_commitlog_sequential", N, N * SIZE)


def test_baseline_read_sequential(benchmark, data, record):
    app = data.app

    def read() -> list[bytes]:
        return list(app.iter_records())

    benchmark.group = "sequential read"
    got = benchmark.pedantic(read, rounds=3, warmup_rounds=1)
    assert len(got) == N and benchlib.bodies_checksum(got) == benchlib.bodies_checksum(data.bodies)
    record("baseline_read_sequential", N, N * SIZE)


# -----------------------------------------------------------------------------------------------------------
# consume queue and index (docs/api.md signatures; skipped until they exist)
# -----------------------------------------------------------------------------------------------------------


def test_get_message_sequential(benchmark, data, record):
    """One operation: the whole queue through ``get_message`` in pages of 32, as a consumer takes it: each
    page's bodies made into ``bytes``, then dropped with the page. The headline read figure (issue 6).

    Checked: every round returns the count and the offset reached; then one more run of the same function
    (untimed) hands its bodies to a list, whose order-sensitive CRC must equal that of the bodies put. The
    check stays out of the timed rounds because any full check costs about as much as the read (hashing or
    comparing 25 MB of bodies in Python: about 65 ns a message, measured) and keeping every body measures
    CPython's allocator instead: that is ``get_message_sequential_retained`` and its floor below."""
    _needs("get_message")
    from pystore import GetMessageStatus

    get = data.store.get_message
    found = GetMessageStatus.FOUND

    def read(keep: list[bytes] | None = None) -> tuple[int, int]:
        count = off = 0
        while off < N:
            r = get(GROUP, TOPIC, 0, off, 32)
            if r.status != found:
                raise AssertionError("get_message at %d: %r" % (off, r.status))
            page = [m.body for m in r.messages]
            if keep is not None:
                keep += page
            count += len(page)
            off = r.next_begin_offset
        return count, off

    benchmark.group = "sequential read"
    count, end = benchmark.pedantic(read, rounds=5, warmup_rounds=1)
    assert count == N and end == N
    got: list[bytes] = []
    assert read(got) == (N, N)
    assert len(got) == N and benchlib.bodies_checksum(got) == benchlib.bodies_checksum(data.bodies)
    record("get_message_sequential", N, N * SIZE)


def test_get_message_crc_check_paired(benchmark, data, record):
    """The price of ``check_crc_on_read`` (each served record's body CRC, on by default): the whole queue
    read as ``get_message_sequential`` reads it with the check on (timed) and, in each round's setup just
    before, with it off; ``paired_ratio`` is the median of (rate with the check / rate without), the issue's
    target being >= 0.85. The record-against-unit checks (size, place, topic, queue, offset) run in both."""
    _needs("get_message")
    from pystore import GetMessageStatus

    store = data.store
    limits = getattr(store, "_limits", None)
    if limits is None or not hasattr(limits, "check_crc"):
        pytest.skip("check_crc_on_read is not on this branch yet")
    get = store.get_message
    found = GetMessageStatus.FOUND

    def read() -> int:
        count = off = 0
        while off < N:
            r = get(GROUP, TOPIC, 0, off, 32)
            if r.status != found:
                raise AssertionError("get_message at %d: %r" % (off, r.status))
            count += len([m.body for m in r.messages])
            off = r.next_begin_offset
        return count

    def unchecked() -> int:
        limits.check_crc = False
        try:
            return read()
        finally:
            limits.check_crc = True

    def checked() -> int:
        assert limits.check_crc
        return read()

    benchmark.group = "sequential read"
    kw, ref = benchlib.paired(benchmark, unchecked, 7)
    assert benchmark.pedantic(checked, **kw) == N
    benchlib.record_paired(benchmark, record, "get_message_crc_check_paired", N, ref, N)


PAGE = 32_768                   # messages a get_columns page asks for


def test_get_columns_sequential_paired(benchmark, data, record):
    """One operation: the whole queue through ``get_columns`` in pages of 32 k messages (every column decoded,
    ``check_crc_on_read`` on as by default). Paired with a floor run in each round's setup: the same pages'
    record bytes copied out of the commit log into fresh numpy arrays (one memcpy of what the decoder reads,
    allocation included); ``paired_ratio`` is the median of (get_columns rate / floor rate).

    Checked: the count and the offset reached every round; then one more (untimed) run's body column, whose
    order-sensitive CRC must equal that of the bodies put."""
    _needs("get_columns")
    pytest.importorskip("pyarrow")
    np = pytest.importorskip("numpy")
    import mmap

    store = data.store
    path = os.path.join(store.config.commit_log_paths()[0], "%020d" % 0)
    with open(path, "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    records = np.frombuffer(mm, dtype=np.uint8)
    bounds = [data.offsets[i] for i in range(0, N, PAGE)] + [data.offsets[-1] + data.rec]

    def floor() -> int:
        n = 0
        for a, b in zip(bounds, bounds[1:]):
            n += len(np.array(records[a:b]))
        return n

    benchmark.group = "sequential read"
    kw, ref = benchlib.paired(benchmark, floor, 7)
    count, end = benchmark.pedantic(lambda: _read_pages(store, None), **kw)
    assert count == N and end == N
    got: list[bytes] = []
    offs: list[int] = []
    assert _read_pages(store, None, got, offs) == (N, N)
    assert benchlib.bodies_checksum(got) == benchlib.bodies_checksum(data.bodies)
    benchlib.record_paired(benchmark, record, "get_columns_sequential (vs memcpy of its records)", N, ref, N)
    records = None          # the view goes before its mapping
    mm.close()


BODY_COLUMNS = ["queue_offset", "body"]      # what a reader of bodies asks get_columns for


def _read_pages(store, columns: list[str] | None, keep: list[bytes] | None = None,
                offs: list[int] | None = None) -> tuple[int, int]:
    """The whole queue through ``get_columns(columns=...)`` in pages of PAGE: (messages read, offset reached);
    with ``keep`` and ``offs``, the bodies and queue offsets go there."""
    from pystore import GetMessageStatus

    found = GetMessageStatus.FOUND
    count = off = 0
    while off < N:
        status, off, rb = store.get_columns(GROUP, TOPIC, 0, off, PAGE, columns=columns)
        if status != found:
            raise AssertionError("get_columns at %d: %r" % (off, status))
        count += rb.num_rows
        if keep is not None and offs is not None:
            keep += rb.column("body").to_pylist()
            offs += rb.column("queue_offset").to_pylist()
    return count, off


def _check_body_pages(data) -> None:
    """One more (untimed) read of the bodies: their order-sensitive CRC equals that of the bodies put, and the
    queue offsets run from 0 to N - 1."""
    got: list[bytes] = []
    offs: list[int] = []
    assert _read_pages(data.store, BODY_COLUMNS, got, offs) == (N, N)
    assert offs == list(range(N))
    assert benchlib.bodies_checksum(got) == benchlib.bodies_checksum(data.bodies)


def test_get_columns_body_sequential_paired(benchmark, data, record):
    """One operation: the whole queue through ``get_columns(columns=["queue_offset", "body"])`` in pages of 32 k
    messages (a projection: only those two columns built; every record still checked, its body CRC
    included). Paired with the all-columns read of the same pages in each round's setup; ``paired_ratio`` is
    the median of (projected rate / all-columns rate).

    Checked: the count, the offset reached and the columns every round; then one more (untimed) run's body
    column, whose order-sensitive CRC must equal that of the bodies put, and its queue offsets."""
    _needs("get_columns")
    pytest.importorskip("pyarrow")

    store = data.store
    benchmark.group = "sequential read"
    kw, ref = benchlib.paired(benchmark, lambda: _read_pages(store, None), 7)
    count, end = benchmark.pedantic(lambda: _read_pages(store, BODY_COLUMNS), **kw)
    assert count == N and end == N
    _check_body_pages(data)
    benchlib.record_paired(benchmark, record, "get_columns_body_sequential (vs all columns)", N, ref, N)


def test_get_columns_body_worker_paired(benchmark, data, record):
    """One operation: the whole queue through ``get_columns(columns=["queue_offset", "body"])`` in pages of 32 k
    as by default (windows of records decoded by the decode worker on the other core while the scan fills the
    next, backing off when that core is not free). Paired with the same read with the worker turned off
    (``_arrow.decode_worker(False)``: every window decoded in the scan's thread) in each round's setup;
    ``paired_ratio`` is the median of (default rate / single-thread rate).

    Checked: the count and the offset reached every round, then one more run's bodies and queue offsets."""
    _needs("get_columns")
    pytest.importorskip("pyarrow")

    from pystore.columns._arrow import decode_worker

    store = data.store

    def single_thread() -> tuple[int, int]:
        before = decode_worker(False)
        try:
            return _read_pages(store, BODY_COLUMNS)
        finally:
            decode_worker(before)

    benchmark.group = "sequential read"
    kw, ref = benchlib.paired(benchmark, single_thread, 9)
    count, end = benchmark.pedantic(lambda: _read_pages(store, BODY_COLUMNS), **kw)
    assert count == N and end == N
    _check_body_pages(data)
    benchlib.record_paired(benchmark, record, "get_columns_body (vs decode worker off)", N, ref, N)


def test_get_message_sequential_retained(benchmark, data, record):
    """One operation: the same pages, every body kept in one list (200 k new bytes objects alive at the
    end); checked: the bodies' order-sensitive CRC. Beside it, ``floor_bytes_retained`` is what CPython
    takes to make and keep the same bodies by slicing one buffer: the allocator's share of this figure."""
    _needs("get_message")
    from pystore import GetMessageStatus

    get = data.store.get_message
    found = GetMessageStatus.FOUND

    def read() -> list[bytes]:
        out: list[bytes] = []
        off = 0
        while off < N:
            r = get(GROUP, TOPIC, 0, off, 32)
            if r.status != found:
                raise AssertionError("get_message at %d: %r" % (off, r.status))
            out += [m.body for m in r.messages]
            off = r.next_begin_offset
        return out

    benchmark.group = "sequential read"
    got = benchmark.pedantic(read, rounds=5, warmup_rounds=1)
    assert len(got) == N and benchlib.bodies_checksum(got) == benchlib.bodies_checksum(data.bodies)
    record("get_message_sequential_retained", N, N * SIZE)


def test_floor_bytes_retained(benchmark, data, record):
    """The floor of the retained read: the same 200 k bodies sliced out of one contiguous buffer into a
    list, 32 at a time (no store, no decoding), kept alive to the end."""
    buf = b"".join(data.bodies)

    def read() -> list[bytes]:
        out: list[bytes] = []
        for p in range(0, N * SIZE, 32 * SIZE):
            out += [buf[i:i + SIZE] for i in range(p, min(p + 32 * SIZE, N * SIZE), SIZE)]
        return out

    benchmark.group = "sequential read"
    got = benchmark.pedantic(read, rounds=5, warmup_rounds=1)
    assert len(got) == N and benchlib.bodies_checksum(got) == benchlib.bodies_checksum(data.bodies)
    record("floor_bytes_retained", N, N * SIZE)


def test_get_offset_in_queue_by_time(benchmark, data, record):
    """One operation: 1000 ``get_offset_in_queue_by_time`` lookups of random store times (``lower``: the
    first offset stored at or after the time), each checked against the times that were stored."""
    _needs("get_offset_in_queue_by_time")
    lo, hi = data.ts[0], data.ts[-1]
    times = [data.rng.randint(lo, hi) for _ in range(LOOKUPS)]
    find = data.store.get_offset_in_queue_by_time

    def run(times: list[int] = times) -> list[int]:
        return [find(TOPIC, 0, t) for t in times]

    benchmark.group = "queue by time"
    got = benchmark.pedantic(run, rounds=20, warmup_rounds=1)
    expected = [bisect.bisect_left(data.ts, t) for t in times]
    assert got == expected
    record("get_offset_in_queue_by_time", LOOKUPS)


def test_query_message(benchmark, data, record):
    """One operation: 1000 ``query_message`` by random key, each returning the message with that key."""
    _needs("query_message")
    idx = _random_indices(data.rng, LOOKUPS)
    keys = [data.keys[i] for i in idx]
    query = data.store.query_message

    def run(keys: list[str] = keys) -> list[bytes]:
        out = []
        for k in keys:
            msgs = query(TOPIC, k, 32).messages
            out.append(msgs[0].body if len(msgs) == 1 else b"<%d messages>" % len(msgs))
        return out

    benchmark.group = "query by key"
    got = benchmark.pedantic(run, rounds=10, warmup_rounds=1)
    assert got == [data.bodies[i] for i in idx]
    record("query_message", LOOKUPS, LOOKUPS * SIZE)
