"""Server children of a benchmark: sidecars, redis-server, echo and sink servers.

Each runs in its own session (Ctrl-C reaches only the bench), dies with the bench
(PR_SET_PDEATHSIG on Linux) and is stopped SIGTERM-then-SIGKILL. A sidecar gets a
free port for every listener it serves and an explicit off for every one it does not,
so no two sidecars of a run ever reach for a default address (data, admin, metrics,
health).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import functools
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from tests.support.processes import free_port, redis_command, stop_process

REPO = Path(__file__).resolve().parents[2]


def die_with_parent() -> None:
    """Linux: SIGKILL this process when the bench dies, even by SIGKILL."""
    if sys.platform == "linux":
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def interrupt_on(*signals: signal.Signals) -> None:
    """Make these signals raise KeyboardInterrupt, so they unwind through ExitStacks that
    stop every child (SIGINT explicitly: a shell that starts us in the background leaves
    it ignored)."""
    for sig in signals:
        signal.signal(sig, _raise_interrupt)


def sidecar_env() -> dict[str, str]:
    """The bench's environment without INFERCACHE_* and OTEL_* variables: only flags (and
    what a bench adds on purpose) configure a sidecar."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("INFERCACHE_", "OTEL_"))}


@functools.cache
def fleet_secret_file() -> str:
    """A fleet secret file shared by this run's sidecars (every sidecar on Redis needs
    one since issue 25; the sidecars of one run share their stores, so they share it)."""
    fd, path = tempfile.mkstemp(prefix="infercache-bench-fleet-")
    with os.fdopen(fd, "wb") as f:
        f.write(secrets.token_urlsafe(48).encode())
    atexit.register(os.unlink, path)
    return path


def python(profile_dir: Path | None, name: str) -> list[str]:
    """argv head of a Python child, under cProfile (DIR/<name>.prof) when profile_dir is set."""
    if profile_dir is None:
        return [sys.executable]
    return [sys.executable, "-m", "cProfile", "-o", str(profile_dir / f"{name}.prof")]


@dataclass
class ServerProc:
    """A server child: its own session, output to a temporary file, killed with the bench."""

    name: str
    argv: list[str]
    ports: tuple[int, ...]  # waited for by wait_ready(); the first is the main one
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
        """The child's process id (spawned)."""
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
        stop_process(self.proc)
        if self.log is not None:
            self.log.close()
            self.log = None


def start_all(stack: contextlib.ExitStack[Any], procs: Sequence[ServerProc]) -> None:
    """Spawn every server (stopped together when the stack closes), then wait for all."""
    stack.callback(stop_all, list(procs))
    for p in procs:
        p.spawn()
    for p in procs:
        p.wait_ready()


def stop_all(procs: Sequence[ServerProc], timeout_s: float = 5.0) -> None:
    """SIGTERM every live one at once, then wait (SIGKILL whoever is still up after
    `timeout_s`): n servers take one grace period to stop, not n in turn."""
    live = [p.proc for p in procs if p.proc is not None and p.proc.poll() is None]
    for proc in live:
        proc.terminate()
    deadline = time.monotonic() + timeout_s
    for proc in live:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    for p in procs:
        p.stop()  # every one has exited: this closes its log


def redis_server(data_dir: str, name: str | None = None) -> ServerProc:
    """A throwaway redis-server on a free port (no persistence), named name or redis:<port>."""
    port = free_port()
    return ServerProc(name or f"redis:{port}", redis_command(port, data_dir), (port,))


_HANDED_OUT: set[int] = set()
"""Every port SidecarPorts.free gave out in this process."""


@dataclass(frozen=True, slots=True)
class SidecarPorts:
    """The listeners of one sidecar: data always; admin, /metrics and the health-only
    listener when given a port, switched off otherwise."""

    data: int
    admin: int | None = None
    metrics: int | None = None
    health: int | None = None

    @classmethod
    def free(
        cls, *, admin: bool = False, metrics: bool = False, health: bool = False
    ) -> SidecarPorts:
        """Free ports for the data plane and for each listener asked for."""

        def fresh() -> int:
            # The OS may hand a just-released port out again before anything binds it:
            # never the same port to two listeners of one run.
            while (p := free_port()) in _HANDED_OUT:
                pass
            _HANDED_OUT.add(p)
            return p

        def port(wanted: bool) -> int | None:
            return fresh() if wanted else None

        return cls(fresh(), port(admin), port(metrics), port(health))

    def flags(self) -> list[str]:
        """The listen flags; a listener without a port is switched off, never defaulted."""

        def addr(port: int | None) -> str:
            return "" if port is None else f"127.0.0.1:{port}"

        return [
            f"--listen=127.0.0.1:{self.data}",
            f"--admin-listen={addr(self.admin)}",
            f"--metrics-listen={addr(self.metrics)}",
            f"--health-listen={addr(self.health)}",
        ]

    def all(self) -> tuple[int, ...]:
        """Every port in use: data, then admin, metrics and health (those that are on)."""
        ports = (self.data, self.admin, self.metrics, self.health)
        return tuple(p for p in ports if p is not None)


@dataclass
class SidecarSpec:
    """How to start one sidecar: `python -m <module> serve`-style flags and environment."""

    name: str
    ports: SidecarPorts = field(default_factory=SidecarPorts.free)
    flags: Sequence[str] = ()
    uvloop: bool = True
    module: str = "sidecar"  # what `python -m` runs; "sidecar" gets the `serve` subcommand
    env: dict[str, str] = field(default_factory=dict)  # on top of sidecar_env()
    profile_dir: Path | None = None

    def proc(self) -> ServerProc:
        """The ServerProc (not started); it is ready when every listener accepts."""
        argv = [*python(self.profile_dir, self.name), "-m", self.module]
        if self.module == "sidecar":
            argv.append("serve")
        argv += self.ports.flags()
        argv += ["--log-level", "warning", "--grace-period-s", "1"]
        argv += ["--fleet-secret-file", fleet_secret_file()]
        argv += ["--uvloop", "true" if self.uvloop else "false", *self.flags]
        return ServerProc(self.name, argv, self.ports.all(), env=sidecar_env() | self.env)
