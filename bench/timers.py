"""RocketMQ 5 timer messages, measured on the real clock (docs/performance.md, "Timers").

``enqueue``: ``-n`` timer messages (128 B) put with delivery times spread evenly over the next ``--spread-h``
hours (default 1 M over 24 h). Printed: the put rate (each put rewritten to ``rmq_sys_wheel_timer`` on the put
path), and the enqueue rate: from the first put until the timer store's enqueue service has written every one
into the timer log and the wheel (``timer_stats()["enqueue_behind"]`` back to 0), and the files' sizes.

``enqueue-backlog``: the enqueue service alone. The store opens with ``timer_stop_enqueue=True``, so the ``-n`` timers
(spread as in ``enqueue``) wait in ``rmq_sys_wheel_timer`` while they are put; then the enqueue is turned on and
only the drain is timed: from then until the enqueue service has written every one into the timer log and the wheel
(its queue offset at the end of the timer queue); the commit log is flushed before, so that the write-back of the
puts does not run during the drain. Printed: the put rate, the drain rate (``-n`` / seconds).

``put``: the put side alone: ``-n`` timer messages (default 1 M, delivery times spread as in ``enqueue``) put with
``timer_stop_enqueue=True`` (the enqueue does not run beside them), then as many plain messages for comparison; the
messages are built beforehand in chunks of 50 k, and only ``put_message`` is timed. Printed: both rates.

``deliver``: ``-n`` timer messages (default 200 k) due in the same second; printed: when the first and the last
reached their topic after that second began, and the rate in between (the dequeue service's delivery rate).

``lateness``: a writer thread puts plain 128 B messages as fast as it can while ``-n`` timers (default 20 k) fall
due at random times over ``--seconds``; each delivered timer's lateness is its ``TIMER_DEQUEUE_MS`` (the time
the store put it into its topic) minus the time asked for; printed: p50, p99 and the maximum against
``timer_precision_ms`` (the target: p99 within the precision plus 5 ms), and the writer's rate.

    python bench/timers.py enqueue -n 1000000
    python bench/timers.py enqueue-backlog -n 1000000
    python bench/timers.py put -n 1000000
    python bench/timers.py deliver -n 200000
    python bench/timers.py lateness -n 20000 --seconds 20
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import threading
import time

from pystore import Message, MessageStore

BODY = b"t" * 128
TOPIC = "Bench"
QUEUES = 4
STORE = {"mapped_file_size_commit_log": 256 * 1024 * 1024}


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _wait_enqueued(store: MessageStore, limit_s: float) -> float:
    """Seconds until the enqueue service has read every timer message put (or ``limit_s`` ran out: -1)."""
    start = time.perf_counter()
    while time.perf_counter() - start < limit_s:
        if store.timer_stats()["enqueue_behind"] == 0:
            return time.perf_counter()
        time.sleep(0.002)
    return -1.0


def _drained(store: MessageStore, limit_s: float) -> float:
    """``_wait_enqueued`` without ``timer_stats()`` (whose pending count sums the wheel): the timer store's queue
    offset against the end of its queue, read every millisecond."""
    ts = store.timer_message_store
    assert ts is not None
    start = time.perf_counter()
    while time.perf_counter() - start < limit_s:
        if ts.curr_queue_offset >= store.get_max_offset_in_queue("rmq_sys_wheel_timer", 0):
            return time.perf_counter()
        time.sleep(0.001)
    return -1.0


def _delivered(store: MessageStore) -> int:
    return sum(store.get_max_offset_in_queue(TOPIC, q) for q in range(QUEUES))


def _put_spread(store: MessageStore, n: int, spread_h: float) -> tuple[float, float]:
    """``n`` timers due evenly over ``spread_h`` hours from a minute on; the perf_counter before and after."""
    base = _now_ms() + 60_000
    step = max(1, int(spread_h * 3_600_000) // n)
    put = store.put_message
    t0 = time.perf_counter()
    for i in range(n):
        r = put(Message(TOPIC, BODY, queue_id=i % QUEUES, deliver_at_ms=base + i * step))
        if not r.is_ok():
            raise SystemExit("put %d refused: %s %s" % (i, r.status.name, r.reason))
    return t0, time.perf_counter()


def enqueue(root: str, n: int, spread_h: float) -> None:
    with MessageStore.open(root, **STORE) as store:
        t0, t_put = _put_spread(store, n, spread_h)
        t_enq = _wait_enqueued(store, 600)
        stats = store.timer_stats()
        print("puts        %8.0f /s  (%d timers over %.1f h, %.2f s)" % (n / (t_put - t0), n, spread_h, t_put - t0))
        if t_enq < 0:
            print("enqueue     not done after 600 s: %s" % stats)
        else:
            print("enqueued    %8.0f /s  (all %d in the timer log and wheel %.2f s after the first put, %.2f s after "
                  "the last)" % (n / (t_enq - t0), n, t_enq - t0, t_enq - t_put))
        print("pending     %d, next due in %.1f s" % (stats["pending"], (stats["next_due_ms"] - _now_ms()) / 1000))
        for name in ("timerwheel", "timerlog"):
            path = os.path.join(root, name)
            size = os.path.getsize(path) if os.path.isfile(path) else sum(
                os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))
            print("%-11s %d MiB on disk (mapped)" % (name, size >> 20))


def _timed_puts(store: MessageStore, n: int, make) -> float:
    """Seconds spent in ``put_message`` for ``n`` messages ``make(i)``, built beforehand in chunks of 50 k."""
    put = store.put_message
    spent = 0.0
    for start in range(0, n, 50_000):
        msgs = [make(i) for i in range(start, min(n, start + 50_000))]
        t0 = time.perf_counter()
        for m in msgs:
            r = put(m)
            if not r.is_ok():
                raise SystemExit("put refused: %s %s" % (r.status.name, r.reason))
        spent += time.perf_counter() - t0
    return spent


def put_rate(root: str, n: int, spread_h: float) -> None:
    with MessageStore.open(root, timer_stop_enqueue=True, **STORE) as store:
        base = _now_ms() + 60_000
        step = max(1, int(spread_h * 3_600_000) // n)
        timed = _timed_puts(store, n, lambda i: Message(TOPIC, BODY, queue_id=i % QUEUES, deliver_at_ms=base + i * step))
        plain = _timed_puts(store, n, lambda i: Message(TOPIC, BODY, queue_id=i % QUEUES))
        print("timer puts  %8.0f /s  (%d timers over %.1f h, %.2f s in put_message)" % (n / timed, n, spread_h, timed))
        print("plain puts  %8.0f /s  (%d messages, %.2f s in put_message)" % (n / plain, n, plain))


def enqueue_backlog(root: str, n: int, spread_h: float) -> None:
    with MessageStore.open(root, timer_stop_enqueue=True, **STORE) as store:
        t0, t_put = _put_spread(store, n, spread_h)
        ts = store.timer_message_store
        if ts is None:
            raise SystemExit("this store runs no timer store")
        store.flush()           # the puts' pages on disk first: their write-back is not the drain's
        t1 = time.perf_counter()
        store.config.timer_stop_enqueue = False
        if ts.wake_enqueue is not None:
            ts.wake_enqueue()
        t_enq = _drained(store, 600)
        print("puts        %8.0f /s  (%d timers over %.1f h, %.2f s; enqueue stopped)" % (n / (t_put - t0), n, spread_h,
                                                                                       t_put - t0))
        if t_enq < 0:
            print("enqueue     not drained after 600 s: %s" % store.timer_stats())
            return
        print("drained     %8.0f /s  (the backlog of %d in the timer log and wheel %.2f s after the enqueue started)"
              % (n / (t_enq - t1), n, t_enq - t1))
        stats = store.timer_stats()
        print("pending     %d, next due in %.1f s" % (stats["pending"], (stats["next_due_ms"] - _now_ms()) / 1000))


def deliver(root: str, n: int) -> None:
    with MessageStore.open(root, **STORE) as store:
        put = store.put_message
        # due at the start of a second far enough ahead for every put and its enqueue
        due = (_now_ms() // 1000 + 3 + n // 100_000) * 1000
        t0 = time.perf_counter()
        for i in range(n):
            r = put(Message(TOPIC, BODY, queue_id=i % QUEUES, deliver_at_ms=due))
            if not r.is_ok():
                raise SystemExit("put %d refused: %s %s" % (i, r.status.name, r.reason))
        put_s = time.perf_counter() - t0
        if _wait_enqueued(store, 600) < 0 or _now_ms() >= due:
            raise SystemExit("the timers were not enqueued before they fell due; try a smaller -n")
        first = last = None
        while True:
            got = _delivered(store)
            now = _now_ms()
            if got and first is None:
                first = now
            if got >= n:
                last = now
                break
            if now > due + 600_000:
                raise SystemExit("only %d of %d delivered 600 s after their time" % (got, n))
            time.sleep(0.001)
        assert first is not None
        print("puts        %8.0f /s  (%d timers due in the same second)" % (n / put_s, n))
        print("first       %5d ms after the due time (precision %d ms)" % (first - due, store.config.timer_precision_ms))
        print("last        %5d ms after the due time" % (last - due))
        print("delivered   %8.0f /s  (first to last)" % (n / max(0.001, (last - first) / 1000)))


def lateness(root: str, n: int, seconds: float) -> None:
    stop = threading.Event()
    written = [0]
    with MessageStore.open(root, **STORE) as store:
        def writer() -> None:
            put, i = store.put_message, 0
            while not stop.is_set():
                for _ in range(256):
                    put(Message("Load", BODY, queue_id=i % QUEUES))
                    i += 1
            written[0] = i

        start = _now_ms() + 2000
        import random
        rng = random.Random(7)
        asked = {}
        for i in range(n):
            at = start + rng.randrange(int(seconds * 1000))
            asked[i] = at
            body = b"%d" % i
            r = store.put_message(Message(TOPIC, body, queue_id=i % QUEUES, deliver_at_ms=at))
            if not r.is_ok():
                raise SystemExit("put %d refused: %s %s" % (i, r.status.name, r.reason))
        t = threading.Thread(target=writer, daemon=True)
        t0 = time.perf_counter()
        t.start()
        end = start + int(seconds * 1000) + 10_000
        while _delivered(store) < n and _now_ms() < end:
            time.sleep(0.05)
        stop.set()
        t.join()
        load_s = time.perf_counter() - t0
        late = []
        for q in range(QUEUES):
            offset = 0
            while True:
                r = store.get_message("bench", TOPIC, q, offset, 256)
                if not r.messages:
                    break
                for m in r.messages:
                    late.append(int(m.properties["TIMER_DEQUEUE_MS"]) - asked[int(m.body)])
                offset = r.next_begin_offset
        late.sort()
        p = store.config.timer_precision_ms
        print("delivered   %d of %d, with a writer at %.0f puts/s" % (len(late), n, written[0] / load_s))
        if late:
            print("lateness    p50 %d ms, p99 %d ms, max %d ms, min %d ms (precision %d ms; target p99 <= %d ms)"
                  % (late[len(late) // 2], late[int(len(late) * 0.99)], late[-1], late[0], p, p + 5))
            print("            mean %.1f ms" % statistics.fmean(late))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=("enqueue", "enqueue-backlog", "put", "deliver", "lateness"))
    ap.add_argument("-n", type=int, default=None)
    ap.add_argument("--spread-h", type=float, default=24.0)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--work", default=None, help="folder for the store (default: a temporary one, removed after)")
    args = ap.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="pystore-timers-")
    root = os.path.join(work, "store")
    try:
        if args.what == "enqueue":
            enqueue(root, args.n or 1_000_000, args.spread_h)
        elif args.what == "enqueue-backlog":
            enqueue_backlog(root, args.n or 1_000_000, args.spread_h)
        elif args.what == "put":
            put_rate(root, args.n or 1_000_000, args.spread_h)
        elif args.what == "deliver":
            deliver(root, args.n or 200_000)
        else:
            lateness(root, args.n or 20_000, args.seconds)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
