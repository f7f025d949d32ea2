"""Power cuts on the layer (``docs/powerloss.md``) of a store whose background services move data: new
commit-log files made ahead by the allocation service, the transient store pool's commit service, and the
cleaning service deleting old files while a writer goes on.

Each scenario repeats at several random moments (seeded, printed): the writer process is SIGKILLed, the
power cut (``drop`` or ``torn``), and the store reopened from what the disk holds.
"""

from __future__ import annotations

import random

import crash_writer as cw  # tests/ is on sys.path (tests/conftest.py)
import pytest

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


def _seed() -> random.Random:
    seed = random.randrange(1 << 30)
    print("seed", seed)
    return random.Random(seed)
