"""bench.gateway's floor keys: the worst concurrency's RPS ratio and the paired,
same-round miss overhead over the bare forwarder."""

from __future__ import annotations

import math

from bench.gateway.floors import summary
from bench.gateway.load import LoadResult


def _loop(p50_s: float) -> LoadResult:
    return LoadResult(latencies=[p50_s] * 3, elapsed_s=1.0)


def test_floor_keys_take_the_worst_ratio_and_the_median_of_same_round_differences() -> None:
    """The RPS ratio is the smallest over concurrencies; the overhead pairs round r of the
    gateway with round r of the bare forwarder (a slow round of both cancels out), the
    first miss concurrency unsuffixed."""
    gateway = {1: [_loop(0.0210), _loop(0.0300), _loop(0.0212)], 16: [_loop(0.0230)]}
    bare = {1: [_loop(0.0205), _loop(0.0298), _loop(0.0204)], 16: [_loop(0.0221)]}
    pairs = summary([900.0, 4000.0, 4500.0], [1000.0, 10000.0, 5000.0], gateway, bare)
    assert pairs["hit_rps_vs_canned"] == 0.4
    assert math.isclose(pairs["miss_overhead_vs_bare_ms"], 0.5)
    assert math.isclose(pairs["miss_overhead_vs_bare_c16_ms"], 0.9)


def test_floor_keys_are_nan_when_a_side_did_not_run() -> None:
    """No gateway (a checkout without it): nan, never a made-up figure."""
    pairs = summary([math.nan], [20000.0], {1: [], 16: []}, {1: [_loop(0.02)], 16: []})
    assert all(math.isnan(v) for v in pairs.values())
    assert set(pairs) == {
        "hit_rps_vs_canned",
        "miss_overhead_vs_bare_ms",
        "miss_overhead_vs_bare_c16_ms",
    }
