"""``pystore verify``: CRCs of the commit log, every consume-queue unit and a sample of the index."""

from __future__ import annotations

import os
import sys
from typing import Any

import click
from rich.text import Text

from pystore.cli.common import (
    OK,
    PROBLEM,
    build_config,
    console,
    err_console,
    esc,
    handle_store_errors,
    human_bytes,
    print_json,
    require_store,
    store_options,
    table,
)


@click.command(short_help="CRC of the commit log, queues and index cross-checked")
@click.argument("root", type=click.Path())
@click.option(
    "--index-sample",
    default=1000,
    show_default=True,
    type=click.IntRange(0, None),
    help="keys checked against the index (a uniform sample; 0 skips the index)",
)
@click.option("--max-problems", default=100, show_default=True, type=click.IntRange(1, None))
@click.option("--json", "as_json", is_flag=True, help="print the report as JSON")
@store_options
@handle_store_errors
def verify(
    root: str,
    index_sample: int,
    max_problems: int,
    as_json: bool,
    config_file: str | None,
    sets: tuple[str, ...],
) -> None:
    """Check CRCs of the commit log, every consume-queue unit against it, and the index (read-only)."""
    from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

    from pystore.engine.verify import verify_store

    cfg = build_config(root, config_file, sets, True)
    require_store(root, cfg)
    over = {k: getattr(cfg, k) for k in ("max_hash_slot_num", "max_index_num", "message_index_enable")}
    progress = Progress(
        TextColumn("{task.description:<15}"),
        BarColumn(),
        TaskProgressColumn(),
        TimeElapsedColumn(),
        console=err_console if as_json else console,
        transient=as_json,
        disable=not (err_console if as_json else console).is_terminal,  # a bar is for a terminal's eyes
    )
    tasks: dict[str, Any] = {}

    def on_progress(phase: str, done: int, total: int) -> None:
        if phase not in tasks:
            tasks[phase] = progress.add_task(phase, total=max(total, 1))
        progress.update(tasks[phase], completed=done, total=max(total, 1))

    with progress:
        report = verify_store(
            root, progress=on_progress, index_sample=index_sample, max_problems=max_problems, **over
        )
    if as_json:
        print_json(report.as_dict())
        sys.exit(OK if report.ok else PROBLEM)
    t = table("verify %s" % esc(os.path.abspath(root)), show_header=False)
    t.add_column("what", style="bold")
    t.add_column("result")
    t.add_row(
        "commit log",
        "%d message(s), %s in %d file(s), offsets %d .. %d, CRC checked"
        % (
            report.records,
            human_bytes(report.record_bytes),
            report.commit_log_files,
            max(report.min_offset, 0),
            report.end_offset,
        ),
    )
    t.add_row(
        "consume queues",
        "%d queue(s), %d unit(s): %d checked, %d below the commit log (cleaned), %d beyond "
        "its end"
        % (report.queues, report.units, report.units_checked, report.units_expired, report.units_beyond),
    )
    t.add_row(
        "index",
        (
            "%d key(s) sampled of %d, %d decided by a lookup"
            % (report.keys_sampled, report.keys_total, report.keys_checked)
        )
        if report.index_present
        else "no index files",
    )
    if report.unclean:
        t.add_row("abort file", "[yellow]present: a writer is running or did not shut down cleanly[/yellow]")
    for n in report.notes:
        t.add_row("note", esc(n))
    t.add_row("time", "%.2f s" % report.seconds)
    t.add_row(
        "result",
        "[green]OK[/green]"
        if report.ok
        else "[red]%d problem(s)[/red]" % (len(report.problems) + report.problems_dropped),
    )
    console.print(t)
    if not report.ok:
        p = table("problems")
        for col in ("kind", "file", "offset", "what"):
            p.add_column(col, justify="right" if col == "offset" else "left", overflow="fold")
        for pr in report.problems:
            p.add_row(
                pr.kind, Text(pr.path or "-"), "-" if pr.offset is None else str(pr.offset), Text(pr.detail)
            )
        console.print(p)
        if report.problems_dropped:
            console.print("... and %d more" % report.problems_dropped)
        sys.exit(PROBLEM)
