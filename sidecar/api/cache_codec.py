"""Pure protobuf <-> domain conversions (no I/O, no grpc)."""

from __future__ import annotations

from collections.abc import Sequence

from google.protobuf.message import DecodeError
from infercache.v1 import cache_pb2 as PB2

from sidecar.api.key_codec import key_request_from_known_pb
from sidecar.api.unknown_fields import refuse_unknown_fields
from sidecar.entries import ComputeCost
from sidecar.errors import InvalidArgument
from sidecar.identity.resolver import KeyResolver, ResolvedKey
from sidecar.keys import KeyRequest
from sidecar.policy.cacheability import NO_TRAITS, Bypass, BypassReason, RequestTraits
from sidecar.prewarm.records import HitRecord, ReplayRequest
from sidecar.results.types import (
    LookupQuery,
    LookupResult,
    Outcome,
    StoreResult,
    StoreStatus,
    TierName,
)

_TIER = {TierName.HOT: PB2.TIER_HOT, TierName.WARM: PB2.TIER_WARM}
_OUTCOME = {
    Outcome.HIT: PB2.LOOKUP_OUTCOME_HIT,
    Outcome.MISS: PB2.LOOKUP_OUTCOME_MISS,
    Outcome.BYPASS: PB2.LOOKUP_OUTCOME_BYPASS,
}
_STORE = {
    StoreStatus.STORED: PB2.STORE_OUTCOME_STORED,
    StoreStatus.WRITE_FAILED: PB2.STORE_OUTCOME_WRITE_FAILED,
    StoreStatus.BYPASSED: PB2.STORE_OUTCOME_BYPASSED,
    StoreStatus.STALE_LEASE: PB2.STORE_OUTCOME_STALE_LEASE,
}
BYPASS_CODE = {
    BypassReason.NOT_CACHEABLE: PB2.BYPASS_REASON_NOT_CACHEABLE,
    BypassReason.NON_DETERMINISTIC: PB2.BYPASS_REASON_NON_DETERMINISTIC,
    BypassReason.SIDE_EFFECTS: PB2.BYPASS_REASON_SIDE_EFFECTS,
    BypassReason.PRIVATE_DATA: PB2.BYPASS_REASON_PRIVATE_DATA,
    BypassReason.REAL_TIME: PB2.BYPASS_REASON_REAL_TIME,
    BypassReason.TOOLS: PB2.BYPASS_REASON_TOOLS,
    BypassReason.ENTRY_TOO_LARGE: PB2.BYPASS_REASON_ENTRY_TOO_LARGE,
    BypassReason.VERIFICATION_FAILED: PB2.BYPASS_REASON_VERIFICATION_FAILED,
}


def key_request_from_pb(k: PB2.CacheKey) -> KeyRequest:
    """Translate a CacheKey message (unset stays unset); validation happens in keys.build_key.

    A message anywhere in the key that carries a field this sidecar does not know
    is INVALID_ARGUMENT naming its number: dropping it could merge different requests.
    """
    refuse_unknown_fields(k, "key")
    return key_request_from_known_pb(k)


def replay_from_pb(msg: PB2.StoreRequest, field: str = "replay") -> ReplayRequest | None:
    """The attached model-server request, checked (INVALID_ARGUMENT naming `field`), or None."""
    if not msg.HasField("replay"):
        return None
    r = msg.replay
    replay = ReplayRequest(r.path, r.content_type, r.body)
    try:
        replay.check()
    except InvalidArgument as exc:
        raise InvalidArgument(exc.field.replace("replay", field, 1), exc.problem) from exc
    return replay


def hit_record_from_pb(k: PB2.CacheKey, replay: ReplayRequest) -> HitRecord:
    """A hit record of the key's wire form without its model version (a record is
    replayed under whatever model the pod runs then) and its model-server request."""
    bare = PB2.CacheKey()
    bare.CopyFrom(k)
    bare.ClearField("model_version")
    return HitRecord(bare.SerializeToString(deterministic=True), replay)


def key_request_from_record(data: bytes) -> KeyRequest:
    """The KeyRequest of a hit record's key bytes; InvalidArgument if they do not decode."""
    try:
        k = PB2.CacheKey.FromString(data)
    except DecodeError as exc:
        raise InvalidArgument("record.key", f"is not a CacheKey ({exc})") from exc
    return key_request_from_pb(k)


def key_from_pb(k: PB2.CacheKey, keys: KeyResolver) -> ResolvedKey:
    """The validated key of a CacheKey message and the request it was built from.

    Memoised by the message's serialisation. The plain serialisation is about half
    the cost of the deterministic one; it can only order map entries differently for
    equal messages, which costs a memo miss, never a wrong key.
    """
    raw = k.SerializeToString()
    built = keys.known(raw)
    if built is None:
        built = keys.remember(raw, key_request_from_pb(k))
    return built


def query_from_pb(request: PB2.LookupRequest, keys: KeyResolver) -> LookupQuery:
    """The domain query of a LookupRequest (LookupStream's embedded one too): key,
    freshness bound, wait, the request the key came from and the declared traits."""
    # A newer request-level field (a bound, a wait) would change the answer allowed.
    refuse_unknown_fields(request, "", skip=("key", "traits"))
    key, source = key_from_pb(request.key, keys)
    return LookupQuery(
        key, request.max_age_seconds, request.wait_ms, source, traits_from_pb(request)
    )


def traits_from_pb(msg: PB2.LookupRequest | PB2.StoreRequest) -> RequestTraits:
    """The traits a Lookup or Store request declares (NO_TRAITS when it declares none)."""
    if not msg.HasField("traits"):
        return NO_TRAITS
    t = msg.traits
    refuse_unknown_fields(t, "traits")  # a newer declaration may be one that must bypass
    if not (t.side_effects or t.private_data or t.real_time or t.tools):
        return NO_TRAITS
    return RequestTraits(t.side_effects, t.private_data, t.real_time, t.tools)


def cost_from_pb(c: PB2.ComputeCost) -> ComputeCost:
    """Copy a ComputeCost message."""
    return ComputeCost(c.latency_ms, c.prompt_tokens, c.completion_tokens)


def lookup_result_to_pb(r: LookupResult) -> PB2.LookupResponse:
    """Build the LookupResponse for one result."""
    resp = PB2.LookupResponse()
    fill_lookup_response(resp, r)
    return resp


def fill_lookup_response(resp: PB2.LookupResponse, r: LookupResult) -> None:
    """Write one result into an empty LookupResponse (e.g. one from `responses.add()`).

    Fields are set one by one and only when not the default: cheaper than keyword
    construction, and a batch can fill its repeated field in place instead of copying.
    """
    resp.outcome = _OUTCOME[r.outcome]
    resp.key_digest = r.digest
    entry = r.entry
    if entry is not None and r.tier is not None:
        resp.payload = entry.payload
        resp.tier = _TIER[r.tier]
        resp.age_ms = r.age_ms
        c = entry.cost
        cost = resp.cost
        cost.latency_ms = c.latency_ms
        cost.prompt_tokens = c.prompt_tokens
        cost.completion_tokens = c.completion_tokens
    if r.degraded:
        resp.degraded = True
    if r.bypass is not None:
        resp.bypass_reason = r.bypass.detail
        resp.bypass_code = BYPASS_CODE[r.bypass.reason]
    if r.lease:
        resp.lease = r.lease
    if r.lease_holder:
        resp.lease_holder = True


def lookup_batch_to_pb(results: Sequence[LookupResult]) -> PB2.LookupBatchResponse:
    """Build the LookupBatchResponse, filling each response in place (no per-response copy)."""
    out = PB2.LookupBatchResponse()
    add = out.responses.add
    for r in results:
        fill_lookup_response(add(), r)
    return out


def store_result_to_pb(r: StoreResult) -> PB2.StoreResponse:
    """Build the StoreResponse."""
    resp = PB2.StoreResponse(outcome=_STORE[r.status], key_digest=r.digest, ttl_seconds=r.ttl_s)
    if r.bypass is not None:
        _fill_bypass(resp, r.bypass)
    return resp


def _fill_bypass(resp: PB2.StoreResponse, b: Bypass) -> None:
    resp.bypass_reason = b.detail
    resp.bypass_code = BYPASS_CODE[b.reason]
