"""Run fuzz cases: build the reference, damage a copy per case, run the driver in a child with a time limit,
classify, tabulate."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

from tests.fuzz import mutate
from tests.fuzz.common import BAD, OUTCOMES, REPO, dump, load, worst


def build_reference(out: str, timers: bool = False) -> dict:
    """Build the reference store in a child process (the runner never imports pystore); its layout. ``timers``:
    the timer reference (``reference.build_timers``) instead."""
    subprocess.run([sys.executable, "-m", "tests.fuzz.reference", *(["--timers"] if timers else []), out], cwd=REPO,
                   check=True, env=dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", "")))
    return load(os.path.join(out, "layout.json"))  # type: ignore[return-value]


def run_case(seed: int, i: int, ref: str, layout: dict, work: str, cli: bool, timeout: float = 10.0,
             cli_timeout: float = 10.0, keep: bool = False, plan: dict | None = None, spark: bool = False) -> dict:
    """Case ``seed:i`` (or the given ``plan``) on a fresh copy of the reference at ``ref``."""
    if plan is None:
        plan = mutate.plan_timer(seed, i, layout) if "timer" in layout else mutate.plan(seed, i, layout)
    root = os.path.join(work, "case-%d-%d" % (seed, i))
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(os.path.join(ref, plan["variant"]), root)
    damage = mutate.apply(plan, root)
    spec = root + ".json"
    dump(spec, {"root": root, "ref": ref, "damage": damage, "cli": cli, "cli_timeout": cli_timeout, "spark": spark,
                "timers": plan.get("timers", False)})
    limit = timeout + (2 * cli_timeout if cli else 0)
    t0 = time.monotonic()
    p = subprocess.Popen([sys.executable, "-m", "tests.fuzz.driver", spec], cwd=REPO, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True,
                         env=dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", "")))
    timed_out = False
    try:
        stdout, stderr = p.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        timed_out = True
        try:
            os.killpg(p.pid, signal.SIGKILL)      # the driver and its CLI child, if any
        except ProcessLookupError:
            pass
        stdout, stderr = p.communicate()
    seconds = time.monotonic() - t0
    obs, last_step, done = [], "start", False
    for line in stdout.splitlines():
        if line.startswith("OBS "):
            obs.append(json.loads(line[4:]))
        elif line.startswith("STEP "):
            last_step = line[5:]
        elif line == "DONE":
            done = True
    if timed_out:
        obs.append({"kind": "timeout", "msg": "no answer in %.0f s, hung in: %s" % (limit, last_step)})
    elif p.returncode < 0:
        obs.append({"kind": "signal", "msg": "driver killed by %s in: %s" % (signal.Signals(-p.returncode).name,
                                                                          last_step)})
    elif p.returncode != 0 or not done:
        tail = [ln for ln in stderr.strip().splitlines() if ln.strip()][-1:] or [""]
        obs.append({"kind": "exception", "msg": "driver exited %d in %s: %s" % (p.returncode, last_step, tail[0][:300])})
    outcome = worst([o["kind"] for o in obs])
    reason = next((o["msg"] for o in obs if o["kind"] == outcome), "")
    if not keep:
        shutil.rmtree(root, ignore_errors=True)
        os.remove(spec)
    return {"case": plan["case"], "kind": plan["kind"], "variant": plan["variant"], "notes": plan["notes"],
            "outcome": outcome, "reason": reason, "obs": obs, "seconds": round(seconds, 2),
            "stderr": stderr[-3000:] if (keep or outcome in BAD) else "", "root": root if keep else None}


def run(n: int, seed: int, workers: int = 2, cli_every: int = 4, timeout: float = 10.0, start: int = 0,
        progress: bool = True, spark_every: int = 3, timers: bool = False) -> list[dict]:
    """``timers``: cases of the timer reference (``mutate.plan_timer``: its timer files damaged)."""
    with tempfile.TemporaryDirectory(prefix="pystore-fuzz-") as tmp:
        ref = os.path.join(tmp, "ref")
        layout = build_reference(ref, timers)
        work = os.path.join(tmp, "cases")
        os.makedirs(work)
        results: list[dict] = []

        def one(i: int) -> dict:
            plan = mutate.plan_timer(seed, i, layout) if timers else mutate.plan(seed, i, layout)
            cli = cli_every > 0 and (i % cli_every == 0 or plan["cli"])
            spark = spark_every > 0 and i % spark_every == 1 and has_spark()
            return run_case(seed, i, ref, layout, work, cli=cli, timeout=timeout, plan=plan, spark=spark)

        with ThreadPoolExecutor(workers) as pool:
            for k, res in enumerate(pool.map(one, range(start, start + n)), 1):
                results.append(res)
                if progress and res["outcome"] in BAD:
                    # at once, not only in the final table: a long run's first finding can be chased meanwhile
                    print("  bad: %s %s (%s)" % (res["outcome"], res["case"], res["reason"]), file=sys.stderr,
                          flush=True)
                if progress and (k % 50 == 0 or k == n):
                    bad = sum(r["outcome"] in BAD for r in results)
                    print("  %d/%d cases, %d bad" % (k, n, bad), file=sys.stderr, flush=True)
        return results


def has_spark() -> bool:
    """Whether the Spark read path can run in a case (the spark extra installed; no session is started)."""
    import importlib.util

    return all(importlib.util.find_spec(m) is not None for m in ("pyspark", "pyarrow"))


def table(results: list[dict], seed: int) -> str:
    kinds = sorted({r["kind"] for r in results})
    counts = Counter((r["kind"], r["outcome"]) for r in results)
    w = max(len(k) for k in kinds + ["total"]) + 2
    lines = ["%-*s" % (w, "kind") + "".join("%10s" % o for o in OUTCOMES) + "%10s" % "cases"]
    for k in kinds + ["total"]:
        row = [sum(c for (kk, o), c in counts.items() if o == oc and (kk == k or k == "total")) for oc in OUTCOMES]
        lines.append("%-*s" % (w, k) + "".join("%10s" % (v or ".") for v in row) + "%10d" % sum(row))
    bad = [r for r in results if r["outcome"] in BAD]
    if bad:
        lines.append("")
        lines.append("bad outcomes (%d):" % len(bad))
        for oc in OUTCOMES:
            for r in (r for r in bad if r["outcome"] == oc):
                lines.append("  %-9s %-9s %-8s %-13s %s" % (r["outcome"], r["case"], r["variant"], r["kind"],
                                                            " + ".join(r["notes"])))
                lines.append("            -> %s" % r["reason"])
        lines.append("")
        lines.append("reproduce one: python -m tests.fuzz --case %s   (from the repository root)" % bad[0]["case"])
    secs = sum(r["seconds"] for r in results)
    lines.append("%d cases, seed %d, %.1f s of driver time" % (len(results), seed, secs))
    return "\n".join(lines)
