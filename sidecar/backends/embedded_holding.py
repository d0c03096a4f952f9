"""The embedded stores as one HoldingStore: the in-process warm tier and the embedded
control store's holder keys. Nothing here awaits between a read and its hold, so on
the one event loop each call happens at one instant, as the Redis script does."""

from __future__ import annotations

from collections.abc import Sequence

from sidecar.invalidation.embedded_store import EmbeddedControlStore
from sidecar.tiers.base import HeldRead, HoldAsk, WarmItem
from sidecar.tiers.embedded import EmbeddedWarmTier


class EmbeddedHolding:
    """HoldingStore over an EmbeddedWarmTier and the EmbeddedControlStore it reads its
    epoch from (also the fake the cache's tests use)."""

    def __init__(self, warm: EmbeddedWarmTier, control: EmbeddedControlStore) -> None:
        self.warm = warm
        self.control = control

    async def get_or_hold(self, asks: Sequence[HoldAsk]) -> HeldRead:
        """Values and epoch; each absent value's hold tried in order (a repeated key is
        held by its first ask only)."""
        values = self.warm.read_now([a.digest for a in asks])
        held = [
            v is None and self.control.hold_now(a.digest, a.lease_id, a.ttl_ms)
            for a, v in zip(asks, values, strict=True)
        ]
        return HeldRead(values, held, self.control.epoch_now())

    async def put_and_release(self, item: WarmItem, lease_id: bytes) -> None:
        """Write, then release the hold if `lease_id` still has it."""
        self.warm.write_now([item])
        self.control.release_now(item.digest, lease_id)
