"""The file geometry a store on disk was made with, read from its files (for tools that open stores whose
configuration they do not know: the command line, ``pystore.engine.verify``, ``pystore.columns.export``).

The commit log and the consume queues already keep the size of the files they find (``MessageStore.load``).
The index does not: ``IndexService`` ignores index files whose size does not match the configured
``max_hash_slot_num`` / ``max_index_num``. An index file is ``40 + slots * 4 + entries * 20`` bytes; with
RocketMQ's ratio of four entries per slot (its defaults: 5,000,000 / 20,000,000) the size tells both, so
:func:`detect_overrides` returns them when every index file agrees and the size fits that ratio.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from pystore.format._codec import UNIT_SIZE
from pystore.log._file_names import is_file_name

__all__ = ["detect_overrides", "index_geometry", "is_index_file_name"]


def is_index_file_name(name: str) -> bool:
    """An index file's name: ASCII digits (RocketMQ names them by their creation time, ``yyyyMMddHHmmssSSS``).
    ``str.isdigit`` alone would take other scripts' digits and superscripts."""
    return bool(name) and name.isascii() and name.isdigit()

log = logging.getLogger(__name__)

_INDEX_HEADER = 40


def index_geometry(file_size: int) -> tuple[int, int] | None:
    """``(max_hash_slot_num, max_index_num)`` of an index file of ``file_size`` bytes, assuming four entries
    per slot (RocketMQ's defaults keep that ratio); None when the size does not fit it."""
    body = file_size - _INDEX_HEADER
    if body <= 0 or body % 84:
        return None
    slots = body // 84
    return slots, slots * 4


def _first_size(folder: str) -> int | None:
    try:
        names = sorted(n for n in os.listdir(folder) if is_file_name(n))
    except OSError:
        return None
    for n in names:
        try:
            size = os.path.getsize(os.path.join(folder, n))
        except OSError:
            continue
        if size > 0:
            return size
    return None


def _cq_file_size(folder: str) -> int | None:
    try:
        topics = os.listdir(folder)
    except OSError:
        return None
    for t in topics:
        try:
            queues = os.listdir(os.path.join(folder, t))
        except OSError:
            continue
        for q in queues:
            size = _first_size(os.path.join(folder, t, q))
            if size:
                return size
    return None


def detect_overrides(root: str | os.PathLike[str]) -> dict[str, Any]:
    """StoreConfig overrides that make a store opened at ``root`` use the geometry of its existing files:
    the commit-log and consume-queue file sizes (which the store would keep anyway, with a warning) and
    the index's. Empty for a new store or when nothing can be told."""
    root = os.fspath(root)
    out: dict[str, Any] = {}
    size = _first_size(os.path.join(root, "commitlog"))
    if size:
        out["mapped_file_size_commit_log"] = size
    size = _cq_file_size(os.path.join(root, "consumequeue"))
    if size and size % UNIT_SIZE == 0:
        out["mapped_file_size_consume_queue"] = size
    out.update(_index_overrides(os.path.join(root, "index")))
    return out


def _index_overrides(folder: str) -> dict[str, Any]:
    try:
        names = [n for n in os.listdir(folder) if is_index_file_name(n)]
    except OSError:
        return {}
    sizes = set()
    for n in names:
        try:
            sizes.add(os.path.getsize(os.path.join(folder, n)))
        except OSError:
            continue
    if len(sizes) != 1:
        if len(sizes) > 1:
            log.warning(
                "%s holds index files of several sizes %s; the configured geometry applies",
                folder,
                sorted(sizes),
            )
        return {}
    geo = index_geometry(sizes.pop())
    if geo is None:
        return {}
    return {"max_hash_slot_num": geo[0], "max_index_num": geo[1]}
