"""Several writer processes on one store (``shared_writers=True``) against one process, side by side in one run.

Each round, on a fresh store of the same geometry: one process puts N prebuilt 128 B messages (the single-writer
rate, in shared mode and, for reference, as a store's only writer); then K processes open the store with
``shared_writers=True`` and each puts N/K, started together behind a barrier (the aggregate rate: all messages
over the time from the first put to the last); and, as a yardstick for the machine, K processes that share nothing
(each puts N/K into a store of its own, the default mode): what K processes reach on these cores at best, so that
the shared ones' ratio to them is what sharing one store costs, and theirs to the only writer what running K busy
processes on the machine's cores costs. The same with batches of 32. Each run starts after ``os.sync`` (the one
before it leaves hundreds of MB to write back), the four turn order every round, and each process freezes its
prebuilt messages out of the garbage collector before its clock starts. Each run also reports what the whole machine
spent busy over its timed span, in CPU-s a million messages (/proc/stat: the configuration's own threads, the
kernel's work for it and its services'), which shows where a ratio comes from: the only writer puts on one core
and leaves its page-cache work to the other, several processes do all of it on the same cores. Then the latency
of single puts in shared mode, uncontended (one process), p50 and p99 over every put.

    python bench/shared_writers.py --rounds 6 [-k 4] [-n 2000000]
    python bench/shared_writers.py --kills 20 [--idle]   # a survivor's waits while others die (mid-put, or idle)
    python bench/shared_writers.py --handover 10        # a waiting put across its holder's death
    python bench/shared_writers.py --takeover 5 [--before 1]  # the followers' stalls when the leader dies
    python bench/shared_writers.py --lag 5 -k 3        # how far the leader's dispatch lags writers flat out

Prints each round's rates, the ratios aggregate/one process (in shared mode, and as the only writer), the ratios
with the K processes apart, and the busy CPU-s a million messages of each; then the ratios' medians and extremes,
and the CPU's medians. A script, not
a timed test: the figures go into docs/performance.md with the command that made them.
"""

from __future__ import annotations

import argparse
import gc
import multiprocessing as mp
import os
import shutil
import statistics
import tempfile
import time

from pystore import Message, MessageBatch, MessageStore
from pystore.log.shared_state import describe

BODY = b"x" * 128
GEOMETRY = {"mapped_file_size_commit_log": 256 * 1024 * 1024}


def _busy_cpu_s() -> float:
    """CPU time the whole machine has spent busy (every state of /proc/stat's first line but idle and iowait), s:
    over a timed span, what the configuration cost in CPU, its own threads, the kernel's and the services' alike."""
    try:
        with open("/proc/stat") as f:
            ticks = [int(x) for x in f.readline().split()[1:]]
    except OSError:
        return float("nan")
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def _put(root: str, shared: bool, n: int, batch: int, queue_id: int, barrier: mp.Barrier | None,
         out: mp.Queue | None) -> tuple[float, float, float, float]:
    store = MessageStore.open(root, shared_writers=shared, **GEOMETRY)
    try:
        if batch > 1:
            units = [MessageBatch([Message("T", BODY, queue_id=queue_id) for _ in range(batch)])
                     for _ in range(n // batch)]
            put = store.put_messages
        else:
            units = [Message("T", BODY, queue_id=queue_id) for _ in range(n)]
            put = store.put_message
        # the prebuilt messages out of the collector's reach: its full passes walk every live object, and the one
        # process holds K times more of them than each of the K, which would weigh on its rate alone
        gc.freeze()
        if barrier is not None:
            barrier.wait()
        b0, t0 = _busy_cpu_s(), time.perf_counter()
        for u in units:
            if not put(u).is_ok():
                raise RuntimeError("a put was refused")
        t1, b1 = time.perf_counter(), _busy_cpu_s()
    finally:
        store.shutdown()
    if out is not None:
        out.put((t0, t1, b0, b1))
    return t0, t1, b0, b1


def one_process(shared: bool, n: int, batch: int) -> tuple[float, float]:
    """The rate of one process putting ``n`` messages, and the machine's busy CPU-s a million messages meanwhile."""
    root = tempfile.mkdtemp(prefix="shared-bench-")
    try:
        t0, t1, b0, b1 = _put(root, shared, n, batch, 0, None, None)
    finally:
        shutil.rmtree(root)
    return n / (t1 - t0), (b1 - b0) * 1e6 / n


def k_processes(k: int, n: int, batch: int, apart: bool = False) -> tuple[float, float]:
    """The aggregate rate of ``k`` processes putting ``n`` messages together (the first put to the last), and the
    machine's busy CPU-s a million messages over that span. ``apart``: each process puts into a store of its own as
    its only writer (the default mode), so that nothing is shared: what ``k`` processes on these cores reach at best."""
    root = tempfile.mkdtemp(prefix="shared-bench-")
    try:
        if not apart:
            # the first opener leads: open once so that every worker joins a store that exists
            MessageStore.open(root, shared_writers=True, **GEOMETRY).shutdown()
        barrier, out = mp.Barrier(k), mp.Queue()
        ps = [mp.Process(target=_put, args=(os.path.join(root, str(i)) if apart else root, not apart, n // k, batch,
                                            i % 4, barrier, out)) for i in range(k)]
        for p in ps:
            p.start()
        spans = [out.get() for _ in ps]
        for p in ps:
            p.join()
            if p.exitcode != 0:
                raise RuntimeError("a writer process failed")
    finally:
        shutil.rmtree(root)
    first, last = min(spans, key=lambda sp: sp[0]), max(spans, key=lambda sp: sp[1])
    total = (n // k) * k
    return total / (last[1] - first[0]), (last[3] - first[2]) * 1e6 / total


def latency(n: int) -> tuple[float, float]:
    root = tempfile.mkdtemp(prefix="shared-bench-")
    store = MessageStore.open(root, shared_writers=True, **GEOMETRY)
    try:
        msgs = [Message("T", BODY) for _ in range(n)]
        put, clock = store.put_message, time.perf_counter_ns
        times = []
        for m in msgs:
            t = clock()
            put(m)
            times.append(clock() - t)
    finally:
        store.shutdown()
        shutil.rmtree(root)
    times.sort()
    return times[len(times) // 2] / 1000, times[len(times) * 99 // 100] / 1000


def _survivor(root: str, seconds: float, out: mp.Queue) -> None:
    store = MessageStore.open(root, shared_writers=True, **GEOMETRY)
    gaps: list[int] = []
    long: list[tuple[int, int]] = []        # (end, length) of every wait over half a millisecond
    try:
        msg, put, clock = Message("T", BODY, queue_id=1), store.put_message, time.perf_counter_ns
        end = clock() + int(seconds * 1e9)
        last = clock()
        while last < end:
            put(msg)
            now = clock()
            gap = now - last
            gaps.append(gap)
            if gap > 500_000:
                long.append((now, gap))
            last = now
    finally:
        store.shutdown()
    gaps.sort()
    out.put((len(gaps), gaps[-1] / 1e6, gaps[len(gaps) * 9999 // 10000] / 1e6, sum(g > 10_000_000 for g in gaps),
             long))


def _victim(root: str, ready: mp.Event, idle: bool) -> None:
    store = MessageStore.open(root, shared_writers=True, **GEOMETRY)
    msg = Message("T", BODY * 8, queue_id=2)
    store.put_message(msg)
    ready.set()
    while idle:
        time.sleep(1)
    while True:
        store.put_message(msg)


def death_stalls(kills: int, seconds: float, idle: bool = False) -> None:
    """A writer putting for ``seconds`` while other writers are SIGKILLed at random moments once they put (each
    holds the append lock most of the time it runs): the survivor's longest wait overall, and the longest wait
    that overlaps the 20 ms after each kill (what a death costs the others, beside a process's start-up). With
    ``idle``, the victims put once and sleep (never holding the lock when killed): what any process's exit costs.
    The control: the same 20 ms window 50 ms before each kill, the victim alive and putting (what the survivor
    waits anyway with one more writer beside it on the machine)."""
    import os
    import random
    import signal

    root = tempfile.mkdtemp(prefix="shared-bench-")
    rng = random.Random(36)
    kill_times: list[int] = []
    control_times: list[int] = []
    try:
        MessageStore.open(root, shared_writers=True, **GEOMETRY).shutdown()
        out: mp.Queue = mp.Queue()
        survivor = mp.Process(target=_survivor, args=(root, seconds, out))
        survivor.start()
        deadline = time.monotonic() + seconds - 0.5
        while len(kill_times) < kills and time.monotonic() < deadline:
            ready = mp.Event()
            v = mp.Process(target=_victim, args=(root, ready, idle))
            v.start()
            ready.wait(10)
            time.sleep(rng.uniform(0.1, 0.3))           # putting, its start-up over
            control_times.append(time.perf_counter_ns())
            time.sleep(0.05)
            if v.pid is not None:
                kill_times.append(time.perf_counter_ns())
                os.kill(v.pid, signal.SIGKILL)
            v.join()
            time.sleep(0.1)         # the next victim's start-up stays out of the 20 ms after this death
        n, worst, p9999, over, long = out.get()
        survivor.join()
        generation = describe(root)["generation"]
    finally:
        shutil.rmtree(root)
    def window(k: int) -> float:
        return max([g for e, g in long if e >= k and e - g <= k + 20_000_000] or [0]) / 1e6

    stalls = sorted(window(k) for k in kill_times)
    control = sorted(window(k) for k in control_times)
    print("%d writers killed (%d of them mid-put: repaired), survivor's %d puts: longest wait %.1f ms, p99.99 %.2f ms, "
          "%d waits over 10 ms; around each kill (its 20 ms): median %.2f ms, longest %.1f ms, %d of %d within 10 ms; "
          "control windows (no kill): median %.2f ms, longest %.1f ms, %d of %d within 10 ms"
          % (len(kill_times), generation, n, worst, p9999, over, statistics.median(stalls) if stalls else 0,
             stalls[-1] if stalls else 0, sum(x <= 10 for x in stalls), len(stalls),
             statistics.median(control) if control else 0, control[-1] if control else 0,
             sum(x <= 10 for x in control), len(control)))


_HOLDER = """
import sys, time
from pystore import MessageStore
s = MessageStore.open(sys.argv[1], shared_writers=True, mapped_file_size_commit_log=1 << 26)
lock = s._shared.lock
lock.acquire()
lock.reserve_end(lock.published_end + 100)      # as a put that reserved its bytes and died writing them
print("held", flush=True)
time.sleep(100)
"""


def _put_then_time(store: MessageStore, out: list[int]) -> None:
    store.put_message(Message("T", BODY))
    out.append(time.perf_counter_ns())


def handover(reps: int) -> None:
    """A put waiting on the append lock while its holder is SIGKILLed mid-put: how long after the kill the put
    returns (the mutex handed over with ``EOWNERDEAD``, the torn bytes repaired, the put made)."""
    import os
    import signal
    import subprocess
    import sys
    import threading

    times = []
    for _ in range(reps):
        root = tempfile.mkdtemp(prefix="shared-bench-")
        store = MessageStore.open(root, shared_writers=True, mapped_file_size_commit_log=1 << 26)
        try:
            store.put_message(Message("T", BODY))
            holder = subprocess.Popen([sys.executable, "-c", _HOLDER, root], stdout=subprocess.PIPE)
            assert holder.stdout is not None and holder.stdout.readline().strip() == b"held"
            returned: list[int] = []
            t = threading.Thread(target=_put_then_time, args=(store, returned))
            t.start()
            time.sleep(0.2)                         # the put is waiting on the lock
            killed = time.perf_counter_ns()
            os.kill(holder.pid, signal.SIGKILL)
            holder.wait()
            t.join()
            times.append((returned[0] - killed) / 1e6)
        finally:
            store.shutdown()
            shutil.rmtree(root)
    times.sort()
    print("a put waiting on a holder SIGKILLed mid-put returns after: median %.2f ms, longest %.2f ms (%d kills)"
          % (statistics.median(times), times[-1], len(times)))


def _leader(root: str, ready: mp.Event) -> None:
    store = MessageStore.open(root, shared_writers=True, **GEOMETRY)
    ready.set()
    msg = Message("T", BODY, queue_id=3)
    while True:
        store.put_message(msg)


def _after_leader_death(root: str, seconds: float, killed: mp.Event, out: mp.Queue) -> None:
    store = MessageStore.open(root, shared_writers=True, **GEOMETRY)
    longest = refused = 0
    led_after = -1.0
    try:
        msg, put, clock = Message("T", BODY, queue_id=1), store.put_message, time.perf_counter_ns
        end = clock() + int(seconds * 1e9)
        last = clock()
        kill_seen = 0
        n = 0
        while last < end:
            if not put(msg).is_ok():
                refused += 1
            now = clock()
            if killed.is_set():
                longest = max(longest, now - last)
                kill_seen = kill_seen or now
                n += 1
                if led_after < 0 and n % 1024 == 0 and store.writer_info()["leader"]:
                    led_after = (now - kill_seen) / 1e6
            last = now
        info = store.writer_info()
        leads, lock_ms = bool(info["leader"]), float(info.get("takeover_lock_ms", 0.0))
    finally:
        store.shutdown()
    out.put((longest / 1e6, leads, refused, led_after, lock_ms))


def _takeover_round(kill: bool, before: float = 1.0) -> tuple[list[tuple[float, bool, float, float]], int]:
    """One round: the leader putting, two followers putting for 3 s; after 1 s the leader is SIGKILLed (``kill``)
    or left alone (the control: the same window's longest waits with no death). Each follower's longest wait
    between two puts from that moment on, whether it leads at the end, how long after the kill it led (-1: not
    within the round), how long its takeover held the append lock (ms, 0: it did not take over), and the puts
    refused. ``before``: seconds of puts before the kill (the older the store,
    the more of it the leader's checkpoint covers)."""
    import os
    import signal

    root = tempfile.mkdtemp(prefix="shared-bench-")
    try:
        ready, killed, out = mp.Event(), mp.Event(), mp.Queue()
        lead = mp.Process(target=_leader, args=(root, ready))
        lead.start()
        ready.wait(30)
        ps = [mp.Process(target=_after_leader_death, args=(root, before + 4.0, killed, out)) for _ in range(2)]
        for p in ps:
            p.start()
        time.sleep(before)
        killed.set()
        if kill and lead.pid is not None:
            os.kill(lead.pid, signal.SIGKILL)
        waits, refused = [], 0
        for _ in ps:
            wait, leads, no, led_after, lock_ms = out.get()
            waits.append((wait, leads, led_after, lock_ms))
            refused += no
        for p in ps:
            p.join()
        if lead.is_alive():
            lead.terminate()
        lead.join()
        return waits, refused
    finally:
        shutil.rmtree(root)


def takeover_stalls(reps: int, before: float = 1.0) -> None:
    """The leader (putting) SIGKILLed while two followers put: each follower's longest wait between two puts from
    the kill on (one of them takes over: it recovers the store up to the published end while both go on putting),
    and how long after the kill the survivor led (its services running). Each round is paired with a control
    round (the leader left alive): the longest waits the machine gives the same processes in the same window
    without any death (file rolls, the scheduler)."""
    taker, other, control, led, held, refused = [], [], [], [], [], 0
    for _ in range(reps):
        waits, no = _takeover_round(True, before)
        refused += no
        for wait, leads, led_after, lock_ms in waits:
            (taker if leads else other).append(wait)
            if leads:
                led.append(led_after)
                held.append(lock_ms)
        control.extend(w[0] for w in _takeover_round(False, before)[0])
    print("leader killed %d times after %.1f s of puts: the survivor led %s ms after the kill, its takeover held the "
          "append lock %s ms; the follower that took over waited at most %s ms (median %.1f), the other %s ms "
          "(median %.1f); puts refused: %d; control rounds (no kill), the followers' longest waits: %s ms (median %.1f)"
          % (reps, before, [round(x) for x in led], [round(x, 3) for x in held], [round(x, 1) for x in taker],
             statistics.median(taker) if taker else 0, [round(x, 1) for x in other],
             statistics.median(other) if other else 0, refused, [round(x, 1) for x in control],
             statistics.median(control) if control else 0))


def _lag_writer(root: str, seconds: float, queue_id: int, out: mp.Queue) -> None:
    store = MessageStore.open(root, shared_writers=True, **GEOMETRY)
    msg, put, clock = Message("T", BODY, queue_id=queue_id), store.put_message, time.perf_counter_ns
    end = clock() + int(seconds * 1e9)
    last = clock()
    n = over = worst = 0
    while last < end:
        put(msg)
        n += 1
        now = clock()
        over += now - last > 5_000_000
        worst = max(worst, now - last)
        last = now
    lock = store._shared.lock
    assert lock is not None
    out.put((bool(store.writer_info()["leader"]), n, over, worst / 1e6,
             (lock.published_end - lock.dispatched_end) / 1e6))
    store.shutdown()


def dispatch_lag(writers: int, seconds: float) -> None:
    """``writers`` processes put flat out for ``seconds``; each then reads how far the leader's dispatch is behind
    the published end (what consumers do not see yet), with its own puts and waits over 5 ms."""
    root = tempfile.mkdtemp(prefix="shared-bench-")
    try:
        MessageStore.open(root, shared_writers=True, **GEOMETRY).shutdown()
        out: mp.Queue = mp.Queue()
        ps = [mp.Process(target=_lag_writer, args=(root, seconds, q, out)) for q in range(writers)]
        for p in ps:
            p.start()
        res = sorted((out.get() for _ in ps), reverse=True)
        for p in ps:
            p.join()
    finally:
        shutil.rmtree(root)
    for leads, n, over, worst, lag in res:
        print("%s: %d puts, %d waits over 5 ms, longest %.1f ms; dispatch behind the published end at the stop: "
              "%.0f MB" % ("leader  " if leads else "follower", n, over, worst, lag))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("-k", type=int, default=4, help="writer processes (default 4)")
    ap.add_argument("-n", type=int, default=200_000, help="messages per measurement (default 200000)")
    ap.add_argument("--lag", type=float, default=0, help="only measure how far the leader's dispatch lags after "
                    "this many seconds of -k writers putting flat out")
    ap.add_argument("--kills", type=int, default=0, help="only measure the survivor's stalls over this many kills")
    ap.add_argument("--idle", action="store_true", help="with --kills: victims that do not put when killed")
    ap.add_argument("--handover", type=int, default=0, help="only time a waiting put across this many holder deaths")
    ap.add_argument("--before", type=float, default=1.0, help="with --takeover: seconds of puts before the "
                    "leader is killed (default 1)")
    ap.add_argument("--takeover", type=int, default=0, help="only measure the followers' stalls over this many "
                    "leader deaths")
    args = ap.parse_args()
    if args.takeover:
        takeover_stalls(args.takeover, args.before)
        return
    if args.handover:
        handover(args.handover)
        return
    if args.lag:
        dispatch_lag(args.k, args.lag)
        return
    if args.kills:
        death_stalls(args.kills, args.kills * 0.6 + 2, args.idle)
        return
    ratios: dict[int, list[float]] = {1: [], 32: []}
    to_alone: dict[int, list[float]] = {1: [], 32: []}
    to_apart: dict[int, list[float]] = {1: [], 32: []}
    apart_alone: dict[int, list[float]] = {1: [], 32: []}
    cpu: dict[tuple[int, str], list[float]] = {}
    for r in range(args.rounds):
        for batch in (1, 32):
            # each run starts with the dirty pages of the one before written back (os.sync, untimed), and the
            # order turns every round: a run right after another's hundreds of MB would pay for their writeback
            names = ["alone", "single", "many", "apart"]
            rate, busy = {}, {}
            for name in names[r % 4:] + names[:r % 4]:
                os.sync()
                rate[name], busy[name] = (k_processes(args.k, args.n, batch, apart=name == "apart")
                                          if name in ("many", "apart") else one_process(name == "single", args.n, batch))
                cpu.setdefault((batch, name), []).append(busy[name])
            alone, single, many, apart = rate["alone"], rate["single"], rate["many"], rate["apart"]
            ratios[batch].append(many / single)
            to_alone[batch].append(many / alone)
            to_apart[batch].append(many / apart)
            apart_alone[batch].append(apart / alone)
            print("round %d batch %2d: only writer %9.0f/s, shared 1 process %9.0f/s, %d processes %9.0f/s: "
                  "%.2fx (%.2fx the only writer); %d processes apart (a store each) %9.0f/s: %.2fx the only writer, "
                  "the shared ones %.2fx them; busy CPU-s a million messages %.2f / %.2f / %.2f / %.2f"
                  % (r + 1, batch, alone, single, args.k, many, many / single, many / alone, args.k, apart,
                     apart / alone, many / apart, busy["alone"], busy["single"], busy["many"], busy["apart"]),
                  flush=True)
    for batch, rs in ratios.items():
        print("batch %2d: %d processes / 1 process in shared mode: median %.2fx, lowest %.2fx; / the only writer: "
              "median %.2fx, lowest %.2fx; / %d processes apart: median %.2fx, lowest %.2fx (apart / the only "
              "writer: median %.2fx, highest %.2fx); the machine's busy CPU-s a million messages, medians: only "
              "writer %.2f, shared 1 process %.2f, %d processes %.2f, apart %.2f"
              % (batch, args.k, statistics.median(rs), min(rs), statistics.median(to_alone[batch]),
                 min(to_alone[batch]), args.k, statistics.median(to_apart[batch]), min(to_apart[batch]),
                 statistics.median(apart_alone[batch]), max(apart_alone[batch]),
                 statistics.median(cpu[batch, "alone"]), statistics.median(cpu[batch, "single"]),
                 args.k, statistics.median(cpu[batch, "many"]), statistics.median(cpu[batch, "apart"])))
    p50, p99 = latency(args.n)
    print("single put in shared mode, one process: p50 %.2f us, p99 %.2f us" % (p50, p99))


if __name__ == "__main__":
    main()
