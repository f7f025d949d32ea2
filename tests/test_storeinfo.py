"""What ``pystore inspect`` reports about a store folder (``pystore.engine.storeinfo.store_info``): queues and their
offsets, commit-log files, the abort file and whether its writer is alive, the dispatch lag, sizes; and
``iso_ms``. The command's output is tested in test_cli.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import make_message

from pystore.engine.storeinfo import iso_ms, store_info


def test_iso_ms():
    assert iso_ms(0) is None and iso_ms(-5) is None
    assert iso_ms(1) == "1970-01-01T00:00:00.001+00:00"
    assert iso_ms(1_700_000_000_123) == "2023-11-14T22:13:20.123+00:00"


def _filled(store_factory, n=60):
    store = store_factory()
    results = [store.put_message(make_message(i, topic="T%d" % (i % 2), queue_id=i % 3)) for i in range(n)]
    assert all(r.is_ok() for r in results)
    return store, results


def test_a_cleanly_closed_store(store_factory):
    store, results = _filled(store_factory)
    table = store.get_topic_queue_table()
    max_phy = store.get_max_phy_offset()
    first_ts = store.look_message_by_offset(0).store_timestamp
    store.shutdown()
    store_factory.expect_messages(60)
    info = store_info(store_factory.path())
    json.dumps(info)                                                  # plain data
    assert info["root"] == os.path.abspath(store_factory.path())
    assert info["abort"] == {"exists": False, "pid": None, "writer_alive": False}
    assert not info["unclean_shutdown"] and not info["writer_running"]
    assert info["topics"] == ["T0", "T1"]
    assert {(q["topic"], q["queue_id"]): q["max_offset"] for q in info["queues"]} == table
    assert sum(q["messages"] for q in info["queues"]) == 60
    assert all(q["min_offset"] == 0 and q["first_store_time"] and q["last_store_time"] for q in info["queues"])
    cl = info["commit_log"]
    assert cl["min_offset"] == 0 and cl["max_offset"] == max_phy
    assert cl["files"][0]["name"] == "%020d" % 0
    assert cl["files"][0]["first_store_timestamp"] == first_ts
    assert info["dispatch_behind_bytes"] == 0
    assert info["checkpoint"]["exists"]
    assert info["disk"]["bytes"]["commitlog"] == sum(f["size"] for f in cl["files"])
    assert info["read_only_view"]["valid_end"] == max_phy


def test_a_live_store_has_a_running_writer_not_an_unclean_shutdown(store_factory):
    store, _ = _filled(store_factory, 10)
    info = store_info(store_factory.path())
    assert info["abort"]["exists"] and info["writer_running"]
    assert not info["unclean_shutdown"]
    assert info["commit_log"]["max_offset"] == store.get_max_phy_offset()
    store_factory.expect_messages(10)


def test_an_abort_file_whose_writer_is_gone_is_an_unclean_shutdown(store_factory):
    _filled(store_factory, 10)
    store_factory.close_all()
    store_factory.expect_messages(10)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)
    with open(store_factory.path() / "abort", "w") as f:
        f.write(str(pid))
    info = store_info(store_factory.path())
    assert info["abort"] == {"exists": True, "pid": pid, "writer_alive": False}
    assert info["unclean_shutdown"] and not info["writer_running"]


def test_an_empty_store(store_factory):
    store_factory().shutdown()
    info = store_info(store_factory.path())
    assert info["queues"] == [] and info["topics"] == []
    assert info["dispatch_behind_bytes"] == 0
    assert info["commit_log"]["max_offset"] == 0
