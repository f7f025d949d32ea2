"""Committed consumer offsets (docs/api.md "Consumers": ``commit_offset``, ``fetch_offset``,
``config/consumerOffset.json``): the file's bytes, a broker's fastjson file read back, restarts, the
``.bak`` fallback, read-only stores, bad input, and a writer killed at a random moment while consuming."""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path

import pytest
from conftest import FakeClock
from writer_procs import kill, read_line

from pystore import Message, MessageStore, StoreConfig, StoreError
from pystore.consumer.offsets import ConsumerOffsets, decode_consumer_offsets, encode_consumer_offsets

# what a RocketMQ broker writes (fastjson, pretty, integer keys bare), with 5.x's dataVersion
BROKER_FILE = ('{\n\t"dataVersion":{\n\t\t"counter":3,\n\t\t"stateVersion":0,\n\t\t"timestamp":1700000000000\n\t},'
               '\n\t"offsetTable":{\n\t\t"%RETRY%g1@g1":{0:0\n\t\t},\n\t\t"TopicTest@g1":{0:250,1:249,3:7\n\t\t}'
               '\n\t}\n}')


def offsets_file(store: MessageStore) -> Path:
    return Path(store.root) / "config" / "consumerOffset.json"


def test_file_bytes_after_shutdown(store_factory) -> None:
    store = store_factory()
    store.put_message(Message("T", b"a"))
    assert store.fetch_offset("g", "T", 0) == -1
    store.commit_offset("g", "T", 0, 1)
    store.commit_offset("g", "T", 2, 0)
    store.commit_offset("b", "T", 0, 12)
    store.commit_offset("g", "T", 0, 1)
    store.shutdown()
    assert offsets_file(store).read_bytes() == (
        b'{\n\t"offsetTable":{\n\t\t"T@b":{"0":12\n\t\t},\n\t\t"T@g":{"0":1,"2":0\n\t\t}\n\t}\n}')
    assert json.loads(offsets_file(store).read_text()) == {"offsetTable": {"T@b": {"0": 12},
                                                                           "T@g": {"0": 1, "2": 0}}}


def test_empty_table_text() -> None:
    assert encode_consumer_offsets({}) == '{\n\t"offsetTable":{}\n}'
    assert decode_consumer_offsets('{\n\t"offsetTable":{}\n}') == {}


def test_broker_file_read_then_rewritten_with_bak(store_factory) -> None:
    cfg = store_factory.path() / "config"
    cfg.mkdir(parents=True)
    (cfg / "consumerOffset.json").write_text(BROKER_FILE)
    store = store_factory()
    # the queues do not exist in this store: their min offset is 0, so the committed values read as they are
    assert store.fetch_offset("g1", "TopicTest", 0) == 250
    assert store.fetch_offset("g1", "TopicTest", 1) == 249
    assert store.fetch_offset("g1", "TopicTest", 2) == -1
    assert store.fetch_offset("g1", "%RETRY%g1", 0) == 0
    store.commit_offset("g1", "TopicTest", 2, 5)
    store.shutdown()
    assert (cfg / "consumerOffset.json.bak").read_text() == BROKER_FILE
    assert decode_consumer_offsets((cfg / "consumerOffset.json").read_text()) == {
        "%RETRY%g1@g1": {0: 0}, "TopicTest@g1": {0: 250, 1: 249, 2: 5, 3: 7}}
    assert not (cfg / "consumerOffset.json.tmp").exists()


def test_restart_resumes(store_factory) -> None:
    store = store_factory()
    for i in range(5):
        store.put_message(Message("T", b"%d" % i))
    store.commit_offset("g", "T", 0, 3)
    store.shutdown()
    store = store_factory()
    assert store.fetch_offset("g", "T", 0) == 3
    r = store.get_message("g", "T", 0, store.fetch_offset("g", "T", 0))
    assert [m.body for m in r.messages] == [b"3", b"4"]


def test_damaged_file_falls_back_to_bak(store_factory) -> None:
    store = store_factory()
    store.commit_offset("g", "T", 0, 4)
    store.shutdown()
    store = store_factory()
    store.commit_offset("g", "T", 0, 9)
    store.shutdown()                                          # .bak holds 4, the file 9
    offsets_file(store).write_text('{"offsetTable":{"T@g":{0:')
    store = store_factory()
    assert store.fetch_offset("g", "T", 0) == 4


def test_damaged_file_and_bak_fail_start(store_factory) -> None:
    store = store_factory()
    store.commit_offset("g", "T", 0, 4)
    store.shutdown()
    offsets_file(store).write_text("{")
    Path(str(offsets_file(store)) + ".bak").write_text("[")
    with pytest.raises(StoreError, match="consumerOffset.json"):
        MessageStore.open(store.root, mapped_file_size_commit_log=64 * 1024)


def test_below_min_offset_reads_as_min(tmp_path: Path) -> None:
    offsets = ConsumerOffsets(str(tmp_path), 5000, lambda topic, qid: 10 if qid == 0 else 0, read_only=False)
    offsets.commit("g", "T", 0, 5)
    offsets.commit("g", "T", 1, 5)
    assert offsets.fetch("g", "T", 0) == 10
    assert offsets.fetch("g", "T", 1) == 5
    assert offsets.fetch("h", "T", 0) == -1


@pytest.mark.parametrize("args, error", [
    ((b"g", "T", 0, 1), TypeError), (("g", 1, 0, 1), TypeError), (("g", "T", "0", 1), TypeError),
    (("g", "T", True, 1), TypeError), (("g", "T", 0, 1.0), TypeError), (("g", "T", 0, None), TypeError),
    (("g", "T", 0, -1), ValueError), (("g", "T", -1, 1), ValueError), (("", "T", 0, 1), ValueError),
    (("g", "T@x", 0, 1), ValueError),
])
def test_bad_input(store_factory, args: tuple, error: type) -> None:
    store = store_factory()
    with pytest.raises(error):
        store.commit_offset(*args)
    store.shutdown()
    assert not offsets_file(store).exists()                   # nothing was committed


def test_periodic_flush_by_the_clock(store_factory, fake_clock: FakeClock) -> None:
    store = store_factory(clock=fake_clock, flush_consumer_offset_interval=60_000)
    store.commit_offset("g", "T", 0, 7)
    time.sleep(1.5)
    assert not offsets_file(store).exists()                   # not due yet
    fake_clock.advance(60_001)
    deadline = time.monotonic() + 30            # the service looks at the clock at least once a second
    while not offsets_file(store).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert offsets_file(store).exists(), "not written within 30 s of the interval passing"
    assert decode_consumer_offsets(offsets_file(store).read_text()) == {"T@g": {0: 7}}


def test_read_only_follows_the_writer_and_refuses_commit(store_factory) -> None:
    writer = store_factory(flush_consumer_offset_interval=50)
    writer.put_message(Message("T", b"a"))
    reader = store_factory(read_only=True)
    assert reader.fetch_offset("g", "T", 0) == -1
    with pytest.raises(StoreError):
        reader.commit_offset("g", "T", 0, 1)
    writer.commit_offset("g", "T", 0, 1)
    deadline = time.monotonic() + 10
    while reader.fetch_offset("g", "T", 0) != 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert reader.fetch_offset("g", "T", 0) == 1


CONSUME = r"""
import sys, threading
from pystore import Message
from pystore import MessageStore
root, total = sys.argv[1], int(sys.argv[2])
store = MessageStore.open(root, mapped_file_size_commit_log=64 * 1024, flush_consumer_offset_interval=20)
def produce():
    for i in range(store.get_max_offset_in_queue("T", 0), total):
        store.put_message(Message("T", b"m%d" % i))
threading.Thread(target=produce, daemon=True).start()
print("READY", flush=True)
with store.consumer("g", "T", queue_ids=[0]) as c:
    if sys.argv[3] == "iterate":
        for m in c:
            print("GOT %d %s" % (m.queue_offset, m.body.decode()), flush=True)
    else:
        import time
        while True:
            page = c.poll(1000)
            time.sleep(0.1 if page else 0)    # processing the page: long enough for a commit to reach the file
            for m in page:
                print("GOT %d %s" % (m.queue_offset, m.body.decode()), flush=True)
"""


@pytest.mark.parametrize("mode", ["iterate", "poll"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_sigkill_while_consuming_repeats_only_the_uncommitted_tail(procs, tmp_path: Path, seed: int,
                                                                   mode: str) -> None:
    """A writer that puts and consumes with auto-commit (iterating, or polling pages), SIGKILLed after a random
    number of messages: the restarted consumer starts at the persisted committed offset, which is never past
    what was handed out and processed (printed), and from there gets every message up to the end, in order:
    nothing lost, only that tail again."""
    total = 3000
    root = str(tmp_path / "store")
    p = procs.start(root, str(total), mode, script=CONSUME)
    read_line(p, "READY")
    got = []
    stop_after = random.Random(seed).randrange(10, 2000 if mode == "iterate" else 300)
    while len(got) < stop_after:
        _, off, body = read_line(p, "GOT").split()
        got.append(int(off))
        assert body == "m%d" % int(off)
    if mode == "poll":
        # most likely inside the next page's processing: a page committed as it was handed out would be on
        # disk by now (offsets are written every 20 ms here) though none of it was processed
        time.sleep(0.06)
    kill(p)
    # the consumer went on while this test read: what it printed before the kill is still in the pipe, and
    # its auto-commit may already cover it (a commit is never past a message handed out and printed)
    assert p.stdout is not None
    for line in p.stdout.read().decode().splitlines():
        if line.startswith("GOT "):
            _, off, body = line.split()
            got.append(int(off))
            assert body == "m%d" % int(off)
    assert got == list(range(len(got)))
    store = MessageStore.open(root, mapped_file_size_commit_log=64 * 1024)
    try:
        committed = store.fetch_offset("g", "T", 0)
        assert committed <= got[-1] + 1                      # never past a message not processed
        end = store.get_max_offset_in_queue("T", 0)
        assert end >= len(got)
        with store.consumer("g", "T", queue_ids=[0]) as c:
            again = []
            while len(again) < end - max(committed, 0):
                batch = c.poll(2000)
                assert batch, "nothing more after %d messages" % len(again)
                again += [m.queue_offset for m in batch]
        assert again == list(range(max(committed, 0), end))
        assert store.fetch_offset("g", "T", 0) == end
    finally:
        store.shutdown()
    assert os.path.exists(os.path.join(root, "config", "consumerOffset.json"))


def test_config_field_and_broker_conf_key() -> None:
    assert StoreConfig().flush_consumer_offset_interval == 5000
    cfg = StoreConfig.from_properties("flushConsumerOffsetInterval=1234\n")
    assert cfg.flush_consumer_offset_interval == 1234
    assert "flushConsumerOffsetInterval=1234" in cfg.to_properties()


# -- several writers: the journal (ConsumerOffsets(journal=True)) ------------------------------------------


def _journaled(tmp_path, read_only: bool) -> ConsumerOffsets:
    return ConsumerOffsets(str(tmp_path / "config"), 1000, lambda t, q: 0, read_only=read_only, journal=True)


def test_a_follower_commits_through_the_journal_and_the_leader_writes_it_into_the_file(tmp_path) -> None:
    leader, follower = _journaled(tmp_path, False), _journaled(tmp_path, True)
    leader.load()
    follower.commit("g", "T", 0, 4)
    follower.commit("g", "T", 0, 6)
    journal = tmp_path / "config" / "consumerOffset.journal"
    assert journal.read_bytes() == b'["T@g", 0, 4]\n["T@g", 0, 6]\n'
    assert follower.fetch("g", "T", 0) == 6 and leader.fetch("g", "T", 0) == 6
    leader.commit("g", "T", 1, 2)
    leader.persist()
    assert journal.read_bytes() == b""
    assert decode_consumer_offsets((tmp_path / "config" / "consumerOffset.json").read_text()) == {"T@g": {0: 6, 1: 2}}
    assert follower.fetch("g", "T", 1) == 2                 # the file, re-read when it changed


def test_a_new_leader_applies_the_journal_before_its_own_commits(tmp_path) -> None:
    # A follower's commit sat in the journal when the leader died; the follower took over and committed again.
    # Applied only at its next fetch, the older journal line came over the newer commit: the offset went back.
    old_leader, follower = _journaled(tmp_path, False), _journaled(tmp_path, True)
    old_leader.load()
    follower.commit("g", "T", 0, 10)
    new_leader = _journaled(tmp_path, False)                 # the takeover: the same process, leading now
    new_leader.load()
    new_leader.commit("g", "T", 0, 20)
    assert new_leader.fetch("g", "T", 0) == 20
    new_leader.persist()
    again = _journaled(tmp_path, False)
    again.load()
    assert again.fetch("g", "T", 0) == 20


def test_the_leaders_commits_reach_the_other_processes_at_once(tmp_path) -> None:
    # A consumer handed from the leader's process to another's (one consumer a queue at a time) started from
    # the file, up to a write interval behind the leader's table: those messages were delivered again.
    leader, follower = _journaled(tmp_path, False), _journaled(tmp_path, True)
    leader.load()
    leader.commit("g", "T", 0, 30)
    assert follower.fetch("g", "T", 0) == 30


def test_a_write_of_the_file_cut_before_the_journal_is_emptied_keeps_the_newest_commit(tmp_path, monkeypatch) -> None:
    # The leader wrote the file, then died before it emptied the journal: the next leader applies the lines
    # again over the file, and must end with the newest commit of each queue, not an older journal line.
    import pystore.consumer.offsets as offsets_module

    leader, follower = _journaled(tmp_path, False), _journaled(tmp_path, True)
    leader.load()
    follower.commit("g", "T", 0, 10)
    leader.commit("g", "T", 0, 20)

    def killed(fd: int, size: int) -> None:
        raise KeyboardInterrupt("killed between the file and the journal")

    monkeypatch.setattr(offsets_module.os, "ftruncate", killed)
    with pytest.raises(KeyboardInterrupt):
        leader.persist()
    monkeypatch.undo()
    assert decode_consumer_offsets((tmp_path / "config" / "consumerOffset.json").read_text()) == {"T@g": {0: 20}}
    next_leader = _journaled(tmp_path, False)
    next_leader.load()
    assert next_leader.fetch("g", "T", 0) == 20
    assert follower.fetch("g", "T", 0) == 20


def test_a_journal_line_cut_by_a_kill_or_not_a_commit_is_skipped(tmp_path, caplog) -> None:
    leader = _journaled(tmp_path, False)
    leader.load()
    journal = tmp_path / "config" / "consumerOffset.journal"
    journal.parent.mkdir(exist_ok=True)
    journal.write_bytes(b'["T@g", 0, 4]\n["T@g", 0, -1]\nnot json\n["T@g", 1, 9')
    assert leader.fetch("g", "T", 0) == 4 and leader.fetch("g", "T", 1) == -1
    assert sum("not a commit" in r.getMessage() for r in caplog.records) >= 2


def test_a_single_writer_takes_in_a_journal_no_leader_wrote(tmp_path) -> None:
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "consumerOffset.journal").write_bytes(b'["T@g", 2, 11]\n')
    single = ConsumerOffsets(str(tmp_path / "config"), 1000, lambda t, q: 0, read_only=False)
    single.load()
    assert single.fetch("g", "T", 2) == 11
    assert not (tmp_path / "config" / "consumerOffset.journal").exists()
    assert decode_consumer_offsets((tmp_path / "config" / "consumerOffset.json").read_text()) == {"T@g": {2: 11}}
