"""Put rate by position in the commit-log file: how a store keeps up as its file fills.

    python bench/profile_depth.py --durable                 # SYNC_FLUSH batches of 32 x 128 B, cold file
    python bench/profile_depth.py --durable --warm          # the same, file pre-created and pre-faulted
    python bench/profile_depth.py --chunks 24 --seconds 0   # ASYNC_FLUSH, 1 GiB file, 320 k messages a step

Puts ``put_messages(MessageBatch.from_bodies(topic, 32 bodies))`` over 1,000 distinct batches of 128 B in
steps, each step timed on its own (``--seconds`` of putting, or 10,000 batches when 0), and prints each step's
rate next to the MiB of commit log written by its end. Under SYNC_FLUSH a falling rate past the first tens
of MiB is the large-folio effect ``MappedFile.write_page_by_page`` avoids; under ASYNC_FLUSH, a falling rate
is the cost of faulting in new page-cache pages. Every put is checked (``PUT_OK``), and the count of
messages in the queue is checked at the end.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import benchlib  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--durable", action="store_true", help="SYNC_FLUSH (default: ASYNC_FLUSH)")
    p.add_argument("--warm", action="store_true", help="pre-create and pre-fault the files")
    p.add_argument("--file-size", type=int, default=None,
                   help="commit-log file size (default: 256 MiB durable, 1 GiB otherwise)")
    p.add_argument("--chunks", type=int, default=12, help="timed steps")
    p.add_argument("--seconds", type=float, default=0.3, help="length of a step (0: 10,000 batches a step)")
    p.add_argument("--dir", default=None, help="parent folder of the temporary store (default: $TMPDIR)")
    a = p.parse_args(argv)

    api = benchlib.store_api()
    MessageBatch = api["MessageBatch"]
    over = {"flush_disk_type": api["FlushDiskType"].SYNC_FLUSH} if a.durable else {}
    size = a.file_size or ((256 if a.durable else 1024) << 20)
    bodies = benchlib.payloads(32 * 1000, 128)
    batches = [tuple(bodies[i:i + 32]) for i in range(0, len(bodies), 32)]
    ok = api["PutMessageStatus"].PUT_OK
    pc = time.perf_counter
    steps = []
    with tempfile.TemporaryDirectory(prefix="pystore-depth-", dir=a.dir) as d:
        store = benchlib.open_warm_store(os.path.join(d, "s"), size, warm=a.warm, **over)
        try:
            put, fb, topic = store.put_messages, MessageBatch.from_bodies, benchlib.TOPIC
            n = 0
            for _ in range(a.chunks):
                t0, k = pc(), 0
                while (pc() - t0 < a.seconds) if a.seconds > 0 else k < 10_000:
                    if put(fb(topic, batches[(n + k) % 1000])).status is not ok:
                        raise RuntimeError("a put failed at %d bytes" % store.get_max_phy_offset())
                    k += 1
                dt = pc() - t0
                n += k
                steps.append("%d MiB: %s" % (store.get_max_phy_offset() >> 20, _rate(k * 32 / dt)))
            if benchlib.queue_count(store) != n * 32:
                raise AssertionError("the queue holds %d messages, %d were put" % (benchlib.queue_count(store), n * 32))
        finally:
            store.destroy()
    print("%s, %s file of %d MiB: msg/s by the MiB written at the end of each step" % (
        "SYNC_FLUSH" if a.durable else "ASYNC_FLUSH", "warm" if a.warm else "cold", size >> 20))
    print("  " + " | ".join(steps))
    return 0


def _rate(v: float) -> str:
    return "%.2f M" % (v / 1e6) if v >= 1e6 else "%.0f k" % (v / 1e3)


if __name__ == "__main__":
    sys.exit(main())
