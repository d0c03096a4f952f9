"""Process plumbing shared by bench/lookup.py and bench/invalidate.py.

Server children (sidecars, redis-server, echo servers) run in their own session, die with
the bench (PR_SET_PDEATHSIG on Linux) and are stopped SIGTERM-then-SIGKILL; client
workers get an event-loop runner; plus free ports, /proc CPU and load-average readers and
the signal handling that makes Ctrl-C/SIGTERM unwind through the benches' ExitStacks.

The benches run as `python bench/X.py`, so this directory is on sys.path and they
`import common` (spawned client processes inherit that sys.path).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    import asyncio

REPO = Path(__file__).resolve().parent.parent
# What infercache_client.AsyncCacheClient uses by default.
CHANNEL_OPTIONS: list[tuple[str, int]] = [
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
]
CALL_TIMEOUT_S = 10.0


def die_with_parent() -> None:
    """Linux: SIGKILL this process when the bench dies, even by SIGKILL."""
    if sys.platform == "linux":
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name, or None if unreadable."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (all its threads), from /proc."""
    fields = _stat_fields(pid)
    if fields is None:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Usage:
    """A process's (all threads') user and system CPU seconds and syscalls, from /proc."""

    user_s: float
    system_s: float
    syscalls: int

    @classmethod
    def of(cls, pid: int) -> Usage:
        """The process's totals so far (NaN CPU and 0 syscalls if /proc is unreadable)."""
        fields = _stat_fields(pid)
        try:
            io = Path(f"/proc/{pid}/io").read_text()
        except OSError:
            fields = None
        if fields is None:
            return cls(float("nan"), float("nan"), 0)
        tick = os.sysconf("SC_CLK_TCK")
        counts = dict(line.split(": ") for line in io.splitlines() if ": " in line)
        return cls(
            int(fields[11]) / tick,
            int(fields[12]) / tick,
            int(counts.get("syscr", 0)) + int(counts.get("syscw", 0)),
        )

    def __sub__(self, other: Usage) -> Usage:
        return Usage(
            self.user_s - other.user_s,
            self.system_s - other.system_s,
            self.syscalls - other.syscalls,
        )


def load_average() -> str:
    """The 1, 5 and 15 minute load averages as "a b c", or "?"."""
    with contextlib.suppress(OSError):
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    return "?"


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def interrupt_on(*signals: signal.Signals) -> None:
    """Make these signals raise KeyboardInterrupt, so they unwind through ExitStacks that
    stop every child (SIGINT explicitly: a shell that starts us in the background leaves
    it ignored)."""
    for sig in signals:
        signal.signal(sig, _raise_interrupt)


def worker_runner(uvloop: bool) -> asyncio.Runner:
    """For a client worker process: ignore Ctrl-C (the bench handles it and stops us), die
    with the bench, and return an asyncio.Runner on uvloop or the default loop."""
    import asyncio

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent()
    factory = None
    if uvloop:
        import uvloop as uv

        factory = uv.new_event_loop
    return asyncio.Runner(loop_factory=factory)


def sidecar_env() -> dict[str, str]:
    """The bench's environment without INFERCACHE_* variables: only flags configure a
    sidecar."""
    return {k: v for k, v in os.environ.items() if not k.startswith("INFERCACHE_")}


@dataclass
class ServerProc:
    """A server child: its own session (Ctrl-C reaches only the bench), killed with it."""

    name: str
    argv: list[str]
    ports: tuple[int, ...]
    env: dict[str, str] | None = None  # None: inherit the bench's environment
    proc: subprocess.Popen[bytes] | None = None
    log: IO[bytes] | None = None

    def spawn(self) -> None:
        """Start the process, its output going to a temporary file."""
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 (closed in stop())
        self.proc = subprocess.Popen(
            self.argv,
            cwd=REPO,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        """Until every port accepts connections."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout_s
        waiting = list(self.ports)
        while waiting and time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited with {self.proc.returncode}:\n{self.output()}"
                )
            try:
                with socket.create_connection(("127.0.0.1", waiting[0]), timeout=0.2):
                    waiting.pop(0)
            except OSError:
                time.sleep(0.05)
        if waiting:
            raise RuntimeError(f"{self.name} did not listen on {waiting} within {timeout_s} s")

    def start(self, timeout_s: float = 30.0) -> None:
        """spawn() and wait_ready()."""
        self.spawn()
        self.wait_ready(timeout_s)

    @property
    def port(self) -> int:
        """The first (main) port."""
        return self.ports[0]

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def check_alive(self) -> None:
        """Raise (with the process's output) if it has exited."""
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"{self.name} died during the run:\n{self.output()}")

    def output(self) -> str:
        """The last 4000 characters the process wrote."""
        if self.log is None:
            return ""
        self.log.seek(0)
        return self.log.read().decode(errors="replace")[-4000:]

    def stop(self) -> None:
        """SIGTERM (a clean exit lets cProfile write its file), then SIGKILL."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.log is not None:
            self.log.close()
            self.log = None


def start_all(stack: contextlib.ExitStack[Any], procs: Sequence[ServerProc]) -> None:
    """Spawn every server (stopped when the stack closes), then wait for all of them."""
    for p in procs:
        stack.callback(p.stop)
        p.spawn()
    for p in procs:
        p.wait_ready()


def redis_server(port: int, data_dir: str, name: str | None = None) -> ServerProc:
    """A throwaway redis-server on 127.0.0.1:port (no persistence), named name or
    redis:<port>."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server not found (apt-get install redis-server)")
    argv = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
    argv += ["--appendonly", "no", "--dir", data_dir, "--protected-mode", "no"]
    return ServerProc(name or f"redis:{port}", argv, (port,))
