"""The gateway's counters (exported as infercache_gateway_requests_total and
infercache_gateway_unknown_fields_total; see observability/metrics.py)."""

from __future__ import annotations

from collections import Counter


class GatewayStats:
    """Counts by outcome label (hit, miss, bypass, refresh, store_*, ...)."""

    __slots__ = ("outcomes", "unknown_fields")

    def __init__(self) -> None:
        self.outcomes: Counter[str] = Counter()
        self.unknown_fields = 0
        """Body fields the key table does not know (keyed in `extra`, reported)."""

    def count(self, label: str) -> None:
        """One more of `label`."""
        self.outcomes[label] += 1

    def snapshot(self) -> dict[str, int]:
        """Counters by name."""
        out = {f"gateway.{k}": v for k, v in sorted(self.outcomes.items())}
        out["gateway.unknown_fields"] = self.unknown_fields
        return out
