"""Fixtures and the end-of-run summary of pystore's benchmark suite.

Run it with ``make bench`` (``pytest bench --benchmark-only``); ``bench/pytest.ini`` makes pytest collect
``bench_*.py``. Every benchmark times one operation with pytest-benchmark, then calls ``record(...)`` with
what one operation moved (messages, payload bytes) so the summary can print rates, the pystore/baseline
ratios of the same run and the targets of issues 3 and 6 (met or missed, by how much).
"""

from __future__ import annotations

import math
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import pytest

sys.path.insert(0, os.path.dirname(__file__))

import benchlib  # noqa: E402

# label -> metrics, filled by ``record`` in the order the benchmarks ran
RESULTS: dict[str, dict[str, Any]] = {}


@pytest.fixture(scope="session")
def api() -> dict[str, Any]:
    return benchlib.store_api()


@pytest.fixture
def tmp_root() -> Iterator[str]:
    """A fresh folder on the temp file system, deleted afterwards (stores hold GiB-sized files, so they
    must not pile up in pytest's kept ``tmp_path`` folders)."""
    with tempfile.TemporaryDirectory(prefix="pystore-bench-") as d:
        yield d


@pytest.fixture
def store_factory(tmp_root: str) -> Iterator[Callable[..., Any]]:
    """``store_factory(nbytes, warm=True, **overrides)``: a started store sized for ``nbytes`` of records,
    its first file created (and pre-faulted when ``warm``) before the benchmark starts; destroyed at the
    end of the test."""
    stores: list[Any] = []

    def make(nbytes: int, warm: bool = True, name: str = "store", **overrides: Any) -> Any:
        os.sync()  # what earlier benchmarks left dirty is written back now, not during this one
        size = benchlib.file_size_for(nbytes)
        s = benchlib.open_warm_store(os.path.join(tmp_root, name), size, warm=warm, **overrides)
        stores.append(s)
        return s

    yield make
    for s in stores:
        try:
            s.destroy()
        except Exception:  # noqa: BLE001 - cleanup must not hide the test's own failure
            pass


@pytest.fixture
def record(benchmark: Any) -> Callable[..., dict[str, Any]]:
    """``record(label, msgs_per_op=1, payload_per_op=0, bytes_per_op=0, **extra)``: derive rates from the
    benchmark's median time per operation, put them in ``benchmark.extra_info`` (so they land in
    ``--benchmark-json``) and in the run summary."""

    def rec(label: str, msgs_per_op: float = 1, payload_per_op: float = 0, bytes_per_op: float = 0,
            **extra: Any) -> dict[str, Any]:
        m: dict[str, Any] = {"label": label}
        stats = getattr(getattr(benchmark, "stats", None), "stats", None)
        if stats is not None and stats.median > 0:
            # rates from the mean time per operation (total time / operations: the sustained rate, hiccups
            # of background services included); the typical cost per message from the median round
            med, mean = stats.median, stats.mean
            m["median_s"], m["mean_s"] = med, mean
            m["ns_per_msg"] = med / msgs_per_op * 1e9 if msgs_per_op else None
            m["msgs_per_s"] = msgs_per_op / mean if msgs_per_op else None
            m["msgs_per_s_median"] = msgs_per_op / med if msgs_per_op else None
            if payload_per_op:
                m["payload_mb_per_s"] = payload_per_op / mean / 1e6
            if bytes_per_op:
                m["gb_per_s"] = bytes_per_op / mean / 1e9
        m.update(extra)
        for k, v in m.items():
            if k != "label":
                benchmark.extra_info[k] = v
        RESULTS[label] = m
        return m

    return rec


# -----------------------------------------------------------------------------------------------------------
# the summary: rates, pystore/baseline ratios, targets
# -----------------------------------------------------------------------------------------------------------

# (what, pystore label, baseline label[, metric]): ratio of msgs/s (or the metric), first over second
RATIOS: list[tuple[str, ...]] = [
    ("single put 128 B, prebuilt Message", "put_single_128_prebuilt", "baseline_single_128"),
    ("single put 128 B, Message built per put", "put_single_128_construct", "baseline_single_128"),
    ("batch 32 x 128 B, prebuilt", "put_batch_32x128_prebuilt", "baseline_batch_32x128"),
    ("batch 32 x 128 B, built per put", "put_batch_32x128_construct", "baseline_batch_32x128"),
    ("batch 32 x 128 B, from_bodies of fresh bytes", "put_batch_32x128_from_bodies", "baseline_batch_32x128"),
    ("batch 128 x 128 B, prebuilt", "put_batch_128x128_prebuilt", "baseline_batch_128x128"),
    ("batch 32 x 1 KiB, prebuilt", "put_batch_32x1024_prebuilt", "baseline_batch_32x1024"),
    ("batch 128 x 1 KiB, prebuilt", "put_batch_128x1024_prebuilt", "baseline_batch_128x1024"),
    (
        "SYNC_FLUSH batch 32 x 128 B vs write+fdatasync/32",
        "put_sync_batch_32x128",
        "floor_write_fdatasync_32x128",
    ),
    (
        "SYNC_FLUSH, warm-up zeros synced first (diagnostic)",
        "put_sync_batch_32x128_zeros_synced",
        "floor_write_fdatasync_32x128",
    ),
    ("group commit: 16 threads vs 1 thread", "group_commit_16_threads", "group_commit_1_threads"),
    (
        "group commit: async_put_message x16 in flight vs 1 thread",
        "group_commit_async_16_in_flight",
        "group_commit_1_threads",
    ),
    (
        "look_message_by_offset random vs mmap+struct read",
        "look_message_by_offset_random",
        "baseline_read_random",
    ),
    ("recovery scan (CRC) vs Python struct scan", "scan_file_1gib_crc", "baseline_scan_python_crc"),
    (
        "get_message bodies retained vs slicing them (floor)",
        "get_message_sequential_retained",
        "floor_bytes_retained",
    ),
]

# (source, what, label, metric, "ge"/"le", threshold, unit)
TARGETS = [
    ("issue 3", "batch 32 x 128 B", "put_batch_32x128_prebuilt", "msgs_per_s", "ge", 5e6, "msg/s"),
    ("issue 3", "single put p50", "put_single_128_prebuilt", "p50_ns", "le", 1000, "ns"),
    (
        "issue 3",
        "single put >= 3x mmap+struct",
        "ratio:single put 128 B, prebuilt Message",
        "ratio",
        "ge",
        3,
        "x",
    ),
    ("issue 3", "batch >= 3x mmap+struct", "ratio:batch 32 x 128 B, prebuilt", "ratio", "ge", 3, "x"),
    ("issue 6", "batch append 128 B", "put_batch_32x128_prebuilt", "msgs_per_s", "ge", 8e6, "msg/s"),
    ("issue 6", "batch append 1 KiB", "put_batch_128x1024_prebuilt", "payload_mb_per_s", "ge", 2500, "MB/s"),
    ("issue 6", "single put p50", "put_single_128_prebuilt", "p50_ns", "le", 500, "ns"),
    ("issue 6", "single put p99", "put_single_128_prebuilt", "p99_ns", "le", 2000, "ns"),
    # the two ratios below come from paired rounds (reference timed right before each round)
    ("issue 6", "durable 32 x 128 B >= 0.9x write+fdatasync", "durable_vs_floor_paired", "paired_ratio", "ge",
     0.9, "x"),
    ("issue 6", "the same, 48 MiB into the file", "durable_vs_floor_paired_deep", "paired_ratio", "ge", 0.9, "x"),
    ("brief", "group commit 16 threads >= 5x 1 thread", "group_commit_16_vs_1_paired", "paired_ratio", "ge",
     5, "x"),
    ("issue 6", "get_message sequential", "get_message_sequential", "msgs_per_s", "ge", 5e6, "msg/s"),
    (
        "issue 6",
        "look_message_by_offset random p50",
        "look_message_by_offset_random",
        "p50_ns",
        "le",
        1000,
        "ns",
    ),
    ("issue 6", "recovery scan", "scan_file_1gib_crc", "gb_per_s", "ge", 2, "GB/s"),
]


def _fmt(v: Any, unit: str = "") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if unit == "msg/s":
        return "%.2f M" % (v / 1e6) if v >= 1e5 else "%.0f" % v
    if unit == "ns":
        return "%.0f ns" % v if v < 10_000 else "%.1f us" % (v / 1e3)
    if unit in ("x",):
        return "%.2fx" % v
    if isinstance(v, float):
        return "%.3g" % v
    return str(v)


def _ratios() -> list[tuple[str, float | None, float | None]]:
    """(what, ratio of sustained rates, ratio of median-round rates) for each pair of RATIOS."""
    out = []
    for what, num, den, *key in RATIOS:
        a, b = RESULTS.get(num, {}), RESULTS.get(den, {})
        k = key[0] if key else "msgs_per_s"
        r = a[k] / b[k] if a.get(k) and b.get(k) else None
        rm = (
            a["msgs_per_s_median"] / b["msgs_per_s_median"]
            if not key and a.get("msgs_per_s_median") and b.get("msgs_per_s_median")
            else None
        )
        out.append((what, r, rm))
        if r is not None:
            RESULTS["ratio:" + what] = {"ratio": r, "ratio_median": rm}
    return out


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not RESULTS:
        return
    tw = terminalreporter
    tw.section("pystore benchmark summary")
    m = benchlib.machine()
    tw.write_line("machine: " + benchlib.machine_line(m))
    tw.write_line("")
    tw.write_line(
        "msgs/s, MB/s, GB/s: from the mean time per operation (sustained: background flushing and "
        "write-back included);\nmsgs/s med and ns/msg: from the median round (typical); p50/p99: "
        "individually timed calls (perf_counter_ns included)"
    )
    tw.write_line(
        "%-42s %12s %12s %12s %10s %10s %10s %9s"
        % ("benchmark", "msgs/s", "msgs/s med", "ns/msg", "MB/s", "p50", "p99", "GB/s")
    )
    for label, r in list(RESULTS.items()):
        if label.startswith("ratio:"):
            continue
        tw.write_line(
            "%-42s %12s %12s %12s %10s %10s %10s %9s"
            % (
                label[:42],
                _fmt(r.get("msgs_per_s"), "msg/s"),
                _fmt(r.get("msgs_per_s_median"), "msg/s"),
                "%.1f" % r["ns_per_msg"] if r.get("ns_per_msg") else "-",
                "%.0f" % r["payload_mb_per_s"] if r.get("payload_mb_per_s") else "-",
                _fmt(r.get("p50_ns"), "ns"),
                _fmt(r.get("p99_ns"), "ns"),
                "%.2f" % r["gb_per_s"] if r.get("gb_per_s") else "-",
            )
        )
    tw.write_line("")
    tw.write_line(
        "ratios in this run (msgs/s, first over second): sustained (mean) and typical (median round)"
    )
    for what, r, rm in _ratios():
        tw.write_line("  %-58s %8s %8s" % (what, _fmt(r, "x"), _fmt(rm, "x")))
    for label, r in RESULTS.items():
        if r.get("paired_ratio") is not None:
            rs = r.get("paired_ratios") or []
            tw.write_line("  %-58s %8s  (paired rounds: %s .. %s)" % (
                label + " (paired)", _fmt(r["paired_ratio"], "x"), _fmt(rs[0], "x"), _fmt(rs[-1], "x")))
    disk = RESULTS.get("floor_disk_write", {}).get("gb_per_s")
    if disk:
        tw.write_line("")
        tw.write_line("commit-log write rate against the disk's sequential write floor (%.2f GB/s):" % disk)
        for label, r in RESULTS.items():
            if label.startswith("put_batch_") and r.get("gb_per_s"):
                tw.write_line("  %-58s %6.2f GB/s = %5.2fx the disk" % (label, r["gb_per_s"], r["gb_per_s"] / disk))
    tw.write_line("")
    tw.write_line("targets (judged on the sustained figure; the median-round figure beside it):")
    median_key = {"msgs_per_s": "msgs_per_s_median", "ratio": "ratio_median"}
    for src, what, label, key, cmp, thr, unit in TARGETS:
        r = RESULTS.get(label, {})
        v = r.get(key)
        vm = r.get(median_key.get(key, ""))
        if v is None:
            verdict = "not measured"
        else:
            ok = v >= thr if cmp == "ge" else v <= thr
            short = (thr / v if cmp == "ge" else v / thr) if v else float("inf")
            verdict = "met" if ok else "MISSED (needs %.2fx)" % short
            if not ok and vm is not None and (vm >= thr if cmp == "ge" else vm <= thr):
                verdict += ", met on the median round"
        tw.write_line(
            "  %-8s %-46s %-3s %-10s measured %-10s %-10s %s"
            % (src, what, ">=" if cmp == "ge" else "<=", _fmt(thr, unit), _fmt(v, unit),
               "(%s)" % _fmt(vm, unit) if vm is not None else "", verdict)
        )
