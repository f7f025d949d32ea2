"""A writer process of a store opened with ``shared_writers=True``, for tests/test_shared_writers.py:
``shared_store_writer.py ROOT NAME COUNT [FLUSH] [HOLD] [BATCH]``. It opens the store (FLUSH: ``SYNC_FLUSH`` or
``ASYNC_FLUSH``), prints ``open <pid> <leader 0/1>``, puts COUNT messages ``NAME-i`` over four queues of two topics
(forever when COUNT is 0), printing ``ack <name> <i> <topic> <queue> <queue offset> <phy offset>`` after each, then
``done`` (with BATCH > 1, in batches of BATCH into one queue, a line per message); with HOLD it then waits for a
line on stdin (``info``: print ``info <leader> <leader pid>``; ``count T Q``: print how many messages
``get_message`` serves from queue (T, Q); ``delayed T Q``: put one message of delay level 1 into it; ``quit``: shut
down and exit)."""

from __future__ import annotations

import sys

from pystore import GetMessageStatus, Message, MessageBatch, MessageStore

QUEUES = [("Orders", 0), ("Orders", 1), ("Audit", 0), ("Audit", 3)]


def count(store: MessageStore, topic: str, qid: int) -> int:
    offset, n = 0, 0
    while True:
        r = store.get_message("G", topic, qid, offset, 256)
        if r.status is not GetMessageStatus.FOUND:
            return n
        n += r.message_count
        offset = r.next_begin_offset


def main() -> None:
    root, name, total = sys.argv[1], sys.argv[2], int(sys.argv[3])
    flush = sys.argv[4] if len(sys.argv) > 4 else "ASYNC_FLUSH"
    hold = len(sys.argv) > 5 and sys.argv[5] == "hold"
    batch = int(sys.argv[6]) if len(sys.argv) > 6 else 1
    store = MessageStore.open(root, shared_writers=True, mapped_file_size_commit_log=64 * 1024,
                              mapped_file_size_consume_queue=20 * 64, flush_disk_type=flush)
    info = store.writer_info()
    print("open %d %d" % (store.writer_info()["leader_pid"], 1 if info["leader"] else 0), flush=True)
    i = 0
    while total == 0 or i < total:
        topic, qid = QUEUES[(i // batch) % len(QUEUES)]
        n = batch if total == 0 else min(batch, total - i)
        msgs = [Message(topic, ("%s-%d-" % (name, i + k)).encode().ljust(64, b"."), queue_id=qid) for k in range(n)]
        r = store.put_messages(MessageBatch(msgs)) if batch > 1 else store.put_message(msgs[0])
        if not r.is_ok():
            print("failed %s %d %s" % (name, i, r.status.name), flush=True)
            sys.exit(2)
        a = r.append_message_result
        each = a.wrote_bytes // n
        sys.stdout.write("".join("ack %s %d %s %d %d %d\n" % (name, i + k, topic, qid, a.logics_offset + k,
                                                                a.wrote_offset + k * each) for k in range(n)))
        sys.stdout.flush()
        i += n
    print("done %s" % name, flush=True)
    if hold:
        for line in sys.stdin:
            cmd = line.split()
            if cmd[0] == "info":
                info = store.writer_info()
                print("info %d %d" % (1 if info["leader"] else 0, info["leader_pid"]), flush=True)
            elif cmd[0] == "count":
                print("count %d" % count(store, cmd[1], int(cmd[2])), flush=True)
            elif cmd[0] == "delayed":
                r = store.put_message(Message(cmd[1], b"delayed", queue_id=int(cmd[2]), delay_time_level=1))
                print("delayed %s %s" % (r.status.name, r.append_message_result.logics_offset), flush=True)
            elif cmd[0] == "quit":
                break
    store.shutdown()
    print("closed", flush=True)


if __name__ == "__main__":
    main()
