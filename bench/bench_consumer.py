"""Put → consumer latency, in one process: a consumer thread blocks in ``Consumer.poll`` (the long-polling
wait of ``pystore.arrival``) while the main thread puts one message at a time; each message carries its put
time (``perf_counter_ns``) in its body, and the consumer records when it got it. p50/p99 go to
``extra_info``; the benchmark's own timing is the put-and-wait-for-delivery round trip.

Checks what it measured: every message put was delivered once, in order, with its body.
"""

from __future__ import annotations

import queue
import struct
import tempfile
import threading
import time

import benchlib
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
