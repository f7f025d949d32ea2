"""A writer process of a commit log shared by several processes (``pystore.log.shared_append``), for
tests/test_shared_append.py: ``shared_writer.py ROOT NAME COUNT FILE_SIZE [BODY_SIZE] [BATCH]``.

It maps the log's folder (loading nothing: its first hold of the append lock catches up from offset 0, as a
process that joins late does), opens the writers' state page, and puts COUNT messages (forever when COUNT is
0) named ``NAME-i`` over four queues of two topics, in batches of BATCH when BATCH > 1. After each put it prints
``ack <name> <i> <topic> <queue> <queue offset> <phy offset> <size>`` (one line per message) and flushes, so that
what the parent read is what the writer was told."""

from __future__ import annotations

import os
import sys

from pystore import Message, MessageBatch
from pystore.config import StoreConfig
from pystore.log.commitlog import CommitLog
from pystore.log.mapped_file_queue import MappedFileQueue
from pystore.log.shared_append import share
from pystore.log.shared_state import SharedState
from pystore.tools import iter_commitlog

QUEUES = [("Orders", 0), ("Orders", 1), ("Audit", 0), ("Audit", 3)]


def _recover_end(folder: str, file_size: int) -> int:
    """A sole opener's recovery, as the store's does it: the end of the last whole record; the torn bytes after
    it, to the end of its file, zeroed."""
    end = 0
    if os.path.isdir(folder) and os.listdir(folder):
        for m in iter_commitlog(folder, verify_crc=True):
            end = m.commit_log_offset + m.store_size
        path = os.path.join(folder, "%020d" % (end - end % file_size))
        if os.path.exists(path):
            with open(path, "r+b") as f:
                f.seek(end % file_size)
                f.write(bytes(file_size - end % file_size))
    return end


def main() -> None:
    root, name, count, file_size = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    body_size = int(sys.argv[5]) if len(sys.argv) > 5 else 64
    batch = int(sys.argv[6]) if len(sys.argv) > 6 else 1
    cfg = StoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=file_size)
    queue = MappedFileQueue(cfg.commit_log_paths(), file_size)
    cl = CommitLog(cfg, queue)
    os.makedirs(root, exist_ok=True)
    state = SharedState(root)
    lock = state.open(recover_end=lambda: _recover_end(cfg.commit_log_paths()[0], file_size))
    share(cl, lock)
    cl.core.writeable = True
    out = sys.stdout
    i = 0
    while count == 0 or i < count:
        topic, qid = QUEUES[(i // batch) % len(QUEUES)]
        n = batch if count == 0 else min(batch, count - i)
        msgs = [Message(topic, ("%s-%d-" % (name, i + k)).encode().ljust(body_size, b"."), queue_id=qid)
                for k in range(n)]
        if batch > 1:
            r = cl.put_messages(MessageBatch(msgs))
        else:
            r = cl.put_message(msgs[0])
        if not r.is_ok():
            print("failed %s %d %s" % (name, i, r.status.name), flush=True)
            sys.exit(2)
        a = r.append_message_result
        phy = a.wrote_offset
        each = a.wrote_bytes // n
        lines = ["ack %s %d %s %d %d %d %d\n" % (name, i + k, topic, qid, a.logics_offset + k, phy + k * each, each)
                 for k in range(n)]
        out.write("".join(lines))
        out.flush()
        i += n
    print("done %s" % name, flush=True)


if __name__ == "__main__":
    main()
