"""Disk use follows the data: a store's files take what was written plus a bounded window ahead of each
writer (``prefault_window_bytes``), not their full size; ``warm_mapped_file_enable`` alone takes whole files.

Sizes are ``st_blocks * 512`` (what ``du`` counts) on a file system that reports holes (``sparse_tmp``)."""

from __future__ import annotations

import os

import pytest

from pystore import Message, MessageBatch, MessageStore
from pystore.config import FlushDiskType
from pystore.index._index import PREFAULT_WINDOW as INDEX_WINDOW
from pystore.log._mapped_file import OS_PAGE_SIZE as PAGE

MiB = 1 << 20
WINDOW = 4 * MiB                # StoreConfig's default prefault_window_bytes
FIXED = 64 * 1024               # checkpoint, config files, the lock and abort files, extent blocks


def _allocated(path) -> int:
    total = 0
    for folder, _, names in os.walk(path):
        for name in names:
            total += os.stat(os.path.join(folder, name)).st_blocks * 512
    return total


def _put_small(store: MessageStore, n: int, keys: bool = False) -> int:
    """``n`` puts of 100-byte bodies; the bytes they took in the commit log."""
    wrote = 0
    for i in range(n):
        r = store.put_message(Message("Orders", b"x" * 100, tags="t", keys=["order-%d" % i] if keys else None))
        assert r.is_ok()
        wrote += r.append_message_result.wrote_bytes
    return wrote


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"flush_disk_type": FlushDiskType.SYNC_FLUSH},
        {"transient_store_pool_enable": True, "transient_store_pool_size": 2,
         "mapped_file_size_commit_log": 64 * MiB},
    ],
    ids=["async", "sync", "transient-pool"],
)
def test_a_store_of_2000_small_messages_takes_its_data_plus_the_windows(sparse_tmp, options):
    root = sparse_tmp / "s"
    with MessageStore.open(root, message_index_enable=False, **options) as store:
        cl_bytes = _put_small(store, 2000)
        live = _allocated(root)
    cq_bytes = 2000 * 20
    # the commit log: its records and one window; the next file made ahead: its first page; a consume queue:
    # its units and at most one window
    bound = cl_bytes + WINDOW + 2 * PAGE + cq_bytes + WINDOW + PAGE + FIXED
    assert live <= bound
    assert _allocated(root) <= bound                # (a 1 GiB commit-log file was allocated whole before)
    assert os.path.getsize(root / "commitlog" / ("%020d" % 0)) == options.get("mapped_file_size_commit_log", 1 << 30)


def test_the_window_is_honoured_ahead_of_each_writer(sparse_tmp):
    window = 256 * 1024
    root = sparse_tmp / "s"
    with MessageStore.open(root, prefault_window_bytes=window, message_index_enable=False) as store:
        for _ in range(40):
            store.put_messages(MessageBatch.from_bodies("Orders", [b"y" * 1000] * 50))
            cl = store._commitlog.queue.last()
            cq = store._cq_store.find("Orders", 0).queue.last()
            for mf in (cl, cq):
                assert mf.window == window
                # what is allocated ahead of the writer: at most the window and a page
                assert mf.wrote_position <= mf.reserved_position <= mf.wrote_position + window + PAGE
                path = mf.file_name
                assert os.stat(path).st_blocks * 512 <= mf.reserved_position + PAGE    # one extent block
        assert cl.wrote_position > 4 * window        # the writer went through several windows


@pytest.mark.parametrize("window", [256 * 1024, 16 * MiB])
def test_the_commit_log_keeps_half_its_window_and_more_allocated_ahead(sparse_tmp, window):
    with MessageStore.open(sparse_tmp / "s", prefault_window_bytes=window, message_index_enable=False) as store:
        for _ in range(20):
            _put_small(store, 500)
            cl = store._commitlog.queue.last()
            assert window // 2 <= cl.reserved_position - cl.wrote_position <= window + PAGE


def test_a_record_bigger_than_the_window_allocates_its_own_bytes(sparse_tmp):
    root = sparse_tmp / "s"
    body = bytes(range(256)) * 1024         # 256 KiB
    with MessageStore.open(root, prefault_window_bytes=64 * 1024, message_index_enable=False) as store:
        for _ in range(3):
            assert store.put_message(Message("Big", body)).is_ok()
        cl = store._commitlog.queue.last()
        assert cl.reserved_position >= cl.wrote_position
        for i in range(3):        # (one at a time: a get carries up to 256 KiB)
            assert [m.body for m in store.get_message("g", "Big", 0, i, 1).messages] == [body]
    assert _allocated(root / "commitlog") <= 3 * (len(body) + 256) + 64 * 1024 + 2 * PAGE


def test_the_index_takes_the_slot_pages_its_keys_use_and_a_window_of_entries(sparse_tmp):
    root = sparse_tmp / "s"
    with MessageStore.open(root) as store:
        _put_small(store, 2000, keys=True)
    (name,) = os.listdir(root / "index")
    path = root / "index" / name
    slots_end = 40 + 5_000_000 * 4
    with open(path, "rb") as f:
        table = f.read(slots_end)
    used_pages = {pos // PAGE for pos in range(40, slots_end, 4) if table[pos:pos + 4] != b"\0\0\0\0"}
    assert 0 < len(used_pages) < 4000     # two entries a message (its key and its UNIQ_KEY)
    # before: the whole 20 MB table was pre-faulted, so allocated, when the first key came
    entries = 2 * 2000 * 20
    assert _allocated(root / "index") <= (len(used_pages) + 1) * PAGE + entries + INDEX_WINDOW + 2 * PAGE


def test_warm_mapped_file_enable_takes_whole_commit_log_files(sparse_tmp):
    root = sparse_tmp / "s"
    size = 8 * MiB
    with MessageStore.open(root, warm_mapped_file_enable=True, mapped_file_size_commit_log=size,
                           message_index_enable=False) as store:
        _put_small(store, 100)
    assert os.stat(root / "commitlog" / ("%020d" % 0)).st_blocks * 512 >= size


def test_a_reopened_store_allocates_from_where_its_writer_resumes(sparse_tmp):
    root = sparse_tmp / "s"
    with MessageStore.open(root, message_index_enable=False) as store:
        _put_small(store, 2000)
    before = _allocated(root / "commitlog")
    with MessageStore.open(root, message_index_enable=False) as store:
        assert store._commitlog.queue.last().window == WINDOW
        second = _put_small(store, 2000)
    # the rest of the 1 GiB file stays a hole: the window moves on by what was written, a page more
    assert before < _allocated(root / "commitlog") <= before + second + 2 * PAGE
