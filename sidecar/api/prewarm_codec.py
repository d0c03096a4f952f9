"""Pure protobuf <-> domain conversions for Prewarm (no I/O, no grpc)."""

from __future__ import annotations

from infercache.v1 import admin_pb2 as PB2

from sidecar.api.cache_codec import hit_record_from_pb, key_request_from_pb
from sidecar.errors import InvalidArgument
from sidecar.prewarm.progress import (
    NOT_REPLAYABLE,
    ItemOutcome,
    PrewarmItem,
    Progress,
    RunOptions,
    RunState,
)
from sidecar.prewarm.records import HitRecord, ReplayRequest

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
    """Inline requests, each with its model-server request if given (replays[i] for
    keys[i]; none: skipped not_replayable); keys are validated when the run builds them."""
    n, given = len(request_list.keys), len(request_list.replays)
    if given > n:
        raise InvalidArgument("requests.replays", f"has {given} entries for {n} keys")
    items = []
    for i, k in enumerate(request_list.keys):
        record: HitRecord | None = None
        if i < given and request_list.replays[i].path:
            r = request_list.replays[i]
            replay = ReplayRequest(r.path, r.content_type, r.body)
            try:
                replay.check()
            except InvalidArgument as exc:
                raise InvalidArgument(
                    exc.field.replace("replay", f"requests.replays[{i}]", 1), exc.problem
                ) from exc
            record = hit_record_from_pb(k, replay)
        items.append(PrewarmItem(key_request_from_pb(k), record=record))
    return items


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
        not_replayable=p.skipped_by_reason.get(NOT_REPLAYABLE, 0),
        requested=p.requested,
        replayable=p.replayable,
    )
