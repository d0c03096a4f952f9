"""Prewarm of one request: key it for the pod's model, look it up, send the model server
the request its Store attached on a MISS, and store the answer with the MISS's lease.

Every outcome is an ItemReport (skipped or failed, with a machine-readable reason),
or None when the answer was stored.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Set

from sidecar.entries import ComputeCost
from sidecar.errors import InfercacheError, InvalidArgument
from sidecar.identity.resolver import KeyResolver
from sidecar.keys import CacheKey, KeyRequest
from sidecar.prewarm.hits import HitRecorder
from sidecar.prewarm.progress import NOT_REPLAYABLE, ItemOutcome, ItemReport, PrewarmItem
from sidecar.prewarm.records import HitRecord, ReplayRequest
from sidecar.prewarm.upstream import ModelServer, UpstreamFailure
from sidecar.results.cache import ResultCache
from sidecar.results.types import LookupQuery, LookupResult, Outcome, StoreStatus
from sidecar.wire.json_body import parse_body
from sidecar.wire.openai.answers import (
    BadAnswer,
    PayloadFormat,
    UpstreamCall,
    gateway_answer,
    parse_answer,
)
from sidecar.wire.openai.cache_salt import TenantSalts
from sidecar.wire.openai.keys import PATH_ENDPOINTS, for_adapter, keyed_request

RECORD_MISMATCH = "record_mismatch"
"""The skip reason of a gateway record whose body does not produce its key."""

# A degraded lookup or a failed write is tried again after these pauses (the Redis
# circuit pauses calls for 50 ms to 1 s after a failure).
RETRY_PAUSES_S = (0.1, 0.3)


def skipped(index: int, reason: str, detail: str = "", digest: bytes = b"") -> ItemReport:
    """The report of a request that was not computed (nothing wrong with the run)."""
    return ItemReport(index, ItemOutcome.SKIPPED, reason, detail, digest)


def failed(index: int, reason: str, detail: str = "", digest: bytes = b"") -> ItemReport:
    """The report of a request that should have been stored and was not."""
    return ItemReport(index, ItemOutcome.FAILED, reason, detail, digest)


class ItemWarmer:
    """Warms the requests of one run, one call per request (the run's workers share it)."""

    def __init__(
        self,
        cache: ResultCache,
        keys: KeyResolver,
        *,
        model: str,
        payload_format: PayloadFormat,
        ttl_s: int,
        served: Set[str],
        recorder: HitRecorder | None = None,
        salts: TenantSalts | None = None,
    ) -> None:
        """`model`: the served model name; `served`: every name the model server lists
        (an adapter's name among them means it serves that adapter); `salts`: the
        tenants' cache_salt, sent with a gateway record's body as the gateway sends it."""
        self._salts = salts
        self._cache = cache
        self._keys = keys
        self._model = model
        self._format = payload_format
        self._ttl_s = ttl_s
        self._served = served
        self._recorder = recorder

    async def warm(self, server: ModelServer, index: int, item: PrewarmItem) -> ItemReport | None:
        """Process one request; None when its answer was stored."""
        if item.request is None:
            return skipped(index, item.skip_reason, item.detail)
        record = item.record
        if record is None:
            # Never rebuilt from the key: the key does not say how the answer was asked for.
            return skipped(index, NOT_REPLAYABLE, "no model-server request was attached")
        unreplayable = record.unreplayable()
        if unreplayable:
            return skipped(index, NOT_REPLAYABLE, unreplayable)
        prepared = self._prepare(index, item.request)
        if isinstance(prepared, ItemReport):
            return prepared
        key, _, model = prepared
        digest = bytes(key.digest)
        call = replay_call(record.replay)
        if record.form is not None:
            # A gateway record: its body must still produce its key (tenant and prompt
            # version from the record), or the model would answer another question,
            # stored under this key.
            proven = self._gateway_call(record, item.request, key)
            if isinstance(proven, str):
                return skipped(index, RECORD_MISMATCH, proven, digest)
            call = proven
        found = await self._lookup(key)
        if found.outcome is Outcome.HIT:
            return skipped(index, "already_cached", digest=digest)
        if found.outcome is Outcome.BYPASS:
            detail = found.bypass.detail if found.bypass is not None else ""
            return skipped(index, "policy_bypass", detail, digest)
        if found.degraded:
            return failed(index, "cache_unavailable", "the warm tier did not answer", digest)
        # Without the single-flight hold (another caller computes it, or the holder key
        # could not be written in time) it is computed anyway: both results are
        # equivalent, and a skipped key would stay cold if that caller never stores.
        spent = False
        try:
            report, spent = await self._compute(
                server, index, key, model, record, call, found.lease
            )
            return report
        finally:
            if not spent:
                # Like the gateway's miss: clients waiting on the key (wait_ms) stop
                # waiting now instead of at the hold's expiry; shielded, as a stopped run
                # cancels this.
                await asyncio.shield(self._cache.release_token(found.lease, key.digest))

    async def _compute(
        self,
        server: ModelServer,
        index: int,
        key: CacheKey,
        model: str,
        record: HitRecord,
        call: UpstreamCall,
        lease: bytes,
    ) -> tuple[ItemReport | None, bool]:
        """Make `call` (the record's request) and store its answer with `lease`: the
        report and whether the lease is spent (stored or refused by the store)."""
        digest = bytes(key.digest)
        started = time.monotonic()
        # The lease must have been valid when the computation began, as for the gateway's
        # miss: a generation longer than INFERCACHE_LEASE_TTL_S is still stored.
        started_ms = self._cache.clock_ms()
        try:
            received = await server.complete(call)
            if record.form is None:
                answer = parse_answer(call, model, received.body, self._format)
            else:
                # The gateway's record: its form and rules, whatever the payload setting.
                # Its answer must name the model the body asks for (the gateway stored it
                # under that rule), which may be an alias of the pod's served name.
                limit = self._cache.max_payload_bytes
                asked = model if key.adapter_version else (record.replay.model() or model)
                answer = gateway_answer(received, asked, record.form, limit)
        except (UpstreamFailure, BadAnswer) as exc:
            return failed(index, exc.reason, exc.detail, digest), False
        cost = ComputeCost(
            int((time.monotonic() - started) * 1000),
            answer.prompt_tokens,
            answer.completion_tokens,
        )
        try:
            # ResultCache.store refuses a key of weights this pod does not run.
            for pause in (*RETRY_PAUSES_S, None):
                stored = await self._cache.store(
                    key,
                    answer.payload,
                    self._ttl_s,
                    cost,
                    lease_token=lease,
                    chunks=answer.chunks,
                    finish_reason=answer.finish_reason,
                    started_at_ms=started_ms,
                )
                if stored.status is not StoreStatus.WRITE_FAILED or pause is None:
                    break
                await asyncio.sleep(pause)
        except InfercacheError as exc:
            return failed(index, "store_refused", str(exc), digest), False
        if stored.status is StoreStatus.STORED:
            if self._recorder is not None:
                # Replayable again on the next weights, like a client's Store with replay.
                self._recorder.attach(
                    key.tenant, key.model_version, key.digest, record, ttl_s=stored.ttl_s
                )
            return None, True
        if stored.status is StoreStatus.WRITE_FAILED:
            report = failed(index, "write_failed", "the warm tier refused the write", digest)
            return report, False
        if stored.status is StoreStatus.STALE_LEASE:
            report = skipped(index, "invalidated_meanwhile", "an invalidation matched it", digest)
            return report, True
        detail = stored.bypass.detail if stored.bypass is not None else "the store was bypassed"
        return skipped(index, "policy_bypass", detail, digest), True

    async def _lookup(self, key: CacheKey) -> LookupResult:
        """A Lookup that tries again when the warm tier did not answer in time.

        The lookup deadline is tuned for request latency; prewarm is a batch job that
        would rather wait a little than compute an answer it may not be able to store.
        """
        for pause in (*RETRY_PAUSES_S, None):
            # Not traffic: neither a miss in the statistics nor a hit in the ranking.
            found = await self._cache.lookup(LookupQuery(key), traffic=False)
            if not found.degraded or pause is None:
                return found
            await asyncio.sleep(pause)
        raise AssertionError("unreachable")  # pragma: no cover

    def _gateway_call(
        self, record: HitRecord, req: KeyRequest, key: CacheKey
    ) -> UpstreamCall | str:
        """A gateway record's call, with the tenant's cache_salt in its body as the gateway
        sends it; or why its body does not produce `key` (keyed again exactly as the
        gateway keys a request, under the pod's model)."""
        replay = record.replay
        endpoint = PATH_ENDPOINTS.get(replay.path)
        if endpoint is None:
            return f"{replay.path[:64]!r} is not a route of the gateway"
        try:
            doc = parse_body(replay.body)
            kr = keyed_request(endpoint, doc, req.tenant, req.prompt_version)
            kr = for_adapter(kr, self._keys.pod.adapter_versions)
            if kr.key is None:
                return f"the body is not cacheable ({kr.uncacheable[:80]})"
            again = self._keys.resolve(kr.key)
        except (InvalidArgument, RecursionError) as exc:
            return f"the body does not key: {str(exc)[:120]}"
        if again.digest != key.digest:
            return "the body keys to another digest than its record's key"
        if self._salts is None:
            return replay_call(replay)
        body = self._salts.body_for(endpoint, req.tenant, doc, replay.body)
        return UpstreamCall(replay.path, replay.content_type, body)

    def _prepare(
        self, index: int, req: KeyRequest
    ) -> tuple[CacheKey, KeyRequest, str] | ItemReport:
        """The key under the pod's model, the request to send and the upstream model name."""
        pod = self._keys.pod
        if req.model_version and req.model_version != pod.model_version:
            return skipped(
                index,
                "other_model_version",
                f"names {req.model_version[:80]!r}, the pod runs {pod.model_version}",
            )
        model = self._model
        if req.adapter_version:
            name = pod.adapter_name(req.adapter_version)
            if name is None or name not in self._served:
                return skipped(index, "adapter_not_served", f"adapter {req.adapter_version[:80]!r}")
            model = name
        try:
            # The resolver keys a named adapter (by name or fingerprint) by its fingerprint.
            key = self._keys.resolve(req)
        except InvalidArgument as exc:
            return failed(index, "invalid_request", str(exc))
        return key, req, model


def replay_call(replay: ReplayRequest) -> UpstreamCall:
    """The model-server call of an attached request: path, media type and bytes unchanged."""
    return UpstreamCall(replay.path, replay.content_type, replay.body)
