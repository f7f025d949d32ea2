"""A writer process for the power-cut layer's own tests (the test SIGKILLs it).

``python ack_writer.py FILE N_SYNC N_UNSYNC`` writes 64-byte records to FILE (record i at offset 64*i):
the first N_SYNC each followed by ``fdatasync``, then N_UNSYNC without. After each record it prints
``S i`` (acknowledged as durable) or ``U i`` (written, not synced) on stdout, then ``DONE``, and sleeps
until killed (with its file still open, so the kernel flushes its pages only at the kill).
"""

from __future__ import annotations

import os
import sys
import time

RECORD = 64


def record(i: int) -> bytes:
    return ("rec %08d " % i).encode().ljust(RECORD - 1, b"#") + b"\n"


def main() -> None:
    path, n_sync, n_unsync = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    for i in range(n_sync + n_unsync):
        os.pwrite(fd, record(i), i * RECORD)
        synced = i < n_sync
        if synced:
            os.fdatasync(fd)
        sys.stdout.write("%s %d\n" % ("S" if synced else "U", i))
        sys.stdout.flush()
    sys.stdout.write("DONE\n")
    sys.stdout.flush()
    time.sleep(60)


if __name__ == "__main__":
    main()
