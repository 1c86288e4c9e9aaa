"""Bind, run uvicorn, report readiness, stop cleanly: shared by the CLI, the tests and the benchmark.

We bind the socket ourselves (so port 0 works and the real port is known before anything is printed,
and a busy port is a one-line error) and hand it to uvicorn. uvicorn's own signal capture re-raises
SIGTERM after its graceful shutdown, which would end the process with -15; the CLI wants exit status 0,
so signals are handled here instead and only ask the server to exit.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import uvicorn

from desktop_app.engine.errors import UserError
from desktop_app.engine.model.loading import load_model

GRACEFUL_SHUTDOWN_S = 10


def url_for(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port (port 0: any free port); UserError when that is impossible."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as exc:
        raise UserError(f"cannot listen on {host!r}: {exc.strerror or exc}") from None
    sock = socket.socket(family, kind, proto)
    if hasattr(socket, "SO_REUSEADDR") and not hasattr(socket, "SO_EXCLUSIVEADDRUSE"):  # POSIX semantics only
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise UserError(f"cannot listen on {host}:{port}: {exc.strerror or exc} (is another server using the port? "
                        "choose another with --port)") from None
    return sock


class _Uvicorn(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, on_ready: Callable[[], None] | None):
        super().__init__(config)
        self._on_ready = on_ready

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:  # signals are ours (see the module docstring)
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started and not self.should_exit and self._on_ready is not None:
            self._on_ready()


class Server:
    """uvicorn serving `app` on an already bound socket."""

    def __init__(self, app: Any, sock: socket.socket, *, on_ready: Callable[[], None] | None = None):
        self.sock = sock
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on", ws="none",
                                timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S, timeout_keep_alive=5)
        self._server = _Uvicorn(config, on_ready)

    def run(self) -> None:
        """Serve until `stop()` (blocks the calling thread)."""
        try:
            self._server.run(sockets=[self.sock])
        finally:
            self.sock.close()

    def stop(self, force: bool = False) -> None:
        if self._server.should_exit and force:
            self._server.force_exit = True
        self._server.should_exit = True

    @property
    def started(self) -> bool:
        return self._server.started


class ServerThread:
    """The server in a background thread of this process (tests, benchmarks)."""

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0):
        self.host = host
        self.server = Server(app, bind_socket(host, port), on_ready=self._ready_cb)
        self.url = url_for(host, self.server.port)
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self.server.run, name="azr-server", daemon=True)

    def _ready_cb(self) -> None:
        self._ready.set()

    def start(self, timeout: float = 30.0) -> str:
        self._thread.start()
        if not self._ready.wait(timeout):
            raise RuntimeError("the server did not start in time")
        return self.url

    def stop(self, timeout: float = 30.0) -> None:
        self.server.stop()
        self._thread.join(timeout)

    def __enter__(self) -> ServerThread:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def load_served(model_path: str, *, device: str = "auto", max_batch: int = 32, threads: int | None = None) -> Any:
    """Load a model folder (run, checkpoint, export, HF) and its batcher, ready to serve."""
    from desktop_app.server.batcher import Batcher  # lazy: torch
    from desktop_app.server.state import ServedModel, model_id_for  # lazy: fastapi

    loaded = load_model(model_path, device=device)
    return ServedModel(id=model_id_for(model_path), loaded=loaded,
                       batcher=Batcher(loaded, max_rows=max_batch, threads=threads))
