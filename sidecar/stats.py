"""Counters the cache keeps about itself (exported by telemetry, asserted by tests)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass(slots=True)
class CacheStats:
    """Monotonic counters; mutated only on the event loop."""

    lookups: Counter[str] = field(default_factory=Counter)
    rejected: Counter[str] = field(default_factory=Counter)
    stores: int = 0
    warm_read_failures: int = 0
    warm_write_failures: int = 0
    dead: int = 0
    """Entries found but killed by an invalidation rule."""
    stale_stores: int = 0
    """Stores refused because their lease predates a matching invalidation."""
    reclaimed: int = 0
    """Dead entries physically removed by the background reclaimer."""

    def count_lookup(self, outcome: str, tier: str | None) -> None:
        """Count one lookup by outcome and, for hits, tier ("hit.hot", "miss", ...)."""
        self.lookups[f"{outcome}.{tier}" if tier else outcome] += 1

    def snapshot(self) -> dict[str, int]:
        """Every counter by a flat dotted name."""
        out = {f"lookups.{k}": v for k, v in self.lookups.items()}
        out |= {f"rejected.{k}": v for k, v in self.rejected.items()}
        out |= {
            "stores": self.stores,
            "warm_read_failures": self.warm_read_failures,
            "warm_write_failures": self.warm_write_failures,
            "dead": self.dead,
            "stale_stores": self.stale_stores,
            "reclaimed": self.reclaimed,
        }
        return out

    def count_rejected(self, reason: str) -> None:
        """Count a stored value that failed verification ("corrupt", "foreign")."""
        self.rejected[reason] += 1
