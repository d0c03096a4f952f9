"""Test helpers for code that uses the sidecar: an in-process sidecar, a flaky warm tier, a clock.

The counterpart of structlog.testing or OpenTelemetry's in-memory exporters, for
downstream projects as much as for this one's tests (it needs no test framework)::

    async with in_process_sidecar(hot_max_entries=100) as sc:
        miss = await sc.client.lookup(key)
        await sc.client.store(key, b"answer", lease=miss.lease)

    clock = Clock()
    warm = FlakyWarmTier(clock)  # a WarmTier; set warm.down = True to make it fail
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from infercache.v1 import cache_pb2 as pb
from infercache_client import AsyncCacheClient

from sidecar.app import identify_pod
from sidecar.config import load_config
from sidecar.errors import TierUnavailable
from sidecar.host import RunningServer, start_server
from sidecar.keys import KeyDigest
from sidecar.observability.stats import CacheStats
from sidecar.observability.telemetry import Telemetry
from sidecar.tiers.base import WarmItem
from sidecar.tiers.embedded import EmbeddedWarmTier

T0_MS = 1_700_000_000_000
"""Where a Clock starts: a fixed, realistic epoch time in milliseconds."""

Setting = str | int | float | bool

ISOLATED: dict[str, str] = {
    "listen": "127.0.0.1:0",
    "admin_listen": "",
    "metrics_listen": "",
    "uvloop": "false",
}
"""What in_process_sidecar starts from: the data plane on a port the kernel picks, no
admin plane and no /metrics (their default ports would collide between sidecars), and
the test's own event loop."""


TEST_FLEET_SECRET = b"fleet-secret-for-tests-0123456789abcdefghijklmnop"
"""The fleet secret of every test sidecar on Redis (they are one fleet)."""


def fleet_secret_file_for_tests() -> str:
    """A file holding TEST_FLEET_SECRET (mode 0600, one per user in the temporary
    directory), for INFERCACHE_FLEET_SECRET_FILE."""
    path = Path(tempfile.gettempdir()) / f"infercache-test-fleet-secret-{os.getuid()}"
    if not path.exists() or path.read_bytes() != TEST_FLEET_SECRET:
        tmp = path.with_suffix(f".{os.getpid()}")
        tmp.write_bytes(TEST_FLEET_SECRET)
        tmp.chmod(0o600)
        tmp.replace(path)
    return str(path)


class Clock:
    """A millisecond clock that moves only when told to (pass it as `clock_ms=`)."""

    def __init__(self, start_ms: int = T0_MS) -> None:
        self.now = start_ms

    def __call__(self) -> int:
        return self.now

    def advance(self, seconds: float) -> None:
        """Move the clock forward by `seconds`."""
        self.now += int(seconds * 1000)


class FlakyWarmTier:
    """An embedded warm tier that can be switched off: then every call raises TierUnavailable.

    `reads` counts the read calls that reached the tier.
    """

    def __init__(self, clock: Clock) -> None:
        self.inner = EmbeddedWarmTier(10**8, 10**6, clock_ms=clock)
        self.name = "flaky"
        self.down = False
        self.reads = 0

    def _check(self) -> None:
        if self.down:
            raise TierUnavailable("flaky: down")

    async def get_many(self, digests: Sequence[KeyDigest]) -> list[bytes | None]:
        """The embedded tier's answer, unless down."""
        self._check()
        self.reads += 1
        return await self.inner.get_many(digests)

    async def get_many_with_epoch(
        self, digests: Sequence[KeyDigest]
    ) -> tuple[list[bytes | None], int]:
        """The embedded tier's answer and epoch, unless down."""
        self._check()
        self.reads += 1
        return await self.inner.get_many_with_epoch(digests)

    async def put_many(self, items: Sequence[WarmItem]) -> None:
        """Store, unless down."""
        self._check()
        await self.inner.put_many(items)

    async def delete_many(self, digests: Sequence[KeyDigest]) -> None:
        """Delete, unless down."""
        self._check()
        await self.inner.delete_many(digests)

    async def scan_page(self, cursor: int, count: int) -> tuple[int, list[tuple[KeyDigest, bytes]]]:
        """One page of entries, unless down."""
        self._check()
        return await self.inner.scan_page(cursor, count)

    async def approx_entries(self) -> int:
        """The embedded tier's entry count, unless down."""
        self._check()
        return await self.inner.approx_entries()

    def usage(self) -> tuple[int, int]:
        """The embedded tier's (bytes, entries), even when down (it is local memory)."""
        return self.inner.usage()

    async def ping(self) -> None:
        """Raise TierUnavailable when down."""
        self._check()

    async def close(self) -> None:
        """Close the embedded tier (even when down)."""
        await self.inner.close()


def settings_text(settings: Mapping[str, Setting]) -> dict[str, str]:
    """Setting values as `infercache serve` flags take them (booleans as true/false)."""
    return {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in settings.items()}


@dataclass(slots=True)
class InProcessSidecar:
    """A sidecar served on this event loop, and a data-plane client connected to it."""

    running: RunningServer
    client: AsyncCacheClient

    @property
    def target(self) -> str:
        """host:port of the data plane."""
        return f"127.0.0.1:{self.running.ports[0]}"

    @property
    def admin_target(self) -> str:
        """host:port of the admin plane (started with admin_listen set)."""
        return f"127.0.0.1:{self.running.admin_ports[0]}"

    @property
    def stats(self) -> CacheStats:
        """The cache's counters."""
        return self.running.cache.stats

    async def store(
        self, key: pb.CacheKey, payload: bytes, ttl_seconds: int = 0
    ) -> pb.StoreResponse:
        """Lookup for a lease (AssertionError unless it is a MISS), then Store with it."""
        miss = await self.client.lookup(key)
        if miss.outcome != pb.LOOKUP_OUTCOME_MISS:
            raise AssertionError(f"expected a MISS to store under, got {miss}")
        return await self.client.store(key, payload, lease=miss.lease, ttl_seconds=ttl_seconds)


@asynccontextmanager
async def in_process_sidecar(
    settings: Mapping[str, Setting] | None = None,
    *,
    fingerprint: bool = False,
    telemetry: Telemetry | None = None,
    **more: Setting,
) -> AsyncIterator[InProcessSidecar]:
    """Start a sidecar on this event loop with a client; stop both on exit.

    `settings` and `more` are Config field names with values (`redis_url="redis://..."`,
    `hot_max_entries=0`), applied over ISOLATED; no environment variable is read.
    `fingerprint`: measure the configured model_path and adapters as `infercache serve`
    does (default: no model identity). `telemetry`: the caller's providers (default:
    configured from the settings and shut down on exit). On Redis, the sidecar signs
    with TEST_FLEET_SECRET unless the settings name a fleet secret or the dev switch.
    """
    given = settings_text({**(settings or {}), **more})
    if given.get("redis_url") and not any(
        k in given for k in ("fleet_secret_file", "insecure_dev_no_fleet_secret")
    ):
        given["fleet_secret_file"] = fleet_secret_file_for_tests()
    config = load_config({}, ISOLATED | given)
    pod = await identify_pod(config) if fingerprint else None
    running = await start_server(config, pod, telemetry)
    try:
        client = AsyncCacheClient(f"127.0.0.1:{running.ports[0]}")
        try:
            yield InProcessSidecar(running, client)
        finally:
            await client.close()
    finally:
        await running.stop(0)
