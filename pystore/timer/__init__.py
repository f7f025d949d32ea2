"""The timer store's files (RocketMQ 5 timer messages): the timer log (``timerlog/``, 52-byte units linked per slot),
the timer wheel (``timerwheel``, 32-byte slots) and the timer checkpoint (``config/timercheck``), byte for byte
RocketMQ's (``org.apache.rocketmq.store.timer``: ``TimerLog``, ``TimerWheel``, ``Slot``, ``TimerCheckpoint``,
``TimerMessageStore``). The services that enqueue and dequeue timer messages are built on these.

Where the files live under a store root (``TimerMessageStore.getTimerLogPath``/``getTimerWheelPath``,
``BrokerPathConfigHelper.getTimerCheckPath``)::

    <root>/timerlog/00000000000000000000 ...   <root>/timerwheel   <root>/config/timercheck
"""

from __future__ import annotations

import os

# a checkout's compiled modules are built out of tree (see pystore/__init__.py): look there too
__path__ = __import__("pkgutil").extend_path(__path__, __name__)

from pystore.timer.timer_checkpoint import DataVersion, TimerCheckpoint, checkpoint_path
from pystore.timer.timer_log import (
    BLANK_MAGIC_CODE,
    MAGIC_DEFAULT,
    MAGIC_DELETE,
    MAGIC_ROLL,
    UNIT_SIZE,
    TimerLog,
    TimerUnit,
    encode_unit,
    is_magic_ok,
    topic_hash,
)
from pystore.timer.timer_wheel import EMPTY_SLOT, IGNORE, Slot, TimerWheel, precision_ms_of, roll_window_slots

__all__ = [
    "TIMER_TOPIC", "TIMER_OUT_MS", "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS", "TIMER_ROLL_TIMES", "TIMER_DELETE_UNIQUE_KEY",
    "timer_log_path", "timer_wheel_path", "checkpoint_path",
    "TimerLog", "TimerUnit", "encode_unit", "is_magic_ok", "topic_hash", "UNIT_SIZE", "BLANK_MAGIC_CODE",
    "MAGIC_DEFAULT", "MAGIC_ROLL", "MAGIC_DELETE",
    "TimerWheel", "Slot", "EMPTY_SLOT", "IGNORE", "precision_ms_of", "roll_window_slots",
    "TimerCheckpoint", "DataVersion",
]

#: ``TimerMessageStore.TIMER_TOPIC``: ``TopicValidator.SYSTEM_TOPIC_PREFIX + "wheel_timer"``
TIMER_TOPIC = "rmq_sys_wheel_timer"
#: the message properties the timer store reads and writes (``MessageConst.PROPERTY_TIMER_*``)
TIMER_OUT_MS = "TIMER_OUT_MS"
TIMER_ENQUEUE_MS = "TIMER_ENQUEUE_MS"
TIMER_DEQUEUE_MS = "TIMER_DEQUEUE_MS"
TIMER_ROLL_TIMES = "TIMER_ROLL_TIMES"
TIMER_DELETE_UNIQUE_KEY = "TIMER_DEL_UNIQKEY"


def timer_log_path(store_root: str) -> str:
    """``TimerMessageStore.getTimerLogPath``: ``<root>/timerlog``."""
    return os.path.join(store_root, "timerlog")


def timer_wheel_path(store_root: str) -> str:
    """``TimerMessageStore.getTimerWheelPath``: ``<root>/timerwheel``."""
    return os.path.join(store_root, "timerwheel")
