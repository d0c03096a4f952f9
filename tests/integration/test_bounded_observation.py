"""Bounded observation over real gRPC: callers cannot grow the metric label sets, and a
paced replay cannot run for hours."""

from __future__ import annotations

import random
import string
import time

import grpc
import pytest
from infercache.v1 import cache_pb2 as pb
from infercache_client import join_chunks, make_pacing

from sidecar.observability.stats import OTHER_VERSION
from tests.support.keys import key
from tests.support.sidecars import StartSidecar

pytestmark = pytest.mark.timeout(120)


async def test_random_reasons_take_at_most_the_allow_list_plus_other(
    start_sidecar: StartSidecar,
) -> None:
    """3,000 random ReportOutcome reasons make at most len(allow-list) + 1 reason series:
    listed reasons count as themselves, every other one as `other`."""
    sc = await start_sidecar(evict_rejected="false")
    k = key("judged answer")
    await sc.store(k, b"answer")
    digest = (await sc.client.lookup(k)).key_digest
    rng = random.Random(13)
    alphabet = string.ascii_letters + string.digits + "_.:-"
    for i in range(3000):
        reason = "safety" if i == 0 else "".join(rng.choices(alphabet, k=12))
        await sc.client.report_outcome(digest, accepted=False, reason=reason)
    series = {r for (_, _, r) in sc.stats.downstream}
    assert series == {"safety", "other"}  # "safety" is on the default allow-list
    assert sc.stats.downstream[("m1", "rejected", "other")] == 2999


async def test_lookup_strings_take_no_model_version_label(start_sidecar: StartSidecar) -> None:
    """Versions callers only look up count as _other and leave the label slots to versions
    this fleet stored; a version found by a hit gets its label too."""
    sc = await start_sidecar(metrics_max_model_versions="2")
    for i in range(40):
        miss = await sc.client.lookup(key(model_version=f"probe-{i}"))
        assert miss.outcome == pb.LOOKUP_OUTCOME_MISS
    k = key("stored", model_version="fp-stored")
    await sc.store(k, b"answer")
    assert (await sc.client.lookup(k)).outcome == pb.LOOKUP_OUTCOME_HIT
    stats = sc.stats
    # The MISS before the first store is not yet a fleet version: _other too.
    assert stats.total("lookups", version=OTHER_VERSION) == 41
    assert stats.total("lookups", version="fp-stored") == 1
    assert stats.total("stores", version="fp-stored") == 1
    assert stats.versions() == sorted(["fp-stored", OTHER_VERSION])


async def test_replay_past_the_duration_cap_ends_deadline_exceeded(
    start_sidecar: StartSidecar,
) -> None:
    """Chunks stored 1 s apart, replayed at original pace under a 1.5 s cap: the chunks due
    within the cap arrive, then the stream ends DEADLINE_EXCEEDED (not hours later)."""
    sc = await start_sidecar(replay_max_duration_ms="1500")
    k = key("slow original")
    miss = await sc.client.lookup(k)
    payload, bounds = join_chunks([f"w{i}" for i in range(2000)])
    for i, b in enumerate(bounds):
        b.offset_ms = i * 1000
    await sc.client.store(k, payload, lease=miss.lease, chunks=bounds)
    started = time.monotonic()
    stream = sc.client.lookup_stream(k, pacing=make_pacing(original=True))
    got: list[pb.Chunk] = []

    async def read_all() -> None:
        async for chunk in stream:
            got.append(chunk)

    with pytest.raises(grpc.aio.AioRpcError) as err:
        await read_all()
    elapsed = time.monotonic() - started
    assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert "INFERCACHE_REPLAY_MAX_DURATION_MS" in (err.value.details() or "")
    assert [c.offset_ms for c in got] == [0, 1000]
    assert elapsed < 10, elapsed
    assert sc.stats.total("streams", event="replay.truncated") == 1
    assert sc.stats.total("streams", event="replay.chunks") == 2
