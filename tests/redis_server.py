"""A real redis-server process on a free port, for integration tests (never the shared 6379)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class RedisServer:
    """Spawns, kills and restarts one redis-server bound to 127.0.0.1 on its own port."""

    def __init__(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server not found; .ci/run installs it with apt-get")
        self.binary = binary
        self.port = free_port()
        self._dir = tempfile.TemporaryDirectory(prefix="ic-redis-")
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """redis:// URL of this server."""
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout_s: float = 10.0) -> None:
        """Start (or restart on the same port) and wait until it accepts connections."""
        self.proc = subprocess.Popen(
            [
                self.binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                self._dir.name,
                "--protected-mode",
                "no",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self.proc.returncode}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                time.sleep(0.02)
        raise RuntimeError("redis-server did not start in time")

    def kill(self) -> None:
        """SIGKILL: the way a crashed or evicted Redis pod disappears."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def stop(self) -> None:
        """Kill and clean up."""
        self.kill()
        self._dir.cleanup()

    def flushall(self) -> None:
        """Empty the database between tests."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=2) as s:
            s.sendall(b"FLUSHALL\r\n")
            s.recv(16)

    def data_dir(self) -> Path:
        """Its working directory."""
        return Path(self._dir.name)
