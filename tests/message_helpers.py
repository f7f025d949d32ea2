"""Shared by the message tests (test_message.py, test_message_batch.py, test_message_ext.py): the store host
records are encoded with, the encoder with it, a pickle round trip, and a message with every kind of field."""

from __future__ import annotations

import pickle

from pystore import Message
from pystore.format._codec import encode_record

STORE = ("192.168.0.1", 10911)


def enc(m, **kw):
    kw.setdefault("store_host", STORE)
    return encode_record(m, **kw)


def base_message():
    return Message("TopicA", b"body", tags="t1", keys="k1", properties={"p": "1"}, queue_id=1,
                   born_timestamp=7, born_host=("10.0.0.1", 1))


def roundtrip(obj):
    return pickle.loads(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))
