"""Shadow verification's pure domain: bounds, sampling, the sequential test, the
quarantine and its screen, and what two answers are compared on."""

from __future__ import annotations

import math
import random
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from sidecar.invalidation.rules import Rule, RuleSet, Selector
from sidecar.observability.metrics import register_verification_metrics
from sidecar.observability.stats import CacheStats
from sidecar.results.screen import screen_quarantine
from sidecar.results.types import LookupQuery, Outcome
from sidecar.verification.bounds import excess, hypotheses, wilson
from sidecar.verification.ledger import (
    Ledger,
    Scope,
    State,
    check_rows,
    lift_invalidated,
    metric_rows,
)
from sidecar.verification.sampling import Countdown, TokenBucket
from sidecar.verification.settings import VerifySettings
from sidecar.wire.openai.compare import comparable, same_answer
from tests.support.keys import cache_key

SCOPE = Scope("fp1", "acme", "p1")


def ledger(**settings: float) -> Ledger:
    return Ledger(VerifySettings(**settings), lambda: 0, rng=random.Random(7))  # type: ignore[arg-type]


def baseline(led: Ledger, checks: int, diverged: int) -> None:
    for i in range(checks):
        led.record_baseline("fp1", i < diverged)


def test_wilson_bounds_contain_the_rate_and_tighten_with_samples() -> None:
    """The Wilson interval holds the observed rate and narrows as n grows; n = 0 is (0, 1)."""
    assert wilson(0, 0, 3.0) == (0.0, 1.0)
    lo, hi = wilson(2, 100, 3.0)
    assert lo < 0.02 < hi
    lo2, hi2 = wilson(20, 1000, 3.0)
    assert hi2 - lo2 < hi - lo


def test_excess_interval_is_centred_on_the_difference() -> None:
    """Newcombe's interval brackets p_hit - p_base."""
    e = excess(50, 100, 2, 100)
    assert math.isclose(e.estimate, 0.48)
    assert e.lower < 0.48 < e.upper
    assert e.lower > 0.3


def test_no_test_without_a_baseline() -> None:
    """Too few baseline samples: no hypotheses, so nothing can be quarantined."""
    assert hypotheses(0, 0, 0.05) is None
    led = ledger(false_alarm=1e-3)
    for _ in range(100):
        assert led.record_hit(SCOPE, True, 0.05) is None
    assert not led.quarantined


def test_countdown_checks_the_rate_with_bounded_gaps() -> None:
    """At 1% the countdown checks ~1% of calls and never leaves more than 150 unchecked."""
    c = Countdown(random.Random(1))
    gap, gaps, checked = 0, [], 0
    for _ in range(200_000):
        gap += 1
        if c.due(0.01):
            checked += 1
            gaps.append(gap)
            gap = 0
    assert 1900 < checked < 2100
    assert max(gaps) <= 150
    assert Countdown(random.Random(1)).due(1.0)
    assert not Countdown(random.Random(1)).due(0.0)


def test_token_bucket_limits_the_rate() -> None:
    """Bursts up to per_s, then per_s a second."""
    now = [0.0]
    bucket = TokenBucket(5, lambda: now[0])
    assert sum(bucket.take() for _ in range(10)) == 5
    now[0] = 1.0
    assert sum(bucket.take() for _ in range(10)) == 5


def test_a_drift_is_quarantined_after_a_few_divergent_checks() -> None:
    """With a clean baseline, consecutive divergences pass ln(1/alpha) in a handful of
    checks; the scope is suspect (confirm rate) in between."""
    led = ledger(false_alarm=1e-7)
    baseline(led, 1000, 20)
    led.hit_due(SCOPE, 0.01)
    event = None
    n = 0
    while event is None:
        n += 1
        event = led.record_hit(SCOPE, True, 0.05)
        if event is None:
            assert led.scopes[SCOPE].state is State.SUSPECT
    assert n <= 12
    assert event.action == "quarantined"
    assert led.is_quarantined(SCOPE) is not None
    assert event.excess.lower > 0.05


def test_noise_alone_is_never_quarantined() -> None:
    """100k checks at the baseline's own 4% divergence never pass the threshold."""
    rng = random.Random(3)
    led = ledger(false_alarm=1e-7)
    baseline(led, 500, 20)
    led.hit_due(SCOPE, 0.01)
    peak = 0.0
    for _ in range(100_000):
        assert led.record_hit(SCOPE, rng.random() < 0.04, 0.05) is None
        peak = max(peak, led.scopes[SCOPE].cusum)
    assert peak < led.level


def test_a_suspect_scope_is_checked_at_the_confirm_rate() -> None:
    """After a divergence the next hits are all checked (confirm rate 1.0)."""
    led = ledger()
    baseline(led, 1000, 0)
    led.hit_due(SCOPE, 0.01)
    led.record_hit(SCOPE, True, 0.05)
    assert all(led.hit_due(SCOPE, 0.01) for _ in range(20))


def test_acknowledge_releases_and_resets() -> None:
    """An acknowledgement serves the scope again with its evidence reset; a second one
    finds nothing to release."""
    led = ledger(false_alarm=1e-3)
    baseline(led, 1000, 0)
    led.hit_due(SCOPE, 1.0)
    while led.record_hit(SCOPE, True, 0.05) is None:
        pass
    event = led.acknowledge(SCOPE, "ops", "intended")
    assert event is not None
    assert event.caller == "ops"
    assert not led.quarantined
    assert led.scopes[SCOPE].checks == 0
    assert led.acknowledge(SCOPE, "ops", "again") is None
    assert [e.action for e in led.events] == ["quarantined", "acknowledged"]


def _quarantined(rules: RuleSet) -> Ledger:
    led = Ledger(VerifySettings(false_alarm=1e-3), lambda: 0, lambda: rules.epoch)
    baseline(led, 1000, 0)
    led.hit_due(SCOPE, 1.0)
    while led.record_hit(SCOPE, True, 0.05) is None:
        pass
    return led


def test_screen_bypasses_a_quarantined_scope_until_an_invalidation_covers_it() -> None:
    """Lookups of the scope are BYPASS verification_failed; another tenant's are not; a
    rule naming an adapter does not lift it, one covering the scope does."""
    rules = RuleSet()
    led = _quarantined(rules)
    key = cache_key("x", "acme", model_version="fp1", prompt_version="p1")
    other = cache_key("x", "globex", model_version="fp1", prompt_version="p1")
    stats = CacheStats()
    out = screen_quarantine(led, rules, stats, [LookupQuery(key), LookupQuery(other)], None)
    assert out is not None
    assert out[0] is not None
    assert out[0].outcome is Outcome.BYPASS
    assert out[0].bypass is not None
    assert out[0].bypass.reason.value == "verification_failed"
    assert out[1] is None
    rules.add(Rule(5, Selector(tenant="acme", adapter_version="lora1"), 0))
    assert screen_quarantine(led, rules, stats, [LookupQuery(key)], None) is not None
    rules.add(Rule(6, Selector(tenant="acme", model_version="fp1"), 0))
    assert screen_quarantine(led, rules, stats, [LookupQuery(key)], None) is None
    assert [e.action for e in led.events] == ["quarantined", "invalidated"]


def test_lift_invalidated_sweeps_every_scope() -> None:
    """A rule for everything releases every quarantined scope."""
    rules = RuleSet()
    led = _quarantined(rules)
    rules.add(Rule(3, Selector(all=True), 0))
    lift_invalidated(led, rules.newest_matching)
    assert not led.quarantined


def test_scopes_are_bounded_and_keep_what_is_pending() -> None:
    """Past max_scopes the least recently checked idle scope leaves; a quarantined one stays."""
    led = Ledger(VerifySettings(max_scopes=2, false_alarm=1e-3), lambda: 0)
    baseline(led, 1000, 0)
    led.hit_due(SCOPE, 1.0)
    while led.record_hit(SCOPE, True, 0.05) is None:
        pass
    led.hit_due(Scope("fp1", "b", "p1"), 1.0)
    led.hit_due(Scope("fp1", "c", "p1"), 1.0)
    assert SCOPE in led.scopes
    assert Scope("fp1", "b", "p1") not in led.scopes
    assert len(led.scopes) == 2


def test_metrics_export_the_excess_per_scope() -> None:
    """infercache.verify.divergence_excess carries each scope's estimate and bounds."""
    led = ledger()
    baseline(led, 100, 2)
    led.hit_due(SCOPE, 1.0)
    led.record_hit(SCOPE, True, 0.05)
    reader = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader]).get_meter("t")
    register_verification_metrics(
        meter, lambda: metric_rows(led, str), lambda: check_rows(led, str)
    )
    data = reader.get_metrics_data()
    assert data is not None
    points: dict[str, list[Any]] = {
        m.name: list(m.data.data_points)
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
    }
    bounds = {p.attributes["bound"]: p.value for p in points["infercache.verify.divergence_excess"]}
    assert math.isclose(bounds["estimate"], 1.0 - 0.02)
    assert bounds["lower"] < bounds["estimate"] < bounds["upper"] + 1e-9
    assert points["infercache.verify.quarantined"][0].value == 0


def test_stream_and_body_of_one_answer_compare_equal() -> None:
    """Deltas are joined; ids, created and usage are not compared; text and tool calls are."""
    body = (
        b'{"id":"a","created":1,"choices":[{"index":0,"message":{"role":"assistant",'
        b'"content":"hi there","tool_calls":[{"type":"function","function":{"name":"f",'
        b'"arguments":"{}"}}]},"finish_reason":"stop"}],"usage":{"prompt_tokens":3}}'
    )
    events = (
        b'data: {"id":"b","choices":[{"index":0,"delta":{"role":"assistant","content":"hi"}}]}\n\n'
        b'data: {"id":"b","choices":[{"index":0,"delta":{"content":" there","tool_calls":'
        b'[{"index":0,"type":"function","function":{"name":"f","arguments":"{"}}]}}]}\n\n'
        b'data: {"id":"b","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,'
        b'"function":{"arguments":"}"}}]},"finish_reason":"stop"}]}\n\n'
        b"data: [DONE]\n\n"
    )
    assert same_answer(body, events) is True
    assert same_answer(body, body.replace(b"hi there", b"hi  there")) is False
    assert same_answer(body, body.replace(b'"arguments":"{}"', b'"arguments":"{ }"')) is False
    assert same_answer(body, body.replace(b'"stop"', b'"length"')) is False
    assert comparable(b"plain text") is None


def test_confirmation_starts_no_more_checks_than_could_reach_the_threshold() -> None:
    """A suspect scope is checked at the confirm rate only while fewer checks are in
    flight than the divergences it would still take to quarantine."""
    led = ledger(false_alarm=1e-7)
    baseline(led, 1000, 0)
    led.hit_due(SCOPE, 0.01)
    led.record_hit(SCOPE, True, 0.05)
    started = 0
    while led.hit_due(SCOPE, 0.01):
        led.started(SCOPE)
        started += 1
        assert started < 100
    assert 5 <= started <= 20
    led.finished(SCOPE)
    assert led.hit_due(SCOPE, 0.01)
