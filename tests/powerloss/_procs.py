"""Writer processes for the power-cut scenario tests (``test_ha_powerloss.py``, ``test_services_powerloss.py``):
start ``tests/crash_writer.py`` or a small inline script with the layer's environment (the fallocate shim,
when the process writes on a mount), read its stdout lines, SIGKILL it, and kill whatever is left at
teardown. Kept apart from the test modules so that neither imports the other's tests."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
WORKTREE = TESTS.parent
WRITER = TESTS / "crash_writer.py"
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))


class Procs:
    """Every process a test starts; all are killed at teardown, whatever happened."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, argv: list[str], env: dict[str, str] | None = None, script: str | None = None
              ) -> subprocess.Popen[bytes]:
        """``crash_writer.py argv`` (or ``python -c script argv``) with ``env`` (default: ours) and the work
        tree on PYTHONPATH; stderr goes to a file named in failures."""
        env = dict(os.environ if env is None else env)
        env.pop("PYSTORE_CRASHPOINT", None)
        env["PYTHONPATH"] = os.pathsep.join([str(WORKTREE), str(TESTS)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        err_path = self.tmp_path / ("proc-%d.err" % len(self.procs))
        cmd = [sys.executable, "-c", script, *argv] if script is not None else [sys.executable, str(WRITER), *argv]
        with open(err_path, "wb") as err:
            p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL, env=env,
                                 cwd=str(self.tmp_path))
        p.err_path = err_path  # type: ignore[attr-defined]
        self.procs.append(p)
        return p

    def kill_all(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait()
            if p.stdout is not None:
                p.stdout.close()


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Procs]:
    ps = Procs(tmp_path)
    try:
        yield ps
    finally:
        ps.kill_all()


def stderr_of(p: subprocess.Popen[bytes]) -> str:
    try:
        return p.err_path.read_text(errors="replace")[-3000:]  # type: ignore[attr-defined]
    except OSError:
        return ""


def read_line(p: subprocess.Popen[bytes], prefix: str, timeout: float = 60.0) -> str:
    """The next stdout line of ``p``, which must start with ``prefix``."""
    assert p.stdout is not None
    ready, _, _ = select.select([p.stdout], [], [], timeout)
    assert ready, "no %s within %ss; stderr:\n%s" % (prefix, timeout, stderr_of(p))
    line = p.stdout.readline().decode()
    assert line.startswith(prefix), "process said %r, expected %s; stderr:\n%s" % (line, prefix, stderr_of(p))
    return line


def kill(p: subprocess.Popen[bytes]) -> None:
    """SIGKILL ``p``, which must still be running (a process that died by itself is a failure)."""
    if p.poll() is None:
        p.send_signal(signal.SIGKILL)
    p.wait()
    assert p.returncode == -signal.SIGKILL, "the process ended by itself (%s); stderr:\n%s" % (
        p.returncode, stderr_of(p))
