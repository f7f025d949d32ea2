"""Run pystore's put loop for N seconds, so a profiler can watch it.

    python bench/profile_put.py --seconds 10 --mode single           # put_message of a prebuilt 128 B Message
    python bench/profile_put.py --mode batch --batch 32 --size 128   # put_messages of a prebuilt batch
    python bench/profile_put.py --mode construct                     # build a Message per put
    python bench/profile_put.py --mode bodies                        # from_bodies over 10 000 distinct batches
    python bench/profile_put.py --mode sync --threads 16             # SYNC_FLUSH put_message from 16 threads
                                                                     # (and the puts each flush covered)

    perf record -F 999 -g -- python bench/profile_put.py --seconds 10
    perf report --no-children --sort symbol
    py-spy record --native -o put.svg -- python bench/profile_put.py --seconds 10

The store is opened in a temporary folder with its commit-log file pre-created and pre-faulted (as the
benchmarks do), the loop runs until the time is up (it starts a new store when a file would fill up, which
is reported), and the rate is printed at the end. ``--timed-flush`` sets ``flush_commit_log_timed`` (the flush
service sleeps instead of being woken by puts).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import benchlib  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--mode", choices=["single", "batch", "construct", "bodies", "sync"], default="single")
    p.add_argument("--batch", type=int, default=32, help="messages per batch (--mode batch)")
    p.add_argument("--size", type=int, default=128, help="body bytes")
    p.add_argument("--threads", type=int, default=1, help="putting threads (--mode sync)")
    p.add_argument("--file-size", type=int, default=1 << 30, help="commit-log file size")
    p.add_argument("--timed-flush", action="store_true", help="flush_commit_log_timed=True")
    p.add_argument("--cold", action="store_true", help="do not pre-fault the files")
    p.add_argument("--dir", default=None, help="parent folder of the temporary store (default: $TMPDIR)")
    a = p.parse_args(argv)

    api = benchlib.store_api()
    Message, MessageBatch = api["Message"], api["MessageBatch"]
    body = benchlib.payloads(1, a.size)[0]
    overrides: dict[str, object] = {"flush_commit_log_timed": a.timed_flush}
    if a.mode == "sync":
        overrides["flush_disk_type"] = api["FlushDiskType"].SYNC_FLUSH
    per_op = a.batch if a.mode in ("batch", "bodies") else 1
    msg = Message(benchlib.TOPIC, body)
    batch = MessageBatch([Message(benchlib.TOPIC, b) for b in benchlib.payloads(a.batch, a.size)])
    rec = api["record_length"](msg)
    pool: list[list[bytes]] = []
    if a.mode == "bodies":
        flat = benchlib.payloads(10_000 * a.batch, a.size)
        pool = [flat[i:i + a.batch] for i in range(0, len(flat), a.batch)]
    ops_per_store = int(a.file_size * 0.9) // (rec * per_op)
    total = 0
    stores = 0
    flushes = 0
    t_end = time.perf_counter() + a.seconds
    busy = 0.0
    with tempfile.TemporaryDirectory(prefix="pystore-profile-", dir=a.dir) as d:
        while time.perf_counter() < t_end:
            store = benchlib.open_warm_store(os.path.join(d, "s%d" % stores), a.file_size, warm=not a.cold,
                                             **overrides)
            stores += 1
            t0 = time.perf_counter()
            if a.mode == "single":
                put, n = store.put_message, 0
                while n < ops_per_store:
                    for _ in range(10_000):
                        put(msg)
                    n += 10_000
                    if time.perf_counter() >= t_end:
                        break
            elif a.mode == "construct":
                put, n = store.put_message, 0
                while n < ops_per_store:
                    for _ in range(10_000):
                        put(Message(benchlib.TOPIC, body))
                    n += 10_000
                    if time.perf_counter() >= t_end:
                        break
            elif a.mode == "bodies":
                # as bench/peers.py appends: the caller's bytes, 10 000 distinct batches built before timing
                put, n, fb, topic = store.put_messages, 0, MessageBatch.from_bodies, benchlib.TOPIC
                while True:             # whole passes over the pool, as long as the next one fits in the file
                    for b in pool:
                        put(fb(topic, b))
                    n += len(pool)
                    if n + len(pool) > ops_per_store or time.perf_counter() >= t_end:
                        break
            elif a.mode == "batch":
                put, n = store.put_messages, 0
                while n < ops_per_store:
                    for _ in range(1_000):
                        put(batch)
                    n += 1_000
                    if time.perf_counter() >= t_end:
                        break
            else:
                n = 0
                lock = threading.Lock()
                queue = store._commitlog.queue          # count the flushes: how many puts shared each one
                real_flush = queue.flush

                def counted(least: int, real_flush=real_flush) -> bool:
                    nonlocal flushes
                    flushes += 1
                    return real_flush(least)

                queue.flush = counted

                def worker(store: object = store, lock: threading.Lock = lock) -> None:
                    nonlocal n
                    put = store.put_message
                    k = 0
                    while time.perf_counter() < t_end and k * a.threads < ops_per_store:
                        for _ in range(100):
                            put(msg)
                        k += 100
                    with lock:
                        n += k

                ts = [threading.Thread(target=worker) for _ in range(a.threads)]
                for t in ts:
                    t.start()
                for t in ts:
                    t.join()
            busy += time.perf_counter() - t0
            total += n * per_op
            store.destroy()
    rate = total / busy if busy else 0.0
    print("%s: %d messages of %d B in %.2f s of putting: %.3f M msg/s, %.1f ns/msg (%d store%s)" % (
        a.mode, total, a.size, busy, rate / 1e6, 1e9 / rate if rate else 0.0, stores,
        "" if stores == 1 else "s"))
    if a.mode == "sync" and flushes:
        print("  %d flushes: %.1f puts a flush, %.0f us a flush" % (flushes, total / flushes, 1e6 * busy / flushes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
