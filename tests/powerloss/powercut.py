"""Test-facing side of the power-cut layer: start the FUSE server in a subprocess, talk to it, unmount.

The server (``fuse_server.py``, whose docstring describes the durability models and crash modes) runs in
its own process: a test doing I/O on the mount from the process that also served the mount could deadlock
on itself. Every control call has a timeout, and leaving the context manager always unmounts (asking the
server first, then ``fusermount3 -u``, then ``fusermount3 -u -z``, then killing the server), so no stale
mount outlives a failed test.

Usage::

    with PowerCutFS(tmp_path, model="strict") as fs:
        (fs.mount / "a").write_bytes(b"x")        # lands in fs.live; pending, not durable
        out = fs.crash(mode="drop", seed=1)        # a folder: what a power cut leaves
        assert not (out / "a").exists()            # strict: the directory was never fsynced
        fs.stats()                                 # {"pending_writes": ..., "fsync": ..., ...}

A writer process to be killed should run with ``env=fs.writer_env()``: it preloads ``fallocate_shim.c``, so
that ``posix_fallocate`` (which pystore creates its files with) is one atomic size change on the mount
instead of glibc's byte-per-block fallback, which a SIGKILL can interrupt halfway.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Protocol, TypeVar

log = logging.getLogger("powercut")

SERVER = Path(__file__).with_name("fuse_server.py")
SHIM_SOURCE = Path(__file__).with_name("fallocate_shim.c")
MODELS = ("journal", "strict")
CRASH_MODES = ("drop", "all", "subset", "torn", "subset+torn")


def missing_reason() -> str | None:
    """Why the layer cannot run here (the tests skip with this), or None."""
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse is missing (no FUSE in this kernel or container)"
    if shutil.which("fusermount3") is None:
        return "fusermount3 is not on PATH (Debian package fuse3; make powerloss-deps installs it)"
    if importlib.util.find_spec("pyfuse3") is None:
        return "pyfuse3 is not installed in this Python (make powerloss-deps installs it; needs libfuse3-dev)"
    return None


def is_mounted(path: Path) -> bool:
    """Whether ``path`` is a mount point (by /proc/self/mountinfo: stat would hang on a dead server)."""
    target = os.path.realpath(path)
    try:
        with open("/proc/self/mountinfo") as f:
            # field 5 is the mount point, with spaces and the like escaped as octal
            return any(line.split()[4].encode().decode("unicode_escape") == target for line in f)
    except OSError:
        return False


class PowerCutError(RuntimeError):
    """The server refused a request, failed to start, or did not answer in time."""


def fallocate_shim() -> Path:
    """The LD_PRELOAD library of ``fallocate_shim.c`` (posix_fallocate as one ftruncate where fallocate is
    unsupported, as on this mount), compiled once per source version into the temporary folder."""
    source = SHIM_SOURCE.read_bytes()
    lib = Path(tempfile.gettempdir()) / ("pcfs-fallocate-%s.so" % hashlib.sha256(source).hexdigest()[:12])
    if lib.exists():
        return lib
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise PowerCutError("no C compiler to build %s" % SHIM_SOURCE.name)
    tmp = lib.with_name("%s.%d" % (lib.name, os.getpid()))
    r = subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", str(tmp), str(SHIM_SOURCE)], capture_output=True, timeout=120)
    if r.returncode:
        raise PowerCutError("building %s failed: %s" % (SHIM_SOURCE.name, r.stderr.decode(errors="replace")))
    os.replace(tmp, lib)  # atomic: a concurrent build by another test process is harmless
    return lib


class PowerCutFS:
    """A mounted power-cut layer over ``base/live``; see the module docstring.

    ``base`` gets ``live/`` (backing folder; may be filled before entering to start from existing files,
    which count as durable), ``scratch/`` (durable bytes), ``mnt/`` (the mount), ``server.log``, and one
    ``crash-N/`` folder per :meth:`crash`.
    """

    def __init__(self, base: Path | str, model: str = "journal", timeout: float = 20.0, debug: bool = False) -> None:
        if model not in MODELS:
            raise ValueError("model must be one of %s" % (MODELS,))
        self.base = Path(base)
        self.model = model
        self.timeout = timeout
        self.debug = debug
        self.live = self.base / "live"
        self.scratch = self.base / "scratch"
        self.mount = self.base / "mnt"
        self.log_path = self.base / "server.log"
        self.last_crash: dict[str, Any] | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._sockdir: str | None = None
        self._crashes = 0

    # -- lifecycle -----------------------------------------------------------------------------

    def __enter__(self) -> PowerCutFS:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def control_path(self) -> str:
        assert self._sockdir is not None
        return os.path.join(self._sockdir, "ctl")  # short: a unix socket path must fit in 108 bytes

    def start(self) -> None:
        reason = missing_reason()
        if reason:
            raise PowerCutError(reason)
        for d in (self.live, self.scratch, self.mount):
            d.mkdir(parents=True, exist_ok=True)
        self._sockdir = tempfile.mkdtemp(prefix="pcfs-")
        cmd = [sys.executable, str(SERVER), "--live", str(self.live), "--scratch", str(self.scratch),
               "--mount", str(self.mount), "--control", self.control_path, "--model", self.model]
        if self.debug:
            cmd.append("--debug")
        with open(self.log_path, "ab") as logf:
            self._proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=logf, stderr=logf, start_new_session=True)
        deadline = time.monotonic() + self.timeout
        try:
            while True:
                if self._proc.poll() is not None:
                    raise PowerCutError("the FUSE server exited with %s: %s" % (self._proc.returncode, self.server_log()))
                if os.path.exists(self.control_path):
                    try:
                        self.request({"cmd": "ping"}, timeout=2.0)
                        break
                    except (OSError, PowerCutError):
                        pass
                if time.monotonic() > deadline:
                    raise PowerCutError("the FUSE server did not come up in %.0f s: %s" % (self.timeout, self.server_log()))
                time.sleep(0.02)
            if not is_mounted(self.mount):
                raise PowerCutError("the server answers but %s is not mounted: %s" % (self.mount, self.server_log()))
        except BaseException:
            self.close()
            raise
        log.info("power-cut layer (%s) mounted on %s", self.model, self.mount)

    def close(self) -> None:
        """Unmount and stop the server, whatever state it is in (idempotent)."""
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.poll() is None:
                try:
                    self.request({"cmd": "quit"}, timeout=5.0, proc=proc)
                except (OSError, PowerCutError) as e:
                    log.warning("quit request failed (%s); unmounting by force", e)
            try:
                proc.wait(timeout=10.0)
            except subprocess.TimeoutExpired:
                log.warning("FUSE server %d did not exit; unmounting and killing it", proc.pid)
        for args in (["-u"], ["-u", "-z"]):
            if not is_mounted(self.mount):
                break
            r = subprocess.run(["fusermount3", *args, str(self.mount)], capture_output=True, timeout=30)
            if r.returncode:
                log.warning("fusermount3 %s: %s", " ".join(args), r.stderr.decode(errors="replace").strip())
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10.0)
        if self._sockdir is not None:
            shutil.rmtree(self._sockdir, ignore_errors=True)
            self._sockdir = None
        if is_mounted(self.mount):
            raise PowerCutError("%s is still mounted after fusermount3 -u -z" % self.mount)

    def writer_env(self, env: dict[str, str] | None = None) -> dict[str, str]:
        """An environment for a writer process on the mount (a copy of ``env``, default ``os.environ``) with
        the fallocate shim preloaded: a posix_fallocate the writer is killed in is then all or nothing, as on
        a disk with fallocate, instead of a file cut at a 4 KiB block (glibc's fallback on this mount)."""
        out = dict(os.environ if env is None else env)
        preload = out.get("LD_PRELOAD", "")
        out["LD_PRELOAD"] = ("%s %s" % (fallocate_shim(), preload)).strip()
        return out

    def server_log(self, tail: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-tail:]
        except OSError:
            return "(no server log)"

    # -- control -------------------------------------------------------------------------------

    def request(self, req: dict[str, Any], timeout: float | None = None, proc: Any = None) -> dict[str, Any]:
        """One control request; raises :class:`PowerCutError` on a refusal or after ``timeout`` seconds."""
        if self._sockdir is None:
            raise PowerCutError("the layer is not running")
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout if timeout is not None else self.timeout)
            try:
                s.connect(self.control_path)
                s.sendall(json.dumps(req).encode() + b"\n")
                buf = b""
                while not buf.endswith(b"\n"):
                    chunk = s.recv(65536)
                    if not chunk:
                        raise PowerCutError("the server closed the control channel: %s" % self.server_log())
                    buf += chunk
            except TimeoutError:
                raise PowerCutError("no answer to %r in time" % (req.get("cmd"),)) from None
        reply = json.loads(buf)
        if not reply.pop("ok", False):
            raise PowerCutError("server refused %r: %s" % (req.get("cmd"), reply.get("error")))
        return reply

    def stats(self) -> dict[str, Any]:
        """Counters: pending_files/ops/writes/bytes, writes, write_bytes, extensions, fsync, fdatasync,
        fsyncdir, truncates, crashed, ignored_after_crash."""
        return self.request({"cmd": "stats"})

    def crash(self, mode: str = "drop", seed: int = 0, keep_prob: float = 0.5, torn_file: str | None = None,
              out: Path | str | None = None) -> Path:
        """Cut the power (freezing the durable state at the first call) and return a folder holding what
        the disk holds under ``mode`` (one of :data:`CRASH_MODES`). ``torn_file`` (path relative to the
        mount) picks the file whose last write is torn. Details of what was kept: :attr:`last_crash`."""
        if mode not in CRASH_MODES:
            raise ValueError("crash mode must be one of %s" % (CRASH_MODES,))
        if out is None:
            self._crashes += 1
            out = self.base / ("crash-%d" % self._crashes)
        req = {"cmd": "crash", "out": str(out), "mode": mode, "seed": seed, "keep_prob": keep_prob,
               "torn_file": torn_file}
        self.last_crash = self.request(req, timeout=max(self.timeout, 120.0))
        return Path(out)


# -- what the rounds share ----------------------------------------------------------------------------------------

class _Acked(Protocol):
    offset: int
    size: int
    flushed: int


A = TypeVar("A", bound=_Acked)


def durable(acks: list[A], mode: str = "async") -> list[A]:
    """What a cut may not take: SYNC_FLUSH (``mode`` "sync") every ack; otherwise the acknowledged messages below
    the highest flushed offset any put saw on return (each ack's ``flushed``): on disk before the cut, whatever
    the flush mode."""
    if mode == "sync":
        return acks
    flushed = max((a.flushed for a in acks), default=0)
    return [a for a in acks if a.offset + a.size <= flushed]


def seeded() -> random.Random:
    """A round's random source: its seed printed, and ``PYSTORE_POWERLOSS_SEED`` replays one."""
    seed = int(os.environ.get("PYSTORE_POWERLOSS_SEED", str(random.SystemRandom().randrange(1 << 30))))
    print("seed", seed)
    return random.Random(seed)


def stop_writer(p: Any, rng: random.Random, dies_at: str | None, delay: tuple[float, float], wait_s: float) -> str:
    """End a round's writer process: wait for it to kill itself at its crash point (``dies_at`` says where, for
    the report), or SIGKILL it after a seeded delay in ``delay`` seconds. Says when it died."""
    from writer_procs import kill, wait_killed_by_crashpoint  # tests/ is on sys.path (tests/conftest.py)

    if dies_at is not None:
        wait_killed_by_crashpoint(p, wait_s)
        return dies_at
    pause = rng.uniform(*delay)
    time.sleep(pause)
    kill(p)
    return "at %.2f s" % pause
