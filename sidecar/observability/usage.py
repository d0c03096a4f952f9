"""How much each result tier holds, readable without awaiting (for metrics and GetStats).

The hot tier is read directly. The warm tier may be Redis, whose size takes a
round trip, so a background loop samples it (`run`); readers get the last sample.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import structlog

from sidecar.errors import TierUnavailable
from sidecar.tiers.base import WarmTier
from sidecar.tiers.hot import HotTier

log = structlog.get_logger("infercache.usage")

UNKNOWN = -1


@dataclass(frozen=True, slots=True)
class TierUsage:
    """Bytes and entries a tier holds (UNKNOWN = -1 when the tier does not say)."""

    name: str
    bytes: int
    entries: int


class TierUsageMonitor:
    """Current usage of the hot tier and the last sampled usage of the warm tier."""

    def __init__(self, hot: HotTier, warm: WarmTier, interval_s: float = 10.0) -> None:
        self._hot = hot
        self._warm = warm
        self._interval_s = interval_s
        self._warm_usage = TierUsage(warm.name, UNKNOWN, UNKNOWN)

    def current(self) -> list[TierUsage]:
        """Hot tier now, warm tier as last sampled (an in-process one, e.g. embedded: now)."""
        now = self._warm.usage()
        if now is not None:
            return [self._hot_usage(), TierUsage(self._warm.name, now[0], now[1])]
        return [self._hot_usage(), self._warm_usage]

    def _hot_usage(self) -> TierUsage:
        return TierUsage("hot", self._hot.nbytes, len(self._hot))

    async def sample(self) -> None:
        """Read the warm tier's entry count once (bytes stay unknown for Redis)."""
        if self._warm.usage() is not None:
            return  # known without a round trip: current() reads it
        try:
            entries = await self._warm.approx_entries()
        except TierUnavailable as exc:
            log.debug("warm_usage_unavailable", error=str(exc))
            return
        self._warm_usage = TierUsage(self._warm.name, UNKNOWN, entries)

    async def run(self) -> None:
        """Sample every interval until cancelled (first after one interval: a start is busy)."""
        while True:
            await asyncio.sleep(self._interval_s)
            await self.sample()
