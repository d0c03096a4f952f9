"""AdminService: authenticated invalidation, audit listing and prewarm (admin listener only)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import grpc
import structlog
from infercache.v1 import admin_pb2 as PB2
from infercache.v1 import admin_pb2_grpc

from sidecar.api.auth import AdminAuth
from sidecar.api.observe import Attributes, RpcObserver
from sidecar.api.prewarm_codec import items_from_pb, options_from_pb, progress_to_pb
from sidecar.api.status import abort_for
from sidecar.errors import FailedPrecondition, InfercacheError, InvalidArgument
from sidecar.invalidation.invalidator import Invalidator
from sidecar.invalidation.rules import Selector
from sidecar.invalidation.store import AuditRecord
from sidecar.observability.stats import CacheStats, RpcStats
from sidecar.observability.telemetry import Telemetry
from sidecar.observability.usage import TierUsage
from sidecar.prewarm.runner import Prewarmer, PrewarmRun

SERVICE = PB2.DESCRIPTOR.services_by_name["AdminService"].full_name

log = structlog.get_logger("infercache.admin")


def selector_from_pb(s: PB2.Selector) -> Selector:
    """Empty strings mean "unconstrained"."""
    return Selector(
        tenant=s.tenant or None,
        model_version=s.model_version or None,
        adapter_version=s.adapter_version or None,
        prompt_version=s.prompt_version or None,
        all=s.all,
    )


def selector_to_pb(s: Selector) -> PB2.Selector:
    """Inverse of selector_from_pb."""
    return PB2.Selector(
        tenant=s.tenant or "",
        model_version=s.model_version or "",
        adapter_version=s.adapter_version or "",
        prompt_version=s.prompt_version or "",
        all=s.all,
    )


def record_to_pb(r: AuditRecord) -> PB2.InvalidationRecord:
    """Audit record -> message."""
    return PB2.InvalidationRecord(
        id=r.id,
        time_ms=r.time_ms,
        caller=r.caller,
        selector=selector_to_pb(r.selector),
        reason=r.reason,
        epoch=r.epoch,
        estimated_entries=r.estimated_entries,
    )


def _joined(key: tuple[str, ...]) -> str:
    return ".".join(k for k in key if k)


def stats_to_pb(stats: CacheStats, tiers: Sequence[TierUsage]) -> PB2.GetStatsResponse:
    """CacheStats -> the counter parts of GetStatsResponse (totals, per version, tiers)."""
    by_version: dict[str, PB2.VersionStats] = {}

    def of(version: str) -> PB2.VersionStats:
        v = by_version.get(version)
        if v is None:
            v = by_version[version] = PB2.VersionStats(model_version=version)
        return v

    for (version, *rest), n in list(stats.lookups.items()):
        of(version).lookups[_joined(tuple(rest))] += n
    for (version, *rest), n in list(stats.stores.items()):
        of(version).stores[_joined(tuple(rest))] += n
    for (version, reason), n in list(stats.rejected.items()):
        of(version).rejected[reason] += n
    for (version, reason), n in list(stats.bypasses.items()):
        of(version).bypasses[reason] += n
    for (version, event), n in list(stats.leases.items()):
        of(version).leases[event] += n
    for (version, *rest), n in list(stats.downstream.items()):
        of(version).downstream[_joined(tuple(rest))] += n
    for version, n in list(stats.degraded.items()):
        of(version).degraded += n
    for version, n in list(stats.dead.items()):
        of(version).dead += n
    for version, n in list(stats.invalidations.items()):
        of(version).invalidations += n
    for (version, _), n in list(stats.saved_ms.items()):
        of(version).saved_latency_ms += n
    for (version, kind), n in list(stats.saved_tokens.items()):
        v = of(version)
        if kind == "prompt":
            v.saved_prompt_tokens += n
        else:
            v.saved_completion_tokens += n
    return PB2.GetStatsResponse(
        counters=stats.snapshot(),
        versions=[by_version[k] for k in sorted(by_version)],
        tiers=[PB2.TierUsage(name=t.name, bytes=t.bytes, entries=t.entries) for t in tiers],
        global_counters={
            "warm_read_failures": stats.warm_read_failures,
            "warm_write_failures": stats.warm_write_failures,
            "reclaimed": stats.reclaimed,
        },
    )


def _describe_invalidate(
    request: PB2.InvalidateRequest, response: PB2.InvalidateResponse | None
) -> Attributes:
    attrs: Attributes = {"infercache.model_version": request.selector.model_version}
    if response is not None:
        attrs["infercache.epoch"] = response.record.epoch
    return attrs


class AdminServicer(admin_pb2_grpc.AdminServiceServicer):  # type: ignore[misc]
    """Every method authenticates first; nothing happens for a bad token."""

    def __init__(
        self,
        invalidator: Invalidator,
        auth: AdminAuth,
        stats: CacheStats,
        prewarmer: Prewarmer | None = None,
        *,
        tiers: Callable[[], Sequence[TierUsage]] = list,
        observer: RpcObserver | None = None,
        started: float | None = None,
    ) -> None:
        self._invalidator = invalidator
        self._auth = auth
        self._stats = stats
        self._prewarmer = prewarmer
        self._tiers = tiers
        self._observe = observer or RpcObserver(SERVICE, Telemetry(), RpcStats())
        self._started = time.monotonic() if started is None else started

    async def Invalidate(
        self, request: PB2.InvalidateRequest, context: grpc.aio.ServicerContext
    ) -> PB2.InvalidateResponse:
        return await self._observe.run(
            "Invalidate", request, context, self._invalidate, _describe_invalidate
        )

    async def ListInvalidations(
        self, request: PB2.ListInvalidationsRequest, context: grpc.aio.ServicerContext
    ) -> PB2.ListInvalidationsResponse:
        return await self._observe.run(
            "ListInvalidations", request, context, self._list_invalidations
        )

    async def GetStats(
        self, request: PB2.GetStatsRequest, context: grpc.aio.ServicerContext
    ) -> PB2.GetStatsResponse:
        return await self._observe.run("GetStats", request, context, self._get_stats)

    async def _invalidate(
        self, request: PB2.InvalidateRequest, context: grpc.aio.ServicerContext
    ) -> PB2.InvalidateResponse:
        try:
            caller = self._auth.caller(context.invocation_metadata() or ())
            record = await self._invalidator.invalidate(
                selector_from_pb(request.selector), request.reason, caller
            )
        except InfercacheError as exc:
            await abort_for(context, "Invalidate", exc)
        return PB2.InvalidateResponse(record=record_to_pb(record))

    async def _list_invalidations(
        self, request: PB2.ListInvalidationsRequest, context: grpc.aio.ServicerContext
    ) -> PB2.ListInvalidationsResponse:
        try:
            self._auth.caller(context.invocation_metadata() or ())
            records, token = await self._invalidator.list(request.page_token, request.page_size)
        except InfercacheError as exc:
            await abort_for(context, "ListInvalidations", exc)
        return PB2.ListInvalidationsResponse(
            records=[record_to_pb(r) for r in records], next_page_token=token
        )

    async def _get_stats(
        self, request: PB2.GetStatsRequest, context: grpc.aio.ServicerContext
    ) -> PB2.GetStatsResponse:
        try:
            self._auth.caller(context.invocation_metadata() or ())
        except InfercacheError as exc:
            await abort_for(context, "GetStats", exc)
        freshness = self._invalidator.freshness
        resp = stats_to_pb(self._stats, self._tiers())
        resp.epoch = freshness.rules.epoch
        resp.confirmed = freshness.confirmed()
        resp.member_id = freshness.member_id
        resp.uptime_seconds = time.monotonic() - self._started
        return resp

    async def Prewarm(self, request: PB2.PrewarmRequest, context: grpc.aio.ServicerContext) -> None:
        await self._observe.run("Prewarm", request, context, self._prewarm)

    async def _prewarm(
        self, request: PB2.PrewarmRequest, context: grpc.aio.ServicerContext
    ) -> None:
        # A coroutine writing to the context rather than an async generator: a
        # cancelled RPC then cancels this task at its current await, and
        # `run.stop()` in `finally` stops every upstream call at once.
        try:
            caller = self._auth.caller(context.invocation_metadata() or ())
            run = await self._start_prewarm(request)
            run.start()
        except InfercacheError as exc:
            await abort_for(context, "Prewarm", exc)
        log.info("prewarm_requested", caller=caller, source=request.WhichOneof("source"))
        try:
            async for progress in run.updates():
                await context.write(progress_to_pb(progress))
        finally:
            await run.stop()

    async def _start_prewarm(self, request: PB2.PrewarmRequest) -> PrewarmRun:
        if self._prewarmer is None:
            raise FailedPrecondition("prewarm is not available on this sidecar")
        source = request.WhichOneof("source")
        if source == "requests":
            self._prewarmer.check_ready(len(request.requests.keys))
            items = items_from_pb(request.requests)
        elif source == "from_version":
            v = request.from_version
            items = await self._prewarmer.from_version(v.model_version, v.top_k)
        else:
            raise InvalidArgument("source", "set requests or from_version")
        return self._prewarmer.run(items, options_from_pb(request))
