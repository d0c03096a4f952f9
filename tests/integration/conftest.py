"""In-process sidecars on real sockets, and the client calls every integration test repeats."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from typing import Any

import pytest
from infercache.v1 import cache_pb2 as pb
from infercache_client import AsyncCacheClient, make_key

from sidecar.config import load_config
from sidecar.observability.stats import CacheStats
from sidecar.server import RunningServer, start_server


class Sidecar:
    """A started sidecar (grpc.aio on 127.0.0.1:<free port>) and a client connected to it."""

    def __init__(self, running: RunningServer, client: AsyncCacheClient) -> None:
        self.running = running
        self.client = client

    @property
    def target(self) -> str:
        """host:port of the data plane."""
        return f"127.0.0.1:{self.running.ports[0]}"

    @property
    def stats(self) -> CacheStats:
        """The cache's counters."""
        return self.running.cache.stats

    async def store(
        self, key: pb.CacheKey, payload: bytes, ttl_seconds: int = 0
    ) -> pb.StoreResponse:
        """Lookup for a lease (must MISS), then Store with it: the client protocol."""
        miss = await self.client.lookup(key)
        assert miss.outcome == pb.LOOKUP_OUTCOME_MISS, miss
        return await self.client.store(key, payload, lease=miss.lease, ttl_seconds=ttl_seconds)


StartSidecar = Callable[..., Awaitable[Sidecar]]


@pytest.fixture
async def start_sidecar() -> AsyncIterator[StartSidecar]:
    """Factory: start_sidecar(setting=value, ...) starts a sidecar; all stop after the test.

    Settings are Config field names with text values, as `infercache serve` flags take them.
    The admin plane and /metrics are off unless asked for, so tests never collide on
    their default ports.
    """
    async with AsyncExitStack() as stack:

        async def start(**settings: str) -> Sidecar:
            overrides = {
                "listen": "127.0.0.1:0",
                "admin_listen": "",
                "metrics_listen": "",
                "uvloop": "false",
            }
            config = load_config({}, overrides | settings)
            running = await start_server(config)
            stack.push_async_callback(running.stop, 0)
            client = AsyncCacheClient(f"127.0.0.1:{running.ports[0]}")
            stack.push_async_callback(client.close)
            return Sidecar(running, client)

        yield start


def key(text: str = "How do I reset my password?", **dims: Any) -> pb.CacheKey:
    """A CacheKey for `text` with test defaults for the required dimensions."""
    fields: dict[str, Any] = {
        "tenant": "acme",
        "model_version": "fp1-test",
        "prompt_version": "support-v3",
    }
    return make_key(text=text, **(fields | dims))
