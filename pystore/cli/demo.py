"""``pystore demo``: the tour of the store (the work is :func:`pystore.cli.tour.run_demo`)."""

from __future__ import annotations

import sys

import click

from pystore.cli.common import OK, PROBLEM, console, handle_store_errors


@click.command(short_help="put, read, query, restart: a tour in a demo store")
@click.argument("root", default="./pystore-demo", type=click.Path())
@click.option("--fresh", is_flag=True, help="wipe the demo store first (else the demo appends to it)")
@click.option(
    "--spark/--no-spark",
    default=None,
    help="run the Spark part (default: when pystore.spark, pyspark and Java are there, unless "
    "PYSTORE_DEMO_SPARK=0)",
)
@click.option(
    "--messages",
    "-n",
    default=5000,
    show_default=True,
    type=click.IntRange(100, 1_000_000),
    help="single puts (batches add as many again)",
)
@handle_store_errors
def demo(root: str, fresh: bool, spark: bool | None, messages: int) -> None:
    """Put, read, query, restart and show what survived, in a store at ROOT (default ./pystore-demo)."""
    from pystore.cli.tour import run_demo

    ok = run_demo(root, console, fresh=fresh, spark=spark, messages=messages)
    sys.exit(OK if ok else PROBLEM)
