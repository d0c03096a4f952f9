"""AdminService: authenticated invalidation, audit listing, stats and prewarm (admin
listener only). Domain errors become statuses in RpcObserver.run (api/rpc.py)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence

import grpc
import structlog
from infercache.v1 import admin_pb2 as PB2
from infercache.v1 import admin_pb2_grpc, cache_pb2

from sidecar.api.admin_codec import record_to_pb, selector_from_pb, stats_to_pb
from sidecar.api.auth import AdminAuth
from sidecar.api.observe import Attributes, RpcObserver
from sidecar.api.prewarm_codec import items_from_pb, options_from_pb, progress_to_pb
from sidecar.api.rpc import rpc
from sidecar.api.verification_codec import event_to_pb, fill_stats, scope_from_pb
from sidecar.errors import FailedPrecondition, InvalidArgument, TierUnavailable
from sidecar.invalidation.invalidator import Invalidator
from sidecar.observability.stats import CacheStats, RpcStats
from sidecar.observability.telemetry import Telemetry
from sidecar.observability.usage import TierUsage
from sidecar.prewarm.runner import Prewarmer, PrewarmRun
from sidecar.verification.audit import AuditedEvent, EventLog
from sidecar.verification.ledger import MAX_EVENTS, Ledger

SERVICE = PB2.DESCRIPTOR.services_by_name["AdminService"].full_name

log = structlog.get_logger("infercache.admin")


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
        server_info: Callable[[], cache_pb2.GetServerInfoResponse] | None = None,
        verification: Ledger | None = None,
        verification_log: EventLog | None = None,
    ) -> None:
        """`server_info`: what GetStats reports as `server` (GetServerInfo's answer);
        `verification`: shadow verification's state (GetStats, AcknowledgeVerification);
        `verification_log`: the fleet's durable event log GetStats lists (None: the
        ledger's own events)."""
        self._verification = verification
        self._verification_log = verification_log
        self._invalidator = invalidator
        self._auth = auth
        self._stats = stats
        self._prewarmer = prewarmer
        self._tiers = tiers
        self.observer = observer or RpcObserver(SERVICE, Telemetry(), RpcStats())
        self._started = time.monotonic() if started is None else started
        self._server_info = server_info

    def _describe_invalidate(
        self, request: PB2.InvalidateRequest, response: PB2.InvalidateResponse | None
    ) -> Attributes:
        attrs: Attributes = {"infercache.model_version": request.selector.model_version}
        if response is not None:
            attrs["infercache.epoch"] = response.record.epoch
        return attrs

    def _caller(self, context: grpc.aio.ServicerContext) -> str:
        """The authenticated caller (Unauthenticated otherwise): every RPC asks first."""
        return self._auth.caller(context.invocation_metadata() or ())

    @rpc(describe=_describe_invalidate)
    async def Invalidate(
        self, request: PB2.InvalidateRequest, context: grpc.aio.ServicerContext
    ) -> PB2.InvalidateResponse:
        """Bump the epoch of what the selector matches; answers with the audit record."""
        caller = self._caller(context)
        record = await self._invalidator.invalidate(
            selector_from_pb(request.selector), request.reason, caller
        )
        return PB2.InvalidateResponse(record=record_to_pb(record))

    @rpc()
    async def ListInvalidations(
        self, request: PB2.ListInvalidationsRequest, context: grpc.aio.ServicerContext
    ) -> PB2.ListInvalidationsResponse:
        """The audit log, newest first, a page at a time."""
        self._caller(context)
        records, token = await self._invalidator.list(request.page_token, request.page_size)
        return PB2.ListInvalidationsResponse(
            records=[record_to_pb(r) for r in records], next_page_token=token
        )

    @rpc()
    async def GetStats(
        self, request: PB2.GetStatsRequest, context: grpc.aio.ServicerContext
    ) -> PB2.GetStatsResponse:
        """Counters per model version, tier usage, the rule epoch and uptime."""
        self._caller(context)
        freshness = self._invalidator.freshness
        resp = stats_to_pb(self._stats, self._tiers())
        resp.epoch = freshness.rules.epoch
        resp.confirmed = freshness.confirmed()
        resp.member_id = freshness.member_id
        resp.uptime_seconds = time.monotonic() - self._started
        if self._server_info is not None:
            resp.server.CopyFrom(self._server_info())
        if self._verification is not None:
            events = await self._verification_events(self._verification, resp.member_id)
            fill_stats(resp, self._verification, events)
        return resp

    async def _verification_events(self, ledger: Ledger, member_id: str) -> list[AuditedEvent]:
        """The fleet's newest events from the durable log, oldest first; this sidecar's
        own (in memory) without one or when it does not answer."""
        if self._verification_log is not None:
            try:
                found = await self._verification_log.newest(MAX_EVENTS)
                return found[::-1]
            except TierUnavailable as exc:
                log.warning("verification_events_unavailable", error=str(exc))
        return [AuditedEvent(member_id, e) for e in list(ledger.events)]

    @rpc()
    async def AcknowledgeVerification(
        self, request: PB2.AcknowledgeVerificationRequest, context: grpc.aio.ServicerContext
    ) -> PB2.AcknowledgeVerificationResponse:
        """Serve a quarantined scope's hits again (audited with the caller and reason)."""
        caller = self._caller(context)
        scope = scope_from_pb(request.scope)
        if not request.reason.strip():
            raise InvalidArgument("reason", "is required (it is kept with the event)")
        ledger = self._verification
        event = None if ledger is None else ledger.acknowledge(scope, caller, request.reason)
        if event is None:
            raise FailedPrecondition("the scope is not quarantined on this sidecar")
        member_id = self._invalidator.freshness.member_id
        return PB2.AcknowledgeVerificationResponse(event=event_to_pb(event, member_id))

    @rpc()
    async def Prewarm(self, request: PB2.PrewarmRequest, context: grpc.aio.ServicerContext) -> None:
        """Run a prewarm, writing its progress until it ends (or the call does)."""
        # A coroutine writing to the context rather than an async generator: a
        # cancelled RPC then cancels this task at its current await, and
        # `run.stop()` in `finally` stops every upstream call at once.
        caller = self._caller(context)
        run = await self._start_prewarm(request)
        run.start()
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
        options = options_from_pb(request)
        if source == "requests":
            self._prewarmer.check_ready(len(request.requests.keys))
            items = items_from_pb(request.requests)
        elif source == "from_version":
            v = request.from_version
            items = await self._prewarmer.from_version(v.model_version, v.top_k)
            options = dataclasses.replace(options, requested=v.top_k)
        else:
            raise InvalidArgument("source", "set requests or from_version")
        return self._prewarmer.run(items, options)
