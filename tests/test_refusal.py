"""Why the store refuses a put, in words (``pystore.log.refusal``): each refusal of the put path gets its reason,
the first check that fails is the one named, the statuses that are not about the message say what they are,
and ``PutMessageResult.reason`` says the same as ``refusal_reason``."""

from __future__ import annotations

import pytest

from pystore import Message, MessageBatch
from pystore.format._codec import record_length
from pystore.log.refusal import MAX_PROPERTIES_BYTES, MAX_TOPIC_BYTES, refusal_reason, refusal_reason_of
from pystore.status import PutMessageStatus

SMALL = {
    "mapped_file_size_commit_log": 64 * 1024,
    "mapped_file_size_consume_queue": 1000 * 20,
    "max_hash_slot_num": 1000,
    "max_index_num": 4000,
}


def test_refusal_reason_is_none_for_a_message_the_store_takes(tmp_path):
    from pystore.config import StoreConfig
    from pystore.log.refusal import refusal_reason

    cfg = StoreConfig(store_path_root_dir=str(tmp_path), **SMALL)
    assert refusal_reason(Message("T", b"x", tags="a", keys=["k"]), cfg) is None
    assert "empty" in refusal_reason(Message("", b"x"), cfg)
    assert "longer than 255 bytes" in refusal_reason(Message("T" * 256, b"x"), cfg)
    reason = refusal_reason(Message("T", b"x" * 70000), cfg.replace(max_message_size=1 << 20))
    assert "does not fit a commit-log file of 65536 bytes" in reason


ILLEGAL, PROPS = PutMessageStatus.MESSAGE_ILLEGAL, PutMessageStatus.PROPERTIES_SIZE_EXCEEDED


@pytest.mark.parametrize("msg, overrides, status, words", [
    (Message("", b"x"), {}, ILLEGAL, "topic is empty"),
    (Message("T" * (MAX_TOPIC_BYTES + 1), b"x"), {}, ILLEGAL, "longer than 255 bytes (256)"),
    (Message("a b", b"x"), {}, ILLEGAL, "characters outside [%|a-zA-Z0-9_-]"),
    (Message("tópico", b"x"), {}, ILLEGAL, "characters outside"),
    (Message("T", b"x", queue_id=-1), {}, ILLEGAL, "queue id -1 is negative"),
    (Message("T", b"x", properties={"p": "v" * MAX_PROPERTIES_BYTES}), {}, PROPS,
     "more than the record format's 32767"),
    (Message("T", b"x" * 300), {"max_message_size": 200}, ILLEGAL,
     "body of 300 bytes is larger than max_message_size (200)"),
    (Message("T", b"x" * 65536), {"max_message_size": 1 << 20}, ILLEGAL,
     "does not fit a commit-log file of 65536 bytes"),
], ids=["empty-topic", "long-topic", "space", "non-ascii", "queue-id", "properties", "body", "file"])
def test_each_refusal_of_the_put_path_has_its_reason(store_factory, msg, overrides, status, words):
    store = store_factory(**overrides)
    r = store.put_message(msg)
    assert r.status is status
    why = refusal_reason(msg, store.config)
    assert words in why
    assert refusal_reason(msg, store.config, r.status) == why
    assert r.reason == why


def test_the_record_that_fills_the_file_but_its_blank_is_taken_and_one_byte_more_is_not(store_factory):
    store = store_factory(max_message_size=1 << 20)
    probe = Message("T", b"")
    fixed = record_length(probe, tuple(store.config.store_host))
    fits = Message("T", b"x" * (64 * 1024 - 8 - fixed))
    assert refusal_reason(fits, store.config) is None
    assert store.put_message(fits).is_ok()
    over = Message("T", b"x" * (64 * 1024 - 8 - fixed + 1))
    assert "does not fit" in refusal_reason(over, store.config)
    assert store.put_message(over).status is ILLEGAL
    store_factory.expect_messages(1)


def test_the_first_failing_check_is_the_one_named(store_factory):
    cfg = store_factory.config(max_message_size=10)
    assert "topic is empty" in refusal_reason(Message("", b"x" * 100, queue_id=-1), cfg)
    assert "queue id" in refusal_reason(Message("T", b"x" * 100, queue_id=-1), cfg)
    assert "properties" in refusal_reason(Message("T", b"x" * 100, properties={"p": "v" * 40000}), cfg)


@pytest.mark.parametrize("status, words", [
    (PutMessageStatus.SERVICE_NOT_AVAILABLE, "takes no puts now"),
    (PutMessageStatus.CREATE_MAPPED_FILE_FAILED, "could not be created"),
    (PutMessageStatus.OS_PAGE_CACHE_BUSY, "page cache is busy"),
    (PutMessageStatus.FLUSH_DISK_TIMEOUT, "stored, but the flush"),
    (PutMessageStatus.FLUSH_SLAVE_TIMEOUT, "stored, but the slave"),
    (PutMessageStatus.SLAVE_NOT_AVAILABLE, "stored, but no slave"),
    (PutMessageStatus.UNKNOWN_ERROR, "failed unexpectedly"),
])
def test_a_status_that_is_not_about_the_message_says_what_it_is(store_factory, status, words):
    cfg = store_factory.config()
    good = Message("T", b"x")
    assert words in refusal_reason(good, cfg, status)
    assert refusal_reason_of(good, cfg, status) == refusal_reason(good, cfg, status)
    assert refusal_reason_of(None, None, status) == refusal_reason(good, cfg, status)


def test_put_ok_has_no_reason(store_factory):
    cfg = store_factory.config()
    assert refusal_reason(Message("", b""), cfg, PutMessageStatus.PUT_OK) is None
    assert refusal_reason_of(Message("", b""), cfg, PutMessageStatus.PUT_OK) is None


def test_an_illegal_status_for_a_message_that_passes_every_check_says_it_changed(store_factory):
    cfg = store_factory.config()
    assert "changed while it was being stored" in refusal_reason(Message("T", b"x"), cfg, ILLEGAL)


def test_a_read_only_store_says_it_takes_no_puts(store_factory):
    store_factory().shutdown()
    ro = store_factory(read_only=True)
    r = ro.put_message(Message("T", b"x"))
    assert r.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    assert "takes no puts now" in r.reason


def test_a_batch_too_big_for_a_file_says_so(store_factory):
    store = store_factory()
    batch = MessageBatch([Message("T", b"x" * 8000) for _ in range(10)])
    r = store.put_messages(batch)
    assert r.status is ILLEGAL
    assert r.reason == "the batch's records do not fit a commit-log file of 65536 bytes (a batch never spans files)"
    assert r.reason == refusal_reason_of(batch, store.config, r.status)


def test_a_batch_names_its_first_refused_message(store_factory):
    cfg = store_factory.config(max_message_size=100)
    batch = MessageBatch([Message("T", b"x"), Message("T", b"y" * 150), Message("T", b"z" * 300)])
    assert refusal_reason_of(batch, cfg, ILLEGAL) == "body of 150 bytes is larger than max_message_size (100)"


def test_without_a_configuration_the_generic_words(store_factory):
    assert "a bad topic, a body over" in refusal_reason_of(Message("", b""), None, ILLEGAL)
    assert "32767" in refusal_reason_of(None, None, PROPS)
    assert refusal_reason_of(None, None, PutMessageStatus.PUT_OK) is None
