"""Shadow verification of gRPC hits (INFERCACHE_VERIFY_DATA_PLANE; docs/verification.md).

A gRPC caller verifies only what it let the sidecar re-send: the model-server request
its Store attached (`replay`, kept as a hit record for prewarm). A sampled eligible hit
reads that record through the HitStore's checked path (a record forged, moved or altered
without the fleet secret reads as absent), re-sends its request off the caller's path
and compares the answer with the bytes the caller stored; the verdict goes to the same
ledger, scopes and quarantine as the gateway's. A Store with a replay is, at the
baseline rate, computed a second time: the engine's own divergence, as for gateway
misses. Eligibility is the gateway's (sidecar/verification/eligibility.py); a hit also
needs a record, so only tenants that retain inputs and requests not declared private.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

from sidecar.errors import TierUnavailable
from sidecar.keys import CacheKey, KeyDigest
from sidecar.policy.cacheability import RequestTraits, TenantPolicy
from sidecar.prewarm import records
from sidecar.prewarm.hits import HitStore
from sidecar.results.types import LookupQuery, LookupResult, Outcome
from sidecar.shadow.runner import ShadowRunner
from sidecar.verification.eligibility import budget, hit_rate
from sidecar.verification.ledger import Scope
from sidecar.wire.openai.answers import UpstreamCall


class DataPlaneVerifier:
    """Samples the gRPC data plane's hits (and Stores, for the baseline) into checks."""

    def __init__(
        self, runner: ShadowRunner, hits: HitStore, policy: Callable[[str], TenantPolicy]
    ) -> None:
        self.runner = runner
        self._hits = hits
        self._policy = policy
        self._settings = runner.ledger.settings

    def after_lookup(self, queries: Sequence[LookupQuery], results: Sequence[LookupResult]) -> None:
        """Lookups were answered: maybe check some of their hits (O(1) each; the record is
        read, the request sent and the answers compared in a task of their own)."""
        for q, r in zip(queries, results, strict=True):
            if r.outcome is Outcome.HIT and r.entry is not None:
                self._hit(q.key, q.traits, r.entry.payload)

    def _hit(self, key: CacheKey, traits: RequestTraits, cached: bytes) -> None:
        if traits.private_data:
            return  # never recorded: nothing to re-send
        policy = self._policy(key.tenant)
        if not policy.retain_inputs:
            return  # no record is kept for this tenant
        rate = hit_rate(key, traits, policy, self._settings)
        if rate <= 0.0:
            return
        scope = Scope(key.model_version, key.tenant, key.prompt_version)
        runner = self.runner
        if not runner.ledger.hit_due(scope, rate) or not runner.admit(key.model_version, "hit"):
            return
        replay = functools.partial(self._replay, key.model_version, key.digest)
        runner.check_replay(scope, replay, cached, budget(policy, self._settings))

    async def _replay(self, model_version: str, digest: KeyDigest) -> UpstreamCall | str:
        """The recorded request of a hit, or the check's result when there is none."""
        try:
            data = await self._hits.record(model_version, digest)
        except TierUnavailable:
            return "failed"
        if data is None:
            return "no_record"
        try:
            record = records.decode(data)
        except records.BadRecord:
            return "no_record"
        replay = record.replay
        if replay.path not in records.REPLAY_PATHS:
            return "unjudged"  # an embedding's record (the gateway's): not compared
        return UpstreamCall(replay.path, replay.content_type, replay.body)

    def after_store(
        self, key: CacheKey, traits: RequestTraits, replay: records.ReplayRequest, payload: bytes
    ) -> None:
        """A Store with its request attached was stored: maybe compute that request a
        second time and compare with what was stored (the baseline)."""
        if replay.path not in records.REPLAY_PATHS:
            return
        if hit_rate(key, traits, self._policy(key.tenant), self._settings) <= 0.0:
            return
        version = key.model_version
        runner = self.runner
        if not runner.ledger.miss_due(version) or not runner.admit(version, "baseline"):
            return
        call = UpstreamCall(replay.path, replay.content_type, replay.body)
        runner.check_miss(version, runner.call(call), payload, raw_text=True)
