"""Pure protobuf <-> domain conversions for the streaming RPCs and ReportOutcome."""

from __future__ import annotations

from collections.abc import Sequence

from infercache.v1 import cache_pb2 as PB2

from sidecar.api.cache_codec import cost_from_pb, fill_lookup_response, store_result_to_pb
from sidecar.entries import ChunkMeta, ComputeCost
from sidecar.errors import InvalidArgument
from sidecar.results.feedback import Verdict
from sidecar.results.pacing import PaceMode, Pacing, ReplayChunk
from sidecar.results.stream_store import StreamChunk, StreamFinish, StreamStoreResult
from sidecar.results.types import LookupResult

_PACE = {
    PB2.PACING_MODE_UNSPECIFIED: PaceMode.FASTEST,
    PB2.PACING_MODE_FASTEST: PaceMode.FASTEST,
    PB2.PACING_MODE_TOKENS_PER_SECOND: PaceMode.TOKENS_PER_SECOND,
    PB2.PACING_MODE_ORIGINAL: PaceMode.ORIGINAL,
}
_VERDICT = {
    PB2.REPORT_OUTCOME_VERDICT_ACCEPTED: Verdict.ACCEPTED,
    PB2.REPORT_OUTCOME_VERDICT_REJECTED: Verdict.REJECTED,
}


def pacing_from_pb(p: PB2.Pacing) -> Pacing:
    """Validated pacing; InvalidArgument for an unknown mode or a bad rate."""
    mode = _PACE.get(p.mode)
    if mode is None:  # proto3 enums are open: a newer client may send more
        raise InvalidArgument("pacing.mode", f"{p.mode} is not a known pacing mode")
    return Pacing(mode, p.tokens_per_second, p.max_delay_ms)


def chunks_from_pb(chunks: Sequence[PB2.ChunkBoundary]) -> list[ChunkMeta]:
    """StoreRequest.chunks as domain chunk metadata (validated by the cache)."""
    return [ChunkMeta(c.size_bytes, c.tokens, c.offset_ms) for c in chunks]


def verdict_from_pb(v: PB2.ReportOutcomeVerdict) -> Verdict:
    """ACCEPTED or REJECTED; InvalidArgument for anything else."""
    verdict = _VERDICT.get(v)
    if verdict is None:
        raise InvalidArgument("verdict", "must be ACCEPTED or REJECTED")
    return verdict


def header_to_pb(r: LookupResult, model_version: str) -> PB2.LookupStreamResponse:
    """The first LookupStream message: the lookup's answer without its payload."""
    out = PB2.LookupStreamResponse()
    header = out.header
    fill_lookup_response(header.lookup, r)
    header.lookup.ClearField("payload")
    header.model_version = model_version
    entry = r.entry
    if entry is not None and r.tier is not None:
        header.chunk_count = entry.chunk_count
        header.total_bytes = len(entry.payload)
        header.finish_reason = entry.finish_reason
    return out


def chunk_to_pb(c: ReplayChunk) -> PB2.LookupStreamResponse:
    """A replayed chunk, flagged cached."""
    out = PB2.LookupStreamResponse()
    chunk = out.chunk
    chunk.data = c.data
    chunk.tokens = c.meta.tokens
    chunk.offset_ms = c.meta.offset_ms
    chunk.index = c.index
    chunk.cached = True
    return out


def stream_chunk_from_pb(c: PB2.Chunk) -> StreamChunk:
    """An incoming StoreStream chunk."""
    return StreamChunk(c.data, c.tokens, c.offset_ms)


def stream_finish_from_pb(f: PB2.StoreStreamFinish) -> StreamFinish:
    """The finish message; its cost replaces the opening one only when set."""
    cost: ComputeCost | None = cost_from_pb(f.cost) if f.HasField("cost") else None
    return StreamFinish(f.finish_reason, cost)


def stream_result_to_pb(r: StreamStoreResult) -> PB2.StoreStreamResponse:
    """The StoreStream answer."""
    return PB2.StoreStreamResponse(
        store=store_result_to_pb(r.store), chunk_count=r.chunk_count, total_bytes=r.total_bytes
    )
