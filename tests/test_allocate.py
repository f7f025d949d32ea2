"""The service that creates commit-log files ahead of the put path (``pystore.log.allocate``; RocketMQ
``AllocateMappedFileService``, docs/format.md §5.5): file N and N+1 per request, inline creation when not
running, the give-up after ``wait_timeout_ms``, failures handed to the put, the transient pool's say on
N+1, and pre-created files deleted at shutdown."""

from __future__ import annotations

import os
import threading
import time

import pytest

from pystore.log.allocate import AllocateMappedFileService, _Request

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


# -- the commit log's ready file (``keep_ready``: made ahead into ``CommitLogCore.ready``, taken in C) -------------


def _rolling_store(store_factory, **kw):
    """A store with 64 KiB commit-log files and a counter on the roll's one call into Python."""
    store = store_factory(mapped_file_size_commit_log=SIZE, **kw)
    core = store._commitlog.core
    calls = []
    slow = core.roll_file

    def counted(offset: int):
        calls.append(offset)
        return slow(offset)

    core.roll_file = counted
    return store, core, calls


def _fill_files(store, n_files: int) -> None:
    from pystore import Message

    queue = store._commitlog.queue
    while len(queue.files) < n_files:
        assert store.put_message(Message("T", b"x" * 1000)).is_ok()


def test_after_the_first_roll_the_put_path_takes_the_ready_file_without_python(store_factory):
    """The first roll of a process asks the allocate service (in Python) for the next file and the one after; the
    one after becomes the core's ready file, and from then on each roll takes the ready file in C and the
    service makes the next one ahead."""
    store, core, calls = _rolling_store(store_factory)
    _fill_files(store, 2)       # the first file through Python; the second too, unless made ahead in time
    assert 1 <= len(calls) <= 2
    before, rolls = len(calls), core.ready_rolls
    for n in range(3, 7):
        _until(lambda: core.ready is not None)
        assert core.ready.file_from_offset == (n - 1) * SIZE
        _fill_files(store, n)
        assert core.ready_rolls == rolls + n - 2
    assert len(calls) == before                 # no roll came through Python since
    queue = store._commitlog.queue
    assert [f.file_from_offset for f in queue.files] == [i * SIZE for i in range(6)]
    assert core.last_file is queue.files[-1]
    # every record reads back, across the files the ready rolls added
    from pystore.tools import iter_commitlog

    got = list(iter_commitlog(store.config.store_path_root_dir + "/commitlog", verify_crc=True))
    assert len(got) == store.get_max_offset_in_queue("T", 0)


def test_the_unused_ready_file_is_deleted_at_shutdown_and_an_idle_store_makes_none(store_factory):
    store, core, calls = _rolling_store(store_factory)
    _fill_files(store, 2)
    _until(lambda: core.ready is not None)
    ready = core.ready.file_name
    root = store.config.store_path_root_dir
    store.shutdown()
    assert not os.path.exists(ready)
    again = store_factory()                     # reopened, no puts: nothing past the log's end
    time.sleep(1.2)                             # two looks of the service
    assert again._commitlog.core.ready is None
    names = sorted(os.listdir(os.path.join(root, "commitlog")))
    assert names == ["%020d" % 0, "%020d" % SIZE]


def test_a_ready_file_that_does_not_follow_the_log_is_dropped_never_taken(store_factory, tmp_path):
    """A ready file that does not start where the log ends (as after a truncation) is not taken by the roll (it
    calls Python, which makes the right file) and the service deletes it."""
    from pystore.log._mapped_file import MappedFile

    store, core, calls = _rolling_store(store_factory)
    _fill_files(store, 2)
    _until(lambda: core.ready is not None)
    alloc = store._writer.allocate
    with alloc._cond:
        good = core.ready
        wrong = MappedFile(str(tmp_path / ("%020d" % (7 * SIZE))), SIZE, create=True)
        core.ready = wrong
    good.destroy(0, 0)
    _until(lambda: core.ready is not wrong)
    _until(lambda: not os.path.exists(wrong.file_name))
    n_calls = len(calls)
    _fill_files(store, 3)
    assert [f.file_from_offset for f in store._commitlog.queue.files] == [0, SIZE, 2 * SIZE]
    assert len(calls) >= n_calls


# -- the service's view of the log's end lags a roll (it reads ``queue.last()`` without its lock) -----------------


class FakeCore:
    """What the service uses of ``CommitLogCore``: the ready slot and the count of rolls that took it."""

    def __init__(self) -> None:
        self.ready = None
        self.ready_rolls = 0


class FakeLog:
    """What the service uses of the log's ``MappedFileQueue``; ``before_view`` runs once, right after the next
    ``last()`` has read its answer (a roll landing between the service's read and its lock)."""

    mapped_file_size = SIZE

    def __init__(self, folder, files) -> None:
        self.folder = folder
        self.files = list(files)
        self.before_view = None

    def last(self):
        last = self.files[-1]
        hook, self.before_view = self.before_view, None
        if hook is not None:
            hook()
        return last

    def path_for(self, offset: int) -> str:
        return name(self.folder, offset // SIZE)


def _finish_requests(s) -> None:
    """Make every file asked for, as the service's thread would."""
    for req in list(s._queue):
        req.mapped_file = s._create(req.path, req.size)
        req.done.set()
    s._queue.clear()


def test_a_roll_in_c_between_the_services_view_and_its_lock_does_not_make_the_file_twice(tmp_path, service):
    """The roll takes the ready file (file 2) just after the service read the log's end (file 1): the service
    must not ask for file 2 again (a second mapping of a file the log writes, deleted at shutdown as unused,
    with its messages); its next look asks for file 3, and shutdown keeps every file of the log."""
    s = service()
    files = [s._create(name(tmp_path, i), SIZE) for i in range(2)]
    core, log_ = FakeCore(), FakeLog(tmp_path, files)
    s.keep_ready(core, log_)
    core.ready = s._create(name(tmp_path, 2), SIZE)
    s._handed = core.ready.file_name            # as _fill_ready does when it hands a file over

    def roll_in_c():
        log_.files.append(core.ready)
        core.ready = None
        core.ready_rolls += 1

    log_.before_view = roll_in_c
    s._fill_ready()                             # its view: the log ends with file 1
    assert name(tmp_path, 2) not in s._requests
    s._fill_ready()                             # its view: file 2
    assert list(s._requests) == [name(tmp_path, 3)]
    _finish_requests(s)
    s._fill_ready()
    assert core.ready is not None and core.ready.file_name == name(tmp_path, 3)
    s.shutdown()
    for i in range(3):
        assert os.path.getsize(name(tmp_path, i)) == SIZE
    assert not os.path.exists(name(tmp_path, 3))      # the unused ready file
    for f in log_.files:
        f.close()


def test_a_roll_through_python_not_yet_in_the_log_does_not_make_its_file_twice(tmp_path, service):
    """A roll that found no ready file asks the running service for file 2 (and 3 ahead); the service then
    looks before the put path has added file 2 to the log (its view: file 1), with a roll in C not yet seen.
    File 2 is not asked for again; once the log holds it, file 3 becomes the ready file; shutdown keeps file 2."""
    s = service()
    files = [s._create(name(tmp_path, i), SIZE) for i in range(2)]
    core, log_ = FakeCore(), FakeLog(tmp_path, files)
    s.start()
    got = s(name(tmp_path, 2), name(tmp_path, 3), SIZE)      # the roll through Python; not in the log yet
    assert got.file_name == name(tmp_path, 2)
    _until(lambda: s._requests[name(tmp_path, 3)].done.is_set())
    looks = []
    fill = s._fill_ready

    def counted():
        fill()
        looks.append(1)

    s._fill_ready = counted
    s.keep_ready(core, log_)
    core.ready_rolls += 1                       # an earlier roll in C the service has not seen
    _until(lambda: len(looks) >= 2)
    assert name(tmp_path, 2) not in s._requests
    assert core.ready is None
    log_.files.append(got)                      # the put path adds its file to the log
    _until(lambda: core.ready is not None)
    assert core.ready.file_name == name(tmp_path, 3)
    assert list(s._requests) == []
    s.shutdown()
    for i in range(3):
        assert os.path.getsize(name(tmp_path, i)) == SIZE
    assert not os.path.exists(name(tmp_path, 3))
    for f in log_.files:
        f.close()


def test_shutdown_never_deletes_a_file_the_log_holds(tmp_path, service, caplog):
    """Were a file of the log ever made twice, shutdown closes the second mapping and says so, instead of
    deleting the file with the log's messages in it."""
    s = service()
    files = [s._create(name(tmp_path, i), SIZE) for i in range(2)]
    s.keep_ready(FakeCore(), FakeLog(tmp_path, files))
    twice = s._requests[name(tmp_path, 1)] = _Request(name(tmp_path, 1), SIZE)
    twice.mapped_file = s._create(name(tmp_path, 1), SIZE)
    twice.done.set()
    s.shutdown()
    assert os.path.getsize(name(tmp_path, 1)) == SIZE
    assert "not deleting" in caplog.text
    for f in files:
        f.close()
