"""The admin plane: bearer-token authentication, request validation and the audit log."""

from __future__ import annotations

import time
from typing import Any

import grpc
import pytest
from infercache.v1 import admin_pb2 as admin_pb
from infercache.v1 import admin_pb2_grpc, cache_pb2_grpc
from infercache.v1 import cache_pb2 as pb

from tests.support.keys import key
from tests.support.processes import RedisServer
from tests.support.sidecars import TOKENS, Sidecar, bearer, sidecar

pytestmark = pytest.mark.timeout(60)

GOOD = TOKENS["deployer"]


@pytest.fixture(params=["embedded", pytest.param("redis", marks=pytest.mark.redis)])
def store_url(request: pytest.FixtureRequest) -> str | None:
    """None for the embedded stores, else the URL of a flushed redis-server."""
    if request.param == "embedded":
        return None
    server: RedisServer = request.getfixturevalue("redis_server")
    return server.url


async def _code_of(call: Any) -> grpc.StatusCode:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    code: grpc.StatusCode = info.value.code()
    return code


async def _assert_nothing_happened(s: Sidecar, k: pb.CacheKey, audited: int = 0) -> None:
    """The audit log still has `audited` records and the stored entry still HITs."""
    assert len(await s.audit()) == audited
    hit = await s.client.lookup(k)
    assert (hit.outcome, hit.payload) == (pb.LOOKUP_OUTCOME_HIT, b"cached")


BAD_CREDENTIALS = {
    "missing": [],
    "wrong token": [("authorization", "Bearer not-a-configured-token-000")],
    "no scheme": [("authorization", GOOD)],
    "basic scheme": [("authorization", f"Basic {GOOD}")],
    "scheme only": [("authorization", "Bearer")],
    "empty token": [("authorization", "Bearer    ")],
    "token plus suffix": [("authorization", f"Bearer {GOOD}x")],
    "token prefix": [("authorization", f"Bearer {GOOD[:-1]}")],
    "other header": [("x-api-key", GOOD)],
}


@pytest.mark.parametrize("metadata", BAD_CREDENTIALS.values(), ids=BAD_CREDENTIALS.keys())
async def test_bad_credentials_are_unauthenticated(
    store_url: str | None, metadata: list[tuple[str, str]]
) -> None:
    """Missing, wrong or malformed credentials: UNAUTHENTICATED for both admin RPCs, no
    audit record, and nothing invalidated (a matching stored entry still HITs)."""
    async with sidecar(store_url) as s:
        k = key("survives")
        await s.fill(k, b"cached")
        request = admin_pb.InvalidateRequest(
            selector=admin_pb.Selector(all=True), reason="should not happen"
        )
        code = await _code_of(s.admin.Invalidate(request, metadata=metadata, timeout=5))
        assert code == grpc.StatusCode.UNAUTHENTICATED
        code = await _code_of(
            s.admin.ListInvalidations(
                admin_pb.ListInvalidationsRequest(), metadata=metadata, timeout=5
            )
        )
        assert code == grpc.StatusCode.UNAUTHENTICATED
        await _assert_nothing_happened(s, k)


async def test_scheme_is_case_insensitive() -> None:
    """ "bearer" in lower case is accepted (RFC 7235 schemes are case-insensitive)."""
    async with sidecar() as s:
        resp = await s.admin.ListInvalidations(
            admin_pb.ListInvalidationsRequest(),
            metadata=[("authorization", f"bearer {GOOD}")],
            timeout=5,
        )
        assert list(resp.records) == []


async def test_no_tokens_configured_refuses_everyone() -> None:
    """An admin listener without any configured token refuses every call."""
    async with sidecar(admin_tokens="") as s:
        code = await _code_of(
            s.admin.Invalidate(
                admin_pb.InvalidateRequest(selector=admin_pb.Selector(all=True), reason="x"),
                metadata=bearer(),
                timeout=5,
            )
        )
        assert code == grpc.StatusCode.UNAUTHENTICATED


async def test_admin_rpcs_are_not_on_the_data_plane() -> None:
    """The data-plane port does not serve AdminService, and the admin port does not serve
    CacheService (UNIMPLEMENTED), even with a valid token."""
    async with sidecar() as s:
        async with grpc.aio.insecure_channel(s.target) as data_channel:
            admin_on_data = admin_pb2_grpc.AdminServiceStub(data_channel)
            code = await _code_of(
                admin_on_data.Invalidate(
                    admin_pb.InvalidateRequest(selector=admin_pb.Selector(all=True), reason="x"),
                    metadata=bearer(),
                    timeout=5,
                )
            )
            assert code == grpc.StatusCode.UNIMPLEMENTED
            code = await _code_of(
                admin_on_data.ListInvalidations(
                    admin_pb.ListInvalidationsRequest(), metadata=bearer(), timeout=5
                )
            )
            assert code == grpc.StatusCode.UNIMPLEMENTED
        cache_on_admin = cache_pb2_grpc.CacheServiceStub(s.admin_channel)
        code = await _code_of(cache_on_admin.Lookup(pb.LookupRequest(key=key()), timeout=5))
        assert code == grpc.StatusCode.UNIMPLEMENTED
        assert len(await s.audit()) == 0


INVALID_REQUESTS = {
    "no selector": admin_pb.InvalidateRequest(reason="r"),
    "empty selector": admin_pb.InvalidateRequest(selector=admin_pb.Selector(), reason="r"),
    "all plus tenant": admin_pb.InvalidateRequest(
        selector=admin_pb.Selector(all=True, tenant="acme"), reason="r"
    ),
    "all plus prompt": admin_pb.InvalidateRequest(
        selector=admin_pb.Selector(all=True, prompt_version="p1"), reason="r"
    ),
    "missing reason": admin_pb.InvalidateRequest(selector=admin_pb.Selector(tenant="acme")),
    "blank reason": admin_pb.InvalidateRequest(
        selector=admin_pb.Selector(tenant="acme"), reason=" \t\n"
    ),
    "reason too long": admin_pb.InvalidateRequest(
        selector=admin_pb.Selector(tenant="acme"), reason="x" * 1025
    ),
}


@pytest.mark.parametrize("request_", INVALID_REQUESTS.values(), ids=INVALID_REQUESTS.keys())
async def test_invalid_invalidations_are_refused(
    store_url: str | None, request_: admin_pb.InvalidateRequest
) -> None:
    """Empty selector, `all` with a dimension, or no reason: INVALID_ARGUMENT, nothing
    audited, nothing invalidated."""
    async with sidecar(store_url) as s:
        k = key("survives")
        await s.fill(k, b"cached")
        code = await _code_of(s.admin.Invalidate(request_, metadata=bearer(), timeout=5))
        assert code == grpc.StatusCode.INVALID_ARGUMENT
        await _assert_nothing_happened(s, k)


async def test_longest_reason_is_accepted() -> None:
    """A reason of exactly 1024 characters is kept whole in the audit log."""
    async with sidecar() as s:
        await s.invalidate(tenant="acme", reason="y" * 1024)
        [record] = await s.audit()
        assert record.reason == "y" * 1024


async def test_audit_names_the_caller(store_url: str | None) -> None:
    """Each audit record names the token that made the call, with selector, reason, epoch
    and time."""
    async with sidecar(store_url) as s:
        before_ms = time.time() * 1000
        first = await s.invalidate(caller="deployer", model_version="m1", reason="rollout 1.3")
        second = await s.invalidate(
            caller="pipeline", tenant="acme", prompt_version="p2", reason="template fix"
        )
        assert (first.record.caller, second.record.caller) == ("deployer", "pipeline")
        records = await s.audit()
        assert [r.caller for r in records] == ["pipeline", "deployer"]
        newest, oldest = records
        assert newest == second.record
        assert oldest == first.record
        assert newest.selector == admin_pb.Selector(tenant="acme", prompt_version="p2")
        assert oldest.selector == admin_pb.Selector(model_version="m1")
        assert (oldest.reason, newest.reason) == ("rollout 1.3", "template fix")
        assert newest.epoch == oldest.epoch + 1
        assert oldest.id != newest.id
        assert before_ms - 5_000 <= oldest.time_ms <= newest.time_ms <= time.time() * 1000 + 5_000


async def test_audit_pages_newest_first(store_url: str | None) -> None:
    """ListInvalidations pages newest first; page tokens continue strictly older; the last
    page has no token; an exact multiple of the page size ends without an empty page."""
    async with sidecar(store_url) as s:
        reasons = [f"change {i}" for i in range(7)]
        for r in reasons:
            await s.invalidate(tenant="acme", reason=r)
        pages: list[list[str]] = []
        token = ""
        while True:
            resp = await s.admin.ListInvalidations(
                admin_pb.ListInvalidationsRequest(page_size=3, page_token=token),
                metadata=bearer(),
                timeout=5,
            )
            pages.append([r.reason for r in resp.records])
            token = resp.next_page_token
            if not token:
                break
            assert len(pages) < 5, "paging does not terminate"
        assert pages == [reasons[6:3:-1], reasons[3:0:-1], reasons[0:1]]
        assert [r.reason for r in await s.audit(page_size=0)] == reasons[::-1]
        exact = await s.admin.ListInvalidations(
            admin_pb.ListInvalidationsRequest(page_size=7), metadata=bearer(), timeout=5
        )
        assert len(exact.records) == 7
        assert exact.next_page_token == ""


@pytest.mark.parametrize("token", ["abc", "1-", "-1", "1-2-3", "12 34", "+"])
async def test_invalid_page_token(store_url: str | None, token: str) -> None:
    """A page token that ListInvalidations never issued is INVALID_ARGUMENT."""
    async with sidecar(store_url) as s:
        await s.invalidate(tenant="acme", reason="one record")
        code = await _code_of(
            s.admin.ListInvalidations(
                admin_pb.ListInvalidationsRequest(page_token=token), metadata=bearer(), timeout=5
            )
        )
        assert code == grpc.StatusCode.INVALID_ARGUMENT


async def test_page_size_over_limit() -> None:
    """page_size above 1000 is INVALID_ARGUMENT; 1000 is accepted."""
    async with sidecar() as s:
        code = await _code_of(
            s.admin.ListInvalidations(
                admin_pb.ListInvalidationsRequest(page_size=1001), metadata=bearer(), timeout=5
            )
        )
        assert code == grpc.StatusCode.INVALID_ARGUMENT
        assert await s.audit(page_size=1000) == []


async def test_estimate_counts_matching_entries() -> None:
    """On the embedded store (exact sample) the record estimates exactly the matching entries."""
    async with sidecar() as s:
        for i in range(4):
            await s.fill(key(f"acme {i}"), b"a")
        for i in range(2):
            await s.fill(key(f"beta {i}", tenant="beta"), b"b")
        resp = await s.invalidate(tenant="acme", reason="count")
        assert resp.record.estimated_entries == 4
