"""The cacheability policy over real gRPC: BYPASS answers with machine-readable reasons."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest
from infercache.v1 import cache_pb2 as pb
from infercache.v1 import cache_pb2_grpc
from infercache_client import make_key, make_traits

from sidecar.testing import InProcessSidecar
from tests.support.keys import key
from tests.support.sidecars import StartSidecar

POLICY = """
defaults:
  deterministic_only: true
  max_ttl_s: 600
  max_entry_bytes: 64
  bypass: {tools: true}
tenants:
  billing:
    cacheable: false
  search:
    deterministic_only: false
    max_ttl_s: 30
"""


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY)
    return path


@pytest.fixture
async def sidecar(start_sidecar: StartSidecar, policy_file: Path) -> InProcessSidecar:
    # Reloads in these tests are explicit (watcher.reload), not timed.
    return await start_sidecar(policy_file=str(policy_file), policy_poll_ms="0")


@pytest.mark.parametrize(
    ("k", "traits", "code"),
    [
        (key(tenant="billing"), None, pb.BYPASS_REASON_NOT_CACHEABLE),
        (key("q", temperature=None), None, pb.BYPASS_REASON_NON_DETERMINISTIC),  # unset = 1.0
        (key("q"), make_traits(side_effects=True), pb.BYPASS_REASON_SIDE_EFFECTS),
        (key("q"), make_traits(private_data=True), pb.BYPASS_REASON_PRIVATE_DATA),
        (key("q"), make_traits(real_time=True), pb.BYPASS_REASON_REAL_TIME),
        (key("q"), make_traits(tools=True), pb.BYPASS_REASON_TOOLS),
        (key(tools=[{"type": "function", "name": "book"}]), None, pb.BYPASS_REASON_TOOLS),
    ],
    ids=["not_cacheable", "sampled", "side_effects", "private", "real_time", "tools", "tools_key"],
)
async def test_lookup_bypass_carries_the_reason_and_no_lease(
    sidecar: InProcessSidecar, k: pb.CacheKey, traits: pb.RequestTraits | None, code: int
) -> None:
    """Each rule answers Lookup BYPASS with its bypass_code, a reason text and no lease."""
    resp = await sidecar.client.lookup(k, traits=traits)
    assert resp.outcome == pb.LOOKUP_OUTCOME_BYPASS
    assert resp.bypass_code == code
    assert resp.bypass_reason
    assert resp.lease == b""
    assert len(resp.key_digest) == 32
    assert sidecar.stats.total("bypasses") == 1


async def test_cacheable_request_is_unaffected(sidecar: InProcessSidecar) -> None:
    """A deterministic request without traits still misses, stores and hits."""
    resp = await sidecar.store(key("fine"), b"cached")
    assert resp.outcome == pb.STORE_OUTCOME_STORED
    assert resp.bypass_code == pb.BYPASS_REASON_UNSPECIFIED
    hit = await sidecar.client.lookup(key("fine"))
    assert (hit.outcome, hit.payload) == (pb.LOOKUP_OUTCOME_HIT, b"cached")


async def test_lookup_batch_mixes_bypass_and_miss(sidecar: InProcessSidecar) -> None:
    """LookupBatch answers each key by the policy of its own tenant, in order."""
    keys = [key("a"), key("a", tenant="billing"), key("a", tenant="search", temperature=None)]
    responses = await sidecar.client.lookup_batch(keys)
    assert [r.outcome for r in responses] == [
        pb.LOOKUP_OUTCOME_MISS,
        pb.LOOKUP_OUTCOME_BYPASS,
        pb.LOOKUP_OUTCOME_MISS,  # search allows sampled answers
    ]
    assert responses[1].bypass_code == pb.BYPASS_REASON_NOT_CACHEABLE
    declared = await sidecar.client.lookup_batch(keys[:1], traits=make_traits(real_time=True))
    assert declared[0].bypass_code == pb.BYPASS_REASON_REAL_TIME


async def test_store_bypassed_with_reason_and_nothing_stored(sidecar: InProcessSidecar) -> None:
    """Store of a request declaring side effects is BYPASSED; the key stays a MISS."""
    k = key("mail the invoice")
    miss = await sidecar.client.lookup(k)
    resp = await sidecar.client.store(
        k, b"sent", lease=miss.lease, traits=make_traits(side_effects=True)
    )
    assert resp.outcome == pb.STORE_OUTCOME_BYPASSED
    assert resp.bypass_code == pb.BYPASS_REASON_SIDE_EFFECTS
    assert "side effects" in resp.bypass_reason
    assert (await sidecar.client.lookup(k)).outcome == pb.LOOKUP_OUTCOME_MISS


async def test_store_over_the_tenant_entry_size_is_bypassed(sidecar: InProcessSidecar) -> None:
    """A result above the tenant's max_entry_bytes is BYPASSED with ENTRY_TOO_LARGE."""
    k = key("long answer")
    miss = await sidecar.client.lookup(k)
    resp = await sidecar.client.store(k, b"x" * 65, lease=miss.lease)
    assert (resp.outcome, resp.bypass_code) == (
        pb.STORE_OUTCOME_BYPASSED,
        pb.BYPASS_REASON_ENTRY_TOO_LARGE,
    )


async def test_policy_ttl_caps_the_requested_ttl(sidecar: InProcessSidecar) -> None:
    """A tenant's max_ttl_s caps whatever TTL the Store asks for."""
    resp = await sidecar.store(key("q", tenant="search", temperature=None), b"a", ttl_seconds=86400)
    assert (resp.outcome, resp.ttl_seconds) == (pb.STORE_OUTCOME_STORED, 30)
    resp = await sidecar.store(key("q"), b"a", ttl_seconds=86400)
    assert resp.ttl_seconds == 600


async def test_a_client_cannot_store_for_a_tenant_that_is_not_cacheable(
    sidecar: InProcessSidecar, policy_file: Path
) -> None:
    """Once a tenant is not cacheable no Store lands for it: not with a valid lease from an
    earlier MISS, not without a lease, whatever traits, TTL or cost the request carries."""
    k = key("answer", tenant="globex")
    miss = await sidecar.client.lookup(k)
    assert miss.outcome == pb.LOOKUP_OUTCOME_MISS
    assert miss.lease
    await asyncio.to_thread(policy_file.write_text, POLICY + "  globex:\n    cacheable: false\n")
    assert await sidecar.running.policy.reload()

    async with grpc.aio.insecure_channel(sidecar.target) as channel:
        stub = cache_pb2_grpc.CacheServiceStub(channel)
        attempts = [
            pb.StoreRequest(key=k, payload=b"v", lease=miss.lease),
            pb.StoreRequest(key=k, payload=b"v", lease=miss.lease, traits=pb.RequestTraits()),
            pb.StoreRequest(key=k, payload=b"v", ttl_seconds=5, cost=pb.ComputeCost(latency_ms=9)),
        ]
        for req in attempts:
            resp = await stub.Store(req, timeout=2)
            assert resp.outcome == pb.STORE_OUTCOME_BYPASSED, req
            assert resp.bypass_code == pb.BYPASS_REASON_NOT_CACHEABLE

    await asyncio.to_thread(policy_file.write_text, POLICY)
    assert await sidecar.running.policy.reload()
    after = await sidecar.client.lookup(k)
    assert after.outcome == pb.LOOKUP_OUTCOME_MISS, "a bypassed store left an entry behind"
    assert after.lease_holder, "the bypassed store did not release the lease"


async def test_without_a_policy_file_everything_is_cached(start_sidecar: StartSidecar) -> None:
    """No file: sampled requests and tool keys are cached; only explicit declarations bypass."""
    sidecar = await start_sidecar()
    k = make_key(
        tenant="billing", model_version="m", prompt_version="p", text="q", tools="tool-schema-v2"
    )
    assert (await sidecar.store(k, b"a")).outcome == pb.STORE_OUTCOME_STORED
    assert (await sidecar.client.lookup(k)).outcome == pb.LOOKUP_OUTCOME_HIT
    declared = await sidecar.client.lookup(k, traits=make_traits(side_effects=True))
    assert declared.bypass_code == pb.BYPASS_REASON_SIDE_EFFECTS


async def test_invalid_policy_file_stops_an_in_process_start(
    start_sidecar: StartSidecar, tmp_path: Path
) -> None:
    """start_server refuses an invalid file before serving anything."""
    from sidecar.policy.file import PolicyError

    bad = tmp_path / "bad.yaml"
    bad.write_text("tenants:\n  acme:\n    cacheable: nope\n")
    with pytest.raises(PolicyError, match=r"bad\.yaml:3: tenants\.acme\.cacheable"):
        await start_sidecar(policy_file=str(bad))


async def test_only_tenants_whose_policy_retains_inputs_are_recorded_for_prewarm(
    start_sidecar: StartSidecar, tmp_path: Path
) -> None:
    """Hits are counted for prewarm for a retain_inputs tenant and for no other."""
    path = tmp_path / "retain.yaml"
    path.write_text("tenants:\n  acme:\n    retain_inputs: true\n")
    sidecar = await start_sidecar(policy_file=str(path))
    for tenant in ("acme", "globex"):
        k = key("popular question", tenant=tenant)
        await sidecar.store(k, b"answer")
        assert (await sidecar.client.lookup(k)).outcome == pb.LOOKUP_OUTCOME_HIT
    recorder = sidecar.running.app.recorder
    assert recorder is not None
    await recorder.merge()
    assert (recorder.counted, recorder.merged, recorder.not_retained) == (1, 1, 1)
