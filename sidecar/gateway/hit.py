"""Answering a request from a cached entry: a body, a replayed stream, or a conversion
between the two (`stream` is not part of the key)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from sidecar.entries import ChunkMeta, Entry
from sidecar.gateway.errors import HttpError
from sidecar.gateway.reply import CACHE_HEADER, JSON, SSE_HEADERS, Headers, Reply
from sidecar.results.pacing import Pacing, schedule
from sidecar.wire.openai.keys import KeyedRequest
from sidecar.wire.openai.render import (
    Renewal,
    body_from_events,
    events_from_body,
    replay_events,
)
from sidecar.wire.openai.sse import DONE
from sidecar.wire.openai.whole_body import body_doc


@dataclass(frozen=True, slots=True)
class ReplayLimits:
    """INFERCACHE_REPLAY_MAX_GAP_MS and INFERCACHE_REPLAY_MAX_DURATION_MS, in ms."""

    max_gap_ms: int
    max_duration_ms: int


async def answer_hit(
    endpoint: str,
    kr: KeyedRequest,
    entry: Entry,
    pace: Pacing,
    limits: ReplayLimits,
    info: Headers,
    reply: Reply,
) -> bool:
    """Answer from `entry`; False (nothing sent) when it cannot answer this request."""
    renewal = Renewal(endpoint)
    marked = [*info, (CACHE_HEADER, b"hit")]
    if entry.chunk_table:  # stored as a stream (a whole body has no chunk table)
        pieces = list(entry.chunks())
        events = [data for _, data in pieces]
        if not kr.stream:
            body = body_from_events(events, endpoint, renewal)
            if body is None:
                return False
            await reply.whole(200, [(b"content-type", JSON), *marked], body)
            return True
        replayed = replay_events(events, kr.include_usage, renewal)
        if replayed is None:
            return False
        await reply.start(200, SSE_HEADERS + marked)
        await paced_events(replayed, [meta for meta, _ in pieces], pace, limits, reply)
        return True
    doc = body_doc(entry.payload)
    if doc is None:
        return False
    if kr.stream:
        made = events_from_body(entry.payload, endpoint, kr.include_usage, renewal)
        if made is None:
            return False
        await reply.start(200, SSE_HEADERS + marked)
        await reply.send(b"".join(made) + DONE, False)
        return True
    body = renewal.apply(entry.payload, doc)
    await reply.whole(200, [(b"content-type", JSON), *marked], body)
    return True


async def paced_events(
    events: Sequence[bytes | None],
    metas: list[ChunkMeta],
    pace: Pacing,
    limits: ReplayLimits,
    reply: Reply,
    end: bytes = DONE,
) -> None:
    """Send the events on the schedule `pace` gives, then `end` (an OpenAI stream's
    [DONE]; a Responses or Messages stream has none of its own); an event due past the
    cap raises HttpError instead (the response left unfinished).

    Each event waits for its absolute time (no drift from sleeping in steps); a client
    that goes away cancels this at its next await.
    """
    times = schedule(metas, pace, limits.max_gap_ms)
    loop = asyncio.get_running_loop()
    start = loop.time()
    cap_s = limits.max_duration_ms / 1000
    for event, at in zip(events, times, strict=True):
        if event is None:
            continue
        if at > cap_s:
            # Cut: the response is left unfinished (no last chunk, no [DONE]), as for any
            # failure once started (asgi._error), so uvicorn drops the connection and no
            # client takes the partial answer as whole.
            raise HttpError(
                504,
                f"the replay would run past {limits.max_duration_ms} ms "
                "(INFERCACHE_REPLAY_MAX_DURATION_MS)",
                kind="timeout_error",
                code="replay_too_long",
            )
        delay = start + at - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        await reply.send(event)
    await reply.send(end, False)
