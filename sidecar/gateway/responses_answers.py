"""/v1/responses through the gateway: a miss's answer teed into what is stored, and a
hit answered from it (wire/openai/responses_sse.py says what is stored,
responses_render.py how a hit renews it)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

from sidecar.entries import ComputeCost, Entry
from sidecar.gateway.errors import HttpError
from sidecar.gateway.hit import ReplayLimits, Serve, stream_hit, whole_hit
from sidecar.gateway.reply import Reply
from sidecar.gateway.tee import Answer, Ended
from sidecar.results.pacing import Pacing
from sidecar.wire.openai.keys import KeyedRequest
from sidecar.wire.openai.responses_render import (
    ResponsesRenewal,
    body_from_events,
    renewed_body,
    replay_events,
)
from sidecar.wire.openai.responses_sse import (
    ResponsesStreamCollector,
    complete_response,
    response_doc,
)
from sidecar.wire.values import token_count


def whole_response(answer: Answer, kr: KeyedRequest) -> Answer | None:
    """A 200 body worth keeping (a completed response from the model asked for) with
    its usage read; None when it is not."""
    doc = response_doc(answer.payload)
    if doc is None or not complete_response(doc, kr.model):
        return None
    usage = doc.get("usage")
    if not isinstance(usage, dict):
        return answer
    cost = ComputeCost(
        prompt_tokens=token_count(usage, "input_tokens"),
        completion_tokens=token_count(usage, "output_tokens"),
    )
    return Answer(answer.payload, answer.chunks, "completed", cost)


async def tee_response_stream(
    pieces: AsyncIterator[bytes],
    t0: float,
    reply: Reply,
    limit: int,
    model: str,
    ended: Ended,
) -> Answer | None:
    """Pass a Responses stream on as it arrives; keep its events for the store.

    None when the stream is not complete (responses_sse.py) or over `limit`. An upstream
    that ends its body before a terminal event (`response.completed`, ...) leaves the
    client's response unfinished (HttpError after the start), so no SDK takes the
    partial text for the whole answer.
    """
    collector = ResponsesStreamCollector(limit, model)
    async for piece in pieces:
        collector.feed(piece, int((time.monotonic() - t0) * 1000))
        # Before the send: a client that closes on the last event must find it set.
        reply.answered = reply.answered or collector.complete
        # Only a piece that ends the stream may end the response (see tee_stream).
        await reply.send(piece, not (ended() and _finished(collector)))
    if not _finished(collector):
        raise HttpError(
            502,
            "the model server's stream ended before its response.completed event",
            kind="server_error",
            code="upstream_incomplete",
        )
    await reply.end()
    got = collector.result()
    return None if got is None else Answer(got.payload, got.chunks, got.finish_reason)


def _finished(collector: ResponsesStreamCollector) -> bool:
    """The stream reached a terminal event (or is too long to follow: not judged)."""
    return collector.ended or not collector.followed


def plan_response_hit(
    kr: KeyedRequest, entry: Entry, pace: Pacing, limits: ReplayLimits
) -> Serve | None:
    """The answer to `kr` from `entry`; None when it cannot answer this request."""
    renewal = ResponsesRenewal()
    if not entry.chunk_table:  # a whole answer: it serves only a whole answer
        body = None if kr.stream else renewed_body(entry.payload, renewal)
        return None if body is None else whole_hit(body)
    pieces = list(entry.chunks())
    events = [data for _, data in pieces]
    if not kr.stream:
        body = body_from_events(events, kr.model, renewal)
        return None if body is None else whole_hit(body)
    replayed = replay_events(events, renewal)
    if replayed is None:
        return None
    return stream_hit(replayed, [meta for meta, _ in pieces], pace, limits, b"")
