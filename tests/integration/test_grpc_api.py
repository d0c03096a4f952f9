"""The data plane over real gRPC sockets (embedded warm tier): outcomes, errors, service surface."""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from infercache.v1 import cache_pb2 as pb
from infercache.v1 import cache_pb2_grpc
from infercache_client import make_key

from sidecar import __version__
from sidecar.keys import KEY_SCHEMA_VERSION
from sidecar.testing import InProcessSidecar
from tests.support.keys import key
from tests.support.sidecars import StartSidecar


@pytest.fixture
async def sidecar(start_sidecar: StartSidecar) -> InProcessSidecar:
    return await start_sidecar(max_payload_bytes="1KiB", max_batch="4")


async def test_store_then_lookup_hits(sidecar: InProcessSidecar) -> None:
    """A stored payload comes back on the next lookup with its digest and cost."""
    k = key()
    miss = await sidecar.client.lookup(k)
    assert miss.outcome == pb.LOOKUP_OUTCOME_MISS
    assert len(miss.key_digest) == 32
    assert miss.lease
    stored = await sidecar.client.store(
        k, b"Click 'Forgot password'.", lease=miss.lease, cost=pb.ComputeCost(latency_ms=700)
    )
    assert stored.outcome == pb.STORE_OUTCOME_STORED
    assert stored.key_digest == miss.key_digest
    hit = await sidecar.client.lookup(k)
    assert hit.outcome == pb.LOOKUP_OUTCOME_HIT
    assert hit.payload == b"Click 'Forgot password'."
    assert hit.key_digest == miss.key_digest
    assert hit.cost.latency_ms == 700
    assert not hit.degraded


async def test_same_request_for_another_tenant_misses(sidecar: InProcessSidecar) -> None:
    """A result stored for one tenant is never returned to another."""
    await sidecar.store(key(tenant="acme"), b"acme's answer")
    other = await sidecar.client.lookup(key(tenant="globex"))
    assert other.outcome == pb.LOOKUP_OUTCOME_MISS
    assert other.payload == b""


@pytest.mark.parametrize(
    "dims",
    [
        {"model_version": "fp1-other"},
        {"prompt_version": "support-v4"},
        {"adapter_version": "lora-1"},
        {"extra": {"tools": "v2"}},
        {"temperature": 0.2},
    ],
    ids=lambda d: next(iter(d)),
)
async def test_any_other_dimension_misses(sidecar: InProcessSidecar, dims: dict[str, Any]) -> None:
    """Changing any dimension of a stored request is a MISS."""
    await sidecar.store(key(), b"answer")
    assert (await sidecar.client.lookup(key(**dims))).outcome == pb.LOOKUP_OUTCOME_MISS


async def test_equivalent_requests_share_a_key_over_the_wire(sidecar: InProcessSidecar) -> None:
    """Request ids, the order of sets (stop token ids) and of maps (extra) do not change the
    key; explicit defaults and stop order do (schema v2: unset is not a default, and the
    first stop string that matches wins)."""
    k1 = key(stop_token_ids=[7, 2], extra={"a": "1", "b": "2"}, temperature=None)
    k2 = key(stop_token_ids=[2, 7, 2], extra={"b": "2", "a": "1"}, temperature=None)
    await sidecar.store(k1, b"same")
    async with grpc.aio.insecure_channel(sidecar.target) as channel:
        stub = cache_pb2_grpc.CacheServiceStub(channel)
        hit = await stub.Lookup(pb.LookupRequest(key=k2, request_id="req-123"), timeout=2)
        assert hit.outcome == pb.LOOKUP_OUTCOME_HIT
        assert hit.payload == b"same"
        await sidecar.store(key(stop=["b", "a"], temperature=None), b"stops")
        unset = key(stop=["a", "b"], temperature=None)
        for other in (unset, key(stop=["b", "a"], temperature=1.0, top_k=-1, n=1)):
            miss = await stub.Lookup(pb.LookupRequest(key=other), timeout=2)
            assert miss.outcome == pb.LOOKUP_OUTCOME_MISS, other


async def test_token_id_inputs_work(sidecar: InProcessSidecar) -> None:
    """A token-id key can be looked up and stored like a text key."""
    k = make_key(tenant="acme", model_version="m", prompt_version="p", token_ids=[1, 2, 3])
    await sidecar.store(k, b"tokens")
    hit = await sidecar.client.lookup(k)
    assert hit.payload == b"tokens"
    other = make_key(tenant="acme", model_version="m", prompt_version="p", token_ids=[3, 2, 1])
    assert (await sidecar.client.lookup(other)).outcome == pb.LOOKUP_OUTCOME_MISS


@pytest.mark.parametrize("field", ["tenant", "model_version", "prompt_version"])
async def test_missing_dimension_is_invalid_argument(sidecar: InProcessSidecar, field: str) -> None:
    """An empty required dimension is INVALID_ARGUMENT naming key.<field>, for lookup and store."""
    missing: dict[str, Any] = {field: ""}
    k = key(**missing)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await sidecar.client.lookup(k)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert f"key.{field}" in (err.value.details() or "")
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await sidecar.client.store(k, b"x")
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert f"key.{field}" in (err.value.details() or "")


async def test_missing_input_is_invalid_argument(sidecar: InProcessSidecar) -> None:
    """A key without any input is INVALID_ARGUMENT naming key.input."""
    k = pb.CacheKey(tenant="acme", model_version="m", prompt_version="p")
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await sidecar.client.lookup(k)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "key.input" in (err.value.details() or "")


@pytest.mark.parametrize(
    ("fmt", "field"),
    [
        (
            pb.ResponseFormat(
                type=pb.RESPONSE_FORMAT_TYPE_JSON_SCHEMA, schema="[" * 50_000 + "]" * 50_000
            ),
            "key.sampling.response_format.schema",
        ),
        (
            pb.ResponseFormat(type=42, schema="x"),  # type: ignore[arg-type]
            "key.sampling.response_format.type",
        ),
    ],
    ids=["schema-nested-too-deep", "format-type-from-the-future"],
)
async def test_hostile_response_format_is_invalid_argument(
    sidecar: InProcessSidecar, fmt: pb.ResponseFormat, field: str
) -> None:
    """Response formats the server cannot use are INVALID_ARGUMENT naming the field, not UNKNOWN."""
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await sidecar.client.lookup(key(response_format=fmt))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field in (err.value.details() or "")


async def test_oversized_payload_is_refused_and_not_stored(sidecar: InProcessSidecar) -> None:
    """A payload over max_payload_bytes is INVALID_ARGUMENT naming payload; the key still misses."""
    k = key()
    miss = await sidecar.client.lookup(k)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await sidecar.client.store(k, b"x" * 1025, lease=miss.lease)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "payload" in (err.value.details() or "")
    assert (await sidecar.client.lookup(k)).outcome == pb.LOOKUP_OUTCOME_MISS
    assert sidecar.stats.total("stores", result="stored") == 0
    at_limit = await sidecar.client.store(k, b"x" * 1024, lease=miss.lease)
    assert at_limit.outcome == pb.STORE_OUTCOME_STORED


async def test_lookup_batch_keeps_order(sidecar: InProcessSidecar) -> None:
    """LookupBatch answers each request in order, hits and misses mixed."""
    await sidecar.store(key("one"), b"1")
    await sidecar.store(key("three"), b"3")
    keys = [key("zero"), key("one"), key("two"), key("three")]
    results = await sidecar.client.lookup_batch(keys)
    assert [r.outcome for r in results] == [
        pb.LOOKUP_OUTCOME_MISS,
        pb.LOOKUP_OUTCOME_HIT,
        pb.LOOKUP_OUTCOME_MISS,
        pb.LOOKUP_OUTCOME_HIT,
    ]
    assert [r.payload for r in results] == [b"", b"1", b"", b"3"]
    singles = [await sidecar.client.lookup(k) for k in keys]
    assert [r.key_digest for r in results] == [r.key_digest for r in singles]


async def test_batch_over_the_limit_is_invalid_argument(sidecar: InProcessSidecar) -> None:
    """A batch larger than max_batch is INVALID_ARGUMENT naming requests."""
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await sidecar.client.lookup_batch([key(str(i)) for i in range(5)])
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "requests" in (err.value.details() or "")
    assert len(await sidecar.client.lookup_batch([key(str(i)) for i in range(4)])) == 4


async def test_bad_item_in_batch_names_its_index(sidecar: InProcessSidecar) -> None:
    """A malformed key inside a batch is INVALID_ARGUMENT naming requests[i] and the field."""
    keys = [key("a"), key("b"), key("c", tenant="")]
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await sidecar.client.lookup_batch(keys)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "requests[2].key.tenant" in (err.value.details() or "")


async def test_store_without_lease_is_refused(sidecar: InProcessSidecar) -> None:
    """By default a Store must carry the lease of a MISS; nothing is stored otherwise."""
    k = key()
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await sidecar.client.store(k, b"x")
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert (await sidecar.client.lookup(k)).outcome == pb.LOOKUP_OUTCOME_MISS


async def test_lease_of_another_key_is_refused(sidecar: InProcessSidecar) -> None:
    """A lease issued for one key cannot store a result under another."""
    lease = (await sidecar.client.lookup(key("a"))).lease
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await sidecar.client.store(key("b"), b"x", lease=lease)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "lease" in (err.value.details() or "")


async def test_ttl_is_clamped_and_reported(start_sidecar: StartSidecar) -> None:
    """Store reports the TTL it applied: the default, or the request clamped to the maximum."""
    sidecar = await start_sidecar(default_ttl_s="60", max_ttl_s="120")
    assert (await sidecar.store(key("a"), b"x")).ttl_seconds == 60
    assert (await sidecar.store(key("b"), b"x", ttl_seconds=10**6)).ttl_seconds == 120
    assert (await sidecar.store(key("c"), b"x", ttl_seconds=5)).ttl_seconds == 5


async def test_server_info(sidecar: InProcessSidecar) -> None:
    """GetServerInfo reports the version, key schema and warm tier."""
    info = await sidecar.client.server_info()
    assert info.server_version == __version__
    assert info.key_schema_version == KEY_SCHEMA_VERSION
    assert info.warm_tier == "embedded"


async def test_health_is_serving(sidecar: InProcessSidecar) -> None:
    """grpc.health.v1 reports SERVING overall and for CacheService."""
    async with grpc.aio.insecure_channel(sidecar.target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        for service in ("", "infercache.v1.CacheService"):
            resp = await stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=2)
            assert resp.status == health_pb2.HealthCheckResponse.SERVING


async def test_reflection_lists_the_services(sidecar: InProcessSidecar) -> None:
    """Server reflection lists CacheService and health."""
    async with grpc.aio.insecure_channel(sidecar.target) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        services: set[str] = set()
        async for resp in stub.ServerReflectionInfo(iter([request]), timeout=2):
            services |= {s.name for s in resp.list_services_response.service}
    assert "infercache.v1.CacheService" in services
    assert "grpc.health.v1.Health" in services


async def test_memoised_keys_never_blur_close_requests(sidecar: InProcessSidecar) -> None:
    """Keys seen before (memoised) and keys differing in one bit of one field stay apart."""
    base = key(temperature=0.5)
    near = key(temperature=0.5000001)  # a different float32, so a different key
    first = await sidecar.client.lookup(base)
    again = await sidecar.client.lookup(base)
    other = await sidecar.client.lookup(near)
    assert first.key_digest == again.key_digest
    assert other.key_digest != first.key_digest
    for _ in range(2):  # a refused key is refused every time: failures are not memoised
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await sidecar.client.lookup(key(temperature=-1.0))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
