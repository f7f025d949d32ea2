"""The service that creates commit-log files ahead of the put path (``pystore.log.allocate``; RocketMQ
``AllocateMappedFileService``, docs/format.md §5.5): file N and N+1 per request, inline creation when not
running, the give-up after ``wait_timeout_ms``, failures handed to the put, the transient pool's say on
N+1, and pre-created files deleted at shutdown."""

from __future__ import annotations

import os
import threading
import time

import pytest

from pystore.log.allocate import AllocateMappedFileService

SIZE = 64 * 1024
DEADLINE = 60.0


def name(folder, n: int) -> str:
    return os.path.join(str(folder), "%020d" % (n * SIZE))


def _until(cond) -> None:
    end = time.monotonic() + DEADLINE
    while not cond():
        assert time.monotonic() < end, "not reached"
        time.sleep(0.001)


@pytest.fixture
def service():
    made = []

    def make(**kw):
        s = AllocateMappedFileService(**kw)
        made.append(s)
        return s

    yield make
    for s in made:
        s.shutdown()


def test_not_running_it_creates_the_file_inline_and_nothing_ahead(tmp_path, service):
    s = service()
    folder = tmp_path / "commitlog"                               # made too
    mf = s(name(folder, 0), name(folder, 1), SIZE)
    try:
        assert mf.file_name == name(folder, 0) and mf.file_size == SIZE
        assert os.path.getsize(name(folder, 0)) == SIZE
        assert not os.path.exists(name(folder, 1))
    finally:
        mf.close()


def test_running_it_returns_n_and_makes_n_plus_1_ahead(tmp_path, service):
    s = service()
    s.start()
    a = s(name(tmp_path, 0), name(tmp_path, 1), SIZE)
    assert a.file_name == name(tmp_path, 0)
    _until(lambda: os.path.exists(name(tmp_path, 1)))
    b = s(name(tmp_path, 1), name(tmp_path, 2), SIZE)             # the roll: the file made ahead
    assert b.file_name == name(tmp_path, 1) and b.file_size == SIZE
    _until(lambda: os.path.exists(name(tmp_path, 2)))
    a.close()
    b.close()


def test_shutdown_deletes_the_pre_created_unused_file(tmp_path, service):
    s = service()
    s.start()
    a = s(name(tmp_path, 0), name(tmp_path, 1), SIZE)
    _until(lambda: s._requests[name(tmp_path, 1)].done.is_set())
    assert os.path.exists(name(tmp_path, 1))
    s.shutdown()
    assert not os.path.exists(name(tmp_path, 1))
    assert os.path.exists(name(tmp_path, 0))                     # the one handed out stays
    a.close()


class BlockingPool:
    """A transient pool whose ``attach`` waits for the test; ``buffers`` is what ``available_buffer_nums`` says."""

    def __init__(self, buffers: int = 1) -> None:
        self.buffers = buffers
        self.release = threading.Event()
        self.release.set()
        self.attached: list[str] = []
        self.fail = False

    def available_buffer_nums(self) -> int:
        return self.buffers

    def attach(self, mf) -> None:
        self.release.wait(DEADLINE)
        if self.fail:
            raise OSError("no buffer")
        self.attached.append(mf.file_name)


def test_a_pool_with_one_buffer_left_stops_the_file_ahead(tmp_path, service):
    pool = BlockingPool(buffers=1)
    s = service(pool=pool)
    s.start()
    a = s(name(tmp_path, 0), name(tmp_path, 1), SIZE)
    assert pool.attached == [name(tmp_path, 0)]
    assert name(tmp_path, 1) not in s._requests
    s.shutdown()
    assert not os.path.exists(name(tmp_path, 1))
    a.close()


def test_a_put_gives_up_after_the_wait_timeout_and_the_late_file_is_deleted_at_shutdown(tmp_path, service):
    pool = BlockingPool()
    pool.release.clear()                                         # creation hangs in attach
    s = service(pool=pool, wait_timeout_ms=50)
    s.start()
    assert s(name(tmp_path, 0), name(tmp_path, 1), SIZE) is None
    pool.release.set()
    _until(lambda: s._requests[name(tmp_path, 0)].done.is_set())
    assert os.path.exists(name(tmp_path, 0))
    s.shutdown()
    assert not os.path.exists(name(tmp_path, 0))                 # nobody took it


def test_a_failed_creation_is_none_for_the_put_and_leaves_no_file(tmp_path, service):
    pool = BlockingPool()
    pool.fail = True
    s = service(pool=pool)
    s.start()
    assert s(name(tmp_path, 0), name(tmp_path, 1), SIZE) is None
    assert not os.path.exists(name(tmp_path, 0))                 # no half-made file for the next load


def test_a_folder_that_cannot_be_made_is_none_for_the_put(tmp_path, service):
    (tmp_path / "file").write_bytes(b"")
    s = service()
    s.start()
    assert s(str(tmp_path / "file" / ("%020d" % 0)), str(tmp_path / "file" / ("%020d" % SIZE)), SIZE) is None


def test_inline_creation_raises_what_went_wrong(tmp_path, service):
    (tmp_path / "file").write_bytes(b"")
    s = service()
    with pytest.raises(OSError):
        s(str(tmp_path / "file" / ("%020d" % 0)), str(tmp_path / "file" / ("%020d" % SIZE)), SIZE)
