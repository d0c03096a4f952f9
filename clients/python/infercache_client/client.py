"""Typed sync and async clients for the infercache data plane.

Keys are built with make_key() and hashed by the sidecar, so every language
gets the same digest for the same request.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import grpc
from infercache.v1 import cache_pb2 as PB2
from infercache.v1 import cache_pb2_grpc


def make_key(
    *,
    tenant: str,
    prompt_version: str,
    model_version: str = "",
    adapter_version: str = "",
    text: str | None = None,
    chat: Sequence[Mapping[str, str]] | None = None,
    token_ids: Sequence[int] | None = None,
    input_sha256: bytes | None = None,
    extra: Mapping[str, str] | None = None,
    **sampling: Any,
) -> PB2.CacheKey:
    """Build a CacheKey; exactly one of text/chat/token_ids/input_sha256.

    `sampling` takes SamplingParams fields (temperature=0.2, stop=["\\n"], ...).
    """
    inputs = [x for x in (text, chat, token_ids, input_sha256) if x is not None]
    if len(inputs) != 1:
        raise ValueError("give exactly one of text, chat, token_ids, input_sha256")
    key = PB2.CacheKey(
        tenant=tenant,
        model_version=model_version,
        adapter_version=adapter_version,
        prompt_version=prompt_version,
        extra=dict(extra or {}),
    )
    if text is not None:
        key.text = text
    elif chat is not None:
        key.chat.messages.extend(PB2.ChatMessage(**dict(m)) for m in chat)
    elif token_ids is not None:
        key.token_ids.ids.extend(token_ids)
    else:
        key.input_sha256 = input_sha256 or b""
    if sampling:
        key.sampling.CopyFrom(PB2.SamplingParams(**sampling))
    return key


def _channel_options(max_message_bytes: int) -> list[tuple[str, int]]:
    return [
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.max_send_message_length", max_message_bytes),
    ]


class CacheClient:
    """Blocking client. `target` is "host:port" or "unix:/path/to.sock"."""

    def __init__(self, target: str, *, max_message_bytes: int = 64 * 1024 * 1024) -> None:
        self._channel = grpc.insecure_channel(target, options=_channel_options(max_message_bytes))
        self._stub = cache_pb2_grpc.CacheServiceStub(self._channel)

    def lookup(
        self,
        key: PB2.CacheKey,
        *,
        max_age_seconds: int = 0,
        wait_ms: int = 0,
        timeout: float | None = None,
    ) -> PB2.LookupResponse:
        """Look a key up; outcome is HIT, MISS (with `.lease` for Store) or BYPASS.

        wait_ms > 0: if another caller is computing this key, wait that long for its result.
        """
        req = PB2.LookupRequest(key=key, max_age_seconds=max_age_seconds, wait_ms=wait_ms)
        timeout = timeout if timeout is not None else 1.0 + wait_ms / 1000
        resp: PB2.LookupResponse = self._stub.Lookup(req, timeout=timeout)
        return resp

    def lookup_batch(
        self, keys: Sequence[PB2.CacheKey], *, timeout: float | None = 5.0
    ) -> list[PB2.LookupResponse]:
        """Look many keys up in one RPC; results keep the order of `keys`."""
        req = PB2.LookupBatchRequest(requests=[PB2.LookupRequest(key=k) for k in keys])
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
        timeout: float | None = 5.0,
    ) -> PB2.StoreResponse:
        """Store a result with the lease from the MISS; `.outcome` says STORED or why not."""
        req = PB2.StoreRequest(
            key=key, payload=payload, lease=lease, ttl_seconds=ttl_seconds, cost=cost
        )
        resp: PB2.StoreResponse = self._stub.Store(req, timeout=timeout)
        return resp

    def server_info(self, *, timeout: float | None = 1.0) -> PB2.GetServerInfoResponse:
        """The sidecar's version, key schema and pod model fingerprint."""
        resp: PB2.GetServerInfoResponse = self._stub.GetServerInfo(
            PB2.GetServerInfoRequest(), timeout=timeout
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
    """asyncio client (grpc.aio); same methods as CacheClient, awaitable."""

    def __init__(self, target: str, *, max_message_bytes: int = 64 * 1024 * 1024) -> None:
        self._channel = grpc.aio.insecure_channel(
            target, options=_channel_options(max_message_bytes)
        )
        self._stub = cache_pb2_grpc.CacheServiceStub(self._channel)

    async def lookup(
        self,
        key: PB2.CacheKey,
        *,
        max_age_seconds: int = 0,
        wait_ms: int = 0,
        timeout: float | None = None,
    ) -> PB2.LookupResponse:
        """Look a key up; outcome is HIT, MISS (with `.lease` for Store) or BYPASS.

        wait_ms > 0: if another caller is computing this key, wait that long for its result.
        """
        req = PB2.LookupRequest(key=key, max_age_seconds=max_age_seconds, wait_ms=wait_ms)
        timeout = timeout if timeout is not None else 1.0 + wait_ms / 1000
        resp: PB2.LookupResponse = await self._stub.Lookup(req, timeout=timeout)
        return resp

    async def lookup_batch(
        self, keys: Sequence[PB2.CacheKey], *, timeout: float | None = 5.0
    ) -> list[PB2.LookupResponse]:
        """Look many keys up in one RPC; results keep the order of `keys`."""
        req = PB2.LookupBatchRequest(requests=[PB2.LookupRequest(key=k) for k in keys])
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
        timeout: float | None = 5.0,
    ) -> PB2.StoreResponse:
        """Store a result with the lease from the MISS; `.outcome` says STORED or why not."""
        req = PB2.StoreRequest(
            key=key, payload=payload, lease=lease, ttl_seconds=ttl_seconds, cost=cost
        )
        resp: PB2.StoreResponse = await self._stub.Store(req, timeout=timeout)
        return resp

    async def server_info(self, *, timeout: float | None = 1.0) -> PB2.GetServerInfoResponse:
        """The sidecar's version, key schema and pod model fingerprint."""
        resp: PB2.GetServerInfoResponse = await self._stub.GetServerInfo(
            PB2.GetServerInfoRequest(), timeout=timeout
        )
        return resp

    async def close(self) -> None:
        """Close the channel."""
        await self._channel.close()

    async def __aenter__(self) -> AsyncCacheClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
