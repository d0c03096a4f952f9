"""The gateway's floors, measured in the same run as the gateway and interleaved with it:
the canned-answer server (bench/gateway/canned.py) under its hit, the bare forwarder
(bench/gateway/bare_proxy.py) under its miss. Both run on the gateway's HTTP stack, so
what the gateway costs beyond them is its own work.

  hit_rps_vs_canned             the gateway's hit RPS / the canned server's, each the
                                median over rounds, the worst concurrency counting
                                (goal >= 0.8)
  miss_overhead_vs_bare_ms      median over rounds of p50(gateway miss) - p50(bare miss)
                                of the same round, at concurrency 1 (goal <= 0.3)
  miss_overhead_vs_bare_c16_ms  the same at concurrency 16 (goal <= 0.3)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from bench.gateway import servers
from bench.gateway.load import LoadResult, Target, one
from bench.gateway.probes import chat_body
from bench.harness.procs import ServerProc
from bench.harness.stats import median, percentile

GOALS = {"hit_rps_vs_canned": 0.8, "miss_overhead_vs_bare_ms": 0.3}


async def canned_server(workdir: Path, upstream: Target) -> ServerProc:
    """The canned server (not started), answering what the upstream answers a hot
    request: the same bytes a gateway hit sends back."""
    answer = await one(upstream, chat_body("hot question 0 for infercache"))
    if answer.status != 200:
        raise RuntimeError(f"the upstream answered {answer.status}: {answer.body[:200]!r}")
    body = workdir / "canned.json"
    body.write_bytes(answer.body)
    return servers.canned(body)


def rps_ratio(gateway: Sequence[float], canned: Sequence[float]) -> float:
    """min over concurrencies of gateway RPS / canned RPS (nan if any is missing)."""
    ratios = [g / c if c else math.nan for g, c in zip(gateway, canned, strict=True)]
    if not ratios or any(math.isnan(r) for r in ratios):
        return math.nan
    return min(ratios)


def paired_overhead(gateway: Sequence[LoadResult], bare: Sequence[LoadResult]) -> float:
    """Median over rounds of the gateway's p50 minus the bare forwarder's p50 of the same
    round, in ms (nan without both)."""
    if not gateway or len(gateway) != len(bare):
        return math.nan
    return median(
        (percentile(g.latencies, 0.5) - percentile(b.latencies, 0.5)) * 1000
        for g, b in zip(gateway, bare, strict=True)
    )


def summary(
    gateway_rps: Sequence[float],
    canned_rps: Sequence[float],
    gateway_misses: Mapping[int, Sequence[LoadResult]],
    bare_misses: Mapping[int, Sequence[LoadResult]],
) -> dict[str, float]:
    """The summary's floor keys: hit RPS over the canned server's (per hit concurrency, in
    the same order), miss overhead over the bare forwarder's (per miss concurrency, the
    first unsuffixed)."""
    pairs = {"hit_rps_vs_canned": rps_ratio(gateway_rps, canned_rps)}
    for i, c in enumerate(gateway_misses):
        key = "miss_overhead_vs_bare" + ("" if i == 0 else f"_c{c}") + "_ms"
        pairs[key] = paired_overhead(gateway_misses[c], bare_misses.get(c, []))
    return pairs
