"""The leases of one result cache: stamped with the invalidation epoch applied here when
they are issued, expiring after the lease TTL, signed by the fleet's LeaseSigner.

A read that may take keys' holds needs their lease ids before it runs, but only the
keys it finds absent get a MISS and so a token: such a read drafts its leases, and
SingleFlight seals those of its MISSes (a hit costs no signature).
"""

from __future__ import annotations

from collections.abc import Callable

from sidecar.config import LeaseConfig
from sidecar.invalidation.rules import RuleSet
from sidecar.keys import KeyDigest
from sidecar.results.lease_tokens import Lease, LeaseSigner, draft


class LeaseIssuer:
    """Drafts, seals and issues leases (see the module docstring)."""

    __slots__ = ("_clock_ms", "_rules", "_ttl_ms", "policy", "signer")

    def __init__(
        self,
        signer: LeaseSigner,
        rules: RuleSet,
        policy: LeaseConfig,
        clock_ms: Callable[[], int],
    ) -> None:
        self.signer = signer
        self.policy = policy
        self._rules = rules
        self._clock_ms = clock_ms
        self._ttl_ms = policy.ttl_s * 1000

    def draft(self, digest: KeyDigest) -> Lease:
        """A lease for a computation that would start now, not signed yet."""
        # The epoch applied locally when the computation starts: if this sidecar
        # is behind, the lease is older than the truth, which only errs to MISS.
        return draft(digest, self._rules.epoch, self._clock_ms() + self._ttl_ms)

    def seal(self, lease: Lease) -> bytes:
        """The token of a drafted lease (what its MISS hands out)."""
        return self.signer.seal(lease)

    def issue(self, digest: KeyDigest) -> tuple[Lease, bytes]:
        """A lease and its token."""
        lease = self.draft(digest)
        return lease, self.signer.seal(lease)
