"""The hot-hit workload the gRPC benches share: 256 keys, a 1 KiB result, client settings.

Runs in worker processes (grpc is imported inside the functions: the bench process
never imports it).
"""

from __future__ import annotations

import asyncio
from typing import Any

PAYLOAD = bytes(range(256)) * 4  # the ~1 KiB cached result every scenario returns
N_KEYS = 256
TENANT = "bench"
MODEL = "fp1-bench0000000000000000"
PROMPT = "support-v3"
# infercache.v1.Tier values; the bench process never imports grpc.
TIER_HOT = 1
TIER_WARM = 2
# What infercache_client.AsyncCacheClient uses by default.
CHANNEL_OPTIONS: list[tuple[str, int]] = [
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
]
CALL_TIMEOUT_S = 10.0


def bench_keys() -> list[Any]:
    """The N_KEYS CacheKeys every gRPC scenario uses (~200-character prompts)."""
    from infercache_client import make_key

    filler = "Summarise the attached support ticket and propose the next step. " * 3
    return [
        make_key(
            tenant=TENANT,
            model_version=MODEL,
            prompt_version=PROMPT,
            text=f"ticket {i}: {filler}",
            temperature=0.0,
            max_tokens=256,
        )
        for i in range(N_KEYS)
    ]


def lookup_requests() -> list[Any]:
    """One LookupRequest per bench key, built once up front."""
    from infercache.v1 import cache_pb2 as pb

    return [pb.LookupRequest(key=k) for k in bench_keys()]


async def store_all(port: int, expect_tier: int) -> list[bytes]:
    """Store every bench key with PAYLOAD and check a Lookup then hits it from
    `expect_tier`; returns the entries' key digests in key order."""
    import grpc
    from infercache.v1 import cache_pb2 as pb
    from infercache.v1 import cache_pb2_grpc

    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=CHANNEL_OPTIONS) as ch:
        await asyncio.wait_for(ch.channel_ready(), 30)
        stub = cache_pb2_grpc.CacheServiceStub(ch)
        digests = []
        for key in bench_keys():
            # A Store brings back the lease its Lookup MISS handed out; a HIT here means
            # a previous setup already stored it.
            miss = await stub.Lookup(pb.LookupRequest(key=key), timeout=CALL_TIMEOUT_S)
            if miss.outcome == pb.LOOKUP_OUTCOME_HIT:
                digests.append(miss.key_digest)
                continue
            store = pb.StoreRequest(key=key, payload=PAYLOAD, ttl_seconds=3600, lease=miss.lease)
            resp = await stub.Store(store, timeout=CALL_TIMEOUT_S)
            if resp.outcome != pb.STORE_OUTCOME_STORED:
                raise RuntimeError(f"store on port {port} answered {resp}")
            digests.append(resp.key_digest)
            found = await _lookup_decided(stub, pb.LookupRequest(key=key))
            if found.outcome != pb.LOOKUP_OUTCOME_HIT or found.tier != expect_tier:
                raise RuntimeError(f"lookup after store on port {port} answered {found}")
    return digests


async def _lookup_decided(stub: Any, request: Any) -> Any:
    """A Lookup answered by its tiers: a degraded MISS (a warm read past its 50 ms deadline,
    as a freshly started sidecar on a loaded 2-core CI machine can answer) says nothing
    about the entry, so it is asked again, up to 20 times 0.25 s apart; the last answer
    is returned whatever it is, for the caller to judge."""
    for _ in range(20):
        found = await stub.Lookup(request, timeout=CALL_TIMEOUT_S)
        if not found.degraded:
            return found
        await asyncio.sleep(0.25)
    return found
