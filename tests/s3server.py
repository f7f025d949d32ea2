"""An S3 server for the archive tests: moto's ``ThreadedMotoServer`` on 127.0.0.1, in this process.

* ``S3Server`` — ``start()`` (port 0 picks a free port the first time; later starts reuse it), ``stop()``,
  ``restart()``, ``running``, ``endpoint`` (``"127.0.0.1:PORT"``), ``options()`` (the ``pyarrow.fs.S3FileSystem``
  keywords that reach it), ``filesystem()``, ``create_bucket()``, ``delete_bucket()``, ``reset()``. It is also a
  context manager.
* ``s3_archive`` (fixture) — ``(uri, options)`` of a fresh bucket, ``s3://<bucket>/archive``, on a server
  shared by the session; the bucket is deleted after the test. Skips only when moto is not installed or its
  server cannot start.
* ``s3_server`` (fixture) — a private, started ``S3Server`` for a test that stops and restarts it.

Usage (``tests/`` is on the path: the test modules import their helpers by name)::

    pytest_plugins = ["s3server"]       # the fixtures (importing them by name trips ruff's F811)

    def test_x(s3_archive):
        uri, options = s3_archive
        target = open_target(uri, options)

What survives a restart: moto keeps buckets, objects and unfinished multipart uploads in process-wide
backends, not in the server, so ``stop()`` then ``start()`` on the same port finds them all as they were
(every ``S3Server`` of the process sees the same buckets, too). A restart is therefore an outage, not a
loss of data; ``reset()`` (moto's ``/moto-api/reset``) is the loss of everything, in every server.

``stop()`` is abrupt: it stops accepting, then cuts the connections of requests still being served (werkzeug
would otherwise finish them on their own threads), so a client in the middle of an upload sees its
connection reset, as when a real server dies.
"""

from __future__ import annotations

import logging
import socket
import threading
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

ACCESS_KEY = "testing"
SECRET_KEY = "testing"
REGION = "us-east-1"

# werkzeug logs one INFO line per request; errors stay visible (pytest shows them for a failed test)
logging.getLogger("werkzeug").setLevel(logging.WARNING)


class S3ServerError(RuntimeError):
    """moto's server could not start (its port taken, moto missing)."""


class S3Server:
    """moto's S3 on ``127.0.0.1:port`` in a thread; stop and start it again on the same port at will."""

    def __init__(self, port: int = 0) -> None:
        self.port = port
        self._moto: Any = None
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()

    @property
    def endpoint(self) -> str:
        return "127.0.0.1:%d" % self.port

    @property
    def running(self) -> bool:
        return self._moto is not None

    def options(self) -> dict[str, Any]:
        """The ``pyarrow.fs.S3FileSystem`` keywords that reach this server."""
        return {"endpoint_override": self.endpoint, "scheme": "http", "access_key": ACCESS_KEY,
                "secret_key": SECRET_KEY, "region": REGION}

    def start(self) -> S3Server:
        if self._moto is not None:
            return self
        try:
            from moto.moto_server.werkzeug_app import MotoRequestHandler
            from moto.server import ThreadedMotoServer
        except ImportError as e:
            raise S3ServerError("moto[server] is not installed: %s" % e) from e
        owner = self

        class Handler(MotoRequestHandler):
            def setup(self) -> None:
                super().setup()
                with owner._lock:
                    owner._conns.add(self.connection)

            def finish(self) -> None:
                with owner._lock:
                    owner._conns.discard(self.connection)
                super().finish()

        class Moto(ThreadedMotoServer):
            error: BaseException | None = None

            def _server_entry(self) -> None:
                # moto's start() waits for an event its thread sets only once the socket is bound: a bind
                # that fails (port taken) would leave start() waiting for ever
                try:
                    super()._server_entry()
                except BaseException as e:
                    self.error = e
                    self._server_ready_event.set()

        moto = Moto(ip_address="127.0.0.1", port=self.port, verbose=False)
        moto.start()
        if moto.error is not None:
            # werkzeug reports a taken port by printing and calling sys.exit(1)
            why = "port in use" if isinstance(moto.error, SystemExit) else repr(moto.error)
            raise S3ServerError("moto's S3 server could not listen on 127.0.0.1:%d: %s" % (self.port, why))
        # no client knows the port yet, so no request was handled by moto's own handler class
        moto._server.RequestHandlerClass = Handler
        self.port = moto.get_host_and_port()[1]
        self._moto = moto
        return self

    def stop(self) -> None:
        """Stop accepting and cut the connections in use; the data stays (see the module doc)."""
        moto, self._moto = self._moto, None
        if moto is None:
            return
        moto.stop()
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def restart(self) -> None:
        self.stop()
        self.start()

    def filesystem(self, **extra: Any) -> Any:
        import pyarrow.fs

        return pyarrow.fs.S3FileSystem(**self.options(), **extra)

    def create_bucket(self, name: str | None = None) -> str:
        """Create a bucket (a fresh random name unless given) and return its name."""
        name = name or "pystore-%s" % uuid.uuid4().hex[:16]
        self.filesystem(allow_bucket_creation=True).create_dir(name)
        return name

    def delete_bucket(self, name: str) -> None:
        self.filesystem(allow_bucket_deletion=True).delete_dir(name)

    def reset(self) -> None:
        """Forget every bucket and object of every moto server in this process."""
        urllib.request.urlopen(urllib.request.Request("http://%s/moto-api/reset" % self.endpoint, method="POST"),
                               timeout=10).close()

    def __enter__(self) -> S3Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


_shared: S3Server | None = None


def shared_server() -> S3Server:
    """The session's server, started (again, on its port, if a test stopped it)."""
    global _shared
    if _shared is None:
        _shared = S3Server()
    return _shared.start()


def _start_or_skip(server_factory: Any) -> S3Server:
    try:
        server: S3Server = server_factory()
    except S3ServerError as e:
        pytest.skip("moto's S3 server could not start: %s" % e)
    return server


@pytest.fixture
def s3_archive() -> Iterator[tuple[str, dict[str, Any]]]:
    """``(uri, options)`` for ``open_target``: ``s3://<fresh bucket>/archive`` on the shared moto server."""
    server = _start_or_skip(shared_server)
    bucket = server.create_bucket()
    yield "s3://%s/archive" % bucket, server.options()
    if server.running:
        server.delete_bucket(bucket)


@pytest.fixture
def s3_server() -> Iterator[S3Server]:
    """A private, started ``S3Server`` (its own port) for a test that stops or restarts it; stopped after."""
    server = _start_or_skip(lambda: S3Server().start())
    try:
        yield server
    finally:
        server.stop()
