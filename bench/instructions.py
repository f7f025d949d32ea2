"""Instruction counts of the hot paths, against a committed baseline: the regression check a noisy machine
allows (``make bench-instructions``; ``--save`` rewrites the baseline).

Wall-clock timings on a shared 2-core VM move by tens of percent from run to run; the number of instructions
a function executes does not. Each workload runs in its own process under valgrind's callgrind, collecting
only inside the compiled functions named (``--toggle-collect``), and is divided by the number of calls it made:

======================  ==============================================  =========================================
workload                collected inside                                the calls
======================  ==============================================  =========================================
put_single              ``CommitLogCore._put``                          2,000 puts of one prebuilt 128 B message
put_keyed               ``CommitLogCore._put``                          2,000 puts of 128 B messages, one key each
put_batch               ``_batch_put.put_batch``                        200 batches of 32 x 128 B
put_batch_from_bodies   ``_batch_put.put_batch``                        200 ``from_bodies`` batches of 32 x 128 B
                                                                        (distinct bodies): the put alone
from_bodies_put         ``MessageBatch.from_bodies``, ``put_messages``  the same, whole: the batch made, put and
                        and the batch's deallocation                    freed (all a caller's loop pays but
                                                                        the loop's own bytecode)
get                     the compiled ``get_message``                    2,000 gets of one message
look                    the compiled ``look_message_by_offset``         2,000 look-ups by commit-log offset
arrow_decode            ``_arrow_source.scan_file`` (Spark's decoder)   one scan of 2,000 records, per record
get_columns             ``_read.read_queue`` (its scan and decoder)     one page of 2,000 x 128 B, per message
get_columns_body        ``_read.read_queue``                            the same page, ``columns=["queue_offset",
                                                                        "body"]``
put_columns             ``_bulk_put._put`` (the column put's loop)      20 ``put_columns`` of 1,000 x 128 B bodies
                                                                        (a numpy pair), per message
put_columns_1k          ``_bulk_put._put``                              the same with 1 KiB bodies, per message
recover_scan            ``_records.scan_file`` (recovery's walk)        a reopen's walk of 40,000 x 128 B, per
                                                                        record
recover_reput           ``QueueDispatcher.reput`` (re-dispatch)         the queues rebuilt on open from 40,000
                                                                        x 128 B records, per record
======================  ==============================================  =========================================

A count more than ``--tolerance`` (default 5 %) above the baseline fails the check (exit 1). The baseline
holds the Python version and the compiler it was made with: counts made elsewhere differ, so the check
says so and compares anyway only when ``--force`` is given. Without valgrind the check says so and exits 2.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
BASELINE = HERE / "instructions_baseline.json"
N = 2000

_SETUP = r"""
import sys, tempfile
from pystore import Message
from pystore import MessageBatch
from pystore import MessageStore
root = tempfile.mkdtemp()
store = MessageStore.open(root, mapped_file_size_commit_log=64 << 20)
body = b"x" * 128
"""

#: name -> (callgrind --toggle-collect pattern(s), calls made, the workload's code after _SETUP)
WORKLOADS: dict[str, tuple[str | tuple[str, ...], int, str]] = {
    "put_single": ("*CommitLogCore__put", N, """
m = Message("T", body)
for _ in range(%d):
    store.put_message(m)
""" % N),
    "put_keyed": ("*CommitLogCore__put", N, """
ms = [Message("T", body, keys="k%%07d" %% i) for i in range(%d)]
for m in ms:
    store.put_message(m)
""" % N),
    "put_batch": ("*_batch_put_put_batch", N // 10, """
b = MessageBatch([Message("T", body) for _ in range(32)])
for _ in range(%d):
    store.put_messages(b)
""" % (N // 10)),
    "put_batch_from_bodies": ("*_batch_put_put_batch", N // 10, """
bodies = [i.to_bytes(8, "big") + body[8:] for i in range(32 * %d)]
store.put_message(Message("T", body))      # the file and the queue made before, not counted
put, fb = store.put_messages, MessageBatch.from_bodies
for i in range(0, len(bodies), 32):
    put(fb("T", bodies[i:i + 32]))
""" % (N // 10)),
    "from_bodies_put": (("*MessageBatch_*from_bodies", "*CommitLogCore_*put_messages", "*tp_dealloc_*MessageBatch"),
                        N // 10, """
bodies = [i.to_bytes(8, "big") + body[8:] for i in range(32 * %d)]
store.put_message(Message("T", body))      # the file and the queue made before, not counted
put, fb = store.put_messages, MessageBatch.from_bodies
for i in range(0, len(bodies), 32):
    put(fb("T", bodies[i:i + 32]))
""" % (N // 10)),
    "get": ("*_queue_reader_11QueueReader_*get_message", N, """
for _ in range(100):
    store.put_message(Message("T", body))
g = store.get_message
for i in range(%d):
    g("g", "T", 0, i %% 100, 1)
""" % N),
    "look": ("*_queue_reader_11QueueReader_*look_message_by_offset", N, """
offs = [store.put_message(Message("T", body)).append_message_result.wrote_offset for _ in range(100)]
look = store.look_message_by_offset
for i in range(%d):
    look(offs[i %% 100])
""" % N),
    "arrow_decode": ("*_arrow_*scan_file", N, """
import pyarrow as pa
from pystore.columns._arrow import BatchBuilder
from pystore.columns._arrow_source import scan_file
from pystore.log._mapped_file import MappedFile
from pystore.columns.export import arrow_schema
for i in range(%d):
    store.put_message(Message("T", body, tags="t"))
store.flush()
mf = MappedFile(store.config.commit_log_paths()[0] + "/00000000000000000000", -1, read_only=True)
b = BatchBuilder(arrow_schema(), True, None, -1, None, None, 1 << 20)
pos, done = scan_file(b, mf, 0, -1)
assert b.build().num_rows == %d
""" % (N, N)),
    # get_message's scan feeding the Arrow decoder (check_crc_on_read on, as by default)
    "get_columns": ("*pw_7pystore_4read_5_read_*read_queue", N, """
store.put_messages(MessageBatch.from_bodies("T", [body] * %d))
status, nxt, rb = store.get_columns("g", "T", 0, 0, %d)
assert rb.num_rows == %d
""" % (N, N, N)),
    # the same page, only the columns a reader of bodies needs (a projection: the others are not built)
    "get_columns_body": ("*pw_7pystore_4read_5_read_*read_queue", N, """
store.put_messages(MessageBatch.from_bodies("T", [body] * %d))
status, nxt, rb = store.get_columns("g", "T", 0, 0, %d, columns=["queue_offset", "body"])
assert rb.num_rows == %d and rb.schema.names == ["queue_offset", "body"]
""" % (N, N, N)),
    "recover_scan": ("*pw_*_records_*scan_file", 20 * N, """
m = Message("T", body)
for _ in range(%d):
    store.put_message(m)
store.shutdown()
store = MessageStore.open(root, mapped_file_size_commit_log=64 << 20)   # normal recovery walks the log's files
""" % (20 * N)),
    "recover_reput": ("*pw_*QueueDispatcher_*reput*", 20 * N, """
import shutil
m = Message("T", body)
for _ in range(%d):
    store.put_message(m)
store.shutdown()
shutil.rmtree(root + "/consumequeue")
store = MessageStore.open(root, mapped_file_size_commit_log=64 << 20)   # the queues rebuilt: every record dispatched
""" % (20 * N)),
    "put_columns": ("*_bulk_put__put*", 20 * 1000, """
import numpy as np
values = np.frombuffer(b"y" * (1000 * 128), dtype=np.uint8)
offsets = np.arange(0, 1000 * 128 + 1, 128, dtype=np.int64)
for _ in range(20):
    assert store.put_columns("T", (values, offsets)).count == 1000
"""),
    "put_columns_1k": ("*_bulk_put__put*", 20 * 1000, """
import numpy as np
values = np.frombuffer(bytes(range(256)) * (1000 * 4), dtype=np.uint8)
offsets = np.arange(0, 1000 * 1024 + 1, 1024, dtype=np.int64)
for _ in range(20):
    assert store.put_columns("T", (values, offsets)).count == 1000
"""),
}


def count(name: str) -> float:
    """Instructions per call of workload ``name``."""
    pattern, calls, code = WORKLOADS[name]
    patterns = (pattern,) if isinstance(pattern, str) else pattern
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "callgrind.out")
        script = _SETUP + code + "\nstore.shutdown()\n"
        env = dict(os.environ, PYTHONHASHSEED="0")
        subprocess.run(
            ["valgrind", "--tool=callgrind", *("--toggle-collect=" + p for p in patterns),
             "--callgrind-out-file=" + out, sys.executable, "-c", script],
            check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=900,
        )
        totals = re.search(r"^(?:totals|summary): (\d+)", Path(out).read_text(), re.M)
        if totals is None or int(totals.group(1)) == 0:
            raise RuntimeError("%s: callgrind collected nothing inside %s (was the function renamed?)"
                               % (name, ", ".join(patterns)))
        return int(totals.group(1)) / calls


def environment() -> dict[str, str]:
    return {"python": platform.python_version(), "compiler": sysconfig.get_config_var("CC") or "",
            "machine": platform.machine()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--save", action="store_true", help="write the counts as the new baseline")
    ap.add_argument("--tolerance", type=float, default=5.0, help="percent a count may rise (default 5)")
    ap.add_argument("--force", action="store_true", help="compare even against another environment's baseline")
    ap.add_argument("workloads", nargs="*", help="only these (default: all)")
    args = ap.parse_args(argv)
    if shutil.which("valgrind") is None:
        print("valgrind is not installed: no instruction counts (apt install valgrind)", file=sys.stderr)
        return 2
    names = args.workloads or list(WORKLOADS)
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        ap.error("unknown workload(s): %s (known: %s)" % (", ".join(unknown), ", ".join(WORKLOADS)))
    counts = {n: count(n) for n in names}
    if args.save:
        old = json.loads(BASELINE.read_text()) if BASELINE.exists() else {"counts": {}}
        old["counts"].update({n: round(c, 1) for n, c in counts.items()})
        old["environment"] = environment()
        BASELINE.write_text(json.dumps(old, indent=1, sort_keys=True) + "\n")
        for n, c in counts.items():
            print("%-14s %10.1f instructions a call (saved)" % (n, c))
        return 0
    base = json.loads(BASELINE.read_text())
    if base.get("environment") != environment() and not args.force:
        print("the baseline was made with %s, this is %s: counts differ between builds; --force compares anyway"
              % (base.get("environment"), environment()), file=sys.stderr)
        return 2
    worse = 0
    for n, c in counts.items():
        b = base["counts"].get(n)
        if b is None:
            print("%-14s %10.1f instructions a call (no baseline)" % (n, c))
            continue
        change = (c / b - 1) * 100
        bad = change > args.tolerance
        worse += bad
        print("%-14s %10.1f instructions a call, baseline %10.1f: %+6.2f %%%s"
              % (n, c, b, change, "  <- more than %g %%" % args.tolerance if bad else ""))
    return 1 if worse else 0


if __name__ == "__main__":
    sys.exit(main())
