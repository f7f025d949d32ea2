"""``pystore demo``: a tour of the store in a few seconds, printed with rich.

:func:`run_demo` opens an embedded store (appending to it if it exists), puts messages into three topics
(single puts with tags and keys, and batches), reads them back by queue (pages of 32, a tag filter), finds
some by key and by time, shuts down, reopens, and shows what survived, with the figures it measured. Then,
when Spark can run here (``pystore.spark`` with a ``demo_pipeline(root, console)``, pyspark and Java), the
Spark part. Each run adds a marker message to the ``DemoRuns`` topic, so a second run shows the first one's
messages surviving next to its own.

The demo store uses small files (4 MiB commit-log files, 600 KB consume-queue files, 3.4 MB index files)
instead of RocketMQ's defaults (1 GiB, 6 MB, 420 MB): every file is allocated at full size, and the demo
should not take gigabytes. A store that exists keeps the geometry of its files.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from types import ModuleType
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from pystore import Message, MessageBatch, MessageStore, StoreConfig, TagFilter
from pystore.cli.tour_archive import archive_part
from pystore.queue._units import UNIT_SIZE

__all__ = ["DEMO_CONFIG", "run_demo"]

#: StoreConfig overrides of the demo store (see the module docstring).
DEMO_CONFIG: dict[str, Any] = {
    "mapped_file_size_commit_log": 4 << 20,
    "mapped_file_size_consume_queue": 30_000 * UNIT_SIZE,
    "max_hash_slot_num": 40_000,
    "max_index_num": 160_000,
}

ORDERS, PAYMENTS, RUNS = "DemoOrders", "DemoPayments", "DemoRuns"
ORDER_QUEUES, PAYMENT_QUEUES = 4, 2
ORDER_TAGS = ("TagA", "TagB", "TagC")
BATCH = 32


class _Clock:
    def __init__(self) -> None:
        self.t = time.perf_counter()

    def lap(self) -> float:
        now = time.perf_counter()
        dt, self.t = now - self.t, now
        return dt


def _rate(n: int, seconds: float) -> str:
    if seconds <= 0:
        return "-"
    r = n / seconds
    return (
        "%.2f M msgs/s" % (r / 1e6)
        if r >= 1e6
        else "%.0f k msgs/s" % (r / 1e3)
        if r >= 1e4
        else "%.0f msgs/s" % r
    )


def _order_body(run: int, i: int) -> bytes:
    body = json.dumps(
        {
            "run": run,
            "order": i,
            "item": "sku-%05d" % (i * 7919 % 100_000),
            "amount": round((i * 37 % 10_000) / 100, 2),
        }
    ).encode()
    return body + b" " * max(0, 160 - len(body))


def _table(console: Console, title: str) -> Table:
    """A table titled on its left; off a terminal without box lines, one line a row (as the CLI's tables)."""
    if console.is_terminal:
        return Table(title=title, title_justify="left")
    return Table(title=title, title_justify="left", box=None, show_edge=False, pad_edge=False)


def _wipe(root: str, console: Console) -> None:
    if not os.path.isdir(root):
        return
    MessageStore(StoreConfig(store_path_root_dir=root, **DEMO_CONFIG)).destroy()  # takes the lock first
    if os.path.isdir(root) and not os.listdir(root):
        os.rmdir(root)
    console.print("wiped %s" % escape(root))


def _check_folder(root: str) -> str | None:
    """Refuse to spray store files into a folder that holds something else."""
    if not os.path.exists(root):
        return None
    if not os.path.isdir(root):
        return "%s is not a folder" % root
    names = set(os.listdir(root))
    if names and "commitlog" not in names:
        return "%s is not empty and holds no store: pick another folder" % root
    return None


def run_demo(
    root: str, console: Console, *, fresh: bool = False, spark: bool | None = None, messages: int = 5000
) -> bool:
    """Run the demo in ``root``; True when every check passed (the figures table says what was measured)."""
    root = os.fspath(root)
    problem = _check_folder(root)
    if problem:
        console.print("[red]%s[/red]" % escape(problem))
        return False
    if fresh:
        _wipe(root, console)
    checks: list[tuple[str, bool, str]] = []
    figures: list[tuple[str, str]] = []
    t_all = time.perf_counter()
    clock = _Clock()

    # -- open ---------------------------------------------------------------------------------------------
    store = MessageStore.open(root, **DEMO_CONFIG)
    try:
        dt = clock.lap()
        run = store.get_max_offset_in_queue(RUNS, 0)
        rec = store.recovery
        console.print(
            "[bold]pystore demo[/bold] in %s — run %d%s; opened in %.3f s (%s recovery)"
            % (
                escape(os.path.abspath(root)),
                run + 1,
                "" if run == 0 else " (appending to the existing store)",
                dt,
                "abnormal" if rec is not None and rec.abnormal else "normal",
            )
        )
        start = {(ORDERS, q): store.get_max_offset_in_queue(ORDERS, q) for q in range(ORDER_QUEUES)}
        start.update(
            {(PAYMENTS, q): store.get_max_offset_in_queue(PAYMENTS, q) for q in range(PAYMENT_QUEUES)}
        )
        start[(RUNS, 0)] = run

        # -- single puts -------------------------------------------------------------------------------------
        bodies = [_order_body(run, i) for i in range(messages)]
        msgs = [
            Message(
                ORDERS,
                bodies[i],
                tags=ORDER_TAGS[i % 3],
                keys=["order-%d-%d" % (run, i)],
                queue_id=i % ORDER_QUEUES,
                properties={"run": str(run)},
            )
            for i in range(messages)
        ]
        clock.lap()
        results = [store.put_message(m) for m in msgs]
        dt = clock.lap()
        ok_puts = sum(r.is_ok() for r in results)
        figures.append(
            (
                "put_message, %d B bodies" % len(bodies[0]),
                "%s (%d in %.3f s)" % (_rate(messages, dt), messages, dt),
            )
        )
        checks.append(("single puts", ok_puts == messages, "%d/%d PUT_OK" % (ok_puts, messages)))
        console.print(
            "  put %d orders one by one into %s (%d queues, tags %s, a key each): %.3f s"
            % (messages, ORDERS, ORDER_QUEUES, "/".join(ORDER_TAGS), dt)
        )

        # -- batches -----------------------------------------------------------------------------------------
        n_batches = max(1, messages // BATCH)
        batches = []
        for b in range(n_batches):
            q = b % PAYMENT_QUEUES
            batches.append(
                MessageBatch(
                    [
                        Message(
                            PAYMENTS,
                            b"payment %d of batch %d, run %d" % (j, b, run),
                            tags="Paid" if j % 8 else "Refund",
                            keys=["pay-%d-%d" % (run, b * BATCH + j)],
                            queue_id=q,
                        )
                        for j in range(BATCH)
                    ]
                )
            )
        clock.lap()
        bresults = [store.put_messages(bt) for bt in batches]
        dt = clock.lap()
        ok_b = sum(r.is_ok() for r in bresults)
        figures.append(
            (
                "put_messages, batches of %d" % BATCH,
                "%s (%d in %.3f s)" % (_rate(n_batches * BATCH, dt), n_batches * BATCH, dt),
            )
        )
        checks.append(("batch puts", ok_b == n_batches, "%d/%d batches PUT_OK" % (ok_b, n_batches)))
        console.print(
            "  put %d batches of %d payments into %s (%d queues): %.3f s"
            % (n_batches, BATCH, PAYMENTS, PAYMENT_QUEUES, dt)
        )

        # -- read back by queue ------------------------------------------------------------------------------
        clock.lap()
        read = 0
        calls = 0
        first_body = None
        for q in range(ORDER_QUEUES):
            off = start[(ORDERS, q)]
            while True:
                r = store.get_message("demo", ORDERS, q, off, 32)
                assert r is not None  # None only from a store that is not readable; this one is running
                calls += 1
                if not r.messages:
                    break
                if first_body is None:
                    first_body = r.messages[0].body
                read += len(r.messages)
                off = r.next_begin_offset
        dt = clock.lap()
        figures.append(
            ("get_message, pages of 32", "%s (%d in %.3f s, %d calls)" % (_rate(read, dt), read, dt, calls))
        )
        checks.append(
            (
                "read back by queue",
                read == messages and first_body == bodies[0],
                "%d/%d messages, bodies as put" % (read, messages),
            )
        )
        console.print("  read the %d orders back with get_message, pages of 32: %.3f s" % (read, dt))

        # -- tag filter --------------------------------------------------------------------------------------
        flt = TagFilter("TagA || TagC")
        matched = 0
        off = start[(ORDERS, 0)]
        while True:
            r = store.get_message("demo", ORDERS, 0, off, 32, flt)
            assert r is not None
            matched += sum(m.tags in ("TagA", "TagC") for m in r.messages)
            if r.status.name not in ("FOUND", "NO_MATCHED_MESSAGE") or r.next_begin_offset == off:
                break
            off = r.next_begin_offset
        expected = sum(1 for i in range(messages) if i % ORDER_QUEUES == 0 and i % 3 in (0, 2))
        checks.append(
            (
                'TagFilter("TagA || TagC") on queue 0',
                matched == expected,
                "%d messages, %d expected" % (matched, expected),
            )
        )
        console.print(
            '  TagFilter("TagA || TagC") on %s queue 0: %d of its %d new messages'
            % (ORDERS, matched, len(range(0, messages, ORDER_QUEUES)))
        )

        # -- by key ------------------------------------------------------------------------------------------
        picks = sorted({0, messages // 2, messages - 1, 7 % messages})
        clock.lap()
        found = 0
        for i in picks:
            res = store.query_message(ORDERS, "order-%d-%d" % (run, i))
            found += any(m.body == bodies[i] for m in res.messages)
        dt = clock.lap()
        pay_key = "pay-%d-%d" % (run, BATCH + 3)
        pay = store.query_message(PAYMENTS, pay_key)
        checks.append(
            (
                "query_message by key",
                found == len(picks) and len(pay.messages) == 1,
                "%d/%d order keys, payment key %s: %d" % (found, len(picks), pay_key, len(pay.messages)),
            )
        )
        figures.append(("query_message by key", "%.2f ms per lookup" % (dt / len(picks) * 1000)))
        console.print(
            "  query_message found %d of %d order keys and payment %s" % (found, len(picks), pay_key)
        )

        # -- by time -----------------------------------------------------------------------------------------
        mid = results[messages // 2].append_message_result
        if mid is not None:  # None: that put failed, which the "single puts" check already reports
            ts = mid.store_timestamp
            q_mid = (messages // 2) % ORDER_QUEUES
            by_time = store.get_offset_in_queue_by_time(ORDERS, q_mid, ts)
            want = mid.logics_offset
            stamp = store.get_message_store_timestamp(ORDERS, q_mid, by_time)
            checks.append(
                (
                    "get_offset_in_queue_by_time",
                    by_time <= want and stamp >= ts,
                    "queue %d at %d ms -> offset %d (the message put then: %d)" % (q_mid, ts, by_time, want),
                )
            )
            console.print(
                "  get_offset_in_queue_by_time(%s, %d, %d) = %d (the message put at that ms has offset %d)"
                % (ORDERS, q_mid, ts, by_time, want)
            )

        # -- the run marker ----------------------------------------------------------------------------------
        marker = {
            "run": run + 1,
            "orders": messages,
            "payments": n_batches * BATCH,
            "at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        store.put_message(Message(RUNS, json.dumps(marker).encode(), tags="run", keys=["run-%d" % run]))
        before = dict(sorted(store.get_topic_queue_table().items()))
        max_phy = store.get_max_phy_offset()
    finally:
        clock.lap()
        store.shutdown()
    dt_shutdown = clock.lap()
    figures.append(("shutdown (flush, checkpoint)", "%.3f s" % dt_shutdown))

    # -- reopen ---------------------------------------------------------------------------------------------
    clock.lap()
    store = MessageStore.open(root, **DEMO_CONFIG)
    try:
        dt = clock.lap()
        rec = store.recovery
        after = dict(sorted(store.get_topic_queue_table().items()))
        same = after == before and store.get_max_phy_offset() == max_phy
        figures.append(
            (
                "reopen (recovery)",
                "%.3f s, %s, %d records walked"
                % (
                    dt,
                    "abnormal" if rec is not None and rec.abnormal else "normal",
                    rec.records if rec else 0,
                ),
            )
        )
        checks.append(
            (
                "everything survived the restart",
                same,
                "%d queues, commit log end %d" % (len(after), store.get_max_phy_offset()),
            )
        )
        survivors: list[dict[str, Any]] = []
        off = 0
        while True:
            r = store.get_message("demo", RUNS, 0, off, 32)
            assert r is not None
            survivors.extend(json.loads(m.body) for m in r.messages)
            if not r.messages:
                break
            off = r.next_begin_offset
        again = store.query_message(ORDERS, "order-%d-%d" % (run, messages - 1))
        checks.append(
            (
                "a key of this run after the restart",
                len(again.messages) == 1,
                "%d message(s)" % len(again.messages),
            )
        )
        total_msgs = sum(after[k] - store.get_min_offset_in_queue(*k) for k in after)
        figures.append(
            (
                "store now",
                "%d messages in %d queues, %s of commit log"
                % (
                    total_msgs,
                    len(after),
                    _mib(store.get_max_phy_offset() - max(store.get_min_phy_offset(), 0)),
                ),
            )
        )
    finally:
        store.shutdown()

    queue_table = _table(console, "queues after the restart")
    queue_table.add_column("topic")
    queue_table.add_column("queue", justify="right")
    queue_table.add_column("this run", justify="right")
    queue_table.add_column("max offset", justify="right")
    for (topic, qid), nxt in after.items():
        queue_table.add_row(topic, str(qid), "+%d" % (nxt - start.get((topic, qid), 0)), str(nxt))
    console.print(queue_table)
    if len(survivors) > 1:
        console.print("runs in this store: " + ", ".join("#%d (%s)" % (s["run"], s["at"]) for s in survivors))

    f = _table(console, "figures measured in this run")
    f.add_column("operation")
    f.add_column("result", justify="right")
    for what, result in figures:
        f.add_row(what, result)
    console.print(f)

    archive_ok, archive_detail = archive_part(console)
    checks.append(("archive (file://)", archive_ok, archive_detail))

    c = _table(console, "checks")
    c.add_column("check")
    c.add_column("", justify="center")
    c.add_column("detail")
    for name, ok, detail in checks:
        c.add_row(name, "[green]ok[/green]" if ok else "[red]FAILED[/red]", detail)
    console.print(c)

    ok = all(x[1] for x in checks)
    spark_ok = _spark_part(root, console, spark)
    console.print(
        "demo %s in %.1f s; the store stays in %s (`pystore inspect %s`, `pystore verify %s`)"
        % (
            "[green]passed[/green]" if ok and spark_ok else "[red]FAILED[/red]",
            time.perf_counter() - t_all,
            escape(root),
            escape(root),
            escape(root),
        )
    )
    return ok and spark_ok


def _mib(n: int) -> str:
    return "%.1f MiB" % (n / (1 << 20))


def _spark_part(root: str, console: Console, spark: bool | None) -> bool:
    """The Spark pipeline when it can run; True unless it ran and failed."""
    if spark is False:
        return True
    if spark is None and os.environ.get("PYSTORE_DEMO_SPARK", "").strip() == "0":
        console.print("spark: skipped (PYSTORE_DEMO_SPARK=0)")
        return True
    missing = []
    ps: ModuleType | None
    try:
        import pystore.spark as ps
    except ImportError as e:
        ps = None
        missing.append("pystore.spark (%s)" % e)
    try:
        import pyspark  # noqa: F401
    except ImportError:
        missing.append("pyspark (pip install pystore-mq[spark])")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        missing.append("Java (a JRE 17+ on PATH or JAVA_HOME)")
    if ps is not None and not hasattr(ps, "demo_pipeline"):
        missing.append("pystore.spark.demo_pipeline (not in this version)")
    if missing:
        # escaped: rich would take the install hint's [spark] for markup and drop it
        console.print("spark: skipped, missing " + escape("; ".join(missing)))
        return True
    console.print("[bold]spark[/bold]: pystore.spark.demo_pipeline")
    assert ps is not None  # else "pystore.spark" is in missing
    try:
        ps.demo_pipeline(root, console)
    except Exception as e:  # noqa: BLE001 - reported, and the demo fails
        console.print("[red]spark part failed: %s: %s[/red]" % (type(e).__name__, escape(str(e))))
        return False
    return True
