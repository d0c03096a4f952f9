"""AdminService: authenticated invalidation and audit listing (admin listener only)."""

from __future__ import annotations

import grpc
from infercache.v1 import admin_pb2 as PB2
from infercache.v1 import admin_pb2_grpc

from sidecar.api.status import abort_for
from sidecar.auth import AdminAuth
from sidecar.control.base import AuditRecord
from sidecar.errors import InfercacheError
from sidecar.invalidation.invalidator import Invalidator
from sidecar.invalidation.rules import Selector
from sidecar.stats import CacheStats


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


class AdminServicer(admin_pb2_grpc.AdminServiceServicer):  # type: ignore[misc]
    """Every method authenticates first; nothing happens for a bad token."""

    def __init__(self, invalidator: Invalidator, auth: AdminAuth, stats: CacheStats) -> None:
        self._invalidator = invalidator
        self._auth = auth
        self._stats = stats

    async def Invalidate(
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

    async def ListInvalidations(
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

    async def GetStats(
        self, request: PB2.GetStatsRequest, context: grpc.aio.ServicerContext
    ) -> PB2.GetStatsResponse:
        try:
            self._auth.caller(context.invocation_metadata() or ())
        except InfercacheError as exc:
            await abort_for(context, "GetStats", exc)
        freshness = self._invalidator.freshness
        return PB2.GetStatsResponse(
            counters=self._stats.snapshot(),
            epoch=freshness.rules.epoch,
            confirmed=freshness.confirmed(),
            member_id=freshness.member_id,
        )
