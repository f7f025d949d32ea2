"""pystore.archive.target against a local folder (``file://``) and moto's S3 server: puts and ranged reads,
listing and deleting, the errors (bad names, URIs and options, missing objects, short reads, a missing bucket)
and atomic visibility (no partial object under its final name, no ``.part`` file left behind)."""

from __future__ import annotations

import errno
import hashlib
import os

import pytest

pytest.importorskip("pyarrow.fs", reason="pyarrow (the columns or spark extra) is not installed")

import pystore.archive.target as target_module  # noqa: E402
from pystore.archive.target import ArchiveError, ArchiveTarget, open_target  # noqa: E402
from pystore.errors import StoreError  # noqa: E402

pytest_plugins = ["s3server"]       # the s3_archive and s3_server fixtures


@pytest.fixture(params=["file", "s3"])
def archive(request: pytest.FixtureRequest, tmp_path) -> ArchiveTarget:
    if request.param == "file":
        return open_target((tmp_path / "archive").as_uri())
    uri, options = request.getfixturevalue("s3_archive")
    return open_target(uri, options)


def _blob(n: int, seed: int = 0) -> bytes:
    """``n`` bytes that differ at every offset a test cuts at."""
    out = bytearray()
    i = seed
    while len(out) < n:
        out += hashlib.sha256(b"%d" % i).digest()
        i += 1
    return bytes(out[:n])


# -- round trips -------------------------------------------------------------------------------------------

def test_put_read_round_trip(archive):
    data = _blob(1000)
    archive.put("commitlog/00000000000000000000", data)
    assert archive.read("commitlog/00000000000000000000") == data
    assert archive.size("commitlog/00000000000000000000") == 1000
    archive.put("commitlog/00000000000000000000", memoryview(b"replaced"))   # a put replaces
    assert archive.read("commitlog/00000000000000000000") == b"replaced"
    archive.put("empty", b"")
    assert archive.read("empty") == b"" and archive.size("empty") == 0


def test_ranged_reads(archive):
    data = _blob(4096)
    archive.put("a/b", data)
    assert archive.read("a/b", 100, 50) == data[100:150]
    assert archive.read("a/b", 4000) == data[4000:]
    assert archive.read("a/b", 0, 4096) == data
    assert archive.read("a/b", 4096) == b""
    assert archive.read("a/b", 10, 0) == b""


class _SpyFS:
    """A file system whose input files offer ``size`` and ``read_at`` only, recording the reads."""

    def __init__(self, fs) -> None:
        self._fs = fs
        self.reads: list[tuple[int, int]] = []

    def __getattr__(self, name):
        return getattr(self._fs, name)

    def open_input_file(self, path):
        f = self._fs.open_input_file(path)
        spy = self

        class Ranged:
            def __enter__(self):
                return self

            def __exit__(self, *exc):
                f.close()

            def size(self):
                return f.size()

            def read_at(self, nbytes, offset):
                spy.reads.append((nbytes, offset))
                return f.read_at(nbytes, offset)

        return Ranged()


def test_read_is_one_ranged_read(archive):
    data = _blob(1 << 16)
    archive.put("x", data)
    archive.fs = spy = _SpyFS(archive.fs)
    assert archive.read("x", 1000, 24) == data[1000:1024]
    assert spy.reads == [(24, 1000)]


@pytest.mark.parametrize("chunk, parallel", [(1 << 20, 4), (1000, 3), (999, 1), (4096, 4)],
                         ids=["one-range", "ranges-in-parallel", "ranges-one-by-one", "exact-multiple"])
def test_download_writes_the_object_whole_by_ranges(archive, tmp_path, chunk, parallel):
    data = _blob(8192 + 17 if chunk != 4096 else 4 * 4096)
    archive.put("commitlog/00000000000000000000", data)
    path = tmp_path / "copy"
    path.write_bytes(b"x" * 100_000)                      # a longer leftover is replaced, not overwritten
    assert archive.download("commitlog/00000000000000000000", str(path), chunk=chunk, parallel=parallel) == len(data)
    assert path.read_bytes() == data
    archive.put("empty", b"")
    assert archive.download("empty", str(path)) == 0 and path.read_bytes() == b""
    with pytest.raises(ArchiveError, match="no such object"):
        archive.download("commitlog/00000000000000000001", str(path))


def test_download_of_an_object_that_shrinks_midway_is_a_short_read(archive, tmp_path, monkeypatch):
    data = _blob(5000)
    archive.put("a/b", data)
    real_open = archive.fs.open_input_file
    opened = []

    def open_then_shrink(path):
        f = real_open(path)
        opened.append(path)
        if len(opened) == 1:                              # after the size was taken: the object shrinks
            archive.put("a/b", data[:3000])
        return f

    monkeypatch.setattr(archive, "fs", _FsWith(archive.fs, open_then_shrink))
    with pytest.raises(ArchiveError, match="short read|cannot read"):
        archive.download("a/b", str(tmp_path / "copy"), chunk=1000, parallel=2)


class _FsWith:
    """A pyarrow file system whose ``open_input_file`` is replaced (pyarrow's own classes take no attribute)."""

    def __init__(self, fs, open_input_file):
        self._fs, self.open_input_file = fs, open_input_file

    def __getattr__(self, name):
        return getattr(self._fs, name)


def test_size_list_delete(archive):
    names = ["commitlog/00000000000000065536", "commitlog/00000000000000000000",
             "consumequeue/TopicTest/0/00000000000000000000", "manifest/00000000000000000001.json"]
    for i, n in enumerate(names):
        archive.put(n, _blob(10 + i, i))
    assert archive.list("commitlog") == sorted(names[:2])
    assert archive.list("commitlog/") == sorted(names[:2])
    assert archive.list("consumequeue") == [names[2]]
    assert archive.list("") == sorted(names)
    assert archive.list("nothing/here") == []
    assert [archive.size(n) for n in names] == [10, 11, 12, 13]
    archive.delete(names[0])
    assert archive.size(names[0]) is None
    assert archive.list("commitlog") == [names[1]]
    archive.delete(names[0])                     # missing: no error
    archive.delete("never/was")
    assert archive.size("commitlog") is None     # a folder is not an object


def test_missing_object(archive):
    assert archive.size("commitlog/00000000000000000000") is None
    with pytest.raises(ArchiveError, match=r"object commitlog/00000000000000000000: cannot read: no such object") as e:
        archive.read("commitlog/00000000000000000000")
    assert isinstance(e.value, StoreError)
    assert archive.uri.split("?")[0] in str(e.value)


def test_short_read(archive):
    archive.put("short", b"0123456789")
    with pytest.raises(ArchiveError, match=r"object short is 10 bytes, asked for \[5, 15\)"):
        archive.read("short", 5, 10)
    with pytest.raises(ArchiveError, match=r"object short is 10 bytes, asked for \[11, end\)"):
        archive.read("short", 11)
    with pytest.raises(ValueError):
        archive.read("short", -1)


@pytest.mark.parametrize("name", ["", "/abs/path", "..", "a/../b", "a//b", "a/", "./a", "a/."])
def test_bad_names(archive, name):
    for call in (lambda: archive.put(name, b"x"), lambda: archive.read(name), lambda: archive.size(name),
                 lambda: archive.delete(name)):
        with pytest.raises(ValueError, match="archive object name"):
            call()
    assert archive.list("") == []


def test_put_file_multi_chunk(archive, tmp_path, monkeypatch):
    # an S3 upload of several 10 MiB parts, flushed (in-flight bound) along the way
    size = (21 << 20) + 12345 if archive.fs.type_name == "s3" else 5 * 65536 + 777
    chunk = 4 << 20 if archive.fs.type_name == "s3" else 65536
    monkeypatch.setattr(target_module, "_IN_FLIGHT", 8 << 20)
    data = _blob(size, 7)
    local = tmp_path / "00000000000000000000"
    local.write_bytes(data)
    assert archive.put_file("commitlog/00000000000000000000", str(local), chunk=chunk) == size
    assert archive.size("commitlog/00000000000000000000") == size
    back = archive.read("commitlog/00000000000000000000")
    assert hashlib.sha256(back).digest() == hashlib.sha256(data).digest()
    edge = 10 << 20 if archive.fs.type_name == "s3" else 65536        # across a part (or chunk) boundary
    assert archive.read("commitlog/00000000000000000000", edge - 3, 6) == data[edge - 3:edge + 3]


def test_put_file_missing_local_file(archive, tmp_path):
    with pytest.raises(ArchiveError, match="cannot read local file .*nope"):
        archive.put_file("commitlog/x", str(tmp_path / "nope"))
    assert archive.size("commitlog/x") is None


def test_check(archive):
    archive.check()
    assert archive.list("") == []                # the probe is gone


# -- atomic visibility ------------------------------------------------------------------------------------

def _files(folder) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, n), folder) for d, _, ns in os.walk(folder) for n in ns)


def test_local_write_failing_midway_leaves_nothing(tmp_path, monkeypatch):
    archive = open_target((tmp_path / "archive").as_uri())
    archive.put("commitlog/old", b"old")
    real_write = os.write

    def half_then_fail(fd, data):
        if len(data) > 1:
            real_write(fd, bytes(data[: len(data) // 2]))
        raise OSError(errno.EIO, "simulated I/O error")

    monkeypatch.setattr(os, "write", half_then_fail)
    with pytest.raises(ArchiveError, match="object commitlog/new: cannot write: .*simulated I/O error"):
        archive.put("commitlog/new", _blob(1000))
    with pytest.raises(ArchiveError, match="simulated"):
        archive.put("commitlog/old", _blob(1000))
    monkeypatch.undo()
    assert _files(tmp_path / "archive") == ["commitlog/old"]
    assert archive.read("commitlog/old") == b"old"                 # the replacement never landed


def test_local_fsync_failing_leaves_nothing(tmp_path, monkeypatch):
    archive = open_target((tmp_path / "archive").as_uri())
    local = tmp_path / "seg"
    local.write_bytes(_blob(300000))

    def fail(fd):
        raise OSError(errno.EIO, "simulated fsync error")

    monkeypatch.setattr(os, "fsync", fail)
    with pytest.raises(ArchiveError, match="simulated fsync error"):
        archive.put_file("commitlog/seg", str(local), chunk=65536)
    monkeypatch.undo()
    assert archive.size("commitlog/seg") is None
    assert [f for f in _files(tmp_path / "archive") if "seg" in f] == []


def test_local_put_is_a_rename_of_a_synced_part_file(tmp_path, monkeypatch):
    archive = open_target((tmp_path / "archive").as_uri())
    seen = []
    real_replace, real_fsync = os.replace, os.fsync

    def replace(src, dst):
        seen.append(("replace", os.path.basename(src), os.path.basename(dst), os.path.exists(dst)))
        real_replace(src, dst)

    def fsync(fd):
        seen.append(("fsync",))
        real_fsync(fd)

    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(os, "fsync", fsync)
    archive.put("manifest/00000000000000000001.json", b"{}")
    monkeypatch.undo()
    i = next(i for i, s in enumerate(seen) if s[0] == "replace")
    _, src, dst, existed = seen[i]
    assert dst == "00000000000000000001.json" and not existed
    assert src.startswith("00000000000000000001.json.part-%d-" % os.getpid())
    assert ("fsync",) in seen[:i] and ("fsync",) in seen[i + 1:]   # the data before, the folder after
    assert _files(tmp_path / "archive") == ["manifest/00000000000000000001.json"]


def test_leftover_part_file_is_not_listed(tmp_path):
    archive = open_target((tmp_path / "archive").as_uri())
    archive.put("commitlog/a", b"a")
    (tmp_path / "archive" / "commitlog" / "b.part-123-0badc0de").write_bytes(b"torn")
    assert archive.list("commitlog") == ["commitlog/a"]


def test_s3_upload_interrupted_by_us_leaves_no_object(s3_archive, tmp_path, monkeypatch):
    archive = open_target(*s3_archive)
    archive.put("commitlog/seg", b"previous")

    def chunks(self, name, src, chunk):
        yield _blob(12 << 20)                     # a whole part on its way
        raise RuntimeError("interrupted")

    monkeypatch.setattr(ArchiveTarget, "_chunks", chunks)
    local = tmp_path / "seg"
    local.write_bytes(b"x")
    with pytest.raises(RuntimeError, match="interrupted"):
        archive.put_file("commitlog/seg", str(local))
    assert archive.size("commitlog/seg") is None  # not the partial object (nor the old one: it was replaced)


def test_s3_server_dying_mid_upload(s3_server, tmp_path, monkeypatch):
    bucket = s3_server.create_bucket()
    archive = open_target("s3://%s/archive" % bucket, {**s3_server.options(), "connect_timeout": 1,
                                                         "request_timeout": 2})

    def chunks(self, name, src, chunk):
        yield _blob(11 << 20)
        s3_server.stop()
        yield _blob(11 << 20, 1)

    monkeypatch.setattr(ArchiveTarget, "_chunks", chunks)
    local = tmp_path / "seg"
    local.write_bytes(b"x")
    with pytest.raises(ArchiveError, match="object commitlog/seg: cannot write: .*bucket '%s'" % bucket):
        archive.put_file("commitlog/seg", str(local))
    monkeypatch.undo()
    s3_server.start()                              # same port; the bucket survived
    assert archive.size("commitlog/seg") is None
    archive.put("commitlog/seg", b"whole")
    assert archive.read("commitlog/seg") == b"whole"


# -- opening -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("uri, why", [
    ("", "not a URI"),
    ("relative/path", "not a URI"),
    ("/abs/path", "not a URI"),
    ("file:relative/path", "absolute local path"),
    ("file://somehost/abs", "absolute local path"),
    ("nosuchscheme://bucket/x", "cannot open: .*nosuchscheme"),
])
def test_bad_uris(uri, why):
    with pytest.raises(ArchiveError, match=why):
        open_target(uri)


def test_file_uri_creates_its_folder(tmp_path):
    archive = open_target((tmp_path / "a" / "b").as_uri() + "/")
    assert archive.uri == (tmp_path / "a" / "b").as_uri()
    assert (tmp_path / "a" / "b").is_dir()
    archive.put("x", b"1")
    assert (tmp_path / "a" / "b" / "x").read_bytes() == b"1"
    assert open_target("file://localhost" + str(tmp_path / "a" / "b")).read("x") == b"1"
    other = open_target("local://" + str(tmp_path / "c"))     # pyarrow's other spelling: the same local writes
    other.put("d/e", b"2")
    assert (tmp_path / "c" / "d" / "e").read_bytes() == b"2" and other.list("") == ["d/e"]


def test_file_uri_folders_it_creates_are_synced_into_their_parents(tmp_path, monkeypatch):
    """A new ``file://`` archive's folders are fsynced into their parents before any object is put: under bare
    POSIX metadata a power cut otherwise takes back the whole archive folder, objects and manifest included, after
    cleaning deleted the local copies (found by tests/powerloss/test_archive_powerloss.py, strict model)."""
    import pystore.system.durable as durable

    synced = []
    real = durable.fsync_dir
    monkeypatch.setattr(durable, "fsync_dir", lambda path: (synced.append(path), real(path)))
    open_target((tmp_path / "a" / "b").as_uri())
    assert str(tmp_path) in synced and str(tmp_path / "a") in synced
    synced.clear()
    open_target((tmp_path / "a" / "b").as_uri())        # existing: nothing to sync
    assert synced == []


def test_unknown_options_are_named(tmp_path):
    with pytest.raises(ArchiveError, match=r"unknown option\(s\) for S3FileSystem: also_bad, endpoint\b"):
        open_target("s3://bucket/prefix", {"region": "us-east-1", "endpoint": "x", "also_bad": 1})
    with pytest.raises(ArchiveError, match=r"unknown option\(s\) for LocalFileSystem: region"):
        open_target((tmp_path / "a").as_uri(), {"region": "us-east-1"})
    with pytest.raises(ArchiveError, match="bad options for S3FileSystem"):
        open_target("s3://bucket/prefix", {"scheme": 5})
    with pytest.raises(ArchiveError, match="background_writes=False"):
        open_target("s3://bucket/prefix", {"background_writes": False})
    with pytest.raises(ArchiveError, match="not both"):
        open_target("s3://bucket/prefix?region=us-east-1", {"region": "us-east-1"})
    with pytest.raises(ArchiveError, match="no bucket"):
        open_target("s3:///prefix", {"region": "us-east-1"})


def test_check_missing_bucket(s3_archive):
    _, options = s3_archive
    archive = open_target("s3://pystore-no-such-bucket/archive", options)
    with pytest.raises(ArchiveError, match="bucket 'pystore-no-such-bucket' does not exist") as e:
        archive.check()
    assert "s3://pystore-no-such-bucket/archive" in str(e.value)


def test_check_local_root_gone(tmp_path):
    archive = open_target((tmp_path / "archive").as_uri())
    os.rmdir(tmp_path / "archive")
    (tmp_path / "archive").write_bytes(b"not a folder")
    with pytest.raises(ArchiveError, match="archive file://.*: not usable"):
        archive.check()


def test_s3_uri_without_options_hides_its_credentials(s3_archive):
    uri, options = s3_archive
    bucket_prefix = uri[len("s3://"):]
    secret_uri = "s3://%s:%s@%s?endpoint_override=%s&scheme=http&region=%s" % (
        options["access_key"], options["secret_key"], bucket_prefix, options["endpoint_override"], options["region"])
    archive = open_target(secret_uri)
    archive.put("a", b"via the URI")
    assert open_target(uri, options).read("a") == b"via the URI"
    with pytest.raises(ArchiveError) as e:
        archive.read("missing")
    assert options["secret_key"] + "@" not in str(e.value) and "***@" in str(e.value)


@pytest.mark.parametrize("refusal", [errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP])
def test_local_put_file_copies_by_reads_where_the_kernel_cannot(tmp_path, monkeypatch, refusal):
    archive = open_target((tmp_path / "archive").as_uri())
    data = _blob(3 * 1000 + 7)
    (tmp_path / "src").write_bytes(data)

    def refuse(*a, **k):
        raise OSError(refusal, os.strerror(refusal))

    monkeypatch.setattr(os, "copy_file_range", refuse)
    assert archive.put_file("commitlog/00000000000000000000", str(tmp_path / "src"), chunk=1000) == len(data)
    assert archive.read("commitlog/00000000000000000000") == data


def test_local_put_file_failing_in_the_kernel_copy_leaves_nothing(tmp_path, monkeypatch):
    archive = open_target((tmp_path / "archive").as_uri())
    (tmp_path / "src").write_bytes(_blob(5000))
    real = os.copy_file_range
    calls = []

    def fail_second(src, dst, count, *a):
        calls.append(count)
        if len(calls) == 2:
            raise OSError(errno.EIO, "I/O error")
        return real(src, dst, 1000, *a)

    monkeypatch.setattr(os, "copy_file_range", fail_second)
    with pytest.raises(ArchiveError, match="cannot copy local file"):
        archive.put_file("commitlog/00000000000000000000", str(tmp_path / "src"))
    assert archive.size("commitlog/00000000000000000000") is None
    assert [n for n in os.listdir(tmp_path / "archive" / "commitlog")] == []
