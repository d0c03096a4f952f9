"""What the lookup benchmark measures: its cells, scenarios and the ratios of the summary."""

from __future__ import annotations

from dataclasses import dataclass

from bench.harness.workload import TIER_HOT, TIER_WARM

BATCH = 32
RATIO_CONCURRENCY = 16
DEGRADED = "degraded"


@dataclass(frozen=True, slots=True)
class Cell:
    """One measurement: what to call, how many in flight, for how long."""

    kind: str  # "lookup", "batch" or "redis_get"
    port: int
    concurrency: int
    warmup_s: float
    duration_s: float
    expect_tier: int = 0  # 0: any tier (the echo answers TIER_HOT)
    redis_keys: tuple[bytes, ...] = ()


@dataclass(frozen=True, slots=True)
class Scenario:
    """A named load against one server; `baseline`: the scenario its RPC/s is divided by."""

    name: str
    server: str
    kind: str
    expect_tier: int
    baseline: str | None


SCENARIOS = (
    Scenario("echo", "echo", "lookup", 0, None),
    Scenario("hot", "sidecar-hot", "lookup", TIER_HOT, "echo"),
    Scenario("warm", "sidecar-warm", "lookup", TIER_WARM, "echo"),
    Scenario("echo-batch32", "echo", "batch", 0, None),
    Scenario("batch32-hot", "sidecar-hot", "batch", TIER_HOT, "echo-batch32"),
    Scenario("batch32-warm", "sidecar-warm", "batch", TIER_WARM, "echo-batch32"),
    Scenario("redis-get", "redis", "redis_get", 0, None),
)

BASE = "-base"
"""Suffix of a scenario (and its server) run from the --baseline checkout's code."""


def with_baseline(scenarios: tuple[Scenario, ...]) -> tuple[Scenario, ...]:
    """`scenarios` plus each sidecar scenario again on a sidecar of the baseline checkout
    (same baseline server), so before and after run interleaved in one run."""
    extra = tuple(
        Scenario(s.name + BASE, s.server + BASE, s.kind, s.expect_tier, s.baseline)
        for s in scenarios
        if s.server.startswith("sidecar-")
    )
    return scenarios + extra


# (key in the summary line, scenario, its baseline); the headline goals are the first three.
RATIOS = (
    ("hot_vs_echo", "hot", "echo"),
    ("warm_vs_echo", "warm", "echo"),
    ("batch_vs_echo", "batch32-hot", "echo-batch32"),
    ("warm_vs_redis_get", "warm", "redis-get"),
    ("batch_warm_vs_echo", "batch32-warm", "echo-batch32"),
)

BASE_RATIOS = tuple(
    (key.replace("_vs_", "_base_vs_"), a + BASE, b)
    for key, a, b in RATIOS
    if a != "redis-get" and b != "redis-get"
)
"""The same ratios for the --baseline checkout's sidecars."""
