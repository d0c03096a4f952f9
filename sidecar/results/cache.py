"""The result cache: hot tier, then warm tier; every hit verified and checked against
invalidation rules; every MISS hands out a lease that a Store must bring back.

Lookups never fail because a tier failed: a warm-tier error becomes a MISS with
`degraded=True`. Stores write the warm tier first and the hot tier only after
the warm write succeeded, so a failed store leaves nothing half-written.
Hot hits are served only while Freshness confirms the rule set is current;
warm reads fetch the store's epoch in the same round trip and catch up first.
The cacheability policy is applied first on every lookup and store: a BYPASS
touches no tier and hands out no lease, a BYPASSED store writes nothing.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, NamedTuple

import structlog

from sidecar import entries
from sidecar.config import LeaseConfig, TtlConfig
from sidecar.entries import ChunkMeta, ComputeCost, Entry, EntryRejected
from sidecar.errors import FailedPrecondition, InvalidArgument, TierUnavailable
from sidecar.invalidation.embedded_store import EmbeddedControlStore
from sidecar.invalidation.freshness import Freshness
from sidecar.invalidation.rules import RuleSet
from sidecar.keys import CacheKey, KeyDigest, KeyRequest
from sidecar.observability.stats import CacheStats
from sidecar.policy.cacheability import NO_TRAITS, Bypass, PolicyHolder, RequestTraits, TenantPolicy
from sidecar.results.chunks import check_finish_reason, chunk_table
from sidecar.results.lease_tokens import Lease, LeaseSigner
from sidecar.tiers.base import WarmItem, WarmTier
from sidecar.tiers.hot import HotTier

if TYPE_CHECKING:
    from sidecar.prewarm.hits import HitRecorder

log = structlog.get_logger("infercache.cache")


class Outcome(Enum):
    """What a lookup found."""

    HIT = "hit"
    MISS = "miss"
    BYPASS = "bypass"

    # Members are singletons compared by identity; hashing by identity keeps the
    # per-key dict lookups keyed by them in C (Enum.__hash__ is Python code).
    __hash__ = object.__hash__


class TierName(Enum):
    """Where a hit came from."""

    HOT = "hot"
    WARM = "warm"

    __hash__ = object.__hash__  # see Outcome


class StoreStatus(Enum):
    """What a store did."""

    STORED = "stored"
    WRITE_FAILED = "write_failed"
    BYPASSED = "bypassed"
    STALE_LEASE = "stale_lease"


class LookupQuery(NamedTuple):
    """One lookup: the key, the caller's freshness bound (0 = none), single-flight wait, the
    request it came from and what the caller declares (for the cacheability policy).

    Immutable; a NamedTuple rather than a frozen dataclass because one is built per
    looked-up key and a frozen dataclass's __init__ costs ~3x more.
    """

    key: CacheKey
    max_age_s: int = 0
    wait_ms: int = 0
    source: KeyRequest | None = None
    """The request the key was built from; set by the data plane so that hits can be
    recorded for prewarm (None: this lookup is not traffic, e.g. prewarm's own)."""
    traits: RequestTraits = NO_TRAITS
    """Declared traits; NO_TRAITS (compared by identity) when none."""


class LookupResult(NamedTuple):
    """The answer to one lookup (immutable; a NamedTuple for the same reason as LookupQuery)."""

    outcome: Outcome
    digest: KeyDigest
    entry: Entry | None = None
    tier: TierName | None = None
    age_ms: int = 0
    degraded: bool = False
    bypass: Bypass | None = None
    lease: bytes = b""
    lease_holder: bool = False


@dataclass(frozen=True, slots=True)
class StoreResult:
    """The answer to one store."""

    status: StoreStatus
    digest: KeyDigest
    ttl_s: int
    bypass: Bypass | None = None


@dataclass(frozen=True, slots=True)
class TtlPolicy:
    """TTL bounds in seconds from the settings: a default, a global maximum and per-tenant
    maxima. The policy file chooses within them (see `effective`)."""

    default_s: int
    max_s: int
    tenant_max_s: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def from_config(cls, ttl: TtlConfig) -> TtlPolicy:
        """The bounds INFERCACHE_DEFAULT_TTL_S, _MAX_TTL_S and _TENANT_MAX_TTL_S give."""
        return cls(ttl.default_ttl_s, ttl.max_ttl_s, dict(ttl.tenant_max_ttl_s))

    def effective(self, tenant: str, requested_s: int, policy: TenantPolicy | None = None) -> int:
        """The TTL to apply: the request, else the policy's default, else the setting's
        default; clamped to the smallest of the policy's max_ttl_s, the tenant cap and the
        global maximum. Every maximum only lowers, never lifts, the others.
        """
        cap = min(self.tenant_max_s.get(tenant, self.max_s), self.max_s)
        default = self.default_s
        if policy is not None:
            if policy.max_ttl_s is not None:
                cap = min(cap, policy.max_ttl_s)
            if policy.default_ttl_s is not None:
                default = policy.default_ttl_s
        wanted = requested_s if requested_s > 0 else default
        return max(1, min(wanted, cap))


# CacheStats.lookups' (outcome, tier) labels, precomputed per (outcome, tier).
_LOOKUP_LABELS: dict[tuple[Outcome, TierName | None], tuple[str, str]] = {
    (o, t): (o.value, t.value if t else "") for o in Outcome for t in (None, *TierName)
}


def wall_clock_ms() -> int:
    """Milliseconds since the Unix epoch; shared meaning across pods for entry ages."""
    return time.time_ns() // 1_000_000


class ResultCache:
    """Orchestrates tiers, invalidation rules and leases for result lookups and stores."""

    def __init__(
        self,
        hot: HotTier,
        warm: WarmTier,
        *,
        ttl: TtlPolicy,
        max_payload_bytes: int,
        max_chunks: int,
        freshness: Freshness | None = None,
        signer: LeaseSigner | None = None,
        leases: LeaseConfig | None = None,
        stats: CacheStats | None = None,
        policy: PolicyHolder | None = None,
        clock_ms: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self.hot = hot
        self.warm = warm
        self.ttl = ttl
        self.max_payload_bytes = max_payload_bytes
        self.max_chunks = max_chunks
        self.freshness = freshness or Freshness(EmbeddedControlStore(), RuleSet())
        self.rules = self.freshness.rules
        self.control = self.freshness.control
        self.signer = signer or LeaseSigner(os.urandom(32))
        self.leases = leases or LeaseConfig()
        self.stats = stats or CacheStats()
        self.policy = policy or PolicyHolder()
        self._clock_ms = clock_ms
        self._background: set[asyncio.Task[None]] = set()
        self.hits: HitRecorder | None = None
        """Records sampled hits for prewarm (set by the server; None = off)."""

    def clock_ms(self) -> int:
        """The cache's wall clock in milliseconds (entry ages and expiry use it)."""
        return self._clock_ms()

    async def lookup(self, query: LookupQuery) -> LookupResult:
        """Look one key up."""
        return (await self.lookup_many([query]))[0]

    def tenant_policy(self, tenant: str) -> TenantPolicy:
        """The cacheability policy in force for `tenant` (it changes on reload)."""
        return self.policy.current.for_tenant(tenant)

    def retains_inputs(self, tenant: str) -> bool:
        """May `tenant`'s inputs be kept (recorded for prewarm)? Its policy's retain_inputs."""
        return self.policy.current.for_tenant(tenant).retain_inputs

    async def lookup_many(self, queries: Sequence[LookupQuery]) -> list[LookupResult]:
        """Look many keys up with at most one warm-tier round trip (plus lease work on misses).

        Queries the policy bypasses are answered BYPASS without touching any tier.
        """
        bypassed = self._screen(queries)
        if bypassed is None:
            results = await self._find(queries)
        else:
            results = await self._find_unbypassed(queries, bypassed)
        missed = [i for i, r in enumerate(results) if r.outcome is Outcome.MISS]
        if missed:
            leased = await asyncio.gather(*(self._lease(queries[i], results[i]) for i in missed))
            for i, r in zip(missed, leased, strict=True):
                results[i] = r
        self._count(queries, results)
        if self.hits is not None:
            self.hits.observe(queries, results)
        return results

    def _count(self, queries: Sequence[LookupQuery], results: list[LookupResult]) -> None:
        """Per model version: outcome and tier, degraded answers, what hits saved."""
        stats = self.stats
        counts = stats.lookups
        version = stats.version
        for q, r in zip(queries, results, strict=True):
            v = version(q.key.model_version)
            outcome, tier = _LOOKUP_LABELS[r.outcome, r.tier]
            counts[v, outcome, tier] += 1
            if r.entry is not None:
                cost = r.entry.cost
                if cost.latency_ms or cost.prompt_tokens or cost.completion_tokens:
                    stats.count_hit_saving(
                        v, tier, cost.latency_ms, cost.prompt_tokens, cost.completion_tokens
                    )
            elif r.degraded:
                stats.degraded[v] += 1

    def _screen(self, queries: Sequence[LookupQuery]) -> list[LookupResult | None] | None:
        """BYPASS results by position, or None when the policy lets every query through."""
        policy = self.policy.current
        if policy.inert:
            # Common case (no file, or rules only on declared traits): nothing declared,
            # nothing to decide.
            for q in queries:
                if q.traits is not NO_TRAITS:
                    break
            else:
                return None
        out: list[LookupResult | None] | None = None
        tenant_rules, defaults = policy.tenants.get, policy.defaults  # Policy.for_tenant, inlined
        for i, q in enumerate(queries):
            key, traits = q.key, q.traits
            rules = tenant_rules(key.tenant, defaults)
            if rules.inert and traits is NO_TRAITS:
                continue
            decision = rules.bypass_for(key, traits)
            if decision is None:
                continue
            if out is None:
                out = [None] * len(queries)
            out[i] = LookupResult(Outcome.BYPASS, key.digest, bypass=decision)
            self.stats.count_bypass(key.model_version, decision.reason.value)
        return out

    async def _find_unbypassed(
        self, queries: Sequence[LookupQuery], bypassed: list[LookupResult | None]
    ) -> list[LookupResult]:
        todo = [i for i, b in enumerate(bypassed) if b is None]
        found = iter(await self._find([queries[i] for i in todo]) if todo else [])
        return [b if b is not None else next(found) for b in bypassed]

    async def _find(self, queries: Sequence[LookupQuery]) -> list[LookupResult]:
        """Hot then warm, without leases."""
        now = self._clock_ms()
        confirmed = self.freshness.confirmed()
        results: list[LookupResult | None] = [None] * len(queries)
        pending: list[int] = []
        hot_get = self.hot.get
        rules = self.rules
        for i, q in enumerate(queries):
            key = q.key
            entry = hot_get(key.digest, now)
            # The hot tier is keyed by digest; comparing material also rules out collisions.
            if entry is None or entry.material != key.material:
                pending.append(i)
            elif rules.is_dead(key.dims, entry.epoch):
                self.hot.discard(key.digest)
                self.stats.count_dead(key.model_version)
                pending.append(i)
            elif not confirmed:
                # Not known to be current: let the warm read (which carries the
                # store's epoch) decide instead of trusting memory.
                pending.append(i)
            else:
                results[i] = self._hit_or_miss(q, entry, TierName.HOT, now)
        if pending:
            await self._find_warm(queries, pending, results, now)
        return [r for r in results if r is not None]

    async def _find_warm(
        self,
        queries: Sequence[LookupQuery],
        pending: list[int],
        results: list[LookupResult | None],
        now: int,
    ) -> None:
        try:
            values, store_epoch = await self.warm.get_many_with_epoch(
                [queries[i].key.digest for i in pending]
            )
            if store_epoch > self.rules.epoch:
                await self.freshness.sync_to(store_epoch)
        except TierUnavailable as exc:
            self.stats.warm_read_failures += 1
            log.warning("warm_read_failed", tier=self.warm.name, error=str(exc))
            for i in pending:
                results[i] = LookupResult(Outcome.MISS, queries[i].key.digest, degraded=True)
            return
        unwanted: list[KeyDigest] = []
        for i, value in zip(pending, values, strict=True):
            q = queries[i]
            results[i] = LookupResult(Outcome.MISS, q.key.digest)
            if value is None:
                continue
            try:
                entry = entries.decode(value, q.key.material)
            except EntryRejected as exc:
                self.stats.count_rejected(q.key.model_version, exc.reason)
                log.warning("entry_rejected", reason=exc.reason, digest=q.key.digest.hex())
                unwanted.append(q.key.digest)
                continue
            if self.rules.is_dead(q.key.dims, entry.epoch):
                self.stats.count_dead(q.key.model_version)
                unwanted.append(q.key.digest)
                continue
            if entry.expires_at_ms <= now:
                continue
            self.hot.put(q.key.digest, entry)
            results[i] = self._hit_or_miss(q, entry, TierName.WARM, now)
        if unwanted:
            self._spawn(self._delete_quietly(unwanted))

    def _hit_or_miss(self, q: LookupQuery, entry: Entry, tier: TierName, now: int) -> LookupResult:
        age = now - entry.created_at_ms
        if age < 0:
            age = 0
        if q.max_age_s and age > q.max_age_s * 1000:
            return LookupResult(Outcome.MISS, q.key.digest)
        return LookupResult(Outcome.HIT, q.key.digest, entry, tier, age)

    def _issue(self, digest: KeyDigest) -> tuple[Lease, bytes]:
        expires = self._clock_ms() + self.leases.ttl_s * 1000
        # The epoch applied locally when the computation starts: if this sidecar
        # is behind, the lease is older than the truth, which only errs to MISS.
        return self.signer.issue(digest, self.rules.epoch, expires)

    async def _try_hold(self, lease: Lease) -> bool:
        try:
            return await self.control.acquire_holder(
                lease.digest, lease.lease_id, self.leases.ttl_s * 1000
            )
        except TierUnavailable as exc:
            log.warning("lease_holder_unavailable", error=str(exc))
            return False

    async def _lease(self, q: LookupQuery, miss: LookupResult) -> LookupResult:
        """Attach a lease to a MISS; with wait_ms, wait for another holder's result first."""
        lease, token = self._issue(q.key.digest)
        mv = q.key.model_version
        self.stats.count_lease(mv, "issued")
        if miss.degraded:
            # The store just failed us; don't pay a second deadline for the holder key.
            return _with_lease(miss, token, holder=False)
        if await self._try_hold(lease):
            if q.wait_ms > 0:
                return await self._as_holder(q, lease, token)
            return _with_lease(miss, token, holder=True)
        if q.wait_ms <= 0:
            return _with_lease(miss, token, holder=False)
        self.stats.count_lease(mv, "waited")
        deadline = time.monotonic() + min(q.wait_ms, self.leases.max_wait_ms) / 1000
        pause = 0.005
        while time.monotonic() < deadline:
            await asyncio.sleep(min(pause, max(0.0, deadline - time.monotonic())))
            pause = min(pause * 1.5, 0.05)
            found = (await self._find([q]))[0]
            if found.outcome is Outcome.HIT:
                self.stats.count_lease(mv, "wait_hit")
                return found
            lease, token = self._issue(q.key.digest)
            if await self._try_hold(lease):
                return await self._as_holder(q, lease, token)
        self.stats.count_lease(mv, "wait_timeout")
        return _with_lease(miss, token, holder=False)

    async def _as_holder(self, q: LookupQuery, lease: Lease, token: bytes) -> LookupResult:
        """We hold the key: answer MISS (compute it) unless a result landed meanwhile.

        A holder stores before it releases, so a result written between our read
        and our hold is visible now; a waiter then gets it instead of recomputing.
        """
        found = (await self._find([q]))[0]
        if found.outcome is Outcome.HIT:
            await self._release(lease)
            return found
        return _with_lease(found, token, holder=True)

    def check_lease(
        self, key: CacheKey, lease_token: bytes, at_ms: int
    ) -> tuple[Lease | None, int]:
        """The verified lease (None when unleased stores are allowed and none came) and
        the epoch to stamp the entry with, judged at `at_ms`.

        InvalidArgument for a forged or foreign token, FailedPrecondition for an
        expired one or a missing one where unleased stores are refused.
        """
        if lease_token:
            lease = self.signer.verify(lease_token, key.digest, at_ms)
            return lease, lease.epoch
        if self.leases.allow_unleased_store:
            return None, self.rules.epoch_at(at_ms - self.leases.unleased_window_s * 1000)
        raise FailedPrecondition(
            "Store needs the lease returned by the Lookup MISS "
            "(or INFERCACHE_ALLOW_UNLEASED_STORE=true)"
        )

    async def store(
        self,
        key: CacheKey,
        payload: bytes,
        ttl_s: int = 0,
        cost: ComputeCost | None = None,
        lease_token: bytes = b"",
        traits: RequestTraits = NO_TRAITS,
        *,
        chunks: Sequence[ChunkMeta] = (),
        finish_reason: str = "",
        started_at_ms: int | None = None,
    ) -> StoreResult:
        """Write a result stamped with its lease's epoch; refuse it if that epoch is stale.

        BYPASSED (nothing written, the lease released) when the tenant's policy does not
        cache this request or a result this large. `chunks` are the result's stream
        boundaries (for LookupStream replay). `started_at_ms`: when delivery of the
        result began (a StoreStream's opening message); the lease must have been valid
        then, so a long stream does not outlive a lease that was good when it started.
        """
        if len(payload) > self.max_payload_bytes:
            raise InvalidArgument(
                "payload",
                f"is {len(payload)} bytes; the limit is {self.max_payload_bytes} "
                "(INFERCACHE_MAX_PAYLOAD_BYTES)",
            )
        table = chunk_table(chunks, len(payload), self.max_chunks)
        finish_reason = check_finish_reason(finish_reason, required=False)
        bypassed = await self.store_bypass(key, traits, lease_token, len(payload))
        if bypassed is not None:
            return bypassed
        tenant_policy = self.tenant_policy(key.tenant)
        now = self._clock_ms()
        lease, epoch = self.check_lease(
            key, lease_token, now if started_at_ms is None else started_at_ms
        )
        effective = self.ttl.effective(key.tenant, ttl_s, tenant_policy)
        if self.rules.is_dead(key.dims, epoch):
            self.stats.count_store(key.model_version, "refused", "stale_lease")
            await self._release(lease)
            return StoreResult(StoreStatus.STALE_LEASE, key.digest, effective)
        entry = Entry(
            material=key.material,
            payload=payload,
            created_at_ms=now,
            ttl_s=effective,
            epoch=epoch,
            cost=cost or ComputeCost(),
            chunk_table=table,
            finish_reason=finish_reason,
        )
        try:
            await self.warm.put_many(
                [WarmItem(key.digest, entries.encode(entry), effective * 1000)]
            )
        except TierUnavailable as exc:
            self.stats.warm_write_failures += 1
            self.stats.count_store(key.model_version, "failed", "warm_write")
            log.warning("warm_write_failed", tier=self.warm.name, error=str(exc))
            # A stale hot copy must not outlive a failed overwrite.
            self.hot.discard(key.digest)
            return StoreResult(StoreStatus.WRITE_FAILED, key.digest, effective)
        self.hot.put(key.digest, entry)
        self.stats.count_store(key.model_version, "stored")
        await self._release(lease)
        return StoreResult(StoreStatus.STORED, key.digest, effective)

    async def store_bypass(
        self, key: CacheKey, traits: RequestTraits, lease_token: bytes, size: int
    ) -> StoreResult | None:
        """BYPASSED (counted, the lease released) if the tenant's policy refuses to
        cache this request or a result of `size` bytes; None if it may be stored.

        Store asks this first; StoreStream asks it at the opening message (size 0)
        so a bypassed stream ends at once instead of after the whole answer.
        """
        tenant_policy = self.tenant_policy(key.tenant)
        decision = tenant_policy.bypass_for(key, traits) or tenant_policy.bypass_for_entry(size)
        if decision is None:
            return None
        self.stats.count_bypass(key.model_version, decision.reason.value)
        self.stats.count_store(key.model_version, "refused", decision.reason.value)
        await self._release_quietly(lease_token, key.digest)
        return StoreResult(StoreStatus.BYPASSED, key.digest, 0, decision)

    async def _release_quietly(self, token: bytes, digest: KeyDigest) -> None:
        """Release the lease of a store that will not happen, if the token is a valid one.

        Waiters on the key then stop waiting at once; an invalid token changes nothing
        (the BYPASSED answer does not depend on it).
        """
        if not token:
            return
        try:
            lease = self.signer.verify(token, digest, self._clock_ms())
        except (InvalidArgument, FailedPrecondition):
            return
        await self._release(lease)

    async def release(self, lease: Lease | None) -> None:
        """Give up a lease's single-flight hold (a result will not come); errors are logged."""
        await self._release(lease)

    async def _release(self, lease: Lease | None) -> None:
        if lease is None:
            return
        try:
            await self.control.release_holder(lease.digest, lease.lease_id)
        except TierUnavailable as exc:
            # Waiters fall back to the holder key's expiry.
            log.warning("lease_release_failed", error=str(exc))

    async def _delete_quietly(self, digests: list[KeyDigest]) -> None:
        try:
            await self.warm.delete_many(digests)
        except TierUnavailable as exc:
            log.warning("unwanted_entry_delete_failed", error=str(exc))

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def drain(self) -> None:
        """Wait for background deletions (used at shutdown)."""
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)


def _with_lease(r: LookupResult, token: bytes, *, holder: bool) -> LookupResult:
    return LookupResult(r.outcome, r.digest, degraded=r.degraded, lease=token, lease_holder=holder)
