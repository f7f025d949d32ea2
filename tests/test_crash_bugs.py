"""Open bugs the crash and corruption suites found, each a strict xfail stating what is expected and what
pystore does instead (a fixed bug moves to test_crash.py or test_corruption.py as a regular test).

    PYTHONPATH=. python -m pytest -q -p no:cacheprovider tests/test_crash_bugs.py
"""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import crash_writer as cw  # noqa: E402
import test_corruption as tc  # noqa: E402

from pystore.errors import StoreCorruptedError  # noqa: E402
from pystore.tools import iter_commitlog  # noqa: E402


@pytest.mark.xfail(
    strict=True,
    reason="pystore/tools.py iter_commitlog moves from one file to whatever file is next in the folder "
    "without checking that it starts where the previous one ended (the store's open refuses such a log: "
    "test_corruption.py::test_missing_middle_file)",
)
def test_iter_commitlog_reports_a_missing_middle_file(tmp_path):
    """A commit-log file in the middle of the log is missing. Expected: ``iter_commitlog(verify_crc=True)``
    raises StoreCorruptedError at the missing file's offset, as the store's open does. Actual: it yields the
    messages before and after the hole as if the log were whole."""
    root = tmp_path / "store"
    tc.build_store(root, messages=300)
    names = cw.log_files(str(root))
    os.unlink(os.path.join(cw.commitlog_dir(str(root)), names[-2]))
    with pytest.raises(StoreCorruptedError) as ei:
        for _ in iter_commitlog(str(root), verify_crc=True):
            pass
    assert ei.value.offset == int(names[-2])
