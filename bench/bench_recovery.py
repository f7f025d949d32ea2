"""Recovery: the record scan over a warm 1 GiB commit-log file (``pystore.log._records.scan_file``, with and
without the body CRC) and a full ``MessageStore.open`` of a cleanly shut store (normal recovery: map, walk the
last files with CRC, start the services), against the same run's pure-Python ``struct`` scan of the same
records.

The module builds one store whose single 1 GiB file is filled with 128 B messages (about 4.7 M records) and
shuts it down cleanly; the file stays in the page cache ("warm"), and every scan is preceded by an untimed
one, so the figures are CPU and memory bandwidth, not the disk. Each benchmark checks the scan's answer:
the record count and the end of valid data are exactly what was put.
"""

from __future__ import annotations

import mmap
import os
import struct
import tempfile
import zlib
from types import SimpleNamespace

import benchlib
import pytest
from benchlib import GIB, MIB, TOPIC

API = benchlib.store_api()
MessageStore = API["MessageStore"]
Message = API["Message"]
MessageBatch = API["MessageBatch"]
MappedFile = API["MappedFile"]
scan_file = API["scan_file"]

FILE_SIZE = GIB
BATCH = 128
BASELINE_BYTES = 64 * MIB            # the Python scan walks this prefix only (it is ~100x slower)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def gib_log():
    batches = [
        MessageBatch([Message(TOPIC, b) for b in benchlib.payloads(BATCH, 128, seed=s)]) for s in range(8)
    ]
    rec = API["record_length"](batches[0].messages[0])
    with tempfile.TemporaryDirectory(prefix="pystore-bench-recovery-") as d:
        root = os.path.join(d, "store")
        store = MessageStore.open(root, mapped_file_size_commit_log=FILE_SIZE)
        try:
            put = store.put_messages
            limit = FILE_SIZE - BATCH * rec - 8
            i = 0
            while store.get_max_phy_offset() <= limit:
                r = put(batches[i & 7])
                assert r.is_ok()
                i += 1
            n = i * BATCH
            end = store.get_max_phy_offset()
            assert end == n * rec
        finally:
            store.shutdown()
        path = os.path.join(root, "commitlog", "%020d" % 0)
        assert os.path.getsize(path) == FILE_SIZE
        yield SimpleNamespace(root=root, path=path, n=n, end=end, rec=rec)


@pytest.mark.parametrize("crc", [True, False], ids=["crc", "nocrc"])
def test_scan_file_1gib(benchmark, gib_log, record, crc):
    """One operation: ``scan_file`` over the whole 1 GiB file (GIL released inside)."""
    from pystore.format._codec import RECORD_END

    mf = MappedFile(gib_log.path, FILE_SIZE, read_only=True)
    try:
        assert scan_file(mf, 0, crc) == (
            gib_log.end,
            RECORD_END,
            gib_log.n,
            scan_file(mf, 0, False)[3],
        )  # warm
        benchmark.group = "recovery scan"
        end, reason, count, _ = benchmark.pedantic(scan_file, args=(mf, 0, crc), rounds=3, warmup_rounds=0)
        assert (end, reason, count) == (gib_log.end, RECORD_END, gib_log.n)
    finally:
        mf.close()
    record("scan_file_1gib_" + ("crc" if crc else "nocrc"), gib_log.n, gib_log.n * 128, gib_log.end)


def test_recovery_open_normal(benchmark, gib_log, record):
    """One operation: ``MessageStore.open`` of the cleanly shut 1 GiB store (normal recovery with CRC);
    shut down untimed after each round."""
    opened = []

    def open_store():
        s = MessageStore.open(gib_log.root, mapped_file_size_commit_log=FILE_SIZE)
        opened.append(s)
        return s

    def close(*_a, **_k):
        while opened:
            opened.pop().shutdown()

    s = open_store()  # untimed: the same page-cache state for every round
    assert s.get_max_phy_offset() == gib_log.end
    close()
    benchmark.group = "recovery open"
    s = benchmark.pedantic(open_store, teardown=close, rounds=3, warmup_rounds=0)
    assert s.recovery is not None and not s.recovery.abnormal
    assert s.recovery.records == gib_log.n and s.recovery.process_offset == gib_log.end
    record(
        "recovery_open_normal_1gib",
        gib_log.n,
        gib_log.n * 128,
        gib_log.end,
        scan_gb_per_s_inside=s.recovery.scan_rate / 1e9,
    )


def test_baseline_scan_python_crc(benchmark, gib_log, record):
    """The afternoon version of the same walk: ``struct`` over an ``mmap`` of the same file, body CRC with
    ``zlib.crc32``, over the first 64 MiB."""
    hdr = struct.Struct(">iii")
    blen = struct.Struct(">i")
    limit = BASELINE_BYTES - BASELINE_BYTES % gib_log.rec

    with open(gib_log.path, "rb") as f:
        mm = mmap.mmap(f.fileno(), FILE_SIZE, prot=mmap.PROT_READ)
        try:

            def scan() -> tuple[int, int]:
                pos = count = 0
                while pos < limit:
                    total, magic, crc = hdr.unpack_from(mm, pos)
                    if total <= 0 or magic not in (-626843481, -626843477):
                        break
                    (n,) = blen.unpack_from(mm, pos + 84)
                    if zlib.crc32(mm[pos + 88 : pos + 88 + n]) & 0x7FFFFFFF != crc:
                        raise ValueError("bad CRC at %d" % pos)
                    pos += total
                    count += 1
                return pos, count

            benchmark.group = "recovery scan"
            pos, count = benchmark.pedantic(scan, rounds=3, warmup_rounds=1)
        finally:
            mm.close()
    assert pos == limit and count == limit // gib_log.rec
    record("baseline_scan_python_crc", count, count * 128, pos)
