"""The put side of RocketMQ 5's timer messages: a message with ``TIMER_DELIVER_MS``, ``TIMER_DELAY_SEC`` or
``TIMER_DELAY_MS`` is stored in ``rmq_sys_wheel_timer`` queue 0 until it is due (RocketMQ ``HookUtils``:
``handleScheduleMessage``, ``checkIfTimerMessage``, ``transformTimerMessage``; the status names of
``PutMessageStatus``).

The store's commit log runs these rules compiled (:mod:`pystore.timer._timer_put`, ``TimerPut``: its
``timer_rewrite`` hook, called in C without Python); :class:`TimerPutHook` here is their pure-Python reference, which
``tests/test_timer_put.py`` compares the compiled hook with (same status, reason and record bytes), and still a
valid ``timer_rewrite`` (any callable is called as Python). Either is called only for a message whose properties hold
one of the three (``Message._timer``, worked out when the message is built), of transaction type NOT or COMMIT,
before the delay-level rewrite, as RocketMQ's hook orders them::

    DELAY level > 0                    the timer properties are dropped, the delay level applies (RocketMQ)
    topic rmq_sys_wheel_timer, or TIMER_OUT_MS set
                                       stored as it is (a rolled timer, or a timer being delivered)
    timer_wheel_enable off             WHEEL_TIMER_NOT_ENABLE
    deliver := TIMER_DELIVER_MS, or now + TIMER_DELAY_SEC * 1000, or now + TIMER_DELAY_MS
      deliver > now:  deliver - now > timer_max_delay_sec * 1000          WHEEL_TIMER_MSG_ILLEGAL
                      deliver := deliver - precision if deliver % precision == 0
                                 else deliver rounded down to the precision      (RocketMQ's rounding)
                      the slot of deliver holds more than timer_congest_num_each_slot units
                                                                          WHEEL_TIMER_FLOW_CONTROL
                      + TIMER_OUT_MS = deliver, REAL_TOPIC = topic, REAL_QID = queue id
                      topic := rmq_sys_wheel_timer, queue id := 0
      deliver <= now: with TIMER_DEL_UNIQKEY                              WHEEL_TIMER_MSG_ILLEGAL
                      else stored in its own topic at once (RocketMQ: a due timer is an ordinary message)

Where pystore is stricter than RocketMQ (each a refusal with ``WHEEL_TIMER_MSG_ILLEGAL`` and a reason in words,
``PutMessageResult.reason``):

* a value that is not a decimal integer fitting a Java long (RocketMQ too: ``Long.parseLong`` fails);
* a negative value: RocketMQ delivers it at once, which hides a sender's bug;
* two of the three properties on one message: RocketMQ silently takes ``TIMER_DELAY_SEC``, then
  ``TIMER_DELAY_MS``, then ``TIMER_DELIVER_MS``;
* a delay whose milliseconds overflow a Java long (``TIMER_DELAY_SEC`` of 2**62): RocketMQ's
  ``parseLong(...) * 1000`` wraps around, and the wrapped time may be negative, in the past, and delivered at
  once (apache/rocketmq #5376, #10872). pystore computes in Python integers and compares the delay with
  ``timer_max_delay_sec`` before anything else, so such a delay is always refused, never delivered early (the
  compiled hook compares the seconds before it multiplies them, and computes times in 128-bit integers).

Batches: RocketMQ's hook only looks at a ``MessageExtBrokerInner``, never at a ``MessageExtBatch``, so the timer
properties of a batch's messages are stored as ordinary properties and the messages delivered at once; pystore's
batch put does the same (it never calls this hook).

Several writer processes: every writer's commit log has the hook (it reads the clock and the configuration only);
the flow-control check needs the wheel, which only the leader process has, so other writers skip it (the compiled
hook without the timer store's ``TimerPutLink``; with it, the slot's count is read from the wheel's in-memory slots
and a rewrite wakes the enqueue through the link's wake word, where this hook calls ``slot_num`` and ``on_timer``).

Thread-safety: a hook may be called from any put thread at once; it changes nothing of its own.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from pystore.message._message import Message
from pystore.message.constants import MessageConst
from pystore.status import PutMessageStatus

if TYPE_CHECKING:
    from pystore.config import StoreConfig

__all__ = [
    "TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS", "TIMER_DELAY_KINDS", "TimerPutHook",
    "round_deliver_ms",
]

log = logging.getLogger(__name__)

#: ``MessageConst.PROPERTY_TIMER_DELIVER_MS`` (epoch ms), ``PROPERTY_TIMER_DELAY_SEC``, ``PROPERTY_TIMER_DELAY_MS``
TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
TIMER_DELAY_MS = "TIMER_DELAY_MS"
#: in RocketMQ's order of precedence (``transformTimerMessage`` reads them in this order)
TIMER_DELAY_KINDS = (TIMER_DELAY_SEC, TIMER_DELAY_MS, TIMER_DELIVER_MS)

_TIMER_TOPIC = "rmq_sys_wheel_timer"
_TIMER_OUT_MS = "TIMER_OUT_MS"
_TIMER_DEL_UNIQKEY = "TIMER_DEL_UNIQKEY"
# Long.parseLong: an optional sign and decimal digits, within a Java long
_JAVA_LONG = re.compile(r"[+-]?[0-9]+")
_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1

Refusal = tuple[PutMessageStatus, str]


def round_deliver_ms(deliver_ms: int, precision_ms: int) -> int:
    """``transformTimerMessage``'s rounding of a future deliver time: one tick earlier when it is on a tick, else
    down to the tick (the dequeue delivers a slot once its time is past, so a message is never late by a tick)."""
    if deliver_ms % precision_ms == 0:
        return deliver_ms - precision_ms
    return deliver_ms // precision_ms * precision_ms


class TimerPutHook:
    """The commit log's ``timer_rewrite`` hook: ``hook(msg)`` returns the message to store (``msg`` itself, or a
    copy bound for the timer topic, or a copy without its timer properties when a delay level wins), or
    ``(status, reason)`` to refuse the put.

    ``clock`` is the store's (epoch ms); ``slot_num(deliver_ms)`` the unit count of the wheel slot (None: no
    flow control, as in a writer process without the timer store); ``on_timer()`` is called for each message
    rewritten for the timer topic (the timer store's enqueue looks sooner)."""

    def __init__(self, config: StoreConfig, clock: Callable[[], int],
                 slot_num: Callable[[int], int] | None = None, on_timer: Callable[[], None] | None = None) -> None:
        self.enabled = bool(config.timer_wheel_enable)
        self.precision_ms = int(config.timer_precision_ms)
        self.max_delay_ms = int(config.timer_max_delay_sec) * 1000
        self.congest_num = int(config.timer_congest_num_each_slot)
        self.clock = clock
        self.slot_num = slot_num
        self.on_timer = on_timer

    def __call__(self, msg: Message) -> Message | Refusal:
        props = msg.properties
        if msg.delay_time_level > 0:
            # checkIfTimerMessage: a delay level wins, the timer properties are cleared
            for name in TIMER_DELAY_KINDS:
                props.pop(name, None)
            return _copy(msg, props, msg.topic, msg.queue_id)
        if msg.topic == _TIMER_TOPIC or _TIMER_OUT_MS in props:
            return msg                  # a rolled timer, or a due one on its way to its topic
        if not self.enabled:
            return (PutMessageStatus.WHEEL_TIMER_NOT_ENABLE,
                    "the message has a timer property (%s) but timer_wheel_enable is off"
                    % ", ".join(k for k in TIMER_DELAY_KINDS if k in props))
        kinds = [k for k in TIMER_DELAY_KINDS if k in props]
        if len(kinds) != 1:
            return (PutMessageStatus.WHEEL_TIMER_MSG_ILLEGAL,
                    "the message has %s: one timer delay per message" % " and ".join(kinds))
        kind = kinds[0]
        raw = props[kind]
        if not _JAVA_LONG.fullmatch(raw) or not _LONG_MIN <= int(raw) <= _LONG_MAX:
            return (PutMessageStatus.WHEEL_TIMER_MSG_ILLEGAL,
                    "%s=%r is not a decimal integer that fits 64 bits" % (kind, raw[:40]))
        value = int(raw)
        if value < 0:
            return (PutMessageStatus.WHEEL_TIMER_MSG_ILLEGAL, "%s=%d is negative" % (kind, value))
        now = self.clock()
        # Python integers: a delay in seconds that overflows milliseconds is just large (RocketMQ #5376, #10872)
        if kind == TIMER_DELAY_SEC:
            delay = value * 1000
        elif kind == TIMER_DELAY_MS:
            delay = value
        else:
            delay = value - now
        if delay > self.max_delay_ms:
            return (PutMessageStatus.WHEEL_TIMER_MSG_ILLEGAL,
                    "%s=%d is a delay of %d ms, more than timer_max_delay_sec (%d s)"
                    % (kind, value, delay, self.max_delay_ms // 1000))
        deliver = now + delay
        if deliver <= now:
            if _TIMER_DEL_UNIQKEY in props:
                return (PutMessageStatus.WHEEL_TIMER_MSG_ILLEGAL,
                        "a timer delete marker (%s) whose time is not in the future" % _TIMER_DEL_UNIQKEY)
            return msg                  # already due: an ordinary message of its own topic
        deliver = round_deliver_ms(deliver, self.precision_ms)
        if self.slot_num is not None and self._reject(deliver):
            return (PutMessageStatus.WHEEL_TIMER_FLOW_CONTROL,
                    "the timer slot of %d holds more than timer_congest_num_each_slot (%d) messages"
                    % (deliver, self.congest_num))
        props[_TIMER_OUT_MS] = str(deliver)
        props[MessageConst.REAL_TOPIC] = msg.topic
        props[MessageConst.REAL_QID] = str(msg.queue_id)
        if self.on_timer is not None:
            self.on_timer()
        return _copy(msg, props, _TIMER_TOPIC, 0)

    def _reject(self, deliver_ms: int) -> bool:
        """``TimerMessageStore.isReject``: over the slot limit, refused from twice the limit on, and in between
        refused in proportion (RocketMQ draws a random number; pystore refuses above 1.5 times the limit, so that
        the same state gives the same answer)."""
        assert self.slot_num is not None
        num = self.slot_num(deliver_ms)
        limit = self.congest_num
        if num <= limit:
            return False
        return num >= limit * 2 or (num - limit) * 2 > limit


def _copy(msg: Message, props: dict[str, str], topic: str, queue_id: int) -> Message:
    """``msg`` with other properties, topic and queue (the caller's message is left as it was, so it can be put
    again)."""
    return Message(topic, msg.body, flag=msg.flag, properties=props, queue_id=queue_id,
                   born_timestamp=msg.born_timestamp, born_host=msg.born_host, sys_flag=msg.sys_flag,
                   reconsume_times=msg.reconsume_times, prepared_transaction_offset=msg.prepared_transaction_offset)
