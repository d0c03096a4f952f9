"""One completion request through the gateway: authenticate, key, look up, answer from
the cache or forward upstream, and store a complete answer.

    hit      the cached answer, fresh id and created (a stream replayed event by event)
    miss     forwarded; a complete 2xx answer is stored under the lease of the lookup
    refresh  Cache-Control: no-cache / write-only: forwarded without a lookup, stored
    bypass   not cacheable (mode off, policy, remote media, several inputs): forwarded

Nothing is stored unless the whole answer arrived: a stream needs every choice's
finish_reason and `data: [DONE]`; a client that goes away cancels this coroutine
(the upstream call with it) and the lease is released in `finally`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from sidecar.errors import InfercacheError, OverLimit, ResourceExhausted
from sidecar.gateway.auth import ANTHROPIC_KEY_HEADERS, ApiKeys
from sidecar.gateway.controls import (
    PROMPT_VERSION_HEADER,
    CacheMode,
    Controls,
    controls,
    pacing,
    prompt_version,
)
from sidecar.gateway.errors import HttpError, body_param, for_domain, for_wire
from sidecar.gateway.hit import ReplayLimits
from sidecar.gateway.hit_bodies import HitBodies
from sidecar.gateway.hit_plans import planner_for
from sidecar.gateway.messages import tee_message_stream, whole_message
from sidecar.gateway.records import Recording
from sidecar.gateway.reply import CACHE_HEADER, Headers, Reply
from sidecar.gateway.request_body import Body
from sidecar.gateway.request_keys import RequestKeys
from sidecar.gateway.responses_answers import (
    tee_response_stream,
    whole_response,
)
from sidecar.gateway.stats import GatewayStats
from sidecar.gateway.tee import Answer, tee_body, tee_stream, whole_answer
from sidecar.gateway.unknown_fields import unknown_fields_headers
from sidecar.gateway.upstream import Upstream
from sidecar.gateway.verify import NO_VERIFIER, GatewayVerifier, NoVerifier
from sidecar.identity.resolver import KeyResolver
from sidecar.keys import CacheKey
from sidecar.results.cache import ResultCache
from sidecar.results.pacing import Pacing
from sidecar.results.types import LookupQuery, Outcome, StoreStatus
from sidecar.wire.anthropic.keys import MESSAGES, MESSAGES_PATH, keyed_message_request
from sidecar.wire.errors import WireError
from sidecar.wire.json_body import parse_body
from sidecar.wire.openai.cache_salt import TenantSalts
from sidecar.wire.openai.keys import KeyedRequest, for_adapter, keyed_request
from sidecar.wire.openai.responses import RESPONSES, RESPONSES_PATH, responses_request

log = structlog.get_logger("infercache.gateway")

INPUT_FIELDS = {
    "chat.completions": "messages",
    "completions": "prompt",
    "embeddings": "input",
    RESPONSES: "input",
    MESSAGES: "messages",
}
"""The body field holding each endpoint's input (named by a 400 about the input)."""
PATHS = {
    "chat.completions": "/v1/chat/completions",
    "completions": "/v1/completions",
    "embeddings": "/v1/embeddings",
    RESPONSES: RESPONSES_PATH,
    MESSAGES: MESSAGES_PATH,
}


_TEES = {
    RESPONSES: (tee_response_stream, whole_response),
    MESSAGES: (tee_message_stream, whole_message),
}
"""How a miss of an API other than chat/completions/embeddings is teed and judged."""


@dataclass(frozen=True, slots=True)
class FlowSettings:
    """The gateway's request handling settings (see the INFERCACHE_GATEWAY_* settings)."""

    default_prompt_version: str
    wait_ms: int
    replay_pace: str
    replay_max_gap_ms: int
    replay_max_duration_ms: int
    max_payload_bytes: int


class Flow:
    """Serves completion requests from the cache and the model server."""

    def __init__(
        self,
        cache: ResultCache,
        keys: KeyResolver,
        api_keys: ApiKeys,
        upstream: Upstream,
        settings: FlowSettings,
        stats: GatewayStats,
        recording: Recording | None = None,
        salts: TenantSalts | None = None,
    ) -> None:
        self.cache = cache
        self.salts = salts
        self.keys = keys
        self.api_keys = api_keys
        self.upstream = upstream
        self.settings = settings
        self.stats = stats
        self.recording = recording
        self.verifier: GatewayVerifier | NoVerifier = NO_VERIFIER  # build.py sets it
        self.hit_bodies = HitBodies()
        self.request_keys = RequestKeys(keys)
        # Settings do not change while the gateway runs: made once, not per lookup.
        self.replay = ReplayLimits(settings.replay_max_gap_ms, settings.replay_max_duration_ms)

    def tenant(self, headers: Mapping[bytes, bytes], endpoint: str | None = None) -> str:
        """The request's tenant from its credentials (401 HttpError otherwise); the
        Messages API also reads `x-api-key`, as Anthropic's SDKs send the key."""
        if endpoint == MESSAGES:
            return self.api_keys.tenant(headers, ANTHROPIC_KEY_HEADERS)
        return self.api_keys.tenant(headers)

    def default_mode(self, tenant: str) -> CacheMode:
        """The tenant's cache mode when a request names none (policy file, else read-write)."""
        mode = self.cache.tenant_policy(tenant).gateway_cache_mode
        return CacheMode(mode) if mode else CacheMode.READ_WRITE

    async def models(self, reply: Reply) -> None:
        """GET /v1/models, proxied to the model server."""
        async with (
            asyncio.timeout(self.upstream.timeout_s),
            self.upstream.call("GET", "/v1/models") as resp,
        ):
            await reply.start(resp.status, [(b"content-type", _latin1(resp.content_type))])
            async for piece in resp.pieces():
                await reply.send(piece, not resp.ended())
            await reply.end()

    async def completion(
        self,
        endpoint: str,
        tenant: str,
        headers: Mapping[bytes, bytes],
        raw: bytes,
        reply: Reply,
    ) -> None:
        """Answer one POST to `endpoint` by `tenant` (authenticated) whose body is `raw`."""
        request_id = (endpoint, tenant, headers.get(PROMPT_VERSION_HEADER), raw)
        known = self.request_keys.known(request_id)
        doc: dict[str, Any] | None = None
        if known is None:
            try:
                doc = parse_body(raw)
            except WireError as exc:
                raise for_wire(exc) from None
        asked = controls(headers, self.default_mode(tenant))
        key: CacheKey | None = None
        if doc is not None:
            kr = self._keyed(endpoint, doc, tenant, headers)
        elif known is not None:
            kr, key = known  # keyed before from the same bytes (request_keys.py)
        body = Body(raw, doc, endpoint, tenant, self.salts)
        # Read for every streamed request before anything is forwarded or looked up, so a
        # bad value is the same 400 on a miss as on a hit; not read when nothing streams.
        pace = pacing(headers, self.settings.replay_pace) if kr.stream else Pacing()
        # Read per request: the pod's fingerprint changes when its files are re-measured.
        info: Headers = [(b"x-infercache-model-version", self.keys.pod.model_version.encode())]
        if kr.unknown:
            self.stats.unknown_fields += len(kr.unknown)
            info += unknown_fields_headers(kr.unknown)
        if kr.key is None or asked.off:
            reason = kr.uncacheable or asked.why
            await self._bypass(endpoint, body, kr, info, reason, reply)
            return
        if key is None:
            try:
                key = self.keys.resolve(kr.key)
            except OverLimit as exc:
                # Valid, only too large to key here: the model server may answer it.
                where = body_param(exc.field, INPUT_FIELDS[endpoint])
                why = f"too large to key: {where} {exc.problem}"
                await self._bypass(endpoint, body, kr, info, why, reply)
                return
            except InfercacheError as exc:
                raise for_domain(exc, INPUT_FIELDS[endpoint]) from exc
            self.request_keys.keep(request_id, kr, key)
        info.append((b"x-infercache-key", key.digest[:8].hex().encode()))
        if asked.read:
            await self._lookup(endpoint, body, kr, key, asked, pace, info, reply)
            return
        decision = self.cache.tenant_policy(tenant).bypass_for(key, kr.traits)
        if decision is not None:
            await self._bypass(endpoint, body, kr, info, decision.reason.value, reply)
            return
        self.stats.count("refresh")
        lease = self.cache.fresh_lease(key)
        await self._forward(endpoint, body, kr, key, lease, asked, info, b"refresh", reply)

    def _keyed(
        self, endpoint: str, doc: Mapping[str, Any], tenant: str, headers: Mapping[bytes, bytes]
    ) -> KeyedRequest:
        """The request's reading for the key (400 HttpError for one that cannot be keyed)."""
        version = prompt_version(headers, self.settings.default_prompt_version)
        try:
            if endpoint == MESSAGES:
                kr = keyed_message_request(doc, tenant, version)
            elif endpoint == RESPONSES:
                kr = responses_request(doc, tenant, version)
            else:
                kr = keyed_request(endpoint, doc, tenant, version)
        except WireError as exc:
            raise for_wire(exc) from None
        except RecursionError:
            # Parsed, but too deep to re-serialise (the parser's limit is on its own stack).
            raise HttpError(400, "the body is nested too deeply", code="invalid_json") from None
        return for_adapter(kr, self.keys.pod.adapter_versions)

    async def _lookup(
        self,
        endpoint: str,
        body: Body,
        kr: KeyedRequest,
        key: CacheKey,
        asked: Controls,
        pace: Pacing,
        info: Headers,
        reply: Reply,
    ) -> None:
        planner = planner_for(endpoint, kr, pace, self.replay, self.hit_bodies)
        query = LookupQuery(key, asked.max_age_s, self.settings.wait_ms, kr.key, kr.traits, planner)
        try:
            result = await self.cache.lookup(query)
        except ResourceExhausted:
            # INFERCACHE_LEASE_MAX_WAITERS requests wait on held keys already (all tenants
            # together): this one is computed instead of refused with a 429.
            self.stats.count("wait_refused")
            lease = self.cache.fresh_lease(key)
            await self._forward(endpoint, body, kr, key, lease, asked, info, b"miss", reply)
            return
        except InfercacheError as exc:
            raise for_domain(exc) from exc
        if result.outcome is Outcome.BYPASS:
            reason = result.bypass.reason.value if result.bypass else "policy"
            await self._bypass(endpoint, body, kr, info, reason, reply)
            return
        lease = result.lease
        if result.outcome is Outcome.HIT and result.entry is not None:
            # The planner accepted this entry (it is a HIT for that): its plan is kept.
            serve = planner.serve_for(result.entry)
            if serve is not None:
                info.append((b"age", str(result.age_ms // 1000).encode()))  # the last use
                await serve(reply, info)
                self.stats.count("hit")
                self.verifier.after_hit(endpoint, kr, key, result.entry, body)
                return
            lease = self.cache.fresh_lease(key)
        if planner.refused:
            # An entry this request cannot be answered from (its form): the cache took
            # it for the MISS it is, and this request recomputes it under single flight.
            self.stats.count("unservable_hit")
        if not asked.write:
            # Nothing will be stored (read-only, no-store): the hold goes back now, or
            # identical requests would wait for an answer that never comes.
            await asyncio.shield(self.cache.release_token(lease, key.digest))
            lease = b""
        self.stats.count("miss")
        await self._forward(endpoint, body, kr, key, lease, asked, info, b"miss", reply)

    async def _bypass(
        self,
        endpoint: str,
        body: Body,
        kr: KeyedRequest,
        info: Headers,
        reason: str,
        reply: Reply,
    ) -> None:
        self.stats.count("bypass")
        marked = [*info, (CACHE_HEADER, b"bypass"), (b"x-infercache-bypass-reason", _ascii(reason))]
        await self._relay(PATHS[endpoint], body.sent, kr.stream, marked, reply)

    async def _relay(
        self, path: str, raw: bytes, stream: bool, headers: Headers, reply: Reply
    ) -> None:
        """Forward without caching: status, content type and body as they come."""
        async with (
            asyncio.timeout(self.upstream.timeout_s),
            self.upstream.call("POST", path, raw) as resp,
        ):
            kind = _latin1(resp.content_type)
            passed = resp.passed_headers()
            await reply.start(resp.status, [(b"content-type", kind), *passed, *headers])
            async for piece in resp.pieces():
                await reply.send(piece, not resp.ended())
            await reply.end()

    async def _forward(
        self,
        endpoint: str,
        body: Body,
        kr: KeyedRequest,
        key: CacheKey,
        lease: bytes,
        asked: Controls,
        info: Headers,
        outcome: bytes,
        reply: Reply,
    ) -> None:
        """Forward a miss; store the answer if it is complete (the lease released if not)."""
        stored = False
        limit = self.settings.max_payload_bytes
        try:
            started_ms = self.cache.clock_ms()
            t0 = time.monotonic()
            async with (
                asyncio.timeout(self.upstream.timeout_s),
                self.upstream.call("POST", PATHS[endpoint], body.sent) as resp,
            ):
                kind = resp.content_type
                marked = [*resp.passed_headers(), *info, (CACHE_HEADER, outcome)]
                await reply.start(resp.status, [(b"content-type", _latin1(kind)), *marked])
                ok = resp.status == 200
                tee, whole = _TEES.get(endpoint, (tee_stream, whole_answer))
                if kr.stream and ok and kind.startswith("text/event-stream"):
                    answer = await tee(resp.pieces(), t0, reply, limit, kr.model, resp.ended)
                    if answer is None:
                        self.stats.count("stream_not_stored")
                else:
                    answer = await tee_body(resp.pieces(), reply, limit, resp.ended)
                    if answer is not None:
                        answer = whole(answer, kr) if ok else None
            if answer is not None and asked.write:
                self.verifier.after_miss(endpoint, kr, key, answer.payload, body)
                stored = await self._store(endpoint, body, kr, key, lease, answer, started_ms)
        finally:
            if not stored:
                # Shielded: a cancelled request (client gone) must still free its waiters.
                await asyncio.shield(self.cache.release_token(lease, key.digest))

    async def _store(
        self,
        endpoint: str,
        body: Body,
        kr: KeyedRequest,
        key: CacheKey,
        lease: bytes,
        answer: Answer,
        started_ms: int,
    ) -> bool:
        """Store a complete answer; True when the lease is spent (stored or refused)."""
        try:
            result = await self.cache.store(
                key,
                answer.payload,
                cost=answer.cost,
                lease_token=lease,
                traits=kr.traits,
                chunks=answer.chunks,
                finish_reason=answer.finish_reason,
                started_at_ms=started_ms,
            )
        except InfercacheError as exc:
            self.stats.count("store_refused")
            log.info("gateway_store_refused", error=str(exc))
            return False
        self.stats.count(f"store_{result.status.value}")
        if result.status is StoreStatus.STORED and self.recording is not None:
            self.recording.attach(key, kr, PATHS[endpoint], body.raw, result.ttl_s)
        return result.status is not StoreStatus.WRITE_FAILED


def _latin1(text: str) -> bytes:
    # A content type is ASCII in practice; anything else is replaced, never raised on.
    return text.encode("latin-1", "replace")


def _ascii(text: str) -> bytes:
    return text.encode("ascii", "replace")[:200]
