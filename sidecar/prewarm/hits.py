"""Which requests are hot under each model version, for `Prewarm(from_version=...)`.

On the hit path, `HitRecorder.observe` samples hits (INFERCACHE_HIT_SAMPLE_RATE)
and, for a sampled hit of a tenant whose policy allows retaining inputs, hands
the replayable request to a HitStore in a background task. Nothing is recorded,
not even a count, for other tenants. Cost per hit: one random draw; per sampled
hit: a policy lookup, a JSON encoding and one store write off the request path
(at most `max_pending` in flight, further samples are dropped and counted).

A HitStore keeps per model version a ranking (sampled hit counts by key digest)
and each ranked request's replayable form, both expiring `ttl_ms` after their
last sampled hit; a ranking over 1.25 x `max_per_version` members is cut back to
its top `max_per_version`, deleting the dropped requests with it.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import structlog

from sidecar.errors import TierUnavailable
from sidecar.keys import KeyDigest, KeyRequest
from sidecar.prewarm import replay

if TYPE_CHECKING:
    from sidecar.cache import LookupQuery, LookupResult

log = structlog.get_logger("infercache.prewarm.hits")

# Larger requests are not recorded: every sampled hit rewrites the record.
MAX_RECORD_BYTES = 256 * 1024


@dataclass(frozen=True, slots=True)
class HotRequest:
    """One ranked request: its key digest under the recorded version, sampled hits,
    and its replayable form (None once that record expired)."""

    digest: KeyDigest
    hits: int
    request: bytes | None


class HitStore(Protocol):
    """Per-version hit rankings with their replayable requests.

    Methods raise TierUnavailable when the backend fails, and nothing else.
    """

    async def record(self, model_version: str, digest: KeyDigest, request: bytes) -> None:
        """Count one sampled hit of `digest` under `model_version` and keep its request."""
        ...

    async def top(self, model_version: str, k: int) -> list[HotRequest]:
        """The k most-hit requests of `model_version`, most hit first."""
        ...


@dataclass(slots=True)
class _Ranking:
    counts: dict[KeyDigest, int] = field(default_factory=dict)
    requests: dict[KeyDigest, tuple[bytes, int]] = field(default_factory=dict)
    expires_at_ms: int = 0


def _monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class EmbeddedHitStore:
    """HitStore in process memory (lost on restart, like the embedded warm tier)."""

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

    async def record(self, model_version: str, digest: KeyDigest, request: bytes) -> None:
        """Count, keep the request, refresh both expiries, trim when over budget."""
        now = self._clock_ms()
        self._expire(now)
        ranking = self._versions.pop(model_version, None) or _Ranking()
        self._versions[model_version] = ranking  # most recently touched last
        while len(self._versions) > self._max_versions:
            self._versions.pop(next(iter(self._versions)))
        ranking.counts[digest] = ranking.counts.get(digest, 0) + 1
        ranking.requests[digest] = (request, now + self._ttl_ms)
        ranking.expires_at_ms = now + self._ttl_ms
        if len(ranking.counts) > self._max + self._max // 4:
            keep = sorted(ranking.counts.items(), key=lambda kv: kv[1], reverse=True)[: self._max]
            ranking.counts = dict(keep)
            ranking.requests = {d: r for d, r in ranking.requests.items() if d in ranking.counts}

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

    def _expire(self, now: int) -> None:
        for version in [v for v, r in self._versions.items() if r.expires_at_ms <= now]:
            del self._versions[version]


class HitRecorder:
    """Samples hits on the lookup path and records the retainable ones in the background."""

    def __init__(
        self,
        store: HitStore,
        retain_inputs: Callable[[str], bool],
        *,
        sample_rate: float,
        max_pending: int = 64,
        rng: Callable[[], float] = random.random,
    ) -> None:
        self.store = store
        self._retain_inputs = retain_inputs
        self._rate = sample_rate
        self._max_pending = max_pending
        self._rng = rng
        self._pending: set[asyncio.Task[None]] = set()
        self.recorded = 0
        self.not_retained = 0
        self.dropped = 0
        self.failed = 0

    def observe(self, queries: Sequence[LookupQuery], results: Sequence[LookupResult]) -> None:
        """Consider every HIT among `results` (called once per lookup or batch)."""
        from sidecar.cache import Outcome

        rate, rng = self._rate, self._rng
        for q, r in zip(queries, results, strict=True):
            if r.outcome is Outcome.HIT and q.source is not None and rng() < rate:
                self._sampled(q.key.tenant, q.key.model_version, q.key.digest, q.source)

    def _sampled(
        self, tenant: str, model_version: str, digest: KeyDigest, source: KeyRequest
    ) -> None:
        if not self._retain_inputs(tenant):
            # The tenant's inputs must not be kept: not even a count is written.
            self.not_retained += 1
            return
        if not replay.replayable(source) or len(self._pending) >= self._max_pending:
            self.dropped += 1
            return
        data = replay.encode(source)
        if len(data) > MAX_RECORD_BYTES:
            self.dropped += 1
            return
        task = asyncio.get_running_loop().create_task(self._write(model_version, digest, data))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _write(self, model_version: str, digest: KeyDigest, data: bytes) -> None:
        try:
            await self.store.record(model_version, digest, data)
            self.recorded += 1
        except TierUnavailable as exc:
            self.failed += 1
            log.debug("hit_record_failed", error=str(exc))

    async def drain(self) -> None:
        """Wait for the writes in flight (shutdown, tests)."""
        while self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)

    def snapshot(self) -> dict[str, int]:
        """Counters by name."""
        return {
            "hit_records.recorded": self.recorded,
            "hit_records.not_retained": self.not_retained,
            "hit_records.dropped": self.dropped,
            "hit_records.failed": self.failed,
        }
