"""Background reclaim: physically remove entries that invalidation rules killed.

Correctness never depends on this (dead entries are refused on read); it only
frees memory. One sidecar of a fleet does it at a time (a store lock), at a
bounded scan rate, in small batches that yield to serving between them.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import structlog

from sidecar import entries
from sidecar.config import DEFAULTS
from sidecar.errors import TierUnavailable
from sidecar.invalidation.rules import RuleSet
from sidecar.invalidation.store import ControlStore
from sidecar.keys import KeyDigest, dims_from_material
from sidecar.observability.stats import CacheStats
from sidecar.tiers.base import WarmTier
from sidecar.tiers.hot import HotTier

log = structlog.get_logger("infercache.reclaim")

_BATCH = 200
_LOCK = "reclaim"


class Reclaimer:
    """Scans the warm tier (and the hot tier) after new rules and unlinks dead entries."""

    def __init__(
        self,
        warm: WarmTier,
        hot: HotTier,
        control: ControlStore,
        rules: RuleSet,
        stats: CacheStats,
        *,
        keys_per_s: int = DEFAULTS.invalidation.reclaim_keys_per_s,
        rule_retention_s: int = 90_000,
    ) -> None:
        self.warm = warm
        self.hot = hot
        self.control = control
        self.rules = rules
        self.stats = stats
        self.keys_per_s = keys_per_s
        self.rule_retention_s = rule_retention_s
        self._owner = uuid.uuid4().hex
        self._done_epoch = 0
        self._hot_done_epoch = 0

    def _dead(self, head: bytes) -> bool:
        peeked = entries.peek(head)
        if peeked is None:
            return False
        dims = dims_from_material(peeked[1])
        return dims is not None and self.rules.is_dead(dims, peeked[0])

    def reclaim_hot(self) -> int:
        """Drop dead entries from the hot tier; returns how many."""
        dead = [
            d
            for d, e in self.hot.entries()
            if (dims := dims_from_material(e.material)) and self.rules.is_dead(dims, e.epoch)
        ]
        for d in dead:
            self.hot.discard(d)
        return len(dead)

    async def run_pass(self) -> int:
        """One full, rate-limited scan of the warm tier; returns entries removed."""
        target = self.rules.epoch
        removed = 0
        cursor, started = 0, time.monotonic()
        scanned = 0
        while True:
            cursor, page = await self.warm.scan_page(cursor, _BATCH)
            scanned += len(page)
            dead: list[KeyDigest] = [d for d, head in page if self._dead(head)]
            if dead:
                await self.warm.delete_many(dead)
                removed += len(dead)
                self.stats.reclaimed += len(dead)
            if cursor == 0:
                break
            # Rate limit: never scan faster than keys_per_s on average.
            ahead = scanned / self.keys_per_s - (time.monotonic() - started)
            await asyncio.sleep(max(ahead, 0.0))
        self._done_epoch = target
        return removed

    async def run_forever(self, idle_s: float = 1.0) -> None:
        """Run a pass whenever rules newer than the last pass exist; prune old rules."""
        last_prune = 0.0
        while True:
            try:
                if self.rules.epoch > self._hot_done_epoch:
                    # Every sidecar cleans its own memory; only one scans the shared store.
                    self._hot_done_epoch = self.rules.epoch
                    self.stats.reclaimed += self.reclaim_hot()
                if self.rules.epoch > self._done_epoch and await self.control.try_lock(
                    _LOCK, self._owner, 60_000
                ):
                    n = await self.run_pass()
                    log.info("reclaimed", entries=n, epoch=self._done_epoch)
                if time.monotonic() - last_prune > 600:
                    # The store picks the cutoff (its clock, the fleet's retention);
                    # local rules are pruned at the same cutoff, never by our clock.
                    cutoff, _ = await self.control.prune_rules(self.rule_retention_s * 1000)
                    self.rules.prune(cutoff)
                    last_prune = time.monotonic()
            except TierUnavailable as exc:
                log.warning("reclaim_failed", error=str(exc))
            except Exception:  # a bug must cost one pass, never the task for good
                log.exception("reclaim_pass_crashed")
            await asyncio.sleep(idle_s)
