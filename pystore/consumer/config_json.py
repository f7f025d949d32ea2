"""The JSON files a RocketMQ broker keeps under ``config/`` (``ConfigManager``): ``delayOffset.json`` (the
schedule service) and ``consumerOffset.json`` (committed consumer offsets) share their reading, their fallback
to ``.bak`` and their atomic write, all here.

* Reading accepts fastjson's bare integer map keys (``{0:12}``, which is not JSON) as well as quoted ones, and
  5.x's extra members (``dataVersion``): only ``offsetTable`` is read.
* ``load_config_file`` is ``ConfigManager.load``: a missing, empty or unparsable file (nested too deeply for
  the parser included) is read from its ``.bak``; no ``.bak`` (or an empty one) means None (an empty table); a
  ``.bak`` that does not parse either raises ``StoreError``.
* ``persist_config_file`` is 4.8's ``MixAll.string2File``: ``<f>.tmp`` written and fsynced, the previous ``<f>``
  copied to ``<f>.bak``, the ``.tmp`` renamed over ``<f>``, then the folder fsynced (pystore's addition: without
  it a power cut may bring back the old file; RocketMQ forces neither).
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Callable
from typing import Any, TypeVar

from pystore.errors import StoreError
from pystore.system.durable import fsync_dir, make_dirs_durable

__all__ = ["read_offset_table", "offset_value", "load_config_file", "persist_config_file"]

log = logging.getLogger(__name__)

T = TypeVar("T")

# fastjson writes integer map keys bare: {1:3,2:0}; make them strings for json.loads
_BARE_KEY = re.compile(r"([{,]\s*)(-?[0-9]+)(\s*:)")


def read_offset_table(text: str) -> dict[str, Any]:
    """The ``offsetTable`` object of a ``ConfigManager`` JSON document (``{}`` when absent); ValueError if the
    text is not such a document."""
    try:
        doc = json.loads(_BARE_KEY.sub(r'\1"\2"\3', text))
    except RecursionError:
        # a damaged file nested deeper than the interpreter's stack: unparsable like any other bad text, so
        # the load takes the .bak instead of failing with a RecursionError
        raise ValueError("JSON nested too deeply") from None
    if not isinstance(doc, dict):
        raise ValueError("not a JSON object")
    table = doc.get("offsetTable")
    if table is None:
        return {}
    if not isinstance(table, dict):
        raise ValueError("offsetTable is not an object")
    return table


def offset_value(value: Any, what: str) -> int:
    """``value`` as a table's offset: an int (not a bool); ValueError naming ``what`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError("offset of %s is not an integer: %r" % (what, value))
    return value


def _read(path: str, decode: Callable[[str], T]) -> T | None:
    """The table in ``path``; None if the file is missing or empty."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return None
    if not text:
        return None
    return decode(text)


def load_config_file(path: str, decode: Callable[[str], T]) -> T | None:
    """``decode`` of ``path``'s text, or of its ``.bak`` when ``path`` is missing, empty or does not decode;
    None when neither holds anything. ``StoreError`` when the ``.bak`` is needed and does not decode."""
    try:
        table = _read(path, decode)
    except (OSError, ValueError) as e:
        log.error("%s: cannot load (%s); trying %s.bak", path, e, os.path.basename(path))
        table = None
    if table is None:
        try:
            table = _read(path + ".bak", decode)
        except (OSError, ValueError) as e:
            raise StoreError("%s and its .bak cannot be loaded: %s" % (path, e)) from e
    return table


def persist_config_file(path: str, text: str) -> None:
    """Replace ``path`` by ``text`` atomically, keeping the previous content as ``path.bak``."""
    folder = os.path.dirname(path)
    make_dirs_durable(folder)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    try:
        with open(path, "rb") as f:
            previous = f.read()
    except FileNotFoundError:
        previous = None
    if previous is not None:
        with open(path + ".bak", "wb") as f:
            f.write(previous)
    os.replace(tmp, path)
    fsync_dir(folder)
