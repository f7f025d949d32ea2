"""PySpark data source for pystore stores (docs/api.md "Spark — pystore.spark").

``pystore.spark.register(spark)`` registers the source ``"pystore"``; then:

* ``spark.read.format("pystore").load(root)`` — one row per message (:mod:`pystore.spark.batch`);
* ``spark.readStream.format("pystore").option("topics", "T1,T2").load(root)`` — a streaming source with
  consume-queue offsets (:mod:`pystore.spark.stream`);
* ``df.write.format("pystore").mode("append").save(root)`` — appends rows as messages
  (:mod:`pystore.spark.writer`).

Records are decoded in C straight into Arrow buffers (``pystore.columns._arrow``). The source does not push
filters down (PySpark reuses a DataFrame's pushed filters across later queries of the same DataFrame,
see docs/spark.md): use the ``topic``/``queue_id``/``start_time``/``end_time`` options to read less, and a
read schema of the columns a query uses (``.schema("queue_offset long, body binary")``, the source's
projection: PySpark prunes no column of a Python source itself).
Needs the ``spark`` extra: ``pip install pystore-mq[spark]`` (PySpark >= 4.0, PyArrow).
"""

from __future__ import annotations

import logging
from typing import Any

try:
    import pyarrow  # noqa: F401
    import pyspark  # noqa: F401
    from pyspark.sql.datasource import DataSource  # noqa: F401  (PySpark >= 4.0)
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "pystore.spark needs PySpark >= 4.0 and PyArrow (%s): install pystore-mq[spark]" % exc
    ) from exc

from pystore.spark.progress import offsets_behind_latest
from pystore.spark.schema import DDL, arrow_schema, spark_schema
from pystore.spark.source import PystoreDataSource, with_parallelism

__all__ = [
    "register",
    "default_parallelism",
    "offsets_behind_latest",
    "demo_pipeline",
    "PystoreDataSource",
    "DDL",
    "spark_schema",
    "arrow_schema",
]

log = logging.getLogger(__name__)


def register(spark: Any) -> None:
    """Register the ``"pystore"`` data source on ``spark`` (a ``SparkSession``); its reads aim at the
    session's ``spark.default.parallelism`` partitions when no ``minPartitions`` is given."""
    spark.dataSource.register(with_parallelism(default_parallelism(spark)))


def default_parallelism(spark: Any) -> int | None:
    """``spark``'s default parallelism: ``sparkContext.defaultParallelism`` (``spark.default.parallelism``,
    else the cores of a local master or all executors' cores), or on Spark Connect, which has no
    ``sparkContext``, the ``spark.default.parallelism`` setting; None when neither says."""
    try:
        n = int(spark.sparkContext.defaultParallelism)
    except (AttributeError, NotImplementedError):  # Spark Connect raises PySparkNotImplementedError
        raw = spark.conf.get("spark.default.parallelism", None)
        try:
            n = int(raw) if raw is not None else 0
        except ValueError:
            log.warning("spark.default.parallelism is %r, not a number: the source plans for its cores", raw)
            return None
    return n if n >= 1 else None


def demo_pipeline(root: str, console: Any) -> None:
    """The Spark part of ``pystore demo`` (see ``pystore.spark.demo``)."""
    from pystore.spark.demo import demo_pipeline as run

    run(root, console)
