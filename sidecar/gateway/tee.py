"""Forwarding an upstream answer to the client while keeping what a store needs (no I/O of
its own: the bytes come in, go out through the Reply, and are kept only if complete)."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from sidecar.entries import ChunkMeta, ComputeCost
from sidecar.gateway.render import body_doc
from sidecar.gateway.reply import Reply
from sidecar.gateway.request_keys import KeyedRequest
from sidecar.gateway.sse import EventSplitter, StreamWatch


@dataclass(frozen=True, slots=True)
class Answer:
    """A complete upstream answer: the payload to store and its stream boundaries."""

    payload: bytes
    chunks: tuple[ChunkMeta, ...]
    finish_reason: str

    def cost(self) -> ComputeCost:
        """Token counts of a whole answer's usage (0 when unknown)."""
        if self.chunks:
            return ComputeCost()
        try:
            usage = json.loads(self.payload).get("usage") or {}
        except (ValueError, AttributeError):
            return ComputeCost()
        p, c = usage.get("prompt_tokens"), usage.get("completion_tokens")
        return ComputeCost(
            prompt_tokens=p if isinstance(p, int) and 0 <= p < 2**32 else 0,
            completion_tokens=c if isinstance(c, int) and 0 <= c < 2**32 else 0,
        )


def whole_answer(payload: bytes, kr: KeyedRequest) -> bool:
    """A 200 body worth keeping: an OpenAI answer from the model asked for."""
    doc = body_doc(payload)
    if doc is None:
        return False
    answered_by = doc.get("model")
    if answered_by is not None and answered_by != kr.model:
        return False  # whatever answered is not what the key says
    choices = doc.get("choices")
    if isinstance(choices, list):
        return bool(choices) and all(
            isinstance(c, dict) and c.get("finish_reason") for c in choices
        )
    return bool(doc.get("data"))


async def tee_body(pieces: AsyncIterator[bytes], reply: Reply, limit: int) -> Answer | None:
    """Pass a whole answer's bytes on as they arrive; keep them (up to `limit`) to store."""
    kept: list[bytes] = []
    size = 0
    async for piece in pieces:
        await reply.send(piece)
        size += len(piece)
        if size <= limit:
            kept.append(piece)
    await reply.send(b"", False)
    if size > limit:
        return None
    return Answer(b"".join(kept), (), "")


async def tee_stream(
    pieces: AsyncIterator[bytes], t0: float, reply: Reply, limit: int
) -> Answer | None:
    """Pass the upstream's bytes on as they arrive; keep its events for the store.

    None when the stream is not complete (see sse.StreamWatch) or over `limit`.
    """
    splitter = EventSplitter(limit)
    watch = StreamWatch()
    events: list[bytes] = []
    metas: list[ChunkMeta] = []
    size = 0
    whole = True
    async for piece in pieces:
        await reply.send(piece)
        if not whole:
            continue
        try:
            arrived = splitter.feed(piece)
        except ValueError:
            whole = False
            continue
        offset = int((time.monotonic() - t0) * 1000)
        for event in arrived:
            watch.see(event)
            if watch.done:
                continue  # [DONE] is framing: every replay ends with it
            size += len(event)
            events.append(event)
            metas.append(ChunkMeta(len(event), 1, offset))
        if size > limit:
            whole = False
    await reply.send(b"", False)
    if not whole or splitter.pending or not watch.complete:
        return None
    return Answer(b"".join(events), tuple(metas), watch.finish_reason)
