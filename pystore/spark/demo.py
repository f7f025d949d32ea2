"""The Spark half of ``pystore demo`` (``make demo`` when pyspark and Java are present): the worked pipeline of
``docs/spark.md`` on the demo's store — read it as a DataFrame, aggregate per topic, write a DataFrame into a
second store next to it, and stream that store with ``Trigger.AvailableNow`` twice on one checkpoint (the
second run must find only what was appended in between). Every step checks its result against the store
itself, so the demo fails loudly instead of printing wrong figures.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import time
from typing import Any

log = logging.getLogger(__name__)


def _session() -> Any:
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    path = os.pathsep.join(p for p in sys.path if p)
    os.environ["PYTHONPATH"] = path + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")
    return (SparkSession.builder.master("local[2]").appName("pystore-demo")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.driver.extraJavaOptions", "-XX:+UseSerialGC -XX:TieredStopAtLevel=1")
            .getOrCreate())


def demo_pipeline(root: str, console: Any) -> None:
    """Run the pipeline on the (shut down or live) store at ``root``; raises AssertionError on a wrong result."""
    from pyspark.sql import functions as F

    import pystore.spark
    from pystore import MessageStore

    t0 = time.perf_counter()
    spark = _session()
    spark.sparkContext.setLogLevel("ERROR")
    try:
        pystore.spark.register(spark)
        console.print("  spark %s session up in %.1f s" % (spark.version, time.perf_counter() - t0))

        # 1. read the demo store and aggregate per topic
        t = time.perf_counter()
        df = spark.read.format("pystore").load(root)
        per_topic = (df.groupBy("topic")
                     .agg(F.count("*").alias("messages"), F.sum(F.length("body")).alias("body_bytes"))
                     .orderBy("topic").collect())
        with MessageStore.open(root, read_only=True) as ro:
            expected: dict[str, int] = {}
            for (topic, _qid), n in ro.get_topic_queue_table().items():
                expected[topic] = expected.get(topic, 0) + n - ro.get_min_offset_in_queue(topic, _qid)
        got = {r["topic"]: r["messages"] for r in per_topic}
        for topic, n in expected.items():
            assert got.get(topic) == n, "spark read %s messages of %s, the store holds %d" % (
                got.get(topic), topic, n)
        for r in per_topic:
            console.print("  read %-14s %8d messages %10d body bytes" % (r["topic"], r["messages"], r["body_bytes"]))
        console.print("  batch read + aggregate: %.1f s" % (time.perf_counter() - t))

        # 2. write a DataFrame into a second store, through the store's own put path
        from pystore.queue._units import UNIT_SIZE

        out = root.rstrip(os.sep) + "-spark"
        shutil.rmtree(out, ignore_errors=True)
        small = {"mapped_file_size_commit_log": str(4 << 20), "mapped_file_size_consume_queue": str(UNIT_SIZE * 30000),
                 "max_hash_slot_num": "40000", "max_index_num": "160000"}
        summary = (df.groupBy("topic", "tags").count()
                   .select(F.lit("DemoSummary").alias("topic"),
                           F.to_json(F.struct("topic", "tags", "count")).cast("binary").alias("body"),
                           F.coalesce(F.col("tags"), F.lit("none")).alias("tags")))
        writer = summary.write.format("pystore").mode("append")
        for k, v in small.items():
            writer = writer.option(k, v)
        writer.save(out)
        rows = summary.count()
        with MessageStore.open(out, read_only=True) as ro:
            stored = ro.get_max_offset_in_queue("DemoSummary", 0)
        assert stored == rows, "wrote %d rows, the new store holds %d" % (rows, stored)
        console.print("  wrote %d summary rows into %s" % (rows, out))

        # 3. stream it: everything now, then only what is appended afterwards, on one checkpoint
        ckpt = out + "-checkpoint"
        shutil.rmtree(ckpt, ignore_errors=True)

        lake = out + "-lake"
        shutil.rmtree(lake, ignore_errors=True)

        def stream_once() -> int:
            before = spark.read.parquet(lake).count() if os.path.isdir(lake) else 0
            q = (spark.readStream.format("pystore").option("topics", "DemoSummary").load(out)
                 .select("topic", "queue_id", "queue_offset", F.col("body").cast("string").alias("json"))
                 .writeStream.format("parquet").option("path", lake)
                 .option("checkpointLocation", ckpt).trigger(availableNow=True).start())
            q.awaitTermination()
            return spark.read.parquet(lake).count() - before

        first = stream_once()
        with MessageStore.open(out, read_only=False, **{k: int(v) for k, v in small.items()}) as s:
            from pystore import Message

            for i in range(3):
                assert s.put_message(Message("DemoSummary", b"appended %d" % i, tags="late")).is_ok()
        second = stream_once()
        assert first == rows and second == 3, "stream read %d then %d, expected %d then 3" % (first, second, rows)
        console.print("  streamed %d messages, then exactly the %d appended after (one checkpoint)" % (first, second))
        console.print("  spark pipeline: %.1f s" % (time.perf_counter() - t0))
    finally:
        spark.stop()
