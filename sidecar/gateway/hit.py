"""Answering a request from a cached entry: a body, a replayed stream, or a conversion
between the two (`stream` is not part of the key)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from sidecar.entries import ChunkMeta, Entry
from sidecar.gateway.errors import HttpError
from sidecar.gateway.hit_bodies import HitBodies
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


Serve = Callable[[Reply, Headers], Awaitable[None]]
"""Send a hit, planned beforehand, with these headers (the request's, its age)."""


class HitPlanner:
    """A request's LookupQuery.accept: can it be answered from an entry? Answering that
    means planning the answer (the body or events converted and renewed), so the plan of
    the last entry judged is kept for `serve_for`: a hit is rendered once.

    An entry it cannot be answered from is a MISS to the cache (counted as one,
    recomputed under single flight); `refused` tells the gateway's counters.
    """

    __slots__ = ("_entry", "_plan", "_serve", "refused")

    def __init__(self, plan: Callable[[Entry], Serve | None]) -> None:
        self._plan = plan
        self._entry: Entry | None = None
        self._serve: Serve | None = None
        self.refused = False
        """An entry was found that this request cannot be answered from."""

    def __call__(self, entry: Entry) -> bool:
        """True when the request can be answered from `entry`."""
        return self.serve_for(entry) is not None

    def serve_for(self, entry: Entry) -> Serve | None:
        """The planned answer from `entry`; None when it cannot answer this request."""
        if entry is not self._entry:
            self._entry, self._serve = entry, self._plan(entry)
            if self._serve is None:
                self.refused = True
        return self._serve


def whole_hit(body: bytes) -> Serve:
    """A whole JSON answer."""

    async def serve(reply: Reply, info: Headers) -> None:
        await reply.whole(200, [(b"content-type", JSON), *info, (CACHE_HEADER, b"hit")], body)

    return serve


def stream_hit(
    events: Sequence[bytes | None],
    metas: list[ChunkMeta] | None,
    pace: Pacing,
    limits: ReplayLimits,
    end: bytes = DONE,
) -> Serve:
    """A stream: the stored `events` replayed on their `metas`' schedule (paced_events),
    or, without metas, sent in one piece followed by `end`."""

    async def serve(reply: Reply, info: Headers) -> None:
        await reply.start(200, [*SSE_HEADERS, *info, (CACHE_HEADER, b"hit")])
        if metas is None:
            await reply.send(b"".join(e for e in events if e is not None) + end, False)
        else:
            await paced_events(events, metas, pace, limits, reply, end)

    return serve


def plan_hit(
    endpoint: str,
    kr: KeyedRequest,
    entry: Entry,
    pace: Pacing,
    limits: ReplayLimits,
    bodies: HitBodies | None = None,
) -> Serve | None:
    """The answer to `kr` from `entry`; None when it cannot answer this request. A whole
    body answering a request that does not stream is rendered from `bodies`' template."""
    renewal = Renewal(endpoint)
    if entry.chunk_table:  # stored as a stream (a whole body has no chunk table)
        pieces = list(entry.chunks())
        events = [data for _, data in pieces]
        if not kr.stream:
            body = body_from_events(events, endpoint, renewal)
            return None if body is None else whole_hit(body)
        replayed = replay_events(events, kr.include_usage, renewal)
        if replayed is None:
            return None
        return stream_hit(replayed, [meta for meta, _ in pieces], pace, limits)
    if not kr.stream and bodies is not None:
        body = bodies.render(endpoint, entry.payload, renewal)
        return None if body is None else whole_hit(body)
    doc = body_doc(entry.payload)
    if doc is None:
        return None
    if kr.stream:
        made = events_from_body(entry.payload, endpoint, kr.include_usage, renewal)
        return None if made is None else stream_hit(made, None, pace, limits)
    return whole_hit(renewal.apply(entry.payload, doc))


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
