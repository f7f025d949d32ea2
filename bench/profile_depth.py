"""Put rate by position in the commit-log file: how a store keeps up as its file fills.

    python bench/profile_depth.py --durable                 # SYNC_FLUSH batches of 32 x 128 B, cold file
    python bench/profile_depth.py --durable --warm          # the same, file pre-created and pre-faulted
    python bench/profile_depth.py --chunks 24 --seconds 0   # ASYNC_FLUSH, 1 GiB file, 320 k messages a step
    python bench/profile_depth.py --skip-mb 64 --rate 20000 --chunks 1 --seconds 4  # bytes to disk per byte put

Puts ``put_messages(MessageBatch.from_bodies(topic, 32 bodies))`` over 1,000 distinct batches of 128 B in
steps, each step timed on its own (``--seconds`` of putting, or 10,000 batches when 0), and prints each step's
rate next to the MiB of commit log written by its end. Under SYNC_FLUSH a falling rate past the first tens
of MiB is the large-folio effect ``_warm.write_page_by_page`` avoids; under ASYNC_FLUSH, a falling rate
is the cost of faulting in new page-cache pages. ``--skip-mb`` first puts that many MiB (1 KiB bodies, untimed);
``--rate`` paces the puts (messages a second) and reports, per step, the bytes this process dirtied for the
disk (``/proc/self/io`` ``write_bytes``, counted as pages or whole folios turn dirty) over the bytes put:
about 1.5x when a flush writes what was put. Every put is checked (``PUT_OK``), and the count of messages in
the queue is checked at the end, and the last line says how much of the file the prefault worker populated
and how much it left to a writer that had got there first.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import benchlib  # noqa: E402

from pystore.log._warm import prefault_stats  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--durable", action="store_true", help="SYNC_FLUSH (default: ASYNC_FLUSH)")
    p.add_argument("--warm", action="store_true", help="pre-create and pre-fault the files")
    p.add_argument("--file-size", type=int, default=None,
                   help="commit-log file size (default: 256 MiB durable, 1 GiB otherwise)")
    p.add_argument("--chunks", type=int, default=12, help="timed steps")
    p.add_argument("--seconds", type=float, default=0.3, help="length of a step (0: 10,000 batches a step)")
    p.add_argument("--skip-mb", type=int, default=0, help="MiB put (untimed) before the first step")
    p.add_argument("--rate", type=float, default=0, help="pace the puts to this many messages a second")
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
            skip = api["Message"](topic + "Skip", b"s" * 1024)
            fill = MessageBatch([skip] * 128)
            while store.get_max_phy_offset() < a.skip_mb << 20:
                if put(fill).status is not ok:
                    raise RuntimeError("a put failed at %d bytes" % store.get_max_phy_offset())
            if a.skip_mb:
                store.flush()
            n = 0
            pf0 = prefault_stats()
            for _ in range(a.chunks):
                t0, k, o0, w0 = pc(), 0, store.get_max_phy_offset(), _write_bytes()
                while (pc() - t0 < a.seconds) if a.seconds > 0 else k < 10_000:
                    if put(fb(topic, batches[(n + k) % 1000])).status is not ok:
                        raise RuntimeError("a put failed at %d bytes" % store.get_max_phy_offset())
                    k += 1
                    if a.rate > 0:
                        ahead = t0 + k * 32 / a.rate - pc()
                        if ahead > 0:
                            time.sleep(ahead)
                dt = pc() - t0
                n += k
                step = "%d MiB: %s" % (store.get_max_phy_offset() >> 20, _rate(k * 32 / dt))
                if a.rate > 0 and w0 is not None:
                    store.flush()
                    step += ", dirtied %.1fx the bytes put" % ((_write_bytes() - w0) / (store.get_max_phy_offset() - o0))
                steps.append(step)
            pf1 = prefault_stats()
            if benchlib.queue_count(store) != n * 32:
                raise AssertionError("the queue holds %d messages, %d were put" % (benchlib.queue_count(store), n * 32))
        finally:
            store.destroy()
    print("%s, %s file of %d MiB: msg/s by the MiB written at the end of each step" % (
        "SYNC_FLUSH" if a.durable else "ASYNC_FLUSH", "warm" if a.warm else "cold", size >> 20))
    print("  " + " | ".join(steps))
    print("  prefault worker: %d MiB populated, %d MiB left to a writer that was there first" % (
        (pf1["bytes"] - pf0["bytes"]) >> 20, (pf1["skipped"] - pf0["skipped"]) >> 20))
    return 0


def _write_bytes() -> int | None:
    try:
        with open("/proc/self/io") as f:
            for line in f:
                if line.startswith("write_bytes:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _rate(v: float) -> str:
    return "%.2f M" % (v / 1e6) if v >= 1e6 else "%.0f k" % (v / 1e3)


if __name__ == "__main__":
    sys.exit(main())
