"""Spark over a fleet of stores (docs/performance.md, "Spark over a fleet"): planning time on the driver, one batch
query over every store, and a stream over them that is killed (SIGKILL of the driver: the Python process and its
JVM) and resumed on its checkpoint, checked for loss and duplicates.

``--stores`` stores of ``--messages`` messages each (64 B bodies naming their store and sequence, over
``--queues`` queues of one topic, 64 MiB commit-log files); with ``--archive`` each store's sealed files are
copied to a ``file://`` archive (``--s3``: to moto's S3 server on 127.0.0.1, started in this process) and deleted
locally, so the fleet is read as root + archive per store.

    python bench/spark_fleet.py --stores 10 --messages 1000000 [--archive [--s3]] [--no-stream]

Prints: the build time; planning (``partitions()`` of the batch reader, as the driver runs it) by topic and of the
whole log, with the partition counts; the batch query's count and time; the stream's micro-batches before the
kill, the resumed run, and the rows checked (count, distinct bodies, per-store ranges).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

from pystore import MessageStore

FILE = 64 * 1024 * 1024
TOPIC = "Fleet"


#: the archive's file system options (JSON) when the archives are on S3, handed to every read
ARCHIVE_OPTIONS = ""


def _build(work: str, stores: int, messages: int, queues: int, archive: bool, bucket: str | None) -> list[str]:
    locations = []
    for s in range(stores):
        root = os.path.join(work, "broker-%02d" % s, "store")
        kw: dict[str, object] = {"mapped_file_size_commit_log": FILE}
        if archive:
            uri = ("s3://%s/broker-%02d" % (bucket, s) if bucket else
                   "file://" + os.path.join(work, "arch", "broker-%02d" % s))
            kw.update(archive_uri=uri, archive_interval_ms=3_600_000, archive_on_seal=False, file_reserved_time=0,
                      archive_options=json.loads(ARCHIVE_OPTIONS or "{}"))
            locations.append(uri)
        with MessageStore.open(root, **kw) as store:  # type: ignore[arg-type]
            step = 8192
            for first in range(0, messages, step):
                n = min(step, messages - first)
                q = (first // step) % queues
                bodies = [b"s%02d-%09d-" % (s, i) + b"x" * 50 for i in range(first, first + n)]
                r = store.put_columns(TOPIC, bodies, queue_id=q, batch=True)
                assert r.count == n, r
            store.flush()
            if archive:
                store._cq_store.flush(0)
                while store._parts.archive.service.run_once():
                    pass
                store.execute_delete_files_manually()
                store.clean_files()
        locations.append(root)
    return locations


def _plan(locations: list[str], topic: bool) -> tuple[float, int]:
    from pystore.spark.batch import PystoreBatchReader

    options = {"path": ",".join(locations)}
    if ARCHIVE_OPTIONS:
        options["archive_options"] = ARCHIVE_OPTIONS
    if topic:
        options["subscribe"] = TOPIC
    best, n = float("inf"), 0
    for _ in range(3):
        t = time.perf_counter()
        n = len(PystoreBatchReader(options, None, parallelism=2).partitions())
        best = min(best, time.perf_counter() - t)
    return best, n


_SESSION = """
import os, sys
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[2]").appName("pystore-fleet-bench")
         .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
         .config("spark.sql.shuffle.partitions", "2").config("spark.driver.bindAddress", "127.0.0.1")
         .config("spark.driver.host", "127.0.0.1").config("spark.sql.session.timeZone", "UTC").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
import pystore.spark
pystore.spark.register(spark)
"""

_STREAM = _SESSION + """
locations, out, ckpt, per_trigger, mode, archive_options = sys.argv[1:7]
r = spark.readStream.format("pystore").option("subscribe", "Fleet").option("maxOffsetsPerTrigger", per_trigger)
if archive_options:
    r = r.option("archive_options", archive_options)
r = r.load(locations)
w = r.select("body").writeStream.format("parquet").option("path", out).option("checkpointLocation", ckpt)
q = (w.trigger(availableNow=True) if mode == "drain" else w.trigger(processingTime="0 seconds")).start()
q.awaitTermination()
"""


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    return env


def _batch(locations: list[str]) -> tuple[float, int]:
    code = _SESSION + textwrap.dedent("""
        import time
        t = time.perf_counter()
        r = spark.read.format("pystore").option("subscribe", "Fleet")
        if sys.argv[2]:
            r = r.option("archive_options", sys.argv[2])
        n = r.load(sys.argv[1]).select("queue_offset").count()
        print("RESULT", n, time.perf_counter() - t)
    """)
    out = subprocess.run([sys.executable, "-c", code, ",".join(locations), ARCHIVE_OPTIONS], env=_env(), capture_output=True,
                         text=True, check=True).stdout
    line = next(x for x in out.splitlines() if x.startswith("RESULT"))
    _, n, secs = line.split()
    return float(secs), int(n)


def _commits(ckpt: str) -> int:
    d = os.path.join(ckpt, "commits")
    return len([n for n in os.listdir(d) if n.isdigit()]) if os.path.isdir(d) else 0


def _committed_files(out: str) -> list[str]:
    meta = os.path.join(out, "_spark_metadata")
    paths: set[str] = set()
    for name in os.listdir(meta):
        if name.split(".")[0].isdigit():
            with open(os.path.join(meta, name)) as f:
                for line in f.read().splitlines()[1:]:         # the first line is the log's version
                    entry = json.loads(line)
                    if entry.get("action", "add") == "add":
                        paths.add(entry["path"].removeprefix("file://"))
    return sorted(paths)


def _stream_with_kill(locations: list[str], work: str, total: int) -> dict[str, object]:
    out, ckpt = os.path.join(work, "stream-out"), os.path.join(work, "stream-ckpt")
    per = str(max(1, total // 8))
    p = subprocess.Popen([sys.executable, "-c", _STREAM, ",".join(locations), out, ckpt, per, "run", ARCHIVE_OPTIONS],
                         env=_env(),
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 600
    while _commits(ckpt) < 2 and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(0.5)                          # into the next micro-batch: its offsets logged, its commit not yet
    before = _commits(ckpt)
    os.killpg(p.pid, signal.SIGKILL)         # the driver and its JVM, at once
    p.wait()
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", _STREAM, ",".join(locations), out, ckpt, per, "drain", ARCHIVE_OPTIONS],
                   env=_env(),
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    resumed = time.perf_counter() - t
    import pyarrow.parquet as pq

    # what the sink committed (its _spark_metadata log), not the files a killed task left half-written
    bodies: list[bytes] = []
    for path in _committed_files(out):
        bodies += pq.read_table(path).column("body").to_pylist()
    return {"batches_before_kill": before, "resume_s": round(resumed, 1), "rows": len(bodies),
            "distinct": len(set(bodies)), "expected": total}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stores", type=int, default=10)
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--queues", type=int, default=8)
    ap.add_argument("--archive", action="store_true")
    ap.add_argument("--s3", action="store_true", help="the archives on moto's S3 server (with --archive)")
    ap.add_argument("--no-stream", action="store_true")
    ap.add_argument("--work", help="folder for the stores (default: a temporary one, removed after)")
    a = ap.parse_args()
    work = a.work or tempfile.mkdtemp(prefix="pystore-fleet-")
    server, bucket = None, None
    try:
        if a.s3:
            global ARCHIVE_OPTIONS
            sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
            from s3server import S3Server
            server = S3Server().start()
            bucket = server.create_bucket()
            ARCHIVE_OPTIONS = json.dumps(server.options())
        t = time.perf_counter()
        locations = _build(work, a.stores, a.messages, a.queues, a.archive, bucket)
        total = a.stores * a.messages
        print("built %d store(s) x %d messages in %.1f s%s" % (a.stores, a.messages, time.perf_counter() - t,
                                                               " (archived, local files cleaned)" if a.archive else ""))
        for topic in (True, False):
            secs, n = _plan(locations, topic)
            print("plan %-12s %7.3f s  %d partition(s)" % ("by topic" if topic else "whole log", secs, n))
        secs, n = _batch(locations)
        print("batch count  %7.1f s  %d rows (%s)" % (secs, n, "ok" if n == total else "EXPECTED %d" % total))
        if not a.no_stream:
            r = _stream_with_kill(locations, work, total)
            ok = r["rows"] == r["distinct"] == total
            print("stream       killed after %s micro-batch(es), resumed in %s s: %s rows, %s distinct (%s)"
                  % (r["batches_before_kill"], r["resume_s"], r["rows"], r["distinct"], "ok" if ok else "LOSS/DUP"))
            print(json.dumps(r))
            if not ok:
                sys.exit(1)
    finally:
        if server is not None:
            server.stop()
        if not a.work:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
