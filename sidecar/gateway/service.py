"""The gateway's listener: uvicorn (httptools parser; HTTP/1.0 answered unchunked,
http10.py) serving GatewayApp inside the sidecar's own event loop.

uvicorn is run on a socket bound here (so a port taken is an error naming the
setting, and port 0 works), and without its signal handling: the sidecar owns
SIGTERM and stops the gateway with the rest (`stop`: stop accepting, let in-flight
requests finish within the grace period, then cancel what is left).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Iterator

import uvicorn

from sidecar.gateway.asgi import GatewayApp
from sidecar.gateway.http10 import Http10Protocol

CLEANUP_S = 5.0
"""How long a stop waits for the cleanup of requests cut at the end of the grace period."""

_UNFINISHED = "ASGI callable returned without completing response."


class _UnfinishedIsInfo(logging.Filter):
    """uvicorn logs a response left unfinished at level error. The gateway leaves one
    unfinished on purpose when it fails after the status went out (an upstream cut
    mid-body, a replay over its duration cap: docs/gateway.md), and logs that itself
    (`gateway_error_after_start`); an error line per such request would page people."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.ERROR and record.getMessage() == _UNFINISHED:
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


_QUIET = _UnfinishedIsInfo()


class _EmbeddedServer(uvicorn.Server):
    """uvicorn.Server that leaves signals to the process it is embedded in."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def bind(listen: str) -> socket.socket:
    """A listening TCP socket on HOST:PORT; OSError naming INFERCACHE_GATEWAY_LISTEN."""
    host, _, port = listen.rpartition(":")
    host = host.strip("[]")
    try:
        infos = socket.getaddrinfo(host or None, int(port), type=socket.SOCK_STREAM)
        family, kind, proto, _, addr = infos[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(2048)
    except (OSError, ValueError) as exc:
        raise OSError(f"INFERCACHE_GATEWAY_LISTEN: cannot listen on {listen}: {exc}") from exc
    sock.setblocking(False)
    return sock


class GatewayServer:
    """Starts and stops the gateway's HTTP listener."""

    def __init__(self, app: GatewayApp, listen: str, grace_s: float) -> None:
        self._sock = bind(listen)
        self.port: int = self._sock.getsockname()[1]
        config = uvicorn.Config(
            app,
            # httptools, with HTTP/1.0 answers never chunked (http10.py).
            http=Http10Protocol,
            lifespan="off",
            log_config=None,
            access_log=False,
            server_header=False,
            # No X-Forwarded-* rewriting: the gateway never reads the client's address,
            # and the middleware costs ~2.5% of a miss's CPU (py-spy, 357 misses).
            proxy_headers=False,
            timeout_graceful_shutdown=max(1, int(grace_s)),
            timeout_keep_alive=30,
        )
        self._server = _EmbeddedServer(config)
        logging.getLogger("uvicorn.error").addFilter(_QUIET)  # the same instance: added once
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Serve; returns once the listener accepts connections."""
        self._task = asyncio.create_task(self._server.serve(sockets=[self._sock]))
        while not self._server.started:
            if self._task.done():
                self._task.result()
                raise OSError("INFERCACHE_GATEWAY_LISTEN: the gateway did not start")
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        """Stop accepting, drain in-flight requests (bounded by the grace period)."""
        if self._task is None:
            self._sock.close()
            return
        self._server.should_exit = True
        await asyncio.gather(self._task, return_exceptions=True)
        # uvicorn cancels the requests that outlive the grace period without waiting for
        # them: their cleanup (a lease's hold given back, so identical requests on other
        # pods do not wait it out) must run before the stores close.
        cut = [t for t in self._server.server_state.tasks if not t.done()]
        if cut:
            await asyncio.wait(cut, timeout=CLEANUP_S)
        self._sock.close()
