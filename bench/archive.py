"""The archive tier's figures, side by side in one run (docs/performance.md, "Archive").

``read`` (default): a store of ``--mib`` MiB of 1 KiB messages over ``--queues`` queues (64 MiB commit-log files)
is archived, then read whole through ``get_columns`` three ways, in rounds that alternate:

- **local**: the store's own files (before its local copies are deleted: a second store, a copy of the first);
- **archive**: the copy whose local files were cleaned away, every read below the local data, from a cold cache
  (each round empties it), over ``file://`` or, with ``--s3``, moto's S3 server on 127.0.0.1; the queues are
  read one after the other, so with several queues a cache smaller than the data fetches each object once per
  queue (``--cache-mib``; a ``file://`` archive's objects are mapped where they lie and take no room of it);
- **floor**: pyarrow reading the same objects' bytes from the same archive (``open_input_file().read()``), what
  any reader of the archive must at least pay.

Prints each round and the medians' ratios archive/floor and archive/local (1.0: as fast).

``lookup``: the same store (``--s3`` or ``file://``), then ``--lookups`` messages at random commit-log offsets
of the archived files, each looked up (``look_message_by_offset``) by a read-only store opened for it (a cold
cache, its manifest read before the clock starts): the median time of the lookup itself and the median bytes it
left in the cache folder (what it fetched).

``lookup --keys``: the same, each message put with a key (``k<i>``) and the index files made small enough
(``--index-entries`` entries each, the default 5,000,000 hash slots: a file of 20 MB of slots plus its entries)
that the store archives several and cleans them away with the commit log; then ``--lookups`` random keys of the
archived messages, each queried (``query_message``) by a read-only store opened for it: the median time of the
query and the median bytes the archive cache fetched for it (``RangeStore.fetched_bytes`` and whole objects:
index files, and the commit-log range of the message found).

``lag``: a writer putting ``--rate`` MB/s of 1 KiB messages for ``--seconds`` into a store with a ``file://``
archive and the service at its default pace; every 100 ms the archive's lag (in sealed files, commit-log bytes
not yet archived / file size) is sampled, and the put latencies are compared with the same run without an
archive (p50, p99).

    python bench/archive.py read --mib 1024 --rounds 3 [--queues 1] [--s3] [--cache-mib 256]
    python bench/archive.py lookup --mib 1024 --lookups 20 [--s3]
    python bench/archive.py lookup --keys --mib 256 --lookups 15 [--s3] [--index-entries 1000000]
    python bench/archive.py lag --rate 100 --seconds 20
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time

from pystore import Message, MessageStore, StoreConfig

FILE = 64 * 1024 * 1024
BODY = 1024


def _fill(root: str, mib: int, queues: int, keys: bool = False, **kw: object) -> int:
    n = mib * 1024 * 1024 // (BODY + 120)
    body = os.urandom(BODY)
    with MessageStore.open(root, mapped_file_size_commit_log=FILE, **kw) as store:  # type: ignore[arg-type]
        put = store.put_message
        for i in range(n):
            put(Message("Bench", body, queue_id=i % queues, keys="k%d" % i if keys else ""))
        store.flush()
    return n


def _read_all(store: MessageStore, queues: int) -> int:
    rows = 0
    for q in range(queues):
        offset = store.get_min_offset_in_queue("Bench", q)
        while True:
            status, nxt, batch = store.get_columns("bench", "Bench", q, offset, 8192, columns=["queue_offset", "body"])
            if batch.num_rows == 0:
                break
            rows += batch.num_rows
            offset = nxt
    return rows


def _allocated(folder: str) -> int:
    return sum(os.stat(os.path.join(d, f)).st_blocks * 512 for d, _, fs in os.walk(folder) for f in fs)


def lookup(args: argparse.Namespace) -> None:
    work = tempfile.mkdtemp(prefix="archive-lookup-")
    server = None
    try:
        if args.s3:
            sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
            from s3server import S3Server
            server = S3Server().start()
            uri, options = "s3://%s/archive" % server.create_bucket(), server.options()
        else:
            uri, options = "file://" + os.path.join(work, "archive"), {}
        root = os.path.join(work, "store")
        cfg = {"archive_uri": uri, "archive_options": options, "archive_interval_ms": 3_600_000,
               "archive_on_seal": False, "mapped_file_size_commit_log": FILE, "file_reserved_time": 0}
        if args.keys:
            cfg["max_index_num"] = args.index_entries
        n = _fill(root, args.mib, 1, keys=args.keys, **{k: v for k, v in cfg.items() if k.startswith("max_")})
        with MessageStore.open(root, **cfg) as store:   # type: ignore[arg-type]
            parts = store._parts
            assert parts is not None and parts.archive is not None and parts.archive.service is not None
            first = store.look_message_by_offset(0)
            assert first is not None
            size = first.store_size         # every record the same size: each file's k-th starts at base + k * size
            parts.cq_store.flush(0)
            if parts.index is not None:
                parts.index.flush()
            while parts.archive.service.run_once():
                pass
            store.execute_delete_files_manually()
            store.clean_files()
            files = parts.archive.manifest.commitlog_files()
        if args.keys:
            _query_keys(args, root, cfg, n)
            return
        rnd = random.Random(7)
        secs, fetched = [], []
        for _ in range(args.lookups):
            f = rnd.choice(files)
            with MessageStore.open(root, read_only=True, **cfg) as store:   # type: ignore[arg-type]
                parts = store._parts
                assert parts is not None and parts.archive is not None
                at = int(f["base"]) + size * rnd.randrange((int(f["size"]) - 4096) // size)
                parts.archive.ensure_loaded()           # the manifest read at open: not the lookup's
                t = time.perf_counter()
                m = store.look_message_by_offset(at)
                secs.append(time.perf_counter() - t)
                assert m is not None and m.commit_log_offset == at
                fetched.append(_allocated(parts.archive.cache.folder))
        print("%d lookups (%s): median %.1f ms (min %.1f, max %.1f), median %.1f MiB in the cache after each"
              % (args.lookups, "s3 (moto)" if args.s3 else "file://", statistics.median(secs) * 1e3,
                 min(secs) * 1e3, max(secs) * 1e3, statistics.median(fetched) / 2**20))
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)


def _query_keys(args: argparse.Namespace, root: str, cfg: dict[str, object], n: int) -> None:
    """``lookup --keys``: random keys of messages whose index entries are only in archived index files."""
    with MessageStore.open(root, read_only=True, **cfg) as store:   # type: ignore[arg-type]
        parts = store._parts
        assert parts is not None and parts.archive is not None and parts.index is not None
        parts.archive.ensure_loaded()
        local = {os.path.basename(f.mapped_file.file_name) for f in parts.index.files}
        gone = [r for r in parts.archive.manifest.index_files() if r["name"].rsplit("/", 1)[-1] not in local]
        if not gone:
            raise SystemExit("no index file was archived and cleaned: lower --index-entries")
        # the keys k0 .. k<below - 1>: their messages lie below the newest cleaned index file's last entry
        last = store.look_message_by_offset(max(int(r["end_phy"]) for r in gone))
        assert last is not None
        below = last.queue_offset
        print("%d messages, keys k0..k%d only in the %d archived index files no longer local (%d local), %.1f MiB "
              "each" % (n, below - 1, len(gone), len(local), int(gone[0]["size"]) / 2**20))
    rnd = random.Random(7)
    secs, fetched = [], []
    for _ in range(args.lookups):
        i = rnd.randrange(below)
        with MessageStore.open(root, read_only=True, **cfg) as store:   # type: ignore[arg-type]
            parts = store._parts
            assert parts is not None and parts.archive is not None
            parts.archive.ensure_loaded()           # the manifest read at open: not the query's
            cache = parts.archive.cache
            t = time.perf_counter()
            r = store.query_message("Bench", "k%d" % i)
            secs.append(time.perf_counter() - t)
            assert [m.queue_offset for m in r.messages] == [i], (i, [m.queue_offset for m in r.messages])
            # whole objects (fetched, or mapped where they lie in a file:// archive) and ranges
            fetched.append(cache.bytes + cache.borrowed_bytes + cache.ranges.fetched_bytes)
    print("%d key queries (%s): median %.1f ms (min %.1f, max %.1f), median %.1f MiB fetched (file://: mapped) each"
          % (args.lookups, "s3 (moto)" if args.s3 else "file://", statistics.median(secs) * 1e3,
             min(secs) * 1e3, max(secs) * 1e3, statistics.median(fetched) / 2**20))


def read(args: argparse.Namespace) -> None:
    work = tempfile.mkdtemp(prefix="archive-bench-")
    server = None
    try:
        local, archived = os.path.join(work, "local"), os.path.join(work, "archived")
        if args.s3:
            sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
            from s3server import S3Server
            server = S3Server().start()
            bucket = server.create_bucket()
            uri, options = "s3://%s/archive" % bucket, server.options()
        else:
            uri, options = "file://" + os.path.join(work, "archive"), {}
        n = _fill(local, args.mib, args.queues)
        shutil.copytree(local, archived)
        cfg = {"archive_uri": uri, "archive_options": options, "archive_interval_ms": 3_600_000, "archive_on_seal": False,
               "mapped_file_size_commit_log": FILE, "file_reserved_time": 0, "archive_cache_bytes": args.cache_mib << 20}
        with MessageStore.open(archived, **cfg) as store:   # type: ignore[arg-type]
            parts = store._parts
            assert parts is not None and parts.archive is not None and parts.archive.service is not None
            parts.cq_store.flush(0)
            t = time.perf_counter()
            while parts.archive.service.run_once():
                pass
            upload = time.perf_counter() - t
            store.execute_delete_files_manually()
            store.clean_files()
            info = store.archive_info()
        print("%d messages, %d MiB; uploaded %d files in %.2f s; local data left from offset %s"
              % (n, args.mib, info["uploaded_files"], upload, info["end_phy_offset"]))
        target = parts.archive.target
        names = [r["name"] for r in parts.archive.manifest.commitlog_files()]
        fs, root = target.fs, target.root
        times: dict[str, list[float]] = {"local": [], "archive": [], "floor": []}
        for rnd in range(args.rounds):
            t = time.perf_counter()
            total = 0
            for name in names:
                with fs.open_input_file(root.rstrip("/") + "/" + name) as f:
                    total += len(f.read())
            times["floor"].append(time.perf_counter() - t)
            with MessageStore.open(archived, read_only=True, **cfg) as store:   # type: ignore[arg-type]
                t = time.perf_counter()
                rows = _read_all(store, args.queues)
                times["archive"].append(time.perf_counter() - t)
                assert rows == n, (rows, n)
            with MessageStore.open(local, read_only=True, mapped_file_size_commit_log=FILE) as store:
                t = time.perf_counter()
                rows = _read_all(store, args.queues)
                times["local"].append(time.perf_counter() - t)
                assert rows == n
            print("round %d: floor %.2f s (%d MiB), archive %.2f s, local %.2f s"
                  % (rnd, times["floor"][-1], total >> 20, times["archive"][-1], times["local"][-1]))
        med = {k: statistics.median(v) for k, v in times.items()}
        print("medians: archive/floor speed %.2fx, archive/local speed %.2fx (%s)"
              % (med["floor"] / med["archive"], med["local"] / med["archive"], "s3 (moto)" if args.s3 else "file://"))
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)


def lag(args: argparse.Namespace) -> None:
    work = tempfile.mkdtemp(prefix="archive-lag-")
    try:
        body = os.urandom(BODY)
        per_s = args.rate * 1024 * 1024 // (BODY + 120)
        results = {}
        for with_archive in (False, True):
            root = os.path.join(work, "a" if with_archive else "plain")
            kw: dict[str, object] = {"mapped_file_size_commit_log": FILE}
            if with_archive:
                kw["archive_uri"] = "file://" + os.path.join(work, "archive")
            lats: list[int] = []
            worst_lag = 0
            with MessageStore.open(root, **kw) as store:    # type: ignore[arg-type]
                put = store.put_message
                start = time.perf_counter()
                sent = 0
                next_sample = start
                while time.perf_counter() - start < args.seconds:
                    due = int((time.perf_counter() - start) * per_s)
                    while sent < due:
                        t = time.perf_counter_ns()
                        put(Message("Lag", body))
                        lats.append(time.perf_counter_ns() - t)
                        sent += 1
                    now = time.perf_counter()
                    if with_archive and now >= next_sample:
                        info = store.archive_info()
                        behind = info["lag_bytes"]
                        worst_lag = max(worst_lag, int(behind) // FILE)       # type: ignore[call-overload]
                        next_sample = now + 0.1
                    time.sleep(0.0005)
                elapsed = time.perf_counter() - start
            lats.sort()
            results[with_archive] = (sent / elapsed * (BODY + 120) / 2**20, lats[len(lats) // 2] / 1e3,
                                     lats[int(len(lats) * 0.99)] / 1e3, worst_lag)
            print("%s: %.0f MB/s put, p50 %.2f us, p99 %.2f us%s" % (
                "with archive" if with_archive else "no archive  ", results[with_archive][0],
                results[with_archive][1], results[with_archive][2],
                ", archive lag at most %d sealed file(s) behind" % worst_lag if with_archive else ""))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="what")
    r = sub.add_parser("read")
    r.add_argument("--mib", type=int, default=256)
    r.add_argument("--queues", type=int, default=4)
    r.add_argument("--rounds", type=int, default=3)
    r.add_argument("--s3", action="store_true")
    r.add_argument("--cache-mib", type=int, default=StoreConfig().archive_cache_bytes >> 20,
                   help="archive_cache_bytes in MiB (fetched copies; default: the store's)")
    k = sub.add_parser("lookup")
    k.add_argument("--mib", type=int, default=256)
    k.add_argument("--lookups", type=int, default=20)
    k.add_argument("--s3", action="store_true")
    k.add_argument("--keys", action="store_true", help="query_message of random archived keys")
    k.add_argument("--index-entries", type=int, default=100_000, help="with --keys: max_index_num")
    g = sub.add_parser("lag")
    g.add_argument("--rate", type=int, default=100)
    g.add_argument("--seconds", type=float, default=20)
    args = p.parse_args()
    if args.what == "lag":
        lag(args)
    elif args.what == "lookup":
        lookup(args)
    else:
        if args.what is None:
            args = r.parse_args([])
        read(args)


if __name__ == "__main__":
    main()
