"""How far a pystore stream is behind, from Spark's query progress: Kafka's ``avgOffsetsBehindLatest`` /
``maxOffsetsBehindLatest`` / ``minOffsetsBehindLatest``, which PySpark's Python stream reader cannot report
in the progress's ``metrics`` (docs/spark.md, Progress), computed from the ``endOffset`` and
``latestOffset`` the source does report."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["offsets_behind_latest"]


def offsets_behind_latest(progress: Any, source: int = 0) -> dict[str, float | int] | None:
    """Kafka's ``avgOffsetsBehindLatest`` / ``maxOffsetsBehindLatest`` / ``minOffsetsBehindLatest`` of a
    pystore source, from a query progress (``q.lastProgress`` or one of ``q.recentProgress``; ``source`` is
    the source's index in it): per queue of its ``latestOffset``, the latest offset minus the micro-batch's
    end offset (a queue not in the end offsets yet counts from 0). None when the progress has
    no end or no latest offsets."""
    src = progress["sources"][source]
    end, latest = src["endOffset"], src["latestOffset"]
    if end is None or latest is None:
        return None
    end = json.loads(end) if isinstance(end, str) else end
    latest = json.loads(latest) if isinstance(latest, str) else latest
    if not latest:
        return None
    end, latest = _flat(end), _flat(latest)
    behind = [max(0, int(v) - int(end.get(k, 0))) for k, v in latest.items()]
    return {
        "avgOffsetsBehindLatest": sum(behind) / len(behind),
        "maxOffsetsBehindLatest": max(behind),
        "minOffsetsBehindLatest": min(behind),
    }


def _flat(offsets: dict[str, Any], prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    """Offsets of any nesting (one store's ``{"topic/0": n}``, a fleet's ``{"store": {"topic": {"0": n}}}``)
    keyed by their path."""
    out: dict[tuple[str, ...], Any] = {}
    for k, v in offsets.items():
        if isinstance(v, dict):
            out.update(_flat(v, prefix + (k,)))
        else:
            out[prefix + (k,)] = v
    return out
