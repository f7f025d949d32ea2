"""The store's injected clock and disk (``MessageStore(clock=..., disk_usage=...)``, ``pystore.system.service``): every
policy that depends on the time or on disk usage follows them, so these tests move a fake clock or fill a fake
disk instead of waiting or writing."""

from __future__ import annotations

import collections
import os
import threading
import time

from conftest import SMALL_FILE, make_message

from pystore import MessageBatch, PutMessageStatus
from pystore.engine.checkpoint import StoreCheckpoint

HOUR = 3_600_000
Usage = collections.namedtuple("Usage", "total used free")


def _written(path: str) -> int:
    """The physic time the checkpoint file holds (what a crash would leave)."""
    return StoreCheckpoint(path, read_only=True).physic_msg_timestamp


# -- the checkpoint ---------------------------------------------------------------------------------------


def test_checkpoint_auto_flush_follows_the_clock(tmp_path, fake_clock):
    path = str(tmp_path / "checkpoint")
    cp = StoreCheckpoint(path, auto_flush_ms=1000, clock=fake_clock)
    cp.physic_msg_timestamp = 10                     # never written: the first change is written at once
    assert _written(path) == 10
    fake_clock.advance(999)
    cp.physic_msg_timestamp = 11                     # within the interval: kept in memory
    assert _written(path) == 10
    fake_clock.advance(1)
    cp.physic_msg_timestamp = 12                     # the interval passed on the clock: written
    assert _written(path) == 12
    fake_clock.advance(-HOUR)
    cp.physic_msg_timestamp = 13                     # a clock that went back writes now, not in an hour
    assert _written(path) == 13


def test_checkpoint_horizon_follows_the_clock(tmp_path, fake_clock):
    path = str(tmp_path / "checkpoint")
    cp = StoreCheckpoint(path)
    cp.physic_msg_timestamp = cp.logics_msg_timestamp = fake_clock() + 2 * 24 * HOUR
    cp.flush()
    assert not StoreCheckpoint(path, read_only=True, clock=fake_clock).trusted    # two days ahead: impossible
    fake_clock.advance(2 * 24 * HOUR)
    later = StoreCheckpoint(path, read_only=True, clock=fake_clock)
    assert later.trusted and later.physic_msg_timestamp == fake_clock()


def test_a_stores_checkpoint_runs_on_the_stores_clock(store_factory, fake_clock):
    store = store_factory(clock=fake_clock)
    assert store._checkpoint.clock is fake_clock


# -- cleaning ---------------------------------------------------------------------------------------------


def _clean_store(store_factory, fake_clock, **kw):
    kw.setdefault("delete_when", "%02d" % ((time.localtime(fake_clock() / 1000).tm_hour + 12) % 24))
    kw.setdefault("delete_commit_log_files_interval", 0)
    kw.setdefault("delete_consume_queue_files_interval", 0)
    kw.setdefault("clean_resource_interval", 3_600_000)       # passes run only when the test asks
    kw.setdefault("disk_usage", lambda path: Usage(100, 10, 90))
    return store_factory(clock=fake_clock, **kw)


def _fill(store, n):
    for i in range(n):
        assert store.put_message(make_message(i, body_size=1000)).is_ok()
    store.flush()


def _cleaned(store, keep: int) -> list[str]:
    """The commit-log files left once cleaning passes have taken the log down to ``keep`` files (at most 50
    passes). A pass stops at a file a service holds for a moment (a flush, the dispatch, the index builder:
    RocketMQ's ``destroy`` refuses a held file until its forced interval); a later pass deletes it, in its loop
    or as a hanged first file (``redelete_hanged_file``, not in the pass's count), so files are counted on disk."""
    for _ in range(50):
        store.clean_files()
        if len(_logs(store)) <= keep:
            break
        time.sleep(0.01)
    return _logs(store)


def _logs(store):
    return sorted(n for n in os.listdir(os.path.join(store.root, "commitlog")) if int(n) < store.get_max_phy_offset())


def test_cleaning_expires_files_by_the_injected_clock(store_factory, fake_clock):
    """The files' times stay; only the clock moves past ``file_reserved_time`` (72 h)."""
    s = _clean_store(store_factory, fake_clock)
    store_factory.skip_check()
    _fill(s, 300)
    logs = _logs(s)
    t = (fake_clock() - 71 * HOUR) / 1000
    for name in os.listdir(os.path.join(s.root, "commitlog")):
        os.utime(os.path.join(s.root, "commitlog", name), (t, t))
    s.execute_delete_files_manually()
    assert s.clean_files() == (0, 0)                 # 71 h old by the clock: kept
    fake_clock.advance(HOUR + 1000)
    assert _cleaned(s, 1) == logs[-1:]               # 72 h and a second: expired, all but the last


def test_a_full_disk_by_the_injected_disk_usage_triggers_cleanup(store_factory, fake_clock):
    """``disk_usage`` in ``shutil.disk_usage``'s shape: over the warning ratio, unexpired files go and puts are
    refused; back under it, puts are accepted again. The runtime info reports the same ratio."""
    usage = {"now": Usage(1000, 500, 500)}
    s = _clean_store(store_factory, fake_clock, disk_usage=lambda path: usage["now"])
    store_factory.skip_check()
    _fill(s, 300)
    logs = _logs(s)
    assert s.clean_files() == (0, 0)
    assert s.get_runtime_info()["commitLogDiskRatio"] == "0.5000"
    usage["now"] = Usage(1000, 950, 50)
    assert _cleaned(s, 1) == logs[-1:] and s.running_flags.is_disk_full()
    assert s.put_message(make_message(1)).status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    usage["now"] = Usage(1000, 100, 900)
    s.clean_files()
    assert not s.running_flags.is_disk_full()
    assert s.put_message(make_message(2)).is_ok()


def test_the_clean_service_thread_decides_by_the_injected_disk(store_factory, fake_clock):
    """The service's own passes (not ``clean_files``) read the injected ``disk_usage``."""
    full = threading.Event()
    s = _clean_store(store_factory, fake_clock, clean_resource_interval=10,
                     disk_usage=lambda path: Usage(1000, 950 if full.is_set() else 100, 0))
    store_factory.skip_check()
    _fill(s, 300)
    full.set()
    deadline = time.monotonic() + 60
    while not s.running_flags.is_disk_full() and time.monotonic() < deadline:   # a liveness bound
        time.sleep(0.01)
    assert s.running_flags.is_disk_full()


# -- the page-cache-busy check ----------------------------------------------------------------------------


def test_page_cache_busy_follows_the_stores_clock(store_factory, fake_clock):
    """A put holding the lock longer than ``os_page_cache_busy_timeout_mills`` on the store's clock makes the
    others fail fast with OS_PAGE_CACHE_BUSY: the test holds a put in the lock (at a file roll) and moves the
    clock."""
    s = store_factory(clock=fake_clock)
    cl = s._commitlog
    in_lock, release = threading.Event(), threading.Event()
    real_roll = cl.roll_file

    def held_roll(next_offset):
        in_lock.set()
        release.wait(60)
        return real_roll(next_offset)

    i = 0
    while s.get_max_phy_offset() + 2000 < SMALL_FILE:        # fill the first file: the next put rolls
        assert s.put_message(make_message(i, body_size=1000)).is_ok()
        i += 1
    cl.roll_file = held_roll
    cl.core.files_lock = None      # no roll in C from the ready file: this roll must come through the hook
    results = []
    t = threading.Thread(target=lambda: results.append(s.put_message(make_message(i, body_size=1900))))
    t.start()
    try:
        assert in_lock.wait(60)
        assert not s.is_os_page_cache_busy()                  # no time passed on the clock
        assert s.get_runtime_info()["pageCacheLockTimeMills"] == "0"
        fake_clock.advance(s.config.os_page_cache_busy_timeout_mills + 1)
        assert s.is_os_page_cache_busy()
        assert s.put_message(make_message(i + 1)).status is PutMessageStatus.OS_PAGE_CACHE_BUSY
        # the batch and column puts share the single put's protocol: refused alike, and before the check of
        # their size against a file, as a single put is
        assert s.put_messages(MessageBatch([make_message(i + 1), make_message(i + 2)])).status \
            is PutMessageStatus.OS_PAGE_CACHE_BUSY
        too_big = MessageBatch([make_message(j, body_size=1000) for j in range(SMALL_FILE // 1000 + 1)])
        assert s.put_messages(too_big).status is PutMessageStatus.OS_PAGE_CACHE_BUSY
        r = s.put_columns("TopicTest", [b"x" * 10] * 3)
        assert r.status is PutMessageStatus.OS_PAGE_CACHE_BUSY and r.count == 0
    finally:
        release.set()
        t.join(60)
        cl.roll_file = real_roll
    assert results and results[0].is_ok()
    assert not s.is_os_page_cache_busy()
    assert s.put_message(make_message(i + 2)).is_ok()
    store_factory.expect_messages(i + 2)
