"""``pystore clean``: a cleaning pass (expired commit-log files, expired and unused consume queues)."""

from __future__ import annotations

import os
from typing import Any

import click
from rich.text import Text

from pystore.cli.common import (
    build_config,
    console,
    esc,
    handle_store_errors,
    open_store,
    require_store,
    store_options,
    table,
)


@click.command(short_help="delete expired files, expired and unused queues")
@click.argument("root", type=click.Path())
@click.option(
    "--expired",
    is_flag=True,
    help="delete expired commit-log files now, whatever the hour (execute_delete_files_manually)",
)
@click.option("--topic-keep", metavar="T1,T2", help="remove the consume queues of every other topic")
@store_options
@handle_store_errors
def clean(
    root: str, expired: bool, topic_keep: str | None, config_file: str | None, sets: tuple[str, ...]
) -> None:
    """A cleaning pass: expired commit-log files (--expired), then the files and queues left pointing below
    the commit log, and the queues of unused topics (--topic-keep)."""
    cfg = build_config(root, config_file, sets, False)
    require_store(root, cfg)
    keep = {t.strip() for t in topic_keep.split(",") if t.strip()} if topic_keep is not None else None
    if topic_keep is not None and not keep:
        raise click.BadParameter("name at least one topic to keep", param_hint="--topic-keep")
    with open_store(root, config_file, sets, read_only=False) as store:
        min_before = store.get_min_phy_offset()
        rows: list[tuple[str, str]] = []
        if expired:
            store.execute_delete_files_manually()
        cl_n, other_n = store.clean_files()
        rows.append(("commit-log files deleted", str(cl_n)))
        rows.append(("consume-queue and index files deleted", str(other_n)))
        removed = store.clean_expired_consumer_queue()
        rows.append(("expired queues removed", _queues_text(removed)))
        if keep is not None:
            removed = store.clean_unused_topic(keep)
            rows.append(("queues of unused topics removed", _queues_text(removed)))
        rows.append(("commit log min offset", "%d -> %d" % (min_before, store.get_min_phy_offset())))
    t = table("clean %s" % esc(os.path.abspath(root)), show_header=False)
    t.add_column("what", style="bold")
    t.add_column("result")
    for a, b in rows:
        t.add_row(a, Text(b))
    console.print(t)


def _queues_text(removed: Any) -> str:
    if not removed:
        return "none"
    if isinstance(removed, int):
        return str(removed)
    items = sorted(removed)
    text = ", ".join("%s/%d" % q for q in items[:20])
    return text + (" and %d more" % (len(items) - 20) if len(items) > 20 else "")
