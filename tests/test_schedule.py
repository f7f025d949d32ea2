"""Delay messages (docs/format.md §10, §2.2; RocketMQ ``ScheduleMessageServiceTest``): the rewrite on put, the
deliver timestamp as tags code, delivery at the due time with RocketMQ's record, ``config/delayOffset.json``
and restarts.

Time is a ``fake_clock``; ``deliver_once()`` runs every level's task now. The service thread runs too, so
assertions look at the store's state (what is in which queue), which is the same whoever delivered.
"""

from __future__ import annotations

import os
import time

import pytest
import reference_codec as ref
from conftest import BORN_BASE, BORN_HOST, make_message

from pystore import Message, MessageBatch, PutMessageStatus
from pystore.engine.schedule import ScheduleMessageService, decode_delay_offsets, encode_delay_offsets
from pystore.engine.store import MessageStore
from pystore.errors import StoreError
from pystore.tools import iter_consume_queue

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
STORE_HOST = ("127.0.0.1", 10911)
LEVEL_MS = {1: 1000, 2: 5000, 3: 10_000, 18: 7_200_000}


def cq_units(store: MessageStore, topic: str, queue_id: int) -> list[tuple[int, int, int]]:
    folder = os.path.join(store.root, "consumequeue", topic, str(queue_id))
    return list(iter_consume_queue(folder)) if os.path.isdir(folder) else []


def delivered(store: MessageStore, topic: str = "TopicTest", queue_id: int = 3) -> list:
    res = store.get_message("g", topic, queue_id, 0, 64)
    return list(res.messages) if res is not None else []


def delay_offsets_text(store: MessageStore) -> str:
    with open(os.path.join(store.root, "config", "delayOffset.json"), encoding="utf-8") as f:
        return f.read()


@pytest.fixture
def store(store_factory, fake_clock):
    return store_factory(clock=fake_clock)


# -- put side -------------------------------------------------------------------------------------


def test_delay_put_is_stored_in_schedule_queue_level_minus_one(store, store_factory, fake_clock):
    msg = make_message(0, queue_id=3, delay_time_level=3, flag=7, reconsume_times=2)
    res = store.put_message(msg)
    assert res.status is PutMessageStatus.PUT_OK
    assert res.append_message_result.logics_offset == 0
    # the caller's message is untouched and can be put again
    assert (msg.topic, msg.queue_id, msg.get_property("REAL_TOPIC")) == ("TopicTest", 3, None)

    props = {"TAGS": "TagA", "KEYS": "key0", "DELAY": "3", "REAL_TOPIC": "TopicTest", "REAL_QID": "3"}
    expected = ref.encode(SCHEDULE_TOPIC, b"Hello RocketMQ 0", ref.properties_string(props), queue_id=2,
                          flag=7, queue_offset=0, phy_offset=0, sys_flag=0, born_ts=BORN_BASE,
                          born_host=BORN_HOST, store_ts=fake_clock.now, store_host=STORE_HOST,
                          reconsume_times=2, prepared_tx_offset=0)
    assert store.look_message_by_offset(0).raw == expected
    # tagsCode of the schedule queue's unit is the deliver timestamp (docs/format.md §2.2)
    assert cq_units(store, SCHEDULE_TOPIC, 2) == [(0, len(expected), fake_clock.now + LEVEL_MS[3])]
    assert store.get_max_offset_in_queue("TopicTest", 3) == 0
    store_factory.expect_messages(1)


def test_level_above_max_is_capped(store, fake_clock):
    assert store.put_message(make_message(0, delay_time_level=99)).is_ok()
    stored = store.look_message_by_offset(0)
    assert (stored.topic, stored.queue_id) == (SCHEDULE_TOPIC, 17)
    assert stored.properties["DELAY"] == "18"
    assert cq_units(store, SCHEDULE_TOPIC, 17)[0][2] == fake_clock.now + LEVEL_MS[18]


def test_own_real_topic_property_is_replaced_in_place(store):
    msg = make_message(0, queue_id=1, delay_time_level=1, properties={"REAL_TOPIC": "Old", "a": "b"})
    assert store.put_message(msg).is_ok()
    stored = store.look_message_by_offset(0)
    assert list(stored.properties.items()) == [("TAGS", "TagA"), ("KEYS", "key0"), ("DELAY", "1"),
                                               ("REAL_TOPIC", "TopicTest"), ("a", "b"), ("REAL_QID", "1")]


def test_batch_with_delay_is_refused(store, store_factory):
    batch = MessageBatch([make_message(0), make_message(1, delay_time_level=1)])
    assert store.put_messages(batch).status is PutMessageStatus.MESSAGE_ILLEGAL
    store_factory.expect_messages(0)


def test_compute_deliver_timestamp(store):
    svc = store.schedule_message_service
    assert svc.compute_deliver_timestamp(999, 0) == 1000     # unknown level (4.8 ScheduleMessageServiceTest)
    assert svc.compute_deliver_timestamp(2, 100) == 5100
    assert svc.correct_deliver_timestamp(0, 1000, 1) == 1000
    assert svc.correct_deliver_timestamp(0, 1001, 1) == 0           # more than one level-delay ahead → now


# -- delivery ---------------------------------------------------------------------------------------


def test_delivered_at_due_time_with_rocketmq_record(store, store_factory, fake_clock):
    put_at = fake_clock.now
    first = store.put_message(make_message(0, queue_id=3, delay_time_level=3, flag=7, reconsume_times=2))
    svc = store.schedule_message_service
    svc.deliver_once()
    fake_clock.advance(LEVEL_MS[3] - 1)
    svc.deliver_once()
    assert delivered(store) == []                                   # not visible before it is due
    assert svc.offset_table == {3: 0}
    fake_clock.advance(1)
    svc.deliver_once()
    (msg,) = delivered(store)
    assert svc.offset_table == {3: 1}

    phy = first.append_message_result.wrote_offset + first.append_message_result.wrote_bytes
    # messageTimeup: the stored properties string is kept (DELAY, REAL_TOPIC, REAL_QID stay; no WAIT)
    props = {"TAGS": "TagA", "KEYS": "key0", "DELAY": "3", "REAL_TOPIC": "TopicTest", "REAL_QID": "3"}
    expected = ref.encode("TopicTest", b"Hello RocketMQ 0", ref.properties_string(props), queue_id=3, flag=7,
                          queue_offset=0, phy_offset=phy, sys_flag=0, born_ts=BORN_BASE, born_host=BORN_HOST,
                          store_ts=put_at + LEVEL_MS[3], store_host=STORE_HOST, reconsume_times=2,
                          prepared_tx_offset=0)
    assert msg.raw == expected
    assert cq_units(store, "TopicTest", 3) == [(phy, len(expected), ref.java_hash("TagA"))]
    svc.deliver_once()
    fake_clock.advance(60_000)
    svc.deliver_once()
    assert len(delivered(store)) == 1                               # never twice
    store_factory.expect_messages(2)


def test_levels_deliver_in_their_own_order(store, fake_clock):
    store.put_message(make_message(0, delay_time_level=2))          # due +5 s
    store.put_message(make_message(1, delay_time_level=1))          # due +1 s
    store.put_message(make_message(2, delay_time_level=2))          # due +5 s
    svc = store.schedule_message_service
    fake_clock.advance(1000)
    svc.deliver_once()
    assert [m.body for m in delivered(store, queue_id=0)] == [b"Hello RocketMQ 1"]
    fake_clock.advance(4000)
    svc.deliver_once()
    assert [m.body for m in delivered(store, queue_id=0)] == [b"Hello RocketMQ 1", b"Hello RocketMQ 0",
                                                              b"Hello RocketMQ 2"]
    assert svc.offset_table == {1: 1, 2: 2}


def test_deliver_time_far_ahead_is_corrected_to_now(store, fake_clock):
    store.put_message(make_message(0, delay_time_level=1))
    fake_clock.advance(-60_000)                                     # the clock went back a minute
    store.schedule_message_service.deliver_once()
    assert len(delivered(store, queue_id=0)) == 1


def test_transaction_half_real_topic_is_discarded(store, fake_clock):
    store.put_message(make_message(0, topic="RMQ_SYS_TRANS_HALF_TOPIC", delay_time_level=1))
    fake_clock.advance(1000)
    svc = store.schedule_message_service
    svc.deliver_once()
    assert delivered(store, "RMQ_SYS_TRANS_HALF_TOPIC", 0) == []
    assert svc.offset_table == {1: 1}


def test_sync_flush_store_delivers_from_reput(store_factory, fake_clock):
    store = store_factory(clock=fake_clock, flush_disk_type="SYNC_FLUSH")
    assert store.put_message(make_message(0, delay_time_level=2)).status is PutMessageStatus.PUT_OK
    store.flush()
    assert cq_units(store, SCHEDULE_TOPIC, 1)[0][2] == fake_clock.now + LEVEL_MS[2]   # tags code from reput
    fake_clock.advance(LEVEL_MS[2])
    store.schedule_message_service.deliver_once()
    store.flush()
    assert [m.body for m in delivered(store, queue_id=0)] == [b"Hello RocketMQ 0"]


def test_service_thread_delivers(store_factory, fake_clock):
    # the due time is the store's clock: the test moves it past the first run and the 1 s delay, and waits
    # only for the thread's real work (it reads the clock at least once a second)
    store = store_factory(message_delay_level="1s 2s", clock=fake_clock)
    assert store.put_message(make_message(0, delay_time_level=1)).is_ok()
    time.sleep(0.05)
    assert not delivered(store, queue_id=0)          # no time passed on the clock: not due
    fake_clock.advance(1000)
    deadline = time.monotonic() + 60
    while not delivered(store, queue_id=0) and time.monotonic() < deadline:   # a liveness bound
        time.sleep(0.05)
    assert [m.body for m in delivered(store, queue_id=0)] == [b"Hello RocketMQ 0"]


def test_read_only_store_has_no_schedule_service(store, store_factory):
    reader = store_factory(read_only=True)
    assert reader.schedule_message_service is None
    assert isinstance(store.schedule_message_service, ScheduleMessageService)


# -- delayOffset.json and restarts -------------------------------------------------------------------


def test_delay_offset_json_is_fastjson_pretty_format(store, fake_clock):
    svc = store.schedule_message_service
    # The service thread persists on its own once the clock passes start + 10 s, which the advance below
    # does (level 3 is due then too): at its next wake-up, up to a second later, maybe between this test's
    # deliver_once() and persist(), and the .bak would then hold its write, not the empty table. This test
    # drives persist() itself: the thread's periodic persist is pushed out of its way.
    svc._next_persist = 2**62
    svc.persist()
    assert delay_offsets_text(store) == '{\n\t"offsetTable":{}\n}'
    for i, level in enumerate((3, 1, 3)):
        store.put_message(make_message(i, delay_time_level=level))
    fake_clock.advance(LEVEL_MS[3])
    svc.deliver_once()
    svc.persist()
    assert delay_offsets_text(store) == '{\n\t"offsetTable":{"1":1,"3":2\n\t}\n}'
    with open(os.path.join(store.root, "config", "delayOffset.json.bak"), encoding="utf-8") as f:
        assert f.read() == '{\n\t"offsetTable":{}\n}'


def test_delay_offset_codec():
    assert encode_delay_offsets({}) == '{\n\t"offsetTable":{}\n}'
    assert encode_delay_offsets({10: 5, 2: 0}) == '{\n\t"offsetTable":{"2":0,"10":5\n\t}\n}'
    assert decode_delay_offsets('{\n\t"offsetTable":{2:0,10:5\n\t}\n}') == {2: 0, 10: 5}
    assert decode_delay_offsets('{"offsetTable":{"2":0,"10":5}}') == {2: 0, 10: 5}
    five = ('{\n\t"dataVersion":{\n\t\t"counter":3,\n\t\t"timestamp":1700000000000\n\t},'
            '\n\t"offsetTable":{1:4\n\t}\n}')
    assert decode_delay_offsets(five) == {1: 4}
    with pytest.raises(ValueError):
        decode_delay_offsets('{"offsetTable":{1:"x"}}')


def test_restart_resumes_from_saved_offsets(store_factory, fake_clock):
    store = store_factory(clock=fake_clock)
    for i in range(3):
        store.put_message(make_message(i, delay_time_level=1))
    fake_clock.advance(1000)
    store.schedule_message_service.deliver_once()
    assert len(delivered(store, queue_id=0)) == 3
    store.shutdown()                                               # persists (5.x)
    assert delay_offsets_text(store) == '{\n\t"offsetTable":{"1":3\n\t}\n}'

    again = store_factory(clock=fake_clock)
    svc = again.schedule_message_service
    assert svc.offset_table == {1: 3}
    again.put_message(make_message(3, delay_time_level=1))
    fake_clock.advance(1000)
    svc.deliver_once()
    assert [m.body for m in delivered(again, queue_id=0)] == [b"Hello RocketMQ %d" % i for i in range(4)]
    store_factory.expect_messages(8)


def test_saved_offset_outside_the_queue_is_corrected_at_load(store_factory, fake_clock):
    store = store_factory(clock=fake_clock)
    store.put_message(make_message(0, delay_time_level=1))
    store.shutdown()
    path = os.path.join(store.root, "config", "delayOffset.json")
    with open(path, "w") as f:
        f.write('{\n\t"offsetTable":{1:50,2:7\n\t}\n}')
    again = store_factory(clock=fake_clock)
    assert again.schedule_message_service.offset_table == {1: 1, 2: 0}   # 5.x correctDelayOffset


DEEP_LIST = "[" * 100_000 + "]" * 100_000
DEEP_OBJECT = '{"offsetTable":' * 100_000 + "{}" + "}" * 100_000


@pytest.mark.parametrize("text", [DEEP_LIST, DEEP_OBJECT])
def test_deeply_nested_offsets_text_is_a_value_error(text):
    with pytest.raises(ValueError, match="nested too deeply"):
        decode_delay_offsets(text)


@pytest.mark.parametrize("primary", ["", "{not json", '{"offsetTable":{1:"x"}}', DEEP_LIST, DEEP_OBJECT])
def test_unusable_offsets_file_falls_back_to_bak(store_factory, fake_clock, primary):
    store = store_factory(clock=fake_clock)
    store.shutdown()
    config = os.path.join(store.root, "config")
    with open(os.path.join(config, "delayOffset.json.bak"), "w") as f:
        f.write('{"offsetTable":{1:0}}')
    with open(os.path.join(config, "delayOffset.json"), "w") as f:
        f.write(primary)
    again = store_factory(clock=fake_clock)
    assert again.schedule_message_service.offset_table == {1: 0}


def test_unusable_offsets_file_and_bak_fail_start(store_factory, fake_clock):
    store = store_factory(clock=fake_clock)
    store.shutdown()
    config = os.path.join(store.root, "config")
    for name in ("delayOffset.json", "delayOffset.json.bak"):
        with open(os.path.join(config, name), "w") as f:
            f.write("{not json")
    with pytest.raises(StoreError, match="delayOffset.json"):
        MessageStore.open(store.root, clock=fake_clock, mapped_file_size_commit_log=64 * 1024)
    for name in ("delayOffset.json", "delayOffset.json.bak"):
        with open(os.path.join(config, name), "w") as f:
            f.write(DEEP_LIST)
    with pytest.raises(StoreError, match="delayOffset.json"):
        MessageStore.open(store.root, clock=fake_clock, mapped_file_size_commit_log=64 * 1024)
    os.unlink(os.path.join(config, "delayOffset.json.bak"))       # no .bak: an empty table, as RocketMQ
    again = store_factory(clock=fake_clock)
    assert again.schedule_message_service.offset_table == {}


def test_delayed_message_can_be_put_twice(store, fake_clock):
    msg = Message("TopicTest", b"x", delay_time_level=1)
    assert store.put_message(msg).is_ok() and store.put_message(msg).is_ok()
    fake_clock.advance(1000)
    store.schedule_message_service.deliver_once()
    assert [m.topic for m in delivered(store, queue_id=0)] == ["TopicTest", "TopicTest"]


def test_delayed_message_of_an_ipv6_store_and_born_host_is_delivered(store_factory, fake_clock):
    # the record's sys flag has both host bits; the message put again takes its own from its hosts (a Message
    # refuses the store host's bit, so handing the record's flag over unchanged made every delivery fail)
    store = store_factory(clock=fake_clock, store_host=("::1", 10911))
    msg = Message("TopicTest", b"v6", queue_id=3, delay_time_level=1, born_host=("::2", 5), sys_flag=0x1)
    assert store.put_message(msg).is_ok()
    fake_clock.advance(1000)
    assert store.schedule_message_service.deliver_once() == 1
    [m] = delivered(store, queue_id=3)
    assert (m.body, m.born_host, m.sys_flag) == (b"v6", ("::2", 5), 0x31)


def test_a_damaged_delayed_record_is_skipped_with_an_error_and_the_rest_delivered(store, store_factory, fake_clock,
                                                                                 caplog):
    """A delayed record that no longer reads as one (its magic code overwritten): RocketMQ's task skips it and
    goes on; pystore says so in the log, naming the level, queue offset and commit-log offset."""
    results = [store.put_message(make_message(i, delay_time_level=1)).append_message_result for i in range(3)]
    store.flush()
    store_factory.skip_check()
    bad = results[1].wrote_offset
    path = os.path.join(store.root, "commitlog", "%020d" % 0)
    with open(path, "r+b") as f:
        f.seek(bad + 4)
        f.write(bytes(4))
    fake_clock.advance(1000)
    with caplog.at_level("ERROR", logger="pystore.engine.schedule"):
        store.schedule_message_service.deliver_once()
    assert [m.body for m in delivered(store, queue_id=0)] == [b"Hello RocketMQ 0", b"Hello RocketMQ 2"]
    assert "queue offset 1: no readable record at commit-log offset %d" % bad in caplog.text
    assert store.schedule_message_service.offset_table == {1: 3}


def test_levels_due_within_a_few_ms_run_in_one_pass(store, fake_clock):
    """Idle levels rescheduled a few ms apart share one pass (``RUN_TOGETHER_MS``): one wake-up of the thread
    (and one take of the GIL) for all, not one each. Early is harmless: nothing is delivered before its time."""
    from pystore.engine.schedule import RUN_TOGETHER_MS

    svc = store.schedule_message_service
    svc.shutdown()                                  # only this test runs passes
    svc._stopped = False                            # (a pass of a stopped service runs nothing)
    now = fake_clock.now
    with svc._run_lock:
        svc._tasks = {level: (now + 1 + i * (RUN_TOGETHER_MS // 4), 0) for i, level in enumerate(sorted(svc._tasks))
                      if i < 4}
    ran = []
    run_level = svc._run_level
    svc._run_level = lambda level: ran.append(level) or run_level(level)
    fake_clock.advance(1)
    svc.run_due()
    assert sorted(ran) == sorted(svc._tasks)        # all four in the first pass
    assert all(due >= fake_clock.now + 100 for due, _ in svc._tasks.values())    # each polls again later


# -- idle levels ----------------------------------------------------------------------------------

def test_a_level_with_nothing_to_deliver_looks_again_after_a_second(store):
    """RocketMQ looks at every level every 100 ms; pystore's idle levels look once a second (each look wakes
    the thread and takes the GIL from a busy put thread), and dispatch wakes them when a delayed message comes."""
    from pystore.engine import schedule
    svc = store.schedule_message_service
    svc.deliver_once()
    assert svc.run_due() == schedule.IDLE_LEVEL_MS


@pytest.mark.parametrize("flush_disk_type", ["ASYNC_FLUSH", "SYNC_FLUSH"])
def test_a_delayed_put_wakes_its_idle_level(store_factory, fake_clock, monkeypatch, flush_disk_type):
    # idle levels would next look in an hour: only dispatch's wake-up (inline, or reput after a sync flush)
    # gets the message delivered at its due time
    from pystore.engine import schedule
    monkeypatch.setattr(schedule, "IDLE_LEVEL_MS", 3_600_000)
    store = store_factory(message_delay_level="1s 2s", clock=fake_clock, flush_disk_type=flush_disk_type)
    store.schedule_message_service.deliver_once()
    assert store.put_message(make_message(0, delay_time_level=1)).is_ok()
    store.flush()
    fake_clock.advance(1000)
    deadline = time.monotonic() + 30
    while not delivered(store, queue_id=0) and time.monotonic() < deadline:   # a liveness bound
        time.sleep(0.05)
    assert [m.body for m in delivered(store, queue_id=0)] == [b"Hello RocketMQ 0"]
