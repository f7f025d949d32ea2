"""``MessageBatch`` (``pystore.message._message_batch``; docs/api.md "Messages"): what a batch holds and refuses, and
pickling. Batches built from bodies: test_batch_from_bodies.py; batches through the store: test_commitlog.py."""

from __future__ import annotations

import pytest
from message_helpers import enc, roundtrip

from pystore import Message, MessageBatch
from pystore.format._codec import decode_record


def test_pickle_message_batch():
    b = MessageBatch([Message("T", b"1", tags="a", born_timestamp=1),
                      Message("T", b"2", keys="k", born_timestamp=2, born_host=("::1", 3))])
    b2 = roundtrip(b)
    assert type(b2) is MessageBatch
    assert (b2.topic, b2.queue_id, len(b2)) == ("T", 0, 2)
    assert [enc(m) for m in b2] == [enc(m) for m in b]


def test_message_batch_basics():
    ms = [Message("T", b"%d" % i, queue_id=2, born_timestamp=i) for i in range(3)]
    b = MessageBatch(iter(ms))
    assert (b.topic, b.queue_id, len(b)) == ("T", 2, 3)
    assert list(b) == ms and b.messages == ms
    b.messages.append(Message("T", b"x", queue_id=2))
    assert len(b) == 3


def test_message_batch_holds_its_messages_where_nothing_can_swap_them():
    # the put reads a batch's messages through borrowed references: the batch keeps its own tuple of them,
    # which neither the caller's list nor anything reached through the gc module can change
    import gc

    ms = [Message("T", b"%d" % i) for i in range(3)]
    b = MessageBatch(ms)
    ms.append(Message("T", b"x"))
    ms[0] = Message("T", b"swapped")
    held = [r for r in gc.get_referents(b) if isinstance(r, (list, tuple))]
    assert held and all(type(r) is tuple for r in held)
    assert [m.body for m in b] == [b"0", b"1", b"2"] and len(b) == 3


def test_message_batch_keeps_inner_fields():
    ms = [Message("T", b"a", born_timestamp=1, born_host=("1.1.1.1", 1), flag=1, reconsume_times=1),
          Message("T", b"b", born_timestamp=2, born_host=("::2", 2), flag=2, reconsume_times=2)]
    b = MessageBatch(ms)
    assert [(m.born_timestamp, m.born_host, m.flag, m.reconsume_times) for m in b] == [
        (1, ("1.1.1.1", 1), 1, 1), (2, ("::2", 2), 2, 2)]


def test_message_batch_empty_is_value_error():
    with pytest.raises(ValueError):
        MessageBatch([])
    with pytest.raises(ValueError):
        MessageBatch(iter(()))


def test_message_batch_mixed_topics_is_value_error():
    with pytest.raises(ValueError):
        MessageBatch([Message("A", b""), Message("B", b"")])


def test_message_batch_mixed_queue_ids_is_value_error():
    with pytest.raises(ValueError):
        MessageBatch([Message("A", b"", queue_id=0), Message("A", b"", queue_id=1)])


@pytest.mark.parametrize("item", [b"raw", "str", None, 5])
def test_message_batch_non_message_is_type_error(item):
    with pytest.raises(TypeError):
        MessageBatch([Message("A", b""), item])
    with pytest.raises(TypeError):
        MessageBatch([item])


def test_message_batch_of_ext_is_type_error():
    e = decode_record(enc(Message("A", b"")))
    with pytest.raises(TypeError):
        MessageBatch([e])
