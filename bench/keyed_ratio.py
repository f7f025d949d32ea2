"""Keyed single puts against unkeyed ones, whole runs side by side: each round opens a fresh store, puts 200 k
prebuilt 128 B messages with one key each (all different), then the same with no key into another fresh store,
and reports keyed/unkeyed rates. ``--hog`` runs a busy loop in another process meanwhile (every core of a
2-core machine busy: the index builder then competes with the put thread for a core), ``--nice`` sets
``index_build_nice``.

    python bench/keyed_ratio.py --rounds 8 [--hog] [--nice 10] [-n 200000]

Prints each round's rates, the put thread's share of a core, and the ratio; then the lowest and the median
ratio. A script, not a timed test: the figures go into docs/performance.md with the command that made them.
"""

from __future__ import annotations

import argparse
import multiprocessing
import shutil
import statistics
import tempfile
import time

from pystore import Message, MessageStore

BODY = b"x" * 128


def _hog() -> None:
    while True:
        pass


def one(keyed: bool, n: int, nice: int) -> tuple[float, float]:
    root = tempfile.mkdtemp(prefix="keyed-ratio-")
    store = MessageStore.open(root, index_build_nice=nice)
    try:
        msgs = [Message("T", BODY, keys="k%07d" % i) if keyed else Message("T", BODY) for i in range(n)]
        put = store.put_message
        put(Message("T", BODY, keys="warm"))
        t, c = time.perf_counter(), time.thread_time()
        for m in msgs:
            put(m)
        dt, dc = time.perf_counter() - t, time.thread_time() - c
    finally:
        store.shutdown()
        shutil.rmtree(root)
    return n / dt, dc / dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("-n", type=int, default=200_000)
    ap.add_argument("--hog", action="store_true", help="a busy process beside the puts")
    ap.add_argument("--nice", type=int, default=10, help="index_build_nice (default 10)")
    args = ap.parse_args()
    hog = multiprocessing.Process(target=_hog, daemon=True) if args.hog else None
    if hog is not None:
        hog.start()
    ratios = []
    try:
        for _ in range(args.rounds):
            (k, kc), (u, uc) = one(True, args.n, args.nice), one(False, args.n, args.nice)
            ratios.append(k / u)
            print("keyed %.2f M/s (put thread %.0f%% of a core)  unkeyed %.2f M/s (%.0f%%)  ratio %.2f"
                  % (k / 1e6, kc * 100, u / 1e6, uc * 100, k / u), flush=True)
    finally:
        if hog is not None:
            hog.terminate()
    print("lowest %.2f  median %.2f" % (min(ratios), statistics.median(ratios)))


if __name__ == "__main__":
    main()
