"""Single flight: the lease a MISS hands out, the hold that makes one caller compute a
key while others wait for its result, and the release when the result is in (or will
never come).

A lease is signed by LeaseSigner and stamped with the invalidation epoch applied here
when it is issued: a Store brings it back, and a result computed before a later
invalidation is refused. The hold is a key in the control store with a short TTL that
HoldKeeper renews while the result may still come (hold_keeper.py): a holder that
disappears, or a hold nobody computes, stops blocking waiters within that TTL. A take
whose answer did not come in time may still land after its caller gave up: it is given
back at once (and lapses within the TTL should the give-back arrive first). Waiting is
bounded and watched once per key (see waiters.py); each waiter takes only a result it
can use (young enough, and one its caller can answer from).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Protocol, cast

import structlog

from sidecar.config import LeaseConfig
from sidecar.errors import (
    FailedPrecondition,
    InvalidArgument,
    ResourceExhausted,
    TierTimeout,
    TierUnavailable,
)
from sidecar.invalidation.rules import RuleSet
from sidecar.invalidation.store import ControlStore
from sidecar.keys import CacheKey, KeyDigest
from sidecar.observability.stats import CacheStats
from sidecar.observability.throttle import LogThrottle
from sidecar.results.hold_keeper import HoldKeeper
from sidecar.results.issuer import LeaseIssuer
from sidecar.results.lease_tokens import Lease
from sidecar.results.types import LookupQuery, LookupResult, Outcome
from sidecar.results.waiters import Handover, KeyWaiters
from sidecar.results.warm_read import HoldTry

log = structlog.get_logger("infercache.cache")

Spawn = Callable[[Coroutine[Any, Any, None]], None]
"""Run background work the cache drains at shutdown."""

__all__ = ["HoldTry", "LookAgain", "SingleFlight"]


class LookAgain(Protocol):
    """How single flight looks for a key again, without leases (TierReader)."""

    async def find(self, queries: Sequence[LookupQuery]) -> list[LookupResult]:
        """Hot then warm: a waiter's look for the holder's result."""
        ...

    async def recheck(self, queries: Sequence[LookupQuery]) -> list[LookupResult]:
        """The warm tier alone: the look of a caller that just took the key's hold."""
        ...


class SingleFlight:
    """Issues, holds, waits on and releases the leases of one ResultCache."""

    def __init__(
        self,
        control: ControlStore,
        rules: RuleSet,
        issuer: LeaseIssuer,
        stats: CacheStats,
        clock_ms: Callable[[], int],
        reader: LookAgain,
        spawn: Spawn,
    ) -> None:
        """`issuer` makes this cache's leases; `reader` is how waiters and new holders
        look again (single flight calls the reader, never the other way round)."""
        self.control = control
        self.rules = rules
        self.issuer = issuer
        self.signer = issuer.signer
        self.policy: LeaseConfig = issuer.policy
        self._stats = stats
        self._clock_ms = clock_ms
        self._reader = reader
        self._spawn = spawn
        policy = self.policy
        self._waiters = KeyWaiters(
            policy.max_waiters, self._find_one, self._recheck_one, self._hold, self.release
        )
        self.keeper = HoldKeeper(control, rules, clock_ms, policy.hold_ttl_ms, self.release)
        self._throttle = LogThrottle()
        """Renews the holds taken here while their results are computed."""

    @property
    def waiting(self) -> int:
        """Lookups waiting on keys held elsewhere, now."""
        return self._waiters.waiting

    def notify(self, digest: KeyDigest) -> None:
        """A result for `digest` is stored here (or will not come): wake its waiters."""
        self._waiters.notify(digest)

    async def _find_one(self, q: LookupQuery) -> LookupResult:
        return (await self._reader.find([q]))[0]

    async def _recheck_one(self, q: LookupQuery) -> LookupResult:
        return (await self._reader.recheck([q]))[0]

    async def _hold(self, q: LookupQuery) -> Handover | None:
        lease, token = self._issue(q.key.digest)
        if await self._try_hold(lease, q):
            return Handover(lease, token)
        return None

    def issue_token(self, digest: KeyDigest) -> bytes:
        """A lease for a computation that starts now, without a single-flight hold."""
        return self.issuer.issue(digest)[1]

    def _issue(self, digest: KeyDigest) -> tuple[Lease, bytes]:
        return self.issuer.issue(digest)

    async def _try_hold(self, lease: Lease, q: LookupQuery) -> bool:
        try:
            held = await self.control.acquire_holder(
                lease.digest, lease.lease_id, self.policy.hold_ttl_ms
            )
        except TierUnavailable as exc:
            log.warning("lease_holder_unavailable", error=str(exc))
            if isinstance(exc, TierTimeout):
                self.give_back([lease])
            return False
        if held:
            self.keeper.keep(lease, q.key.dims)
        return held

    def give_back(self, leases: Sequence[Lease]) -> None:
        """Release, in the background, holds that a call which did not answer in time may
        still take after its caller gave up on it: not taken, as far as anyone waits."""
        if leases:
            self._spawn(self._release_all(list(leases)))

    async def _release_all(self, leases: list[Lease]) -> None:
        for lease in leases:
            self.keeper.drop(lease)
            try:
                await self.control.release_holder(lease.digest, lease.lease_id)
            except TierUnavailable as exc:
                # The store is failing (these follow a timed-out or untrusted read): the
                # rest would fail alike, and every one lapses within the hold TTL.
                count = self._throttle.hit("give_back")
                if count is not None:
                    log.warning("lease_give_back_failed", error=str(exc), occurrences=count)
                return
            self._waiters.notify(lease.digest)

    async def lease_many(
        self, misses: Sequence[tuple[LookupQuery, LookupResult, HoldTry | None]]
    ) -> list[LookupResult]:
        """`lease` each (query, MISS, hold its read tried or None) concurrently;
        ResourceExhausted if any wait is refused."""
        if len(misses) == 1:
            return [await self.lease(*misses[0])]
        leased = await asyncio.gather(
            *(self.lease(q, m, t) for q, m, t in misses), return_exceptions=True
        )
        refused = [r for r in leased if isinstance(r, BaseException)]
        if refused:
            # The call fails as a whole: holds its other queries took must not linger
            # until they expire.
            for r in leased:
                if isinstance(r, LookupResult) and r.lease_holder:
                    await self.release_token(r.lease, r.digest)
            raise refused[0]
        return cast(list[LookupResult], leased)

    async def lease(
        self, q: LookupQuery, miss: LookupResult, tried: HoldTry | None = None
    ) -> LookupResult:
        """Attach a lease to a MISS; with wait_ms, wait for another holder's result first.

        `tried`: the hold was already tried by the read that found the MISS, at the same
        instant (nothing can have landed between them: no re-check, no second try); its
        drafted lease is sealed here.
        """
        mv = q.key.model_version
        self._stats.count_lease(mv, "issued")
        if tried is not None:
            lease, held = tried.lease, tried.held
            token = self.issuer.seal(lease)
            if held:
                self.keeper.keep(lease, q.key.dims)
        else:
            lease, token = self._issue(q.key.digest)
            if miss.degraded:
                # The store just failed us; don't pay a second deadline for the holder key.
                return _with_lease(miss, token, holder=False)
            held = await self._try_hold(lease, q)
            if held and q.wait_ms > 0:
                return await self._as_holder(q, lease, token)
        if held:
            return _with_lease(miss, token, holder=True)
        if q.wait_ms <= 0:
            return _with_lease(miss, token, holder=False)
        self._stats.count_lease(mv, "waited")
        try:
            answer = await self._waiters.wait(q, min(q.wait_ms, self.policy.max_wait_ms) / 1000)
        except ResourceExhausted:
            self._stats.count_lease(mv, "wait_refused")
            raise
        if answer is None:
            self._stats.count_lease(mv, "wait_timeout")
            return _with_lease(miss, token, holder=False)
        if isinstance(answer, Handover):
            return _with_lease(miss, answer.token, holder=True)
        self._stats.count_lease(mv, "wait_hit")
        return answer

    async def _as_holder(self, q: LookupQuery, lease: Lease, token: bytes) -> LookupResult:
        """We hold the key: answer MISS (compute it) unless a result landed meanwhile.

        A holder stores before it releases, so a result written between our read
        and our hold is visible now in the warm tier (not always yet in a hot tier: see
        TierReader.recheck); a waiter then gets it instead of recomputing.
        """
        found = (await self._reader.recheck([q]))[0]
        if found.outcome is Outcome.HIT:
            await self.release(lease)
            return found
        return _with_lease(found, token, holder=True)

    def check(self, key: CacheKey, lease_token: bytes, at_ms: int) -> tuple[Lease | None, int]:
        """The verified lease (None when unleased stores are allowed and none came) and
        the epoch to stamp the entry with, judged at `at_ms`.

        InvalidArgument for a forged or foreign token, FailedPrecondition for an
        expired one or a missing one where unleased stores are refused.
        """
        if lease_token:
            lease = self.signer.verify(lease_token, key.digest, at_ms)
            return lease, lease.epoch
        if self.policy.allow_unleased_store:
            return None, self.rules.epoch_at(at_ms - self.policy.unleased_window_s * 1000)
        raise FailedPrecondition(
            "Store needs the lease returned by the Lookup MISS "
            "(or INFERCACHE_ALLOW_UNLEASED_STORE=true)"
        )

    def released(self, lease: Lease) -> None:
        """`lease`'s hold was released along with its result's write: wake the waiters."""
        self.keeper.drop(lease)
        self._waiters.notify(lease.digest)

    async def release(self, lease: Lease | None) -> None:
        """Give up a lease's hold (its result is stored, or will not come); errors are logged."""
        if lease is None:
            return
        self.keeper.drop(lease)
        try:
            await self.control.release_holder(lease.digest, lease.lease_id)
        except TierUnavailable as exc:
            # Waiters fall back to the holder key's expiry.
            log.warning("lease_release_failed", error=str(exc))
        self._waiters.notify(lease.digest)

    async def release_token(self, token: bytes, digest: KeyDigest) -> None:
        """Release the lease of a store that will not happen, if the token is a valid one.

        Waiters on the key then stop waiting at once; an invalid token changes nothing
        (the caller's answer does not depend on it).
        """
        if not token:
            return
        try:
            lease = self.signer.verify(token, digest, self._clock_ms())
        except (InvalidArgument, FailedPrecondition):
            return
        await self.release(lease)


def _with_lease(r: LookupResult, token: bytes, *, holder: bool) -> LookupResult:
    return LookupResult(r.outcome, r.digest, degraded=r.degraded, lease=token, lease_holder=holder)
