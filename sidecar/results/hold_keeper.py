"""Keeping this sidecar's single-flight holds alive while their results are computed,
and only then.

A hold is taken with a short TTL (INFERCACHE_LEASE_HOLD_TTL_MS) and renewed every
quarter of it, all of this sidecar's holds in one call, for as long as its result may
still come: until it is stored or released, its lease expires (a Store would be
refused), or an invalidation makes the key's result dead (a Store would be refused as
STALE_LEASE, so nobody should wait for it). A holder that dies, or a hold nobody
computes (one a timed-out read took on Redis after its caller gave up), stops being
renewed and lapses within the TTL: waiters take the key over instead of waiting out
the lease. Renewal only extends a hold its lease still has; one that lapsed or went
to another lease is forgotten, never taken back. A store inside the process (the
embedded one) asks the keeper instead of the TTL (`judge_holds_by`): there the keeper
and the waiters share one event loop, and after a stall longer than the TTL a waiter's
timer could otherwise take over a hold whose computation is running.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import structlog

from sidecar.errors import TierUnavailable
from sidecar.invalidation.rules import Dims, RuleSet
from sidecar.invalidation.store import ControlStore
from sidecar.observability.throttle import LogThrottle
from sidecar.results.lease_tokens import Lease

log = structlog.get_logger("infercache.cache")

MIN_INTERVAL_S = 0.005
"""The shortest pause between renewals, whatever the hold TTL."""

Release = Callable[[Lease], Awaitable[None]]
"""Give a hold back (and wake its local waiters)."""


@dataclass(frozen=True, slots=True)
class _Held:
    lease: Lease
    dims: Dims


class HoldKeeper:
    """Renews the holds registered with `keep` until `drop` (see the module docstring)."""

    def __init__(
        self,
        control: ControlStore,
        rules: RuleSet,
        clock_ms: Callable[[], int],
        hold_ttl_ms: int,
        release: Release,
    ) -> None:
        self.control = control
        self.rules = rules
        self.hold_ttl_ms = hold_ttl_ms
        self.interval_s = max(hold_ttl_ms / 4000, MIN_INTERVAL_S)
        self._clock_ms = clock_ms
        self._release = release
        self._held: dict[bytes, _Held] = {}
        control.judge_holds_by(self.keeps)
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._throttle = LogThrottle()
        self.renewals = 0
        """Renewal calls made (for tests and telemetry)."""

    @property
    def held(self) -> int:
        """Holds being kept now."""
        return len(self._held)

    def keeps(self, lease_id: bytes) -> bool:
        """`lease_id`'s hold is being kept here, and its lease has not expired (a Store
        would still be taken)."""
        h = self._held.get(lease_id)
        return h is not None and h.lease.expires_at_ms > self._clock_ms()

    def keep(self, lease: Lease, dims: Dims) -> None:
        """Renew `lease`'s hold (just taken, for a key of `dims`) until it is dropped."""
        if self._closed:
            return
        self._held[lease.lease_id] = _Held(lease, dims)
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    def drop(self, lease: Lease) -> None:
        """Stop renewing `lease`'s hold (stored, released, or given up)."""
        self._held.pop(lease.lease_id, None)

    async def close(self) -> None:
        """Stop renewing (at shutdown: the holds lapse within their TTL)."""
        self._closed = True
        self._held.clear()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        try:
            while self._held:
                await asyncio.sleep(self.interval_s)
                await self.renew_once()
        finally:
            self._task = None

    async def renew_once(self) -> None:
        """One round: give back the holds whose result can no longer be stored, renew
        the others, forget those renewal found lost."""
        now = self._clock_ms()
        ending: list[Lease] = []
        live: list[_Held] = []
        for h in self._held.values():
            if h.lease.expires_at_ms <= now or self.rules.is_dead(h.dims, h.lease.epoch):
                ending.append(h.lease)
            else:
                live.append(h)
        for lease in ending:
            self.drop(lease)
            await self._release(lease)
        if not live:
            return
        self.renewals += 1
        try:
            renewed = await self.control.renew_holders(
                [(h.lease.digest, h.lease.lease_id) for h in live], self.hold_ttl_ms
            )
        except TierUnavailable as exc:
            # Kept: the next round tries again (a hold lapsing meanwhile costs a second
            # computation at worst, never a wrong answer).
            count = self._throttle.hit("renew_failed")
            if count is not None:
                log.warning("lease_hold_renew_failed", error=str(exc), occurrences=count)
            return
        for h, ok in zip(live, renewed, strict=True):
            if not ok:
                self.drop(h.lease)
