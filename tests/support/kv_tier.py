"""The KV hot tier on an in-memory pool, warm store and clock, for its unit tests."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from sidecar.config import KvConfig
from sidecar.kv.hot_tier import KvHotTier
from sidecar.kv.layout import BlockKey, KvLayout, make_layout
from sidecar.kv.pins import LeaseTable
from sidecar.kv.pool import MemorySlotPool
from sidecar.kv.warm import KvWarmStore, MemoryKvWarmStore

LAYOUT = make_layout(num_layers=2, num_kv_heads=1, head_dim=4, tokens_per_block=2, dtype="float32")
BLOCK = LAYOUT.block_bytes  # 2*2*2*1*4*4 = 128


class Clock:
    """Monotonic seconds that move only when a test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Setup:
    """A hot tier of `slots` slots on fakes, with helpers to attach and put blocks."""

    def __init__(
        self,
        slots: int = 4,
        warm: bool | KvWarmStore = True,
        *,
        pod_fingerprint: str = "",
        allow_foreign: bool = False,
        **settings: Any,
    ) -> None:
        self.clock = Clock()
        self.pools: list[MemorySlotPool] = []
        if isinstance(warm, MemoryKvWarmStore):
            self.warm: MemoryKvWarmStore | None = warm
            self.store: KvWarmStore | None = warm
        elif not isinstance(warm, bool):
            self.warm, self.store = None, warm
        else:
            self.warm = MemoryKvWarmStore() if warm else None
            self.store = self.warm
        self.tier = KvHotTier(
            KvConfig(pool_bytes=slots * BLOCK, **settings).to_settings(),
            self._pool,
            self.store,
            leases=LeaseTable(1000, clock=self.clock),
            clock=self.clock,
            pod_fingerprint=pod_fingerprint,
            allow_foreign=allow_foreign,
        )

    def _pool(self, n: int, size: int) -> MemorySlotPool:
        self.pools.append(MemorySlotPool(n, size))
        return self.pools[-1]

    async def attach(self, fp: str, adapter: str = "", layout: KvLayout = LAYOUT) -> str:
        a, _ = await self.tier.attach(fp, adapter, layout)
        return a.attachment_id

    async def put(
        self, aid: str, hashes: Sequence[bytes], tenant: str = "t", salt: str = ""
    ) -> list[int]:
        """Allocate, write a recognisable pattern, commit and release."""
        slots, lease = await self.tier.allocate(aid, len(hashes))
        for slot, h in zip(slots, hashes, strict=True):
            self.tier.pool.write(slot, pattern(h))
        already = await self.tier.commit(
            aid, lease.lease_id, tenant, salt, list(zip(slots, hashes, strict=True))
        )
        assert not any(already)
        await self.tier.release(aid, lease.lease_id)
        return slots


def pattern(h: bytes) -> bytes:
    return (h * BLOCK)[:BLOCK]


class SlowWarm(MemoryKvWarmStore):
    """A warm store whose reads wait for `gate`."""

    def __init__(self, *, open_gate: bool = False) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        if open_gate:
            self.gate.set()
        self.entered = asyncio.Event()
        """Set when a read starts waiting for the gate."""

    async def get_many(self, version: str, keys: Sequence[BlockKey]) -> list[bytes | None]:
        self.entered.set()
        await self.gate.wait()
        return await super().get_many(version, keys)
