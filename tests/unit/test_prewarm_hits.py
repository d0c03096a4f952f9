"""Recording hot requests for prewarm: embedded ranking, attached records, sampling and
retention."""

from __future__ import annotations

import asyncio

from sidecar.keys import InputKind, KeyDigest, KeyRequest, build_key
from sidecar.policy.cacheability import RequestTraits
from sidecar.prewarm import records
from sidecar.prewarm.hits import MAX_RECORD_BYTES, EmbeddedHitStore, HitRecorder, HotRequest
from sidecar.prewarm.progress import ItemOutcome, ItemReport, RunState, Tally
from sidecar.prewarm.records import COMPLETIONS_PATH, HitRecord, ReplayRequest
from sidecar.results.types import LookupQuery, LookupResult, Outcome


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
    """Most hit first; over 1.25 x budget it keeps the top 4 (the newcomer, with 1 hit,
    is cut and counts again from 0); everything expires with the TTL."""
    now = [0]
    store = EmbeddedHitStore(max_per_version=4, ttl_ms=1000, clock_ms=lambda: now[0])
    for i in range(6):
        await store.attach("v1", KeyDigest(bytes([i]) * 32), b"r%d" % i, 1000)
        for _ in range(i + 1):
            await store.record("v1", KeyDigest(bytes([i]) * 32))
    top = await store.top("v1", 10)
    assert [(t.digest[0], t.hits) for t in top] == [(4, 5), (5, 5), (3, 4), (2, 3), (1, 2)]
    assert top[1] == HotRequest(KeyDigest(bytes([5]) * 32), 5, b"r5")
    assert await store.top("v2", 10) == []
    now[0] = 1000
    assert await store.top("v1", 10) == []


class FakeStore:
    """Records what the recorder writes: counts (request None) and attached records."""

    def __init__(self) -> None:
        self.records: list[tuple[str, bytes | None]] = []

    async def record(self, model_version: str, digest: KeyDigest) -> None:
        self.records.append((model_version, None))

    async def attach(
        self, model_version: str, digest: KeyDigest, request: bytes, ttl_ms: int
    ) -> None:
        self.records.append((model_version, request))

    async def top(self, model_version: str, k: int) -> list[HotRequest]:
        return []


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
    recorder = HitRecorder(store, lambda tenant: tenant == "acme", sample_rate=1.0)
    allowed, forbidden = _hit(req("a")), _hit(req("secret text", tenant="private"))
    missed = (allowed[0], LookupResult(Outcome.MISS, allowed[0].key.digest))
    pairs = [allowed, forbidden, missed]
    recorder.observe([q for q, _ in pairs], [r for _, r in pairs])
    k = allowed[0].key
    recorder.attach("acme", k.model_version, k.digest, _record("a"), ttl_s=60)
    recorder.attach("private", "fp1-v1", forbidden[0].key.digest, _record("secret text"), ttl_s=60)
    await recorder.drain()
    assert store.records[0] == ("fp1-v1", None)
    assert [records.decode(d).replay.body for _, d in store.records[1:] if d] == [
        b'{"model":"m","prompt":"a"}'
    ]
    assert len(store.records) == 2
    assert recorder.not_retained == 2
    assert all(b"secret" not in (data or b"") for _, data in store.records)
    assert (recorder.recorded, recorder.attached) == (1, 1)


async def test_recorder_never_keeps_a_request_declared_private() -> None:
    """A retaining tenant's request that declares private data is neither counted nor
    attached."""
    store = FakeStore()
    recorder = HitRecorder(store, lambda tenant: True, sample_rate=1.0)
    public = _hit(req("public question"))
    q, r = _hit(req("my medical record"))
    private = (q._replace(traits=RequestTraits(private_data=True)), r)
    pairs = [public, private]
    recorder.observe([q for q, _ in pairs], [r for _, r in pairs])
    recorder.attach(
        "acme", "fp1-v1", q.key.digest, _record("my medical record"), ttl_s=60, private=True
    )
    await recorder.drain()
    assert store.records == [("fp1-v1", None)]


async def test_attached_records_over_the_size_cap_are_dropped() -> None:
    """A record larger than MAX_RECORD_BYTES is not written (every hit keeps it alive)."""
    store = FakeStore()
    recorder = HitRecorder(store, lambda tenant: True, sample_rate=1.0)
    huge = HitRecord(b"k" * (MAX_RECORD_BYTES + 1), _record("x").replay)
    recorder.attach("acme", "fp1-v1", KeyDigest(bytes(32)), huge, ttl_s=60)
    await recorder.drain()
    assert (store.records, recorder.dropped) == ([], 1)


async def test_embedded_store_keeps_records_of_unhit_digests_bounded() -> None:
    """A ranked digest without a record reports None (its Store attached no request);
    records not ranked are bounded to 2 x max_per_version, the oldest dropped first."""
    store = EmbeddedHitStore(max_per_version=4, ttl_ms=10_000, clock_ms=lambda: 0)
    await store.record("v1", KeyDigest(b"\x01" * 32))
    (only,) = await store.top("v1", 10)
    assert only.request is None
    for i in range(2, 12):  # ten records, none ranked: the two oldest go
        await store.attach("v1", KeyDigest(bytes([i]) * 32), b"r%d" % i, 10_000)
    for i in (2, 3, 11):
        await store.record("v1", KeyDigest(bytes([i]) * 32))
    kept = {t.digest[0]: t.request for t in await store.top("v1", 10)}
    assert kept == {1: None, 2: None, 3: None, 11: b"r11"}


async def test_recorder_samples_and_bounds_its_backlog() -> None:
    """Lookups are sampled at geometric gaps drawn from the rate; past max_pending queued
    samples are dropped, not written."""
    # Gaps are geometric: with rate 0.5 a draw of 0.8 means 1 + floor(log(0.2)/log(0.5)) = 3.
    draws = iter([0.0, 0.8, 0.0, 0.0])
    store = FakeStore()
    recorder = HitRecorder(store, lambda t: True, sample_rate=0.5, rng=lambda: next(draws))
    q, r = _hit(req("a"))
    recorder.observe([q] * 4, [r] * 4)  # samples lookups 0 and 3
    await recorder.drain()
    assert len(store.records) == 2
    recorder.observe([q], [r])  # lookup 4: the gap after 3 is 1
    await recorder.drain()
    assert len(store.records) == 3

    blocked = asyncio.Event()

    class SlowStore(FakeStore):
        async def record(self, model_version: str, digest: KeyDigest) -> None:
            await blocked.wait()
            await super().record(model_version, digest)

    slow_store = SlowStore()
    slow = HitRecorder(slow_store, lambda t: True, sample_rate=1.0, max_pending=2)
    slow.observe([q] * 5, [r] * 5)
    await asyncio.sleep(0)  # the writer takes the first record and blocks on it
    slow.observe([q] * 5, [r] * 5)
    # 2 queued, 3 dropped; the writer took 1, so 1 more fits and 4 are dropped.
    assert slow.dropped == 7
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
