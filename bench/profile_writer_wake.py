"""What a waiting consumer costs the writer, in instructions (``python bench/profile_writer_wake.py``).

Wall-clock put rates on a shared 2-core VM move by more than the few per cent asked of the wake-up hook, so
this counts instead: the writer runs under valgrind's callgrind, collecting only inside ``put_message``
(``--toggle-collect``: the put, its dispatch and the wake-up hook, nothing of the consumer), for ``N`` puts of
one 128 B message in each case:

==============  ===============================================================================================
``none``        nobody waits: the hook's fence and one load per put
``sleeping``    a consumer process of the queue put to, blocking (``spin_us=0``), registered and asleep at every
                put (the writer waits for that between puts): each put swaps the state word and makes one
                ``FUTEX_WAKE`` (the most a waiter can cost: one wake-up per wait)
``idle``        a blocking consumer of a queue nobody puts to: each put that finds it registered wakes it; after
                a wake-up that found nothing it looks at its queue without registering for a while
``spinning``    a consumer process of the queue put to, spinning (``spin_us`` large): it watches the next unit's
                place and never registers, so the writer does nothing for it
==============  ===============================================================================================

Between two puts the writer sleeps 1 ms in every case (outside the collected function), so that the consumer
has caught up and waits as its case says at every put. The consumer runs outside valgrind. For each case:
instructions per put, and those inside ``QueueDispatcher.dispatch`` (it writes the units and runs the wake-up
hook: the part a waiter can change, without the rest of the put, whose branches depend on the clock); the
writer's futex calls per put (callgrind's count of calls to ``syscall`` inside the puts) and the state word's
wake-ups (its seq) per put. A futex call's time in the kernel is not an instruction callgrind sees: the count
of calls says what it adds.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
N = 2000

_WRITER = r"""
import os, subprocess, sys, time
from pystore import Message
from pystore.engine.store import MessageStore
root, mode, n, consumer = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
store = MessageStore.open(root, mapped_file_size_commit_log=64 << 20)
store.put_message(Message("T", b"x" * 128))
store.put_message(Message("Idle", b"x" * 128))
wake = store._dispatcher.wake
child = None
if mode != "none":
    topic = "Idle" if mode == "idle" else "T"
    spin = "100000" if mode == "spinning" else "0"
    child = subprocess.Popen([sys.executable, "-c", consumer, root, topic, spin],
                             stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    assert child.stdout.readline().startswith(b"READY")
    deadline = time.monotonic() + 30
    # the consumer caught up: waiting (registered) or spinning on the next unit's place
    time.sleep(0.5)
    while mode != "spinning" and wake.waiters == 0:
        assert time.monotonic() < deadline
        time.sleep(0.01)
m = Message("T", b"x" * 128)
put = store.put_message
seq0 = wake.seq
for _ in range(n):
    # in every case alike (an idle writer's put does more than a busy one's: it wakes the flush service, say):
    # the consumer catches up before each put; the waits are outside the collected put
    time.sleep(0.001)
    if child is not None:
        if mode == "sleeping":
            deadline = time.monotonic() + 30
            while not wake.sleeping:
                assert time.monotonic() < deadline
                time.sleep(0.0002)
    put(m)
print("WAKEUPS %d" % (wake.seq - seq0), flush=True)
if child is not None:
    child.kill()
    child.wait()
store.shutdown()
"""

_CONSUMER = r"""
import sys
from pystore.engine.store import MessageStore
root, topic, spin = sys.argv[1], sys.argv[2], float(sys.argv[3])
store = MessageStore.open(root, read_only=True, mapped_file_size_commit_log=64 << 20)
c = store.consumer("bench", topic, queue_ids=[0], auto_commit=False, spin_us=spin)
c.poll(0)
print("READY", flush=True)
while True:
    c.poll(1000)
"""

CASES = ("none", "sleeping", "idle", "spinning")


def _calls_to(path: str, name: str) -> int:
    """Calls to the function ``name`` recorded in the callgrind file ``path`` (its ``cfn=``/``calls=`` pairs;
    a function is named at its first mention, then by its number only)."""
    ids: set[str] = set()
    total = 0
    lines = Path(path).read_text().splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"c?fn=\((\d+)\)(?: (.*))?$", line)
        if not m:
            continue
        if m.group(2) == name:
            ids.add(m.group(1))
        if line.startswith("cfn=") and m.group(1) in ids and i + 1 < len(lines) and lines[i + 1].startswith("calls="):
            total += int(lines[i + 1].split()[0][len("calls="):])
    return total


def _count(mode: str, n: int, tree: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "callgrind.out")
        env = dict(os.environ, PYTHONPATH=tree)
        p = subprocess.run(["valgrind", "--tool=callgrind", "--toggle-collect=*CommitLogCore_*put_message",
                            "--callgrind-out-file=" + out, sys.executable, "-c", _WRITER, tmp, mode, str(n),
                            _CONSUMER], capture_output=True, text=True, env=env, timeout=1800)
        if p.returncode != 0:
            raise SystemExit("%s failed:\n%s" % (mode, p.stderr[-3000:]))
        wakeups = int(re.search(r"WAKEUPS (\d+)", p.stdout).group(1))
        total = int(re.search(r"Collected : (\d+)", p.stderr).group(1))
        calls = _calls_to(out, "syscall")
        ann = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", out],
                             capture_output=True, text=True).stdout
        m = re.search(r"^\s*([\d,]+) \([^)]*\)\s+\S*QueueDispatcher_dispatch \[", ann, re.M)
        dispatch = int(m.group(1).replace(",", "")) if m else 0
    return {"instructions_per_put": total / n, "dispatch_per_put": dispatch / n, "syscalls_per_put": calls / n,
            "wakeups_per_put": wakeups / n}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cases", nargs="*", help="the cases to run, of %s (default: all)" % ", ".join(CASES))
    ap.add_argument("-n", type=int, default=N)
    ap.add_argument("--tree", default=str(ROOT), help="the work tree whose pystore runs (default: this one)")
    args = ap.parse_args()
    for mode in args.cases:
        if mode not in CASES:
            ap.error("unknown case %r (%s)" % (mode, ", ".join(CASES)))
    base = None
    for mode in args.cases or CASES:
        f = _count(mode, args.n, args.tree)
        if mode == "none":
            base = f["instructions_per_put"]
        extra = "" if base is None else "  (%+.1f %% of none)" % (100 * (f["instructions_per_put"] / base - 1))
        print("%-9s %8.0f instructions/put%s, %5.0f of them in the dispatch (units + hook)  %.3f syscalls/put  "
              "%.3f wake-ups/put" % (mode, f["instructions_per_put"], extra, f["dispatch_per_put"],
                                     f["syscalls_per_put"], f["wakeups_per_put"]), flush=True)


if __name__ == "__main__":
    main()
