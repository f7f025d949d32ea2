"""Where a store keeps its files, as the data source sees them: pystore's own root or a RocketMQ broker's
``store/`` folder (``commitlog/`` + ``consumequeue/<topic>/<queue_id>/``), or a bare folder of commit-log
files. File sizes come from the files on disk; nothing is opened for writing and no lock is taken."""

from __future__ import annotations

import logging
import os

from pystore.log._file_names import is_file_name
from pystore.queue.consume_queue import queue_id_of

__all__ = [
    "commit_log_dir",
    "commit_log_files",
    "commit_log_min",
    "consume_queue_dir",
    "list_queues",
    "queue_files",
    "data_files",
]

log = logging.getLogger(__name__)


def data_files(folder: str) -> list[str]:
    """The 20-digit numbered files of ``folder`` (by name = start offset), empty ones left out."""
    try:
        names = sorted(n for n in os.listdir(folder) if is_file_name(n))
    except FileNotFoundError:
        return []
    out = []
    for n in names:
        p = os.path.join(folder, n)
        try:
            if os.path.isfile(p) and os.path.getsize(p) > 0:
                out.append(p)
        except FileNotFoundError:  # deleted by the store's cleaning meanwhile
            continue
    return out


def commit_log_dir(root: str) -> str:
    """``<root>/commitlog``, or ``root`` itself when it holds the commit-log files."""
    if not os.path.isdir(root):
        raise FileNotFoundError("no store at %s (not a folder)" % root)
    sub = os.path.join(root, "commitlog")
    if os.path.isdir(sub):
        return sub
    return root


def commit_log_files(root: str) -> list[str]:
    return data_files(commit_log_dir(root))


def commit_log_min(files: list[str]) -> int:
    """The commit log's min offset: its first file's start offset (0 when there is no file)."""
    return int(os.path.basename(files[0])) if files else 0


def consume_queue_dir(root: str) -> str | None:
    d = os.path.join(root, "consumequeue")
    return d if os.path.isdir(d) else None


def list_queues(root: str, topics: list[str] | None = None, queue_id: int = -1) -> list[tuple[str, int]]:
    """``(topic, queue_id)`` of every consume-queue folder (of ``topics``; of ``queue_id`` when >= 0),
    sorted."""
    base = consume_queue_dir(root)
    if base is None:
        return []
    out = []
    names = topics if topics else sorted(os.listdir(base))
    for topic in names:
        tdir = os.path.join(base, topic)
        if not os.path.isdir(tdir):
            continue
        for q in os.listdir(tdir):
            qid = queue_id_of(q)
            if qid is None:
                if q.lstrip("-").isdigit():
                    # RocketMQ's Integer.parseInt skips such a folder; the decoder takes int32 queue ids
                    log.warning("%s: not a queue id (an int32); skipped", os.path.join(tdir, q))
                continue
            if queue_id >= 0 and qid != queue_id:
                continue
            if os.path.isdir(os.path.join(tdir, q)):
                out.append((topic, qid))
    return sorted(out)


def queue_files(root: str, topic: str, queue_id: int) -> list[str]:
    base = consume_queue_dir(root)
    if base is None:
        return []
    return data_files(os.path.join(base, topic, str(queue_id)))
