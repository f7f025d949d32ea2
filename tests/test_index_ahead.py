"""The index kept ahead of its writer, off the put path: the next file made before the newest fills (a spare
beside the folder, renamed into it by the compiled writer: no Python call on the put path), full files flushed
by one service thread, and the hash slot table pre-faulted by the prefault worker once a file holds as many
entries as the table has pages."""

from __future__ import annotations

import collections
import os
import struct
import time

import pytest

import pystore.index.service as index_module
from pystore import Message, MessageStore
from pystore.index._index import index_keys, key_hash
from pystore.index.service import SPARE_NAME, IndexFileService, IndexService
from pystore.log._warm import prefault_stats

T0 = 1_700_000_000_000
SLOTS = 97


class _Checkpoint:
    index_msg_timestamp = 0

    def flush(self) -> None:
        pass


def _keys(lo: int, hi: int) -> bytes:
    return b"KEYS\x01" + " ".join("k%d" % i for i in range(lo, hi)).encode()


def _no_python_file(*args: object) -> None:
    raise AssertionError("the writer called its new_file hook (IndexService._new_file)")


def _entries(path: str) -> list[tuple[int, int]]:
    data = open(path, "rb").read()
    count = struct.unpack_from(">i", data, 36)[0]
    base = 40 + SLOTS * 4
    return [struct.unpack_from(">iq", data, base + n * 20) for n in range(1, count)]


@pytest.fixture
def service(tmp_path):
    clock = [T0]
    s = IndexService(str(tmp_path / "index"), SLOTS, 64, _Checkpoint(), clock=lambda: clock[0])
    yield s
    s.close()


def test_no_spare_before_the_newest_is_half_full(service, tmp_path):
    assert not service.prepare_next()                    # no file yet
    index_keys(service.core, b"T", _keys(0, 30), 5, T0, 0)     # 30 entries of 63
    assert not service.prepare_next()
    assert not (tmp_path / SPARE_NAME).exists()
    index_keys(service.core, b"T", _keys(30, 32), 6, T0, 0)    # the count (the next free entry) reaches 32 of 64
    assert service.prepare_next() and not service.prepare_next()
    assert (tmp_path / SPARE_NAME).stat().st_size == os.path.getsize(service.files[0].mapped_file.file_name)
    assert os.listdir(tmp_path / "index") == [os.path.basename(service.files[0].mapped_file.file_name)]


def test_the_writer_takes_the_spare_without_python(service, tmp_path):
    index_keys(service.core, b"T", _keys(0, 40), 5, T0, 0)
    assert service.prepare_next()
    name = service._spare_name
    service.core.new_file = _no_python_file                  # the put path must not come here
    index_keys(service.core, b"T", _keys(40, 70), 9, T0 + 3000, 0)
    first, second = service.files
    assert second.mapped_file.file_name == name and os.path.basename(name) in os.listdir(tmp_path / "index")
    assert name > first.mapped_file.file_name
    assert not (tmp_path / SPARE_NAME).exists() and service._spare is None
    assert [f.index_count for f in service.files] == [64, 8]
    # the new file starts from the full one's end values, as a file made by Python does
    begin_ts, end_ts, begin_phy, end_phy = struct.unpack_from(">qqqq", open(name, "rb").read(), 0)
    assert (begin_ts, begin_phy, end_phy) == (T0 + 3000, 9, 9)
    assert [h for h, _ in _entries(name)] == [key_hash("T#k%d" % i) for i in range(63, 70)]
    assert service._full == [first]
    assert [len(service.query_offset("T", "k%d" % i, 4, 0, T0 + 10_000).phy_offsets) for i in (0, 62, 63, 69)] == \
        [1, 1, 1, 1]


def test_without_a_spare_python_makes_the_file_and_wakes_the_service(service):
    woken = []
    service.wake = lambda: woken.append(1)
    index_keys(service.core, b"T", _keys(0, 70), 5, T0, 0)
    assert [f.index_count for f in service.files] == [64, 8] and woken == [1]
    assert service.flush_full() == 1 and service.checkpoint.index_msg_timestamp == T0


def test_a_failed_flush_keeps_the_file_and_the_index_time(service, monkeypatch):
    index_keys(service.core, b"T", _keys(0, 70), 5, T0, 0)
    index_keys(service.core, b"T", _keys(70, 140), 6, T0 + 5000, 0)
    first = service._full[0]
    assert len(service._full) == 2
    real, calls = index_module.fsync_dir, []

    def fails_once(path):
        calls.append(path)
        if len(calls) == 1:
            raise OSError(5, "Input/output error")
        real(path)

    monkeypatch.setattr(index_module, "fsync_dir", fails_once)
    # the first file fails: the second must not move the index time past the first's entries
    assert service.flush_full() == 0 and len(calls) == 1
    assert service.checkpoint.index_msg_timestamp == 0 and service._full[0] is first
    assert service.flush_full() == 2 and service._full == []
    assert service.checkpoint.index_msg_timestamp == T0 + 5000


def test_a_failed_rename_leaves_the_file_to_python(service, tmp_path):
    index_keys(service.core, b"T", _keys(0, 40), 5, T0, 0)
    assert service.prepare_next()
    service._spare_name = str(tmp_path / "gone" / "20990101000000000")     # no such folder: rename fails
    index_keys(service.core, b"T", _keys(40, 70), 9, T0, 0)
    assert [f.index_count for f in service.files] == [64, 8]
    assert service._spare is None and not (tmp_path / SPARE_NAME).exists()
    assert sorted(os.listdir(tmp_path / "index")) == [os.path.basename(f.mapped_file.file_name) for f in service.files]


def test_close_deletes_an_unused_spare_and_load_a_leftover_one(tmp_path):
    s = IndexService(str(tmp_path / "index"), SLOTS, 64, _Checkpoint(), clock=lambda: T0)
    index_keys(s.core, b"T", _keys(0, 63), 5, T0, 0)     # full: 63 entries of 63
    assert s.prepare_next()
    s.close()
    assert not (tmp_path / SPARE_NAME).exists()
    s = IndexService(str(tmp_path / "index"), SLOTS, 64, _Checkpoint(), clock=lambda: T0)
    assert s.load(True)
    assert s.prepare_next()
    s.files[0].mapped_file.close()                        # a crash: the spare stays
    s._spare.mapped_file.close()
    assert (tmp_path / SPARE_NAME).exists()
    covered = _Checkpoint()
    covered.index_msg_timestamp = T0                      # the full file was flushed: an abnormal load keeps it
    s = IndexService(str(tmp_path / "index"), SLOTS, 64, covered, clock=lambda: T0)
    assert s.load(False)
    assert not (tmp_path / SPARE_NAME).exists() and [f.index_count for f in s.files] == [64]
    reader = IndexService(str(tmp_path / "index"), SLOTS, 64, _Checkpoint(), read_only=True)
    assert s.prepare_next()
    assert reader.load(True) and (tmp_path / SPARE_NAME).exists()    # a reader leaves the writer's spare alone
    reader.close()
    s.close()


def test_the_service_makes_the_spare_and_flushes_full_files(service):
    svc = IndexFileService(service, interval_ms=10)
    svc.start()
    try:
        index_keys(service.core, b"T", _keys(0, 70), 5, T0, 0)   # fills the first file: Python makes the second
        deadline = time.monotonic() + 30
        while (service._full or service._spare is None) and time.monotonic() < deadline:
            index_keys(service.core, b"T", _keys(0, 1), 6, T0, 0)
            time.sleep(0.01)
        assert service._full == [] and service.checkpoint.index_msg_timestamp == T0
        assert service._spare is not None and service.files[-1].index_count >= 32
    finally:
        svc.shutdown()
    assert service.wake is None


def test_a_store_switches_files_on_the_put_path_without_python(tmp_path):
    with MessageStore.open(tmp_path / "s", max_hash_slot_num=SLOTS, max_index_num=64) as store:
        for i in range(40):
            assert store.put_message(Message("T", b"m%d" % i, keys="k%d" % i)).is_ok()
        store.flush()                                   # the index builder writes the entries
        index = store._index
        deadline = time.monotonic() + 30
        while index._spare is None and time.monotonic() < deadline:
            time.sleep(0.01)
        index.core.new_file = _no_python_file
        for i in range(40, 70):
            assert store.put_message(Message("T", b"m%d" % i, keys="k%d" % i)).is_ok()
        store.flush()
        assert len(index.files) == 2
        index.core.new_file = index._new_file
    with MessageStore.open(tmp_path / "s", max_hash_slot_num=SLOTS, max_index_num=64) as store:
        for i in (0, 62, 69):
            assert [m.body for m in store.query_message("T", "k%d" % i).messages] == [b"m%d" % i]
    assert not (tmp_path / "s" / SPARE_NAME).exists()


def test_the_slot_table_is_prefaulted_once_a_file_holds_as_many_entries_as_it_has_pages(sparse_tmp):
    """1M slots: a 4 MB table of 977 pages. Below 977 entries only the pages keys touched are allocated; from
    there the prefault worker takes them all (and the blocks under them)."""
    slots, pages = 1_000_000, (40 + 4_000_000 + 4095) // 4096
    s = IndexService(str(sparse_tmp / "index"), slots, 4 * slots, _Checkpoint(), clock=lambda: T0)
    try:
        index_keys(s.core, b"T", _keys(0, pages - 2), 5, T0, 0)
        path = s.files[0].mapped_file.file_name

        def slot_table_allocated() -> int:
            # the data extents below the end of the slot table
            fd = os.open(path, os.O_RDONLY)
            try:
                pos = total = 0
                while pos < 40 + 4 * slots:
                    try:
                        pos = os.lseek(fd, pos, os.SEEK_DATA)
                    except OSError:
                        break
                    end = min(os.lseek(fd, pos, os.SEEK_HOLE), 40 + 4 * slots)
                    total += max(0, end - pos)
                    pos = end
                return total
            finally:
                os.close(fd)

        def settled() -> None:
            deadline = time.monotonic() + 60
            while prefault_stats()["pending"] and time.monotonic() < deadline:
                time.sleep(0.01)

        settled()
        if not prefault_stats()["supported"]:
            pytest.skip("no MADV_POPULATE_WRITE on this kernel")
        assert slot_table_allocated() < pages * 4096 // 2
        index_keys(s.core, b"T", _keys(pages, pages + 2), 6, T0, 0)    # the count reaches the page count
        settled()
        assert slot_table_allocated() >= 40 + 4 * slots - 4096
    finally:
        s.close()


def test_a_reader_finds_keys_in_a_file_taken_from_the_spare(service, tmp_path):
    index_keys(service.core, b"T", _keys(0, 40), 5, T0, 0)
    service.flush()
    reader = IndexService(str(tmp_path / "index"), SLOTS, 64, _Checkpoint(), read_only=True)
    try:
        assert reader.load(True)
        assert service.prepare_next()
        reader.refresh_read_only()
        assert len(reader.files) == 1                     # the spare is not in the folder
        index_keys(service.core, b"T", _keys(40, 70), 9, T0 + 3000, 0)
        reader.refresh_read_only()
        assert [f.index_count for f in reader.files] == [64, 8]
        for i, phy in ((0, 5), (62, 9), (69, 9)):
            assert reader.query_offset("T", "k%d" % i, 4, 0, T0 + 10_000).phy_offsets == [phy]
    finally:
        reader.close()


Usage = collections.namedtuple("Usage", "total used free")


@pytest.mark.parametrize("answer, made", [
    (Usage(10**12, 10**12 - 1000, 1000), False),      # 1000 bytes free: less than a file
    (Usage(10**12, 0, 10**12), True),
    (1.0, False),                                       # a used-fraction hook: full
    (0.5, True),                                        # not full; it says no byte count
], ids=["few-bytes", "room", "ratio-full", "ratio-half"])
def test_a_new_file_asks_the_store_disk_usage(store_factory, answer, made):
    """The free-space check before a new (sparse) index file asks the store's ``disk_usage``, as cleaning does:
    a store whose injected disk is full makes no index file, whatever the machine's own disk has free."""
    asked = []

    def disk_usage(path):
        asked.append(path)
        return answer

    s = store_factory(disk_usage=disk_usage)
    assert s.put_message(Message("T", b"m", keys=["k1"])).is_ok()
    found = s.query_message("T", "k1").messages
    folder = os.path.join(s.root, "index")
    files = os.listdir(folder) if os.path.isdir(folder) else []
    assert (len(files) == 1 and [m.body for m in found] == [b"m"]) if made else (files == [] and found == [])
    assert folder in asked
    store_factory.expect_messages(1)


def test_the_index_service_takes_the_injected_disk_usage(tmp_path):
    s = IndexService(str(tmp_path / "index"), SLOTS, 64, _Checkpoint(), clock=lambda: T0,
                     disk_usage=lambda path: Usage(10**12, 10**12, 0))
    try:
        index_keys(s.core, b"T", _keys(0, 4), 5, T0, 0)
        assert s.files == [] and not os.listdir(tmp_path / "index")
    finally:
        s.close()


def _crashed_with_a_second_file(tmp_path, torn: bool) -> list[str]:
    """A full file flushed (the checkpoint's index time is its end) and a second one, not full, whose entries
    share that millisecond; the process dies without closing them."""
    cp = _Checkpoint()
    s = IndexService(str(tmp_path / "index"), SLOTS, 64, cp, clock=lambda: T0)
    index_keys(s.core, b"T", _keys(0, 63), 5, T0, 0)
    index_keys(s.core, b"T", _keys(63, 73), 6, T0, 0)     # the second file: 10 entries, end time T0 too
    assert [f.index_count for f in s.files] == [64, 11]
    assert s.flush_full() == 1 and cp.index_msg_timestamp == T0 == s.files[1].end_timestamp
    names = [f.mapped_file.file_name for f in s.files]
    for f in s.files:
        f.mapped_file.close()
    if torn:                                              # a cut kept its entries but not its header's page
        with open(names[1], "r+b") as fh:
            fh.write(bytes(40))
    return names


@pytest.mark.parametrize("torn", [False, True], ids=["same-ms", "torn-header"])
def test_an_abnormal_load_drops_a_file_not_full_that_the_index_time_seems_to_cover(tmp_path, torn):
    """RocketMQ keeps a file whose end time is not past the checkpoint's index time; that time only moves when
    a full file is flushed, so a file not full is dropped (dispatch rebuilds it from the log) however its
    header reads: kept, its entries past the header's count would sit on no chain."""
    full, second = _crashed_with_a_second_file(tmp_path, torn)
    cp = _Checkpoint()
    cp.index_msg_timestamp = T0
    s = IndexService(str(tmp_path / "index"), SLOTS, 64, cp, clock=lambda: T0)
    assert s.load(False)
    assert [f.mapped_file.file_name for f in s.files] == [full] and not os.path.exists(second)
    assert s.last_end_phy_offset() == 5                   # dispatch re-indexes from the kept file's end
    s.close()


def test_a_normal_load_keeps_the_file_not_full(tmp_path):
    full, second = _crashed_with_a_second_file(tmp_path, torn=False)
    s = IndexService(str(tmp_path / "index"), SLOTS, 64, _Checkpoint(), clock=lambda: T0)
    assert s.load(True)
    assert [f.mapped_file.file_name for f in s.files] == [full, second] and s.files[1].index_count == 11
    s.close()


def test_the_cleaner_never_drops_the_file_the_writer_takes_meanwhile(tmp_path):
    # The writer takes the spare into the list of files in C, without a lock of Python's; the cleaner replaces
    # the list under its own lock. Were the cleaner to read the list and store a new one in Python code, a
    # take in between would be lost: the file being written would drop out of the list (its keys not found,
    # never flushed, lost after a crash once the checkpoint's index time passed them). The writer is run at
    # every point of Python code the cleaner passes (each event a tracer sees), a round for each.
    import sys
    import threading

    def round_(k: int) -> bool:
        clock = [T0]
        s = IndexService(str(tmp_path / ("r%d" % k) / "index"), SLOTS, 64, _Checkpoint(), clock=lambda: clock[0])
        s.load(True)
        index_keys(s.core, b"T", _keys(0, 63), 100, T0, 0)            # A: full, every entry below 150
        index_keys(s.core, b"T", _keys(63, 103), 200, T0 + 1000, 0)   # B: past half full
        assert s.prepare_next()
        spare = s._spare_name
        s.core.new_file = _no_python_file                           # the writer takes the spare, in C

        def writer() -> None:                                       # B full, then 7 keys into the spare
            index_keys(s.core, b"T", _keys(1000, 1030), 300, T0 + 3000, 0)

        events = [0]
        ran = threading.Event()

        def run_writer() -> None:
            t = threading.Thread(target=writer)
            t.start()
            t.join(30)
            assert not t.is_alive(), "the writer waited for the cleaner"
            ran.set()

        def tracer(frame, event, arg):  # type: ignore[no-untyped-def]
            if event in ("call", "line") and not ran.is_set():
                events[0] += 1
                if events[0] == k:
                    run_writer()
            return tracer

        s.flush_full()
        sys.settrace(tracer)
        try:
            gone = s.delete_expired_file(150)
        finally:
            sys.settrace(None)
        during = ran.is_set()
        if not during:
            run_writer()                                            # past the cleaner's last event: the last round
        try:
            assert gone == 1
            names = [f.mapped_file.file_name for f in s.files]
            assert names[-1] == spare, (k, [os.path.basename(n) for n in names])
            assert sorted(os.path.basename(n) for n in names) == sorted(os.listdir(tmp_path / ("r%d" % k) / "index"))
            assert s.query_offset("T", "k1025", 10, 0, 2 ** 62).phy_offsets == [300]
        finally:
            s.close()
        return during

    k = 1
    while round_(k):
        k += 1
        assert k < 500
    assert k > 3, k                                                 # the cleaner ran Python code: rounds were tried
