"""Invalidation rules: selector validation, matching, JSON, and the RuleSet index."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sidecar.errors import InvalidArgument
from sidecar.invalidation.rules import DIMENSIONS, Dims, Rule, RuleSet, Selector
from tests.support.strategies.rules import entry_dims, rule_lists, selectors

DIMS: Dims = ("acme", "m1", "lora7", "support-v3")


def _reference_newest(rules: list[Rule], dims: Dims) -> int:
    """What newest_matching must return: a linear scan over every rule."""
    return max((r.epoch for r in rules if r.selector.matches(dims)), default=0)


def _constrain(dimension: str, value: str, *, all_: bool = False) -> Selector:
    values = [value if d == dimension else None for d in DIMENSIONS]
    return Selector(values[0], values[1], values[2], values[3], all=all_)


def _ruleset(rules: list[Rule]) -> RuleSet:
    rs = RuleSet()
    for r in rules:
        rs.add(r)
    return rs


@pytest.mark.parametrize(
    "selector",
    [
        Selector(),
        Selector(all=False),
    ],
)
def test_empty_selector_is_refused(selector: Selector) -> None:
    """A selector naming nothing (and not `all`) is INVALID_ARGUMENT on `selector`."""
    with pytest.raises(InvalidArgument) as info:
        selector.validate()
    assert info.value.field == "selector"


@pytest.mark.parametrize("dimension", DIMENSIONS)
def test_all_combined_with_a_dimension_is_refused(dimension: str) -> None:
    """`all` together with any constrained dimension is refused, naming selector.all."""
    with pytest.raises(InvalidArgument) as info:
        _constrain(dimension, "x", all_=True).validate()
    assert info.value.field == "selector.all"


@pytest.mark.parametrize("dimension", DIMENSIONS)
def test_empty_string_dimension_is_refused(dimension: str) -> None:
    """A constrained dimension spelled as "" is refused rather than matching "no adapter"."""
    with pytest.raises(InvalidArgument):
        _constrain(dimension, "").validate()


@given(selectors())
def test_drawn_selectors_validate(selector: Selector) -> None:
    """Every selector with at least one non-empty dimension, or `all` alone, is valid."""
    selector.validate()


@pytest.mark.parametrize("shape", list(itertools.product((False, True), repeat=4)))
def test_matching_every_shape(shape: tuple[bool, bool, bool, bool]) -> None:
    """A selector matches exactly when each constrained dimension equals the entry's."""
    values = [DIMS[i] if on else None for i, on in enumerate(shape)]
    selector = Selector(values[0], values[1], values[2], values[3])
    assert selector.matches(DIMS)
    for i, on in enumerate(shape):
        other = list(DIMS)
        other[i] = other[i] + "-other"
        assert selector.matches((other[0], other[1], other[2], other[3])) is (not on)


def test_all_matches_everything() -> None:
    """`all` matches any entry, including one with no adapter."""
    assert Selector(all=True).matches(DIMS)
    assert Selector(all=True).matches(("", "", "", ""))


def test_adapter_selector_does_not_match_entries_without_adapter() -> None:
    """adapter_version=X does not select an entry whose adapter is "" (none)."""
    assert not Selector(adapter_version="lora7").matches(("acme", "m1", "", "support-v3"))


@given(selectors())
def test_json_round_trip(selector: Selector) -> None:
    """from_json(to_json(s)) == s for every valid selector."""
    assert Selector.from_json(selector.to_json()) == selector


def test_json_is_stable_and_minimal() -> None:
    """to_json sorts keys and leaves unconstrained dimensions out (it is stored and audited)."""
    s = Selector(prompt_version="p", tenant="t")
    assert s.to_json() == '{"prompt_version":"p","tenant":"t"}'
    assert Selector(all=True).to_json() == '{"all":true}'


def test_describe() -> None:
    """describe() names the constrained dimensions in order, or says "all"."""
    assert (
        Selector(tenant="acme", prompt_version="v3").describe() == "tenant=acme prompt_version=v3"
    )
    assert Selector(all=True).describe() == "all"


@given(rule_lists(), entry_dims())
def test_newest_matching_equals_a_linear_scan(rules: list[Rule], dims: Dims) -> None:
    """The shape index answers exactly what scanning every rule would, over all 16 shapes."""
    assert _ruleset(rules).newest_matching(dims) == _reference_newest(rules, dims)


@given(rule_lists(), entry_dims(), st.integers(min_value=0, max_value=14))
def test_is_dead_iff_a_matching_rule_is_newer(rules: list[Rule], dims: Dims, stamp: int) -> None:
    """An entry stamped `stamp` is dead exactly when a matching rule has a larger epoch."""
    expected = any(r.selector.matches(dims) and r.epoch > stamp for r in rules)
    assert _ruleset(rules).is_dead(dims, stamp) is expected


def test_is_dead_boundary() -> None:
    """A rule at the entry's own epoch does not kill it (the entry started after it)."""
    rs = _ruleset([Rule(5, Selector(tenant="acme"), 0)])
    assert not rs.is_dead(DIMS, 5)
    assert rs.is_dead(DIMS, 4)
    assert not rs.is_dead(("beta", *DIMS[1:]), 0)


def test_newest_matching_keeps_the_newest_of_equal_selectors() -> None:
    """Two rules with the same selector keep the larger epoch, in any insertion order."""
    for order in ((3, 9), (9, 3)):
        rs = _ruleset([Rule(e, Selector(model_version="m1"), 0) for e in order])
        assert rs.newest_matching(DIMS) == 9


def test_add_is_idempotent() -> None:
    """Adding a rule twice changes nothing; rules() lists them oldest first."""
    rs = RuleSet()
    r = Rule(4, Selector(tenant="acme"), 10)
    rs.add(r)
    rs.add(r)
    rs.add(Rule(2, Selector(tenant="beta"), 5))
    assert len(rs) == 2
    assert [x.epoch for x in rs.rules()] == [2, 4]


def test_add_does_not_claim_older_rules() -> None:
    """Adding rule e applies it at once but leaves `epoch` alone: rules below e committed
    elsewhere may still be missing, and only advance() (after fetching them) claims them."""
    rs = RuleSet()
    rs.add(Rule(7, Selector(tenant="acme"), 10))
    assert rs.is_dead(DIMS, 6)
    assert rs.epoch == 0
    rs.advance(7)
    assert rs.epoch == 7


def test_advance_never_goes_back() -> None:
    """advance() raises the applied epoch and never lowers it."""
    rs = RuleSet()
    rs.advance(7)
    rs.advance(3)
    assert rs.epoch == 7


@given(rule_lists(), st.integers(min_value=-1, max_value=10_001))
def test_epoch_at(rules: list[Rule], time_ms: int) -> None:
    """epoch_at(t) is the newest epoch committed at or before t, 0 if none."""
    expected = max((r.epoch for r in rules if r.time_ms <= time_ms), default=0)
    assert _ruleset(rules).epoch_at(time_ms) == expected


def test_epoch_at_boundaries() -> None:
    """A rule committed exactly at t counts; one committed at t+1 does not."""
    rs = _ruleset([Rule(1, Selector(all=True), 100), Rule(2, Selector(all=True), 200)])
    assert rs.epoch_at(99) == 0
    assert rs.epoch_at(100) == 1
    assert rs.epoch_at(199) == 1
    assert rs.epoch_at(200) == 2


@given(rule_lists(), st.integers(min_value=0, max_value=10_001), entry_dims())
def test_prune_drops_old_rules_and_rebuilds_the_index(
    rules: list[Rule], cutoff: int, dims: Dims
) -> None:
    """prune(t) forgets rules committed before t; matching then sees only the survivors."""
    rs = _ruleset(rules)
    epoch_before = rs.epoch
    dropped = rs.prune(cutoff)
    survivors = [r for r in rules if r.time_ms >= cutoff]
    assert dropped == len(rules) - len(survivors)
    assert len(rs) == len(survivors)
    assert {r.epoch for r in rs.rules()} == {r.epoch for r in survivors}
    assert rs.newest_matching(dims) == _reference_newest(survivors, dims)
    assert rs.epoch == epoch_before, "pruning must not move the applied epoch back"


def test_prune_nothing_old() -> None:
    """prune returns 0 and keeps every rule when none is older than the cutoff."""
    rs = _ruleset([Rule(1, Selector(tenant="acme"), 500)])
    assert rs.prune(500) == 0
    assert rs.newest_matching(DIMS) == 1


def test_cached_answer_is_dropped_when_a_rule_arrives() -> None:
    """A dims tuple checked before a new rule is judged by the new rule afterwards."""
    rules = RuleSet()
    dims = ("acme", "m1", "", "p1")
    rules.add(Rule(1, Selector(tenant="other"), 0))
    assert not rules.is_dead(dims, 0)  # now memoised as 0
    rules.add(Rule(2, Selector(model_version="m1"), 0))
    assert rules.is_dead(dims, 1)
    assert rules.newest_matching(dims) == 2


def test_cached_answer_is_dropped_when_rules_are_pruned() -> None:
    """After pruning the only matching rule, the dims are no longer judged by it."""
    rules = RuleSet()
    dims = ("acme", "m1", "", "p1")
    rules.add(Rule(1, Selector(tenant="acme"), time_ms=100))
    assert rules.newest_matching(dims) == 1
    rules.prune(older_than_ms=200)
    assert rules.newest_matching(dims) == 0


@given(rule_lists(), st.lists(entry_dims(), min_size=1, max_size=4), st.integers(0, 10_001))
def test_answers_stay_right_while_rules_arrive(
    rules: list[Rule], probes: list[Dims], cutoff: int
) -> None:
    """Queried between every add (and after a prune), newest_matching always equals a
    linear scan over the rules held at that moment (no stale cached answer)."""
    rs = RuleSet()
    held: list[Rule] = []
    for r in rules:
        for dims in probes:
            assert rs.newest_matching(dims) == _reference_newest(held, dims)
        rs.add(r)
        held.append(r)
    rs.prune(cutoff)
    held = [r for r in held if r.time_ms >= cutoff]
    for dims in probes:
        assert rs.newest_matching(dims) == _reference_newest(held, dims)


def test_a_reused_epoch_number_is_another_rule() -> None:
    """Two different rules with one epoch number (a store that lost its counter numbers
    anew) are both applied; the old set kept the first and silently dropped the second."""
    rules = RuleSet()
    rules.add(Rule(1, Selector(tenant="old"), time_ms=100))
    rules.add(Rule(1, Selector(tenant="new"), time_ms=900))
    rules.add(Rule(1, Selector(tenant="new"), time_ms=900))  # the same rule again: one rule
    assert len(rules) == 2
    assert rules.is_dead(("new", "m1", "", "p1"), 0)
    assert rules.is_dead(("old", "m1", "", "p1"), 0)
