"""Run pystore's sequential read loop over and over, so a profiler can watch it (and so the figure of
``bench_read.py::test_get_message_sequential`` can be had outside the suite).

    python bench/profile_read.py                       # 200 k x 128 B with keys, pages of 32, 9 rounds
    python bench/profile_read.py --rounds 150 --mode pages
    perf record -g -- python bench/profile_read.py --rounds 150 --mode consume

Modes (each round reads the whole queue once through ``get_message`` in pages of ``--page``):
``pages``: the pages alone (messages decoded, no body copied out); ``consume``: every page's bodies made into
``bytes`` and dropped with the page (what ``get_message_sequential`` times); ``retain``: every body kept to
the end of the round (``get_message_sequential_retained``). Every round's count is checked and, in
``consume`` and ``retain``, the last round's bodies are compared with those put.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import benchlib  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=200_000)
    p.add_argument("--size", type=int, default=128, help="body bytes")
    p.add_argument("--page", type=int, default=32, help="max_msg_nums of each get_message")
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--mode", choices=["pages", "consume", "retain"], default="consume")
    p.add_argument("--dir", default=None, help="parent folder of the temporary store (default: $TMPDIR)")
    p.add_argument("--crc", choices=["on", "off", "paired"], default="on",
                   help="check_crc_on_read: on (the default config), off, or paired: each round read twice, "
                        "without then with the check, and the ratio of the two rates printed")
    a = p.parse_args(argv)

    api = benchlib.store_api()
    Message, MessageBatch = api["Message"], api["MessageBatch"]
    from pystore import GetMessageStatus

    found = GetMessageStatus.FOUND
    n, page = a.messages, a.page
    bodies = benchlib.payloads(n, a.size)
    msgs = [Message(benchlib.TOPIC, b, keys="k%07d" % i) for i, b in enumerate(bodies)]
    rec = api["record_length"](msgs[0])
    with tempfile.TemporaryDirectory(prefix="pystore-profile-read-", dir=a.dir) as d:
        store = benchlib.open_warm_store(os.path.join(d, "s"), benchlib.file_size_for(n * rec))
        try:
            for i in range(0, n, 128):
                r = store.put_messages(MessageBatch(msgs[i:i + 128]))
                if not r.is_ok():
                    raise RuntimeError("put failed: %r" % (r,))
            del msgs
            store.flush()
            os.sync()
            get = store.get_message
            topic = benchlib.TOPIC

            def one_round(keep: list[bytes] | None) -> int:
                count = off = 0
                while off < n:
                    r = get("profile", topic, 0, off, page)
                    if r.status != found:
                        raise AssertionError("get_message at %d: %r" % (off, r.status))
                    if a.mode == "pages":
                        count += len(r.messages)
                    else:
                        got = [m.body for m in r.messages]
                        if keep is not None:
                            keep += got
                        count += len(got)
                    off = r.next_begin_offset
                return count

            limits = store._limits
            limits.check_crc = a.crc != "off"
            times = []
            ratios = []
            for k in range(a.rounds):
                if a.crc == "paired":
                    limits.check_crc = False
                    t0 = time.perf_counter()
                    one_round([] if a.mode == "retain" else None)
                    unchecked = time.perf_counter() - t0
                    limits.check_crc = True
                t0 = time.perf_counter()
                count = one_round([] if a.mode == "retain" else None)
                times.append(time.perf_counter() - t0)
                if a.crc == "paired":
                    ratios.append(unchecked / times[-1])
                if count != n:
                    raise AssertionError("round %d read %d messages, %d were put" % (k, count, n))
            if a.mode != "pages":
                last: list[bytes] = []
                one_round(last)                 # untimed: the bodies themselves, checked
                if benchlib.bodies_checksum(last) != benchlib.bodies_checksum(bodies):
                    raise AssertionError("the bodies read differ from those put")
        finally:
            store.destroy()
    times.sort()
    med = times[len(times) // 2]
    print("%s, pages of %d, %d x %d B: min %.1f ms, median %.1f ms per round -> %.2f M msg/s (median)" % (
        a.mode, page, n, a.size, times[0] * 1e3, med * 1e3, n / med / 1e6))
    if ratios:
        ratios.sort()
        print("check_crc_on_read: rate with the check / without, paired rounds: median %.3f (%.3f .. %.3f)" % (
            ratios[len(ratios) // 2], ratios[0], ratios[-1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
