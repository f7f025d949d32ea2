"""The base of the background services and the store's injected clock and disk (``pystore.system.service``):
``ServiceThread``'s loop (wake-ups, sleeps that only shutdown ends, restart, errors logged), ``real_clock`` and
``disk_used_ratio``. Policies following the injected clock and disk through a store: test_injection.py."""

from __future__ import annotations

import collections
import logging
import os
import shutil
import threading
import time

import pytest
from conftest import SMALL_FILE

from pystore import MessageStore
from pystore.system.service import ServiceThread, disk_used_ratio, real_clock

Usage = collections.namedtuple("Usage", "total used free")
DEADLINE = 60.0


def test_default_disk_usage_is_shutil_and_matches_statvfs(tmp_path):
    s = MessageStore.open(tmp_path / "store", mapped_file_size_commit_log=SMALL_FILE, max_hash_slot_num=1000,
                          max_index_num=4000)
    try:
        assert s.disk_usage is shutil.disk_usage
        st = os.statvfs(tmp_path)
        expected = (st.f_blocks - st.f_bfree) / st.f_blocks      # RocketMQ counts root's reserve as free
        assert abs(disk_used_ratio(None, str(tmp_path)) - expected) < 0.01
    finally:
        s.shutdown()


def test_disk_used_ratio_shapes():
    assert disk_used_ratio(lambda p: 0.25, "x") == 0.25                 # the older hook: the ratio itself
    assert disk_used_ratio(lambda p: Usage(200, 50, 150), "x") == 0.25
    assert disk_used_ratio(lambda p: Usage(0, 0, 0), "x") == -1.0

    def broken(path: str) -> Usage:
        raise FileNotFoundError(path)

    assert disk_used_ratio(broken, "x") == -1.0                         # unknown counts as over every ratio


def test_real_clock_is_epoch_milliseconds():
    before = time.time_ns() // 1_000_000
    now = real_clock()
    after = time.time_ns() // 1_000_000
    assert type(now) is int and before <= now <= after


class Waiter(ServiceThread):
    """Counts its passes: each ``wait_for_running`` with an interval no test outlives."""

    def __init__(self) -> None:
        super().__init__()
        self.passes = 0
        self.ends = 0
        self.passed = threading.Event()

    def on_wait_end(self) -> None:
        self.ends += 1

    def run(self) -> None:
        while not self.is_stopped():
            self.wait_for_running(600_000)
            self.passes += 1
            self.passed.set()


def _until(cond) -> None:
    end = time.monotonic() + DEADLINE
    while not cond():
        assert time.monotonic() < end, "not reached"
        time.sleep(0.001)


def test_wakeup_ends_a_wait_and_the_hook_runs_after_it():
    s = Waiter()
    assert s.name == "Waiter" and not s.started
    s.start()
    assert s.started and s._thread.name == "pystore-Waiter" and s._thread.daemon
    s.wakeup()
    assert s.passed.wait(DEADLINE)
    _until(lambda: s.passes >= 1)
    assert s.ends >= 1
    s.shutdown()
    assert not s._thread.is_alive() and not s.started and s.is_stopped()


def test_a_wakeup_before_the_wait_is_not_lost():
    s = Waiter()
    s.wakeup()                                     # before the thread even runs
    s.start()
    assert s.passed.wait(DEADLINE)
    s.shutdown()


def test_start_twice_is_one_thread_and_a_stopped_service_starts_again():
    s = Waiter()
    s.start()
    first = s._thread
    s.start()
    assert s._thread is first
    s.shutdown()
    s.passed.clear()
    s.start()
    assert s._thread is not first and not s.is_stopped()
    s.wakeup()
    assert s.passed.wait(DEADLINE)
    s.shutdown()
    assert not s._thread.is_alive()


class Sleeper(ServiceThread):
    def __init__(self) -> None:
        super().__init__("Sleeper")
        self.asleep = threading.Event()
        self.woke = threading.Event()

    def run(self) -> None:
        self.asleep.set()
        self.sleep(600_000)
        self.woke.set()


def test_sleep_ignores_wakeup_but_not_shutdown():
    s = Sleeper()
    s.start()
    assert s.asleep.wait(DEADLINE)
    s.wakeup()
    assert not s.woke.wait(0.05)                   # room for a wrong sleep to end
    s.shutdown()
    assert s.woke.is_set() and not s._thread.is_alive()


class Failing(ServiceThread):
    def run(self) -> None:
        raise RuntimeError("boom")


def test_an_error_escaping_run_is_logged(caplog):
    s = Failing("Failing")
    with caplog.at_level(logging.ERROR, logger="pystore.system.service"):
        s.start()
        s._thread.join(DEADLINE)
    assert "Failing stopped by an unexpected error" in caplog.text and "boom" in caplog.text
    s.shutdown()


def test_shutdown_from_the_services_own_thread_does_not_join_itself():
    done = threading.Event()

    class SelfStopping(ServiceThread):
        def run(self) -> None:
            self.shutdown()
            done.set()

    s = SelfStopping()
    s.start()
    assert done.wait(DEADLINE)
    s._thread.join(DEADLINE)
    assert s.is_stopped() and not s.started


@pytest.mark.parametrize("usage, ratio", [(0.0, 0.0), (1, 1.0), (Usage(400, 100, 300), 0.25)])
def test_disk_used_ratio_of_a_number_or_a_usage(usage, ratio):
    assert disk_used_ratio(lambda p: usage, "x") == ratio


def test_disk_used_ratio_asks_for_the_path_given():
    asked = []
    disk_used_ratio(lambda p: asked.append(p) or 0.5, os.sep + "store")
    assert asked == [os.sep + "store"]
    assert shutil.disk_usage(os.sep).total > 0
