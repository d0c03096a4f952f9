"""Per-scope evidence and state: checks and divergences of hits, the engine's own
divergence per model version (misses computed twice), the sequential test, and the
quarantine it triggers.

A scope is (model version, tenant, prompt version). Its state:

    ok           checked at its rate
    suspect      the test's statistic is above 0 (recent divergences): checked at the
                 confirm rate until the statistic falls back to 0 or passes the threshold
    quarantined  its hits are not served (bypass verification_failed) until an operator
                 acknowledges it or an Invalidate matching the whole scope commits

Everything here runs on the event loop and is O(1) per call; the scope table is
bounded (least recently checked, never a suspect or quarantined scope, leaves first).
"""

from __future__ import annotations

import random
from collections import Counter, OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import NamedTuple

from sidecar.verification.bounds import Excess, excess, hypotheses, threshold
from sidecar.verification.sampling import Countdown
from sidecar.verification.settings import VerifySettings

MAX_EVENTS = 256
"""Quarantine events kept for GetStats (newest last)."""


class Scope(NamedTuple):
    """What a budget and a quarantine apply to."""

    model_version: str
    tenant: str
    prompt_version: str


class State(Enum):
    """A scope's state (values are the labels)."""

    OK = "ok"
    SUSPECT = "suspect"
    QUARANTINED = "quarantined"


@dataclass(slots=True)
class Tally:
    """Checks and divergences since the last reset, and the test's statistic."""

    countdown: Countdown
    checks: int = 0
    diverged: int = 0
    cusum: float = 0.0
    state: State = State.OK
    since_epoch: int = 0
    """The rule epoch when it was quarantined (a newer matching rule lifts it)."""
    pending: int = 0
    """Checks started and not yet judged."""


@dataclass(frozen=True, slots=True)
class Event:
    """One quarantine, acknowledgement or lift, as audited."""

    time_ms: int
    scope: Scope
    action: str
    """quarantined, acknowledged or invalidated."""
    caller: str
    reason: str
    checks: int
    diverged: int
    baseline_checks: int
    baseline_diverged: int
    excess: Excess


@dataclass(frozen=True, slots=True)
class ScopeReport:
    """A scope's figures, as GetStats and the metrics show them."""

    scope: Scope
    state: State
    checks: int
    diverged: int
    baseline_checks: int
    baseline_diverged: int
    excess: Excess
    statistic: float
    threshold: float


@dataclass(slots=True)
class _Baseline:
    countdown: Countdown
    checks: int = 0
    diverged: int = 0


@dataclass(slots=True)
class Ledger:
    """The verification state of one sidecar."""

    settings: VerifySettings
    clock_ms: Callable[[], int]
    epoch: Callable[[], int] = lambda: 0
    """The rule set's epoch now (stamped on a quarantine)."""
    rng: random.Random = field(default_factory=random.Random)
    scopes: OrderedDict[Scope, Tally] = field(default_factory=OrderedDict)
    quarantined: dict[Scope, Tally] = field(default_factory=dict)
    """The quarantined scopes (empty: the lookup screen costs one truth test)."""
    baselines: dict[str, _Baseline] = field(default_factory=dict)
    events: deque[Event] = field(default_factory=lambda: deque(maxlen=MAX_EVENTS))
    counts: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    """(model version, hit|baseline, result) -> calls; results: same, diverged,
    unjudged, failed, skipped_busy, skipped_rate, skipped_concurrency, untracked."""
    on_event: Callable[[Event], None] = lambda event: None

    @property
    def level(self) -> float:
        """The test's alarm threshold."""
        return threshold(self.settings.false_alarm)

    def hit_due(self, scope: Scope, rate: float) -> bool:
        """Is this eligible hit of `scope` checked? (`rate`: the tenant's; a suspect
        scope is checked at the confirm rate.)"""
        tally = self._tally(scope)
        if tally is None:
            self.counts[scope.model_version, "hit", "untracked"] += 1
            return False
        if tally.state is State.SUSPECT:
            # Confirm, but never start more checks than could still reach the threshold
            # (verdicts take an upstream call; meanwhile every hit would be checked).
            base = self._baseline(scope.model_version)
            h = hypotheses(base.diverged, base.checks, self.settings.budget)
            if h is not None and tally.pending >= (self.level - tally.cusum) / h.diverged:
                return False
            rate = max(rate, self.settings.confirm_rate)
        return tally.countdown.due(rate)

    def started(self, scope: Scope) -> None:
        """A check of `scope` was started."""
        tally = self.scopes.get(scope)
        if tally is not None:
            tally.pending += 1

    def finished(self, scope: Scope) -> None:
        """A check of `scope` ended (judged or not)."""
        tally = self.scopes.get(scope)
        if tally is not None and tally.pending > 0:
            tally.pending -= 1

    def miss_due(self, model_version: str) -> bool:
        """Is this eligible miss computed a second time (for the baseline)?"""
        return self._baseline(model_version).countdown.due(self.settings.baseline_rate)

    def count(self, model_version: str, kind: str, result: str) -> None:
        """One more check outcome that is no verdict (skipped, failed, unjudged)."""
        self.counts[model_version, kind, result] += 1

    def record_baseline(self, model_version: str, diverged: bool) -> None:
        """A miss computed twice: did the two answers differ?"""
        base = self._baseline(model_version)
        base.checks += 1
        base.diverged += diverged
        self.counts[model_version, "baseline", "diverged" if diverged else "same"] += 1

    def record_hit(self, scope: Scope, diverged: bool, budget: float) -> Event | None:
        """A hit re-computed: did the answer differ from the cached one? The quarantine
        event when this check makes the test pass its threshold."""
        self.counts[scope.model_version, "hit", "diverged" if diverged else "same"] += 1
        tally = self.scopes.get(scope)
        if tally is None or tally.state is State.QUARANTINED:
            return None  # evicted meanwhile, or a check started before the quarantine
        tally.checks += 1
        tally.diverged += diverged
        base = self._baseline(scope.model_version)
        h = hypotheses(base.diverged, base.checks, budget)
        if h is None:
            return None  # no baseline to judge by yet: never a quarantine
        tally.cusum = max(0.0, tally.cusum + (h.diverged if diverged else h.agreed))
        if tally.cusum >= self.level:
            return self._quarantine(scope, tally)
        tally.state = State.SUSPECT if tally.cusum > 0 else State.OK
        return None

    def is_quarantined(self, scope: Scope) -> Tally | None:
        """The scope's tally when it is quarantined."""
        return self.quarantined.get(scope)

    def acknowledge(self, scope: Scope, caller: str, reason: str) -> Event | None:
        """An operator accepts the scope's answers as they are now: serve again, with
        its evidence reset. None when the scope is not quarantined."""
        return self._release(scope, "acknowledged", caller, reason)

    def invalidated(self, scope: Scope) -> Event | None:
        """An Invalidate matching the whole scope committed after its quarantine."""
        return self._release(scope, "invalidated", "", "an invalidation matched the scope")

    def reports(self) -> list[ScopeReport]:
        """Every tracked scope's figures."""
        out = []
        for scope, t in list(self.scopes.items()):
            base = self._baseline(scope.model_version)
            out.append(
                ScopeReport(
                    scope,
                    t.state,
                    t.checks,
                    t.diverged,
                    base.checks,
                    base.diverged,
                    excess(t.diverged, t.checks, base.diverged, base.checks),
                    t.cusum,
                    self.level,
                )
            )
        return out

    def _quarantine(self, scope: Scope, tally: Tally) -> Event:
        tally.state = State.QUARANTINED
        tally.since_epoch = self.epoch()
        self.quarantined[scope] = tally
        return self._event(scope, tally, "quarantined", "", "excess divergence over budget")

    def _release(self, scope: Scope, action: str, caller: str, reason: str) -> Event | None:
        tally = self.quarantined.pop(scope, None)
        if tally is None:
            return None
        event = self._event(scope, tally, action, caller, reason)
        # The evidence was judged; what comes next is judged afresh (a scope acknowledged
        # as it is would otherwise be quarantined again by its own past checks).
        tally.checks = tally.diverged = 0
        tally.cusum = 0.0
        tally.state = State.OK
        return event

    def _event(self, scope: Scope, tally: Tally, action: str, caller: str, why: str) -> Event:
        base = self._baseline(scope.model_version)
        found = excess(tally.diverged, tally.checks, base.diverged, base.checks)
        event = Event(
            self.clock_ms(),
            scope,
            action,
            caller,
            why,
            tally.checks,
            tally.diverged,
            base.checks,
            base.diverged,
            found,
        )
        self.events.append(event)
        self.on_event(event)
        return event

    def _tally(self, scope: Scope) -> Tally | None:
        tally = self.scopes.get(scope)
        if tally is not None:
            self.scopes.move_to_end(scope)
            return tally
        if len(self.scopes) >= self.settings.max_scopes and not self._evict():
            return None
        tally = self.scopes[scope] = Tally(Countdown(self.rng))
        return tally

    def _evict(self) -> bool:
        """Drop the least recently checked scope with nothing pending."""
        for scope, tally in self.scopes.items():
            if tally.state is State.OK:
                del self.scopes[scope]
                return True
        return False

    def _baseline(self, model_version: str) -> _Baseline:
        base = self.baselines.get(model_version)
        if base is None:
            base = self.baselines[model_version] = _Baseline(Countdown(self.rng))
        return base


SCOPE_ADAPTER = "\x00scope"
"""The adapter a scope is matched as against rules: no rule names it, so only a rule
that leaves the adapter open (and matches tenant, model and prompt version, each named
or open) lifts a quarantine; one naming an adapter covers part of the scope only."""

RuleEpochs = Callable[[tuple[str, str, str, str]], int]
"""The newest rule epoch matching (tenant, model, adapter, prompt version) dimensions."""


def lift_invalidated(ledger: Ledger, newest: RuleEpochs) -> None:
    """Release every quarantined scope that a newer matching rule has invalidated."""
    for scope, tally in list(ledger.quarantined.items()):
        dims = (scope.tenant, scope.model_version, SCOPE_ADAPTER, scope.prompt_version)
        if newest(dims) > tally.since_epoch:
            ledger.invalidated(scope)


def metric_rows(
    ledger: Ledger, label: Callable[[str], str]
) -> list[tuple[dict[str, str], float, float, float, bool]]:
    """observability.metrics' rows of every tracked scope (`label`: the bounded label of
    a model version, CacheStats.version)."""
    rows = []
    for r in ledger.reports():
        s = r.scope
        labels = {
            "model_version": label(s.model_version),
            "tenant": s.tenant,
            "prompt_version": s.prompt_version,
        }
        e = r.excess
        rows.append((labels, e.estimate, e.lower, e.upper, r.state is State.QUARANTINED))
    return rows


def check_rows(ledger: Ledger, label: Callable[[str], str]) -> list[tuple[tuple[str, ...], int]]:
    """observability.metrics' rows of the check counts, versions labelled by `label`."""
    out: Counter[tuple[str, ...]] = Counter()
    for (version, kind, result), n in list(ledger.counts.items()):
        out[label(version), kind, result] += n
    return list(out.items())
