"""Option parsing for the ``pystore`` data source: which options each use takes (an unknown or misapplied
option is refused, naming it and the nearest known name), roots, times, flags, counts, Kafka-style offset
JSON, and ``StoreConfig`` fields for the writer. Spark hands every option over as a string in a
case-insensitive dict (keys lower-cased); errors name the option as documented and the value."""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, overload

__all__ = [
    "OptionError",
    "BATCH_READ",
    "STREAM_READ",
    "WRITE",
    "STREAM_WRITE",
    "check_options",
    "roots",
    "option_value",
    "parse_time",
    "parse_bool",
    "parse_int",
    "parse_list",
    "per_partition",
    "parse_offsets",
    "parse_assign",
    "store_config_overrides",
]


class OptionError(ValueError):
    """An option the source does not know, one that does not apply to this use, or a bad value."""


# What Spark itself puts among a source's options: load(path) / load([paths]), and for a streaming sink
# the checkpoint folder and the query name.
_SPARK_OWN = ("path", "paths")
_SUBSCRIBE = ("subscribe", "subscribePattern", "assign")
_KAFKA_BOTH = _SUBSCRIBE + (
    "startingOffsets", "startingTimestamp", "startingOffsetsByTimestamp", "minPartitions", "includeHeaders",
    "failOnDataLoss", "maxRecordsPerPartition",
)
# a fleet of stores (pystore.spark.fleet): named locations, and the archives' file system options
_FLEET = ("stores", "storeNames", "archive_options")
#: The options of each use, as documented (case is Spark's to ignore).
BATCH_READ = frozenset(
    _SPARK_OWN + _KAFKA_BOTH + _FLEET + (
        "topic", "topics", "queue_id", "start_time", "end_time", "verify_crc", "endingOffsets",
        "bytes_per_partition", "messages_per_partition",
    )
)
STREAM_READ = frozenset(
    _SPARK_OWN + _KAFKA_BOTH + _FLEET + (
        "topics", "verify_crc", "maxMessagesPerTrigger", "maxOffsetsPerTrigger", "minOffsetsPerTrigger",
        "maxTriggerDelay", "messages_per_partition",
    )
)
WRITE = frozenset(_SPARK_OWN)  # besides every StoreConfig field (snake_case)
STREAM_WRITE = frozenset(_SPARK_OWN + ("checkpointLocation", "queryName"))

_USES = {
    "read": ("a pystore read or stream", BATCH_READ | STREAM_READ),
    "batch": ("a pystore batch read", BATCH_READ),
    "stream": ("a pystore stream", STREAM_READ),
    "write": ("a pystore write", WRITE),
    "stream_write": ("a pystore streaming write", STREAM_WRITE),
}
_WHY_NOT = {
    ("stream", "endingoffsets"): "a stream has no end (endingOffsets is for batch reads)",
    ("stream", "topic"): "a stream subscribes with topics, subscribe, subscribePattern or assign",
    ("write", "checkpointlocation"): "a batch write has no checkpoint (it is for writeStream)",
    ("stream", "queue_id"): "a stream reads whole topics, or the queues of assign",
    ("stream", "start_time"): "a stream starts at startingOffsets or startingTimestamp",
    ("stream", "end_time"): "a stream has no end",
    ("stream", "bytes_per_partition"): "a stream plans by queue offsets (messages_per_partition)",
}


def _store_fields() -> frozenset[str]:
    from pystore import config as _config

    return frozenset(n for n in _config._FIELD_NAMES if n != "unknown_keys")


def check_options(options: Mapping[str, str], use: str) -> None:
    """Refuse an option that ``use`` (``batch``, ``stream``, ``write``, ``stream_write``) does not take,
    naming it, why when it belongs to another use, and the nearest known name for a typo."""
    what, known = _USES[use]
    names = set(known)
    if use in ("write", "stream_write"):
        names |= _store_fields()
    by_lower = {n.lower(): n for n in names}
    for key in options.keys():
        k = key.lower()
        if k in by_lower:
            continue
        others = [w for u, (w, taken) in _USES.items() if u != "read" and k in _lower(taken, u)]
        if others:
            name = next(n for u, (_w, taken) in _USES.items() for n in _with_store(taken, u) if n.lower() == k)
            why = _WHY_NOT.get((use, k), "it is for %s" % " and ".join(others))
            raise OptionError("option %s does not apply to %s: %s" % (name, what, why))
        close = difflib.get_close_matches(k, list(by_lower), n=1, cutoff=0.6)
        hint = "; did you mean %s?" % by_lower[close[0]] if close else ""
        raise OptionError(
            "unknown option %s for %s%s (known: %s)" % (key, what, hint, ", ".join(sorted(known, key=str.lower)))
        )


def _with_store(taken: frozenset[str], use: str) -> frozenset[str]:
    return taken | _store_fields() if use in ("write", "stream_write") else taken


def _lower(taken: frozenset[str], use: str) -> set[str]:
    return {n.lower() for n in _with_store(taken, use)}


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def option_value(options: Mapping[str, str], name: str) -> str | None:
    """The value of option ``name`` (Spark hands options over lower-cased), or None."""
    v = options.get(name.lower())
    if v is None:
        v = options.get(name)
    return v


def roots(options: Mapping[str, str]) -> list[str]:
    """The store roots of ``load(path)``: one path, a comma-separated list, or ``load([...])``."""
    raw = option_value(options, "path")
    if raw is None:
        paths = option_value(options, "paths")
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
        raise OptionError(
            "option %s: %r is neither epoch milliseconds nor an ISO-8601 time" % (name, raw)
        ) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return (dt - _EPOCH) // timedelta(milliseconds=1)


def parse_bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = option_value(options, name)
    if raw is None:
        return default
    v = raw.strip().lower()
    if v in ("true", "1", "yes"):
        return True
    if v in ("false", "0", "no"):
        return False
    raise OptionError("option %s: expected true or false, got %r" % (name, raw))


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
    raw = option_value(options, name)
    if raw is None or raw.strip() == "":
        return default
    try:
        v = int(raw.strip())
    except ValueError:
        raise OptionError("option %s: expected an integer, got %r" % (name, raw)) from None
    if lowest is not None and v < lowest:
        raise OptionError("option %s: must be >= %d, got %d" % (name, lowest, v))
    return v


def per_partition(options: Mapping[str, str], default: int) -> int:
    """Queue offsets per partition at most: ``maxRecordsPerPartition`` (the Kafka source's name) or
    ``messages_per_partition``, not both."""
    given = [n for n in ("maxRecordsPerPartition", "messages_per_partition") if option_value(options, n) is not None]
    if len(given) > 1:
        raise OptionError("options maxRecordsPerPartition and messages_per_partition are one limit: give one")
    return parse_int(options, given[0], default, 1) if given else default


def parse_list(options: Mapping[str, str], name: str) -> list[str]:
    """A comma-separated option as a list (empty items dropped); [] when not given."""
    raw = option_value(options, name)
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
            raise OptionError("option %s cannot be set on a write: the root is the save() path" % key)
        out[name] = _config._parse_value(name, _config._HINTS[name], raw)
    return out


def parse_offsets(name: str, raw: str, lowest: int = -2) -> dict[tuple[str, int], int]:
    """Offsets JSON as ``{(topic, queue_id): offset}``: Kafka's ``{"topic": {"0": 23, "1": -2}}`` or pystore's
    ``{"topic/queue_id": 23}``. -2 is the queue's earliest offset, -1 its latest (values below ``lowest``
    are refused)."""
    try:
        given = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise OptionError(
            'option %s: expected earliest, latest or JSON {"topic": {"0": offset}} (or {"topic/0": offset}), '
            "got %r (%s)" % (name, raw, exc)
        ) from None
    if not isinstance(given, dict):
        raise OptionError('option %s: the JSON must be an object {"topic": {"0": offset}}, got %r' % (name, raw))
    out: dict[tuple[str, int], int] = {}

    def put(topic: str, q: Any, v: Any, where: str) -> None:
        qs = str(q)
        if not topic or not qs.isdigit():
            raise OptionError('option %s: %s is not a topic and queue id ("topic/0" or {"topic": {"0": ..}})'
                              % (name, where))
        if not isinstance(v, int) or isinstance(v, bool) or v < lowest:
            allowed = {-2: ", -2 (earliest) or -1 (latest)", -1: " or -1 (latest)"}.get(lowest, "")
            raise OptionError("option %s: %s must be an offset >= 0%s, got %r" % (name, where, allowed, v))
        out[(topic, int(qs))] = v

    for k, v in given.items():
        if isinstance(v, dict):
            for q, off in v.items():
                put(k, q, off, "%s/%s" % (k, q))
        else:
            topic, sep, q = k.rpartition("/")
            put(topic if sep else "", q, v, repr(k))
    return out


def parse_assign(raw: str) -> list[tuple[str, int]]:
    """Kafka's ``assign`` JSON ``{"topic": [0, 1]}`` as sorted ``(topic, queue_id)`` pairs."""
    try:
        given = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise OptionError('option assign: expected JSON {"topic": [0, 1]}, got %r (%s)' % (raw, exc)) from None
    if not isinstance(given, dict) or not given:
        raise OptionError('option assign: expected a non-empty JSON object {"topic": [0, 1]}, got %r' % raw)
    out: set[tuple[str, int]] = set()
    for topic, qids in given.items():
        if not isinstance(qids, list) or not all(
            isinstance(q, int) and not isinstance(q, bool) and q >= 0 for q in qids
        ):
            raise OptionError("option assign: %r must map to a list of queue ids >= 0, got %r" % (topic, qids))
        out.update((topic, q) for q in qids)
    return sorted(out)
