"""Which requests are hot under each model version, for `Prewarm(from_version=...)`.

A Store that attaches its model-server request (`HitRecorder.attach`) queues a
record of the key and that request; on the hit path, `HitRecorder.observe` samples
hits (INFERCACHE_HIT_SAMPLE_RATE) and queues a count. Both only for tenants whose
policy allows retaining inputs: nothing is recorded, not even a count, for other
tenants. Cost per lookup call: a subtraction (lookups are sampled with geometric
gaps); per sampled hit: a policy lookup and a queue append; the store writes
happen off the request path (at most `max_pending` queued, further ones are
dropped and counted).

A HitStore keeps per model version a ranking (sampled hit counts by key digest)
and each attached record, both expiring `ttl_ms` after their last sampled hit (a
record not yet hit lives as long as its stored result); a ranking over 1.25 x
`max_per_version` members is cut back to its top `max_per_version` (the cut
digests' records stay until they expire). A ranked digest without a record (its
Store attached no request) is reported, and prewarm skips it as not_replayable.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import structlog

from sidecar.errors import TierUnavailable
from sidecar.keys import KeyDigest
from sidecar.prewarm import records
from sidecar.results.types import LookupQuery, LookupResult, Outcome

log = structlog.get_logger("infercache.prewarm.hits")

# Larger requests are not recorded: every sampled hit rewrites the record.
MAX_RECORD_BYTES = 256 * 1024


@dataclass(frozen=True, slots=True)
class HotRequest:
    """One ranked request: its key digest under the recorded version, sampled hits,
    and its record (None when its Store attached no request, or the record expired)."""

    digest: KeyDigest
    hits: int
    request: bytes | None


class HitStore(Protocol):
    """Per-version hit rankings with the records attached to their digests.

    Methods raise TierUnavailable when the backend fails, and nothing else.
    """

    async def record(self, model_version: str, digest: KeyDigest) -> None:
        """Count one sampled hit of `digest` under `model_version`; refresh its record."""
        ...

    async def attach(
        self, model_version: str, digest: KeyDigest, request: bytes, ttl_ms: int
    ) -> None:
        """Keep the record (records.encode) of `digest` under `model_version` for
        min(`ttl_ms`, the record TTL): a sampled hit extends it to the record TTL."""
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

    def _touch(self, model_version: str, now: int) -> _Ranking:
        self._expire(now)
        ranking = self._versions.pop(model_version, None) or _Ranking()
        self._versions[model_version] = ranking  # most recently touched last
        while len(self._versions) > self._max_versions:
            self._versions.pop(next(iter(self._versions)))
        ranking.expires_at_ms = now + self._ttl_ms
        return ranking

    async def record(self, model_version: str, digest: KeyDigest) -> None:
        """Count, refresh the ranking's and the record's expiry, trim when over budget."""
        now = self._clock_ms()
        ranking = self._touch(model_version, now)
        ranking.counts[digest] = ranking.counts.get(digest, 0) + 1
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

    def _expire(self, now: int) -> None:
        for version in [v for v, r in self._versions.items() if r.expires_at_ms <= now]:
            del self._versions[version]


class HitRecorder:
    """Keeps attached requests and samples hits, recording the retainable ones in the
    background.

    A LookupObserver: the composition root passes it to ResultCache(observers=...),
    and the Store handlers call `attach`.

    Records and counts wait in a bounded queue (at most `max_pending`, each record at
    most MAX_RECORD_BYTES) for one writer task, which exists only while the queue is
    not empty: a sample costs the hit path a policy check and an append.
    """

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
        # (model_version, digest, record or None for a sampled hit's count)
        self._queue: deque[tuple[str, KeyDigest, tuple[bytes, int] | None]] = deque()
        self._writer: asyncio.Task[None] | None = None
        # Lookups to let pass before the next sampled one (see observe).
        self._countdown = self._gap() - 1
        self.recorded = 0
        self.attached = 0
        self.not_retained = 0
        self.dropped = 0
        self.failed = 0

    def _gap(self) -> int:
        """Lookups from one sample to the next: geometric with mean 1 / rate (>= 1)."""
        if self._rate >= 1.0:
            return 1
        return 1 + int(math.log(1.0 - self._rng()) / math.log(1.0 - self._rate))

    def observe(self, queries: Sequence[LookupQuery], results: Sequence[LookupResult]) -> None:
        """Consider the lookups of one call; a sampled one is recorded if it is a HIT.

        Sampling every lookup at `rate` with geometric gaps (one random draw per
        sample, not per lookup) keeps the common case to one subtraction per call;
        a hit is still sampled with probability `rate`.
        """
        n = len(results)
        if self._countdown >= n:
            self._countdown -= n
            return
        i = self._countdown
        while i < n:
            q = queries[i]
            # A request declared private is never kept, whatever the tenant allows.
            hit = results[i].outcome is Outcome.HIT and not q.traits.private_data
            if hit and self._retained(q.key.tenant):
                self._enqueue(q.key.model_version, q.key.digest, None)
            i += self._gap()
        self._countdown = i - n

    def attach(
        self,
        tenant: str,
        model_version: str,
        digest: KeyDigest,
        record: records.HitRecord,
        *,
        ttl_s: int,
        private: bool = False,
    ) -> None:
        """Keep the model-server request a Store attached (a stored result's only way
        to be prewarmed later): for retaining tenants, never for private requests.
        Kept as long as the stored result (`ttl_s`) unless a sampled hit extends it."""
        if private or not self._retained(tenant):
            return
        data = records.encode(record)
        if len(data) > MAX_RECORD_BYTES:
            self.dropped += 1
            return
        self._enqueue(model_version, digest, (data, ttl_s * 1000))

    def _retained(self, tenant: str) -> bool:
        if self._retain_inputs(tenant):
            return True
        # The tenant's inputs must not be kept: not even a count is written.
        self.not_retained += 1
        return False

    def _enqueue(
        self, model_version: str, digest: KeyDigest, data: tuple[bytes, int] | None
    ) -> None:
        if len(self._queue) >= self._max_pending:
            self.dropped += 1
            return
        self._queue.append((model_version, digest, data))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.get_running_loop().create_task(self._write_queued())

    async def _write_queued(self) -> None:
        while self._queue:
            model_version, digest, data = self._queue.popleft()
            try:
                if data is None:
                    await self.store.record(model_version, digest)
                    self.recorded += 1
                else:
                    await self.store.attach(model_version, digest, *data)
                    self.attached += 1
            except TierUnavailable as exc:
                self.failed += 1
                log.debug("hit_record_failed", error=str(exc))

    async def drain(self) -> None:
        """Wait until every queued record is written (tests, benchmarks)."""
        while self._writer is not None and not self._writer.done():
            await asyncio.gather(self._writer, return_exceptions=True)

    async def close(self) -> None:
        """Drop what is queued and stop the writer (shutdown must not wait on a slow store)."""
        self._queue.clear()
        if self._writer is not None:
            self._writer.cancel()
            await asyncio.gather(self._writer, return_exceptions=True)

    def snapshot(self) -> dict[str, int]:
        """Counters by name."""
        return {
            "hit_records.recorded": self.recorded,
            "hit_records.attached": self.attached,
            "hit_records.not_retained": self.not_retained,
            "hit_records.dropped": self.dropped,
            "hit_records.failed": self.failed,
        }
