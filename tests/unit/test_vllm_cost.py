"""The connector's load-vs-recompute model (infercache_client.vllm.cost): pure."""

from __future__ import annotations

import pytest
from infercache_client.vllm.cost import LoadCostModel, Reason, Tier, bucket

MIB = 1 << 20


def measured(*, pool_bps: float, warm_bps: float, tokens_per_s: float) -> LoadCostModel:
    model = LoadCostModel(margin=0.8)
    model.observe_load(Tier.POOL, 64 * MIB, 64 * MIB / pool_bps)
    model.observe_load(Tier.WARM, 8 * MIB, 8 * MIB / warm_bps)
    model.observe_prefill(1024, 1500, 1024 / tokens_per_s)
    return model


def test_a_slow_warm_link_loses_to_recompute_and_a_fast_one_wins() -> None:
    """23 MiB for 1,472 tokens: at 2 MB/s the warm tier takes ~12 s against ~1 s of
    prefill (recompute), at 1 GB/s ~25 ms (load)."""
    slow = measured(pool_bps=5e9, warm_bps=2e6, tokens_per_s=1500)
    fast = measured(pool_bps=5e9, warm_bps=1e9, tokens_per_s=1500)
    assert slow.decide(Tier.WARM, 23 * MIB, 1472, 1500).load is False
    assert slow.decide(Tier.WARM, 23 * MIB, 1472, 1500).reason is Reason.SLOWER
    won = fast.decide(Tier.WARM, 23 * MIB, 1472, 1500)
    assert won.load
    assert won.reason is Reason.FASTER
    assert won.load_s == pytest.approx(23 * MIB * (1 / 1e9 + 1 / 5e9))
    assert won.recompute_s == pytest.approx(1472 / 1500)


def test_the_margin_refuses_a_load_predicted_barely_faster() -> None:
    """Predicted at 0.9x the recompute: refused at margin 0.8, taken at margin 1.0."""
    model = LoadCostModel(margin=0.8)
    model.observe_prefill(1000, 1000, 1.0)  # 1 ms per token
    model.observe_load(Tier.POOL, 1000, 0.9e-3)  # 0.9 us per byte
    assert not model.decide(Tier.POOL, 1000, 1, 1000).load
    model.margin = 1.0
    assert model.decide(Tier.POOL, 1000, 1, 1000).load


def test_before_any_measurement_every_tier_is_used_and_measured_by_that_use() -> None:
    """The conservative rule: nothing is skipped on a guess (the first use of a tier is
    bounded and is its measurement); a tier is skipped once measured to lose."""
    model = LoadCostModel()
    for tier in Tier:
        decision = model.decide(tier, MIB, 32, 32)
        assert (decision.load, decision.reason) == (True, Reason.UNMEASURED)
    model.observe_load(Tier.WARM, MIB, 10.0)  # warm measured slow, prefill still unknown
    assert model.decide(Tier.WARM, MIB, 32, 32).reason is Reason.UNMEASURED
    model.observe_prefill(32, 32, 1e-3)
    assert model.decide(Tier.WARM, MIB, 32, 32).reason is Reason.SLOWER


def test_prefill_speed_is_kept_per_context_bucket_and_the_nearest_is_used() -> None:
    """A token at 2,000 of context costs what the 2,048 bucket measured, not the 64 one's;
    an unmeasured bucket borrows the nearest measured one."""
    model = LoadCostModel()
    model.observe_prefill(64, 64, 0.064)  # 1 ms / token
    model.observe_prefill(2000, 2000, 4.0)  # 2 ms / token
    assert model.recompute_s(100, 2000) == pytest.approx(0.2)
    assert model.recompute_s(100, 60) == pytest.approx(0.1)
    assert model.recompute_s(100, 1500) == pytest.approx(0.2)  # 2048 is 1 bucket away
    assert model.recompute_s(100, 100) == pytest.approx(0.1)  # 128: the 64 bucket
    assert [bucket(n) for n in (1, 32, 33, 2000)] == [32, 32, 64, 2048]
    assert model.prefill_seconds_per_token() == pytest.approx({64: 0.001, 2048: 0.002})
    assert LoadCostModel().prefill_seconds_per_token() == {}


def test_measurements_follow_a_link_that_changes() -> None:
    """A weighted mean: a link that slows down is seen within a few samples."""
    model = LoadCostModel()
    model.observe_prefill(1000, 1000, 1.0)
    for _ in range(3):
        model.observe_load(Tier.WARM, MIB, 1e-3)
    assert model.decide(Tier.WARM, MIB, 1000, 1000).load
    for _ in range(5):
        model.observe_load(Tier.WARM, MIB, 10.0)
    assert not model.decide(Tier.WARM, MIB, 1000, 1000).load


def test_nonsense_samples_are_ignored_and_a_bad_margin_is_refused() -> None:
    """Zero or negative bytes, tokens or seconds teach the model nothing."""
    model = LoadCostModel()
    model.observe_load(Tier.POOL, 0, 1.0)
    model.observe_load(Tier.POOL, 10, -1.0)
    model.observe_prefill(0, 10, 1.0)
    model.observe_prefill(10, 10, 0.0)
    assert model.seconds_per_byte(Tier.POOL) is None
    assert model.recompute_s(10, 10) is None
    with pytest.raises(ValueError, match="margin"):
        LoadCostModel(margin=0)
    with pytest.raises(ValueError, match="margin"):
        LoadCostModel(margin=1.5)
