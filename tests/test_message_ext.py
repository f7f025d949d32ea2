"""``MessageExt`` (``pystore.message._message_ext``; docs/api.md "Messages"): a stored message as reads return it:
not constructible, read-only, its own copy of what it shows, pickling, and ``to_message`` re-encoding to the
same bytes."""

from __future__ import annotations

import pytest
from message_helpers import STORE, base_message, enc, roundtrip

from pystore import Message, MessageExt
from pystore.format._codec import decode_record, encode_record


def test_pickle_message_ext():
    m = Message("T", b"body", tags="a", keys="k", born_host=("::1", 3))
    rec = enc(m, queue_offset=9, commit_log_offset=1234, store_timestamp=55)
    e = decode_record(rec)
    e2 = roundtrip(e)
    assert type(e2) is MessageExt
    assert e2.raw == rec
    for attr in ("topic", "body", "properties", "tags", "keys", "queue_offset", "commit_log_offset",
                 "store_timestamp", "store_host", "born_host", "msg_id", "body_crc", "store_size"):
        assert getattr(e2, attr) == getattr(e, attr), attr


def test_message_ext_cannot_be_constructed():
    with pytest.raises(TypeError):
        MessageExt()
    with pytest.raises(TypeError):
        MessageExt(b"\x00" * 100)


def test_message_ext_is_read_only():
    e = decode_record(enc(base_message()))
    for attr in ("topic", "body", "queue_offset", "commit_log_offset", "store_size", "msg_id", "born_host"):
        with pytest.raises(AttributeError):
            setattr(e, attr, getattr(e, attr))


def test_message_ext_body_is_a_read_only_member_slot():
    # a member slot, not a property: CPython reads it without calling into the extension (LOAD_ATTR_SLOT);
    # it must still be read-only, documented, and set on every MessageExt a read makes
    import types

    descr = MessageExt.__dict__["body"]
    assert isinstance(descr, types.MemberDescriptorType) and descr.__doc__
    e = decode_record(enc(base_message()))
    assert e.body == base_message().body
    with pytest.raises(AttributeError):
        e.body = b"other"
    with pytest.raises(AttributeError):
        del e.body
    assert e.body == base_message().body


def test_message_ext_properties_is_a_copy():
    e = decode_record(enc(base_message()))
    p = e.properties
    p["TAGS"] = "changed"
    assert e.tags == "t1" and e.properties["TAGS"] == "t1"


def test_message_ext_raw_outlives_the_buffer():
    buf = bytearray(enc(base_message()))
    e = decode_record(buf)
    buf[:] = bytes(len(buf))
    assert e.topic == "TopicA" and e.body == b"body" and e.tags == "t1"


@pytest.mark.parametrize("m", [
    base_message(),
    Message("L" * 140, b"", born_host=("::1", 1), delay_time_level=3, wait_store_msg_ok=False, sys_flag=0x4,
            properties={"é": "😀"}),
    Message("T", b"x" * 5000, keys=["a", "b"], flag=-1, reconsume_times=9, prepared_transaction_offset=-5),
])
@pytest.mark.parametrize("store", [STORE, ("2001:db8::1", 10911)])
def test_to_message_re_encodes_to_the_same_bytes(m, store):
    rec = encode_record(m, queue_offset=11, commit_log_offset=2222, store_timestamp=333, store_host=store)
    e = decode_record(rec)
    m2 = e.to_message()
    assert type(m2) is Message
    again = encode_record(m2, queue_offset=11, commit_log_offset=2222, store_timestamp=333, store_host=store)
    assert again == rec
    # apart from the offsets and the store fields, the message is the same
    assert encode_record(m2) == encode_record(m)
    assert (m2.topic, m2.body, m2.properties, m2.queue_id, m2.born_host, m2.born_timestamp) == (
        m.topic, m.body, m.properties, m.queue_id, m.born_host, m.born_timestamp)
