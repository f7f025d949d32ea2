"""``pystore.engine.put_waits`` on its own: what a put waits for once its record is stored (real results of an
       ASYNC_MASTER store's puts), with stand-ins for the group commit (SYNC_FLUSH) and the replica wait
(SYNC_MASTER), so that each verdict is set by the test rather than by a flush or a slave. The stores' own
SYNC_FLUSH and SYNC_MASTER runs are in test_flush.py and test_ha.py."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import pytest
from conftest import make_message

from pystore import MessageBatch, StoreConfig
from pystore.engine.put_waits import PutWaits, done
from pystore.log._results import PutMessageResult
from pystore.status import PutMessageStatus

OK = PutMessageStatus.PUT_OK


@pytest.fixture
def stored(store_factory: Any) -> Callable[[], PutMessageResult]:
    """A put's result as an ASYNC_MASTER store returns it (nothing waited for), a new record each call."""
    store = store_factory()
    count = [0]

    def put() -> PutMessageResult:
        r = store.put_message(make_message(count[0]))
        assert r.status is OK and r.next_offset > 0
        count[0] += 1
        store_factory.expect_messages(count[0])
        return r
    return put


class GroupCommit:
    """The group commit as ``PutWaits`` uses it: ``sync`` answers ``flushes``."""

    def __init__(self, flushes: bool = True) -> None:
        self.flushes = flushes
        self.synced: list[tuple[int, float]] = []
        self.wakeups = 0
        self.requests: list[Any] = []

    def sync(self, next_offset: int, timeout_s: float) -> bool:
        self.synced.append((next_offset, timeout_s))
        return self.flushes

    def wakeup(self) -> None:
        self.wakeups += 1

    def put_request(self, request: Any) -> None:
        self.requests.append(request)


class Replicas:
    """The replica wait: its verdict is ``status`` (None: the result as it came)."""

    def __init__(self, status: PutMessageStatus | None = None) -> None:
        self.status = status
        self.asked: list[PutMessageResult] = []
        self.after_futures: list[Future[PutMessageResult]] = []

    def wait(self, result: PutMessageResult) -> PutMessageResult:
        self.asked.append(result)
        return result if self.status is None else result.with_status(self.status)

    def after(self, flushed: Future[PutMessageResult]) -> Future[PutMessageResult]:
        self.after_futures.append(flushed)
        out: Future[PutMessageResult] = Future()
        flushed.add_done_callback(lambda f: out.set_result(self.wait(f.result())))
        return out


def waits(group_commit: GroupCommit | None = None, replicas: Replicas | None = None) -> PutWaits:
    return PutWaits(StoreConfig(sync_flush_timeout=1234), group_commit, replicas, "store")  # type: ignore[arg-type]


def test_done_is_a_completed_future_of_the_result(stored):
    r = stored()
    f = done(r)
    assert f.done() and f.result() is r


def test_async_master_waits_for_nothing(stored):
    w = waits()
    assert not w.blocking
    r = stored()
    assert w.after_put(r, make_message(0)) is r
    f = w.complete_async(r, make_message(0))
    assert f.done() and f.result() is r


def test_sync_flush_waits_for_the_flush_past_the_record(stored):
    gc = GroupCommit()
    w = waits(gc)
    assert w.blocking
    r = stored()
    assert w.after_put(r, make_message(0)).status is OK
    assert gc.synced == [(r.next_offset, 1.234)]


def test_a_flush_that_does_not_finish_is_flush_disk_timeout_and_the_record_stays(stored):
    w = waits(GroupCommit(flushes=False))
    r = w.after_put(stored(), make_message(0))
    assert r.status is PutMessageStatus.FLUSH_DISK_TIMEOUT
    assert r.wrote_offset >= 0 and r.next_offset > r.wrote_offset


def test_a_message_that_does_not_wait_only_wakes_the_group_commit(stored):
    gc = GroupCommit(flushes=False)
    replicas = Replicas(PutMessageStatus.SLAVE_NOT_AVAILABLE)
    w = waits(gc, replicas)
    m = make_message(0)
    m.wait_store_msg_ok = False
    r = stored()
    assert w.after_put(r, m) is r
    assert gc.wakeups == 1 and gc.synced == [] and replicas.asked == []
    f = w.complete_async(r, m)
    assert f.result() is r and gc.wakeups == 2 and gc.requests == [] and replicas.after_futures == []


def test_sync_master_asks_the_slave_after_the_flush_even_when_the_flush_timed_out(stored):
    replicas = Replicas(PutMessageStatus.FLUSH_SLAVE_TIMEOUT)
    w = waits(GroupCommit(flushes=False), replicas)
    assert w.after_put(stored(), make_message(0)).status is PutMessageStatus.FLUSH_SLAVE_TIMEOUT
    assert [a.status for a in replicas.asked] == [PutMessageStatus.FLUSH_DISK_TIMEOUT]


def test_sync_master_without_group_commit_asks_the_slave_only(stored):
    replicas = Replicas()
    w = waits(None, replicas)
    assert w.blocking
    r = stored()
    assert w.after_put(r, MessageBatch([make_message(0), make_message(1)])).status is OK
    assert replicas.asked == [r]


def test_async_sync_flush_put_is_completed_by_the_group_commit(stored):
    gc = GroupCommit()
    w = waits(gc)
    r = stored()
    f = w.complete_async(r, make_message(0))
    assert not f.done()
    [request] = gc.requests
    assert request.next_offset == r.next_offset and request.result is r and request.future is f
    request.complete(True)
    assert f.result().status is OK


def test_an_async_put_that_was_refused_waits_for_nothing():
    gc = GroupCommit()
    replicas = Replicas()
    w = waits(gc, replicas)
    refused = PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL)
    f = w.complete_async(refused, make_message(0))
    assert f.result() is refused and gc.requests == [] and gc.wakeups == 1 and replicas.after_futures == []


def test_async_sync_master_chains_the_slave_after_the_flush(stored):
    gc = GroupCommit()
    replicas = Replicas(PutMessageStatus.SLAVE_NOT_AVAILABLE)
    w = waits(gc, replicas)
    f = w.complete_async(stored(), make_message(0))
    assert not f.done() and len(replicas.after_futures) == 1
    gc.requests[0].complete(True)
    assert f.result().status is PutMessageStatus.SLAVE_NOT_AVAILABLE
