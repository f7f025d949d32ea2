"""``pystore inspect``: topics, queues, offsets, files, disk usage and checkpoint of a store (read-only), the timer
store (RocketMQ 5 timer messages: its files, checkpoint and pending count, when it has any), and
each consumer group's lag per queue (``config/consumerOffset.json``: the queue's max offset less the committed
offset, which reads as the queue's min offset when it lies below it, as ``fetch_offset`` reads it).

Sizes are shown as ``allocated / apparent``: the disk a file takes (``st_blocks``, as ``du`` counts) and its
size (``st_size``, as ``ls`` shows); a file with fewer bytes allocated than its size is marked sparse."""

from __future__ import annotations

import datetime
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

import click
from rich.text import Text

from pystore.cli.common import (
    build_config,
    console,
    esc,
    handle_store_errors,
    human_bytes,
    iso,
    print_json,
    require_store,
    store_options,
    table,
)

if TYPE_CHECKING:
    from pystore.engine.storeinfo import ConsumerLag, QueueInfo


@click.command(short_help="topics, queues, offsets, files, disk ratio, checkpoint")
@click.argument("root", type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="print JSON")
@store_options
@handle_store_errors
def inspect(root: str, as_json: bool, config_file: str | None, sets: tuple[str, ...]) -> None:
    """Topics, queues, offsets, files, disk usage, checkpoint and shutdown state (read-only)."""
    from pystore.engine.storeinfo import store_info
    from pystore.system.service import real_clock
    from pystore.timer.timer_stats import stats_from_files

    cfg = build_config(root, config_file, sets, True)
    require_store(root, cfg)
    over = {
        k: getattr(cfg, k)
        for k in (
            "max_hash_slot_num",
            "max_index_num",
            "mapped_file_size_commit_log",
            "mapped_file_size_consume_queue",
            "store_path_commit_log",
            "message_index_enable",
            "archive_uri",
            "archive_options",
        )
    }
    info = store_info(root, **over)
    # RocketMQ 5 timer messages: the timer files, the checkpoint and the pending count as last flushed
    timer = stats_from_files(root, cfg.timer_precision_ms, real_clock())
    groups, groups_error = consumer_lags(cfg.config_path(), info["queues"])
    info["consumer_groups"] = groups
    if groups_error:
        info["consumer_groups_error"] = groups_error
    if as_json:
        print_json({**info, "timer": timer})
        return
    cl = info["commit_log"]
    cp = info["checkpoint"]
    disk = info["disk"]
    state = (
        "[yellow]a writer is running (pid %s)[/yellow]" % info["abort"]["pid"]
        if info["writer_running"]
        else "[red]unclean shutdown (abort file present): the next writer runs abnormal recovery[/red]"
        if info["unclean_shutdown"]
        else "[green]clean shutdown[/green]"
    )
    s = table("store %s" % esc(info["root"]), show_header=False)
    s.add_column("what", style="bold")
    s.add_column("value")
    s.add_row("state", state)
    w = info["writers"]
    if w is not None:
        held = str(w["held_for_s"])
        s.add_row(
            "shared writers",
            "%s lock, leader pid %s, published end %s, %s repair(s), queue slots %s of %s used%s%s"
            % (w["lock"], w["leader_pid"] or "none", w["published_end"], w["generation"], w["queue_slots_used"],
               w["queue_slots"],
               "" if int(str(w["walk_from"])) < 0
               else "; [yellow]writers walk each other's records from %s[/yellow]" % w["walk_from"],
               "; [red]pid %s has held the append lock for %s s[/red]" % (w["holder_pid"], held)
               if float(held) >= 1.0 else ""),
        )
    a = info.get("archive")
    if a is not None:
        s.add_row(
            "archive",
            "%s: commit log %s .. %s in %s file(s), %s uploaded file(s), %s behind%s"
            % (esc(str(a["uri"])), a["min_phy_offset"], a["end_phy_offset"], a["commitlog_files"], a["uploaded_files"],
               human_bytes(int(str(a["lag_bytes"]))),
               "" if a["last_error"] is None else "; [red]last error: %s[/red]" % esc(str(a["last_error"]))),
        )
    s.add_row(
        "commit log",
        "offsets %d .. %d (%s), %d file(s) of %s"
        % (
            cl["min_offset"],
            cl["max_offset"],
            human_bytes(max(0, cl["max_offset"] - max(cl["min_offset"], 0))),
            len(cl["files"]),
            human_bytes(cl["file_size"]),
        ),
    )
    s.add_row("earliest message", iso(_ts(cl["earliest_message_time"])))
    s.add_row(
        "topics",
        "%d topic(s), %d queue(s), %d message(s) in queues"
        % (len(info["topics"]), len(info["queues"]), sum(q["messages"] for q in info["queues"])),
    )
    s.add_row(
        "disk (allocated / apparent)",
        ", ".join(
            "%s %s" % (what, _sizes(disk["bytes"][k], disk["allocated_bytes"][k]))
            for what, k in (("commit log", "commitlog"), ("consume queues", "consumequeue"), ("index", "index"))
        ),
    )
    ratio = disk["commit_log_disk_ratio"]
    s.add_row(
        "disk used ratio",
        "%.1f%% of the partition (clean above %d%%, forced %.0f%%, full %.0f%%)"
        % (
            ratio * 100,
            disk["disk_max_used_space_ratio"],
            disk["disk_space_clean_forcibly_ratio"] * 100,
            disk["disk_space_warning_level_ratio"] * 100,
        ),
    )
    s.add_row("dispatch behind", human_bytes(info["dispatch_behind_bytes"]))
    s.add_row(
        "checkpoint",
        "physic %s, logics %s, index %s%s"
        % (
            iso(cp["physic_msg_timestamp"]),
            iso(cp["logics_msg_timestamp"]),
            iso(cp["index_msg_timestamp"]),
            "" if cp["exists"] else " (no checkpoint file)",
        )
        + ("" if cp["trusted"] else " [red](not trusted)[/red]"),
    )
    t = timer
    if t["checkpoint"] is not None or t["files"]["timerwheel"] is not None:
        tcp = t["checkpoint"] or {}
        logs = t["files"]["timerlog"]
        s.add_row(
            "timers",
            "%d pending, next due %s, %d ms behind; timerlog %d file(s) (%s), timerwheel %s; timercheck: read time "
            "%s, timer log flushed to %s, queue offset %s"
            % (t["pending"], iso(t["next_due_ms"]), t["lag_ms"], len(logs), human_bytes(sum(n for _, n in logs)),
               human_bytes(t["files"]["timerwheel"] or 0), iso(tcp.get("last_read_time_ms")),
               tcp.get("last_timer_log_flush_pos", "-"), tcp.get("last_timer_queue_offset", "-")),
        )
    if info["read_only_view"]["damage"]:
        s.add_row("damage", "[red]%s[/red] (run `pystore verify`)" % esc(info["read_only_view"]["damage"]))
    console.print(s)
    q = table("queues")
    for col in (
        "topic",
        "queue",
        "min offset",
        "max offset",
        "messages",
        "first store time",
        "last store time",
    ):
        q.add_column(
            col, justify="right" if col in ("queue", "min offset", "max offset", "messages") else "left"
        )
    for row in info["queues"]:
        q.add_row(
            Text(row["topic"]),
            str(row["queue_id"]),
            str(row["min_offset"]),
            str(row["max_offset"]),
            str(row["messages"]),
            iso(_ts(row["first_store_time"])),
            iso(_ts(row["last_store_time"])),
        )
    console.print(q)
    if groups or groups_error:
        g = table("consumer groups (config/consumerOffset.json)")
        for col in ("group", "topic", "queue", "committed", "max offset", "lag"):
            g.add_column(col, justify="left" if col in ("group", "topic") else "right")
        for lag in groups:
            g.add_row(
                Text(lag["group"]),
                Text(lag["topic"]),
                str(lag["queue_id"]),
                str(lag["committed"]),
                "-" if lag["max_offset"] is None else str(lag["max_offset"]),
                "-" if lag["lag"] is None else str(lag["lag"]),
            )
        console.print(g)
        if groups_error:
            console.print("[red]consumer offsets: %s[/red]" % esc(groups_error))
    f = table("commit-log files")
    for col in ("file", "allocated / apparent", "first store time"):
        f.add_column(col, justify="left" if col == "file" or col == "first store time" else "right")
    for file in cl["files"]:
        f.add_row(file["name"], _sizes(file["size"], file["allocated"]), iso(file["first_store_timestamp"]))
    console.print(f)
    if info["index_files"]:
        console.print(
            "index files (allocated / apparent): "
            + ", ".join("%s (%s)" % (x["name"], _sizes(x["size"], x["allocated"])) for x in info["index_files"])
        )


def consumer_lags(config_dir: str, queues: Sequence[QueueInfo]) -> tuple[list[ConsumerLag], str | None]:
    """Rows ``group, topic, queue_id, committed, max_offset, lag`` of the committed offsets in ``config_dir``
    against ``queues`` (``store_info``'s); ``max_offset`` and ``lag`` are None for a queue the store does not
    have. The second item says why the file could not be read (None when it could, or there is none)."""
    from pystore.consumer.config_json import load_config_file
    from pystore.consumer.offsets import CONSUMER_OFFSET_FILE, SEPARATOR, decode_consumer_offsets
    from pystore.errors import StoreError

    try:
        table_ = load_config_file(os.path.join(config_dir, CONSUMER_OFFSET_FILE), decode_consumer_offsets) or {}
    except StoreError as e:
        return [], str(e)
    by_queue = {(q["topic"], q["queue_id"]): q for q in queues}
    rows: list[ConsumerLag] = []
    for key, offsets in sorted(table_.items()):
        topic, _, group = key.partition(SEPARATOR)
        for qid, committed in sorted(offsets.items()):
            q = by_queue.get((topic, qid))
            if q is None:
                rows.append({"group": group, "topic": topic, "queue_id": qid, "committed": committed,
                             "max_offset": None, "lag": None})
                continue
            start = max(committed, q["min_offset"])
            rows.append({"group": group, "topic": topic, "queue_id": qid, "committed": start,
                         "max_offset": q["max_offset"], "lag": max(0, q["max_offset"] - start)})
    return rows, None


def _sizes(apparent: int, allocated: int) -> str:
    """Disk taken and apparent size: files keep their full size from creation, but only what was written
    (plus the pre-fault window) takes disk; the rest is a hole."""
    text = "%s / %s" % (human_bytes(allocated), human_bytes(apparent))
    return text + " (sparse)" if allocated < apparent else text


def _ts(iso_text: str | None) -> int | None:
    if not iso_text:
        return None
    return int(datetime.datetime.fromisoformat(iso_text).timestamp() * 1000)
