"""Unauthenticated 15 MiB Prewarm messages on the admin plane: the memory they leave."""

from __future__ import annotations

import asyncio

import grpc
from infercache.v1 import admin_pb2, admin_pb2_grpc, cache_pb2

from bench.robustness.target import rss_mib, settled_rss_mib

MESSAGE_MIB = 15


def big_prewarm(mib: int = MESSAGE_MIB) -> admin_pb2.PrewarmRequest:
    """A Prewarm request of about `mib` MiB (one inline key with a long text)."""
    key = cache_pb2.CacheKey(text="x" * (mib * 1024 * 1024 - 64))
    return admin_pb2.PrewarmRequest(requests=admin_pb2.PrewarmRequestList(keys=[key]))


async def _one(stub: admin_pb2_grpc.AdminServiceStub, request: admin_pb2.PrewarmRequest) -> str:
    try:
        async for _ in stub.Prewarm(request, timeout=60):
            pass
    except grpc.aio.AioRpcError as exc:
        return str(exc.code().name)
    return "OK"


async def flood(admin_port: int, pid: int, rounds: int, per_round: int) -> tuple[float, float]:
    """(peak, retained) RSS over the baseline in MiB after `rounds` rounds of `per_round`
    concurrent unauthenticated Prewarm calls (retained: 2 s after the last round)."""
    request = big_prewarm()
    baseline = peak = await asyncio.to_thread(settled_rss_mib, pid)
    options = [("grpc.max_send_message_length", 64 * 1024 * 1024)]
    async with grpc.aio.insecure_channel(f"127.0.0.1:{admin_port}", options=options) as channel:
        stub = admin_pb2_grpc.AdminServiceStub(channel)
        for _ in range(rounds):
            calls = asyncio.gather(*(_one(stub, request) for _ in range(per_round)))
            while not calls.done():
                peak = max(peak, rss_mib(pid))
                await asyncio.sleep(0.05)
            codes = await calls
            assert "OK" not in codes, f"an unauthenticated Prewarm succeeded: {codes}"
    await asyncio.sleep(2.0)
    return peak - baseline, rss_mib(pid) - baseline
