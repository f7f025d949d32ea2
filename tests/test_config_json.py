"""The broker's ``config/*.json`` files (``pystore.consumer.config_json``; RocketMQ ``ConfigManager``,
``MixAll.string2File``): fastjson's bare integer keys, ``offsetTable`` only, the ``.bak`` fallback of a load
and the write that keeps the previous content as ``.bak``. Through the stores that use it:
test_consumer_offsets.py and test_schedule.py."""

from __future__ import annotations

import json
import os

import pytest

from pystore.consumer.config_json import load_config_file, offset_value, persist_config_file, read_offset_table
from pystore.errors import StoreError


def test_bare_and_quoted_integer_keys_read_alike():
    assert read_offset_table('{"offsetTable":{1:3,-2:0, 17 :9}}') == {"1": 3, "-2": 0, "17": 9}
    assert read_offset_table('{"offsetTable":{"1":3}}') == {"1": 3}


def test_only_the_offset_table_is_read():
    text = '{"dataVersion":{"counter":4,"timestamp":1},"offsetTable":{"T@g":{0:12}}}'
    assert read_offset_table(text) == {"T@g": {"0": 12}}
    assert read_offset_table('{"dataVersion":{}}') == {}


@pytest.mark.parametrize("text", ["[1,2]", "3", '{"offsetTable":[1]}', "{", "[" * 100_000])
def test_what_is_not_a_config_document_is_a_value_error(text):
    with pytest.raises(ValueError):
        read_offset_table(text)


def test_offset_value_takes_ints_only():
    assert offset_value(7, "x") == 7
    for bad in (True, 1.5, "3", None):
        with pytest.raises(ValueError, match="offset of T@g"):
            offset_value(bad, "T@g")


def test_persist_writes_the_text_and_keeps_the_previous_one_as_bak(tmp_path):
    path = str(tmp_path / "config" / "consumerOffset.json")      # the folder is made too
    persist_config_file(path, '{"offsetTable":{"a":1}}')
    assert open(path).read() == '{"offsetTable":{"a":1}}'
    assert not os.path.exists(path + ".bak")                      # nothing before
    persist_config_file(path, '{"offsetTable":{"a":2}}')
    assert open(path).read() == '{"offsetTable":{"a":2}}'
    assert open(path + ".bak").read() == '{"offsetTable":{"a":1}}'
    assert sorted(os.listdir(tmp_path / "config")) == ["consumerOffset.json", "consumerOffset.json.bak"]


def test_a_crash_before_the_rename_leaves_the_previous_file(tmp_path, monkeypatch):
    path = str(tmp_path / "delayOffset.json")
    persist_config_file(path, "old")

    def crash(src, dst):
        raise OSError("power cut")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError):
        persist_config_file(path, "new")
    assert open(path).read() == "old"                             # the file is old or new, never half


def _decode(text):
    return {k: offset_value(v, k) for k, v in read_offset_table(text).items()}


def test_load_reads_the_file(tmp_path):
    path = str(tmp_path / "f.json")
    persist_config_file(path, '{"offsetTable":{"a":1}}')
    persist_config_file(path, '{"offsetTable":{"a":2}}')
    assert load_config_file(path, _decode) == {"a": 2}


@pytest.mark.parametrize("damage", ["missing", "empty", "unparsable", "bad value"])
def test_load_falls_back_to_the_bak(tmp_path, damage):
    path = str(tmp_path / "f.json")
    persist_config_file(path, '{"offsetTable":{"a":1}}')
    persist_config_file(path, '{"offsetTable":{"a":2}}')
    if damage == "missing":
        os.unlink(path)
    else:
        with open(path, "w") as f:
            f.write({"empty": "", "unparsable": '{"offsetTable":{"a":', "bad value": '{"offsetTable":{"a":"x"}}'}[
                damage])
    assert load_config_file(path, _decode) == {"a": 1}


def test_load_of_nothing_is_none(tmp_path):
    path = str(tmp_path / "f.json")
    assert load_config_file(path, _decode) is None
    open(path, "w").close()
    open(path + ".bak", "w").close()
    assert load_config_file(path, _decode) is None


def test_a_bak_that_does_not_load_either_raises(tmp_path):
    path = str(tmp_path / "f.json")
    with open(path, "w") as f:
        f.write("{")
    with open(path + ".bak", "w") as f:
        f.write(json.dumps([1]))
    with pytest.raises(StoreError, match="its .bak cannot be loaded"):
        load_config_file(path, _decode)
