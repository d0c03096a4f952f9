"""Sidecars for tests: in-process servers on this event loop, and `infercache serve` processes.

Every listener a test's sidecar opens is on a port of its own: in-process ones on ports
the kernel picks (127.0.0.1:0), processes on free ports; /metrics is off unless asked
for (its default 127.0.0.1:9464 would collide). A process is ready when gRPC health
answers SERVING, the probe the pod's kubelet uses too.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from infercache.v1 import admin_pb2 as admin_pb
from infercache.v1 import admin_pb2_grpc
from infercache.v1 import cache_pb2 as pb
from infercache_client import CacheClient

from sidecar.testing import (
    InProcessSidecar,
    Setting,
    fleet_secret_file_for_tests,
    in_process_sidecar,
    settings_text,
)
from tests.support.processes import REPO, free_port, listening_ports, stop_process

INFERCACHE = Path(sys.executable).with_name("infercache")
"""The console script installed next to this interpreter (what `make run` starts)."""

TOKENS = {"deployer": "deployer-token-0123456789", "pipeline": "pipeline-token-abcdefghij"}
TOKENS_SETTING = ",".join(f"{name}={token}" for name, token in TOKENS.items())
# Fixed so that every sidecar of a test verifies every other one's leases even when
# the store is down at start (then the shared secret cannot be agreed on).
LEASE_SECRET = "lease-secret-for-tests-0123456789"
FLEET_SECRET_FILE = fleet_secret_file_for_tests()
# On a store that just came up (every test flushes Redis), Invalidate waits out one
# freshness bound for members that might predate it; a short bound keeps tests quick.
IN_PROCESS_BOUND_MS = 500


def bearer(name: str = "deployer") -> list[tuple[str, str]]:
    """Authorization metadata for a configured admin token."""
    return [("authorization", f"Bearer {TOKENS[name]}")]


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without any INFERCACHE_* variable, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("INFERCACHE_")}
    return env | extra


def isolated_env(**extra: str) -> dict[str, str]:
    """clean_env for an `infercache serve` run directly (one expected to fail at start):
    data plane on a free port, no admin plane, no /metrics, unless `extra` says otherwise."""
    ports = {
        "INFERCACHE_LISTEN": f"127.0.0.1:{free_port()}",
        "INFERCACHE_ADMIN_LISTEN": "",
        "INFERCACHE_METRICS_LISTEN": "",
    }
    return clean_env(**(ports | extra))


def cli_env(token_name: str | None = "deployer") -> dict[str, str]:
    """Environment for `infercache` admin commands: clean, with that admin token."""
    if token_name is None:
        return clean_env()
    return clean_env(INFERCACHE_ADMIN_TOKEN=TOKENS[token_name])


def config_overrides(redis_url: str | None, **settings: Setting) -> dict[str, str]:
    """Settings of a fleet test sidecar: kernel-picked ports, admin tokens, test deadlines."""
    base: dict[str, Setting] = {
        "listen": "127.0.0.1:0",
        "admin_listen": "127.0.0.1:0",
        "metrics_listen": "",
        "admin_tokens": TOKENS_SETTING,
        "lease_secret": LEASE_SECRET,
        "uvloop": "false",
        "grace_period_s": "1",
        # Production deadlines (50 ms read, 500 ms write) assume a quiet pod; a loaded
        # 2-core CI machine can stall a process longer than that, which would turn a
        # test's expected HIT/STORED into a degraded MISS/WRITE_FAILED. Tests of the
        # deadlines themselves pass their own values.
        "lookup_timeout_ms": "1000",
        "write_timeout_ms": "5000",
    }
    if redis_url:
        base["redis_url"] = redis_url
        if "insecure_dev_no_fleet_secret" not in settings:
            base["fleet_secret_file"] = FLEET_SECRET_FILE
    return settings_text(base | settings)


@dataclass(slots=True)
class Sidecar(InProcessSidecar):
    """An in-process fleet sidecar: data-plane client plus an admin stub with a valid token."""

    admin_channel: grpc.aio.Channel
    admin: Any

    async def invalidate(
        self, reason: str = "test", caller: str = "deployer", **selector: Any
    ) -> admin_pb.InvalidateResponse:
        """Invalidate through the admin plane with a valid token."""
        resp: admin_pb.InvalidateResponse = await self.admin.Invalidate(
            admin_pb.InvalidateRequest(selector=admin_pb.Selector(**selector), reason=reason),
            metadata=bearer(caller),
            timeout=10,
        )
        return resp

    async def audit(self, page_size: int = 0, page_token: str = "") -> list[Any]:
        """One page of the audit log (records, newest first)."""
        resp = await self.admin.ListInvalidations(
            admin_pb.ListInvalidationsRequest(page_size=page_size, page_token=page_token),
            metadata=bearer(),
            timeout=5,
        )
        return list(resp.records)

    async def fill(self, k: pb.CacheKey, payload: bytes) -> pb.StoreResponse:
        """Lookup (must MISS with a lease), then Store with it (must be STORED)."""
        miss = await self.client.lookup(k)
        assert miss.outcome == pb.LOOKUP_OUTCOME_MISS, miss
        assert miss.lease, "a MISS must carry a lease"
        resp = await self.client.store(k, payload, lease=miss.lease)
        assert resp.outcome == pb.STORE_OUTCOME_STORED, resp
        return resp


@asynccontextmanager
async def sidecar(redis_url: str | None = None, **settings: Setting) -> AsyncIterator[Sidecar]:
    """Start an in-process fleet sidecar (embedded stores without redis_url); stop it afterwards."""
    settings.setdefault("freshness_bound_ms", IN_PROCESS_BOUND_MS)
    async with fleet_sidecar(config_overrides(redis_url, **settings)) as sc:
        yield sc


@asynccontextmanager
async def fleet_sidecar(
    settings: Mapping[str, Setting], *, fingerprint: bool = False
) -> AsyncIterator[Sidecar]:
    """sidecar() from complete settings; `fingerprint`: identify the pod from its model_path."""
    async with in_process_sidecar(settings, fingerprint=fingerprint) as base:
        channel = grpc.aio.insecure_channel(base.admin_target)
        try:
            stub = admin_pb2_grpc.AdminServiceStub(channel)
            yield Sidecar(base.running, base.client, channel, stub)
        finally:
            await channel.close()


def health_status(target: str, timeout_s: float = 5.0) -> int | None:
    """The overall grpc.health.v1 status, or None if the server does not answer."""
    with grpc.insecure_channel(target) as channel:
        try:
            resp = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=timeout_s
            )
        except grpc.RpcError:
            return None
    return int(resp.status)


class SidecarProcess:
    """A sidecar in its own process on free ports, its stderr kept in a file.

    By default `python -m sidecar serve` with the fleet test settings (config_overrides)
    at log level warning; `operator=True` runs the installed `infercache serve` with the
    production defaults, only the given settings and free ports, as an operator would.
    """

    def __init__(
        self,
        redis_url: str | None = None,
        *,
        env: Mapping[str, str] | None = None,
        metrics: bool = False,
        operator: bool = False,
        admin: bool | None = None,
        log_path: Path | None = None,
        **settings: Setting,
    ) -> None:
        """`env`: extra environment (OTEL_*, INFERCACHE_*) over a clean one; `metrics`:
        serve /metrics on `metrics_port`; `admin`: serve the admin plane on `admin_port`
        (default: unless operator); `log_path`: where stderr goes (default: a temporary
        file). A `listen` setting replaces the free data-plane port."""
        self._redis_url, self._metrics, self._operator = redis_url, metrics, operator
        self._admin = not operator if admin is None else admin
        self._env, self._log_path = clean_env(**dict(env or {})), log_path
        self._listen = str(settings.pop("listen")) if "listen" in settings else None
        self._settings = settings
        self._spawn()

    def _spawn(self) -> None:
        """Pick free ports and start the process."""
        self.port = free_port()
        self.admin_port = free_port()
        self.metrics_port = free_port() if self._metrics else None
        listen = self._listen or f"127.0.0.1:{self.port}"
        self.target = listen.split(",")[0]
        ports: dict[str, Setting] = {
            "listen": listen,
            "admin_listen": f"127.0.0.1:{self.admin_port}" if self._admin else "",
            "metrics_listen": f"127.0.0.1:{self.metrics_port}" if self.metrics_port else "",
        }
        settings = self._settings
        if self._operator:
            if self._redis_url:
                settings = settings | {"redis_url": self._redis_url}
                named = [*settings, *(k.lower().removeprefix("infercache_") for k in self._env)]
                if not any(k.startswith(("fleet_", "insecure_dev")) for k in named):
                    settings = settings | {"fleet_secret_file": FLEET_SECRET_FILE}
            flags, argv = settings_text(settings | ports), [str(INFERCACHE), "serve"]
            assert INFERCACHE.exists(), f"{INFERCACHE} missing: install the project"
        else:
            settings = {"log_level": "warning"} | settings | ports
            flags = config_overrides(self._redis_url, **settings)
            argv = [sys.executable, "-m", "sidecar", "serve"]
        for name, value in flags.items():
            argv += [f"--{name.replace('_', '-')}", value]
        # A file, not a pipe: a chatty sidecar must never block on a full pipe.
        self._log: IO[bytes] = (
            self._log_path.open("w+b") if self._log_path else tempfile.TemporaryFile()  # noqa: SIM115
        )
        self.proc = subprocess.Popen(
            argv,
            cwd=REPO,
            env=self._env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self._log,
        )

    @property
    def admin_target(self) -> str:
        """Admin-plane address (when served)."""
        return f"127.0.0.1:{self.admin_port}"

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        """Poll gRPC health (bounded) until SERVING; fail if the process exits first.

        A free port can be taken by someone else before the sidecar binds it (other
        suites share the machine): then, on ports it picked itself, it starts again on
        new ones (twice at most)."""
        deadline = time.monotonic() + timeout_s
        respawns = 0
        while True:
            if self.proc.poll() is not None:
                lost_port = "cannot listen on" in self.log() and self._listen is None
                if lost_port and respawns < 2:
                    respawns += 1
                    self._log.close()
                    self._spawn()
                    continue
                raise RuntimeError(f"sidecar exited with {self.proc.returncode}: {self.log()}")
            if self._listens_on_target() and (
                health_status(self.target, 0.5) == health_pb2.HealthCheckResponse.SERVING
            ):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"sidecar not SERVING within {timeout_s} s: {self.log()}")
            time.sleep(0.05)

    def _listens_on_target(self) -> bool:
        """Whether this process (not another one that took the port) holds the target."""
        host, _, port = self.target.rpartition(":")
        if not host or host.startswith("unix") or not port.isdigit():
            return True
        ports = listening_ports(self.proc.pid)
        return ports is None or int(port) in ports

    def freeze(self) -> None:
        """SIGSTOP: a sidecar that is alive but makes no progress (GC pause, CPU starvation)."""
        self.proc.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        """SIGCONT."""
        self.proc.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        """SIGTERM (after SIGCONT), then SIGKILL if it does not exit within a few seconds."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
        stop_process(self.proc)
        self._log.close()

    def stderr(self) -> str:
        """Everything the sidecar wrote to stderr so far (after stop() too, with log_path)."""
        if self._log.closed and self._log_path is not None:
            return self._log_path.read_text(encoding="utf-8", errors="replace")
        self._log.flush()
        self._log.seek(0)
        return self._log.read().decode(errors="replace")

    def log(self) -> str:
        """The last 4000 characters of stderr (for failure messages)."""
        return self.stderr()[-4000:]


def run_cli(*args: str, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run `python -m sidecar ARGS` to completion (for tests without an in-process loop)."""
    return subprocess.run(
        [sys.executable, "-m", "sidecar", *args],
        cwd=REPO,
        env=dict(env) if env is not None else cli_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


StartSidecar = Callable[..., Awaitable[InProcessSidecar]]
"""The start_sidecar fixture: start_sidecar(setting=value, ...) -> InProcessSidecar."""


def admin_invalidate(sidecar: SidecarProcess, **selector: Any) -> admin_pb.InvalidateResponse:
    """One Invalidate through `sidecar`'s admin plane (the deployer's token)."""
    with grpc.insecure_channel(sidecar.admin_target) as channel:
        resp: admin_pb.InvalidateResponse = admin_pb2_grpc.AdminServiceStub(channel).Invalidate(
            admin_pb.InvalidateRequest(selector=admin_pb.Selector(**selector), reason="test"),
            metadata=bearer(),
            timeout=15,
        )
    return resp


def fill(client: CacheClient, k: pb.CacheKey, payload: bytes) -> None:
    """Store `payload` under `k` through a MISS's lease (the key must be a miss)."""
    miss = client.lookup(k)
    assert miss.outcome == pb.LOOKUP_OUTCOME_MISS
    assert client.store(k, payload, lease=miss.lease).outcome == pb.STORE_OUTCOME_STORED
