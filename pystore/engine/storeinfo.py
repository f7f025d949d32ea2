"""What a store folder holds, as plain data (``pystore inspect``): files, offsets, queues, checkpoint, abort.

:func:`store_info` opens the store read-only (no lock, no writes: safe on a live store) and returns a
JSON-serialisable ``dict``, typed as the ``StoreInfo`` ``TypedDict`` below. Figures come from the public
``MessageStore`` API where it has them; file lists and sizes come from the folder. ``dispatch_behind_bytes`` is
measured from the files: the commit log's end minus the end of the newest record any consume queue points at (a
read-only store has no dispatcher of its own to ask).

Every file and folder has two sizes: ``size`` / ``bytes``, the apparent size (``st_size``: what ``ls`` and
``du --apparent-size`` show), and ``allocated`` / ``allocated_bytes``, the disk it takes (``st_blocks * 512``:
what ``du`` shows). Store files have their full size from creation but only their written part plus the
pre-fault window allocated (``prefault_window_bytes``), and an index file's hash slots are allocated as keys
land in them, so most files are sparse (``"sparse": true``: fewer bytes allocated than their size).
"""

from __future__ import annotations

import datetime
import os
from typing import Any, NotRequired, TypedDict

from pystore.engine.checkpoint import StoreCheckpoint
from pystore.engine.store import MessageStore
from pystore.log._file_names import is_file_name
from pystore.log._mapped_file import MappedFile
from pystore.log._records import first_store_timestamp
from pystore.log.geometry import detect_overrides, is_index_file_name
from pystore.log.shared_state import describe as describe_writers

__all__ = ["store_info", "iso_ms"]


class FileInfo(TypedDict):
    name: str
    size: int
    allocated: int
    sparse: bool


class CommitLogFileInfo(FileInfo):
    path: str
    first_store_time: str | None
    first_store_timestamp: int


class AbortInfo(TypedDict):
    exists: bool
    pid: int | None
    writer_alive: bool


class QueueInfo(TypedDict):
    topic: str
    queue_id: int
    min_offset: int
    max_offset: int
    messages: int
    first_store_time: str | None
    last_store_time: str | None


class CheckpointInfo(TypedDict):
    exists: bool
    trusted: bool
    physic_msg_timestamp: int
    physic_msg_time: str | None
    logics_msg_timestamp: int
    logics_msg_time: str | None
    index_msg_timestamp: int
    index_msg_time: str | None
    master_flushed_offset: int
    confirm_phy_offset: int


class CommitLogInfo(TypedDict):
    min_offset: int
    max_offset: int
    file_size: int
    files: list[CommitLogFileInfo]
    earliest_message_time: str | None


class DiskInfo(TypedDict):
    #: by kind: "commitlog", "consumequeue", "index"
    bytes: dict[str, int]
    allocated_bytes: dict[str, int]
    sparse: dict[str, bool]
    commit_log_disk_ratio: float
    disk_max_used_space_ratio: int
    disk_space_clean_forcibly_ratio: float
    disk_space_warning_level_ratio: float


class ReadOnlyView(TypedDict):
    valid_end: int | None
    damage: str | None


class ConsumerLag(TypedDict):
    """A group's committed offset of one queue and how far it lags (None: a queue the store does not have)."""

    group: str
    topic: str
    queue_id: int
    committed: int
    max_offset: int | None
    lag: int | None


class StoreInfo(TypedDict):
    """``store_info``'s answer (a plain ``dict`` at runtime)."""

    root: str
    abort: AbortInfo
    unclean_shutdown: bool
    writer_running: bool
    checkpoint: CheckpointInfo
    commit_log: CommitLogInfo
    queues: list[QueueInfo]
    topics: list[str]
    index_files: list[FileInfo]
    disk: DiskInfo
    dispatch_behind_bytes: int
    read_only_view: ReadOnlyView
    #: the writers' state page of a store opened with ``shared_writers`` (``shared_state.describe``), else None
    writers: dict[str, object] | None
    #: the archive tier (``MessageStore.archive_info``) of a store inspected with ``archive_uri``, else None
    archive: dict[str, object] | None
    #: added by ``pystore inspect`` (the committed offsets' lag), not by ``store_info``
    consumer_groups: NotRequired[list[ConsumerLag]]
    consumer_groups_error: NotRequired[str]


def iso_ms(ms: int) -> str | None:
    """An epoch-ms time as ISO-8601 UTC with milliseconds; None for 0 or negative ones."""
    if ms is None or ms <= 0:
        return None
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).isoformat(timespec="milliseconds")


def _sizes(path: str) -> tuple[int, int]:
    """(apparent size, bytes allocated on disk) of a file."""
    st = os.stat(path)
    return st.st_size, st.st_blocks * 512


def _file_entry(name: str, path: str) -> FileInfo:
    size, allocated = _sizes(path)
    return {"name": name, "size": size, "allocated": allocated, "sparse": allocated < size}


def _du(path: str) -> tuple[int, int, int]:
    """(files, apparent bytes, allocated bytes) under ``path``."""
    n = size = allocated = 0
    for folder, _, names in os.walk(path):
        for name in names:
            try:
                a, b = _sizes(os.path.join(folder, name))
            except OSError:
                continue
            n += 1
            size += a
            allocated += b
    return n, size, allocated


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _abort_state(path: str) -> AbortInfo:
    if not os.path.exists(path):
        return {"exists": False, "pid": None, "writer_alive": False}
    pid = None
    try:
        with open(path, "rb") as f:
            text = f.read(32).decode("ascii", "replace").strip()
        pid = int(text) if text.isdigit() else None
    except OSError:
        pass
    return {"exists": True, "pid": pid, "writer_alive": bool(pid and _pid_alive(pid))}


def _commit_log_files(store: MessageStore) -> list[CommitLogFileInfo]:
    out: list[CommitLogFileInfo] = []
    for folder in store.config.commit_log_paths():
        try:
            names = sorted(n for n in os.listdir(folder) if is_file_name(n))
        except OSError:
            continue
        for name in names:
            path = os.path.join(folder, name)
            entry = _file_entry(name, path)
            ts = 0
            if entry["size"]:
                mf = MappedFile(path, -1, read_only=True)
                try:
                    ts = first_store_timestamp(mf)
                finally:
                    mf.close()
            out.append({**entry, "path": path, "first_store_time": iso_ms(ts), "first_store_timestamp": ts})
    return out


def store_info(root: str | os.PathLike[str], **config_overrides: Any) -> StoreInfo:
    """Everything ``pystore inspect`` shows about the store at ``root`` (see the module docstring)."""
    root = os.fspath(root)
    over = detect_overrides(root)
    over.update(config_overrides)
    abort = _abort_state(os.path.join(root, "abort"))
    store = MessageStore.open(root, read_only=True, **over)
    try:
        cfg = store.config
        cp = StoreCheckpoint(cfg.checkpoint_path(), read_only=True)
        queues: list[QueueInfo] = []
        ends: list[int] = []
        for (topic, qid), _next in sorted(store.get_topic_queue_table().items()):
            lo, hi = store.get_min_offset_in_queue(topic, qid), store.get_max_offset_in_queue(topic, qid)
            last_ts = store.get_message_store_timestamp(topic, qid, hi - 1) if hi > lo else -1
            if hi > 0:
                phy = store.get_commit_log_offset_in_queue(topic, qid, hi - 1)
                m = store.look_message_by_offset(phy) if hi > lo else None
                if m is not None:
                    ends.append(phy + m.store_size)
            queues.append(
                {
                    "topic": topic,
                    "queue_id": qid,
                    "min_offset": lo,
                    "max_offset": hi,
                    "messages": hi - lo,
                    "first_store_time": iso_ms(store.get_earliest_message_time(topic, qid))
                    if hi > lo
                    else None,
                    "last_store_time": iso_ms(last_ts),
                }
            )
        min_phy, max_phy = store.get_min_phy_offset(), store.get_max_phy_offset()
        runtime = store.get_runtime_info()
        cl_files = _commit_log_files(store)
        index_files: list[FileInfo] = []
        if os.path.isdir(cfg.index_path()):
            for name in sorted(os.listdir(cfg.index_path())):
                if is_index_file_name(name):
                    index_files.append(_file_entry(name, os.path.join(cfg.index_path(), name)))
        _, cq_size, cq_allocated = _du(cfg.consume_queue_path())
        usage = {
            "commitlog": sum(f["size"] for f in cl_files),
            "consumequeue": cq_size,
            "index": sum(f["size"] for f in index_files),
        }
        allocated = {
            "commitlog": sum(f["allocated"] for f in cl_files),
            "consumequeue": cq_allocated,
            "index": sum(f["allocated"] for f in index_files),
        }
        recovery = store.recovery
        info: StoreInfo = {
            "root": os.path.abspath(root),
            "abort": abort,
            "unclean_shutdown": abort["exists"] and not abort["writer_alive"],
            "writer_running": abort["writer_alive"],
            "writers": describe_writers(root),
            "archive": store.archive_info() if cfg.archive_uri else None,
            "checkpoint": {
                "exists": os.path.exists(cfg.checkpoint_path()),
                "trusted": cp.trusted,
                "physic_msg_timestamp": cp.physic_msg_timestamp,
                "physic_msg_time": iso_ms(cp.physic_msg_timestamp),
                "logics_msg_timestamp": cp.logics_msg_timestamp,
                "logics_msg_time": iso_ms(cp.logics_msg_timestamp),
                "index_msg_timestamp": cp.index_msg_timestamp,
                "index_msg_time": iso_ms(cp.index_msg_timestamp),
                "master_flushed_offset": cp.master_flushed_offset,
                "confirm_phy_offset": cp.confirm_phy_offset,
            },
            "commit_log": {
                "min_offset": min_phy,
                "max_offset": max_phy,
                "file_size": max((f["size"] for f in cl_files), default=cfg.mapped_file_size_commit_log),
                "files": cl_files,
                "earliest_message_time": iso_ms(store.get_earliest_message_time()),
            },
            "queues": queues,
            "topics": sorted({q["topic"] for q in queues}),
            "index_files": index_files,
            "disk": {
                "bytes": usage,
                "allocated_bytes": allocated,
                "sparse": {kind: allocated[kind] < usage[kind] for kind in usage},
                "commit_log_disk_ratio": float(runtime.get("commitLogDiskRatio", "-1")),
                "disk_max_used_space_ratio": cfg.disk_max_used_space_ratio,
                "disk_space_clean_forcibly_ratio": cfg.disk_space_clean_forcibly_ratio,
                "disk_space_warning_level_ratio": cfg.disk_space_warning_level_ratio,
            },
            "dispatch_behind_bytes": max(0, max_phy - max(ends))
            if ends
            else (max_phy - max(min_phy, 0) if max_phy > 0 else 0),
            "read_only_view": {
                "valid_end": recovery.process_offset if recovery else None,
                "damage": recovery.damage if recovery else None,
            },
        }
        return info
    finally:
        store.shutdown()
