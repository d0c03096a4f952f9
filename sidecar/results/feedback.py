"""Downstream feedback: a check after the cache accepts or rejects a cached answer.

A report names the entry by its key digest (returned with every hit). Since the
digest is the SHA-256 of the key material the entry carries, an entry found
under it proves itself without the caller resending the key. A rejected entry
is evicted (unless configured otherwise) so the next request recomputes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum

import structlog

from sidecar import entries
from sidecar.config import DEFAULTS
from sidecar.entries import Entry, EntryRejected
from sidecar.errors import InvalidArgument, NotFound, TierUnavailable, Unavailable
from sidecar.keys import KeyDigest, dims_from_material
from sidecar.results.cache import ResultCache

log = structlog.get_logger("infercache.feedback")

# Reasons are short, from a small alphabet, so no free text (or prompt text) reaches
# logs; only the configured ones become metric labels, so a caller cannot blow up
# label cardinality either.
_REASON = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
UNSPECIFIED_REASON = "unspecified"
OTHER_REASON = "other"
"""The metric label of every reason outside the allow-list."""


class Verdict(Enum):
    """What the downstream check concluded."""

    ACCEPTED = "accepted"
    REJECTED = "rejected"


@dataclass(frozen=True, slots=True)
class FeedbackResult:
    """What a report did: whether the entry was evicted, and its model version."""

    evicted: bool
    model_version: str


class DownstreamFeedback:
    """Records verdicts per model version and evicts rejected entries."""

    def __init__(
        self,
        cache: ResultCache,
        *,
        evict_rejected: bool = True,
        reasons: Iterable[str] = DEFAULTS.stream.outcome_reasons,
    ) -> None:
        """`reasons`: the labels counted as themselves (plus "unspecified"); others
        are counted as "other"."""
        self._cache = cache
        self._evict_rejected = evict_rejected
        self._reasons = frozenset((*reasons, UNSPECIFIED_REASON))

    async def report(self, digest: bytes, verdict: Verdict, reason: str) -> FeedbackResult:
        """Count the verdict on the live entry under `digest`; evict it when rejected.

        NotFound when no live entry has that digest (expired, evicted, invalidated,
        never stored); Unavailable when the warm tier cannot tell or cannot delete.
        """
        if len(digest) != 32:
            raise InvalidArgument("key_digest", f"is {len(digest)} bytes; a digest is 32")
        if reason and not _REASON.fullmatch(reason):
            raise InvalidArgument(
                "reason", "must be at most 64 characters of letters, digits and _.:-"
            )
        key_digest = KeyDigest(digest)
        entry = await self._find(key_digest)
        if entry is None:
            raise NotFound(f"no live cached entry has key digest {digest.hex()}")
        dims = dims_from_material(entry.material)
        model_version = dims[1] if dims else ""
        evicted = False
        if verdict is Verdict.REJECTED and self._evict_rejected:
            # Hot first: even if the warm delete fails, this sidecar stops serving it.
            self._cache.hot.discard(key_digest)
            try:
                await self._cache.warm.delete_many([key_digest])
            except TierUnavailable as exc:
                raise Unavailable(f"could not evict the rejected entry: {exc}") from exc
            evicted = True
        given = reason or UNSPECIFIED_REASON
        label = given if given in self._reasons else OTHER_REASON
        stats = self._cache.stats
        # The entry was found: its version is one this fleet stored.
        stats.count_downstream(stats.admit(model_version), verdict.value, label)
        log.info(
            "downstream_outcome",
            digest=digest.hex(),
            model_version=model_version,
            verdict=verdict.value,
            reason=given,
            evicted=evicted,
        )
        return FeedbackResult(evicted, model_version)

    async def _find(self, digest: KeyDigest) -> Entry | None:
        """The live entry under digest: hot tier, else warm (verified against the digest)."""
        cache = self._cache
        now = cache.clock_ms()
        entry = cache.hot.get(digest, now)
        if entry is None:
            try:
                (value,) = await cache.warm.get_many([digest])
            except TierUnavailable as exc:
                raise Unavailable(f"warm tier unreachable: {exc}") from exc
            if value is None:
                return None
            try:
                entry = entries.decode_by_digest(value, digest, cache.freshness.keys)
            except EntryRejected as exc:
                cache.stats.count_rejected("", exc.reason)
                return None
            if entry.expires_at_ms <= now:
                return None
        dims = dims_from_material(entry.material)
        if dims is not None and cache.rules.is_dead(dims, entry.epoch):
            return None
        return entry
