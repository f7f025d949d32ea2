"""Bugs the read-side tests (issue 4) found outside the read modules: each test fails until the named code
is fixed. Docstrings say what is expected, what happens, and the suspected line."""

from __future__ import annotations

from conftest import make_message

from pystore.message import SysFlag

TOPIC = "TopicTest"


def test_inline_dispatch_indexes_prepared_messages(store_factory):
    """FORMAT.md §3.3 / §7.2: the index takes NOT, PREPARED and COMMIT records (only ROLLBACK is skipped); only
    the consume queue is limited to NOT and COMMIT.

    Expected: with ASYNC_FLUSH (inline dispatch) a PREPARED message is found by ``query_message`` at once,
    as it is after a rebuild by the reput path (``_cq.QueueDispatcher.reput`` indexes it).
    Actual: ``query_message`` returns nothing for it until the index is rebuilt from the commit log.
    Suspected: ``pystore/_commitlog.pyx`` ``CommitLogCore._put``: ``self.dispatcher.dispatch(...)`` is called
    only inside ``if enters:``, so records that do not enter a queue never reach the index builder. Calling
    the dispatcher for every record and letting ``QueueDispatcher.dispatch`` skip ``put_unit`` when
    ``_enters_queue(sys_flag)`` is false would fix it.
    """
    store = store_factory()
    store.put_message(make_message(0, keys="prep", sys_flag=SysFlag.TRANSACTION_PREPARED_TYPE))
    store.put_message(make_message(1, keys="rollback", sys_flag=SysFlag.TRANSACTION_ROLLBACK_TYPE))
    assert [m.body for m in store.query_message(TOPIC, "prep").messages] == [b"Hello RocketMQ 0"]
    assert store.query_message(TOPIC, "rollback").messages == []
