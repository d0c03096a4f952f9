"""Server processes for tests and benches: free ports, redis-server, the stand-in model server.

Every server listens on 127.0.0.1 on a port nobody else holds (never the shared 6379).
bench/ imports these too, so they depend on nothing but the standard library.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


_PORTS = range(10000, 20000)
"""Where free_port hands ports out: below the kernel's ephemeral range (32768 and up on
Linux), so no port the kernel picks for another process's bind(0) or connect() can be one
of ours, and below 20000 so that a Redis Cluster node's bus (port + 10000) is never a port
this allocator gives out."""

_PORTS_COUNTER = Path(tempfile.gettempdir()) / f"infercache-test-ports-{os.getuid()}"
"""The next port to try, shared by every process of this user on the machine (parallel
pytest workers, the processes they start, benches, other checkouts' runs) under flock."""


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))  # no SO_REUSEADDR: a port in TIME_WAIT is skipped too
        except OSError:
            return False
        return True


def free_port() -> int:
    """A TCP port nobody listens on right now and no other process was handed recently.

    The kernel's bind(0) picks at random, so two parallel test workers could both be given
    a port that is free for an instant, and the second server to bind it fails. A counter
    under an exclusive lock hands each port to one caller; it comes round again only after
    the other 9,999 have been handed out, long after its first holder bound it or let go."""
    with open(_PORTS_COUNTER, "a+", encoding="ascii") as counter:
        fcntl.flock(counter, fcntl.LOCK_EX)  # released when the file closes
        counter.seek(0)
        text = counter.read().strip()
        step = int(text) if text.isdigit() else random.randrange(len(_PORTS))
        for _ in range(len(_PORTS)):
            port = _PORTS[step % len(_PORTS)]
            step += 1
            if _bindable(port):
                break
        else:
            raise RuntimeError(f"no free port in {_PORTS}")
        counter.seek(0)
        counter.truncate()
        counter.write(str(step % len(_PORTS)))
    return port


def listening_ports(pid: int) -> set[int] | None:
    """The TCP ports process `pid` listens on (Linux /proc), or None where /proc cannot tell.

    A server answering on a port is not proof that it is ours: a free port can be taken
    by another process before ours binds it."""
    inodes: set[str] = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return None
    for fd in fds:
        with contextlib.suppress(OSError):  # closed meanwhile
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
            if link.startswith("socket:["):
                inodes.add(link[len("socket:[") : -1])
    ports: set[int] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def stop_process(proc: subprocess.Popen[bytes] | None, timeout_s: float = 5.0) -> None:
    """SIGTERM (a clean exit flushes logs and profiles), then SIGKILL after `timeout_s`."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def redis_binary() -> str:
    """Path of redis-server (scripts/ensure_redis.sh installs it)."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server not found; scripts/ensure_redis.sh installs it")
    return binary


def redis_command(port: int, data_dir: str | Path) -> list[str]:
    """argv of a throwaway redis-server on 127.0.0.1:port: no persistence, files in data_dir."""
    argv = [redis_binary(), "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
    argv += ["--appendonly", "no", "--dir", str(data_dir), "--protected-mode", "no"]
    return argv


def _redis_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    """Spawns, kills and restarts one redis-server bound to 127.0.0.1 on its own port."""

    def __init__(self, port: int | None = None) -> None:
        """`port`: a fixed port (default: a free one, kept across restarts)."""
        self.binary = redis_binary()
        self.port = port if port is not None else free_port()
        self._dir = tempfile.TemporaryDirectory(prefix="ic-redis-")
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """redis:// URL of this server."""
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout_s: float = 10.0) -> None:
        """Start (or restart on the same port) and wait until it answers PING."""
        self.proc = subprocess.Popen(
            redis_command(self.port, self._dir.name),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self.proc.returncode}")
            if _redis_ping(self.port):
                return
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

    def dbsize(self) -> int:
        """Keys in the database."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=2) as s:
            s.sendall(b"DBSIZE\r\n")
            return int(s.recv(64).strip(b":\r\n"))

    def data_dir(self) -> Path:
        """Its working directory."""
        return Path(self._dir.name)


class ModelServerProcess:
    """Starts, restarts and stops `python -m tests.support.model_server` on a free port."""

    def __init__(self) -> None:
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.weights = ""

    @property
    def url(self) -> str:
        """Base URL (what INFERCACHE_MODEL_SERVER_URL is set to)."""
        return f"http://127.0.0.1:{self.port}"

    def start(
        self,
        weights: str,
        *,
        models: tuple[str, ...] = ("tiny",),
        delay_ms: int = 0,
        slow_s: float = 5.0,
        stream_fault: str = "",
        noise: float = 0.0,
    ) -> ModelServerProcess:
        """Start (on the same port after a stop) and wait until /v1/models answers.
        `stream_fault`: how every stream breaks (model_server's --stream-fault); `noise`:
        the fraction of answers that differ run to run (--noise)."""
        self.stop()
        self.weights = weights
        args = [sys.executable, "-m", "tests.support.model_server", "--port", str(self.port)]
        args += ["--weights", weights, "--delay-ms", str(delay_ms), "--slow-s", str(slow_s)]
        if stream_fault:
            args += ["--stream-fault", stream_fault]
        if noise:
            args += ["--noise", str(noise)]
        for m in models:
            args += ["--model", m]
        self.proc = subprocess.Popen(
            args, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 20
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"model server exited with {self.proc.returncode}")
            try:
                with urllib.request.urlopen(self.url + "/v1/models", timeout=0.5):
                    return self
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("model server did not start") from None
                time.sleep(0.05)

    def stats(self) -> dict[str, Any]:
        """{"completions": N, "prompts": [...], "models": [...]} since this process started."""
        with urllib.request.urlopen(self.url + "/stats", timeout=5) as resp:
            stats: dict[str, Any] = json.loads(resp.read())
            return stats

    def change_behaviour(self, system_prompt: str) -> None:
        """Answer from now on as if `system_prompt` were prepended (same weights)."""
        body = json.dumps({"system_prompt": system_prompt}).encode()
        req = urllib.request.Request(self.url + "/control", data=body, method="POST")
        with urllib.request.urlopen(req, timeout=5):
            pass

    def stop(self) -> None:
        """Terminate if running."""
        stop_process(self.proc)
        self.proc = None
