"""What the builder, the mutator, the driver and the runner share: geometry, names, JSON helpers."""

from __future__ import annotations

import json
import os

#: small geometry: several files of each kind
CL_FILE = 32 * 1024
CQ_FILE = 640                       # 32 units a file
CQ_UNIT = 20
HASH_SLOTS = 64
INDEX_NUM = 256
INDEX_HEADER = 40
#: the timer reference (``reference.build_timers``): 24 timer units and the 16-byte blank a timer-log file
TIMER_UNIT = 52
TIMER_LOG_FILE = 24 * TIMER_UNIT + 16
TIMER_SLOT = 32
TIMER_TOPIC = "rmq_sys_wheel_timer"
TIMER_REAL_TOPIC = "TopicTimer"

CONFIG = {
    "mapped_file_size_commit_log": CL_FILE,
    "mapped_file_size_consume_queue": CQ_FILE,
    "max_hash_slot_num": HASH_SLOTS,
    "max_index_num": INDEX_NUM,
    "mapped_file_size_timer_log": TIMER_LOG_FILE,
}


def half_full(path: str) -> float:
    """The disk-usage probe the stores are opened with: the host's disk never refuses a put or deletes a file
    (a full /tmp on a shared machine would otherwise turn every put into SERVICE_NOT_AVAILABLE)."""
    return 0.5


#: the same settings for the CLI (``-o key=value``)
CLI_SETS = [arg for k, v in CONFIG.items() for arg in ("-o", "%s=%s" % (k, v))]

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
#: store time of the reference's first message (a fake clock moves 10 ms a put)
BASE_MS = 1_700_000_000_000

#: outcomes, best first; a case is classified by the worst of its observations. ``lag``: a reader of a crashed
#: store left out of its queue reads only records after the furthest consume-queue unit, which it said in
#: the log and served by offset (a crash's undispatched tail looks the same: a writer's open dispatches them)
OUTCOMES = ["ok", "lag", "corrupt", "exception", "loss", "wrong", "timeout", "signal"]
BAD = {"exception", "loss", "wrong", "timeout", "signal"}

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def dump(path: str, obj: object) -> None:
    with open(path, "w") as f:
        json.dump(obj, f)


def load(path: str) -> object:
    with open(path) as f:
        return json.load(f)


def worst(kinds: list[str]) -> str:
    return max(kinds, key=OUTCOMES.index, default="ok")
