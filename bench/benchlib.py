"""Shared pieces of the benchmark suite (``bench_*.py``) and of ``peers.py``.

* ``store_api()``: pystore's names, wherever the current branch exports them from;
* ``open_warm_store()``: a store whose commit-log file is created and pre-faulted before timing starts
  ("files pre-created"), or deliberately cold;
* ``MmapAppender``: the pure-Python baseline a user could write in an afternoon (``struct`` + ``zlib.crc32``
  + ``mmap`` slice assignment, a length prefix and a CRC per record);
* ``time_each()`` / ``percentiles()``: per-call latencies with ``time.perf_counter_ns``;
* ``scan_store()``: an independent check of what a benchmark wrote (every record, CRC verified);
* ``machine()``: the line that heads every published figure.

Nothing here is timed itself; it only builds inputs and checks outputs.
"""

from __future__ import annotations

import math
import mmap
import os
import platform
import random
import struct
import sys
import time
import zlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any

TOPIC = "BenchTopic"
MIB = 1 << 20
GIB = 1 << 30

# ---------------------------------------------------------------------------------------------------------
# pystore's names
# ---------------------------------------------------------------------------------------------------------


def store_api() -> dict[str, Any]:
    """``MessageStore``, ``Message``, ``MessageBatch``, ``FlushDiskType``, ``PutMessageStatus`` and the
    Cython helpers the recovery benchmarks call, from wherever this branch has them."""
    import pystore
    from pystore import Message, MessageBatch, PutMessageStatus

    try:
        from pystore import MessageStore  # type: ignore[attr-defined]
    except ImportError:
        from pystore.engine.store import MessageStore
    try:
        from pystore import FlushDiskType  # type: ignore[attr-defined]
    except ImportError:
        from pystore.config import FlushDiskType
    from pystore.format._codec import record_length
    from pystore.log._mapped_file import MappedFile
    from pystore.log._records import scan_file

    return {
        "pystore": pystore,
        "MessageStore": MessageStore,
        "Message": Message,
        "MessageBatch": MessageBatch,
        "FlushDiskType": FlushDiskType,
        "PutMessageStatus": PutMessageStatus,
        "scan_file": scan_file,
        "record_length": record_length,
        "MappedFile": MappedFile,
    }


# ---------------------------------------------------------------------------------------------------------
# payloads: the same bytes for every contender
# ---------------------------------------------------------------------------------------------------------


def spark_session(cores: int, app: str) -> Any:
    """A local Spark session as the Spark benches run it (``cores`` threads, no UI, serial GC, UTC), with pystore's
    source registered; its Python workers import this interpreter's path."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    session = (
        SparkSession.builder.master("local[%d]" % cores)
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(cores))
        .config("spark.default.parallelism", str(cores))
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.memory", "2g")
        .config("spark.driver.extraJavaOptions", "-XX:+UseSerialGC")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    import pystore.spark

    pystore.spark.register(session)
    return session


def payloads(n: int, size: int, seed: int = 20240601) -> list[bytes]:
    """``n`` distinct bodies of ``size`` bytes: an 8-byte big-endian index, then pseudo-random bytes (fixed
    seed, so every contender and every run gets the same payloads)."""
    if size < 8:
        raise ValueError("payloads are at least 8 bytes (they carry their index)")
    rng = random.Random(seed + size)
    pool = rng.randbytes(size * 2 + 4096)
    out = []
    for i in range(n):
        j = (i * 131) % 4096
        out.append(i.to_bytes(8, "big") + pool[j:j + size - 8])
    return out


def bodies_checksum(bodies: Iterable[bytes]) -> int:
    """Order-sensitive checksum of a sequence of bodies (CRC-32 chained over all of them)."""
    c = 0
    for b in bodies:
        c = zlib.crc32(b, c)
    return c


# ---------------------------------------------------------------------------------------------------------
# stores
# ---------------------------------------------------------------------------------------------------------


def file_size_for(nbytes: int, minimum: int = 64 * MIB, maximum: int = GIB) -> int:
    """A power-of-two commit-log file size that holds ``nbytes`` with a quarter to spare (so a put
    benchmark never rolls into a new file mid-run), between ``minimum`` and ``maximum``."""
    need = int(nbytes * 1.25) + MIB
    size = minimum
    while size < need and size < maximum:
        size <<= 1
    return size


def wait_allocate_idle(store: Any, timeout: float = 60.0) -> None:
    """Wait until the allocate service has created (and, with ``warm_mapped_file_enable``, pre-faulted)
    every file it was asked for, so that no background warming competes with the timed loop. Falls back
    to a 1 s sleep if the service's internals are not the ones expected."""
    deadline = time.monotonic() + timeout
    alloc = getattr(store, "_allocate", None)
    reqs = getattr(alloc, "_requests", None)
    if not isinstance(reqs, dict):
        time.sleep(1.0)
        return
    while time.monotonic() < deadline:
        pending = [r for r in list(reqs.values()) if not r.done.is_set()]
        if not pending and not getattr(alloc, "_queue", None):
            return
        time.sleep(0.01)
    raise TimeoutError("the allocate service did not finish within %.0f s" % timeout)


def open_warm_store(root: str, file_size: int, warm: bool = True, first_body: bytes = b"x" * 128,
                    **overrides: Any) -> Any:
    """A started store at ``root``: one message put (so the first commit-log file exists) and the allocate
    service idle. ``warm=True``: files pre-created and pre-faulted; ``warm=False``: created (fallocated)
    but never touched, so the first write to each page takes a page fault."""
    api = store_api()
    store = api["MessageStore"].open(root, mapped_file_size_commit_log=file_size,
                                     warm_mapped_file_enable=warm, **overrides)
    r = store.put_message(api["Message"](TOPIC + "Warmup", first_body))
    if not r.is_ok():
        store.shutdown()
        raise RuntimeError("the warm-up put failed: %r" % (r,))
    # the first file is created on that put; wait for it and for the pre-created next file
    deadline = time.monotonic() + 60
    while getattr(getattr(store, "_commitlog", None), "last_file", 1) is None:
        if time.monotonic() > deadline:
            raise TimeoutError("no commit-log file after 60 s")
        time.sleep(0.01)
    wait_allocate_idle(store)
    return store


def queue_count(store: Any, topic: str = TOPIC, queue_id: int = 0) -> int:
    """Messages put to ``topic``/``queue_id`` (the next queue offset of the topic-queue table)."""
    return int(store.get_topic_queue_table().get((topic, queue_id), 0))


def scan_store(store: Any) -> tuple[int, int]:
    """Walk every commit-log record with its CRC checked: ``(records, valid_end)``. The benchmarks compare
    this with what they believe they wrote, so a fast but wrong put path fails."""
    api = store_api()
    scan_file = api["scan_file"]
    from pystore.format._codec import RECORD_BLANK, RECORD_END

    records = 0
    end = 0
    for mf in store._commitlog.queue.files:
        pos, reason, count, _ = scan_file(mf, 0, True)
        records += count
        if reason == RECORD_BLANK:
            end = mf.file_from_offset + mf.file_size
            continue
        if reason != RECORD_END:
            raise AssertionError("record scan stopped by damage (reason %d) at %d in %s"
                                 % (reason, pos, mf.file_name))
        end = mf.file_from_offset + pos
        break
    return records, end


# ---------------------------------------------------------------------------------------------------------
# the afternoon baseline: mmap + struct
# ---------------------------------------------------------------------------------------------------------


class MmapAppender:
    """What a user writes in an afternoon: a pre-sized file, ``mmap``, and per record a 16-byte header
    packed with ``struct`` (length, CRC-32 of the body, a sequence number) followed by the body, copied in
    with slice assignment. Same payload bytes as pystore, a length prefix and a CRC per record; no topic,
    queue, host or timestamp fields, no locking, no rolling. ``prefault=True`` touches every page first
    (like pystore's ``warm_mapped_file_enable``)."""

    HEADER = struct.Struct("<IIQ")   # length, crc32, sequence
    HSIZE = 16

    def __init__(self, path: str, size: int, prefault: bool = True) -> None:
        self.path = path
        self.size = size
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        os.posix_fallocate(self.fd, 0, size)
        self.mm = mmap.mmap(self.fd, size)
        self.pos = 0
        self.seq = 0
        self.flushed = 0
        if prefault:
            mm = self.mm
            for i in range(0, size, mmap.PAGESIZE):
                mm[i] = 0

    def append(self, body: bytes) -> int:
        n = len(body)
        pos = self.pos
        end = pos + 16 + n
        if end > self.size:
            raise OSError("mmap appender full")
        self.HEADER.pack_into(self.mm, pos, n, zlib.crc32(body), self.seq)
        self.mm[pos + 16:end] = body
        self.seq += 1
        self.pos = end
        return pos

    def append_batch(self, bodies: Sequence[bytes]) -> int:
        first = self.pos
        pack = self.HEADER.pack_into
        mm = self.mm
        crc = zlib.crc32
        pos = first
        seq = self.seq
        for body in bodies:
            n = len(body)
            end = pos + 16 + n
            if end > self.size:
                raise OSError("mmap appender full")
            pack(mm, pos, n, crc(body), seq)
            mm[pos + 16:end] = body
            seq += 1
            pos = end
        self.seq = seq
        self.pos = pos
        return first

    def flush(self) -> None:
        """msync the pages written since the last flush."""
        start = self.flushed - self.flushed % mmap.PAGESIZE
        if self.pos > start:
            self.mm.flush(start, self.pos - start)
        self.flushed = self.pos

    def read(self, pos: int) -> bytes:
        n, _crc, _seq = self.HEADER.unpack_from(self.mm, pos)
        return self.mm[pos + 16:pos + 16 + n]

    def iter_records(self, verify: bool = False) -> Iterable[bytes]:
        pos = 0
        mm = self.mm
        unpack = self.HEADER.unpack_from
        while pos < self.pos:
            n, crc, _seq = unpack(mm, pos)
            body = mm[pos + 16:pos + 16 + n]
            if verify and zlib.crc32(body) != crc:
                raise ValueError("CRC mismatch at %d" % pos)
            yield body
            pos += 16 + n

    def close(self) -> None:
        if self.mm is not None:
            self.mm.close()
            self.mm = None  # type: ignore[assignment]
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def pedantic_calls(benchmark: Any, rounds: int, iterations: int = 1, warmup_rounds: int = 0) -> int | None:
    """How many times pytest-benchmark's ``benchmark.pedantic`` calls its target: rounds and warm-up rounds
    times iterations, plus one call for the result when ``iterations > 1``; 1 when benchmarks are disabled;
    None when it cannot be known (``--benchmark-cprofile`` adds calls)."""
    if benchmark.disabled:
        return 1
    if getattr(benchmark, "cprofile", False):
        return None
    return (rounds + warmup_rounds) * iterations + (1 if iterations > 1 else 0)


# ---------------------------------------------------------------------------------------------------------
# latencies
# ---------------------------------------------------------------------------------------------------------


def timer_overhead_ns(n: int = 100_000) -> int:
    """Median cost of the two ``perf_counter_ns`` calls that bracket a timed call."""
    pc = time.perf_counter_ns
    lat = [0] * n
    for i in range(n):
        t0 = pc()
        lat[i] = pc() - t0
    lat.sort()
    return lat[n // 2]


def time_each(fn: Callable[[Any], Any], args: Sequence[Any], check: Callable[[Any], bool] | None = None,
              max_seconds: float | None = None) -> list[int]:
    """Call ``fn(a)`` for each ``a`` in ``args``, timing each call with ``perf_counter_ns``; returns the
    latencies in ns (fewer than ``len(args)`` if ``max_seconds`` ran out). ``check(result)`` is applied to
    every result outside the timed bracket."""
    pc = time.perf_counter_ns
    lat: list[int] = []
    add = lat.append
    deadline = None if max_seconds is None else pc() + int(max_seconds * 1e9)
    for i, a in enumerate(args):
        t0 = pc()
        r = fn(a)
        t1 = pc()
        add(t1 - t0)
        if check is not None and not check(r):
            raise AssertionError("call %d returned a wrong result: %r" % (i, r))
        if deadline is not None and (i & 255) == 0 and t1 > deadline:
            break
    return lat


def percentiles(lat: Sequence[int], ps: Sequence[float] = (50, 90, 99, 99.9)) -> dict[str, float]:
    """``{"p50": ns, "p99.9": ns, ...}`` of a list of latencies (nearest rank)."""
    s = sorted(lat)
    n = len(s)
    out: dict[str, float] = {}
    for p in ps:
        k = min(n - 1, max(0, math.ceil(p / 100 * n) - 1))
        out["p%g" % p] = float(s[k]) if n else float("nan")
    return out


# ---------------------------------------------------------------------------------------------------------
# the machine
# ---------------------------------------------------------------------------------------------------------


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def filesystem_of(path: str) -> str:
    """``fstype (device, mount point)`` of the file system holding ``path``, from /proc/mounts."""
    path = os.path.realpath(path)
    best = ("", "?", "?")
    try:
        with open("/proc/mounts") as f:
            for line in f:
                dev, mnt, fstype = line.split()[:3]
                mnt = mnt.replace("\\040", " ")
                if (path == mnt or path.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best[0]):
                    best = (mnt, dev, fstype)
    except OSError:
        pass
    return "%s (%s on %s)" % (best[2], best[1], best[0])


def machine(tmpdir: str | None = None) -> dict[str, str]:
    import tempfile

    d = tmpdir or tempfile.gettempdir()
    mem = "?"
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem = "%.0f GiB" % (int(line.split()[1]) / (1 << 20))
                    break
    except OSError:
        pass
    return {
        "cpu": _cpu_model(),
        "cores": str(os.cpu_count()),
        "memory": mem,
        "kernel": "%s %s" % (platform.system(), platform.release()),
        "filesystem": "%s: %s" % (d, filesystem_of(d)),
        "python": "%s %s" % (platform.python_implementation(), platform.python_version()),
    }


def machine_line(m: dict[str, str]) -> str:
    return "%s, %s cores, %s RAM, %s, %s, %s" % (
        m["cpu"],
        m["cores"],
        m["memory"],
        m["kernel"],
        m["filesystem"],
        m["python"],
    )


# paired ratios: this VM's speed drifts by 2x within minutes, so a ratio of two benchmarks run a minute apart
# is noise. A paired benchmark times its reference in the untimed ``setup`` of every round, so each round
# yields a ratio of two measurements taken back to back; the median over rounds is reported.


def paired(benchmark: Any, reference: Callable[[], Any], rounds: int) -> tuple[dict[str, Any], list[float]]:
    """``benchmark.pedantic`` kwargs whose ``setup`` times ``reference()`` before every round; the list of
    reference durations (seconds) fills as the rounds run."""
    ref: list[float] = []

    def setup() -> None:
        t0 = time.perf_counter()
        reference()
        ref.append(time.perf_counter() - t0)

    return {"setup": setup, "rounds": rounds, "warmup_rounds": 1}, ref


def record_paired(benchmark: Any, record: Callable[..., Any], label: str, msgs: int, ref: list[float],
                  ref_msgs: int) -> None:
    """Record the benchmark with ``paired_ratio``: the median over rounds of (its rate / the reference's
    rate in the setup just before)."""
    stats = getattr(getattr(benchmark, "stats", None), "stats", None)
    mine = list(stats.data) if stats is not None else []
    ref = ref[-len(mine) :] if mine else []
    ratios = sorted((msgs / m) / (ref_msgs / r) for m, r in zip(mine, ref, strict=True))
    med = ratios[len(ratios) // 2] if ratios else None
    ref_rate = ref_msgs / sorted(ref)[len(ref) // 2] if ref else None
    record(label, msgs, msgs * 128, paired_ratio=med, paired_ratios=ratios, reference_msgs_per_s=ref_rate)
