"""HitStore in process memory, for a sidecar without Redis (lost on restart, like the
embedded warm tier)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from sidecar.keys import KeyDigest
from sidecar.prewarm.hits import HotRequest


@dataclass(slots=True)
class _Ranking:
    counts: dict[KeyDigest, int] = field(default_factory=dict)
    requests: dict[KeyDigest, tuple[bytes, int]] = field(default_factory=dict)
    expires_at_ms: int = 0


def _monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class EmbeddedHitStore:
    """HitStore in process memory: at most `max_versions` rankings (the least recently
    touched goes first), each of at most 1.25 x `max_per_version` digests."""

    def __init__(
        self,
        *,
        max_per_version: int,
        ttl_ms: int,
        max_versions: int = 16,
        clock_ms: Callable[[], int] = _monotonic_ms,
    ) -> None:
        self._max = max_per_version
        self._ttl_ms = ttl_ms
        self._max_versions = max_versions
        self._clock_ms = clock_ms
        self._versions: dict[str, _Ranking] = {}

    def _touch(self, model_version: str, now: int) -> _Ranking:
        self._expire(now)
        ranking = self._versions.pop(model_version, None) or _Ranking()
        self._versions[model_version] = ranking  # most recently touched last
        while len(self._versions) > self._max_versions:
            self._versions.pop(next(iter(self._versions)))
        ranking.expires_at_ms = now + self._ttl_ms
        return ranking

    async def merge(self, model_version: str, counts: Sequence[tuple[KeyDigest, int]]) -> None:
        """Add the counts, refresh the ranking's and the records' expiry, trim when over
        budget."""
        now = self._clock_ms()
        ranking = self._touch(model_version, now)
        for digest, n in counts:
            ranking.counts[digest] = ranking.counts.get(digest, 0) + n
            kept = ranking.requests.get(digest)
            if kept is not None and kept[1] > now:
                ranking.requests[digest] = (kept[0], now + self._ttl_ms)
        if len(ranking.counts) > self._max + self._max // 4:
            keep = sorted(ranking.counts.items(), key=lambda kv: kv[1], reverse=True)[: self._max]
            ranking.counts = dict(keep)
            # A cut digest keeps its record (it cannot be attached again before its next
            # Store) until it expires or the unranked bound drops it.
            self._bound_unranked(ranking)

    async def attach(
        self, model_version: str, digest: KeyDigest, request: bytes, ttl_ms: int
    ) -> None:
        """Keep the record; records of digests not ranked are bounded to
        2 x max_per_version (the oldest go first)."""
        now = self._clock_ms()
        ranking = self._touch(model_version, now)
        ranking.requests.pop(digest, None)
        ranking.requests[digest] = (request, now + min(ttl_ms, self._ttl_ms))  # newest last
        self._bound_unranked(ranking)

    def _bound_unranked(self, ranking: _Ranking) -> None:
        unranked = [d for d in ranking.requests if d not in ranking.counts]
        for d in unranked[: len(unranked) - 2 * self._max]:
            del ranking.requests[d]

    async def top(self, model_version: str, k: int) -> list[HotRequest]:
        """Most hit first; ties in digest order (deterministic)."""
        now = self._clock_ms()
        self._expire(now)
        ranking = self._versions.get(model_version)
        if ranking is None:
            return []
        ranked = sorted(ranking.counts.items(), key=lambda kv: (-kv[1], kv[0]))[:k]
        out = []
        for digest, hits in ranked:
            kept = ranking.requests.get(digest)
            request = kept[0] if kept is not None and kept[1] > now else None
            out.append(HotRequest(digest, hits, request))
        return out

    async def record(self, model_version: str, digest: KeyDigest) -> bytes | None:
        """The record while it lives (nothing here can be altered from outside)."""
        now = self._clock_ms()
        ranking = self._versions.get(model_version)
        kept = None if ranking is None else ranking.requests.get(digest)
        return kept[0] if kept is not None and kept[1] > now else None

    def _expire(self, now: int) -> None:
        for version in [v for v, r in self._versions.items() if r.expires_at_ms <= now]:
            del self._versions[version]
