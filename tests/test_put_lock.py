"""The put lock (``pystore.log._put_lock``; RocketMQ ``PutMessageSpinLock`` / ``PutMessageReentrantLock``): both
kinds exclude other threads, only the reentrant one may be taken again by its holder."""

from __future__ import annotations

import threading
import time

import pytest

from pystore.log._put_lock import PutMessageLock


def test_the_default_is_the_spin_lock():
    assert PutMessageLock().reentrant is False
    assert PutMessageLock(True).reentrant is True
    assert PutMessageLock(reentrant=True).reentrant is True


@pytest.mark.parametrize("reentrant", [False, True], ids=["spin", "reentrant"])
def test_mutual_exclusion_across_threads(reentrant):
    """A read-modify-write that gives the other threads a chance between its read and its write (the GIL is
    dropped in ``sleep(0)``) loses no increment under the lock."""
    lock = PutMessageLock(reentrant)
    count = [0]
    inside = [0]
    overlaps = []

    def work():
        for _ in range(300):
            with lock:
                inside[0] += 1
                if inside[0] != 1:
                    overlaps.append(inside[0])
                seen = count[0]
                time.sleep(0)
                count[0] = seen + 1
                inside[0] -= 1

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads)
    assert overlaps == []
    assert count[0] == 1200


def test_the_reentrant_lock_is_taken_again_by_its_holder_and_held_until_the_last_release():
    lock = PutMessageLock(True)
    order = []
    trying = threading.Event()

    def other():
        trying.set()
        with lock:
            order.append("other")

    lock.acquire()
    with lock:                                   # again, same thread: no deadlock
        t = threading.Thread(target=other)
        t.start()
        assert trying.wait(30)
        time.sleep(0.05)                         # room for a wrong lock to let the other thread in
        order.append("inner released")
    time.sleep(0.05)
    order.append("outer released")
    lock.release()
    t.join(30)
    assert not t.is_alive()
    assert order == ["inner released", "outer released", "other"]


def test_the_spin_lock_is_released_by_release_and_by_with():
    lock = PutMessageLock()
    lock.acquire()
    lock.release()
    with lock:
        pass
    got = []
    t = threading.Thread(target=lambda: (lock.acquire(), got.append(True), lock.release()))
    t.start()
    t.join(30)
    assert got == [True]


def test_with_releases_on_an_exception():
    for reentrant in (False, True):
        lock = PutMessageLock(reentrant)
        with pytest.raises(RuntimeError):
            with lock:
                raise RuntimeError("boom")
        got = []
        t = threading.Thread(target=lambda lock=lock, got=got: (lock.acquire(), got.append(True), lock.release()))
        t.start()
        t.join(30)
        assert got == [True]
