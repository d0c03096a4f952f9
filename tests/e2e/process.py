"""`infercache serve` as a real subprocess: start, wait until SERVING, signal, collect logs."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

INFERCACHE = Path(sys.executable).with_name("infercache")
"""The console script installed next to this interpreter (what `make run` starts)."""


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without any INFERCACHE_* variable, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("INFERCACHE_")}
    return env | extra


def health_status(target: str, timeout_s: float = 1.0) -> int | None:
    """The overall grpc.health.v1 status, or None if the server does not answer."""
    with grpc.insecure_channel(target) as channel:
        try:
            resp = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=timeout_s
            )
        except grpc.RpcError:
            return None
    return int(resp.status)


class Served:
    """One `infercache serve` process with its stderr captured in a file."""

    def __init__(self, tmp: Path, *flags: str, env: dict[str, str] | None = None) -> None:
        assert INFERCACHE.exists(), f"{INFERCACHE} missing: install the project (make install)"
        self.stderr_path = tmp / "serve.stderr"
        self._stderr = self.stderr_path.open("wb")
        self.proc = subprocess.Popen(
            [str(INFERCACHE), "serve", "--admin-listen", "", "--metrics-listen", "", *flags],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self._stderr,
            env=env or clean_env(),
        )

    def wait_serving(self, target: str, timeout_s: float = 20.0) -> None:
        """Poll health (bounded) until SERVING; fail if the process exits first."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"serve exited early:\n{self.stderr()}"
            if health_status(target, timeout_s=0.5) == health_pb2.HealthCheckResponse.SERVING:
                return
            time.sleep(0.05)
        raise AssertionError(f"serve not SERVING within {timeout_s} s:\n{self.stderr()}")

    def stderr(self) -> str:
        """Everything written to stderr so far."""
        self._stderr.flush()
        return self.stderr_path.read_text(encoding="utf-8", errors="replace")

    def stop(self) -> None:
        """Kill if still running and release the log file."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._stderr.close()
