"""Writer processes for the crash and power-cut tests: start ``tests/crash_writer.py`` (or a small inline
script) in a process of its own, read its stdout lines, SIGKILL it, wait for it to kill itself at a crash
point, and kill whatever is left at teardown (the ``procs`` fixture of ``tests/conftest.py``). One home for
``test_crash.py`` and the scenario tests of ``tests/powerloss``."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
WORKTREE = TESTS.parent
WRITER = TESTS / "crash_writer.py"


class Procs:
    """Every process a test starts; all are killed at teardown, whatever happened."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, *argv: str, env: dict[str, str] | None = None, script: str | None = None,
              crashpoint: str | None = None, stdin: bool = False) -> subprocess.Popen[bytes]:
        """``crash_writer.py argv`` (or ``python -c script argv``) with ``env`` (default: ours), the work tree
        and tests/ on PYTHONPATH, and ``PYSTORE_CRASHPOINT`` only when ``crashpoint`` asks for one; a pipe for
        stdin when ``stdin`` (else none); stderr
        goes to a file that failures quote (``stderr_of``)."""
        env = {k: v for k, v in (os.environ if env is None else env).items() if k != "PYSTORE_CRASHPOINT"}
        env["PYTHONPATH"] = os.pathsep.join([str(WORKTREE), str(TESTS)]
                                            + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        if crashpoint:
            env["PYSTORE_CRASHPOINT"] = crashpoint
        err_path = self.tmp_path / ("writer-%d.err" % (len(self.procs) + 1))
        cmd = [sys.executable, "-c", script, *argv] if script is not None else [sys.executable, str(WRITER), *argv]
        with open(err_path, "wb") as err:
            p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, env=env,
                                 stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
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


def stderr_of(p: subprocess.Popen[bytes]) -> str:
    try:
        return p.err_path.read_text(errors="replace")[-3000:]  # type: ignore[attr-defined]
    except OSError:
        return ""


def read_line(p: subprocess.Popen[bytes], prefix: str, timeout: float = 300.0) -> str:
    """The next stdout line of ``p``, which must start with ``prefix``."""
    assert p.stdout is not None
    ready, _, _ = select.select([p.stdout], [], [], timeout)
    assert ready, "no %s from the process within %ss; stderr:\n%s" % (prefix, timeout, stderr_of(p))
    line = p.stdout.readline().decode()
    assert line.startswith(prefix), "process said %r, expected %s; stderr:\n%s" % (line, prefix, stderr_of(p))
    return line


def kill(p: subprocess.Popen[bytes]) -> None:
    """SIGKILL ``p``, which must still be running (a process that ended by itself is a failure)."""
    if p.poll() is None:
        p.send_signal(signal.SIGKILL)
    p.wait()
    assert p.returncode == -signal.SIGKILL, "the process ended by itself (%s); stderr:\n%s" % (
        p.returncode, stderr_of(p))


def wait_killed_by_crashpoint(p: subprocess.Popen[bytes], timeout: float = 300.0) -> None:
    """Wait for a writer to reach its crash point and SIGKILL itself."""
    try:
        p.wait(timeout)
    except subprocess.TimeoutExpired:
        pytest.fail("the writer did not reach its crash point within %ss; stderr:\n%s" % (timeout, stderr_of(p)))
    assert p.returncode == -signal.SIGKILL, (
        "the writer was not killed by its crash point (exit %s); stderr:\n%s" % (p.returncode, stderr_of(p)))
