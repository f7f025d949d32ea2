"""The compiled timer put hook (``pystore.timer._timer_put.TimerPut``) against its pure-Python reference
(``pystore.timer.timer_put.TimerPutHook``, the model): random timer properties (huge, signed, not digits, two kinds,
delay levels, past times, delete markers, full slots) must give the same status, the same reason and the same
stored record bytes; and a timer put through a store calls no Python."""

from __future__ import annotations

import struct
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pystore import Message, PutMessageStatus
from pystore.config import StoreConfig
from pystore.format._codec import encode_record
from pystore.timer._timer_put import TimerPut, TimerPutLink, java_long
from pystore.timer.timer_put import TIMER_DELAY_KINDS, TimerPutHook

NOW = 1_700_000_000_123
SLOTS_TOTAL = 64            # a small wheel: slots of the same index over several turns are met
PRECISION = 1000
CONGEST = 4

_SLOT = struct.Struct(">qqqii")


class Clock:
    def __init__(self, now: int = NOW) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def _wheel(counts: dict[int, tuple[int, int]]) -> bytearray:
    """Slots ``index -> (tick, num)`` of a wheel of ``2 * SLOTS_TOTAL`` slots."""
    buf = bytearray(2 * SLOTS_TOTAL * 32)
    for index, (tick, num) in counts.items():
        _SLOT.pack_into(buf, index * 32, tick, 0, 0, num, 0)
    return buf


def _slot_num(buf: bytearray):
    """The model's ``slot_num``: ``TimerWheel.get_num`` over ``buf``."""
    def num(deliver_ms: int) -> int:
        if deliver_ms < 0:
            raise ValueError("a timer slot time cannot be negative: %d" % deliver_ms)
        tick = deliver_ms // PRECISION
        t, _, _, n, _ = _SLOT.unpack_from(buf, tick % (2 * SLOTS_TOTAL) * 32)
        return n if t == tick else 0
    return num


def _pair(enabled: bool = True, max_delay_sec: int = 3600 * 24 * 3, wheel: bytearray | None = None,
          now: int = NOW):
    cfg = StoreConfig(timer_wheel_enable=enabled, timer_precision_ms=PRECISION, timer_max_delay_sec=max_delay_sec,
                      timer_congest_num_each_slot=CONGEST)
    clock = Clock(now)
    notes: list[int] = []
    if wheel is None:
        return TimerPut(cfg, clock), TimerPutHook(cfg, clock), None, notes
    link = TimerPutLink()
    link.set_wheel(wheel, SLOTS_TOTAL, PRECISION)
    model = TimerPutHook(cfg, clock, slot_num=_slot_num(wheel), on_timer=lambda: notes.append(1))
    return TimerPut(cfg, clock, link), model, link, notes


def _answer(hook, msg: Message):
    """(status or None, reason or None, record bytes or None, whether the message itself came back)."""
    try:
        out = hook(msg)
    except ValueError as e:
        return ("raised", str(e), None, False)
    if isinstance(out, tuple):
        status, reason = out
        return (status, reason, None, False)
    assert isinstance(out, Message)
    return (None, None, encode_record(out, 7, 4096, NOW), out is msg)


def _same(compiled, model, msg: Message) -> None:
    before = encode_record(msg)
    a = _answer(compiled, msg)
    b = _answer(model, msg)
    assert a == b, (msg.properties, a, b)
    assert encode_record(msg) == before          # the caller's message is left as it was


_digits = st.integers(min_value=-(1 << 70), max_value=1 << 70).map(str)
_values = st.one_of(
    _digits,
    st.integers(min_value=0, max_value=10 ** 7).map(str),                           # within the max delay
    st.integers(min_value=NOW - 10 ** 6, max_value=NOW + 10 ** 9).map(str),         # deliver times about now
    st.sampled_from(["0", "-0", "+0", "+12", "0000000000000000000000000000012", "9223372036854775807",
                     "9223372036854775808", "-9223372036854775808", "-9223372036854775809", "+", "-", "1_000",
                     " 12", "12 ", "1e3", "12.0", "٣", "0x10", "18446744073709551616000", str(1 << 62),
                     str((1 << 63) // 1000), str((1 << 63) // 1000 + 1), str(NOW), str(NOW + 1), str(NOW - 1)]),
    st.text(alphabet=st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
            min_size=1, max_size=50),
)


@st.composite
def _timer_messages(draw):
    props: dict[str, str] = {}
    kinds = draw(st.lists(st.sampled_from(TIMER_DELAY_KINDS), min_size=1, max_size=3, unique=True))
    for k in kinds:
        props[k] = draw(_values)
    extra = draw(st.sampled_from([None, "TIMER_DEL_UNIQKEY", "TIMER_OUT_MS", "REAL_TOPIC", "REAL_QID", "DELAY"]))
    if extra == "DELAY":
        props["DELAY"] = draw(st.sampled_from(["1", "3", "0", "-1", "x"]))
    elif extra is not None:
        props[extra] = draw(st.sampled_from(["Other+k1", "123", "7"]))
    if draw(st.booleans()):
        props = dict(reversed(list(props.items())))
    topic = draw(st.sampled_from(["TopicTest", "t", "rmq_sys_wheel_timer", "A" * 200]))
    return Message(topic, draw(st.binary(max_size=20)), tags=draw(st.sampled_from([None, "TagA"])),
                   keys=draw(st.sampled_from([None, "k1 k2"])), properties=props,
                   queue_id=draw(st.integers(0, 9)), born_timestamp=NOW - 5, flag=draw(st.integers(-3, 3)),
                   born_host=draw(st.sampled_from([("10.0.0.1", 9), ("::1", 10)])))


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(msg=_timer_messages(), enabled=st.booleans(), max_delay_sec=st.sampled_from([1, 3600, 3600 * 24 * 3,
                                                                                  2**31 - 1]),
       now=st.sampled_from([NOW, 0, 999, 1000, 1001, NOW - NOW % 1000]))
def test_compiled_hook_answers_as_the_model(msg, enabled, max_delay_sec, now):
    compiled, model, _, _ = _pair(enabled, max_delay_sec, now=now)
    _same(compiled, model, msg)


@settings(max_examples=600, deadline=None)
@given(delay_ms=st.integers(min_value=-2000, max_value=SLOTS_TOTAL * 4 * PRECISION),
       kind=st.sampled_from(TIMER_DELAY_KINDS),
       slots=st.dictionaries(st.integers(0, 2 * SLOTS_TOTAL - 1),
                             st.tuples(st.integers(-1, 4), st.integers(-3, 3 * CONGEST)), max_size=40))
def test_compiled_flow_control_answers_as_the_model(delay_ms, kind, slots):
    # the slot's stored tick is the current turn's or another's: only the current one counts
    base = NOW // PRECISION
    counts = {i: (base + ((i - base) % (2 * SLOTS_TOTAL)) + turn * 2 * SLOTS_TOTAL, num)
              for i, (turn, num) in slots.items()}
    wheel = _wheel(counts)
    compiled, model, _, notes = _pair(wheel=wheel)
    if kind == "TIMER_DELAY_SEC":
        value = str(delay_ms // 1000)
    elif kind == "TIMER_DELAY_MS":
        value = str(delay_ms)
    else:
        value = str(NOW + delay_ms)
    msg = Message("TopicTest", b"body", properties={kind: value}, queue_id=3, born_timestamp=NOW)
    a = _answer(compiled, msg)
    b = _answer(model, msg)
    assert a == b


def test_flow_control_refuses_a_full_slot_and_wakes_on_a_rewrite():
    deliver = NOW + 10_000
    rounded = deliver // PRECISION * PRECISION
    tick = rounded // PRECISION
    wheel = _wheel({tick % (2 * SLOTS_TOTAL): (tick, 2 * CONGEST)})
    compiled, model, link, notes = _pair(wheel=wheel)
    assert link is not None and link.slot_num(rounded) == 2 * CONGEST
    msg = Message("TopicTest", b"x", deliver_at_ms=deliver)
    out = compiled(msg)
    assert out == model(msg)
    assert out[0] == PutMessageStatus.WHEEL_TIMER_FLOW_CONTROL
    assert not link.expecting and notes == []
    ok = Message("TopicTest", b"x", deliver_at_ms=deliver + 5 * PRECISION)
    assert isinstance(compiled(ok), Message)
    assert link.expecting and link.wait(0)          # the rewrite noted the put on the wake word
    assert not link.wait(0)
    link.set_wheel(None, 0, 0)
    assert link.slot_num(rounded) == 0


def test_java_long_is_long_parse_long():
    assert java_long("+0009") == 9
    assert java_long("-9223372036854775808") == -(1 << 63)
    assert java_long("9223372036854775807") == (1 << 63) - 1
    for bad in ("9223372036854775808", "-9223372036854775809", "", "+", "-", "1_0", " 1", "1 ", "٣", "1.0"):
        assert java_long(bad) is None, bad


def test_a_timer_put_calls_no_python(store_factory):
    # no injected clock: the C clock is read, and nothing in Python runs between put_message's entry and return
    store = store_factory()
    assert type(store._parts.commitlog.timer_rewrite) is TimerPut
    msgs = [Message("TopicTest", b"x", delay_ms=60_000 + i) for i in range(50)]
    msgs.append(Message("TopicTest", b"x", properties={"TIMER_DELAY_SEC": "-1"}))       # a refusal too
    calls: list[str] = []

    def profile(frame, event, arg):
        if event == "call":
            calls.append("%s:%s" % (frame.f_code.co_filename, frame.f_code.co_name))

    core = store._parts.commitlog.core
    put = core.put_message                          # the compiled put (the facade's put_message is Python)
    assert put(Message("TopicTest", b"warm", delay_ms=1000)).is_ok()     # the first file made, the queue's too
    results = []
    sys.setprofile(profile)
    try:
        for m in msgs:
            results.append(put(m))
    finally:
        sys.setprofile(None)
    assert calls == [], sorted(set(calls))
    assert all(r.is_ok() for r in results[:-1])
    assert results[-1].status == PutMessageStatus.WHEEL_TIMER_MSG_ILLEGAL
    assert "is negative" in results[-1].reason
    stored = store.get_message("g", "rmq_sys_wheel_timer", 0, 1, 64).messages
    assert stored and stored[0].properties["REAL_TOPIC"] == "TopicTest"
    assert store.get_max_offset_in_queue("rmq_sys_wheel_timer", 0) == 51


def test_a_bad_clock_is_an_error_not_a_crash():
    cfg = StoreConfig(timer_precision_ms=PRECISION)
    link = TimerPutLink()
    link.set_wheel(bytearray(2 * SLOTS_TOTAL * 32), SLOTS_TOTAL, PRECISION)
    hook = TimerPut(cfg, Clock(-(1 << 62)), link)
    with pytest.raises(ValueError, match="cannot be negative"):
        hook(Message("TopicTest", b"x", delay_ms=5000))
    with pytest.raises(TypeError):
        link.set_wheel(b"\0" * 64, 1, PRECISION)
    short = TimerPutLink()
    short.set_wheel(bytearray(40), SLOTS_TOTAL, PRECISION)      # shorter than its slots: nothing read past it
    assert short.slot_num(NOW + 500_000) == 0
