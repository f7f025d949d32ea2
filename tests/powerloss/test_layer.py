"""Self-tests of the power-cut FUSE layer (``fuse_server.py``, ``powercut.py``): what survives a crash under
each crash mode and metadata model. Each test mounts its own layer (about 0.1 s). A layer that kept
everything, or nothing, fails them: every test checks both what must be gone and what must stay.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from .ack_writer import RECORD, record
from .powercut import PowerCutFS, is_mounted

pytestmark = pytest.mark.powerloss

MODELS = ("journal", "strict")


def write_file(path: Path, data: bytes, sync: bool, offset: int = 0) -> None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, data, offset)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_durable(fs: PowerCutFS, name: str, data: bytes) -> Path:
    """A file whose data and directory entry are durable in both models."""
    path = fs.mount / name
    write_file(path, data, sync=True)
    fsync_dir(path.parent)
    return path


# -- data ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("model", MODELS)
def test_unsynced_writes_are_lost_synced_ones_kept(powercut, model):
    fs = powercut(model)
    durable = make_durable(fs, "durable", b"A" * 5000)
    write_file(durable, b"B" * 3000, sync=False, offset=4000)    # overwrites and extends, unsynced
    (fs.mount / "unsynced").write_bytes(b"never synced")
    fsync_dir(fs.mount)                                            # the names are durable, the data not
    assert durable.read_bytes() == b"A" * 4000 + b"B" * 3000       # reads see the live state
    st = fs.stats()
    assert st["pending_writes"] == 2 and st["pending_bytes"] == 3000 + len(b"never synced")

    out = fs.crash(mode="drop")
    assert (out / "durable").read_bytes() == b"A" * 5000
    assert (out / "unsynced").read_bytes() == b""
    out_all = fs.crash(mode="all")                                 # same frozen state, everything written back
    assert (out_all / "durable").read_bytes() == b"A" * 4000 + b"B" * 3000
    assert (out_all / "unsynced").read_bytes() == b"never synced"


@pytest.mark.parametrize("model", MODELS)
def test_fsync_and_fdatasync_make_everything_before_them_durable(powercut, model):
    fs = powercut(model)
    path = fs.mount / "f"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    for i in range(10):
        os.write(fd, bytes([65 + i]) * 1000)
    os.fdatasync(fd)
    os.write(fd, b"z" * 10)
    os.fsync(fd)
    os.close(fd)
    fsync_dir(fs.mount)
    st = fs.stats()
    assert st["pending_ops"] == 0 and st["fdatasync"] == 1 and st["fsync"] == 1
    out = fs.crash(mode="drop")
    assert (out / "f").read_bytes() == b"".join(bytes([65 + i]) * 1000 for i in range(10)) + b"z" * 10


@pytest.mark.parametrize("model", MODELS)
def test_mmap_writes_durable_only_after_msync(powercut, model):
    fs = powercut(model)
    path = make_durable(fs, "mapped", bytes(16384))
    fd = os.open(path, os.O_RDWR)
    mm = mmap.mmap(fd, 16384)
    mm[0:6] = b"synced"
    before = fs.stats()
    mm.flush(0, mmap.PAGESIZE)                       # msync(MS_SYNC): write-back of the page, then FSYNC
    after = fs.stats()
    assert after["fsync"] + after["fdatasync"] == before["fsync"] + before["fdatasync"] + 1
    assert after["pending_ops"] == 0
    mm[8192:8200] = b"unsynced"
    assert path.read_bytes()[8192:8200] == b"unsynced"   # one page cache: a read sees the mapping's bytes
    mm.close()
    os.close(fd)                                      # closing writes the dirty page back: pending, not durable
    assert fs.stats()["pending_writes"] >= 1
    out = fs.crash(mode="drop")
    data = (out / "mapped").read_bytes()
    assert len(data) == 16384 and data[0:6] == b"synced" and data[8192:8200] == bytes(8)
    assert fs.crash(mode="all").joinpath("mapped").read_bytes()[8192:8200] == b"unsynced"


def test_torn_mode_keeps_a_sector_aligned_prefix_of_the_last_write(powercut):
    fs = powercut("journal")
    path = make_durable(fs, "t", b"." * 8192)
    write_file(path, b"1" * 100, sync=False, offset=0)           # an earlier pending write: kept
    write_file(path, b"2" * 4000, sync=False, offset=700)        # the last one: torn
    other = make_durable(fs, "other", b"")
    write_file(other, b"o" * 10, sync=False)
    cuts = set()
    for seed in range(8):
        out = fs.crash(mode="torn", seed=seed, torn_file="t")
        data = (out / "t").read_bytes()
        kept = fs.last_crash["torn"]["kept"]
        assert (700 + kept) % 512 == 0 and 0 < kept < 4000
        assert data == b"1" * 100 + b"." * 600 + b"2" * kept + b"." * (8192 - 700 - kept)
        assert (out / "other").read_bytes() == b"o" * 10          # other files: everything kept
        cuts.add(kept)
    assert len(cuts) > 1                                          # the seed chooses the cut


def test_subset_mode_is_seeded_and_keeps_some(powercut):
    fs = powercut("journal")
    path = make_durable(fs, "s", bytes(512 * 40))
    for i in range(40):
        write_file(path, bytes([1 + i]) * 512, sync=False, offset=512 * i)

    def kept(out: Path) -> list[int]:
        data = (out / "s").read_bytes()
        return [i for i in range(40) if data[512 * i] == 1 + i]

    a = kept(fs.crash(mode="subset", seed=7))
    assert a == kept(fs.crash(mode="subset", seed=7))            # same seed, same outcome
    assert 0 < len(a) < 40 and fs.last_crash["kept_ops"] == len(a)
    assert a != kept(fs.crash(mode="subset", seed=8))
    assert kept(fs.crash(mode="subset", seed=7, keep_prob=0.0)) == []
    assert kept(fs.crash(mode="subset", seed=7, keep_prob=1.0)) == list(range(40))
    # subset+torn: the same draw, then the last kept write torn; a one-sector write has no boundary inside
    # it, so its torn prefix is empty
    both = kept(fs.crash(mode="subset+torn", seed=7))
    assert fs.last_crash["torn"]["offset"] == 512 * a[-1] and fs.last_crash["torn"]["kept"] == 0
    assert both == a[:-1]


def test_requests_after_the_crash_do_not_change_the_durable_state(powercut):
    fs = powercut("journal")
    path = make_durable(fs, "f", b"before")
    first = fs.crash(mode="drop")
    write_file(path, b"after!", sync=True)                       # the kernel's late flush of a dead writer
    (fs.mount / "new").write_bytes(b"x")
    second = fs.crash(mode="all")
    assert (first / "f").read_bytes() == (second / "f").read_bytes() == b"before"
    assert not (second / "new").exists()
    assert fs.stats()["ignored_after_crash"] > 0


# -- metadata models -----------------------------------------------------------------------------


def test_strict_created_and_fsynced_file_needs_its_directory_fsync(powercut):
    fs = powercut("strict")
    (fs.mount / "d").mkdir()
    fsync_dir(fs.mount)
    write_file(fs.mount / "d" / "lost", b"data", sync=True)
    write_file(fs.mount / "kept", b"data", sync=True)
    fsync_dir(fs.mount)                                           # the root, not d
    out = fs.crash(mode="all")
    assert not (out / "d" / "lost").exists()
    assert (out / "d").is_dir() and (out / "kept").read_bytes() == b"data"


def test_strict_mkdir_needs_the_parent_fsync(powercut):
    fs = powercut("strict")
    (fs.mount / "d").mkdir()
    make_durable(fs, "d/f", b"data")                              # d itself is fsynced, its parent not
    out = fs.crash(mode="all")
    assert list(out.iterdir()) == []


def test_journal_namespace_changes_are_durable_at_once(powercut):
    fs = powercut("journal")
    (fs.mount / "d").mkdir()
    write_file(fs.mount / "d" / "f", b"data", sync=True)
    (fs.mount / "e").write_bytes(b"no fsync")
    out = fs.crash(mode="drop")
    assert (out / "d" / "f").read_bytes() == b"data"
    assert (out / "e").exists() and (out / "e").read_bytes() == b""  # the name is durable, its data is not


@pytest.mark.parametrize("model", MODELS)
def test_rename_and_unlink(powercut, model):
    fs = powercut(model)
    make_durable(fs, "a", b"AAA")
    make_durable(fs, "gone", b"GGG")
    os.rename(fs.mount / "a", fs.mount / "b")
    os.unlink(fs.mount / "gone")
    assert sorted(p.name for p in fs.mount.iterdir()) == ["b"]
    out = fs.crash(mode="all")
    if model == "journal":
        assert sorted(p.name for p in out.iterdir()) == ["b"]
        assert (out / "b").read_bytes() == b"AAA"
    else:  # neither change reached the disk: no fsync of the directory
        assert sorted(p.name for p in out.iterdir()) == ["a", "gone"]
        assert (out / "a").read_bytes() == b"AAA" and (out / "gone").read_bytes() == b"GGG"


def test_strict_rename_durable_after_directory_fsync(powercut):
    fs = powercut("strict")
    make_durable(fs, "a", b"AAA")
    os.rename(fs.mount / "a", fs.mount / "b")
    fsync_dir(fs.mount)
    out = fs.crash(mode="drop")
    assert sorted(p.name for p in out.iterdir()) == ["b"] and (out / "b").read_bytes() == b"AAA"


@pytest.mark.parametrize("model", MODELS)
def test_rename_over_without_fsync_loses_the_new_data(powercut, model):
    """The classic: write a temporary file, rename it over the old one, no fsync of the temporary."""
    fs = powercut(model)
    make_durable(fs, "config", b"old")
    (fs.mount / "config.tmp").write_bytes(b"new")
    os.rename(fs.mount / "config.tmp", fs.mount / "config")
    fsync_dir(fs.mount)
    out = fs.crash(mode="drop")
    assert sorted(p.name for p in out.iterdir()) == ["config"]
    assert (out / "config").read_bytes() == b""                   # the rename survived, the data did not


# -- sizes: ftruncate, posix_fallocate, fallocate ------------------------------------------------


@pytest.mark.parametrize("model", MODELS)
def test_posix_fallocate_and_ftruncate(powercut, model):
    fs = powercut(model)
    path = make_durable(fs, "f", b"x" * 8192)
    fd = os.open(path, os.O_RDWR)
    os.ftruncate(fd, 1000)
    os.posix_fallocate(fd, 0, 1 << 20)           # no FUSE fallocate: glibc writes a zero byte per block
    assert os.fstat(fd).st_size == 1 << 20
    os.close(fd)
    assert path.read_bytes() == b"x" * 1000 + bytes((1 << 20) - 1000)
    st = fs.stats()
    assert st["extensions"] > 0 and st["pending_writes"] == 0   # recorded as a size change, not as writes
    out = fs.crash(mode="drop")
    if model == "journal":                       # size changes durable at once
        assert (out / "f").read_bytes() == b"x" * 1000 + bytes((1 << 20) - 1000)
    else:                                        # strict: only with the file's fsync
        assert (out / "f").read_bytes() == b"x" * 8192


def test_strict_size_change_durable_after_fsync(powercut):
    fs = powercut("strict")
    path = make_durable(fs, "f", b"")
    fd = os.open(path, os.O_RDWR)
    os.posix_fallocate(fd, 0, 65536)
    os.fsync(fd)
    os.ftruncate(fd, 4096)
    os.close(fd)
    assert (fs.crash(mode="drop") / "f").stat().st_size == 65536
    assert (fs.crash(mode="all") / "f").stat().st_size == 4096


def test_posix_fallocate_shim_is_one_size_change(powercut):
    """With the writer environment's shim, posix_fallocate (pystore's, through ctypes here) is one ftruncate."""
    fs = powercut("journal")
    path = make_durable(fs, "f", b"")
    code = ("import ctypes, os, sys; fd = os.open(sys.argv[1], os.O_RDWR); libc = ctypes.CDLL(None);"
            "libc.posix_fallocate64.argtypes = [ctypes.c_int, ctypes.c_long, ctypes.c_long];"
            "assert libc.posix_fallocate64(fd, 4096, 1 << 20) == 0; os.close(fd)")
    subprocess.run([sys.executable, "-c", code, str(path)], env=fs.writer_env(), check=True, timeout=60)
    st = fs.stats()
    assert path.stat().st_size == 4096 + (1 << 20)
    assert st["extensions"] == 0 and st["truncates"] == 1 and st["pending_ops"] == 0
    assert (fs.crash(mode="drop") / "f").stat().st_size == 4096 + (1 << 20)


def test_fallocate_zero_range_is_not_supported(powercut):
    """pyfuse3 has no FALLOCATE op: the kernel answers EOPNOTSUPP, and pystore's zero_from falls back to
    writing zeros through its mapping."""
    fs = powercut("journal")
    path = make_durable(fs, "f", b"x" * 8192)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
    fd = os.open(path, os.O_RDWR)
    try:
        rc = libc.fallocate(fd, 0x10 | 0x01, 100, 1000)   # FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE
        assert rc == -1 and ctypes.get_errno() == errno.EOPNOTSUPP
    finally:
        os.close(fd)


# -- a writer process killed, then the power cut ---------------------------------------------------


@pytest.mark.parametrize("model", MODELS)
def test_killed_writer_keeps_acknowledged_synced_records_only(powercut, model):
    fs = powercut(model)
    target = make_durable(fs, "log", b"")
    writer = subprocess.Popen([sys.executable, str(Path(__file__).with_name("ack_writer.py")), str(target), "30", "20"],
                              stdout=subprocess.PIPE, text=True, env=fs.writer_env())
    try:
        acks = []
        for line in writer.stdout:
            if line.strip() == "DONE":
                break
            acks.append(line.split())
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait(timeout=10)
    assert len(acks) == 50 and len(target.read_bytes()) == 50 * RECORD
    out = fs.crash(mode="drop")
    data = (out / "log").read_bytes()
    synced = [int(i) for kind, i in acks if kind == "S"]
    for i in synced:
        assert data[i * RECORD:(i + 1) * RECORD] == record(i)
    assert len(data) == len(synced) * RECORD                       # nothing of the unsynced records
    everything = (fs.crash(mode="all") / "log").read_bytes()
    assert everything == b"".join(record(i) for i in range(50))


# -- pystore on the mount (smoke) ----------------------------------------------------------------


def test_pystore_sync_flush_store_survives_the_cut_on_journal(powercut):
    sys.path.insert(0, str(Path(__file__).parents[1]))
    import crash_writer as cw

    from pystore.config import FlushDiskType

    fs = powercut("journal")
    store = cw.open_store(fs.mount / "store", 64 * 1024, flush_disk_type=FlushDiskType.SYNC_FLUSH)
    try:
        offsets = []
        for i in range(300):                       # 300 records of ~200 bytes: the 64 KiB log rolls
            r = store.put_message(cw_message(i))
            assert r.status.name == "PUT_OK"
            offsets.append(r.append_message_result.wrote_offset)
    finally:
        store.shutdown()
    assert fs.stats()["fdatasync"] + fs.stats()["fsync"] >= 300
    out = fs.crash(mode="drop")
    reopened = cw.open_store(out / "store", 64 * 1024)
    try:
        for i, off in enumerate(offsets):
            assert reopened.look_message_by_offset(off).body == cw_message(i).body
    finally:
        reopened.shutdown()


def cw_message(i: int):
    from pystore import Message

    return Message(topic="PowerCut", body=("message %06d " % i).encode() * 12, queue_id=i % 2)


# -- the layer itself ----------------------------------------------------------------------------


def test_mount_is_gone_after_a_failing_block(tmp_path):
    from .powercut import missing_reason

    if missing_reason():
        pytest.skip(missing_reason())
    fs = PowerCutFS(tmp_path / "pc", model="journal")
    fd = -1
    with pytest.raises(ZeroDivisionError):
        with fs:
            fd = os.open(fs.mount / "held", os.O_RDWR | os.O_CREAT)   # still open at unmount: the mount is busy
            assert is_mounted(fs.mount)
            1 / 0
    assert not is_mounted(fs.mount)
    with pytest.raises(OSError):                                     # ENOTCONN, yet the descriptor is freed
        os.close(fd)
    fs.close()                                                       # idempotent
