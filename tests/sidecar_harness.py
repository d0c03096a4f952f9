"""Sidecars for invalidation tests: in-process servers and `infercache serve` subprocesses.

In-process sidecars are started with sidecar.server.start_server on ports the
kernel picks (127.0.0.1:0), so tests never race each other for a port.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from infercache.v1 import admin_pb2 as admin_pb
from infercache.v1 import admin_pb2_grpc
from infercache.v1 import cache_pb2 as pb
from infercache_client import AsyncCacheClient, make_key

from sidecar.config import load_config
from sidecar.server import RunningServer, start_server
from tests.redis_server import free_port

REPO = Path(__file__).resolve().parent.parent

TOKENS = {"deployer": "deployer-token-0123456789", "pipeline": "pipeline-token-abcdefghij"}
TOKENS_SETTING = ",".join(f"{name}={token}" for name, token in TOKENS.items())
# Fixed so that every sidecar of a test verifies every other one's leases even when
# the store is down at start (then the shared secret cannot be agreed on).
LEASE_SECRET = "lease-secret-for-tests-0123456789"


def bearer(name: str = "deployer") -> list[tuple[str, str]]:
    """Authorization metadata for a configured admin token."""
    return [("authorization", f"Bearer {TOKENS[name]}")]


def key(
    text: str = "hello",
    *,
    tenant: str = "acme",
    model_version: str = "m1",
    adapter_version: str = "",
    prompt_version: str = "p1",
) -> pb.CacheKey:
    """A text key; dimensions default to tenant acme, model m1, no adapter, prompt p1."""
    return make_key(
        text=text,
        tenant=tenant,
        model_version=model_version,
        adapter_version=adapter_version,
        prompt_version=prompt_version,
        temperature=0.0,
    )


def config_overrides(redis_url: str | None, **settings: Any) -> dict[str, str]:
    """Settings for a test sidecar: kernel-picked ports, admin tokens, no uvloop, no /metrics."""
    base: dict[str, Any] = {
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
    base.update(settings)
    return {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in base.items()}


@dataclass
class Sidecar:
    """A running in-process sidecar with a data-plane client and an admin stub."""

    running: RunningServer
    client: AsyncCacheClient
    admin_channel: grpc.aio.Channel
    admin: Any

    @property
    def target(self) -> str:
        """Data-plane address."""
        return f"127.0.0.1:{self.running.ports[0]}"

    @property
    def admin_target(self) -> str:
        """Admin-plane address."""
        return f"127.0.0.1:{self.running.admin_ports[0]}"

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
        """Lookup (must MISS), then Store with the lease it handed out."""
        miss = await self.client.lookup(k)
        assert miss.outcome == pb.LOOKUP_OUTCOME_MISS, miss
        assert miss.lease, "a MISS must carry a lease"
        resp = await self.client.store(k, payload, lease=miss.lease)
        assert resp.outcome == pb.STORE_OUTCOME_STORED, resp
        return resp


# On a store that just came up (every test flushes Redis), Invalidate waits out one
# freshness bound for members that might predate it; a short bound keeps tests quick.
IN_PROCESS_BOUND_MS = 500


@asynccontextmanager
async def sidecar(redis_url: str | None = None, **settings: Any) -> AsyncIterator[Sidecar]:
    """Start an in-process sidecar (embedded stores without redis_url); stop it afterwards."""
    settings.setdefault("freshness_bound_ms", IN_PROCESS_BOUND_MS)
    config = load_config({}, config_overrides(redis_url, **settings))
    running = await start_server(config)
    client = AsyncCacheClient(f"127.0.0.1:{running.ports[0]}")
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{running.admin_ports[0]}")
    try:
        yield Sidecar(running, client, channel, admin_pb2_grpc.AdminServiceStub(channel))
    finally:
        await client.close()
        await channel.close()
        await running.stop(0)


def cli_env(token_name: str | None = "deployer") -> dict[str, str]:
    """Environment for `infercache` subprocesses: no INFERCACHE_* leaking in from outside."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("INFERCACHE_")}
    if token_name is not None:
        env["INFERCACHE_ADMIN_TOKEN"] = TOKENS[token_name]
    return env


class SidecarProcess:
    """`python -m sidecar serve` in a subprocess, on free ports."""

    def __init__(
        self,
        redis_url: str,
        *,
        env: Mapping[str, str] | None = None,
        metrics: bool = False,
        **settings: Any,
    ) -> None:
        """`env`: extra environment (OTEL_*); `metrics`: serve /metrics on `metrics_port`."""
        self.port = free_port()
        self.admin_port = free_port()
        self.metrics_port = free_port() if metrics else None
        if self.metrics_port is not None:
            settings["metrics_listen"] = f"127.0.0.1:{self.metrics_port}"
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 (lives as long as the process)
        overrides = config_overrides(
            redis_url,
            listen=f"127.0.0.1:{self.port}",
            admin_listen=f"127.0.0.1:{self.admin_port}",
            log_level="warning",
            **settings,
        )
        args = [sys.executable, "-m", "sidecar", "serve"]
        for name, value in overrides.items():
            args += [f"--{name.replace('_', '-')}", value]
        self.proc = subprocess.Popen(
            args,
            cwd=REPO,
            env=cli_env(None) | dict(env or {}),
            stdout=subprocess.DEVNULL,
            # A file, not a pipe: a chatty sidecar must never block on a full pipe.
            stderr=self._log,
        )

    @property
    def target(self) -> str:
        """Data-plane address."""
        return f"127.0.0.1:{self.port}"

    @property
    def admin_target(self) -> str:
        """Admin-plane address."""
        return f"127.0.0.1:{self.admin_port}"

    def wait_ready(self, timeout_s: float = 20.0) -> None:
        """Poll GetServerInfo until the data plane answers (bounded)."""
        deadline = time.monotonic() + timeout_s
        # A plain RPC with a deadline, not channel_ready_future: each of those futures
        # leaves a polling thread behind that raises "Channel closed" once the channel
        # is closed, and pytest reports that thread's error against a later test.
        with grpc.insecure_channel(self.target) as channel:
            info = channel.unary_unary(
                "/infercache.v1.CacheService/GetServerInfo",
                request_serializer=pb.GetServerInfoRequest.SerializeToString,
                response_deserializer=pb.GetServerInfoResponse.FromString,
            )
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"sidecar exited with {self.proc.returncode}: {self.log()}")
                try:
                    info(pb.GetServerInfoRequest(), timeout=0.2, wait_for_ready=True)
                    return
                except grpc.RpcError:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"sidecar did not start: {self.log()}") from None

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
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()

    def log(self) -> str:
        """What the sidecar wrote to stderr so far."""
        self._log.seek(0)
        return self._log.read().decode(errors="replace")[-4000:]


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
