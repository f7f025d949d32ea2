"""The geometry of a store on disk read back from its files (``pystore.log.geometry``): index file sizes to
(slots, entries), and the overrides that open a store of unknown configuration in its own geometry."""

from __future__ import annotations

import logging
import os

import pytest
from conftest import make_message

from pystore.log.geometry import detect_overrides, index_geometry


@pytest.mark.parametrize("slots", [1, 1000, 5_000_000])
def test_index_geometry_of_a_file_with_four_entries_per_slot(slots):
    assert index_geometry(40 + slots * 4 + slots * 4 * 20) == (slots, slots * 4)


def test_rocketmqs_default_index_file():
    assert index_geometry(40 + 5_000_000 * 4 + 20_000_000 * 20) == (5_000_000, 20_000_000)


@pytest.mark.parametrize("size", [0, 40, 41, 40 + 84 + 1, 40 + 4 * 10 + 20 * 10, -84])
def test_index_geometry_of_a_size_that_does_not_fit_the_ratio(size):
    assert index_geometry(size) is None


def test_an_empty_or_missing_folder_has_no_overrides(tmp_path):
    assert detect_overrides(tmp_path) == {}
    assert detect_overrides(tmp_path / "absent") == {}


def test_a_store_is_read_back_in_its_own_geometry(store_factory):
    store = store_factory(mapped_file_size_commit_log=32 * 1024, mapped_file_size_consume_queue=50 * 20,
                          max_hash_slot_num=100, max_index_num=400)
    for i in range(10):
        store.put_message(make_message(i, keys=["k%d" % i]))
    store.shutdown()
    store_factory.expect_messages(10)
    assert detect_overrides(store_factory.path()) == {
        "mapped_file_size_commit_log": 32 * 1024,
        "mapped_file_size_consume_queue": 50 * 20,
        "max_hash_slot_num": 100,
        "max_index_num": 400,
    }


def _file(path, size):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.truncate(size)


def test_empty_files_are_skipped_and_the_first_sized_one_counts(tmp_path):
    _file(tmp_path / "commitlog" / ("%020d" % 0), 0)
    _file(tmp_path / "commitlog" / ("%020d" % 4096), 4096)
    _file(tmp_path / "commitlog" / "not-a-file-name", 999)
    assert detect_overrides(tmp_path) == {"mapped_file_size_commit_log": 4096}


def test_a_consume_queue_size_that_is_not_whole_units_is_not_taken(tmp_path):
    _file(tmp_path / "consumequeue" / "T" / "0" / ("%020d" % 0), 1001)
    assert detect_overrides(tmp_path) == {}
    _file(tmp_path / "consumequeue" / "T" / "0" / ("%020d" % 0), 1000)
    assert detect_overrides(tmp_path) == {"mapped_file_size_consume_queue": 1000}


def test_index_files_of_several_sizes_give_no_index_override_and_a_warning(tmp_path, caplog):
    _file(tmp_path / "index" / "20240101000000000", 40 + 84 * 10)
    assert detect_overrides(tmp_path) == {"max_hash_slot_num": 10, "max_index_num": 40}
    _file(tmp_path / "index" / "20240101000000001", 40 + 84 * 20)
    with caplog.at_level(logging.WARNING, logger="pystore.log.geometry"):
        assert detect_overrides(tmp_path) == {}
    assert "several sizes" in caplog.text


def test_an_index_size_off_the_ratio_gives_no_override(tmp_path):
    _file(tmp_path / "index" / "20240101000000000", 40 + 4 * 10 + 20 * 10)
    assert detect_overrides(tmp_path) == {}
