"""Anthropic's Messages API (`POST /v1/messages`) through infercache's gateway, in the same
run and against the same upstream, bare forwarder and direct calls as the chat loops.

  hit   16 hot Messages requests, each asked until it is a hit, then cycled through at
        each hit concurrency; every answer must say hit and the upstream see no call
  miss  every request new, at concurrency 1: through the gateway, the bare forwarder and
        straight to the upstream; overhead = p50(server) - p50(direct) of the same round

Summary keys: messages_hit_p50_ms (concurrency 1), messages_hit_rps_cN (the highest),
messages_miss_overhead_ms, bare_proxy_messages_miss_overhead_ms, messages_flagged.
LiteLLM is not measured here (its proxy's cache keys OpenAI routes only).
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from bench.gateway import servers
from bench.gateway.load import LoadResult, Target, closed_loop, cycling, distinct, one, verdict
from bench.harness.report import print_head
from bench.harness.stats import median, percentile

PATH = "/v1/messages"
HOT = 16


def messages_body(text: str) -> bytes:
    """A Messages request for the bench's model."""
    doc = {"model": "tiny", "max_tokens": 16, "messages": [{"role": "user", "content": text}]}
    return json.dumps(doc).encode()


def _new_messages(nonce: str) -> Callable[[int], bytes]:
    """Request i of a miss loop: a Messages request never asked before."""
    return lambda i: messages_body(f"new message {nonce} {i}")


def _p50(runs: Sequence[LoadResult]) -> float:
    return median(percentile(r.latencies, 0.5) * 1000 for r in runs) if runs else math.nan


async def measure(
    gateway_port: int | None,
    direct_port: int,
    bare_port: int,
    rounds: int,
    seconds: float,
    hit_concurrency: Sequence[int],
    upstream_port: int,
) -> dict[str, Any]:
    """Run the loops (see the module docstring), print their table, return the summary
    pairs (nan for the gateway's when `gateway_port` is None: no gateway to measure)."""
    direct, bare = Target(direct_port, PATH), Target(bare_port, PATH)
    gw = None
    if gateway_port is not None:
        gw = Target(gateway_port, PATH, (("x-api-key", servers.KEYS["acme"]),))
    hot = [messages_body(f"hot message {i} {uuid.uuid4().hex[:8]}") for i in range(HOT)]
    flags: list[str] = []
    hits: dict[int, list[LoadResult]] = {}
    misses: dict[str, list[LoadResult]] = {}
    if gw is not None:
        for body in hot:
            if verdict((await one(gw, body)).headers) != "hit":
                await one(gw, body)
    for _ in range(rounds):
        if gw is not None:
            for c in hit_concurrency:
                before = servers.upstream_calls(upstream_port)
                result = await closed_loop(gw, cycling(gw, hot), c, seconds)
                called = servers.upstream_calls(upstream_port) - before
                if set(result.verdicts) != {"hit"} or called or set(result.statuses) != {200}:
                    flags.append(f"hit c={c}: {dict(result.verdicts)} {called=}")
                hits.setdefault(c, []).append(result)
        for name, target in (("direct", direct), ("bare", bare), ("infercache", gw)):
            if target is None:
                continue
            bodies = distinct(target, _new_messages(uuid.uuid4().hex[:12]))
            result = await closed_loop(target, bodies, 1, seconds)
            if set(result.statuses) != {200} or result.verdicts.get("hit"):
                flags.append(f"miss {name}: {dict(result.verdicts)} {dict(result.statuses)}")
            misses.setdefault(name, []).append(result)
    print_head(f"{'messages':<9} {'conc':>4} {'server':<11} {'p50 ms':>8} {'rps':>8}")
    for c, runs in hits.items():
        rps = median(r.rps for r in runs)
        print(f"{'hit':<9} {c:>4} {'infercache':<11} {_p50(runs):>8.2f} {rps:>8.0f}")
    for name, runs in misses.items():
        rps = median(r.rps for r in runs)
        print(f"{'miss':<9} {1:>4} {name:<11} {_p50(runs):>8.2f} {rps:>8.0f}")
    for flag in flags:
        print(f"# FLAGGED messages {flag}")
    base = _p50(misses.get("direct", []))
    top = max(hit_concurrency)
    return {
        "messages_hit_p50_ms": _p50(hits.get(min(hit_concurrency), [])),
        f"messages_hit_rps_c{top}": median(r.rps for r in hits[top]) if top in hits else math.nan,
        "messages_miss_overhead_ms": _p50(misses.get("infercache", [])) - base,
        "bare_proxy_messages_miss_overhead_ms": _p50(misses["bare"]) - base,
        "messages_flagged": len(flags),
    }
