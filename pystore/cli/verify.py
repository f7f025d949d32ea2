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
@click.option("--archive", "with_archive", is_flag=True,
              help="also check every finished object of the store's archive (archive_uri) against its manifest")
@click.option("--json", "as_json", is_flag=True, help="print the report as JSON")
@store_options
@handle_store_errors
def verify(
    root: str,
    index_sample: int,
    max_problems: int,
    with_archive: bool,
    as_json: bool,
    config_file: str | None,
    sets: tuple[str, ...],
) -> None:
    """Check CRCs of the commit log, every consume-queue unit against it, and the index (read-only); with
    --archive, the archive's objects too (sizes, CRC32s, records, units, index headers)."""
    from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

    from pystore.engine.verify import verify_store

    cfg = build_config(root, config_file, sets, True)
    require_store(root, cfg)
    if with_archive and not cfg.archive_uri:
        raise click.UsageError("--archive: the store has no archive_uri (give -o archive_uri=... or --config)")
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

    archived = None
    with progress:
        report = verify_store(
            root, progress=on_progress, index_sample=index_sample, max_problems=max_problems, **over
        )
        if with_archive:
            from pystore.archive.verify import verify_archive

            archived = verify_archive(cfg.archive_uri, cfg.archive_options, on_progress, max_problems)
    ok = report.ok and (archived is None or archived.ok)
    if as_json:
        d = report.as_dict()
        if archived is not None:
            d["archive"] = archived.as_dict()
            d["ok"] = ok
        print_json(d)
        sys.exit(OK if ok else PROBLEM)
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
    problems: list[Any] = list(report.problems)
    dropped = report.problems_dropped
    if archived is not None:
        t.add_row("archive", Text("%s: %d object(s), %s (%d commit-log, %d queue, %d index file(s)), %d message(s), "
                                  "offsets %d .. %d, CRC32s checked%s"
                                  % (archived.uri, archived.objects, human_bytes(archived.object_bytes),
                                     archived.commitlog_files, archived.queue_files, archived.index_files,
                                     archived.records, max(archived.min_phy_offset, 0), max(archived.end_phy_offset, 0),
                                     "; %d torn manifest record(s) skipped" % archived.skipped_records
                                     if archived.skipped_records else "")))
        problems += archived.problems
        dropped += archived.problems_dropped
    t.add_row("time", "%.2f s" % (report.seconds + (archived.seconds if archived is not None else 0.0)))
    t.add_row(
        "result",
        "[green]OK[/green]" if ok else "[red]%d problem(s)[/red]" % (len(problems) + dropped),
    )
    console.print(t)
    if not ok:
        p = table("problems")
        for col in ("kind", "file", "offset", "what"):
            p.add_column(col, justify="right" if col == "offset" else "left", overflow="fold")
        for pr in problems:
            p.add_row(
                pr.kind, Text(pr.path or "-"), "-" if pr.offset is None else str(pr.offset), Text(pr.detail)
            )
        console.print(p)
        if dropped:
            console.print("... and %d more" % dropped)
        sys.exit(PROBLEM)
