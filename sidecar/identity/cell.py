"""The one swappable holder of the pod's identity.

Every part that asks "which weights does this pod run?" (the key resolver, the result
cache's store check, the invalidator's selectors, prewarm, the KV hot tier, the
server info) reads the holder, never a copy, so a re-measured fingerprint reaches all
of them at once. Between "the files changed" and "the new fingerprint is known" the
holder is stale: the old fingerprints are in doubt, so stores under them are refused
and lookups relying on them are misses (any doubt = different).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import structlog

from sidecar.errors import FailedPrecondition
from sidecar.identity.pod import PodIdentity

log = structlog.get_logger("infercache.identity")

SwapListener = Callable[[PodIdentity, PodIdentity], None]
"""Called with (old, new) after every swap that changed a fingerprint."""


@dataclass(slots=True)
class IdentityStats:
    """Counters of the identity's re-checks (exported as infercache.identity.events)."""

    changes: int = 0
    """Swaps that changed the model's or an adapter's fingerprint."""
    stale_marks: int = 0
    """Times a watched file changed and the identity went stale."""
    remeasure_failures: int = 0
    """Re-measurements that failed (e.g. a half-copied shard); the identity stays stale."""
    stale_store_refusals: int = 0
    """Stores, KV attaches and KV stores refused because their version was being re-measured."""
    stale_lookup_misses: int = 0
    """Lookups answered MISS because their version was being re-measured."""


class IdentityCell:
    """The pod's current PodIdentity and whether it is being re-measured.

    Swapped whole (PodIdentity stays a frozen value); everything runs on the event
    loop, so a reader sees either the old identity or the new one, never a mix.
    """

    def __init__(self, pod: PodIdentity | None = None) -> None:
        self._pod = pod or PodIdentity()
        self.stale: frozenset[str] = frozenset()
        """Fingerprints in doubt while the files behind them are re-measured; empty
        when current (readers on the hot path test only its truth)."""
        self.stale_reason = ""
        self.stats = IdentityStats()
        self._listeners: list[SwapListener] = []

    @property
    def pod(self) -> PodIdentity:
        """The identity in force (the old one while stale)."""
        return self._pod

    def on_swap(self, listener: SwapListener) -> None:
        """Call `listener(old, new)` after each swap that changes a fingerprint."""
        self._listeners.append(listener)

    def mark_stale(self, versions: Iterable[str], reason: str) -> None:
        """Put `versions` (the fingerprints whose files changed) in doubt, at once."""
        doubted = frozenset(v for v in versions if v)
        if not doubted:
            return
        self.stale = self.stale | doubted
        self.stale_reason = reason
        self.stats.stale_marks += 1
        log.warning("identity_stale", versions=sorted(doubted), reason=reason)

    def swap(self, pod: PodIdentity) -> None:
        """Make `pod` the identity in force and clear the doubt; listeners hear of a change."""
        old, self._pod = self._pod, pod
        self.stale, self.stale_reason = frozenset(), ""
        if (old.model_version, dict(old.adapter_versions)) == (
            pod.model_version,
            dict(pod.adapter_versions),
        ):
            log.info("identity_rechecked", model_version=pod.model_version, changed=False)
            return
        self.stats.changes += 1
        log.warning(
            "identity_changed",
            old_model_version=old.model_version,
            model_version=pod.model_version,
            old_adapters=dict(old.adapter_versions),
            adapters=dict(pod.adapter_versions),
        )
        for listener in self._listeners:
            listener(old, pod)

    def in_doubt(self, model_version: str, adapter_version: str = "") -> bool:
        """Does a key of these versions rely on a fingerprint being re-measured?"""
        stale = self.stale
        return bool(stale) and (model_version in stale or adapter_version in stale)

    def check_store(self, model_version: str, adapter_version: str = "") -> None:
        """FailedPrecondition for a result of weights being re-measured, or of weights
        this pod does not run (PodIdentity.check_store)."""
        self.refuse_doubt(model_version, adapter_version)
        self._pod.check_store(model_version)

    def refuse_doubt(self, model_version: str, adapter_version: str = "") -> None:
        """FailedPrecondition for a store (a result, a KV attach, KV blocks) under a
        fingerprint being re-measured; the foreign-weights check stays the caller's."""
        if self.stale and self.in_doubt(model_version, adapter_version):
            self.stats.stale_store_refusals += 1
            raise FailedPrecondition(
                f"the pod's model files changed ({self.stale_reason}); fingerprint "
                f"{model_version[:64]!r} is being re-measured and nothing is stored under "
                "it meanwhile; retry once GetServerInfo shows the new model_version"
            )


def as_cell(pod: PodIdentity | IdentityCell | None) -> IdentityCell:
    """The cell of `pod` (a bare PodIdentity gets one of its own that never changes)."""
    return pod if isinstance(pod, IdentityCell) else IdentityCell(pod)
