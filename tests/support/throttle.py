"""A bandwidth-limited loopback link: a TCP proxy whose rate can change while it runs.

    proxy = ThrottledProxy(upstream_port)    # listens on 127.0.0.1:proxy.port
    proxy.rate = 2_000_000                   # bytes per second, each direction; None: no limit

Standard library only (the vLLM tests and the bench driver run it, in different venvs).
Each direction of each connection is pumped by its own thread, in chunks of at most
CHUNK bytes, paced by one token bucket per direction shared by every connection: what a
slow network link between a sidecar and its Redis looks like to both.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable

CHUNK = 16 << 10


class _Bucket:
    """Paces bytes at `rate()` per second (no burst beyond one chunk)."""

    def __init__(self, rate: Callable[[], float | None]) -> None:
        self._rate = rate
        self._lock = threading.Lock()
        self._free_at = time.monotonic()

    def take(self, n: int) -> None:
        rate = self._rate()
        if rate is None:
            return
        with self._lock:
            now = time.monotonic()
            start = max(now, self._free_at)
            self._free_at = start + n / rate
            wait = self._free_at - now
        if wait > 0:
            time.sleep(wait)


class ThrottledProxy:
    """127.0.0.1:port -> 127.0.0.1:upstream_port, at `rate` bytes/s per direction."""

    def __init__(self, upstream_port: int, rate: float | None = None) -> None:
        """Start listening (a daemon thread accepts)."""
        self.rate = rate
        self._upstream = upstream_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._down = _Bucket(lambda: self.rate)
        self._up = _Bucket(lambda: self.rate)
        self._socks: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, name="throttle-accept", daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self._upstream))
            except OSError:
                client.close()
                continue
            self._socks += [client, upstream]
            for src, dst, bucket in ((client, upstream, self._up), (upstream, client, self._down)):
                threading.Thread(
                    target=self._pump, args=(src, dst, bucket), name="throttle-pump", daemon=True
                ).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket, bucket: _Bucket) -> None:
        try:
            while True:
                data = src.recv(CHUNK)
                if not data:
                    break
                bucket.take(len(data))
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        """Stop accepting and cut every connection."""
        self._closed = True
        self._listener.close()
        for s in self._socks:
            with contextlib.suppress(OSError):
                s.close()
