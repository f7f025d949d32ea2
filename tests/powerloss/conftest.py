"""Fixtures of the power-cut layer tests: ``powercut(model)`` mounts a :class:`PowerCutFS` under ``tmp_path``
and unmounts it at teardown. Without ``/dev/fuse``, ``fusermount3`` or pyfuse3 every test here is skipped
with the reason (``make powerloss-deps`` installs them), never passed."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from .powercut import PowerCutFS, missing_reason


@pytest.fixture
def powercut(tmp_path: Path) -> Iterator[Callable[..., PowerCutFS]]:
    reason = missing_reason()
    if reason:
        pytest.skip(reason)
    started: list[PowerCutFS] = []

    def start(model: str = "journal", name: str | None = None) -> PowerCutFS:
        fs = PowerCutFS(tmp_path / (name or "pc%d-%s" % (len(started), model)), model=model)
        started.append(fs)
        fs.start()
        return fs

    yield start
    for fs in started:
        fs.close()
