"""Option parsing for the ``pystore`` data source: roots, times, flags, counts, and ``StoreConfig`` fields
for the writer. Spark hands every option over as a string under a lower-cased key; errors name the
option and the value."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, overload

__all__ = ["roots", "parse_time", "parse_bool", "parse_int", "parse_list", "store_config_overrides"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _get(options: Mapping[str, str], name: str) -> str | None:
    v = options.get(name.lower())
    if v is None:
        v = options.get(name)
    return v


def roots(options: Mapping[str, str]) -> list[str]:
    """The store roots of ``load(path)``: one path, a comma-separated list, or ``load([...])``."""
    raw = _get(options, "path")
    if raw is None:
        paths = _get(options, "paths")
        if paths is None:
            raise ValueError(
                "no store root: use .load('/path/to/store') (or a comma-separated list of roots)"
            )
        items = json.loads(paths)
    else:
        items = raw.split(",")
    out = [p.strip() for p in items if p and p.strip()]
    if not out:
        raise ValueError("no store root in %r" % (raw,))
    return out


def parse_time(name: str, raw: str | None) -> int | None:
    """Epoch milliseconds from ``raw``: an integer (epoch ms) or ISO-8601 text (UTC when it has no zone)."""
    if raw is None or raw.strip() == "":
        return None
    s = raw.strip()
    if re.fullmatch(r"[+-]?[0-9]+", s):
        return int(s)
    try:
        dt = datetime.fromisoformat(s[:-1] + "+00:00" if s.endswith(("Z", "z")) else s)
    except ValueError:
        raise ValueError(
            "option %s: %r is neither epoch milliseconds nor an ISO-8601 time" % (name, raw)
        ) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return (dt - _EPOCH) // timedelta(milliseconds=1)


def parse_bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = _get(options, name)
    if raw is None:
        return default
    v = raw.strip().lower()
    if v in ("true", "1", "yes"):
        return True
    if v in ("false", "0", "no"):
        return False
    raise ValueError("option %s: expected true or false, got %r" % (name, raw))


# None comes back only as a None default: an option with a default is always an int
@overload
def parse_int(options: Mapping[str, str], name: str, default: int, lowest: int | None = None) -> int: ...
@overload
def parse_int(
    options: Mapping[str, str], name: str, default: int | None, lowest: int | None = None
) -> int | None: ...
def parse_int(
    options: Mapping[str, str], name: str, default: int | None, lowest: int | None = None
) -> int | None:
    raw = _get(options, name)
    if raw is None or raw.strip() == "":
        return default
    try:
        v = int(raw.strip())
    except ValueError:
        raise ValueError("option %s: expected an integer, got %r" % (name, raw)) from None
    if lowest is not None and v < lowest:
        raise ValueError("option %s: must be >= %d, got %d" % (name, lowest, v))
    return v


def parse_list(options: Mapping[str, str], name: str) -> list[str]:
    """A comma-separated option as a list (empty items dropped); [] when not given."""
    raw = _get(options, name)
    if raw is None:
        return []
    return [t.strip() for t in raw.split(",") if t.strip()]


def store_config_overrides(options: Mapping[str, str]) -> dict[str, Any]:
    """The options that name a ``StoreConfig`` field (snake_case), parsed to the field's type. The root
    comes from the path, and a writer never opens read-only, so those two are refused."""
    from pystore import config as _config

    out: dict[str, Any] = {}
    for key, raw in options.items():
        name = key.lower()
        if name not in _config._FIELD_NAMES or name == "unknown_keys":
            continue
        if name in ("store_path_root_dir", "read_only"):
            raise ValueError("option %s cannot be set on a write: the root is the save() path" % key)
        out[name] = _config._parse_value(name, _config._HINTS[name], raw)
    return out
