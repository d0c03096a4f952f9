"""TierUsageMonitor: an in-process warm tier is read now, a remote one as last sampled."""

from __future__ import annotations

from collections.abc import Sequence

from sidecar.errors import TierUnavailable
from sidecar.keys import KeyDigest
from sidecar.observability.usage import UNKNOWN, TierUsage, TierUsageMonitor
from sidecar.tiers.base import WarmItem
from sidecar.tiers.embedded import EmbeddedWarmTier
from sidecar.tiers.hot import HotTier


def digest(n: int) -> KeyDigest:
    return KeyDigest(n.to_bytes(32, "big"))


class RemoteWarmTier:
    """An embedded tier that, like Redis, knows its usage only through a round trip."""

    name = "remote"

    def __init__(self) -> None:
        self.inner = EmbeddedWarmTier(10**8, 10**6)
        self.down = False
        self.counted = 0

    async def get_many(self, digests: Sequence[KeyDigest]) -> list[bytes | None]:
        return await self.inner.get_many(digests)

    async def get_many_with_epoch(
        self, digests: Sequence[KeyDigest]
    ) -> tuple[list[bytes | None], int]:
        return await self.inner.get_many_with_epoch(digests)

    async def put_many(self, items: Sequence[WarmItem]) -> None:
        await self.inner.put_many(items)

    async def delete_many(self, digests: Sequence[KeyDigest]) -> None:
        await self.inner.delete_many(digests)

    async def scan_page(self, cursor: int, count: int) -> tuple[int, list[tuple[KeyDigest, bytes]]]:
        return await self.inner.scan_page(cursor, count)

    async def approx_entries(self) -> int:
        if self.down:
            raise TierUnavailable("remote: down")
        self.counted += 1
        return await self.inner.approx_entries()

    def usage(self) -> None:
        return None

    async def ping(self) -> None:
        pass

    async def close(self) -> None:
        await self.inner.close()


async def test_embedded_warm_usage_is_read_now_and_never_sampled() -> None:
    """The embedded tier's bytes and entries show at once; sample() leaves them be."""
    warm = EmbeddedWarmTier(10**8, 10**6)
    monitor = TierUsageMonitor(HotTier(10**6, 100), warm)
    await warm.put_many([WarmItem(digest(i), b"x" * 100, 60_000) for i in range(3)])
    hot, now = monitor.current()
    assert hot == TierUsage("hot", 0, 0)
    assert now == TierUsage("embedded", warm.nbytes, 3)
    assert warm.nbytes > 300
    await monitor.sample()
    assert monitor.current()[1] == now


async def test_remote_warm_usage_is_unknown_until_sampled_and_kept_on_failure() -> None:
    """A tier without usage() answers UNKNOWN until sampled; then entries (bytes stay
    unknown), and a failed sample keeps the last one."""
    warm = RemoteWarmTier()
    monitor = TierUsageMonitor(HotTier(10**6, 100), warm)
    await warm.put_many([WarmItem(digest(i), b"x", 60_000) for i in range(2)])
    assert monitor.current()[1] == TierUsage("remote", UNKNOWN, UNKNOWN)
    await monitor.sample()
    assert monitor.current()[1] == TierUsage("remote", UNKNOWN, 2)
    warm.down = True
    await warm.put_many([WarmItem(digest(9), b"x", 60_000)])
    await monitor.sample()
    assert monitor.current()[1] == TierUsage("remote", UNKNOWN, 2)
    assert warm.counted == 1
