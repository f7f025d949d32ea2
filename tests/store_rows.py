"""What a store's own reads give, as a multiset of rows to compare a Spark read of its archive with
(``test_spark_fleet.py``, ``test_spark_archive_ranges.py``)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from pystore import MessageStore
from pystore.status import GetMessageStatus


def store_rows(root: str, archive: str, options: dict[str, Any] | None, topics: Iterable[str], queues: int,
               archived_only: bool, **geometry: Any) -> Counter:
    """Every message of ``topics`` (queues ``0 .. queues - 1``) as the store at ``root`` with its archive serves it,
    as ``(topic, queue id, queue offset, body)``; ``archived_only``: those the archive holds (below its end), as a
    read of the archive alone gives."""
    out: Counter = Counter()
    with MessageStore.open(root, read_only=True, archive_uri=archive, archive_options=options or {},
                           **geometry) as store:
        end = store.archive_info()["end_phy_offset"] if archived_only else 1 << 62
        for topic in topics:
            for q in range(queues):
                offset = store.get_min_offset_in_queue(topic, q)
                while True:
                    r = store.get_message("g", topic, q, offset, 64)
                    if r.status is not GetMessageStatus.FOUND:
                        break
                    for m in r.messages:
                        if m.commit_log_offset < end:
                            out[(m.topic, m.queue_id, m.queue_offset, m.body)] += 1
                    offset = r.next_begin_offset
    return out
