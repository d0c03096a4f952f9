"""Pure builders of the data-plane requests, shared by the sync and async clients.

Each function turns a client method's arguments into the message it sends (and
the lookup's default deadline); no I/O, no channel, so both clients build every
request the same way (httpx's BaseClient does the same for its two clients).
"""

from __future__ import annotations

from collections.abc import Sequence

from infercache.v1 import cache_pb2 as PB2

DEFAULT_MESSAGE_BYTES = 64 * 1024 * 1024
"""Default send/receive message limit of a client channel."""


def channel_options(max_message_bytes: int) -> list[tuple[str, int]]:
    """gRPC channel options that allow messages up to `max_message_bytes` both ways."""
    return [
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.max_send_message_length", max_message_bytes),
    ]


def lookup_request(
    key: PB2.CacheKey,
    *,
    max_age_seconds: int = 0,
    wait_ms: int = 0,
    traits: PB2.RequestTraits | None = None,
) -> PB2.LookupRequest:
    """The LookupRequest of `lookup` (and the one LookupStream carries)."""
    return PB2.LookupRequest(
        key=key, max_age_seconds=max_age_seconds, wait_ms=wait_ms, traits=traits
    )


def lookup_timeout(timeout: float | None, wait_ms: int) -> float:
    """A lookup's deadline in seconds: `timeout`, else 1 s plus the wait it asked for."""
    return timeout if timeout is not None else 1.0 + wait_ms / 1000


def lookup_batch_request(
    keys: Sequence[PB2.CacheKey], *, traits: PB2.RequestTraits | None = None
) -> PB2.LookupBatchRequest:
    """One LookupBatchRequest for `keys`, each declaring the same `traits`."""
    return PB2.LookupBatchRequest(requests=[PB2.LookupRequest(key=k, traits=traits) for k in keys])


def store_request(
    key: PB2.CacheKey,
    payload: bytes = b"",
    *,
    lease: bytes = b"",
    ttl_seconds: int = 0,
    cost: PB2.ComputeCost | None = None,
    traits: PB2.RequestTraits | None = None,
    chunks: Sequence[PB2.ChunkBoundary] = (),
    replay: PB2.ReplayRequest | None = None,
) -> PB2.StoreRequest:
    """The StoreRequest of `store`; without payload and chunks, a StoreStream's opening.

    `replay`: the exact model-server request that produced the result (see
    replay_request); only a result stored with one can be prewarmed on new weights."""
    return PB2.StoreRequest(
        key=key,
        payload=payload,
        lease=lease,
        ttl_seconds=ttl_seconds,
        cost=cost,
        traits=traits,
        chunks=chunks,
        replay=replay,
    )


def replay_request(
    path: str, body: bytes, content_type: str = "application/json"
) -> PB2.ReplayRequest:
    """The model-server request a Store attaches: `body` exactly as it was sent to `path`
    ("/v1/chat/completions" or "/v1/completions")."""
    return PB2.ReplayRequest(path=path, content_type=content_type, body=body)


def lookup_stream_request(
    key: PB2.CacheKey,
    *,
    pacing: PB2.Pacing | None = None,
    max_age_seconds: int = 0,
    wait_ms: int = 0,
    traits: PB2.RequestTraits | None = None,
) -> PB2.LookupStreamRequest:
    """The LookupStreamRequest of `lookup_stream`: a lookup plus the replay's pacing."""
    lookup = lookup_request(key, max_age_seconds=max_age_seconds, wait_ms=wait_ms, traits=traits)
    return PB2.LookupStreamRequest(lookup=lookup, pacing=pacing)


def report_request(
    key_digest: bytes, *, accepted: bool, reason: str = ""
) -> PB2.ReportOutcomeRequest:
    """The ReportOutcomeRequest of a downstream verdict on the entry with `key_digest`."""
    verdict = (
        PB2.REPORT_OUTCOME_VERDICT_ACCEPTED if accepted else PB2.REPORT_OUTCOME_VERDICT_REJECTED
    )
    return PB2.ReportOutcomeRequest(key_digest=key_digest, verdict=verdict, reason=reason)


def server_info_request() -> PB2.GetServerInfoRequest:
    """The (empty) GetServerInfoRequest."""
    return PB2.GetServerInfoRequest()


def chunk_message(data: str | bytes, tokens: int = 0, offset_ms: int = 0) -> PB2.StoreStreamRequest:
    """A StoreStream chunk message (text is sent as UTF-8)."""
    raw = data.encode() if isinstance(data, str) else data
    return PB2.StoreStreamRequest(chunk=PB2.Chunk(data=raw, tokens=tokens, offset_ms=offset_ms))


def finish_message(reason: str, cost: PB2.ComputeCost | None) -> PB2.StoreStreamRequest:
    """The StoreStream finish message that commits the streamed result."""
    return PB2.StoreStreamRequest(finish=PB2.StoreStreamFinish(finish_reason=reason, cost=cost))
