"""Recording hot requests for prewarm: embedded ranking, attached records, hit counting,
merging and retention."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from sidecar.errors import TierUnavailable
from sidecar.keys import InputKind, KeyDigest, KeyRequest, build_key
from sidecar.policy.cacheability import RequestTraits
from sidecar.prewarm import records
from sidecar.prewarm.embedded_hits import EmbeddedHitStore
from sidecar.prewarm.hits import MAX_RECORD_BYTES, HitRecorder, HotRequest
from sidecar.prewarm.progress import ItemOutcome, ItemReport, RunState, Tally
from sidecar.prewarm.records import HitRecord, ReplayRequest
from sidecar.results.types import LookupQuery, LookupResult, Outcome
from sidecar.wire.openai.routes import COMPLETIONS_PATH


def req(text: str = "q", tenant: str = "acme", **kw: object) -> KeyRequest:
    return KeyRequest(
        tenant=tenant,
        model_version="fp1-v1",
        prompt_version="p",
        input=text,
        input_kind=InputKind.TEXT,
        **kw,  # type: ignore[arg-type]
    )


async def test_embedded_store_ranks_trims_and_expires() -> None:
    """Most hit first; over 1.25 x budget (a sixth digest) it keeps the top 4 (the cut
    digest 1 keeps its record: only a Store attaches one); everything expires with the TTL."""
    now = [0]
    store = EmbeddedHitStore(max_per_version=4, ttl_ms=1000, clock_ms=lambda: now[0])
    for i in range(6):
        await store.attach("v1", KeyDigest(bytes([i]) * 32), b"r%d" % i, 1000)
        await store.merge("v1", [(KeyDigest(bytes([i]) * 32), i + 1)])
    top = await store.top("v1", 10)
    assert [(t.digest[0], t.hits) for t in top] == [(5, 6), (4, 5), (3, 4), (2, 3)]
    assert top[0] == HotRequest(KeyDigest(bytes([5]) * 32), 6, b"r5")
    assert await store.top("v2", 10) == []
    now[0] = 1000
    assert await store.top("v1", 10) == []


class FakeStore:
    """Records what the recorder writes: counts (request None) and attached records."""

    def __init__(self) -> None:
        self.records: list[tuple[str, bytes | None]] = []
        self.counts: dict[tuple[str, KeyDigest], int] = {}
        self.merges: list[int] = []

    async def merge(self, model_version: str, counts: Sequence[tuple[KeyDigest, int]]) -> None:
        self.merges.append(len(counts))
        for digest, n in counts:
            self.records.append((model_version, None))
            self.counts[model_version, digest] = self.counts.get((model_version, digest), 0) + n

    async def attach(
        self, model_version: str, digest: KeyDigest, request: bytes, ttl_ms: int
    ) -> None:
        self.records.append((model_version, request))

    async def top(self, model_version: str, k: int) -> list[HotRequest]:
        return []

    async def record(self, model_version: str, digest: KeyDigest) -> bytes | None:
        return None


def _hit(r: KeyRequest) -> tuple[LookupQuery, LookupResult]:
    key = build_key(r)
    return LookupQuery(key, source=r), LookupResult(Outcome.HIT, key.digest)


def _record(text: str) -> HitRecord:
    body = ('{"model":"m","prompt":"' + text + '"}').encode()
    return HitRecord(text.encode(), ReplayRequest(COMPLETIONS_PATH, "application/json", body))


async def test_recorder_keeps_only_retaining_tenants_and_only_hits() -> None:
    """A tenant whose policy forbids retention gets nothing written, neither its attached
    request nor a count; misses are not traffic."""
    store = FakeStore()
    recorder = HitRecorder(store, lambda tenant: tenant == "acme", sketch_size=16)
    allowed, forbidden = _hit(req("a")), _hit(req("secret text", tenant="private"))
    missed = (allowed[0], LookupResult(Outcome.MISS, allowed[0].key.digest))
    pairs = [allowed, forbidden, missed]
    recorder.observe([q for q, _ in pairs], [r for _, r in pairs])
    k = allowed[0].key
    recorder.attach("acme", k.model_version, k.digest, _record("a"), ttl_s=60)
    recorder.attach("private", "fp1-v1", forbidden[0].key.digest, _record("secret text"), ttl_s=60)
    await recorder.merge()
    assert store.records[1] == ("fp1-v1", None)
    assert [records.decode(d).replay.body for _, d in store.records if d] == [
        b'{"model":"m","prompt":"a"}'
    ]
    assert len(store.records) == 2
    assert recorder.not_retained == 2
    assert all(b"secret" not in (data or b"") for _, data in store.records)
    assert (recorder.counted, recorder.merged, recorder.attached) == (1, 1, 1)


async def test_recorder_never_keeps_a_request_declared_private() -> None:
    """A retaining tenant's request that declares private data is neither counted nor
    attached."""
    store = FakeStore()
    recorder = HitRecorder(store, lambda tenant: True, sketch_size=16)
    public = _hit(req("public question"))
    q, r = _hit(req("my medical record"))
    private = (q._replace(traits=RequestTraits(private_data=True)), r)
    pairs = [public, private]
    recorder.observe([q for q, _ in pairs], [r for _, r in pairs])
    recorder.attach(
        "acme", "fp1-v1", q.key.digest, _record("my medical record"), ttl_s=60, private=True
    )
    await recorder.merge()
    assert store.records == [("fp1-v1", None)]


async def test_attached_records_over_the_size_cap_are_dropped() -> None:
    """A record larger than MAX_RECORD_BYTES is not written (every hit keeps it alive)."""
    store = FakeStore()
    recorder = HitRecorder(store, lambda tenant: True, sketch_size=16)
    huge = HitRecord(b"k" * (MAX_RECORD_BYTES + 1), _record("x").replay)
    recorder.attach("acme", "fp1-v1", KeyDigest(bytes(32)), huge, ttl_s=60)
    await recorder.drain()
    assert (store.records, recorder.dropped) == ([], 1)


async def test_embedded_store_keeps_records_of_unhit_digests_bounded() -> None:
    """A ranked digest without a record reports None (its Store attached no request);
    records not ranked are bounded to 2 x max_per_version, the oldest dropped first."""
    store = EmbeddedHitStore(max_per_version=4, ttl_ms=10_000, clock_ms=lambda: 0)
    await store.merge("v1", [(KeyDigest(b"\x01" * 32), 1)])
    (only,) = await store.top("v1", 10)
    assert only.request is None
    for i in range(2, 12):  # ten records, none ranked: the two oldest go
        await store.attach("v1", KeyDigest(bytes([i]) * 32), b"r%d" % i, 10_000)
    await store.merge("v1", [(KeyDigest(bytes([i]) * 32), 1) for i in (2, 3, 11)])
    kept = {t.digest[0]: t.request for t in await store.top("v1", 10)}
    assert kept == {1: None, 2: None, 3: None, 11: b"r11"}


async def test_recorder_counts_every_hit_and_merges_in_bounded_batches() -> None:
    """Every hit is counted (no sampling): 7 hits of one key and 1 of 300 others merge
    as exact counts, in batches of at most merge_batch digests; a merge with nothing
    counted writes nothing."""
    store = FakeStore()
    recorder = HitRecorder(store, lambda t: True, sketch_size=1000, merge_batch=128)
    q, r = _hit(req("popular"))
    recorder.observe([q] * 7, [r] * 7)
    others = [_hit(req(f"q{i}")) for i in range(300)]
    recorder.observe([o for o, _ in others], [h for _, h in others])
    assert await recorder.merge()
    assert store.counts[q.key.model_version, q.key.digest] == 7
    assert sum(store.counts.values()) == 307
    assert sorted(store.merges) == [45, 128, 128]
    assert await recorder.merge()
    assert len(store.merges) == 3


async def test_a_failed_or_cancelled_merge_keeps_its_counts_for_the_next() -> None:
    """Counts a failing store did not take, or a merge cancelled midway did not write,
    are merged by the next merge: nothing is lost or counted twice."""

    class FlakyStore(FakeStore):
        def __init__(self) -> None:
            super().__init__()
            self.fail = True
            self.block: asyncio.Event | None = None

        async def merge(self, model_version: str, counts: Sequence[tuple[KeyDigest, int]]) -> None:
            if self.block is not None:
                await self.block.wait()
            if self.fail:
                raise TierUnavailable("redis hit records: down")
            await super().merge(model_version, counts)

    store = FlakyStore()
    recorder = HitRecorder(store, lambda t: True, sketch_size=64, merge_batch=2)
    hits = [_hit(req(f"q{i}")) for i in range(5)]
    for n, (q, r) in enumerate(hits, start=1):
        recorder.observe([q] * n, [r] * n)
    assert not await recorder.merge()
    assert recorder.merge_failed == 1
    store.fail, store.block = False, asyncio.Event()
    merging = asyncio.create_task(recorder.merge())
    await asyncio.sleep(0)
    merging.cancel()
    await asyncio.gather(merging, return_exceptions=True)
    store.block = None
    assert await recorder.merge()
    assert {d: n for (_, d), n in store.counts.items()} == {
        q.key.digest: n for n, (q, _) in enumerate(hits, start=1)
    }


async def test_close_merges_the_last_counts_and_writes_queued_records() -> None:
    """Shutdown writes what is queued and merges what was counted since the last merge."""
    store = FakeStore()
    recorder = HitRecorder(store, lambda t: True, sketch_size=16)
    q, r = _hit(req("a"))
    recorder.attach("acme", q.key.model_version, q.key.digest, _record("a"), ttl_s=60)
    recorder.observe([q, q], [r, r])
    await recorder.close(timeout_s=5)
    assert store.counts == {(q.key.model_version, q.key.digest): 2}
    assert recorder.attached == 1
    assert recorder.lost_at_close == 0


async def test_close_gives_up_on_a_store_that_hangs() -> None:
    """A store that never answers holds the shutdown for at most timeout_s; what it did
    not take is counted lost."""

    class HangingStore(FakeStore):
        async def merge(self, model_version: str, counts: Sequence[tuple[KeyDigest, int]]) -> None:
            await asyncio.Event().wait()

    recorder = HitRecorder(HangingStore(), lambda t: True, sketch_size=16)
    q, r = _hit(req("a"))
    recorder.observe([q] * 3, [r] * 3)
    await recorder.close(timeout_s=0.05)
    assert recorder.lost_at_close == 3


async def test_attached_records_are_bounded_by_max_pending() -> None:
    """Past max_pending queued records further ones are dropped, not written."""
    blocked = asyncio.Event()

    class SlowStore(FakeStore):
        async def attach(
            self, model_version: str, digest: KeyDigest, request: bytes, ttl_ms: int
        ) -> None:
            await blocked.wait()
            await super().attach(model_version, digest, request, ttl_ms)

    slow_store = SlowStore()
    slow = HitRecorder(slow_store, lambda t: True, sketch_size=16, max_pending=2)
    for _ in range(3):
        slow.attach("acme", "fp1-v1", KeyDigest(bytes(32)), _record("a"), ttl_s=60)
    await asyncio.sleep(0)  # the writer takes the first record and blocks on it
    for _ in range(3):
        slow.attach("acme", "fp1-v1", KeyDigest(bytes(32)), _record("a"), ttl_s=60)
    # 2 queued then 1 dropped; the writer took 1, so 1 more fits and 2 are dropped.
    assert slow.dropped == 3
    blocked.set()
    await slow.drain()
    assert len(slow_store.records) == 3


def test_tally_eta_and_reports() -> None:
    """ETA extrapolates the elapsed time; reports are handed out once."""
    t = Tally(total=4)
    t.add(None)
    t.add(ItemReport(1, ItemOutcome.FAILED, "upstream_timeout"))
    p = t.snapshot(RunState.RUNNING, elapsed_ms=1000)
    assert (p.done, p.stored, p.failed, p.eta_ms) == (2, 1, 1, 1000)
    assert [i.reason for i in p.items] == ["upstream_timeout"]
    assert t.snapshot(RunState.RUNNING, elapsed_ms=1000).items == ()


async def test_embedded_record_lives_as_long_as_attached() -> None:
    """The embedded store's record() returns a digest's record until it expires."""
    now = [0]
    store = EmbeddedHitStore(max_per_version=4, ttl_ms=10_000, clock_ms=lambda: now[0])
    await store.attach("v1", KeyDigest(bytes([1]) * 32), b"r1", 500)
    assert await store.record("v1", KeyDigest(bytes([1]) * 32)) == b"r1"
    assert await store.record("v1", KeyDigest(bytes([2]) * 32)) is None
    assert await store.record("v2", KeyDigest(bytes([1]) * 32)) is None
    now[0] = 500
    assert await store.record("v1", KeyDigest(bytes([1]) * 32)) is None
