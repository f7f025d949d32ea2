"""Power cuts on the layer (``docs/powerloss.md``) of a store whose background services move data: new
commit-log files made ahead by the allocation service, the transient store pool's commit service, and the
cleaning service deleting old files while a writer goes on.

Each scenario repeats at several random moments (seeded, printed): the writer process is SIGKILLed, the
power cut (``drop`` or ``torn``), and the store reopened from what the disk holds.
"""

from __future__ import annotations

import random
import time

import crash_writer as cw  # tests/ is on sys.path (tests/conftest.py)
import pytest

from ._procs import kill, procs, read_line  # noqa: F401  (procs is a fixture)

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


def durable_by_flush(acks: list[cw.Ack]) -> list[cw.Ack]:
    """The acknowledged messages below the highest flushed offset any put saw on return (the ack log's fourth
    column): on disk before the cut, whatever the flush mode."""
    flushed = max((a.flushed for a in acks), default=0)
    return [a for a in acks if a.offset + a.size <= flushed]


def _seed() -> random.Random:
    seed = random.randrange(1 << 30)
    print("seed", seed)
    return random.Random(seed)


# -- transient store pool ----------------------------------------------------------------------------------


POOL_POINTS = 2


@pytest.mark.parametrize("model", ["journal", "strict"])
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_transient_store_pool_power_cut(powercut, procs, tmp_path, model, mode):  # noqa: F811
    """``transient_store_pool_enable``: puts land in a pool buffer, the commit service copies them into the
    file, the flush service flushes the file. SYNC_FLUSH (the pool is not used then, as in RocketMQ 4.8):
    every acknowledged message is there, intact. ASYNC_FLUSH: a gap-free prefix without a torn record, holding
    every acknowledged message the flush had reached when its put returned."""
    rng = _seed()
    for point in range(POOL_POINTS):
        fs = powercut(model)
        ack = str(tmp_path / ("acks-%d" % point))
        p = procs.start(["write", str(fs.mount / "store"), "--ack", ack, "--mode", mode, "--pool", "--threads", "2",
                         "--file-size", str(FILE), "--max-seconds", "60"], env=fs.writer_env())
        read_line(p, "READY")
        delay = rng.uniform(0.05, 1.0)
        time.sleep(delay)
        kill(p)
        acks = cw.read_acks(ack)
        promised = acks if mode == "sync" else durable_by_flush(acks)
        for crash_mode in ("drop", "torn"):
            out = fs.crash(mode=crash_mode, seed=rng.randrange(1 << 30))
            summary = cw.verify_recovered(str(out / "store"), promised, FILE, reopen=0)
            print("pool %s %s point %d (%.2f s) %s: %d acked, %d promised durable, %d records after the cut"
                  % (model, mode, point, delay, crash_mode, len(acks), len(promised), summary["records"]))
        fs.close()

