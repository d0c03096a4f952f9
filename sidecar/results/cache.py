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
from typing import Any

import structlog

from sidecar import entries
from sidecar.entries import ChunkMeta, ComputeCost, Entry
from sidecar.errors import InvalidArgument, TierUnavailable
from sidecar.identity.pod import PodIdentity
from sidecar.invalidation.freshness import Freshness
from sidecar.keys import CacheKey, KeyDigest
from sidecar.policy.cacheability import NO_TRAITS, RequestTraits, TenantPolicy
from sidecar.policy.ttl import TtlPolicy
from sidecar.results.chunks import check_finish_reason, chunk_table
from sidecar.results.issuer import LeaseIssuer
from sidecar.results.lease_tokens import Lease, LeaseSigner
from sidecar.results.observers import LookupCounter
from sidecar.results.parts import CacheAdmission, CacheSettings, CacheTiers, CacheWatchers
from sidecar.results.screen import (
    passes_screens,
    screen_doubt,
    screen_policy,
    screen_quarantine,
)
from sidecar.results.single_flight import SingleFlight
from sidecar.results.tier_reader import Found, TierReader
from sidecar.results.types import (
    LookupQuery,
    LookupResult,
    Outcome,
    StoreResult,
    StoreStatus,
)
from sidecar.results.warm_read import HoldTry, warm_read
from sidecar.results.warm_write import warm_write
from sidecar.tiers.base import WarmItem
from sidecar.verification.ledger import Ledger

log = structlog.get_logger("infercache.cache")


def wall_clock_ms() -> int:
    """Milliseconds since the Unix epoch; shared meaning across pods for entry ages."""
    return time.time_ns() // 1_000_000


class ResultCache:
    """Orchestrates tiers, invalidation rules and leases for result lookups and stores.

    A lookup call reads: screen (policy) -> hot -> warm -> lease the misses -> observe.
    Given its tiers, settings, watchers and admission (values from parts.py), it makes
    the rest once here: a TierReader (with the warm read chosen for the stores:
    warm_read.py), SingleFlight (which looks again through the reader; the reader never
    calls it) and the lease issuer they share.
    """

    def __init__(
        self,
        tiers: CacheTiers,
        settings: CacheSettings,
        *,
        freshness: Freshness,
        signer: LeaseSigner | None = None,
        watchers: CacheWatchers | None = None,
        admission: CacheAdmission | None = None,
        clock_ms: Callable[[], int] = wall_clock_ms,
    ) -> None:
        """`freshness` holds the rule set and the control store (leases, holds) this cache
        answers by; `signer` signs its leases (a random secret when None). By default
        `watchers` are a new CacheStats and no observers, and `admission` is the built-in
        policy and a pod without a fingerprint (no store refused for its weights)."""
        watchers = CacheWatchers() if watchers is None else watchers
        admission = CacheAdmission() if admission is None else admission
        self.tiers = tiers
        self.settings = settings
        self.hot = tiers.hot
        self.warm = tiers.warm
        self.freshness = freshness
        self.rules = freshness.rules
        self.stats = watchers.stats
        self.policy = admission.policy
        self.identity = admission.identity
        self.stats.admit(self.identity.pod.model_version)  # the pod's own version first
        self.identity.on_swap(self._admit_new_identity)
        self._clock_ms = clock_ms
        self._write = warm_write(tiers.warm, tiers.holding)
        self._background: set[asyncio.Task[None]] = set()
        issuer = LeaseIssuer(
            signer or LeaseSigner(os.urandom(32)), freshness.rules, settings.leases, clock_ms
        )
        # How lookups read the warm tier is decided here, once, by the stores given.
        self._reader = TierReader(
            tiers.hot,
            tiers.warm,
            freshness,
            self.stats,
            clock_ms,
            self._spawn,
            warm_read(tiers.warm, tiers.holding, issuer),
            settings.ttl.max_s,
        )
        self._flight = SingleFlight(
            freshness.control,
            freshness.rules,
            issuer,
            self.stats,
            clock_ms,
            self._reader,
            self._spawn,
        )
        # The counter is called directly (a bound method): with no other observer, a
        # lookup call costs what the inline counting it replaced did.
        self._count = LookupCounter(self.stats).observe
        self._observers = watchers.observers
        self.verification: Ledger | None = None
        """Shadow verification's state: lookups in a quarantined scope are BYPASS."""

    @property
    def ttl(self) -> TtlPolicy:
        """The TTL bounds stores are held to."""
        return self.settings.ttl

    @property
    def max_payload_bytes(self) -> int:
        """Largest result a store accepts."""
        return self.settings.max_payload_bytes

    @property
    def max_chunks(self) -> int:
        """Most chunk boundaries a stored result may carry."""
        return self.settings.max_chunks

    def _admit_new_identity(self, old: PodIdentity, new: PodIdentity) -> None:
        self.stats.admit(new.model_version)  # a re-measured model is the pod's own too

    def clock_ms(self) -> int:
        """The cache's wall clock in milliseconds (entry ages and expiry use it)."""
        return self._clock_ms()

    async def lookup(self, query: LookupQuery, *, traffic: bool = True) -> LookupResult:
        """Look one key up (`traffic`: as in lookup_many).

        The common case, a key no screen decides that the hot tier answers, goes direct:
        the batch plumbing (lists by position, a Found, the screens' loops) costs more than
        such an answer. The direct path is lookup_many's own steps for one key (the
        reader's hot answer, `_settle`, the same counter and observers), so both give the
        same results and events; whatever the hot tier cannot answer goes the batch way.
        """
        if passes_screens(self.policy.current, self.verification, self.identity, query):
            result = self._reader.hot_answer(query)
            if result is not None:
                if result.outcome is Outcome.HIT:
                    if traffic:
                        self._observe((query,), (result,))
                    return result
                # A MISS by the caller's bounds: leased like any other.
                return (await self._settle((query,), Found([result]), traffic))[0]
        return (await self.lookup_many([query], traffic=traffic))[0]

    def tenant_policy(self, tenant: str) -> TenantPolicy:
        """The cacheability policy in force for `tenant` (it changes on reload)."""
        return self.policy.current.for_tenant(tenant)

    def retains_inputs(self, tenant: str) -> bool:
        """May `tenant`'s inputs be kept (recorded for prewarm)? Its policy's retain_inputs."""
        return self.policy.retains_inputs(tenant)

    async def lookup_many(
        self, queries: Sequence[LookupQuery], *, traffic: bool = True
    ) -> list[LookupResult]:
        """Look many keys up with at most one warm-tier round trip (plus lease work on misses).

        Queries the policy bypasses are answered BYPASS without touching any tier. Not
        `traffic` (prewarm's own): uncounted, unobserved (no misses added, no hits ranked).
        """
        bypassed = self._screen(queries)
        if self.identity.stale:
            bypassed = screen_doubt(self.identity, queries, bypassed)
        if bypassed is None:
            found = await self._reader.lookup(queries)
        else:
            found = await self._find_unbypassed(queries, bypassed)
        return await self._settle(queries, found, traffic)

    async def _settle(
        self, queries: Sequence[LookupQuery], found: Found, traffic: bool
    ) -> list[LookupResult]:
        """What a read found, made final: unused holds given back, the MISSes leased (or
        their single flight waited on), the call observed when it is `traffic`."""
        results, holds = found.results, found.holds
        if found.give_back:
            self._flight.give_back(found.give_back)
        missed = [i for i, r in enumerate(results) if r.outcome is Outcome.MISS]
        if missed:
            leased = await self._flight.lease_many(
                [(queries[i], results[i], holds.get(i)) for i in missed]
            )
            for i, r in zip(missed, leased, strict=True):
                results[i] = r
        if traffic:
            self._observe(queries, results)
        return results

    def _observe(self, queries: Sequence[LookupQuery], results: Sequence[LookupResult]) -> None:
        """Count one finished lookup call and show it to every observer."""
        self._count(queries, results)
        for observer in self._observers:
            observer.observe(queries, results)

    def _screen(self, queries: Sequence[LookupQuery]) -> list[LookupResult | None] | None:
        """BYPASS results by position, or None when the policy lets every query through."""
        out = screen_policy(self.policy.current, self.stats, queries)
        ledger = self.verification
        if ledger is not None and ledger.quarantined:
            out = screen_quarantine(ledger, self.rules, self.stats, queries, out)
        return out

    async def _find_unbypassed(
        self, queries: Sequence[LookupQuery], bypassed: list[LookupResult | None]
    ) -> Found:
        """Read what the screen let through; the answers (and holds) by position in `queries`."""
        todo = [i for i, b in enumerate(bypassed) if b is None]
        if not todo:
            return Found([b for b in bypassed if b is not None])
        found = await self._reader.lookup([queries[i] for i in todo])
        answers = iter(found.results)
        holds: Mapping[int, HoldTry] = {todo[j]: h for j, h in found.holds.items()}
        results = [b if b is not None else next(answers) for b in bypassed]
        return Found(results, holds, found.give_back)

    def check_lease(
        self, key: CacheKey, lease_token: bytes, at_ms: int
    ) -> tuple[Lease | None, int]:
        """The verified lease (None when unleased stores are allowed and none came) and
        the epoch to stamp the entry with, judged at `at_ms` (see SingleFlight.check)."""
        checked = self._flight.check(key, lease_token, at_ms)
        # A store this pod accepts is a write of this fleet: its version may take a label.
        self.stats.admit(key.model_version)
        return checked

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
        FailedPrecondition for a key of weights this pod does not run (every entry
        point stores through here, so none can forget it).
        """
        self.identity.check_store(key.model_version, key.adapter_version)
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
            await self._flight.release(lease)
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
        item = WarmItem(key.digest, entries.encode(entry, self.freshness.keys), effective * 1000)
        try:
            released = await self._write.write(item, lease)
        except TierUnavailable as exc:
            self.stats.warm_write_failures += 1
            self.stats.count_store(key.model_version, "failed", "warm_write")
            log.warning("warm_write_failed", tier=self.warm.name, error=str(exc))
            # A stale hot copy must not outlive a failed overwrite.
            self.hot.discard(key.digest)
            return StoreResult(StoreStatus.WRITE_FAILED, key.digest, effective)
        self.hot.put(key.digest, entry)
        self.stats.count_store(key.model_version, "stored")
        if lease is None:
            self._flight.notify(key.digest)
        elif released:
            self._flight.released(lease)
        else:
            await self._flight.release(lease)
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
        # Waiters on the key stop waiting at once instead of at the hold's expiry.
        await self._flight.release_token(lease_token, key.digest)
        return StoreResult(StoreStatus.BYPASSED, key.digest, 0, decision)

    def fresh_lease(self, key: CacheKey) -> bytes:
        """A lease token for a result computed from now on without a lookup first (a
        refresh: the caller skips reading but stores the answer); no single-flight hold."""
        self.stats.count_lease(key.model_version, "issued")
        return self._flight.issue_token(key.digest)

    async def release_token(self, lease_token: bytes, digest: KeyDigest) -> None:
        """Give up the hold of a lease token whose result will not be stored (the caller
        failed, went away or may not store it); waiters on the key stop waiting at once."""
        await self._flight.release_token(lease_token, digest)

    async def release(self, lease: Lease | None) -> None:
        """Give up a lease's single-flight hold (a result will not come); errors are logged."""
        await self._flight.release(lease)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def drain(self) -> None:
        """Stop renewing holds (they lapse within their TTL) and wait for background
        deletions and releases (used at shutdown)."""
        await self._flight.keeper.close()
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
