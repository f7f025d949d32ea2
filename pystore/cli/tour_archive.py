"""The demo's archive part: a small store beside the demo's, archived to a ``file://`` folder, its local files
cleaned away, and every message read back (from the archive, below the local data) and compared with what was
put. It runs in a temporary folder, removed afterwards."""

from __future__ import annotations

import os
import shutil
import tempfile
import time

from rich.console import Console
from rich.markup import escape

from pystore import Message, MessageStore
from pystore.status import GetMessageStatus

TOPIC = "History"
MESSAGES = 3000


def archive_part(console: Console) -> tuple[bool, str]:
    """(passed, what it showed)."""
    work = tempfile.mkdtemp(prefix="pystore-demo-archive-")
    root, uri = os.path.join(work, "store"), "file://" + os.path.join(work, "archive")
    try:
        with MessageStore.open(root, archive_uri=uri, mapped_file_size_commit_log=256 * 1024,
                               mapped_file_size_consume_queue=20 * 256, file_reserved_time=0) as store:
            bodies = [b"event %05d " % i + b"." * 150 for i in range(MESSAGES)]
            for body in bodies:
                store.put_message(Message(TOPIC, body))
            store.flush()
            parts = store._parts
            assert parts is not None
            parts.cq_store.flush(0)                   # the queues' flush service's work, now
            archive = parts.archive
            assert archive is not None and archive.service is not None
            copied = archive.service.run_once()       # the archiving service's pass, now
            store.execute_delete_files_manually()
            deleted, _ = store.clean_files()
            local_min = store.get_min_phy_offset()
            t = time.perf_counter()
            got: list[bytes] = []
            archived = offset = 0
            while True:
                r = store.get_message("demo", TOPIC, 0, offset, 64)
                if r.status is not GetMessageStatus.FOUND:
                    break
                got.extend(m.body for m in r.messages)
                archived += sum(m.commit_log_offset < local_min for m in r.messages)
                offset = r.next_begin_offset
            dt = time.perf_counter() - t
            ok = got == bodies and archived > 0 and store.archive_info()["last_error"] is None
        detail = ("%d files copied to %s, %d local commit-log files deleted; %d/%d messages read back in %.2f s, %d "
                  "of them from the archive" % (copied, uri, deleted, len(got), MESSAGES, dt, archived))
        console.print("  archive: " + escape(detail))
        return ok, detail
    finally:
        shutil.rmtree(work, ignore_errors=True)
