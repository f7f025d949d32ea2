"""``pystore export``: the messages of a store to Parquet (pyarrow, or Spark with ``--spark``); both paths write
the timestamps as UTC instants in milliseconds (Parquet ``TIMESTAMP(MILLIS, UTC)``)."""

from __future__ import annotations

import os
import sys
import time

import click

from pystore.cli.common import console, err_console, esc, fail, handle_store_errors, human_bytes, require_store


@click.command(short_help="messages to Parquet (pyarrow, or Spark with --spark)")
@click.argument("root", type=click.Path())
@click.argument("out", type=click.Path(dir_okay=True))
@click.option("--topic", "-t", "topics", multiple=True, help="only this topic; repeatable")
@click.option(
    "--spark",
    "use_spark",
    is_flag=True,
    help="go through Spark (pystore.spark) instead of pyarrow; OUT is then a Parquet folder",
)
@click.option("--no-verify-crc", is_flag=True, help="export records with a bad body CRC as stored")
@handle_store_errors
def export(root: str, out: str, topics: tuple[str, ...], use_spark: bool, no_verify_crc: bool) -> None:
    """Write the messages of ROOT to the Parquet file OUT: one row per message, with the columns of a Spark
    read of the store (timestamps as UTC milliseconds, with or without --spark). Exporting no message (an
    empty store, a topic that has none) writes an empty file and is not an error."""
    require_store(root)
    if use_spark:
        _export_spark(root, out, topics, not no_verify_crc)
        return
    from pystore.columns import export as ex

    try:
        ex._pa()
    except ImportError:
        fail(ex.MISSING_PYARROW)
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    # the bar counts the data exported: the commit-log files are allocated at full size before they fill,
    # so their sizes say nothing of how much is left
    with Progress(
        SpinnerColumn(),
        TextColumn("export: {task.completed:,.0f} message(s), {task.fields[size]} of records"),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
        disable=not err_console.is_terminal,  # a bar is for a terminal's eyes
    ) as progress:
        task = progress.add_task("export", total=None, size=human_bytes(0))

        def on_progress(records: int, record_bytes: int) -> None:
            progress.update(task, completed=records, size=human_bytes(record_bytes))

        res = ex.export_parquet(
            root, out, topics=topics or None, verify_crc=not no_verify_crc, progress=on_progress
        )
    console.print(
        "wrote %d message(s) (%s of records) to %s in %.2f s"
        % (res.rows, human_bytes(res.bytes_in), esc(res.path), res.seconds)
    )
    if res.rows == 0:
        console.print("no messages%s" % (" in topic(s) %s" % esc(", ".join(topics)) if topics else ""))


def spark_python_env() -> None:
    """Make Spark's Python workers (and driver) this interpreter unless the user chose one: without it
    Spark runs ``python3`` from PATH, which lacks pystore when the venv is not activated."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def _export_spark(root: str, out: str, topics: tuple[str, ...], verify_crc: bool) -> None:
    try:
        import pystore.spark as ps
    except ImportError as e:
        fail("--spark needs pystore.spark and pyspark (install pystore-mq[spark]): %s" % e)
    if not hasattr(ps, "register"):
        fail("pystore.spark has no register(spark) in this version")
    from pyspark.sql import SparkSession

    spark_python_env()
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("pystore-export")
        .config("spark.ui.enabled", "false")
        # Spark's default writes timestamps as INT96, which readers take as naive nanoseconds: UTC
        # milliseconds instead, the type the pyarrow path writes (pystore.columns.export.arrow_schema)
        .config("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MILLIS")
        # Spark's stage bar redraws itself with carriage returns: for a terminal's eyes only
        .config("spark.ui.showConsoleProgress", str(err_console.is_terminal).lower())
        .getOrCreate()
    )
    try:
        ps.register(spark)
        reader = spark.read.format("pystore").option("verify_crc", str(verify_crc).lower())
        df = reader.load(os.path.abspath(root))
        if topics:
            df = df.where(df.topic.isin(list(topics)))
        t0 = time.perf_counter()
        df.write.mode("overwrite").parquet(out)
        n = spark.read.parquet(out).count()
        console.print(
            "wrote %d message(s) through Spark to %s in %.1f s" % (n, esc(out), time.perf_counter() - t0)
        )
    finally:
        spark.stop()
