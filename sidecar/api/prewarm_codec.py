"""Pure protobuf <-> domain conversions for Prewarm (no I/O, no grpc)."""

from __future__ import annotations

from infercache.v1 import admin_pb2 as PB2

from sidecar.api.cache_codec import key_request_from_pb
from sidecar.prewarm.progress import ItemOutcome, PrewarmItem, Progress, RunOptions, RunState

_STATE = {
    RunState.RUNNING: PB2.PREWARM_STATE_RUNNING,
    RunState.COMPLETED: PB2.PREWARM_STATE_COMPLETED,
    RunState.FAILURE_BUDGET_EXCEEDED: PB2.PREWARM_STATE_FAILURE_BUDGET_EXCEEDED,
    RunState.FAILED: PB2.PREWARM_STATE_FAILED,
}
_OUTCOME = {
    ItemOutcome.STORED: PB2.PREWARM_ITEM_OUTCOME_STORED,
    ItemOutcome.SKIPPED: PB2.PREWARM_ITEM_OUTCOME_SKIPPED,
    ItemOutcome.FAILED: PB2.PREWARM_ITEM_OUTCOME_FAILED,
}


def items_from_pb(request_list: PB2.PrewarmRequestList) -> list[PrewarmItem]:
    """Inline requests; validation happens per item when the run builds its key."""
    return [PrewarmItem(key_request_from_pb(k)) for k in request_list.keys]


def options_from_pb(request: PB2.PrewarmRequest) -> RunOptions:
    """TTL, concurrency and failure budget of a request."""
    return RunOptions(
        ttl_s=request.ttl_seconds,
        concurrency=request.concurrency,
        max_failures=request.max_failures if request.HasField("max_failures") else None,
    )


def progress_to_pb(p: Progress) -> PB2.PrewarmResponse:
    """One progress message."""
    return PB2.PrewarmResponse(
        state=_STATE[p.state],
        total=p.total,
        done=p.done,
        stored=p.stored,
        skipped=p.skipped,
        failed=p.failed,
        skipped_by_reason=dict(p.skipped_by_reason),
        failed_by_reason=dict(p.failed_by_reason),
        elapsed_ms=p.elapsed_ms,
        eta_ms=p.eta_ms,
        items=[
            PB2.PrewarmItemResult(
                index=r.index,
                outcome=_OUTCOME[r.outcome],
                reason=r.reason,
                detail=r.detail,
                key_digest=r.digest,
            )
            for r in p.items
        ],
        error=p.error,
        model_version=p.model_version,
    )
