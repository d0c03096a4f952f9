"""Typed sync and async clients for the infercache data plane.

Keys are built with make_key() and hashed by the sidecar, so every language
gets the same digest for the same request. Both clients build their requests
with the same pure functions (builders.py); they differ only in how they call.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

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


def make_key(
    *,
    tenant: str,
    prompt_version: str,
    model_version: str = "",
    adapter_version: str = "",
    text: str | None = None,
    chat: Sequence[Mapping[str, Any]] | None = None,
    token_ids: Sequence[int] | None = None,
    input_sha256: bytes | None = None,
    extra: Mapping[str, str] | None = None,
    tools: Sequence[Mapping[str, Any]] | str | None = None,
    tool_choice: str | Mapping[str, Any] | None = None,
    parallel_tool_calls: bool | None = None,
    endpoint: str = "",
    chat_template: Mapping[str, Any] | None = None,
    output: Mapping[str, Any] | None = None,
    **sampling: Any,
) -> PB2.CacheKey:
    """Build a CacheKey; exactly one of text/chat/token_ids/input_sha256.

    Every value is sent exactly as given (the sidecar hashes exact strings, and an
    unset field is not its default). `chat` takes OpenAI-style messages: `content`
    a string, None or a list of parts (`{"type": "text", "text": ...}`, or
    `{"type": "image" | "audio" | "file" | "video", "sha256": <32 bytes>, ...}`),
    plus `name`, `tool_call_id`, `tool_calls` and `reasoning_content`.
    `sampling` takes SamplingParams fields (temperature=0.2, stop=["\\n"], ...).
    `tools`: the tool definitions offered to the model (JSON-able dicts, kept in
    order, key order included), or a tool-schema version name (`extra["tools"]`).
    `tool_choice` a mode string or a dict; `chat_template` and `output` take the
    ChatTemplateOptions / OutputOptions fields, dicts and lists as JSON.
    """
    inputs = [x for x in (text, chat, token_ids, input_sha256) if x is not None]
    if len(inputs) != 1:
        raise ValueError("give exactly one of text, chat, token_ids, input_sha256")
    extra = dict(extra or {})
    if isinstance(tools, str):
        if "tools" in extra:
            raise ValueError("give tools either as tools= or as extra['tools'], not both")
        extra["tools"] = tools
    key = PB2.CacheKey(
        tenant=tenant,
        model_version=model_version,
        adapter_version=adapter_version,
        prompt_version=prompt_version,
        extra=extra,
        endpoint=endpoint,
    )
    if tools is not None and not isinstance(tools, str):
        key.tools.extend(_json(t) for t in tools)
    if tool_choice is not None:
        key.tool_choice = tool_choice if isinstance(tool_choice, str) else _json(tool_choice)
    if parallel_tool_calls is not None:
        key.parallel_tool_calls = parallel_tool_calls
    if chat_template is not None:
        key.chat_template.CopyFrom(PB2.ChatTemplateOptions(**_json_values(chat_template)))
    if output is not None:
        key.output.CopyFrom(PB2.OutputOptions(**_json_values(output)))
    if text is not None:
        key.text = text
    elif chat is not None:
        key.chat.messages.extend(_chat_message(m) for m in chat)
    elif token_ids is not None:
        key.token_ids.ids.extend(token_ids)
    else:
        key.input_sha256 = input_sha256 or b""
    if sampling:
        key.sampling.CopyFrom(PB2.SamplingParams(**sampling))
    return key


def _json(value: Any) -> str:
    # Key order is kept: templates render tools and schemas in the order given.
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _json_values(fields: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _json(v) if isinstance(v, Mapping | list) else v for k, v in fields.items()}


_MEDIA = ("image", "audio", "file", "video")


def _content_part(part: Mapping[str, Any]) -> PB2.ContentPart:
    kind = part.get("type")
    if kind == "text":
        return PB2.ContentPart(text=part["text"])
    if kind in _MEDIA:
        media: dict[str, Any] = {
            kind: PB2.MediaRef(**{k: v for k, v in part.items() if k != "type"})
        }
        return PB2.ContentPart(**media)
    raise ValueError(f"content part type {kind!r}: use text, or image/audio/file/video by sha256")


def _tool_call(call: Mapping[str, Any]) -> PB2.ToolCall:
    function = call.get("function", call)
    return PB2.ToolCall(
        id=call.get("id", ""),
        type=call.get("type", "function"),
        name=function["name"],
        arguments=function.get("arguments", ""),
    )


def _chat_message(m: Mapping[str, Any]) -> PB2.ChatMessage:
    msg = PB2.ChatMessage(role=m["role"])
    content = m.get("content")
    if isinstance(content, str):
        msg.content = content
    elif content is None:
        msg.null_content = True  # null or absent: templates tell it from ""
    else:
        msg.parts.extend(_content_part(p) for p in content)
    for name in ("name", "tool_call_id", "reasoning_content"):
        if m.get(name) is not None:
            setattr(msg, name, m[name])
    msg.tool_calls.extend(_tool_call(c) for c in m.get("tool_calls") or ())
    return msg


def make_traits(
    *,
    side_effects: bool = False,
    private_data: bool = False,
    real_time: bool = False,
    tools: bool = False,
) -> PB2.RequestTraits:
    """What to declare about a request; the sidecar's policy decides whether it bypasses."""
    return PB2.RequestTraits(
        side_effects=side_effects, private_data=private_data, real_time=real_time, tools=tools
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

    def server_info(self, *, timeout: float | None = 1.0) -> PB2.GetServerInfoResponse:
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

    async def server_info(self, *, timeout: float | None = 1.0) -> PB2.GetServerInfoResponse:
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
