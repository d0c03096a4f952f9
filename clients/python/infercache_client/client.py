"""Typed sync and async clients for the infercache data plane.

Keys are built with make_key() (keys.py) and hashed by the sidecar. Both clients
build their requests with the same pure functions (builders.py); they differ only
in how they call.
"""

from __future__ import annotations

from collections.abc import Sequence

import grpc
from infercache.v1 import cache_pb2 as PB2
from infercache.v1 import cache_pb2_grpc

from infercache_client import builders as build
from infercache_client.streams import (
    AsyncLookupStream,
    AsyncStoreStream,
    LookupStream,
    StoreStream,
)


class CacheClient:
    """Blocking client. `target` is "host:port" or "unix:/path/to.sock"."""

    def __init__(
        self, target: str, *, max_message_bytes: int = build.DEFAULT_MESSAGE_BYTES
    ) -> None:
        options = build.channel_options(max_message_bytes)
        self._channel = grpc.insecure_channel(target, options=options)
        self._stub = cache_pb2_grpc.CacheServiceStub(self._channel)

    def lookup(
        self,
        key: PB2.CacheKey,
        *,
        max_age_seconds: int = 0,
        wait_ms: int = 0,
        traits: PB2.RequestTraits | None = None,
        timeout: float | None = None,
    ) -> PB2.LookupResponse:
        """Look a key up; outcome is HIT, MISS (with `.lease` for Store) or BYPASS
        (`.bypass_code` says why; do not Store).

        wait_ms > 0: if another caller is computing this key, wait that long for its result.
        traits: what the request declares (make_traits); the sidecar's policy decides.
        """
        req = build.lookup_request(
            key, max_age_seconds=max_age_seconds, wait_ms=wait_ms, traits=traits
        )
        resp: PB2.LookupResponse = self._stub.Lookup(
            req, timeout=build.lookup_timeout(timeout, wait_ms)
        )
        return resp

    def lookup_batch(
        self,
        keys: Sequence[PB2.CacheKey],
        *,
        traits: PB2.RequestTraits | None = None,
        timeout: float | None = 5.0,
    ) -> list[PB2.LookupResponse]:
        """Look many keys up in one RPC; results keep the order of `keys`.

        `traits` are declared for every key.
        """
        req = build.lookup_batch_request(keys, traits=traits)
        resp: PB2.LookupBatchResponse = self._stub.LookupBatch(req, timeout=timeout)
        return list(resp.responses)

    def store(
        self,
        key: PB2.CacheKey,
        payload: bytes,
        *,
        lease: bytes = b"",
        ttl_seconds: int = 0,
        cost: PB2.ComputeCost | None = None,
        traits: PB2.RequestTraits | None = None,
        chunks: Sequence[PB2.ChunkBoundary] = (),
        replay: PB2.ReplayRequest | None = None,
        timeout: float | None = 5.0,
    ) -> PB2.StoreResponse:
        """Store a result with the lease from the MISS; `.outcome` says STORED or why not.

        traits: the same declarations as the lookup's; the policy is applied again here.
        `chunks` (see join_chunks) keeps the stream boundaries for lookup_stream replays.
        """
        req = build.store_request(
            key,
            payload,
            lease=lease,
            ttl_seconds=ttl_seconds,
            cost=cost,
            traits=traits,
            chunks=chunks,
            replay=replay,
        )
        resp: PB2.StoreResponse = self._stub.Store(req, timeout=timeout)
        return resp

    def lookup_stream(
        self,
        key: PB2.CacheKey,
        *,
        pacing: PB2.Pacing | None = None,
        max_age_seconds: int = 0,
        wait_ms: int = 0,
        traits: PB2.RequestTraits | None = None,
        timeout: float | None = None,
    ) -> LookupStream:
        """Look a key up as a stream: `.header()`, then iterate the cached chunks (HIT only).

        pacing: see make_pacing (default: as fast as possible). timeout: whole-call deadline.
        """
        req = build.lookup_stream_request(
            key, pacing=pacing, max_age_seconds=max_age_seconds, wait_ms=wait_ms, traits=traits
        )
        return LookupStream(self._stub.LookupStream(req, timeout=timeout))

    def store_stream(
        self,
        key: PB2.CacheKey,
        lease: bytes = b"",
        *,
        ttl_seconds: int = 0,
        cost: PB2.ComputeCost | None = None,
        traits: PB2.RequestTraits | None = None,
        replay: PB2.ReplayRequest | None = None,
        timeout: float | None = None,
    ) -> StoreStream:
        """A context manager that stores a result chunk by chunk (`with ... as w: w.send(text)`).

        Committed when the block ends normally; an exception in the block stores nothing.
        A request the policy bypasses is answered BYPASSED in `.response`.
        """
        open_req = build.store_request(
            key, lease=lease, ttl_seconds=ttl_seconds, cost=cost, traits=traits, replay=replay
        )
        stub = self._stub
        return StoreStream(lambda it: stub.StoreStream.future(it, timeout=timeout), open_req)

    def report_outcome(
        self,
        key_digest: bytes,
        *,
        accepted: bool,
        reason: str = "",
        timeout: float | None = 5.0,
    ) -> PB2.ReportOutcomeResponse:
        """Report a downstream check's verdict on the cached answer with this key digest.

        A rejected answer is evicted (by default), so the next lookup misses; NOT_FOUND
        when no live entry has the digest.
        """
        req = build.report_request(key_digest, accepted=accepted, reason=reason)
        resp: PB2.ReportOutcomeResponse = self._stub.ReportOutcome(req, timeout=timeout)
        return resp

    def server_info(self, *, timeout: float | None = 5.0) -> PB2.GetServerInfoResponse:
        """The sidecar's version, key schema and pod model fingerprint."""
        resp: PB2.GetServerInfoResponse = self._stub.GetServerInfo(
            build.server_info_request(), timeout=timeout
        )
        return resp

    def close(self) -> None:
        """Close the channel."""
        self._channel.close()

    def __enter__(self) -> CacheClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncCacheClient:
    """asyncio client (grpc.aio): CacheClient's methods, awaitable, with the same
    arguments, defaults and answers (the requests come from the same builders)."""

    def __init__(
        self, target: str, *, max_message_bytes: int = build.DEFAULT_MESSAGE_BYTES
    ) -> None:
        options = build.channel_options(max_message_bytes)
        self._channel = grpc.aio.insecure_channel(target, options=options)
        self._stub = cache_pb2_grpc.CacheServiceStub(self._channel)

    async def lookup(
        self,
        key: PB2.CacheKey,
        *,
        max_age_seconds: int = 0,
        wait_ms: int = 0,
        traits: PB2.RequestTraits | None = None,
        timeout: float | None = None,
    ) -> PB2.LookupResponse:
        """Look a key up: HIT, MISS (with `.lease`) or BYPASS (see CacheClient.lookup)."""
        req = build.lookup_request(
            key, max_age_seconds=max_age_seconds, wait_ms=wait_ms, traits=traits
        )
        resp: PB2.LookupResponse = await self._stub.Lookup(
            req, timeout=build.lookup_timeout(timeout, wait_ms)
        )
        return resp

    async def lookup_batch(
        self,
        keys: Sequence[PB2.CacheKey],
        *,
        traits: PB2.RequestTraits | None = None,
        timeout: float | None = 5.0,
    ) -> list[PB2.LookupResponse]:
        """Look many keys up in one RPC; results keep the order of `keys`."""
        req = build.lookup_batch_request(keys, traits=traits)
        resp: PB2.LookupBatchResponse = await self._stub.LookupBatch(req, timeout=timeout)
        return list(resp.responses)

    async def store(
        self,
        key: PB2.CacheKey,
        payload: bytes,
        *,
        lease: bytes = b"",
        ttl_seconds: int = 0,
        cost: PB2.ComputeCost | None = None,
        traits: PB2.RequestTraits | None = None,
        chunks: Sequence[PB2.ChunkBoundary] = (),
        replay: PB2.ReplayRequest | None = None,
        timeout: float | None = 5.0,
    ) -> PB2.StoreResponse:
        """Store a result with the lease from the MISS (see CacheClient.store)."""
        req = build.store_request(
            key,
            payload,
            lease=lease,
            ttl_seconds=ttl_seconds,
            cost=cost,
            traits=traits,
            chunks=chunks,
            replay=replay,
        )
        resp: PB2.StoreResponse = await self._stub.Store(req, timeout=timeout)
        return resp

    def lookup_stream(
        self,
        key: PB2.CacheKey,
        *,
        pacing: PB2.Pacing | None = None,
        max_age_seconds: int = 0,
        wait_ms: int = 0,
        traits: PB2.RequestTraits | None = None,
        timeout: float | None = None,
    ) -> AsyncLookupStream:
        """Look a key up as a stream: `await .header()`, then `async for chunk in ...` (HIT only).

        pacing: see make_pacing (default: as fast as possible). timeout: whole-call deadline.
        """
        req = build.lookup_stream_request(
            key, pacing=pacing, max_age_seconds=max_age_seconds, wait_ms=wait_ms, traits=traits
        )
        return AsyncLookupStream(self._stub.LookupStream(req, timeout=timeout))

    def store_stream(
        self,
        key: PB2.CacheKey,
        lease: bytes = b"",
        *,
        ttl_seconds: int = 0,
        cost: PB2.ComputeCost | None = None,
        traits: PB2.RequestTraits | None = None,
        replay: PB2.ReplayRequest | None = None,
        timeout: float | None = None,
    ) -> AsyncStoreStream:
        """An async context manager storing a result chunk by chunk (`await w.send(text)`).

        Committed when the block ends normally; an exception in the block stores nothing.
        A request the policy bypasses is answered BYPASSED in `.response`.
        """
        open_req = build.store_request(
            key, lease=lease, ttl_seconds=ttl_seconds, cost=cost, traits=traits, replay=replay
        )
        stub = self._stub
        return AsyncStoreStream(lambda: stub.StoreStream(timeout=timeout), open_req)

    async def report_outcome(
        self,
        key_digest: bytes,
        *,
        accepted: bool,
        reason: str = "",
        timeout: float | None = 5.0,
    ) -> PB2.ReportOutcomeResponse:
        """Report a downstream verdict on a cached answer (see CacheClient.report_outcome)."""
        req = build.report_request(key_digest, accepted=accepted, reason=reason)
        resp: PB2.ReportOutcomeResponse = await self._stub.ReportOutcome(req, timeout=timeout)
        return resp

    async def server_info(self, *, timeout: float | None = 5.0) -> PB2.GetServerInfoResponse:
        """The sidecar's version, key schema and pod model fingerprint."""
        resp: PB2.GetServerInfoResponse = await self._stub.GetServerInfo(
            build.server_info_request(), timeout=timeout
        )
        return resp

    async def close(self) -> None:
        """Close the channel."""
        await self._channel.close()

    async def __aenter__(self) -> AsyncCacheClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
