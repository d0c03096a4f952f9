"""Per-RPC telemetry at the gRPC edge: a duration sample, a server span, a log context.

Every servicer method runs its handler through `RpcObserver.run` (api/rpc.py builds
the public methods), which also turns a domain error into the RPC's status. Cost per RPC
with tracing off: two clock reads, one contextvar set/reset and one histogram
bucket increment (~1 us). With tracing on, the span is built when the RPC has
finished, back-dated to its start, with every attribute known at once
(observability/spans.py: no live SDK span): the handler is not slowed by an active
span, and attributes are computed only for spans the sampler records. Span
attributes never hold prompt text or payloads: only dimensions, a (hashed) tenant,
the key digest's prefix and outcomes.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import grpc
from infercache.v1 import cache_pb2 as PB2
from opentelemetry.propagate import extract
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.util.types import AttributeValue

from sidecar.api.decode import Undecodable
from sidecar.api.internal import InternalErrors
from sidecar.api.status import abort_for, status_for
from sidecar.errors import InfercacheError
from sidecar.keys import CacheKey
from sidecar.observability.logs import REQUEST_KEY, REQUEST_RPC
from sidecar.observability.stats import RpcStats
from sidecar.observability.telemetry import Telemetry

Req = TypeVar("Req")
Resp = TypeVar("Resp")
Attributes = dict[str, AttributeValue]
Describe = Callable[[Any, Any], Attributes]

DIGEST_PREFIX_BYTES = 8
_TENANT_MEMO_MAX = 4096

_LOOKUP_OUTCOME = {
    v.number: v.name.removeprefix("LOOKUP_OUTCOME_").lower()
    for v in PB2.LookupOutcome.DESCRIPTOR.values
}
_STORE_OUTCOME = {
    v.number: v.name.removeprefix("STORE_OUTCOME_").lower()
    for v in PB2.StoreOutcome.DESCRIPTOR.values
}
_TIER = {v.number: v.name.removeprefix("TIER_").lower() for v in PB2.Tier.DESCRIPTOR.values}
_TIER[0] = "none"  # TIER_UNSPECIFIED: not a hit
_UNSET = Status()
_STATUS_NUMBER = {c.name: c.value[0] for c in grpc.StatusCode}


class TenantLabel:
    """A tenant as spans show it: a SHA-256 prefix (pseudonymous), or in clear if allowed."""

    def __init__(self, in_clear: bool) -> None:
        self._in_clear = in_clear
        self._memo: dict[str, str] = {}

    def __call__(self, tenant: str) -> str:
        if self._in_clear:
            return tenant
        label = self._memo.get(tenant)
        if label is None:
            label = hashlib.sha256(b"infercache-tenant\0" + tenant.encode()).hexdigest()[:16]
            if len(self._memo) < _TENANT_MEMO_MAX:
                self._memo[tenant] = label
        return label


def _code_name(context: grpc.aio.ServicerContext, exc: BaseException | None) -> str:
    if isinstance(exc, asyncio.CancelledError):
        return "CANCELLED"
    code = context.code()
    if isinstance(code, grpc.StatusCode):
        return str(code.name)
    return "UNKNOWN"


class RpcObserver:
    """Wraps handlers of one service: durations into RpcStats, spans into the tracer."""

    def __init__(self, service: str, telemetry: Telemetry, rpc_stats: RpcStats) -> None:
        self._service = service
        self._stats = rpc_stats
        self._spans = telemetry.span_recorder() if telemetry.tracing else None
        self._names: dict[str, str] = {}
        self.tenant = TenantLabel(telemetry.tenants_in_clear)
        self._internal = InternalErrors()

    async def run(
        self,
        rpc: str,
        request: Req,
        context: grpc.aio.ServicerContext,
        handler: Callable[[Req, grpc.aio.ServicerContext], Awaitable[Resp]],
        describe: Describe | None = None,
    ) -> Resp:
        """Run one RPC's handler, measured; `describe(request, response)` gives span attributes.

        A domain error the handler raises ends the RPC with its mapped status
        (api/status.py); any other exception propagates as it is.
        """
        start = time.perf_counter()
        wall_ns = time.time_ns() if self._spans is not None else 0
        token = REQUEST_RPC.set(rpc)
        key_token = REQUEST_KEY.set(None)
        code = "OK"
        response: Resp | None = None
        try:
            if request.__class__ is Undecodable:
                raise request.error()  # type: ignore[attr-defined]
            response = await handler(request, context)
            return response
        except InfercacheError as exc:
            # The one place a domain error becomes a status: handlers only raise.
            code = status_for(exc).name
            await abort_for(context, rpc, exc)
        except grpc.aio.AbortError:
            code = _code_name(context, None)  # the handler ended the RPC itself
            raise
        except Exception as exc:
            # A bug, not the caller's doing: INTERNAL with an id the log line also holds
            # (grpcio would answer UNKNOWN and log a traceback per request).
            code = "INTERNAL"
            await context.abort(grpc.StatusCode.INTERNAL, self._internal.report(rpc, exc))
            raise AssertionError("context.abort returned") from exc  # pragma: no cover
        except BaseException as exc:
            code = _code_name(context, exc)
            raise
        finally:
            try:
                self._stats.observe(rpc, code, time.perf_counter() - start)
                if self._spans is not None:
                    # Before the reset: the describer takes the key the handler resolved.
                    self._span(rpc, wall_ns, request, response, code, context, describe)
            finally:
                REQUEST_RPC.reset(token)
                REQUEST_KEY.reset(key_token)

    def _span(
        self,
        rpc: str,
        wall_ns: int,
        request: Any,
        response: Any,
        code: str,
        context: grpc.aio.ServicerContext,
        describe: Describe | None,
    ) -> None:
        spans = self._spans
        assert spans is not None
        name = self._names.get(rpc)
        if name is None:
            name = self._names[rpc] = f"{self._service}/{rpc}"
        carrier = _trace_headers(context.invocation_metadata())
        sampled = spans.sampled_context(
            name, SpanKind.SERVER, extract(carrier) if carrier else None
        )
        if sampled is None:
            return
        attrs: Attributes = {
            "rpc.system": "grpc",
            "rpc.service": self._service,
            "rpc.method": rpc,
            "rpc.grpc.status_code": _STATUS_NUMBER[code],
        }
        if describe is not None:
            # An invalid request: its span has the status, not the key's fields.
            with contextlib.suppress(InfercacheError):
                attrs |= describe(request, response)
        status = _UNSET
        if code != "OK":
            details = context.details() if hasattr(context, "details") else None
            status = Status(StatusCode.ERROR, f"{code}: {details or ''}".rstrip(": "))
        spans.finish(name, SpanKind.SERVER, sampled, attrs, wall_ns, time.time_ns(), status)


def _trace_headers(metadata: Any) -> Mapping[str, str]:
    if not metadata:
        return {}
    return {k: v for k, v in metadata if k in ("traceparent", "tracestate", "baggage")}


def key_attributes(key: CacheKey, tenant: Callable[[str], str]) -> Attributes:
    """The span attributes of a cache key: dimensions, tenant label, digest prefix."""
    return {
        "infercache.model_version": key.model_version,
        "infercache.prompt_version": key.prompt_version,
        "infercache.adapter_version": key.adapter_version,
        "infercache.tenant": tenant(key.tenant),
        "infercache.key_digest": key.digest[:DIGEST_PREFIX_BYTES].hex(),
    }


class CacheDescriber:
    """Span attributes of the data-plane RPCs, from the validated key (memoised by the servicer)."""

    def __init__(self, key_of: Callable[[PB2.CacheKey], CacheKey], tenant: TenantLabel) -> None:
        self._key_of = key_of
        self._tenant = tenant

    def _key(self, key: PB2.CacheKey) -> CacheKey:
        """The key the handler resolved for this request (REQUEST_KEY: a Lookup's, a
        Store's, a batch's first), else `key` resolved here (it raises if invalid)."""
        resolved = REQUEST_KEY.get()
        return resolved if resolved is not None else self._key_of(key)

    def lookup(self, request: PB2.LookupRequest, response: PB2.LookupResponse | None) -> Attributes:
        """Lookup: key attributes, outcome, tier."""
        attrs = key_attributes(self._key(request.key), self._tenant)
        if response is not None:
            attrs["infercache.outcome"] = _LOOKUP_OUTCOME.get(response.outcome, "unknown")
            attrs["infercache.tier"] = _TIER.get(response.tier, "none")
            attrs["infercache.degraded"] = response.degraded
            if response.bypass_code:
                attrs["infercache.bypass_reason"] = _bypass_label(response.bypass_code)
        return attrs

    def lookup_batch(
        self, request: PB2.LookupBatchRequest, response: PB2.LookupBatchResponse | None
    ) -> Attributes:
        """LookupBatch: batch size, the first key's attributes, hits and tiers counted."""
        attrs: Attributes = {"infercache.batch_size": len(request.requests)}
        if request.requests:
            attrs |= key_attributes(self._key(request.requests[0].key), self._tenant)
        if response is not None:
            hits = [r for r in response.responses if r.outcome == PB2.LOOKUP_OUTCOME_HIT]
            attrs["infercache.hits"] = len(hits)
            attrs["infercache.outcome"] = (
                "hit" if len(hits) == len(response.responses) else ("partial" if hits else "miss")
            )
            tiers = sorted({_TIER.get(r.tier, "none") for r in hits})
            attrs["infercache.tier"] = ",".join(tiers) if tiers else "none"
        return attrs

    def store(self, request: PB2.StoreRequest, response: PB2.StoreResponse | None) -> Attributes:
        """Store: key attributes, outcome, payload size (never the payload)."""
        attrs = key_attributes(self._key(request.key), self._tenant)
        attrs["infercache.payload_bytes"] = len(request.payload)
        if response is not None:
            attrs["infercache.outcome"] = _STORE_OUTCOME.get(response.outcome, "unknown")
            if response.bypass_code:
                attrs["infercache.bypass_reason"] = _bypass_label(response.bypass_code)
        return attrs


def _bypass_label(code: int) -> str:
    """ "not_cacheable" for BYPASS_REASON_NOT_CACHEABLE (the stats label of the same reason)."""
    try:
        name = PB2.BypassReason.Name(code)
    except ValueError:
        return "unknown"
    return name.removeprefix("BYPASS_REASON_").lower()
