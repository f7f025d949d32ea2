"""Throughput of the power-cut layer, to size the workloads of tests that run on it.

``PYTHONPATH=. python tests/powerloss/measure.py [--mib 32]`` prints MB/s for, through the mount and, for
comparison, on the backing folder directly:

* sequential 4 KiB ``write(2)`` without sync, and with ``fdatasync`` every 64 KiB;
* 4 KiB stores into a shared ``mmap`` with ``msync`` (``mmap.flush``) every 64 KiB, and every 4 KiB;
* ``posix_fallocate`` of the file (emulated by glibc on the mount: one FUSE write per 4 KiB block).
"""

from __future__ import annotations

import argparse
import mmap
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.powerloss.powercut import PowerCutFS  # noqa: E402

CHUNK = 4096


def seq_write(path: Path, size: int, sync_every: int) -> None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    buf = b"w" * CHUNK
    for off in range(0, size, CHUNK):
        os.write(fd, buf)
        if sync_every and (off + CHUNK) % sync_every == 0:
            os.fdatasync(fd)
    os.close(fd)


def fallocate(path: Path, size: int) -> None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    os.posix_fallocate(fd, 0, size)
    os.fsync(fd)
    os.close(fd)


def mmap_write(path: Path, size: int, sync_every: int) -> None:
    fd = os.open(path, os.O_RDWR)
    mm = mmap.mmap(fd, size)
    buf = b"m" * CHUNK
    last = 0
    for off in range(0, size, CHUNK):
        mm[off:off + CHUNK] = buf
        if (off + CHUNK) % sync_every == 0:
            mm.flush(last, off + CHUNK - last)
            last = off + CHUNK
    mm.close()
    os.close(fd)


def timed(fn: Callable[[], None], size: int) -> float:
    t = time.perf_counter()
    fn()
    return size / (time.perf_counter() - t) / 1e6


def run(folder: Path, size: int) -> dict[str, float]:
    f = folder / "bench"
    out = {
        "write 4K, no sync": timed(lambda: seq_write(f, size, 0), size),
        "write 4K, fdatasync/64K": timed(lambda: seq_write(f, size, 65536), size),
        "posix_fallocate": timed(lambda: fallocate(f, size), size),
        "mmap 4K, msync/64K": timed(lambda: mmap_write(f, size, 65536), size),
        "mmap 4K, msync/4K": timed(lambda: mmap_write(f, size, 4096), size),
    }
    f.unlink()
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mib", type=int, default=32)
    p.add_argument("--model", default="journal")
    args = p.parse_args()
    size = args.mib << 20
    with tempfile.TemporaryDirectory(prefix="pcfs-measure-") as tmp:
        direct = run(Path(tmp), size)
        with PowerCutFS(Path(tmp) / "pc", model=args.model) as fs:
            fused = run(fs.mount, size)
            stats = fs.stats()
    print("%-26s %12s %12s" % ("MB/s (%d MiB)" % args.mib, "power-cut", "backing"))
    for k in fused:
        print("%-26s %12.1f %12.1f" % (k, fused[k], direct[k]))
    print("layer stats:", {k: stats[k] for k in ("writes", "write_bytes", "extensions", "fsync", "fdatasync")})


if __name__ == "__main__":
    main()
