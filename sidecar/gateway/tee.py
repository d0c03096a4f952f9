"""Forwarding an upstream answer to the client while keeping what a store needs (no I/O of
its own: the bytes come in, go out through the Reply, and are kept only if complete)."""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from sidecar.entries import ChunkMeta, ComputeCost
from sidecar.gateway.errors import HttpError
from sidecar.gateway.reply import Reply
from sidecar.wire.openai.keys import KeyedRequest
from sidecar.wire.openai.sse import StreamCollector
from sidecar.wire.openai.whole_body import body_doc, complete_doc
from sidecar.wire.values import token_count

Ended = Callable[[], bool]
"""Whether the upstream body has arrived whole (asked after each piece)."""

_NO_COST = ComputeCost()
_TAIL_BYTES = 64
_ENDS_WITH_DONE = re.compile(rb"(?:^|[\r\n])data: ?\[DONE\][ \t]*(?:\r\n|\r|\n)\s*$")
"""The stream's last event is `data: [DONE]` (its blank line included, whatever the
line endings)."""


@dataclass(frozen=True, slots=True)
class Answer:
    """A complete upstream answer: the payload to store and its stream boundaries."""

    payload: bytes
    chunks: tuple[ChunkMeta, ...]
    finish_reason: str
    cost: ComputeCost = _NO_COST
    """Token counts of a whole answer's usage (0 when unknown; a stream's: 0)."""


def whole_answer(answer: Answer, kr: KeyedRequest) -> Answer | None:
    """A 200 body worth keeping (an OpenAI answer from the model asked for) with its
    usage read, from one parse of the body; None when it is not worth keeping."""
    doc = body_doc(answer.payload)
    if doc is None or not complete_doc(doc, kr.model):
        return None
    usage = doc.get("usage")
    if not isinstance(usage, dict):
        return answer
    cost = ComputeCost(
        prompt_tokens=token_count(usage, "prompt_tokens"),
        completion_tokens=token_count(usage, "completion_tokens"),
    )
    return Answer(answer.payload, answer.chunks, answer.finish_reason, cost)


def _never() -> bool:
    return False


async def tee_body(
    pieces: AsyncIterator[bytes], reply: Reply, limit: int, ended: Ended = _never
) -> Answer | None:
    """Pass a whole answer's bytes on as they arrive; keep them (up to `limit`) to store.

    `ended()`, asked after each piece: the upstream body is complete, so that piece is
    sent as the end of the response (see Upstream's `ended`).
    """
    kept: list[bytes] = []
    size = 0
    async for piece in pieces:
        await reply.send(piece, not ended())
        size += len(piece)
        if size <= limit:
            kept.append(piece)
    await reply.end()
    if size > limit:
        return None
    return Answer(b"".join(kept), (), "")


async def tee_stream(
    pieces: AsyncIterator[bytes],
    t0: float,
    reply: Reply,
    limit: int,
    model: str,
    ended: Ended = _never,
) -> Answer | None:
    """Pass the upstream's bytes on as they arrive; keep its events for the store.

    None when the stream is not complete (see wire/openai/sse.py), over `limit`, or when an
    event names a model other than `model` (whatever answered is not what the key says,
    as for a whole body; prewarm refuses such a stream too).
    """
    collector = StreamCollector(limit)
    tail = b""
    async for piece in pieces:
        if collector.whole:
            collector.feed(piece, int((time.monotonic() - t0) * 1000))
            # Before the send: a client that closes on [DONE] must find it set.
            reply.answered = reply.answered or collector.complete
        tail = (tail + piece[-_TAIL_BYTES:])[-_TAIL_BYTES:]  # never a copy of a whole piece
        # The upstream's last piece ends the client's response only when it ends the
        # stream too; else the response stays open until the check below leaves it
        # unfinished (an upstream framing its body by length ends both at once).
        await reply.send(piece, not (ended() and _ENDS_WITH_DONE.search(tail)))
    if not _ENDS_WITH_DONE.search(tail):
        # The upstream ended cleanly but its stream did not (a server that closes a
        # close-delimited body early): the client must not see a clean end either, or
        # an SDK takes the partial text for the whole answer. Raised with the response
        # started, so it is left unfinished (asgi.py).
        raise HttpError(
            502,
            "the model server's stream ended before data: [DONE]",
            kind="server_error",
            code="upstream_incomplete",
        )
    await reply.end()
    got = collector.result()
    if got is None or any(named != model for named in got.models):
        return None
    return Answer(got.payload, got.chunks, got.finish_reason)
