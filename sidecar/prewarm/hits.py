"""Which requests are hot under each model version, for `Prewarm(from_version=...)`.

A Store that attaches its model-server request (`HitRecorder.attach`) queues a
record of the key and that request; on the hit path, `HitRecorder.observe` counts
every hit in memory, in a bounded Space-Saving sketch (prewarm/sketch.py), and the
counts are merged into the shared ranking every INFERCACHE_HIT_MERGE_INTERVAL_MS,
before this pod's prewarm reads the ranking, and at shutdown. Both only for tenants
whose policy allows retaining inputs: nothing is recorded, not even a count, for
other tenants. Cost per hit: a policy lookup and a dict update; the store writes
happen off the request path (attached records: at most `max_pending` queued, further
ones are dropped and counted; counts: at most the sketch's size per merge, in
batches of `merge_batch` digests).

Why a sketch and not sampling: at 1% a canary's 60,000 hits were 600 samples, so a
top-1000 could name at most 600 requests (a real run replayed 93). The sketch counts
every hit exactly while at most `sketch_size` distinct requests are hit between two
merges, and beyond that keeps every request hit more than N / sketch_size times.
What is merged is each digest's guaranteed count (count - error): the ranking never
holds more hits than happened.

A HitStore keeps per model version a ranking (hit counts by key digest) and each
attached record, both expiring `ttl_ms` after their last counted hit (a record not
yet hit lives as long as its stored result); a ranking over 1.25 x `max_per_version`
members is cut back to its top `max_per_version` (the cut digests' records stay until
they expire). A ranked digest without a record (its Store attached no request) is
reported, and prewarm skips it as not_replayable.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import structlog

from sidecar.errors import TierUnavailable
from sidecar.keys import KeyDigest
from sidecar.prewarm import records
from sidecar.prewarm.sketch import SpaceSaving
from sidecar.results.types import LookupQuery, LookupResult, Outcome

log = structlog.get_logger("infercache.prewarm.hits")

MAX_RECORD_BYTES = 4 * records.MAX_REPLAY_BYTES
"""Larger records are not kept (every counted hit keeps a record alive). A record holds
the request body as JSON text (escapes lengthen it) and the key's wire form in base64,
whose input is most of the body again: a body at MAX_REPLAY_BYTES, the limit a Store or
the gateway attaches, makes a record of ~2.3x that, and must fit."""
MERGE_BATCH = 256
"""Digests per HitStore.merge call: bounds one Redis script's work."""
CLOSE_TIMEOUT_S = 5.0
"""Longest a shutdown waits to merge the last counts (a slow Redis must not hold it)."""


@dataclass(frozen=True, slots=True)
class HotRequest:
    """One ranked request: its key digest under the recorded version, its counted hits,
    and its record (None when its Store attached no request, or the record expired)."""

    digest: KeyDigest
    hits: int
    request: bytes | None


class HitStore(Protocol):
    """Per-version hit rankings with the records attached to their digests.

    Methods raise TierUnavailable when the backend fails, and nothing else.
    """

    async def merge(self, model_version: str, counts: Sequence[tuple[KeyDigest, int]]) -> None:
        """Add `counts` (digest, hits >= 1) to `model_version`'s ranking, refresh the
        ranking's and those digests' records' expiry, trim when over budget; atomic
        per call (a failed call added nothing)."""
        ...

    async def attach(
        self, model_version: str, digest: KeyDigest, request: bytes, ttl_ms: int
    ) -> None:
        """Keep the record (records.encode) of `digest` under `model_version` for
        min(`ttl_ms`, the record TTL): a counted hit extends it to the record TTL."""
        ...

    async def top(self, model_version: str, k: int) -> list[HotRequest]:
        """The k most-hit requests of `model_version`, most hit first."""
        ...

    async def record(self, model_version: str, digest: KeyDigest) -> bytes | None:
        """The record attached to `digest` under `model_version` (records.encode), read
        through the same check as `top` (a record that fails it reads as absent); None
        when there is none."""
        ...


class HitRecorder:
    """Keeps attached requests and counts hits, writing the retainable ones in the
    background.

    A LookupObserver: the composition root passes it to ResultCache (CacheWatchers.observers),
    runs `run_merge_loop`, and closes it at shutdown; the Store handlers (and the
    gateway) call `attach`.

    Records wait in a bounded queue (at most `max_pending`, each at most
    MAX_RECORD_BYTES) for one writer task, which exists only while the queue is not
    empty. Counts wait in the sketch (at most `sketch_size` digests) for the next merge.
    """

    def __init__(
        self,
        store: HitStore,
        retain_inputs: Callable[[str], bool],
        *,
        sketch_size: int,
        max_pending: int = 64,
        merge_batch: int = MERGE_BATCH,
    ) -> None:
        self.store = store
        self._retain_inputs = retain_inputs
        self._max_pending = max_pending
        self._merge_batch = merge_batch
        self.sketch: SpaceSaving[tuple[str, KeyDigest]] = SpaceSaving(sketch_size)
        # (model_version, digest, record, ttl_ms)
        self._queue: deque[tuple[str, KeyDigest, bytes, int]] = deque()
        self._writer: asyncio.Task[None] | None = None
        self._merging = asyncio.Lock()
        self.counted = 0
        self.merged = 0
        self.merge_failed = 0
        self.attached = 0
        self.not_retained = 0
        self.dropped = 0
        self.failed = 0
        self.lost_at_close = 0

    def observe(self, queries: Sequence[LookupQuery], results: Sequence[LookupResult]) -> None:
        """Count every HIT of a retaining tenant (a request declared private is never
        counted, whatever the tenant allows)."""
        add = self.sketch.add
        # The policy is asked once per run of one tenant's keys (a call is mostly one
        # tenant's); it may be reloaded between calls, never inside one.
        tenant: str | None = None
        retained = False
        counted = refused = 0
        for q, r in zip(queries, results, strict=True):
            if r.outcome is not Outcome.HIT or q.traits.private_data:
                continue
            key = q.key
            if key.tenant != tenant:
                tenant = key.tenant
                retained = self._retain_inputs(tenant)
            if retained:
                add((key.model_version, key.digest))
                counted += 1
            else:
                refused += 1  # the tenant's inputs must not be kept: not even a count
        self.counted += counted
        self.not_retained += refused

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
        Kept as long as the stored result (`ttl_s`) unless a counted hit extends it."""
        if private or not self._retained(tenant):
            return
        data = records.encode(record)
        if len(data) > MAX_RECORD_BYTES:
            self.dropped += 1
            return
        if len(self._queue) >= self._max_pending:
            self.dropped += 1
            return
        self._queue.append((model_version, digest, data, ttl_s * 1000))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.get_running_loop().create_task(self._write_queued())

    def retains(self, tenant: str) -> bool:
        """May `tenant`'s inputs be kept? (A refusal is counted in `not_retained`.) Asked
        before a record is built: most tenants do not retain, and building one costs."""
        return self._retained(tenant)

    def _retained(self, tenant: str) -> bool:
        if self._retain_inputs(tenant):
            return True
        # The tenant's inputs must not be kept: not even a count is written.
        self.not_retained += 1
        return False

    async def _write_queued(self) -> None:
        while self._queue:
            model_version, digest, data, ttl_ms = self._queue.popleft()
            try:
                await self.store.attach(model_version, digest, data, ttl_ms)
                self.attached += 1
            except TierUnavailable as exc:
                self.failed += 1
                log.debug("hit_record_failed", error=str(exc))

    async def merge(self) -> bool:
        """Merge the counts since the last merge into the store; True when all went in.

        Counts a failed or cancelled merge did not write go back into the sketch for
        the next one (nothing is lost unless the sketch must evict them). Records queued
        before are written first, so a merged hit refreshes its record's expiry."""
        async with self._merging:
            await self.drain()
            taken = self.sketch.take()
            by_version: dict[str, list[tuple[KeyDigest, int]]] = {}
            for c in taken:
                if c.guaranteed > 0:
                    by_version.setdefault(c.item[0], []).append((c.item[1], c.guaranteed))
            batches = [
                (version, counts[i : i + self._merge_batch])
                for version, counts in by_version.items()
                for i in range(0, len(counts), self._merge_batch)
            ]
            done = 0
            try:
                for version, batch in batches:
                    await self.store.merge(version, batch)
                    done += 1
                    self.merged += sum(n for _, n in batch)
            except TierUnavailable as exc:
                self.merge_failed += 1
                log.warning("hit_merge_failed", error=str(exc), batches_left=len(batches) - done)
                return False
            finally:
                for version, batch in batches[done:]:
                    for digest, n in batch:
                        self.sketch.add((version, digest), n)
            return True

    async def run_merge_loop(self, interval_s: float) -> None:
        """Merge every `interval_s` seconds until cancelled (the server's background loop)."""
        while True:
            await asyncio.sleep(interval_s)
            await self.merge()

    async def drain(self) -> None:
        """Wait until every queued record is written."""
        while self._writer is not None and not self._writer.done():
            await asyncio.gather(self._writer, return_exceptions=True)

    async def close(self, timeout_s: float = CLOSE_TIMEOUT_S) -> None:
        """Write what is queued and merge the last counts, for at most `timeout_s` (a
        slow store must not hold the shutdown); what did not go in is counted lost."""
        try:
            async with asyncio.timeout(timeout_s):
                if not await self.merge():
                    await self.merge()  # one more try: the Redis circuit may have reset
        except TimeoutError:
            pass
        self.lost_at_close = sum(c.guaranteed for c in self.sketch.take()) + len(self._queue)
        if self.lost_at_close:
            log.warning("hit_counts_lost_at_close", hits_and_records=self.lost_at_close)
        self._queue.clear()
        if self._writer is not None:
            self._writer.cancel()
            await asyncio.gather(self._writer, return_exceptions=True)

    def snapshot(self) -> dict[str, int]:
        """Counters by name."""
        return {
            "hit_records.counted": self.counted,
            "hit_records.merged": self.merged,
            "hit_records.merge_failed": self.merge_failed,
            "hit_records.pending_digests": len(self.sketch),
            "hit_records.attached": self.attached,
            "hit_records.not_retained": self.not_retained,
            "hit_records.dropped": self.dropped,
            "hit_records.failed": self.failed,
        }
