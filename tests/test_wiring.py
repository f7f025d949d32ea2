"""``pystore.engine.parts`` and ``pystore.engine.wiring`` on their own, without ``MessageStore``: the parts
``open_parts`` opens and recovers (and what it refuses), the services ``wire_writer`` builds for each
configuration and hooks into the commit log, ``close_writer``'s clean shutdown (the abort file goes only when
everything is on disk), ``dispatch_behind``, ``pool_enabled`` and ``delete_store``. The store's lifecycle over
them is in test_store_lifecycle.py."""

from __future__ import annotations

import os
import shutil
from typing import Any

import pytest
from conftest import SMALL_FILE, SMALL_INDEX, make_message

from pystore import StoreConfig
from pystore.config import BrokerRole, FlushDiskType
from pystore.engine.checkpoint import AbortFile, StoreLock
from pystore.engine.parts import StoreParts, delete_store, open_parts
from pystore.engine.wiring import Writer, close_writer, dispatch_behind, pool_enabled, wire_writer
from pystore.errors import StoreCorruptedError, StoreLockedError
from pystore.log.flush import FlushRealTimeService, GroupCommitService, flush_all
from pystore.system.running_flags import RunningFlags
from pystore.system.service import real_clock


def config(root: Any, **overrides: Any) -> StoreConfig:
    for key, value in SMALL_INDEX.items():
        overrides.setdefault(key, value)
    overrides.setdefault("mapped_file_size_commit_log", SMALL_FILE)
    return StoreConfig(store_path_root_dir=str(root), **overrides)


def opened(cfg: StoreConfig, last_exit_ok: bool = True) -> StoreParts:
    parts, error = open_parts(cfg, last_exit_ok=last_exit_ok, running_flags=RunningFlags(), clock=real_clock,
                              injected_clock=None)
    assert parts is not None and error is None
    return parts


class Started:
    """A writer's services around ``parts``, as ``MessageStore.start`` runs them, and its shutdown."""

    def __init__(self, parts: StoreParts, cfg: StoreConfig) -> None:
        self.parts, self.cfg = parts, cfg
        self.lock = StoreLock(cfg.lock_path())
        self.abort = AbortFile(cfg.abort_path())
        self.flags = RunningFlags()
        self.writer: Writer = wire_writer(parts, cfg, lock=self.lock, abort=self.abort, running_flags=self.flags,
                                          clock=real_clock, disk_usage=shutil.disk_usage)
        self.writer.start()
        parts.commitlog.writeable = cfg.broker_role != BrokerRole.SLAVE

    def stop(self) -> None:
        self.parts.commitlog.writeable = False
        self.writer.stop_appends()
        for s in reversed(self.writer.services):
            s.shutdown()
        close_writer(self.parts, self.writer, abort=self.abort, running_flags=self.flags)
        self.parts.close()
        if self.writer.pool is not None:
            self.writer.pool.destroy()
        self.lock.release()


def test_open_parts_of_an_empty_folder(tmp_path):
    cfg = config(tmp_path / "s")
    os.makedirs(cfg.store_path_root_dir)
    parts = opened(cfg)
    try:
        assert parts.recovery is not None and parts.recovery.process_offset == 0
        assert parts.index is not None and parts.dispatcher is not None and parts.reput is not None
        assert parts.reput.reput_from == 0 and len(parts.cq_store) == 0
        assert parts.checkpoint.auto_flush_ms > 0          # a writer's checkpoint writes itself
        assert dispatch_behind(parts, None) == 0
    finally:
        parts.close()
    cfg2 = config(tmp_path / "s", message_index_enable=False)
    parts = opened(cfg2)
    try:
        assert parts.index is None and parts.dispatcher is not None and parts.dispatcher.index is None
    finally:
        parts.close()


@pytest.mark.no_verify
def test_open_parts_refuses_a_commit_log_with_a_hole(store_factory):
    store = store_factory()
    i = 0
    while store.get_max_phy_offset() < 3 * SMALL_FILE:          # three whole files and part of a fourth
        assert store.put_message(make_message(i, body_size=4000)).is_ok()
        i += 1
    store.shutdown()
    store_factory.skip_check()
    folder = store.config.commit_log_paths()[0]
    middle = sorted(os.listdir(folder))[1]
    os.unlink(os.path.join(folder, middle))
    parts, error = open_parts(config(store.root), last_exit_ok=True, running_flags=RunningFlags(), clock=real_clock,
                              injected_clock=None)
    assert parts is None and isinstance(error, StoreCorruptedError)
    assert error.path == os.path.join(folder, middle) and error.offset == int(middle)


def test_recovery_rebuilds_the_queues_and_index_from_the_commit_log(store_factory):
    store = store_factory()
    results = [store.put_message(make_message(i, keys="k%d" % i)) for i in range(20)]
    store.shutdown()
    store_factory.expect_messages(20)
    cfg = config(store.root)
    shutil.rmtree(cfg.consume_queue_path())
    shutil.rmtree(cfg.index_path())
    parts = opened(cfg, last_exit_ok=False)            # abnormal: dispatch from the log's head
    try:
        cq = parts.cq_store.find("TopicTest", 0)
        assert cq is not None and cq.get_max_offset_in_queue() == 20
        assert cq.unit(7)[0] == results[7].wrote_offset
        assert parts.reput is not None and parts.reput.reput_from == results[-1].next_offset
        assert parts.commitlog.get_cell("TopicTest", 0).next_offset == 20
        assert parts.index is not None
        found = parts.index.query_messages(parts.commitlog, "TopicTest", "k7", 32, 0, 2**63 - 1)
        assert [m.commit_log_offset for m in found.messages] == [results[7].wrote_offset]
    finally:
        parts.close()


@pytest.mark.parametrize("flush, role, pool, inline, flush_type", [
    (FlushDiskType.ASYNC_FLUSH, BrokerRole.ASYNC_MASTER, False, True, FlushRealTimeService),
    (FlushDiskType.ASYNC_FLUSH, BrokerRole.ASYNC_MASTER, True, False, FlushRealTimeService),
    (FlushDiskType.SYNC_FLUSH, BrokerRole.ASYNC_MASTER, False, False, GroupCommitService),
    (FlushDiskType.ASYNC_FLUSH, BrokerRole.SLAVE, False, False, FlushRealTimeService),
    (FlushDiskType.SYNC_FLUSH, BrokerRole.SLAVE, False, False, GroupCommitService),
])
def test_wire_writer_by_configuration(tmp_path, flush, role, pool, inline, flush_type):
    cfg = config(tmp_path / "s", flush_disk_type=flush, broker_role=role, transient_store_pool_enable=pool,
                 transient_store_pool_size=2, ha_master_address="127.0.0.1:1" if role == BrokerRole.SLAVE else None)
    os.makedirs(cfg.store_path_root_dir)
    started = Started(opened(cfg), cfg)
    w, cl = started.writer, started.parts.commitlog
    try:
        assert w.inline_dispatch is inline and isinstance(w.flush_service, flush_type)
        assert (cl.dispatcher is started.parts.dispatcher) is inline
        assert (w.pool is not None) is pool and (w.schedule is None) is (role == BrokerRole.SLAVE)
        assert (w.ha_client is not None) is (role == BrokerRole.SLAVE) and w.ha is None
        assert w.put_waits.blocking is (flush == FlushDiskType.SYNC_FLUSH)
        assert os.path.exists(cfg.abort_path()) and started.lock.held
        if role != BrokerRole.SLAVE:
            r = cl.put_message(make_message(0))
            assert r.is_ok()
            flush_all(cl.queue)                             # as MessageStore.flush: commit, flush, dispatch
            w.catch_up(started.parts)
            assert dispatch_behind(started.parts, w) == 0
            assert started.parts.cq_store.find("TopicTest", 0).get_max_offset_in_queue() == 1
    finally:
        started.stop()
    assert not os.path.exists(cfg.abort_path())           # everything on disk: a clean shutdown


def test_dispatch_behind_counts_what_dispatch_has_yet_to_reach(store_factory):
    store = store_factory()
    results = [store.put_message(make_message(i)) for i in range(5)]
    store.shutdown()
    store_factory.expect_messages(5)
    parts = opened(config(store.root))
    try:
        assert parts.reput is not None and parts.reput.reput_from == results[-1].next_offset
        assert dispatch_behind(parts, None) == 0
        parts.reput.reput_from = results[2].wrote_offset
        assert dispatch_behind(parts, None) == results[-1].next_offset - results[2].wrote_offset
    finally:
        parts.close()
    reader = opened(config(store.root, read_only=True))
    try:
        reader_reput = reader.reput
        assert reader_reput is not None
        reader_reput.reput_from = 0
        assert dispatch_behind(reader, None) == 0              # a reader dispatches nothing
    finally:
        reader.close()
    assert dispatch_behind(None, None) == 0


def test_pool_enabled_only_for_an_async_flush_master_that_writes(tmp_path):
    def cfg(**kw: Any) -> StoreConfig:
        return config(tmp_path, transient_store_pool_enable=True, **kw)
    assert pool_enabled(cfg())
    assert not pool_enabled(config(tmp_path))
    assert not pool_enabled(cfg(flush_disk_type=FlushDiskType.SYNC_FLUSH))
    assert not pool_enabled(cfg(broker_role=BrokerRole.SLAVE))
    assert not pool_enabled(cfg(read_only=True))


def test_delete_store_removes_the_store_and_never_one_another_writer_holds(store_factory):
    store = store_factory()
    assert store.put_message(make_message(0)).is_ok()
    with pytest.raises(StoreLockedError):
        delete_store(store.config, unopened=False)
    assert os.path.isdir(store.config.commit_log_paths()[0])
    store.shutdown()
    keep = os.path.join(store.root, "notes.txt")
    with open(keep, "w") as f:
        f.write("not the store's")
    delete_store(store.config, unopened=False)
    assert os.listdir(store.root) == ["notes.txt"]          # the folder stays for what is not the store's
    os.unlink(keep)
    delete_store(store.config, unopened=True)
    assert not os.path.exists(store.root)
    delete_store(store.config, unopened=True)              # nothing there: nothing to do
