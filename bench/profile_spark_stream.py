"""Where a Spark streaming drain of a store spends its time (issue 22): the split between query start and
stop, the micro-batches' planning (``latestOffset``, offset log, ``queryPlanning``, commit), their
``addBatch`` (the tasks: Python workers decoding, Arrow into the JVM) and the decode alone outside Spark.

    python bench/profile_spark_stream.py                      # 1 M x 128 B in 4 queues, 3 drains
    python bench/profile_spark_stream.py --messages 200000 --drains 5 --option maxOffsetsPerTrigger=250000

Each drain is a ``Trigger.AvailableNow`` query into the ``noop`` sink (what ``bench_spark.py``'s
``test_spark_stream_drain`` times). Printed per drain: the wall time from ``start()`` to the end of
``awaitTermination()``, the micro-batches, the sum of each ``durationMs`` phase over them, the rows per
second over the wall time and over the summed ``addBatch`` (the steady rate inside the drain), and the
progress's own ``processedRowsPerSecond``. Then, without Spark, the time ``read_slice`` takes to decode the
same partitions in this process (one core), so ``addBatch`` minus that is Spark's share.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import benchlib  # noqa: E402

QUEUES = 4


def build_store(root: str, n: int, size: int) -> None:
    api = benchlib.store_api()
    Message, MessageBatch = api["Message"], api["MessageBatch"]
    bodies = benchlib.payloads(n, size)
    with api["MessageStore"].open(root, mapped_file_size_commit_log=256 << 20, message_index_enable=False) as store:
        for q in range(QUEUES):
            idx = range(q, n, QUEUES)
            for s in range(0, len(idx), 64):
                batch = MessageBatch(
                    [Message(benchlib.TOPIC, bodies[i], tags="TagA", keys=["k%07d" % i], queue_id=q)
                     for i in idx[s : s + 64]]
                )
                r = store.put_messages(batch)
                assert r.status.name == "PUT_OK", r


def session(cores: int) -> Any:
    return benchlib.spark_session(cores, "pystore-stream-profile")


def drain(spark: Any, root: str, checkpoint: str, n: int, options: dict[str, str]) -> dict[str, Any]:
    reader = spark.readStream.format("pystore").option("topics", benchlib.TOPIC)
    for k, v in options.items():
        reader = reader.option(k, v)
    t0 = time.perf_counter()
    epoch0 = time.time()
    q = (reader.load(root).writeStream.format("noop").option("checkpointLocation", checkpoint)
         .trigger(availableNow=True).start())
    t_started = time.perf_counter()
    q.awaitTermination(600)
    wall = time.perf_counter() - t0
    if q.exception() is not None:
        raise RuntimeError(str(q.exception()))
    from datetime import datetime

    timeline = []
    for p in q.recentProgress:
        at = datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp() - epoch0
        timeline.append("%.2f+%.2f(%d)" % (at, p["durationMs"].get("triggerExecution", 0) / 1000.0,
                                            p["numInputRows"]))
    progress = [p for p in q.recentProgress if p["numInputRows"] > 0]
    rows = sum(p["numInputRows"] for p in progress)
    assert rows == n, "the stream read %d rows, %d were put" % (rows, n)
    phases: dict[str, int] = {}
    for p in progress:
        for k, v in p["durationMs"].items():
            phases[k] = phases.get(k, 0) + v
    return {
        "wall": wall,
        "start_call": t_started - t0,
        "batches": len(progress),
        "phases": phases,
        "pps": [p.get("processedRowsPerSecond", 0.0) for p in progress],
        "rows": rows,
        "timeline": " ".join(timeline),
    }


def decode_alone(root: str, options: dict[str, str]) -> tuple[float, int, int]:
    """Seconds to plan and decode the whole drain as one micro-batch in this process, partitions, rows."""
    from pystore.spark.batch import read_slice
    from pystore.spark.schema import arrow_schema, spark_schema
    from pystore.spark.stream import PystoreStreamReader

    r = PystoreStreamReader({"path": root, "topics": benchlib.TOPIC, **{k.lower(): v for k, v in options.items()}},
                            spark_schema())
    start = r.initialOffset()
    end = r.latestOffset(start, None)
    t = time.perf_counter()
    parts = r.partitions(start, end)
    rows = 0
    from pystore.spark.batch import Filters

    f = Filters([], -1, None, None, True, True)
    schema = arrow_schema(spark_schema())
    for part in parts:
        for rb in read_slice(part, f, schema):
            rows += rb.num_rows
    return time.perf_counter() - t, len(parts), rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=1_000_000)
    p.add_argument("--size", type=int, default=128)
    p.add_argument("--drains", type=int, default=3)
    p.add_argument("--cores", type=int, default=2)
    p.add_argument("--root", help="a store built by an earlier run (kept); default: a temporary one")
    p.add_argument("--option", action="append", default=[], help="NAME=VALUE, a stream option")
    a = p.parse_args(argv)
    options = dict(o.split("=", 1) for o in a.option)
    tmp = tempfile.mkdtemp(prefix="pystore-stream-profile-")
    try:
        root = a.root or os.path.join(tmp, "store")
        if not os.path.isdir(root):
            t = time.perf_counter()
            build_store(root, a.messages, a.size)
            print("store of %d x %d B built in %.1f s" % (a.messages, a.size, time.perf_counter() - t))
        took, nparts, rows = decode_alone(root, options)
        print("decode alone (one process, plan + read_slice of every partition): %.3f s, %d partitions, "
              "%.2f M rows/s" % (took, nparts, rows / took / 1e6))
        spark = session(a.cores)
        for i in range(a.drains):
            d = drain(spark, root, os.path.join(tmp, "ckpt-%d" % i), a.messages, options)
            ph = d["phases"]
            add = ph.get("addBatch", 0) / 1000.0
            print(
                "drain %d: wall %.2f s (start() %.2f s), %d batch(es), %.2f M rows/s wall, %.2f M rows/s over "
                "addBatch (%.2f s); processedRowsPerSecond %s; phases ms %s; triggers at+took(rows) %s; load %s"
                % (i, d["wall"], d["start_call"], d["batches"], d["rows"] / d["wall"] / 1e6,
                   d["rows"] / add / 1e6 if add else 0.0, add,
                   " ".join("%.0f" % x for x in d["pps"]),
                   " ".join("%s=%d" % kv for kv in sorted(ph.items())), d["timeline"],
                   " ".join("%.2f" % x for x in os.getloadavg()))
            )
        spark.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
