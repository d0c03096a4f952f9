"""The connector's measurements and counters (infercache_client.vllm.gauge): pure."""

from __future__ import annotations

from infercache_client.vllm.cost import LoadCostModel, Reason, Tier
from infercache_client.vllm.gauge import STEPS, LoadGauge

KIB = 1 << 10


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def gauge(clock: Clock) -> LoadGauge:
    return LoadGauge(LoadCostModel(), block_bytes=512 * KIB, block_size=32, clock=clock)


def test_a_prefill_step_is_timed_from_its_plan_to_its_output_less_loads_and_saves() -> None:
    """1,000 prompt tokens planned at t, output at t + 1.3 s with 0.2 s of loads and
    0.1 s of saves: 1 ms per token at context 1,000; the load's bytes time the pool."""
    clock = Clock()
    g = gauge(clock)
    step = g.plan_step(1000, 0, 1000)
    clock.now += 1.3
    g.step_outputs({STEPS: [(step, 4 * 512 * KIB, 0.2, 0.1)]})
    assert abs((g.model.recompute_s(1, 1000) or 0) - 1e-3) < 1e-9
    assert g.model.seconds_per_byte(Tier.POOL) == 0.2 / (4 * 512 * KIB)


def test_decode_steps_and_steps_without_output_teach_no_prefill_speed() -> None:
    """A decode step (1 token) is no sample; a planned step whose output never came is
    skipped when a later one's arrives; async scheduling (planned before the previous
    output) is timed from that output."""
    clock = Clock()
    g = gauge(clock)
    g.plan_step(1, 3, 200)  # decode
    lost = g.plan_step(500, 0, 500)
    ahead = g.plan_step(500, 0, 500)
    clock.now += 5.0
    g.step_outputs({STEPS: [(lost - 1, 0, 0.0, 0.0)]})  # the decode step: no sample
    assert g.model.recompute_s(1, 500) is None
    clock.now += 0.5
    g.step_outputs({STEPS: [(ahead, 0, 0.0, 0.0)]})  # 0.5 s since the previous output
    assert abs((g.model.recompute_s(500, 500) or 0) - 0.5) < 1e-9


def test_warm_samples_time_the_tier_and_count_only_skips_of_blocks_it_held() -> None:
    """A lookup that promoted blocks measures the tier; one that found nothing counts
    nothing; a sample beside a request that did not wait because the tier is slower
    counts a skip when the tier held its blocks."""
    g = gauge(Clock())
    g.warm_sample(0, False, 0.001, Reason.SLOWER)  # nothing there: no skip, no speed
    assert g.take_counts() == {}
    assert g.model.seconds_per_byte(Tier.WARM) is None
    g.warm_sample(2, False, 0.5, None)  # a probe that waited: measures, skips nothing
    assert g.model.seconds_per_byte(Tier.WARM) == 0.5 / (2 * 512 * KIB)
    assert g.take_counts() == {}
    g.warm_sample(0, True, 0.05, Reason.SLOWER)  # not one block within the bound
    assert g.take_counts() == {"kv_load_skipped_slower_than_recompute": 1}
    assert g.take_counts() == {}
    assert g.totals["kv_load_skipped_slower_than_recompute"] == 1


def test_a_pool_load_predicted_slower_is_skipped_and_counted() -> None:
    """Measured: the pool at 1 s per block, prefill at 1 ms per token: recompute."""
    clock = Clock()
    g = gauge(clock)
    assert g.load_pool(4, 128) is True  # unmeasured: a local copy is loaded
    step = g.plan_step(128, 0, 128)
    clock.now += 0.128 + 4.0
    g.step_outputs({STEPS: [(step, 4 * 512 * KIB, 4.0, 0.0)]})
    assert g.load_pool(4, 128) is False
    assert g.take_counts() == {"kv_load_skipped_slower_than_recompute": 1}
    assert g.wait_on_warm(4, 128).load  # the warm tier is not measured yet: used
