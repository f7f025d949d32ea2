"""Fixtures shared by the whole suite.

* ``store_factory`` — opens stores under ``tmp_path`` with small commit-log files and, at teardown, shuts
  every one down and re-reads every commit-log file with ``iter_commitlog(verify_crc=True)`` (bbolt's
  post-test check): nothing may be corrupt, and the message count must equal what the test recorded
  with ``store_factory.expect_messages(...)``, if it recorded one.
* ``_verify_stores_after_test`` (autouse) — after every test, ``pystore.engine.verify.verify_store`` (CRCs, every
         consume-queue unit against its record, index chains and a sample of keys looked up) on every writable
  store the test started and shut down cleanly, whose files nothing changed since, and that still exists;
  a problem fails the test (bbolt's and diskcache's post-test consistency check). Not checked: tests
  marked ``no_verify`` (damage on purpose), tests in which a ``StoreCorruptedError`` was raised (they
  expect damage), roots a ``store_factory.skip_check`` left out, stores whose commit log is larger than
  ``VERIFY_MAX_BYTES``, and stores with a commit log or queues outside their root
  (``PYSTORE_TEST_NO_VERIFY=1`` turns the check off, to time the suite without it).
* ``fake_clock`` — a callable returning milliseconds that only moves when the test says so.
* ``make_message(i, ...)`` — a deterministic ``Message`` numbered ``i``.

Usage::

    def test_x(store_factory):
        store = store_factory()                       # tmp_path/store, 64 KiB commit-log files
        store.put_message(make_message(0))
        store_factory.expect_messages(1)              # checked after the test, on disk
        reader = store_factory(read_only=True)        # same root, read-only
        other = store_factory("b", flush_disk_type="SYNC_FLUSH")
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from writer_procs import Procs

import pystore.engine.store as store_module
from pystore import Message
from pystore.config import StoreConfig
from pystore.engine.store import MessageStore
from pystore.errors import StoreCorruptedError
from pystore.log._mapped_file import OS_PAGE_SIZE, MappedFile
from pystore.tools import iter_commitlog

#: Commit-log file size the fixtures use: small, so rolling and recovery are fast.
SMALL_FILE = 64 * 1024
#: Index geometry the factory opens stores with unless a test sets one: RocketMQ's default (5 M slots, 20 M
#: entries) maps 420 MB a store, small ones keep index rolling and queries cheap.
SMALL_INDEX = {"max_hash_slot_num": 1000, "max_index_num": 4000}
#: Born timestamp of message 0 built by make_message (message i is born i ms later).
BORN_BASE = 1_700_000_000_000
BORN_HOST = ("127.0.0.1", 50000)


def make_message(
    i: int,
    topic: str = "TopicTest",
    queue_id: int = 0,
    body: bytes | None = None,
    body_size: int | None = None,
    **kwargs: Any,
) -> Message:
    """Message number ``i``: body ``b"Hello RocketMQ <i>"`` (or ``body``, or ``body_size`` bytes derived
    from ``i``), tags ``TagA``, keys ``[key<i>]``, born at ``BORN_BASE + i`` from ``BORN_HOST``. Any other
    ``Message`` argument may be given."""
    if body is None:
        if body_size is None:
            body = b"Hello RocketMQ %d" % i
        else:
            seed = b"%d-" % i
            body = (seed * (body_size // len(seed) + 1))[:body_size]
    kwargs.setdefault("tags", "TagA")
    kwargs.setdefault("keys", ["key%d" % i])
    kwargs.setdefault("born_timestamp", BORN_BASE + i)
    kwargs.setdefault("born_host", BORN_HOST)
    return Message(topic, body, queue_id=queue_id, **kwargs)


def drop_commit_log_head(store: MessageStore) -> None:
    """The cleaner's first step (the head commit-log file destroyed), without the consume queues' min offset
    correction that follows it."""
    cl = store._commitlog.queue
    head = cl.first()
    for _ in range(100):            # a service may hold it for a moment; the second call forces
        if head.destroy(0, store.clock()):
            break
        time.sleep(0.01)
    assert head.is_cleanup_over()
    cl._remove([head])


class FakeClock:
    """Milliseconds since the epoch that move only when told: ``clock()``, ``clock.advance(ms)``."""

    def __init__(self, start_ms: int = BORN_BASE) -> None:
        self.now = start_ms

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> int:
        self.now += ms
        return self.now

    def set(self, ms: int) -> None:
        self.now = ms


@pytest.fixture
def fake_clock() -> FakeClock:
    return FakeClock()


#: the size of the file the ``mf`` fixture maps: eight pages
MAPPED_FILE_SIZE = 8 * OS_PAGE_SIZE


@pytest.fixture
def path(tmp_path: Path) -> str:
    """The path of a commit-log file named for offset 0 (not created)."""
    return str(tmp_path / "00000000000000000000")


@pytest.fixture
def mf(path: str) -> Iterator[MappedFile]:
    """A new ``MappedFile`` of ``MAPPED_FILE_SIZE`` at ``path``, closed after the test."""
    f = MappedFile(path, MAPPED_FILE_SIZE, create=True)
    yield f
    f.close()


@pytest.fixture
def fast_reconnect(monkeypatch):
    """A slave tries again after 50 ms instead of a second (tests that make it reconnect)."""
    import pystore.ha.slave

    monkeypatch.setattr(pystore.ha.slave, "_RECONNECT_S", 0.05)


@pytest.fixture
def sparse_tmp(tmp_path: Path) -> Path:
    """``tmp_path``, on a file system whose ``st_blocks`` tells holes from data (ext4, XFS, btrfs): the disk-use
    tests skip where it does not (some overlay or network file systems report every byte as allocated)."""
    probe = tmp_path / ".sparse-probe"
    with open(probe, "wb") as f:
        f.truncate(1 << 20)
        f.seek(8192)
        f.write(b"x")
    st = os.stat(probe)
    probe.unlink()
    if not 0 < st.st_blocks * 512 < 1 << 20:
        pytest.skip("%s does not report holes in st_blocks (%d bytes allocated for 1 byte written in a 1 MiB "
                    "sparse file)" % (tmp_path, st.st_blocks * 512))
    return tmp_path


def _half_full(path: str) -> float:
    return 0.5


class StoreFactory:
    """``factory(name="store", read_only=False, **config_overrides) -> MessageStore`` (loaded, started).

    Roots live under the test's ``tmp_path``; ``mapped_file_size_commit_log`` defaults to 64 KiB. Every
    store it opened is shut down at teardown, then each written root is checked (see the module doc).
    """

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.stores: list[MessageStore] = []
        self.expected: dict[str, int] = {}
        self.unchecked: set[str] = set()
        self.roots: dict[str, list[str]] = {}   # written root -> its commit-log folders

    def path(self, name: str = "store") -> Path:
        """The root folder a store called ``name`` lives in."""
        return self.tmp_path / name

    def config(self, name: str = "store", **overrides: Any) -> StoreConfig:
        """The StoreConfig the factory would open ``name`` with (for ``MessageStore(config)``)."""
        overrides.setdefault("mapped_file_size_commit_log", SMALL_FILE)
        return StoreConfig(store_path_root_dir=str(self.path(name)), **overrides)

    def __call__(self, name: str = "store", read_only: bool = False, **overrides: Any) -> MessageStore:
        overrides.setdefault("mapped_file_size_commit_log", SMALL_FILE)
        # the machine's own disk may be nearly full (a CI runner): a store living past its first clean pass
        # would then delete files or refuse puts; tests of that behaviour pass their own disk_usage
        overrides.setdefault("disk_usage", _half_full)
        for key, value in SMALL_INDEX.items():
            overrides.setdefault(key, value)
        root = str(self.path(name))
        if not read_only:
            self.roots[root] = StoreConfig(store_path_root_dir=root, **{
                k: v for k, v in overrides.items() if k not in ("clock", "disk_usage")}).commit_log_paths()
        store = MessageStore.open(root, read_only=read_only, **overrides)
        self.stores.append(store)
        return store

    def track(self, store: MessageStore) -> MessageStore:
        """Have a store the test built itself shut down (and its root checked) at teardown."""
        self.stores.append(store)
        if not store.read_only:
            self.roots[store.root] = store.config.commit_log_paths()
        return store

    def expect_messages(self, count: int, name: str = "store") -> None:
        """Record how many messages the commit log of ``name`` must hold at teardown."""
        self.expected[str(self.path(name))] = count

    def skip_check(self, name: str = "store") -> None:
        """Leave ``name`` unchecked (a test that damages files on purpose and leaves them so)."""
        self.unchecked.add(str(self.path(name)))
        if _watch is not None:
            _watch.skip.add(os.path.abspath(self.path(name)))

    def close_all(self) -> None:
        for store in reversed(self.stores):
            store.shutdown()

    def check(self) -> None:
        for root, folders in self.roots.items():
            if root in self.unchecked:
                continue
            existing = [f for f in folders if os.path.isdir(f)]
            count = sum(1 for _ in iter_commitlog(existing, verify_crc=True)) if existing else 0
            if root in self.expected:
                assert count == self.expected[root], "%s holds %d messages, the test expected %d" % (
                    root, count, self.expected[root])


@pytest.fixture
def store_factory(tmp_path: Path) -> Iterator[StoreFactory]:
    factory = StoreFactory(tmp_path)
    try:
        yield factory
    finally:
        factory.close_all()
    factory.check()


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Procs]:
    """Writer processes of a test (``writer_procs.Procs``), every one killed at teardown."""
    ps = Procs(tmp_path)
    try:
        yield ps
    finally:
        ps.kill_all()


# -- the after-test consistency check ----------------------------------------------------------------------

#: Stores with more commit-log bytes than this are not verified after their test (time: the suite's
#: stores are a few 64 KiB files; the few big ones check their own data).
VERIFY_MAX_BYTES = 4 << 20
#: Keys looked up in the index per store (all of them in most tests' stores).
VERIFY_INDEX_SAMPLE = 256
_GEOMETRY = ("mapped_file_size_commit_log", "mapped_file_size_consume_queue", "max_hash_slot_num",
             "max_index_num", "message_index_enable")


def _files_state(root: str) -> dict[str, tuple[int, int]]:
    state = {}
    for folder, _, names in os.walk(root):
        for n in names:
            p = os.path.join(folder, n)
            try:
                st = os.stat(p)
            except OSError:
                continue
            state[p] = (st.st_size, st.st_mtime_ns)
    return state


_watch: _StoreWatch | None = None  # the running test's


class _StoreWatch:
    """The writable stores a test shut down cleanly (root -> (config overrides, its files' state then)),
    and whether a StoreCorruptedError was raised during the test."""

    def __init__(self) -> None:
        self.roots: dict[str, tuple[dict[str, Any], dict[str, tuple[int, int]]]] = {}
        self.corruption_seen = False
        self.skip: set[str] = set()

    def shut_down(self, store: MessageStore) -> None:
        root = os.path.abspath(store.root)
        cfg = store.config
        inside = (cfg.commit_log_paths() == [os.path.join(store.root, "commitlog")]
                  and os.path.abspath(cfg.consume_queue_path()) == os.path.join(root, "consumequeue")
                  and os.path.abspath(cfg.index_path()) == os.path.join(root, "index"))
        if not inside or os.path.exists(cfg.abort_path()):
            self.roots.pop(root, None)          # an unclean shutdown, or a layout verify does not read
            return
        self.roots[root] = ({k: getattr(cfg, k) for k in _GEOMETRY}, _files_state(root))

    def problems(self) -> list[str]:
        from pystore.engine.verify import verify_store

        found = []
        for root, (over, state) in self.roots.items():
            if root in self.skip or not os.path.isdir(os.path.join(root, "commitlog")):
                continue
            if os.path.exists(os.path.join(root, "abort")) or _files_state(root) != state:
                continue                        # opened again, or its files changed after the shutdown
            cl = os.path.join(root, "commitlog")
            if sum(os.path.getsize(os.path.join(cl, n)) for n in os.listdir(cl)) > VERIFY_MAX_BYTES:
                continue
            report = verify_store(root, index_sample=VERIFY_INDEX_SAMPLE, max_problems=10, **over)
            if not report.ok:
                found.append("%s: %s" % (root, "; ".join(str(p) for p in report.problems)))
        return found


#: Tests whose stores verify finds inconsistent through no fault of the test, left unchecked until the core
#: is fixed (their files are not ours to mark); node id -> why.
KNOWN_INCONSISTENT: dict[str, str] = {}


@pytest.fixture(autouse=True)
def _verify_stores_after_test(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    if (request.node.get_closest_marker("no_verify") or request.node.nodeid in KNOWN_INCONSISTENT
            or os.environ.get("PYSTORE_TEST_NO_VERIFY")):  # to time the suite without the check
        yield
        return
    global _watch
    watch = _watch = _StoreWatch()
    shutdown = MessageStore.shutdown
    corrupted_init = StoreCorruptedError.__init__

    def watched_shutdown(self: MessageStore) -> None:
        started = getattr(self, "_state", None) == store_module._STARTED and not self.read_only
        shutdown(self)
        if started:
            watch.shut_down(self)

    def watched_corruption(self: StoreCorruptedError, *args: Any, **kwargs: Any) -> None:
        watch.corruption_seen = True
        corrupted_init(self, *args, **kwargs)

    monkeypatch.setattr(MessageStore, "shutdown", watched_shutdown)
    monkeypatch.setattr(StoreCorruptedError, "__init__", watched_corruption)
    try:
        yield
    finally:
        _watch = None
    # fixtures the test used (store_factory) are torn down by now: their stores are shut down
    monkeypatch.setattr(MessageStore, "shutdown", shutdown)
    monkeypatch.setattr(StoreCorruptedError, "__init__", corrupted_init)
    if watch.corruption_seen or not watch.roots:
        return
    found = watch.problems()
    if found:
        pytest.fail("verify after the test found problems:\n" + "\n".join(found), pytrace=False)
