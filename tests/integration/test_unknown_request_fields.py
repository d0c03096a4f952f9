"""Unknown fields on the request messages themselves, not only in their keys, are
refused over real gRPC: a newer client's request-level field (a freshness bound, a
wait, a pacing mode, a chunk attribute) would otherwise be dropped silently and the
request answered as a different one."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest
from infercache.v1 import cache_pb2 as pb

from sidecar.testing import InProcessSidecar
from tests.support.keys import key
from tests.support.sidecars import StartSidecar

SERVICE = "/infercache.v1.CacheService/"
NUMBER = 90  # no request message of schema v1 has a field 90


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def plus_unknown(message: bytes, number: int = NUMBER) -> bytes:
    """`message`'s bytes with a varint field `number` (1) appended: protobuf keeps it as
    an unknown field of that message."""
    return message + varint(number << 3) + b"\x01"


def embed(number: int, payload: bytes) -> bytes:
    """A length-delimited field `number` holding `payload`."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


@pytest.fixture
async def sidecar(start_sidecar: StartSidecar) -> InProcessSidecar:
    return await start_sidecar()


def lookup_bytes() -> bytes:
    return pb.LookupRequest(key=key("q"), wait_ms=0).SerializeToString()


def store_bytes() -> bytes:
    return pb.StoreRequest(key=key("q"), payload=b"a").SerializeToString()


UNARY = {
    "Lookup": ("LookupRequest", plus_unknown(lookup_bytes())),
    "Store": ("StoreRequest", plus_unknown(store_bytes())),
    "LookupBatch": ("LookupBatchRequest", plus_unknown(embed(1, lookup_bytes()))),
    "LookupBatch item": ("requests[0].LookupRequest", embed(1, plus_unknown(lookup_bytes()))),
    "Store cost": ("cost", store_bytes() + embed(4, plus_unknown(b""))),
    "Store chunk boundary": ("chunks[0]", store_bytes() + embed(7, plus_unknown(b"\x08\x01"))),
}


@pytest.mark.parametrize("case", list(UNARY))
async def test_unknown_field_of_a_unary_request_is_invalid_argument(
    sidecar: InProcessSidecar, case: str
) -> None:
    """Lookup, Store, LookupBatch (and each of its lookups) with an unknown field of
    their own, or in a submessage other than the key, are INVALID_ARGUMENT naming the
    place and the field number; the same request without it is answered."""
    where, body = UNARY[case]
    method = SERVICE + case.split()[0]
    async with grpc.aio.insecure_channel(sidecar.target) as channel:
        call = channel.unary_unary(method)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await call(body, timeout=5)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        details = err.value.details() or ""
        assert details.startswith(where + ": "), details
        assert f"field number {NUMBER}" in details, details
        if case == "Lookup":
            answer = pb.LookupResponse.FromString(await call(lookup_bytes(), timeout=5))
            assert answer.outcome == pb.LOOKUP_OUTCOME_MISS


@pytest.mark.parametrize("where", ["LookupStreamRequest", "lookup.LookupRequest", "pacing"])
async def test_unknown_field_of_a_lookup_stream_request_is_invalid_argument(
    sidecar: InProcessSidecar, where: str
) -> None:
    """LookupStream refuses an unknown field on its request, its lookup or its pacing."""
    lookup = lookup_bytes()
    body = {
        "LookupStreamRequest": plus_unknown(embed(1, lookup)),
        "lookup.LookupRequest": embed(1, plus_unknown(lookup)),
        "pacing": embed(1, lookup) + embed(2, plus_unknown(b"")),
    }[where]
    async with grpc.aio.insecure_channel(sidecar.target) as channel:
        call = channel.unary_stream(SERVICE + "LookupStream")
        with pytest.raises(grpc.aio.AioRpcError) as err:
            async for _ in call(body, timeout=5):
                pass
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    details = err.value.details() or ""
    assert details.startswith(where + ": "), details
    assert f"field number {NUMBER}" in details, details


@pytest.mark.parametrize("where", ["StoreStreamRequest", "open", "chunk"])
async def test_unknown_field_of_a_store_stream_message_is_invalid_argument(
    sidecar: InProcessSidecar, where: str
) -> None:
    """StoreStream refuses an unknown field on any of its messages, on the opening
    StoreRequest, or on a chunk; nothing is stored."""
    k = key("streamed")
    lease = (await sidecar.client.lookup(k)).lease
    opening = pb.StoreRequest(key=k, lease=lease).SerializeToString()
    chunk = pb.Chunk(data=b"part").SerializeToString()
    messages = {
        "StoreStreamRequest": [plus_unknown(embed(1, opening))],
        "open": [embed(1, plus_unknown(opening))],
        "chunk": [embed(1, opening), embed(2, plus_unknown(chunk))],
    }[where]

    async def requests() -> AsyncIterator[bytes]:
        for m in messages:
            yield m

    async with grpc.aio.insecure_channel(sidecar.target) as channel:
        call = channel.stream_unary(SERVICE + "StoreStream")
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await call(requests(), timeout=5)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    details = err.value.details() or ""
    assert details.startswith(where + ": "), details
    assert f"field number {NUMBER}" in details, details
    assert (await sidecar.client.lookup(k)).outcome == pb.LOOKUP_OUTCOME_MISS
