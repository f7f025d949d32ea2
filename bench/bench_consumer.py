"""Put → consumer latency and consumer throughput.

``test_put_to_consumer_latency``: in one process, a consumer thread blocks in ``Consumer.poll`` (the
long-polling wait of ``pystore.read.arrival``) while the main thread puts one message at a time; each message carries
its put time (``perf_counter_ns``) in its body, and the consumer records when it got it. p50/p99 go to
``extra_info``; the benchmark's own timing is the put-and-wait-for-delivery round trip.

``test_steady_rate_latency[thread|process|process-spin]``: ``STEADY_N`` messages of 128 B put at one every
``STEADY_GAP_US`` µs; the latency of each is from ``put_message`` returning (taken in the producer) to the consumer
holding it (taken when its ``poll`` returned, ``perf_counter_ns``: CLOCK_MONOTONIC, the same clock in every
process), as p50/p99/p99.9. ``thread``: a consumer thread of the writer's process, the producer sleeping
between puts (the GIL free); ``process``: a read-only store in another process, blocking on the wake file;
``process-spin``: the same, spinning ``SPIN_US`` before it sleeps (the compiled wait of a one-queue consumer
spins on the place of the queue's next unit, unregistered). A consumer that held a
message before its put returned counts 0. ``process-spin-floor``: the floor of ``process-spin`` on this machine
in the same run: the same pacing and spinning on the wake word alone (the writer's ``notify``, no put, no read).
``process-spin-pinned`` and ``process-spin-floor-pinned``: the same with the producer thread pinned to one CPU and
the consumer process to another, as a latency-sensitive deployment runs them (the store's own threads are left to
it: ``follow_put_cpu`` moves its flush service and index builder beside a pinned put thread).

``test_producer_and_consumer_processes``: a producer process puts ``PC_N`` 128 B messages as fast as it can
(``put_messages`` of ``MessageBatch.from_bodies``, ``PC_CHUNK`` a batch), while this process, a read-only store
with its transfer caps raised, consumes them with ``get_message`` (long-polling when it caught up): messages
consumed per second, from the first to the last.

``test_writer_cost_of_a_waiting_consumer``: the writer's put rate (single ``put_message``, 128 B) with no wake
file mapped (the put path without the hook), with it but nobody waiting, and with a consumer process waiting,
rounds alternated in one run; the ratios go to ``extra_info``.

Each checks what it measured: every message put was delivered once, in order. The figures vary with the
machine's load; docs/performance.md quotes a run with its command. On a machine other work keeps busy, the
spinning cases measure the scheduler rather than pystore (the floor's p50 goes from a tenth of a µs to ms):
running the bench under ``chrt -f 10`` (root) puts it ahead of that work for the few seconds it runs.
"""

from __future__ import annotations

import contextlib
import os
import queue
import select
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator

import benchlib
import numpy as np
import pytest
from benchlib import TOPIC

API = benchlib.store_api()
MessageStore = API["MessageStore"]
Message = API["Message"]

N = 2000
_TS = struct.Struct(">q")


def test_put_to_consumer_latency(benchmark) -> None:
    with tempfile.TemporaryDirectory() as root:
        store = MessageStore.open(root)
        try:
            got: queue.SimpleQueue = queue.SimpleQueue()
            stop = threading.Event()

            def consume() -> None:
                c = store.consumer("bench", TOPIC, queue_ids=[0])
                while not stop.is_set():
                    for m in c.poll(200):
                        got.put((time.perf_counter_ns() - _TS.unpack_from(m.body)[0], m.queue_offset))

            t = threading.Thread(target=consume, daemon=True)
            t.start()
            time.sleep(0.2)                     # the consumer is waiting before the first put
            latencies: list[int] = []
            offsets: list[int] = []

            def round_trip() -> None:
                store.put_message(Message(TOPIC, _TS.pack(time.perf_counter_ns()) + b"x" * 120))
                lat, off = got.get(timeout=10)
                latencies.append(lat)
                offsets.append(off)

            benchmark.pedantic(round_trip, rounds=N, iterations=1, warmup_rounds=10)
            stop.set()
            t.join(5)
            assert offsets == list(range(len(offsets)))
            assert len(offsets) == store.get_max_offset_in_queue(TOPIC, 0)
            pct = benchlib.percentiles(latencies, (50, 99))
            benchmark.extra_info.update({"put_to_consumer_p50_us": pct["p50"] / 1000,
                                         "put_to_consumer_p99_us": pct["p99"] / 1000})
        finally:
            store.shutdown()


# -- steady rate, across threads and processes ---------------------------------------------------------------

STEADY_N = int(os.environ.get("PYSTORE_BENCH_CONSUMER_N", "100000"))
STEADY_GAP_US = 50
SPIN_US = 1000
BODY = b"x" * 128
#: the work tree whose pystore the child processes import (the one this run imports)
_PYPATH = os.path.dirname(os.path.dirname(os.path.abspath(API["pystore"].__file__)))

_CONSUMER = r"""
import sys, time
import numpy as np
from pystore.engine.store import MessageStore
root, topic, n, spin, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
store = MessageStore.open(root, read_only=True, mapped_file_size_commit_log=int(sys.argv[6]))
c = store.consumer("bench", topic, queue_ids=[0], auto_commit=False, spin_us=spin)
got = np.zeros(n, dtype=np.int64)
print("READY", flush=True)
k = 0
poll, pc = c.poll, time.perf_counter_ns     # no look-ups between the poll returning and its time
while k < n:
    msgs = poll(1000)
    t = pc()
    for m in msgs:
        got[m.queue_offset] = t
    k += len(msgs)
np.save(out, got)
store.shutdown()
print("DONE %d" % k, flush=True)
"""


#: the floor of ``process-spin``: a word in shared memory alone (no register, no store read), the waiter spinning
#: on it in C as the consumer spins on the wake word; each seq it sees (and any it missed) gets the time it saw it
_FLOOR = r"""
import mmap, sys, time
import numpy as np
from pystore.system._notify import WakeWord
path, n, spin, out = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
with open(path, "r+b") as f:
    word = WakeWord(mmap.mmap(f.fileno(), 64), 16)
got = np.zeros(n + 1, dtype=np.int64)
print("READY", flush=True)
pc = time.perf_counter_ns
last = word.seq
while last < n:
    if word.wait(last, spin, 1000) == 1:
        t = pc()
        s = min(word.seq, n)
        got[last + 1:s + 1] = t
        last = s
np.save(out, got)
print("DONE %d" % last, flush=True)
"""


def _floor(root: str, n: int, pinned: bool = False) -> dict[str, float]:
    """``process-spin-floor``: ``n`` moves of a shared word, one every ``STEADY_GAP_US`` µs, paced as ``_pace``
    paces puts, seen by a process spinning ``SPIN_US`` on it (``WakeWord.wait``) and sleeping after: the latency
    from the move to the waiter holding it, under the same load as the other cases."""
    import mmap

    from pystore.system._notify import WakeWord
    path = os.path.join(root, "floor.word")
    with open(path, "wb") as f:
        f.write(b"\0" * 64)
    with open(path, "r+b") as f:
        word = WakeWord(mmap.mmap(f.fileno(), 64), 16)
    out = os.path.join(root, "floor.npy")
    with _consumer_child(_FLOOR, n, path, n, SPIN_US, out) as p, _pinned(p.pid, pinned):
        time.sleep(0.3)
        ret = np.zeros(n, dtype=np.int64)
        pc = time.perf_counter_ns
        t_next = pc()
        for i in range(n):
            while pc() < t_next:
                pass
            word.register()             # a waiter count for notify to clear: every notify moves the seq
            word.notify()
            ret[i] = pc()
            t_next += STEADY_GAP_US * 1000
    return _latency_figures(np.load(out)[1:], ret)


@contextlib.contextmanager
def _pinned(child: int, pinned: bool) -> Iterator[None]:
    """With ``pinned``, as a latency-sensitive deployment runs: the producer (this thread) on one CPU and the
    consumer process on another, for the block; the store's service threads are left to the store
    (``follow_put_cpu`` moves them beside a pinned put thread)."""
    if not pinned:
        yield
        return
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        pytest.skip("pinning needs two CPUs")
    os.sched_setaffinity(child, {allowed[1]})
    os.sched_setaffinity(0, {allowed[0]})
    try:
        yield
    finally:
        os.sched_setaffinity(0, set(allowed))


def _child(script: str, *argv: object) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=_PYPATH)
    return subprocess.Popen([sys.executable, "-c", script, *[str(a) for a in argv]], stdout=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, env=env)


@contextlib.contextmanager
def _consumer_child(script: str, n: int, *argv: object) -> Iterator[subprocess.Popen[bytes]]:
    """A child that says READY, takes ``n`` messages while the block runs, then says ``DONE n`` and exits;
    killed if it is still running when the block ends otherwise."""
    p = _child(script, *argv)
    try:
        _line(p, "READY")
        yield p
        assert _line(p, "DONE").split() == ["DONE", str(n)]
        p.wait(60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def _line(p: subprocess.Popen[bytes], prefix: str, timeout: float = 300.0) -> str:
    assert p.stdout is not None
    ready = select.select([p.stdout], [], [], timeout)[0]
    assert ready, "no %s from the child within %ss" % (prefix, timeout)
    line = p.stdout.readline().decode()
    assert line.startswith(prefix), "the child said %r, expected %s" % (line, prefix)
    return line


def _pace(store, n: int, gap_ns: int, sleep: bool) -> np.ndarray:
    """Put ``n`` messages, one every ``gap_ns`` (a put that ran late is followed at once by the next); the
    time each ``put_message`` returned."""
    ret = np.zeros(n, dtype=np.int64)
    msgs = [Message(TOPIC, BODY) for _ in range(n)]
    pc = time.perf_counter_ns
    t_next = pc()
    for i in range(n):
        if sleep:
            left = t_next - pc()
            if left > 0:
                time.sleep(left / 1e9)
        else:
            while pc() < t_next:
                pass
        store.put_message(msgs[i])
        ret[i] = pc()
        t_next += gap_ns
    return ret


def _latency_figures(got: np.ndarray, ret: np.ndarray) -> dict[str, float]:
    lat = np.maximum(got - ret, 0)
    return {"p50_us": float(np.percentile(lat, 50)) / 1000, "p99_us": float(np.percentile(lat, 99)) / 1000,
            "p99.9_us": float(np.percentile(lat, 99.9)) / 1000, "max_us": float(lat.max()) / 1000,
            "held_before_put_returned": int((got < ret).sum())}


@pytest.mark.parametrize("mode", ["thread", "process", "process-spin", "process-spin-floor", "process-spin-pinned",
                                  "process-spin-floor-pinned"])
def test_steady_rate_latency(benchmark, mode: str) -> None:
    n = STEADY_N
    file_size = benchlib.file_size_for(n * 300)
    with tempfile.TemporaryDirectory() as root:
        store = MessageStore.open(root, mapped_file_size_commit_log=file_size)
        try:
            store.put_message(Message(TOPIC + "Warm", BODY))   # the commit log exists before a reader opens it
            figures: dict[str, float] = {}

            def run() -> None:
                if mode.startswith("process-spin-floor"):
                    figures.update(_floor(root, n, pinned=mode.endswith("pinned")))
                    return
                if mode == "thread":
                    got = np.zeros(n, dtype=np.int64)

                    def consume() -> None:
                        c = store.consumer("bench", TOPIC, queue_ids=[0], auto_commit=False)
                        k = 0
                        while k < n:
                            msgs = c.poll(1000)
                            t = time.perf_counter_ns()
                            for m in msgs:
                                got[m.queue_offset] = t
                            k += len(msgs)

                    t = threading.Thread(target=consume, daemon=True)
                    t.start()
                    time.sleep(0.2)
                    ret = _pace(store, n, STEADY_GAP_US * 1000, sleep=True)
                    t.join(120)
                    assert not t.is_alive()
                else:
                    out = os.path.join(root, "got.npy")
                    spin = SPIN_US if mode.startswith("process-spin") else 0
                    with _consumer_child(_CONSUMER, n, root, TOPIC, n, spin, out, file_size) as p, \
                            _pinned(p.pid, mode.endswith("pinned")):
                        time.sleep(0.3)
                        ret = _pace(store, n, STEADY_GAP_US * 1000, sleep=False)
                    got = np.load(out)
                assert (got > 0).all()                                  # every message held, each once
                figures.update(_latency_figures(got, ret))

            benchmark.pedantic(run, rounds=1, iterations=1)
            assert store.get_max_offset_in_queue(TOPIC, 0) == (0 if mode.startswith("process-spin-floor") else n)
            benchmark.extra_info.update({"mode": mode, "messages": n, "gap_us": STEADY_GAP_US, **figures})
            print("\nsteady %s: %s" % (mode, figures))
        finally:
            store.shutdown()


# -- one producer process, one consumer process -------------------------------------------------------------

PC_N = int(os.environ.get("PYSTORE_BENCH_CONSUMER_PC_N", "2000000"))
PC_CHUNK = 1024

_PRODUCER = r"""
import sys, time
from pystore import Message
from pystore import MessageBatch
from pystore.engine.store import MessageStore
root, topic, n, chunk, file_size = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
store = MessageStore.open(root, mapped_file_size_commit_log=file_size)
store.put_message(Message(topic + "Warm", b"x"))
bodies = [b"x" * 128] * chunk
print("READY", flush=True)
sys.stdin.readline()
t0 = time.perf_counter_ns()
done = 0
while done < n:
    r = store.put_messages(MessageBatch.from_bodies(topic, bodies))
    assert r.is_ok(), r
    done += chunk
t1 = time.perf_counter_ns()
print("PUT %d %d" % (done, t1 - t0), flush=True)
sys.stdin.readline()
store.shutdown()
"""
#: the consumer's transfer caps: one get takes up to a producer's batch and more
_CAPS = {"max_transfer_count_on_message_in_memory": 4 * PC_CHUNK,
         "max_transfer_bytes_on_message_in_memory": 4 * PC_CHUNK * 256}


def test_producer_and_consumer_processes(benchmark) -> None:
    n = PC_N - PC_N % PC_CHUNK
    file_size = benchlib.file_size_for(n * 200)
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as root:
        env = dict(os.environ, PYTHONPATH=_PYPATH)
        p = subprocess.Popen([sys.executable, "-c", _PRODUCER, root, TOPIC, str(n), str(PC_CHUNK), str(file_size)],
                             stdout=subprocess.PIPE, stdin=subprocess.PIPE, env=env)
        try:
            _line(p, "READY")
            reader = MessageStore.open(root, read_only=True, mapped_file_size_commit_log=file_size, **_CAPS)

            def run() -> None:
                assert p.stdin is not None
                p.stdin.write(b"go\n")
                p.stdin.flush()
                offset, first, count = 0, 0, 0
                while offset < n:
                    r = reader.get_message("bench", TOPIC, 0, offset, 4 * PC_CHUNK, timeout_ms=5000)
                    if r.messages:
                        if not first:
                            first = time.perf_counter_ns()
                        count += len(r.messages)
                    assert r.next_begin_offset >= offset, (r.status, r.next_begin_offset, offset)
                    offset = r.next_begin_offset
                last = time.perf_counter_ns()
                _, put_n, put_ns = _line(p, "PUT").split()
                figures.update({"consumed_msgs_per_s": count / ((last - first) / 1e9),
                                "produced_msgs_per_s": int(put_n) / (int(put_ns) / 1e9), "messages": count})
                assert count == n

            benchmark.pedantic(run, rounds=1, iterations=1)
            reader.shutdown()
        finally:
            if p.poll() is None and p.stdin is not None:
                try:
                    p.stdin.write(b"end\n")
                    p.stdin.flush()
                except BrokenPipeError:
                    pass
                try:
                    p.wait(60)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
    benchmark.extra_info.update(figures)
    print("\nproducer + consumer processes: %s" % figures)


# -- what a waiting consumer costs the writer ---------------------------------------------------------------

COST_N = int(os.environ.get("PYSTORE_BENCH_CONSUMER_COST_N", "20000"))
COST_ROUNDS = 9

_FOREVER = r"""
import sys
from pystore.engine.store import MessageStore
store = MessageStore.open(sys.argv[1], read_only=True, mapped_file_size_commit_log=int(sys.argv[3]))
c = store.consumer("bench", sys.argv[2], queue_ids=[0], auto_commit=False)
print("READY", flush=True)
while True:
    c.poll(1000)
"""


def test_writer_cost_of_a_waiting_consumer(benchmark) -> None:
    """Rounds of ``COST_N`` puts with the hook off (``wake = None``: the put path before the wake file) and on,
    alternated (which goes first alternates too); first with nobody waiting, then with a consumer process
    that has caught up and waits on the wake file when each round starts (then it is woken, with the hook on,
    or finds the messages at its next look, with the hook off, and reads alongside the writer), then with a
    consumer of a topic nobody puts to (woken by each put that finds it waiting: the wake-ups without the
    reading). The ratio of each adjacent pair, and their median, by the wall clock and by the writer thread's
    CPU time (``thread_time``: the writer's own cost, without the time the consumer or the machine's other
    load takes its CPU): the machine's load moves the rates between rounds far more than the hook does."""
    n = COST_N
    file_size = benchlib.file_size_for(n * 300 * (COST_ROUNDS * 6 + 4))
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as root:
        store = MessageStore.open(root, mapped_file_size_commit_log=file_size)
        try:
            wake = store._dispatcher.wake
            assert wake is not None
            store.put_message(Message(TOPIC, BODY))
            store.put_message(Message(TOPIC + "Idle", BODY))    # the idle consumer's queue exists
            msgs = [Message(TOPIC, BODY) for _ in range(n)]

            def puts(hook: bool) -> tuple[float, float]:
                store._dispatcher.wake = wake if hook else None
                t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
                for m in msgs:
                    store.put_message(m)
                c1, t1 = time.thread_time_ns(), time.perf_counter_ns()
                store._dispatcher.wake = wake
                return n / ((t1 - t0) / 1e9), n / ((c1 - c0) / 1e9)

            def waiting() -> None:
                deadline = time.monotonic() + 60
                while wake.waiters == 0:                           # the consumer caught up and waits
                    assert time.monotonic() < deadline
                    time.sleep(0.001)

            def pairs(consumer: bool, name: str) -> None:
                ratios, cpu_ratios, off, on = [], [], [], []
                seq0 = wake.seq
                for r in range(COST_ROUNDS):
                    first = r % 2 == 1
                    if consumer:
                        waiting()
                    x = puts(first)
                    if consumer:
                        waiting()
                    y = puts(not first)
                    a, b = (y, x) if first else (x, y)
                    off.append(a[0])
                    on.append(b[0])
                    ratios.append(b[0] / a[0])
                    cpu_ratios.append(b[1] / a[1])
                figures.update({name + "_ratio": float(np.median(ratios)),
                                name + "_cpu_ratio": float(np.median(cpu_ratios)),
                                name + "_puts_per_s_hook_off": float(np.median(off)),
                                name + "_puts_per_s_hook_on": float(np.median(on)),
                                name + "_wake_ups": wake.seq - seq0})

            def run() -> None:
                for _ in range(4):                                 # the first pages of the file faulted in
                    puts(True)
                pairs(False, "no_waiter")
                # a consumer of the topic put to, then one of a topic nobody puts to: each put that finds the
                # latter registered wakes it, it finds nothing and waits again (the wake-ups without reading)
                for name, topic in (("waiting", TOPIC), ("idle_waiting", TOPIC + "Idle")):
                    p = _child(_FOREVER, root, topic, file_size)
                    try:
                        _line(p, "READY")
                        pairs(True, name)
                    finally:
                        p.kill()
                        p.wait()

            benchmark.pedantic(run, rounds=1, iterations=1)
        finally:
            store.shutdown()
    for name in ("no_waiter", "waiting", "idle_waiting"):
        figures["cost_%s_pct" % name] = 100 * (1 - figures[name + "_ratio"])
        figures["cpu_cost_%s_pct" % name] = 100 * (1 - figures[name + "_cpu_ratio"])
    benchmark.extra_info.update(figures)
    print("\nwriter cost: %s" % figures)
