"""Bad bytes and bugs at the gRPC edge (issue 14 items 1 and 3), on a real grpc.aio server:
malformed requests are INVALID_ARGUMENT on every method, an unexpected exception is
INTERNAL with an error id logged once, and every documented size limit is reachable."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import grpc
import pytest
import structlog
from infercache.v1 import cache_pb2 as pb

from tests.support.keys import key
from tests.support.malformed import ADMIN_SERVICES, DATA_SERVICES, bad_messages, call, methods
from tests.support.sidecars import StartSidecar

TOKEN = "malformed-requests-token"
MiB = 1024 * 1024


def _barrage(target: str, modules: tuple[Any, ...], token: str) -> Counter[tuple[str, str]]:
    """(status, first words of the details) of every malformed request to every method."""
    seen: Counter[tuple[str, str]] = Counter()
    metadata = [("authorization", f"Bearer {token}")]
    with grpc.insecure_channel(target) as channel:
        for method in methods(modules):
            for label, raw in bad_messages(method.input_type):
                code, details = call(channel, method, raw, metadata)
                assert code is grpc.StatusCode.INVALID_ARGUMENT, (method.full_name, label, code)
                assert details.startswith("request: is not a valid "), (method.name, details)
                seen[(code.name, method.full_name)] += 1
    return seen


async def test_malformed_bytes_are_invalid_argument_on_every_method(
    start_sidecar: StartSidecar,
) -> None:
    """b"\\xff\\xff\\xff" and invalid UTF-8 in each string field, sent raw to every method of
    the data plane (cache, KV, health, reflection) and the admin plane, are answered
    INVALID_ARGUMENT naming the request's type (grpcio's default was UNKNOWN)."""
    sidecar = await start_sidecar(admin_listen="127.0.0.1:0", admin_tokens=f"t={TOKEN}")
    admin = f"127.0.0.1:{sidecar.running.admin_ports[0]}"
    data_seen = await asyncio.to_thread(_barrage, sidecar.target, DATA_SERVICES, TOKEN)
    admin_seen = await asyncio.to_thread(_barrage, admin, ADMIN_SERVICES, TOKEN)
    services = {name.rsplit(".", 1)[0] for _, name in data_seen | admin_seen}
    assert services == {
        "infercache.v1.CacheService",
        "infercache.v1.KvCacheService",
        "infercache.v1.AdminService",
        "grpc.health.v1.Health",
        "grpc.reflection.v1alpha.ServerReflection",
    }
    # The server still answers a valid request afterwards.
    miss = await sidecar.client.lookup(key("still serving"))
    assert miss.outcome == pb.LOOKUP_OUTCOME_MISS


async def test_an_unexpected_error_is_internal_with_an_id_logged_once(
    start_sidecar: StartSidecar, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A handler that raises something unexpected answers INTERNAL with a short error id,
    the same id each time; twenty such calls log one line with the traceback, not twenty."""
    sidecar = await start_sidecar()

    async def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a bug in lookup")

    monkeypatch.setattr(sidecar.running.cache, "lookup", broken)
    details = set()
    with structlog.testing.capture_logs() as logs:
        for i in range(20):
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await sidecar.client.lookup(key(f"q{i}"))
            assert err.value.code() is grpc.StatusCode.INTERNAL
            details.add(err.value.details())
    (only,) = details
    assert only.startswith("internal error (id ")
    error_id = only.removeprefix("internal error (id ").removesuffix(")")
    assert len(error_id) == 8
    lines = [e for e in logs if e["event"] == "rpc_internal_error"]
    assert len(lines) == 1, lines
    assert lines[0]["error_id"] == error_id
    assert lines[0]["rpc"] == "Lookup"
    assert "a bug in lookup" in lines[0]["error"]
    assert lines[0]["count"] == 1
    # Still serving once the bug is gone.
    monkeypatch.undo()
    assert (await sidecar.client.lookup(key("fixed"))).outcome == pb.LOOKUP_OUTCOME_MISS


async def test_every_documented_key_and_payload_limit_is_reachable(
    start_sidecar: StartSidecar,
) -> None:
    """With the defaults (INFERCACHE_MAX_INPUT_BYTES 8 MiB, INFERCACHE_MAX_PAYLOAD_BYTES
    4 MiB) a 6 MiB text is answered and stored with a 4 MiB payload, and a 9 MiB text is
    INVALID_ARGUMENT naming key.text; the transport refused both before (5 MiB limit)."""
    sidecar = await start_sidecar()
    six = key("x" * (6 * MiB))
    miss = await sidecar.client.lookup(six)
    assert miss.outcome == pb.LOOKUP_OUTCOME_MISS
    stored = await sidecar.client.store(six, b"p" * (4 * MiB), lease=miss.lease)
    assert stored.outcome == pb.STORE_OUTCOME_STORED, stored
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await sidecar.client.lookup(key("x" * (9 * MiB)))
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert (err.value.details() or "").startswith("key.text: ")
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await sidecar.client.store(six, b"p" * (4 * MiB + 1), lease=miss.lease)
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "payload" in (err.value.details() or "")
