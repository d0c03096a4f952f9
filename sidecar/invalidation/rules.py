"""Invalidation rules: selectors stamped with epochs, matched in O(1) per entry.

An invalidation does not touch entries. It adds a rule (selector, epoch); an
entry stamped with epoch e is dead when some matching rule has an epoch > e.
Rules are indexed by *shape* (which dimensions the selector constrains, at most
2^4 shapes) and, within a shape, by the constrained values, keeping only the
newest epoch. Checking an entry is therefore at most 16 dict lookups, whatever
the number of rules or entries.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from sidecar.errors import InvalidArgument

DIMENSIONS = ("tenant", "model_version", "adapter_version", "prompt_version")
Dims = tuple[str, str, str, str]
"""(tenant, model_version, adapter_version, prompt_version) of an entry."""


@dataclass(frozen=True, slots=True)
class Selector:
    """A conjunction of dimension values; None is unconstrained. `all` matches everything."""

    tenant: str | None = None
    model_version: str | None = None
    adapter_version: str | None = None
    prompt_version: str | None = None
    all: bool = False

    def values(self) -> tuple[str | None, str | None, str | None, str | None]:
        """Constrained values in DIMENSIONS order."""
        return (self.tenant, self.model_version, self.adapter_version, self.prompt_version)

    def validate(self) -> None:
        """Refuse an empty selector, and `all` combined with anything else."""
        constrained = [v for v in self.values() if v is not None]
        if any(v == "" for v in constrained):
            raise InvalidArgument("selector", "constrained dimensions must not be empty strings")
        if self.all and constrained:
            raise InvalidArgument("selector.all", "must not be combined with other dimensions")
        if not self.all and not constrained:
            raise InvalidArgument(
                "selector", "is empty; name at least one dimension or set all=true"
            )

    def matches(self, dims: Dims) -> bool:
        """True if an entry with these dimensions is selected."""
        return self.all or all(
            v is None or v == d for v, d in zip(self.values(), dims, strict=True)
        )

    def to_json(self) -> str:
        """Stable JSON (used in the store and the audit log)."""
        body: dict[str, str | bool] = {
            k: v for k, v in zip(DIMENSIONS, self.values(), strict=True) if v is not None
        }
        if self.all:
            body = {"all": True}
        return json.dumps(body, sort_keys=True, separators=(",", ":"))

    @staticmethod
    def from_json(text: str) -> Selector:
        """Inverse of to_json."""
        body = json.loads(text)
        if body.get("all"):
            return Selector(all=True)
        return Selector(**{k: body[k] for k in DIMENSIONS if k in body})

    def describe(self) -> str:
        """Human-readable form: "tenant=acme model_version=fp1-..." or "all"."""
        if self.all:
            return "all"
        pairs = zip(DIMENSIONS, self.values(), strict=True)
        return " ".join(f"{k}={v}" for k, v in pairs if v is not None)


@dataclass(frozen=True, slots=True)
class Rule:
    """A committed invalidation: entries stamped before `epoch` that match are dead.

    A rule is the whole triple, not its epoch: after a store lost its data, two
    different rules can carry the same epoch number, and both must be applied.
    """

    epoch: int
    selector: Selector
    time_ms: int
    local: bool = False
    """Made by this sidecar for itself (see Freshness: a store that lost data); never
    published to the store."""

    def member(self) -> str:
        """The rule as the store's sorted set holds it: "epoch|time_ms|selector-json"."""
        return f"{self.epoch}|{self.time_ms}|{self.selector.to_json()}"


_Shape = tuple[bool, bool, bool, bool]


def _projector(shape: _Shape) -> Callable[[Dims], tuple[str, ...]]:
    picked = [i for i, on in enumerate(shape) if on]
    if not picked:
        return lambda dims: ()
    if len(picked) == 1:
        i = picked[0]
        return lambda dims: (dims[i],)
    getter = operator.itemgetter(*picked)
    return lambda dims: getter(dims)


_PROJECT: dict[_Shape, Callable[[Dims], tuple[str, ...]]] = {
    (a, b, c, d): _projector((a, b, c, d))
    for a in (False, True)
    for b in (False, True)
    for c in (False, True)
    for d in (False, True)
}
_MEMO_MAX = 65_536


class RuleSet:
    """The rules a sidecar knows, indexed for O(1) liveness checks.

    `epoch` is the newest epoch applied; rules must be added in any order but
    the set only claims to be current up to `epoch`.
    """

    def __init__(self) -> None:
        self._index: dict[_Shape, dict[tuple[str, ...], int]] = {}
        self._memo: dict[Dims, int] = {}
        self._rules: set[Rule] = set()
        self.epoch = 0

    def __len__(self) -> int:
        return len(self._rules)

    def add(self, rule: Rule) -> None:
        """Apply a rule (idempotent: the same rule twice is one rule; another rule with
        the same epoch is another rule). Does not move `epoch`: holding rule e says
        nothing about the rules below e (another sidecar may have committed one)."""
        if rule in self._rules:
            return
        self._rules.add(rule)
        self._index_rule(rule)

    def advance(self, epoch: int) -> None:
        """Record that every rule up to `epoch` has been applied."""
        self.epoch = max(self.epoch, epoch)

    def _index_rule(self, rule: Rule) -> None:
        values = rule.selector.values()
        shape: _Shape = (
            (False, False, False, False)
            if rule.selector.all
            else (
                values[0] is not None,
                values[1] is not None,
                values[2] is not None,
                values[3] is not None,
            )
        )
        projected = tuple(v for v in values if v is not None) if not rule.selector.all else ()
        self._memo.clear()
        by_value = self._index.setdefault(shape, {})
        by_value[projected] = max(by_value.get(projected, 0), rule.epoch)

    def newest_matching(self, dims: Dims) -> int:
        """Epoch of the newest rule matching these dimensions, or 0."""
        cached = self._memo.get(dims)
        if cached is not None:
            return cached
        newest = 0
        for shape, by_value in self._index.items():
            e = by_value.get(_PROJECT[shape](dims), 0)
            if e > newest:
                newest = e
        # Hot hits repeat a handful of dimension tuples; the memo makes the check
        # one dict lookup. It is dropped whenever the index changes, and bounded.
        if len(self._memo) >= _MEMO_MAX:
            self._memo.clear()
        self._memo[dims] = newest
        return newest

    def is_dead(self, dims: Dims, entry_epoch: int) -> bool:
        """True if a matching rule is newer than the entry."""
        return self.newest_matching(dims) > entry_epoch

    def epoch_at(self, time_ms: int) -> int:
        """The newest epoch whose rule was committed at or before time_ms (0 if none)."""
        return max((r.epoch for r in self._rules if r.time_ms <= time_ms), default=0)

    def prune(self, older_than_ms: int) -> int:
        """Forget rules committed before older_than_ms (no entry they could kill survives).

        Returns how many were dropped.
        """
        old = {r for r in self._rules if r.time_ms < older_than_ms}
        if not old:
            return 0
        self._rules -= old
        self._index.clear()
        self._memo.clear()
        for r in self._rules:
            self._index_rule(r)
        return len(old)

    def rules(self) -> Iterable[Rule]:
        """Known rules, oldest first (by epoch, then commit time)."""
        return iter(sorted(self._rules, key=lambda r: (r.epoch, r.time_ms, r.member())))
