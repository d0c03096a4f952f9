"""ReportOutcome over real gRPC: verdicts counted per model version, rejected answers evicted."""

from __future__ import annotations

import grpc
import pytest
from infercache.v1 import cache_pb2 as pb

from sidecar.testing import InProcessSidecar
from tests.support.keys import key
from tests.support.sidecars import StartSidecar

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def sc(start_sidecar: StartSidecar) -> InProcessSidecar:
    return await start_sidecar()


async def hit_digest(
    s: InProcessSidecar, k: pb.CacheKey, payload: bytes = b"cached answer"
) -> bytes:
    """Store k, look it up (must HIT) and return the digest the hit carries."""
    await s.store(k, payload)
    hit = await s.client.lookup(k)
    assert hit.outcome == pb.LOOKUP_OUTCOME_HIT
    return hit.key_digest


async def test_rejected_answer_is_evicted_and_the_next_lookup_misses(sc: InProcessSidecar) -> None:
    """ReportOutcome(rejected) evicts the entry (hot and warm): the next request recomputes."""
    k = key()
    digest = await hit_digest(sc, k)
    resp = await sc.client.report_outcome(digest, accepted=False, reason="safety")
    assert resp.evicted
    assert resp.model_version == "m1"
    after = await sc.client.lookup(k)
    assert after.outcome == pb.LOOKUP_OUTCOME_MISS
    assert sc.stats.downstream[("m1", "rejected", "safety")] == 1
    # The digest names nothing any more.
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await sc.client.report_outcome(digest, accepted=False, reason="safety")
    assert err.value.code() == grpc.StatusCode.NOT_FOUND


async def test_accepted_answer_stays_and_is_counted(sc: InProcessSidecar) -> None:
    """ReportOutcome(accepted) keeps the entry and counts the verdict under its model version."""
    k = key(model_version="fp2-other")
    digest = await hit_digest(sc, k)
    resp = await sc.client.report_outcome(digest, accepted=True)
    assert not resp.evicted
    assert resp.model_version == "fp2-other"
    assert (await sc.client.lookup(k)).outcome == pb.LOOKUP_OUTCOME_HIT
    assert sc.stats.downstream[("fp2-other", "accepted", "unspecified")] == 1
    assert sc.stats.snapshot()["downstream.accepted.unspecified"] == 1


async def test_unknown_digest_is_not_found(sc: InProcessSidecar) -> None:
    """A digest no live entry has is NOT_FOUND, and nothing is counted."""
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await sc.client.report_outcome(bytes(range(32)), accepted=False, reason="format")
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert not sc.stats.downstream


async def test_digest_of_a_missed_key_is_not_found(sc: InProcessSidecar) -> None:
    """The digest a MISS returns names no entry: NOT_FOUND."""
    miss = await sc.client.lookup(key("not cached"))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await sc.client.report_outcome(miss.key_digest, accepted=True)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND


@pytest.mark.parametrize(
    ("digest", "verdict", "reason", "field"),
    [
        (b"short", pb.REPORT_OUTCOME_VERDICT_REJECTED, "", "key_digest"),
        (bytes(32), pb.REPORT_OUTCOME_VERDICT_UNSPECIFIED, "", "verdict"),
        (bytes(32), pb.REPORT_OUTCOME_VERDICT_REJECTED, "has spaces in it", "reason"),
        (bytes(32), pb.REPORT_OUTCOME_VERDICT_REJECTED, "r" * 65, "reason"),
    ],
)
async def test_malformed_reports_are_invalid_argument(
    sc: InProcessSidecar, digest: bytes, verdict: pb.ReportOutcomeVerdict, reason: str, field: str
) -> None:
    """A bad digest, a missing verdict or a reason that is not a short label names its field."""
    from infercache.v1 import cache_pb2_grpc

    async with grpc.aio.insecure_channel(sc.target) as ch:
        stub = cache_pb2_grpc.CacheServiceStub(ch)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.ReportOutcome(
                pb.ReportOutcomeRequest(key_digest=digest, verdict=verdict, reason=reason)
            )
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (err.value.details() or "").startswith(field)


async def test_eviction_can_be_turned_off(start_sidecar: StartSidecar) -> None:
    """With evict_rejected=false a rejection is only counted; the entry keeps serving."""
    s = await start_sidecar(evict_rejected="false")
    k = key()
    digest = await hit_digest(s, k)
    resp = await s.client.report_outcome(digest, accepted=False, reason="format")
    assert not resp.evicted
    assert (await s.client.lookup(k)).outcome == pb.LOOKUP_OUTCOME_HIT
    assert s.stats.downstream[("m1", "rejected", "format")] == 1


@pytest.mark.redis
async def test_rejection_reaches_the_shared_warm_tier(
    start_sidecar: StartSidecar, redis_server: object
) -> None:
    """Rejected on one sidecar, the entry is gone from Redis for every sidecar that has not
    cached it in its own hot tier."""
    url = redis_server.url  # type: ignore[attr-defined]
    a = await start_sidecar(redis_url=url)
    b = await start_sidecar(redis_url=url)
    k = key("fleet")
    await a.store(k, b"answer")
    hit_b = await b.client.lookup(k)
    assert (hit_b.outcome, hit_b.tier) == (pb.LOOKUP_OUTCOME_HIT, pb.TIER_WARM)
    # b reports (found in its hot tier now); the warm copy goes too.
    resp = await b.client.report_outcome(hit_b.key_digest, accepted=False, reason="grader")
    assert resp.evicted
    c = await start_sidecar(redis_url=url)
    assert (await c.client.lookup(k)).outcome == pb.LOOKUP_OUTCOME_MISS
    assert (await b.client.lookup(k)).outcome == pb.LOOKUP_OUTCOME_MISS


@pytest.mark.redis
async def test_report_on_a_sidecar_that_only_has_the_warm_copy(
    start_sidecar: StartSidecar, redis_server: object
) -> None:
    """A sidecar that never saw the entry finds it in Redis by digest alone and evicts it."""
    url = redis_server.url  # type: ignore[attr-defined]
    a = await start_sidecar(redis_url=url, hot_max_entries="0")
    b = await start_sidecar(redis_url=url, hot_max_entries="0")
    k = key("warm only", model_version="fp3-warm")
    await a.store(k, b"answer")
    digest = (await a.client.lookup(k)).key_digest
    resp = await b.client.report_outcome(digest, accepted=False, reason="grader")
    assert (resp.evicted, resp.model_version) == (True, "fp3-warm")
    assert (await a.client.lookup(k)).outcome == pb.LOOKUP_OUTCOME_MISS
