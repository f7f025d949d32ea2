"""The Spark source's planning helpers (``pystore.columns._arrow_plan``): record boundaries of a commit-log file about
every ``chunk`` bytes (``split_points``), the record boundaries consume queues point at (``queue_boundaries``),
whether a record starts at an offset (``record_size_at``), and a consume queue's min and max offsets from its
files (``queue_bounds``), compared with what the store itself says."""

from __future__ import annotations

import os

import numpy as np
from conftest import drop_commit_log_head, make_message

from pystore.columns._arrow_plan import queue_boundaries, queue_bounds, record_size_at, split_points, walk_to
from pystore.format._codec import RECORD_END
from pystore.log._mapped_file import MappedFile


def _fill(store, n, topic="TopicTest", queue_id=0):
    return [store.put_message(make_message(i, topic, queue_id, body=b"b%d" % i * 40)).append_message_result
            for i in range(n)]


def _queue_files(store, topic, queue_id):
    folder = os.path.join(store.config.consume_queue_path(), topic, str(queue_id))
    return [os.path.join(folder, n) for n in sorted(os.listdir(folder))]


def _filled_log(store_factory, n):
    """A store of ``n`` messages: their offsets, where their records end, and its first commit-log file."""
    store = store_factory()
    results = _fill(store, n)
    end = results[-1].wrote_offset + results[-1].wrote_bytes
    path = os.path.join(store.config.commit_log_paths()[0], "%020d" % 0)
    return [r.wrote_offset for r in results], end, MappedFile(path, -1, read_only=True)


def test_split_points_are_record_boundaries_about_every_chunk(store_factory):
    offsets, end, mf = _filled_log(store_factory, 40)
    try:
        starts, data_end, code = split_points(mf, 1000)
        assert starts[0] == 0 and set(starts) <= set(offsets)
        assert all(b - a >= 1000 for a, b in zip(starts, starts[1:]))
        assert len(starts) > 1
        assert (data_end, code) == (end, RECORD_END)
        assert split_points(mf, 0) == ([0], end, RECORD_END)            # one piece
        assert split_points(mf, 10**9) == ([0], end, RECORD_END)
    finally:
        mf.close()
    store_factory.expect_messages(40)


def test_queue_bounds_equal_the_stores_offsets(store_factory):
    store = store_factory(mapped_file_size_consume_queue=20 * 20)      # 20 units a file: several files
    _fill(store, 50, queue_id=1)
    files = _queue_files(store, "TopicTest", 1)
    assert len(files) >= 3
    assert queue_bounds(files, 0) == (0, 50)
    assert queue_bounds(files, store.get_commit_log_offset_in_queue("TopicTest", 1, 30)) == (30, 50)
    assert queue_bounds(files, store.get_max_phy_offset()) == (50, 50)
    store_factory.expect_messages(50)


def test_queue_bounds_of_no_files_or_empty_ones(tmp_path):
    assert queue_bounds([], 0) == (0, 0)
    empty = tmp_path / ("%020d" % 0)
    empty.write_bytes(b"")
    assert queue_bounds([str(empty)], 0) == (0, 0)


def test_queue_bounds_after_the_commit_log_head_was_deleted(store_factory):
    store = store_factory(mapped_file_size_commit_log=8 * 1024)
    _fill(store, 120)
    drop_commit_log_head(store)
    cl_min = store.get_min_phy_offset()
    assert cl_min > 0
    lo, hi = queue_bounds(_queue_files(store, "TopicTest", 0), cl_min)
    assert hi == 120
    assert store.get_commit_log_offset_in_queue("TopicTest", 0, lo) >= cl_min
    assert lo == 0 or store.get_commit_log_offset_in_queue("TopicTest", 0, lo - 1) < cl_min
    store_factory.skip_check()


def test_queue_boundaries_are_the_last_units_below_each_offset(store_factory):
    store = store_factory(mapped_file_size_consume_queue=20 * 20)      # 20 units a file: several files
    results: dict[int, list] = {0: [], 1: []}
    for i in range(70):
        q = i % 2
        results[q].append(store.put_message(make_message(i, "TopicTest", q, body=b"b%d" % i * 40))
                          .append_message_result)
    files = _queue_files(store, "TopicTest", 0)
    assert len(files) >= 2
    offs = [r.wrote_offset for r in results[0]]
    other = [r.wrote_offset for r in results[1]]
    xs = np.array([0, 1, offs[5], offs[5] + 1, other[20], offs[25], offs[-1], offs[-1] + 1, 10**12], dtype=np.int64)
    below = np.full(len(xs), -1, dtype=np.int64)
    end = queue_boundaries(files, xs, below)
    assert below.tolist() == [max((o for o in offs if o < x), default=-1) for x in xs.tolist()]
    assert end == results[0][-1].wrote_offset + results[0][-1].wrote_bytes
    one = np.full(1, -1, dtype=np.int64)                                # from the files given only
    assert queue_boundaries(files[1:], np.array([offs[21]], dtype=np.int64), one) == end and one[0] == offs[20]
    assert queue_boundaries(files[1:], np.array([offs[20]], dtype=np.int64), one) == end and one[0] == offs[20]
    none = np.full(1, -1, dtype=np.int64)
    queue_boundaries(files[1:], np.array([offs[20]], dtype=np.int64), none)
    assert none[0] == -1
    # a boundary already closer is kept: the closest over the queues asked
    high = np.array([offs[19] + 1], dtype=np.int64)
    queue_boundaries(files, np.array([offs[19] + 2], dtype=np.int64), high)
    assert high[0] == offs[19] + 1
    far = np.array([offs[18]], dtype=np.int64)
    queue_boundaries(files, np.array([offs[19] + 2], dtype=np.int64), far)
    assert far[0] == offs[19]
    b = np.full(2, -1, dtype=np.int64)
    assert queue_boundaries([], np.array([0, 5], dtype=np.int64), b) == -1 and b.tolist() == [-1, -1]
    store_factory.expect_messages(70)


def test_record_size_at_only_where_a_record_starts(store_factory):
    store = store_factory()
    results = _fill(store, 6)
    path = os.path.join(store.config.commit_log_paths()[0], "%020d" % 0)
    with open(path, "rb") as f:
        first = f.read(results[0].wrote_bytes)
    # a body carrying a whole copy of the first record: its header checks, its offset field names offset 0
    copy = store.put_message(make_message(6, body=first)).append_message_result
    store.flush()
    with open(path, "rb") as f:
        data = f.read(copy.wrote_offset + copy.wrote_bytes)
    inside = data.index(first, copy.wrote_offset)
    mf = MappedFile(path, -1, read_only=True)
    try:
        for r in results + [copy]:
            assert record_size_at(mf, r.wrote_offset) == r.wrote_bytes
        assert record_size_at(mf, inside) <= 0
        assert record_size_at(mf, results[1].wrote_offset + 4) <= 0
        assert record_size_at(mf, copy.wrote_offset + copy.wrote_bytes) <= 0  # past the data
        assert record_size_at(mf, -1) <= 0 and record_size_at(mf, mf.file_size) <= 0
    finally:
        mf.close()
    store_factory.expect_messages(7)


def test_walk_to_finds_the_first_record_at_or_after(store_factory):
    offs, end, mf = _filled_log(store_factory, 12)
    try:
        assert walk_to(mf, 0, offs[5]) == offs[5]
        assert walk_to(mf, offs[2], offs[5] - 1) == offs[5]
        assert walk_to(mf, offs[7], offs[5]) == offs[7]                  # already past it
        assert walk_to(mf, 0, mf.file_size) == end                         # where the records stop
    finally:
        mf.close()
    store_factory.expect_messages(12)
