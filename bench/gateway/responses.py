"""POST /v1/responses through infercache's gateway, in the same run as the chat loops:
hits, and misses against the bare forwarder and direct calls to the same upstream.

  hit   HOT Responses requests, each asked until it hits, then cycled through at each
        hit concurrency; every answer must say hit and the upstream see no call
  miss  every request new, at the first miss concurrency, through the gateway, the bare
        forwarder (bench/gateway/bare_proxy.py) and straight to the upstream

Summary keys: responses_hit_p50_ms (concurrency 1), responses_hit_rps_cN (the highest
hit concurrency), responses_miss_overhead_ms (p50 through the gateway - p50 direct),
responses_bare_proxy_miss_overhead_ms (the same for the bare forwarder: the stack's
floor), responses_miss_overhead_vs_bare_ms (their difference: what caching adds), each
a median over rounds; responses_flagged. LiteLLM does not cache /v1/responses
(BerriAI/litellm#19048), so it has no figures here. nan when the gateway or the model
server does not serve /v1/responses (an older checkout).
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from bench.gateway import servers
from bench.gateway.load import LoadResult, Target, closed_loop, cycling, distinct, one, verdict
from bench.harness.stats import median, percentile

PATH = "/v1/responses"
HOT = 32


def responses_body(text: str) -> bytes:
    """A Responses request for the bench's model."""
    return json.dumps({"model": servers.MODEL, "input": text, "temperature": 0}).encode()


def _new_bodies(tag: str) -> Callable[[int], bytes]:
    """Request i of a miss loop: a body never asked before."""
    return lambda i: responses_body(f"{tag} {i}")


def _p50_ms(runs: Sequence[LoadResult]) -> float:
    return median(percentile(r.latencies, 0.5) * 1000 for r in runs)


async def measure_responses(
    gateway_port: int,
    bare_port: int,
    upstream_port: int,
    rounds: int,
    seconds: float,
    hit_concurrency: Sequence[int],
    miss_concurrency: int,
) -> dict[str, Any]:
    """The summary pairs (see the module docstring)."""
    auth = (("Authorization", f"Bearer {servers.KEYS['acme']}"),)
    gw = Target(gateway_port, PATH, auth)
    direct, bare = Target(upstream_port, PATH), Target(bare_port, PATH)
    cmax = hit_concurrency[-1]
    pairs: dict[str, Any] = {
        "responses_hit_p50_ms": math.nan,
        f"responses_hit_rps_c{cmax}": math.nan,
        "responses_miss_overhead_ms": math.nan,
        "responses_bare_proxy_miss_overhead_ms": math.nan,
        "responses_miss_overhead_vs_bare_ms": math.nan,
        "responses_flagged": 0,
    }
    nonce = uuid.uuid4().hex[:12]
    hot = [responses_body(f"hot responses question {nonce} {i}") for i in range(HOT)]
    for target in (direct, gw):
        answer = await one(target, hot[0])
        if answer.status != 200:
            print(f"# responses skipped: {target.port}{PATH} answered {answer.status}")
            return pairs
    flags: list[str] = []
    for body in hot:
        for _ in range(3):
            if verdict((await one(gw, body)).headers) == "hit":
                break
        else:
            flags.append("warm-up: a hot request never hit")
    hits: dict[int, list[LoadResult]] = {}
    misses: dict[str, list[LoadResult]] = {}
    for r in range(rounds):
        for c in hit_concurrency:
            before = servers.upstream_calls(upstream_port)
            result = await closed_loop(gw, cycling(gw, hot), c, seconds)
            called = servers.upstream_calls(upstream_port) - before
            if set(result.verdicts) != {"hit"} or called or set(result.statuses) != {200}:
                flags.append(f"hit c={c}: {dict(result.verdicts)} {dict(result.statuses)}")
            hits.setdefault(c, []).append(result)
        for name, target in (("direct", direct), ("bare", bare), ("gateway", gw)):
            fresh = distinct(target, _new_bodies(f"new {nonce} {r} {name}"))
            result = await closed_loop(target, fresh, miss_concurrency, seconds)
            if set(result.statuses) != {200} or result.verdicts.get("hit"):
                flags.append(f"miss {name}: {dict(result.verdicts)} {dict(result.statuses)}")
            misses.setdefault(name, []).append(result)
    direct_ms = _p50_ms(misses["direct"])
    pairs["responses_hit_p50_ms"] = _p50_ms(hits[hit_concurrency[0]])
    pairs[f"responses_hit_rps_c{cmax}"] = median(r.rps for r in hits[cmax])
    pairs["responses_miss_overhead_ms"] = _p50_ms(misses["gateway"]) - direct_ms
    pairs["responses_bare_proxy_miss_overhead_ms"] = _p50_ms(misses["bare"]) - direct_ms
    pairs["responses_miss_overhead_vs_bare_ms"] = _p50_ms(misses["gateway"]) - _p50_ms(
        misses["bare"]
    )
    pairs["responses_flagged"] = len(flags)
    for flag in flags:
        print(f"# FLAGGED responses {flag}")
    print(
        f"# responses: hit p50 {pairs['responses_hit_p50_ms']:.2f} ms; miss p50 direct "
        f"{direct_ms:.2f}, bare {_p50_ms(misses['bare']):.2f}, "
        f"gateway {_p50_ms(misses['gateway']):.2f} ms"
    )
    return pairs
