"""Message arrival (``pystore.read.arrival``): the dispatcher's hook set only while someone listens or waits, the
listeners' calls, waiting gets woken by an arrival in their topic or by shutdown, a read-only store's polling
wait, ``found_something``, and ``open_wake_file``. Through a store and across processes:
test_consumer_wake.py, test_consumer.py."""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from pystore.read.arrival import WAKE_FILE, Arrivals, found_something, open_wake_file
from pystore.status import GetMessageStatus

DEADLINE = 60.0


def _until(cond) -> None:
    end = time.monotonic() + DEADLINE
    while not cond():
        assert time.monotonic() < end, "not reached"
        time.sleep(0.001)


def listener_log():
    calls = []
    return calls, lambda *args: calls.append(args)


def test_the_hook_is_set_only_while_someone_listens():
    d = SimpleNamespace(arriving=None)
    a = Arrivals(d)
    calls, fn = listener_log()
    a.add_listener(fn)
    assert d.arriving == a.arrived
    a.remove_listener(fn)
    assert d.arriving is None
    with pytest.raises(ValueError):
        a.remove_listener(fn)
    with pytest.raises(TypeError, match="must be callable"):
        a.add_listener("not a function")


def test_a_slave_calls_no_listener_and_sets_no_hook_for_one():
    d = SimpleNamespace(arriving=None)
    a = Arrivals(d, listeners_on=False)
    calls, fn = listener_log()
    a.add_listener(fn)
    assert d.arriving is None
    a.arrived("T", 0, 0, 0, 1, b"")
    assert calls == []


def test_listeners_get_the_arrival_with_its_properties_and_one_that_fails_stops_no_other(caplog):
    d = SimpleNamespace(arriving=None)
    a = Arrivals(d)
    calls, fn = listener_log()

    def bad(*args):
        raise RuntimeError("listener bug")

    a.add_listener(bad)
    a.add_listener(fn)
    with caplog.at_level(logging.ERROR, logger="pystore.read.arrival"):
        a.arrived("T", 3, 17, 42, 1_700_000_000_000, b"TAGS\x01a\x02KEYS\x01k1 k2\x02")
    assert calls == [("T", 3, 17, 42, 1_700_000_000_000, None, {"TAGS": "a", "KEYS": "k1 k2"})]
    assert "listener bug" in caplog.text and "T/3 offset 17" in caplog.text


def _waiting(a: Arrivals, topic: str, answers: list, timeout_ms: int = 120_000):
    """A thread in ``wait_for``: its get returns the last of ``answers``; done when it is truthy."""
    out = []
    t = threading.Thread(target=lambda: out.append(a.wait_for(topic, timeout_ms, lambda: answers[-1], bool)))
    t.start()
    return t, out


def test_a_waiting_get_sets_the_hook_and_an_arrival_in_its_topic_wakes_it():
    d = SimpleNamespace(arriving=None)
    a = Arrivals(d)
    answers = [0]
    t, out = _waiting(a, "T", answers)
    _until(lambda: d.arriving is not None)
    answers.append(7)
    a.arrived("T", 1, 0, 0, 0, b"")
    t.join(DEADLINE)
    assert out == [7]
    assert d.arriving is None                              # the wait is over: unhooked


def test_an_arrival_in_another_topic_leaves_the_wait_waiting_and_wake_all_ends_it():
    d = SimpleNamespace(arriving=None)
    a = Arrivals(d)
    answers = [0]
    t, out = _waiting(a, "T", answers)
    _until(lambda: d.arriving is not None)
    answers.append(1)                                      # it would be done if it got again
    a.arrived("Other", 0, 0, 0, 0, b"")                    # no wake-up for T's waiters
    t.join(0.1)
    assert t.is_alive() and out == []
    a.wake_all()                                           # shutdown
    t.join(DEADLINE)
    assert out == [1]


def test_a_wait_whose_time_is_up_returns_the_last_answer():
    a = Arrivals(SimpleNamespace(arriving=None))
    gets = []
    assert a.wait_for("T", 0, lambda: gets.append(1) or "empty", lambda r: False) == "empty"
    assert gets == [1]


def test_a_read_only_store_without_a_wake_file_polls(tmp_path):
    a = Arrivals(None, root=str(tmp_path))
    answers = iter([0, 0, 0, 5])
    assert a.wait_for("T", 120_000, lambda: next(answers), bool) == 5
    assert not os.path.exists(tmp_path / WAKE_FILE)          # a reader creates none


def test_a_read_only_store_sleeps_on_the_wake_word_until_the_writer_notifies(tmp_path):
    writer = open_wake_file(str(tmp_path), create=True)
    a = Arrivals(None, root=str(tmp_path))
    answers = [0]
    t, out = _waiting(a, "T", answers)
    _until(lambda: writer.waiters == 1)
    answers.append(3)
    writer.notify()
    t.join(DEADLINE)
    assert out == [3]
    assert writer.waiters == 0


@pytest.mark.parametrize("status, next_begin, end, final", [
    (GetMessageStatus.FOUND, 5, 5, True),
    (GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0, 0, False),
    (GetMessageStatus.OFFSET_OVERFLOW_ONE, 5, 5, False),
    (GetMessageStatus.NO_MATCHED_MESSAGE, 5, 5, False),      # filtered up to the end: wait on
    (GetMessageStatus.NO_MATCHED_MESSAGE, 3, 5, True),       # more to filter: get again now
    (GetMessageStatus.OFFSET_TOO_SMALL, 0, 5, True),
])
def test_found_something(status, next_begin, end, final):
    assert found_something((SimpleNamespace(status=status, next_begin_offset=next_begin), end)) is final


def test_a_reader_opens_no_wake_file_that_is_not_there_and_a_writer_makes_it_whole(tmp_path):
    assert open_wake_file(str(tmp_path), create=False) is None
    assert os.listdir(tmp_path) == []
    w = open_wake_file(str(tmp_path), create=True)
    data = (tmp_path / WAKE_FILE).read_bytes()
    assert len(data) == 64 and data[:12] == b"PSWAKEUP\x01\x00\x00\x00"
    assert data[12] == int(w.light) and data[16:] == bytes(48)


def test_a_short_wake_file_means_polling(tmp_path, caplog):
    (tmp_path / WAKE_FILE).write_bytes(b"PSWAKEUP\x01\x00\x00\x00")
    assert open_wake_file(str(tmp_path), create=True) is None
    assert "12 bytes" in caplog.text


def test_open_wake_file_twice_shares_the_word(tmp_path: Path) -> None:
    a = open_wake_file(str(tmp_path), create=True)
    b = open_wake_file(str(tmp_path), create=True)
    assert a is not None and b is not None
    seen = a.register()
    assert b.waiters == 1 and b.notify() and a.seq == seen + 1 and a.waiters == 0
    assert sorted(os.listdir(tmp_path)) == [WAKE_FILE]
