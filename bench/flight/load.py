"""The workload of bench.flight and what it measures: flights and distinct requests on
the gateway, the Redis pauses, the holder keys seen, and the figures of one phase."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

import redis.asyncio as aioredis

from bench.gateway.load import Target, one

PAUSE_S = 0.3
PAUSE_EVERY_S = 3.0
SAMPLE_EVERY_S = 0.05
INVALIDATE_EVERY_S = 1.5
AGAIN = "again"
"""The prompt version of the requests asked again after an invalidation (the only ones
it kills: flights and distinct requests are not cut by it)."""
ORPHAN_AFTER_S = 1.0
"""A hold nobody computes for longer than this is orphaned (a waiter must notice a dead
or absent holder within 1 s)."""
_FLIGHT = re.compile(r"flight [0-9a-f]{32}")
"""A flight's prompt, as the model server's prompt holds the message's text."""
STORE_GRACE_S = 0.25
"""A hold outlives its request's answer by its store and release (after the reply)."""


@dataclass(frozen=True, slots=True)
class Sent:
    """One request: its prompt, when it went out and came back, what the gateway did."""

    prompt: str
    flight: bool
    started: float
    ended: float
    status: int
    outcome: str
    key16: str


@dataclass
class Phase:
    """What one phase recorded."""

    sent: list[Sent] = field(default_factory=list)
    holds: list[tuple[float, frozenset[str]]] = field(default_factory=list)
    flights: list[str] = field(default_factory=list)
    pauses: int = 0
    invalidations: int = 0
    invalidations_failed: int = 0


def body(prompt: str) -> bytes:
    """A chat request for the model server's model."""
    doc = {"model": "tiny", "messages": [{"role": "user", "content": prompt}]}
    return json.dumps(doc).encode()


async def _send(target: Target, prompt: str, flight: bool, phase: Phase) -> None:
    started = time.monotonic()
    resp = await one(target, body(prompt))
    phase.sent.append(
        Sent(
            prompt,
            flight,
            started,
            time.monotonic(),
            resp.status,
            resp.headers.get("x-infercache-cache", ""),
            resp.headers.get("x-infercache-key", ""),
        )
    )


async def _flights(target: Target, k: int, until: float, phase: Phase) -> None:
    while time.monotonic() < until:
        prompt = f"flight {uuid.uuid4().hex}"
        phase.flights.append(prompt)
        await asyncio.gather(*(_send(target, prompt, True, phase) for _ in range(k)))


async def _distinct(target: Target, until: float, phase: Phase) -> None:
    while time.monotonic() < until:
        await _send(target, f"distinct {uuid.uuid4().hex}", False, phase)


async def _again(target: Target, until: float, phase: Phase) -> None:
    """Fresh prompts one after another; after each invalidation (of these requests'
    prompt version), every prompt asked since the one before, again: each is dead, so
    recomputed (a hold left on it by a Redis pause would hold it back)."""
    mine: list[str] = []
    seen = phase.invalidations
    while time.monotonic() < until:
        if phase.invalidations != seen:
            seen = phase.invalidations
            asked, mine = mine, []
            for prompt in asked:
                await _send(target, prompt, False, phase)
            continue
        prompt = f"again {uuid.uuid4().hex}"
        mine.append(prompt)
        await _send(target, prompt, False, phase)


async def _invalidations(admin_port: int, token: str, phase: Phase, stop: asyncio.Event) -> None:
    """Invalidate(tenant=acme, prompt_version=AGAIN: the `_again` requests only) every
    INVALIDATE_EVERY_S (a failure, e.g. while Redis is paused, is counted, not fatal)."""
    import grpc
    from infercache.v1 import admin_pb2 as apb
    from infercache.v1 import admin_pb2_grpc

    metadata = (("authorization", f"Bearer {token}"),)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{admin_port}") as channel:
        stub = admin_pb2_grpc.AdminServiceStub(channel)
        while not stop.is_set():
            try:
                async with asyncio.timeout(INVALIDATE_EVERY_S):
                    await stop.wait()
                return
            except TimeoutError:
                pass
            selector = apb.Selector(tenant="acme", prompt_version=AGAIN)
            req = apb.InvalidateRequest(selector=selector, reason="bench.flight")
            try:
                await stub.Invalidate(req, metadata=metadata, timeout=10)
                phase.invalidations += 1
            except grpc.RpcError:
                phase.invalidations_failed += 1


async def _pauses(redis_pid: int, phase: Phase, stop: asyncio.Event) -> None:
    """SIGSTOP the redis-server for PAUSE_S every PAUSE_EVERY_S (first after 1 s)."""
    await asyncio.sleep(1.0)
    while not stop.is_set():
        os.kill(redis_pid, signal.SIGSTOP)
        try:
            phase.pauses += 1
            await asyncio.sleep(PAUSE_S)
        finally:
            os.kill(redis_pid, signal.SIGCONT)
        try:
            async with asyncio.timeout(PAUSE_EVERY_S - PAUSE_S):
                await stop.wait()
        except TimeoutError:
            pass


async def _sample(redis_port: int, phase: Phase, stop: asyncio.Event) -> None:
    """The holder keys in Redis every SAMPLE_EVERY_S, by their digests' first 16 hex."""
    client = aioredis.Redis(port=redis_port, socket_timeout=5)
    try:
        while not stop.is_set():
            keys = [k async for k in client.scan_iter(match="ic:v2:l:*", count=1000)]
            phase.holds.append((time.monotonic(), frozenset(k[-64:][:16].decode() for k in keys)))
            await asyncio.sleep(SAMPLE_EVERY_S)
    finally:
        await client.aclose()


@dataclass(frozen=True, slots=True)
class Workers:
    """How many of each: flights (of `flight_size` identical requests), distinct
    requests, and requests asked again across invalidations."""

    flights: int
    flight_size: int
    distinct: int
    again: int


@dataclass(frozen=True, slots=True)
class Servers:
    """The gateway's port (`target`; `again`: with the AGAIN prompt version), its admin
    plane and token, its redis-server."""

    target: Target
    again: Target
    admin_port: int
    token: str
    redis_port: int
    redis_pid: int


async def warm_up(servers: Servers) -> None:
    """A few requests of each kind, not measured: the first requests of a fresh gateway
    pay for its connections and code paths being cold (a second and more here)."""
    scratch = Phase()
    for _ in range(3):
        await asyncio.gather(
            *(
                _send(servers.target, f"warm-up {uuid.uuid4().hex}", False, scratch)
                for _ in range(4)
            ),
            _send(servers.again, f"warm-up {uuid.uuid4().hex}", False, scratch),
        )


async def run_phase(servers: Servers, workers: Workers, seconds: float, pause: bool) -> Phase:
    """One phase of `seconds` (with Redis pauses when `pause`), its records."""
    phase = Phase()
    stop = asyncio.Event()
    until = time.monotonic() + seconds
    target = servers.target
    background = [
        asyncio.create_task(_sample(servers.redis_port, phase, stop)),
        asyncio.create_task(_invalidations(servers.admin_port, servers.token, phase, stop)),
    ]
    if pause:
        background.append(asyncio.create_task(_pauses(servers.redis_pid, phase, stop)))
    try:
        await asyncio.gather(
            *(_flights(target, workers.flight_size, until, phase) for _ in range(workers.flights)),
            *(_distinct(target, until, phase) for _ in range(workers.distinct)),
            *(_again(servers.again, until, phase) for _ in range(workers.again)),
        )
        # Past the last answer: stores and releases land, then a hold nobody computes
        # has had ORPHAN_AFTER_S to go.
        await asyncio.sleep(ORPHAN_AFTER_S + STORE_GRACE_S + 0.25)
    finally:
        stop.set()
        await asyncio.gather(*background, return_exceptions=True)
    return phase


@dataclass(frozen=True, slots=True)
class Figures:
    """One phase's figures."""

    requests: int
    failed: int
    max_wait_beyond_compute_ms: float
    p99_wait_beyond_compute_ms: float
    orphaned_holds: int
    longest_unattended_hold_ms: float
    upstream_calls_per_flight: float
    flights: int
    pauses: int
    invalidations: int
    invalidations_failed: int


def figures(phase: Phase, compute_s: float, upstream_prompts: Sequence[str]) -> Figures:
    """The figures of `phase`; `upstream_prompts`: every prompt the model server got."""
    waits = sorted(max(0.0, s.ended - s.started - compute_s) * 1000 for s in phase.sent)
    p99 = waits[min(len(waits) - 1, int(len(waits) * 0.99))] if waits else 0.0
    flights = set(phase.flights)
    calls = sum(1 for p in upstream_prompts for f in _FLIGHT.findall(p) if f in flights)
    orphaned, longest = _orphans(phase)
    return Figures(
        requests=len(phase.sent),
        failed=sum(1 for s in phase.sent if s.status != 200),
        max_wait_beyond_compute_ms=waits[-1] if waits else 0.0,
        p99_wait_beyond_compute_ms=p99,
        orphaned_holds=orphaned,
        longest_unattended_hold_ms=longest,
        upstream_calls_per_flight=calls / len(flights) if flights else 0.0,
        flights=len(flights),
        pauses=phase.pauses,
        invalidations=phase.invalidations,
        invalidations_failed=phase.invalidations_failed,
    )


def _orphans(phase: Phase) -> tuple[int, float]:
    """Holds seen while no request for their key was in flight (STORE_GRACE_S after its
    answer included): how many were so for longer than ORPHAN_AFTER_S, and the longest
    such stretch in ms."""
    spans: dict[str, list[tuple[float, float]]] = {}
    for s in phase.sent:
        if s.key16:
            spans.setdefault(s.key16, []).append((s.started, s.ended + STORE_GRACE_S))
    since: dict[str, float] = {}
    longest: dict[str, float] = {}
    for at, held in phase.holds:
        for key16 in held:
            attended = any(a <= at <= b for a, b in spans.get(key16, ()))
            if attended:
                since.pop(key16, None)
                continue
            first = since.setdefault(key16, at)
            longest[key16] = max(longest.get(key16, 0.0), at - first)
        for key16 in list(since):
            if key16 not in held:
                del since[key16]
    orphaned = sum(1 for v in longest.values() if v > ORPHAN_AFTER_S)
    return orphaned, max(longest.values(), default=0.0) * 1000
