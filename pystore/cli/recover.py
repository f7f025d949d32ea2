"""``pystore recover``: open for writing (which recovers), report what was recovered or cut."""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from pystore.cli.common import (
    OK,
    PROBLEM,
    build_config,
    console,
    err_console,
    esc,
    handle_store_errors,
    human_bytes,
    open_store,
    require_store,
    store_options,
    table,
)
from pystore.log._file_names import is_file_name


def _cl_listing(cfg: Any) -> dict[str, int]:
    out = {}
    for folder in cfg.commit_log_paths():
        if os.path.isdir(folder):
            for n in os.listdir(folder):
                if is_file_name(n):
                    out[n] = os.path.getsize(os.path.join(folder, n))
    return out


def _first_cl_file(cfg: Any) -> str | None:
    names = sorted(_cl_listing(cfg))
    return names[0] if names else None


@click.command(short_help="open for writing (recovery), report what was cut")
@click.argument("root", type=click.Path())
@click.option(
    "--truncate",
    is_flag=True,
    help="cut the commit log at damage even when valid, flushed messages follow it (they are lost)",
)
@store_options
@handle_store_errors
def recover(root: str, truncate: bool, config_file: str | None, sets: tuple[str, ...]) -> None:
    """Open for writing (which recovers), report what was recovered or cut, and shut down cleanly."""
    from pystore.errors import StoreCorruptedError

    cfg = build_config(root, config_file, sets, False)
    require_store(root, cfg)
    before = _cl_listing(cfg)
    abort = os.path.exists(cfg.abort_path())
    over: dict[str, Any] = {"recover_truncate_corrupted": True} if truncate else {}
    try:
        with open_store(root, config_file, sets, read_only=False, **over) as store:
            rec = store.recovery
            queues = store.get_topic_queue_table()
            max_phy = store.get_max_phy_offset()
            min_phy = store.get_min_phy_offset()
    except StoreCorruptedError as e:
        # the error line every verb prints for damage (handle_store_errors), then what recover can do about it
        err_console.print("[red]error:[/red] store corrupted: %s" % esc(e))
        err_console.print(
            "nothing was changed. `pystore recover --truncate %s` cuts the commit log at offset %d; every "
            "message after it is lost. `pystore verify %s` lists all the damage first." % (esc(root), e.offset, esc(root))
        )
        sys.exit(PROBLEM)
    after = _cl_listing(cfg)
    t = table("recover %s" % esc(os.path.abspath(root)), show_header=False)
    t.add_column("what", style="bold")
    t.add_column("value")
    t.add_row(
        "last shutdown",
        "[yellow]unclean (abort file): abnormal recovery[/yellow]" if abort else "clean: normal recovery",
    )
    if rec is not None:
        t.add_row(
            "walk",
            "from %s: %d message(s), %s in %.3f s"
            % (
                os.path.basename(rec.start_file) if rec.start_file else "-",
                rec.records,
                human_bytes(rec.bytes_scanned),
                rec.seconds,
            ),
        )
        t.add_row("valid end", str(rec.process_offset))
        t.add_row("queues rebuilt from", str(rec.dispatch_from) if abort else "- (queues were current)")
        t.add_row("damage", "[red]%s (cut)[/red]" % esc(rec.damage) if rec.damage else "none")
        first = _first_cl_file(cfg)
        if rec.start_file and first and os.path.basename(rec.start_file) != first:
            t.add_row(
                "note",
                "recovery walked from %s on (RocketMQ's rule: the last three files after a clean "
                "shutdown, the checkpoint's after a crash); `pystore verify` checks the whole log"
                % os.path.basename(rec.start_file),
            )
    t.add_row("commit log now", "offsets %d .. %d, %d file(s)" % (min_phy, max_phy, len(after)))
    t.add_row("queues", "%d queue(s), %d message(s)" % (len(queues), sum(queues.values())))
    gone = sorted(set(before) - set(after))
    if gone:
        t.add_row("files removed", ", ".join(gone))
    shrunk = [n for n in after if n in before and after[n] != before[n]]
    if shrunk:
        t.add_row("files resized", ", ".join(shrunk))
    t.add_row(
        "shutdown",
        "clean (abort file removed)"
        if not os.path.exists(cfg.abort_path())
        else "[red]the abort file stayed (see the log)[/red]",
    )
    console.print(t)
    sys.exit(PROBLEM if os.path.exists(cfg.abort_path()) else OK)
