"""How a store writes the warm tier, chosen once when the cache is built (the write side
of warm_read.py): a plain write, or on a HoldingStore the write that also releases the
key's single-flight hold in the same step."""

from __future__ import annotations

from typing import Protocol

from sidecar.results.lease_tokens import Lease
from sidecar.tiers.base import HoldingStore, WarmItem, WarmTier


class WarmWrite(Protocol):
    """One way of writing a stored result to the warm tier."""

    async def write(self, item: WarmItem, lease: Lease | None) -> bool:
        """Write `item`; True when `lease`'s hold was released with it (else the caller
        releases it). TierUnavailable (or TierTimeout) and nothing else on failure."""
        ...


class PlainWrite:
    """The entry alone; the hold is released by a separate call."""

    __slots__ = ("_put_many",)

    def __init__(self, warm: WarmTier) -> None:
        self._put_many = warm.put_many

    async def write(self, item: WarmItem, lease: Lease | None) -> bool:
        """WarmWrite.write: never releases."""
        await self._put_many([item])
        return False


class HoldingWrite:
    """The entry and the release of its lease's hold in one step of a HoldingStore."""

    __slots__ = ("_put_and_release", "_put_many")

    def __init__(self, warm: WarmTier, holding: HoldingStore) -> None:
        self._put_many = warm.put_many
        self._put_and_release = holding.put_and_release

    async def write(self, item: WarmItem, lease: Lease | None) -> bool:
        """WarmWrite.write: releases whenever there is a lease."""
        if lease is None:
            await self._put_many([item])
            return False
        await self._put_and_release(item, lease.lease_id)
        return True


def warm_write(warm: WarmTier, holding: HoldingStore | None) -> WarmWrite:
    """The write stores use: HoldingWrite where there is a HoldingStore, else PlainWrite."""
    return PlainWrite(warm) if holding is None else HoldingWrite(warm, holding)
