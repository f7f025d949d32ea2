"""``python -m tests.fuzz [-n N] [--seed S] [--workers W] [--timers]`` or ``python -m tests.fuzz --case S:I``
(``--case tS:I``: a case of the timer reference)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

from tests.fuzz import runner
from tests.fuzz.common import BAD


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__)
    ap.add_argument("-n", type=int, default=1000, help="cases (default 1000)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--start", type=int, default=0, help="first case number")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--cli-every", type=int, default=4, help="run the CLI on every K-th case and on those that delete, cut, "
                    "swap or extend a commit-log file (0: never)")
    ap.add_argument("--spark-every", type=int, default=3, help="read the whole log as the Spark source does (its "
                    "planner and decoder, no session) on every K-th case (0: never)")
    ap.add_argument("--timeout", type=float, default=10.0, help="seconds a case's reads may take")
    ap.add_argument("--case", help="run one case SEED:I and show everything (keeps its store folder)")
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument("--timers", action="store_true", help="cases of the timer reference: its timer files (timerlog/, "
                    "timerwheel, config/timercheck) damaged")
    a = ap.parse_args()
    if a.case:
        timers = a.case.startswith("t")
        seed, i = (int(x) for x in a.case.lstrip("t").split(":"))
        tmp = tempfile.mkdtemp(prefix="pystore-fuzz-case-")
        ref = os.path.join(tmp, "ref")
        layout = runner.build_reference(ref, timers)
        res = runner.run_case(seed, i, ref, layout, tmp, cli=True, timeout=a.timeout, keep=True,
                              spark=runner.has_spark())
        print("case %s  variant %s  kind %s  (%.1f s)" % (res["case"], res["variant"], res["kind"], res["seconds"]))
        for note in res["notes"]:
            print("  mutation: " + note)
        for o in res["obs"]:
            print("  %-9s %s" % (o["kind"], o["msg"]))
        print("outcome: %s" % res["outcome"])
        if res["stderr"].strip():
            print("driver stderr (tail):\n" + res["stderr"].rstrip()[-1500:])
        print("damaged store kept at %s (reference: %s)" % (res["root"], ref))
        return 1 if res["outcome"] in BAD else 0
    results = runner.run(a.n, a.seed, a.workers, a.cli_every, a.timeout, a.start, spark_every=a.spark_every,
                         timers=a.timers)
    print(runner.table(results, a.seed))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    return 1 if any(r["outcome"] in BAD for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
