"""The Messages API (`POST /v1/messages`) in the gateway's flow: what flow.py calls
instead of the OpenAI functions for a Messages request (the wire format itself is
sidecar/wire/anthropic/).

    hit      whole: the stored body with a fresh id and the hit's usage; streamed: the
             stored events one by one at their original boundaries, paced as asked
    miss     a whole 200 body is stored when it is a complete message from the model
             asked for; a stream when it is complete (wire/anthropic/sse.py)
"""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator

from sidecar.entries import ComputeCost, Entry
from sidecar.gateway.errors import HttpError
from sidecar.gateway.hit import ReplayLimits, Serve, stream_hit, whole_hit
from sidecar.gateway.reply import Reply
from sidecar.gateway.tee import Answer, Ended
from sidecar.results.pacing import Pacing
from sidecar.wire.anthropic import answers
from sidecar.wire.anthropic.sse import MessageCollector
from sidecar.wire.openai.keys import KeyedRequest

_TAIL_BYTES = 128
_ENDS_WITH_STOP = re.compile(rb'"message_stop"[^\r\n]*(?:\r\n|\r|\n)\s*$')
"""The stream's last event is message_stop (its data line, then the blank line)."""


def whole_message(answer: Answer, kr: KeyedRequest) -> Answer | None:
    """A 200 body worth keeping, with its usage read; None when it is not."""
    doc = answers.message_doc(answer.payload)
    if doc is None or not answers.complete_message(doc, kr.model):
        return None
    prompt, output = answers.costs(doc)
    cost = ComputeCost(prompt_tokens=prompt, completion_tokens=output)
    return Answer(answer.payload, (), str(doc["stop_reason"]), cost)


async def tee_message_stream(
    pieces: AsyncIterator[bytes],
    t0: float,
    reply: Reply,
    limit: int,
    model: str,
    ended: Ended,
) -> Answer | None:
    """Pass the upstream's events on as they arrive; keep them for the store (None when
    the stream is not complete, see wire/anthropic/sse.py).

    A stream the upstream ended cleanly without message_stop is left unfinished for the
    client too (HttpError once started), so no SDK takes a partial answer as whole.
    """
    collector = MessageCollector(limit, model)
    tail = b""
    async for piece in pieces:
        if collector.whole:
            collector.feed(piece, int((time.monotonic() - t0) * 1000))
            reply.answered = reply.answered or collector.complete
        tail = (tail + piece[-_TAIL_BYTES:])[-_TAIL_BYTES:]
        # Only a piece that ends the stream may end the response (see tee_stream).
        await reply.send(piece, not (ended() and _ENDS_WITH_STOP.search(tail)))
    if not _ENDS_WITH_STOP.search(tail):
        raise HttpError(
            502,
            "the model server's stream ended before message_stop",
            kind="server_error",
            code="upstream_incomplete",
        )
    await reply.end()
    got = collector.result()
    if got is None:
        return None
    return Answer(got.payload, got.chunks, got.stop_reason)


def plan_message_hit(
    kr: KeyedRequest, entry: Entry, pace: Pacing, limits: ReplayLimits
) -> Serve | None:
    """The answer to `kr` from `entry`; None when it cannot answer this request."""
    new_id = answers.fresh_id()
    if entry.chunk_table:  # stored as a stream
        pieces = list(entry.chunks())
        events = [data for _, data in pieces]
        if not kr.stream:
            body = answers.body_from_events(events, new_id)
            return None if body is None else whole_hit(body)
        replayed = answers.replay(events, new_id)
        if replayed is None:
            return None
        metas = [meta for meta, _ in pieces]
        return stream_hit(list(replayed), metas, pace, limits, end=b"")
    doc = answers.message_doc(entry.payload)
    if doc is None:
        return None
    if kr.stream:
        made = answers.events_from_body(doc, new_id)
        return None if made is None else stream_hit(made, None, pace, limits, end=b"")
    return whole_hit(answers.renewed_body(doc, new_id))
