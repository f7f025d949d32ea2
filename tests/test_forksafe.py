"""A process forked from one that has a store open keeps none of the store's kernel locks and writes nothing
(``pystore.system.forksafe``): a child that outlives its parent blocks neither a new writer nor a takeover,
and a child that shuts its inherited store down releases none of its parent's locks; it still reads."""

from __future__ import annotations

import os
import signal
import sys
import time

import pytest
from writer_procs import stderr_of

from pystore import GetMessageStatus, Message, MessageStore, PutMessageStatus
from pystore.errors import StoreLockedError

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX fork")

GEOMETRY = {"mapped_file_size_commit_log": 64 * 1024, "mapped_file_size_consume_queue": 20 * 64}

# a writer that puts 10 messages and forks a child that only sleeps; each says its pid once past the fork
PARENT = r"""
import os, sys, time
from pystore import Message, MessageStore
root, shared = sys.argv[1], sys.argv[2] == "shared"
s = MessageStore.open(root, shared_writers=shared, mapped_file_size_commit_log=64 * 1024,
                      mapped_file_size_consume_queue=20 * 64)
for i in range(10):
    assert s.put_message(Message("Fork", b"parent %d" % i)).is_ok()
s.flush()
pid = os.fork()
if pid == 0:
    os.write(1, b"child %d\n" % os.getpid())    # past fork: the child has dropped what it inherited (one write:
                                                # a pipe keeps a short one whole beside the parent's)
    time.sleep(120)
    os._exit(0)
os.write(1, b"parent %d %d\n" % (os.getpid(), pid))
time.sleep(120)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _start_parent(procs, root, mode: str) -> tuple[object, int]:
    p = procs.start(str(root), mode, script=PARENT)
    # the two processes' lines, in either order (not through select: both may come in one read); the script
    # ends within 120 s whatever happens, so this cannot hang
    lines = [p.stdout.readline().decode().split() for _ in range(2)]
    assert all(lines), stderr_of(p)
    said = {words[0]: int(words[1]) for words in lines}
    assert set(said) == {"parent", "child"}, (lines, stderr_of(p))
    return p, said["child"]


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def test_a_child_that_outlives_its_parent_does_not_keep_the_store_locked(tmp_path, procs):
    root = tmp_path / "store"
    parent, child = _start_parent(procs, root, "only")
    try:
        parent.kill()
        parent.wait()
        assert _alive(child)
        s = MessageStore.open(str(root), **GEOMETRY)      # a new only writer, the child still there
        try:
            got = s.get_message("g", "Fork", 0, 0)
            assert got.status == GetMessageStatus.FOUND and got.messages[0].body == b"parent 0"
            assert s.get_max_offset_in_queue("Fork", 0) == 10
        finally:
            s.shutdown()
    finally:
        _kill(child)


def test_a_child_that_outlives_the_leader_does_not_hold_up_the_takeover(tmp_path, procs):
    root = tmp_path / "store"
    parent, child = _start_parent(procs, root, "shared")
    s = MessageStore.open(str(root), shared_writers=True, **GEOMETRY)
    try:
        assert s.writer_info()["leader_pid"] == parent.pid, stderr_of(parent)
        parent.kill()
        parent.wait()
        assert _alive(child)
        r = s.put_message(Message("Fork", b"after the leader died"))
        assert r.is_ok()
        deadline = time.monotonic() + 30                    # a liveness bound, not a timing assertion
        while not (s.writer_info()["leader"] and s.get_max_offset_in_queue("Fork", 0) >= 11):
            assert time.monotonic() < deadline, "no takeover while the dead leader's child lives"
            time.sleep(0.02)
        got = s.get_message("g", "Fork", 0, 10)
        assert got.status == GetMessageStatus.FOUND and got.messages[0].body == b"after the leader died"
    finally:
        _kill(child)
        s.shutdown()


@pytest.mark.parametrize("shared", [False, True], ids=["only-writer", "shared-writers"])
def test_a_child_cannot_write_or_unlock_the_store_it_inherited(tmp_path, shared):
    root = str(tmp_path / "store")
    s = MessageStore.open(root, shared_writers=shared, **GEOMETRY)
    try:
        assert s.put_message(Message("Fork", b"before")).is_ok()
        abort = os.path.join(root, "abort")
        assert os.path.exists(abort)
        deadline = time.monotonic() + 30                    # several writers: dispatch follows the puts
        while s.get_max_offset_in_queue("Fork", 0) < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        pid = os.fork()
        if pid == 0:                                        # the child: never return into pytest
            code = 1
            try:
                r = s.put_message(Message("Fork", b"from the child"))
                read = [m.body for m in s.get_message("g", "Fork", 0, 0).messages]      # reads still work
                s.shutdown()                                # writes nothing, unlocks nothing
                code = 0 if r.status == PutMessageStatus.SERVICE_NOT_AVAILABLE and read == [b"before"] else 3
            except BaseException:
                code = 2
            finally:
                os._exit(code)
        deadline = time.monotonic() + 120                   # a hang guard, not a timing assertion
        while not (done := os.waitpid(pid, os.WNOHANG))[0]:
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                pytest.fail("the child hung")
            time.sleep(0.01)
        assert os.waitstatus_to_exitcode(done[1]) == 0
        assert os.path.exists(abort)                        # the child's shutdown did not end the parent's run
        with pytest.raises(StoreLockedError):               # and the parent still holds its lock
            MessageStore.open(root, shared_writers=not shared, **GEOMETRY)
        assert s.put_message(Message("Fork", b"after")).is_ok()
        deadline = time.monotonic() + 30                    # several writers: dispatch follows the puts
        while s.get_max_offset_in_queue("Fork", 0) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        got = s.get_message("g", "Fork", 0, 0)
        assert [m.body for m in got.messages] == [b"before", b"after"]
    finally:
        s.shutdown()
    assert not sys.is_finalizing()
