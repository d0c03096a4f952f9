"""Waiter attack: many Lookups with wait_ms on a key whose holder never stores, and a
normal Lookup's latency beside them (p99 under attack / p99 before it), on a sidecar
of its own with a real redis-server (where each look at a held key is a round trip).

The attackers run in their own process, so the probes' client is not the one juggling
the attack's calls:

    python -m bench.robustness.waiters TARGET WAITERS WAIT_MS   # the attacking process
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time

import grpc
from infercache.v1 import cache_pb2 as pb
from infercache_client import AsyncCacheClient

from bench.harness.stats import percentile
from tests.support.keys import key
from tests.support.processes import RedisServer
from tests.support.sidecars import SidecarProcess

ATTACKER = [sys.executable, "-m", "bench.robustness.waiters"]


def _key(text: str) -> pb.CacheKey:
    return key(text, tenant="bench")


HELD = _key("a key whose holder never stores")


async def _probe_ms(client: AsyncCacheClient, k: pb.CacheKey, seconds: float) -> list[float]:
    """Latencies (ms) of sequential Lookups of `k` for `seconds`."""
    out: list[float] = []
    end = time.perf_counter() + seconds
    while (started := time.perf_counter()) < end:
        await client.lookup(k, timeout=10)
        out.append((time.perf_counter() - started) * 1000)
    return out


def waiter_attack(waiters: int, wait_ms: int, probe_s: float) -> tuple[float, float, float]:
    """(baseline p99 ms, p99 ms under attack, slowest waiter's answer ms).

    The baseline is `probe_s` of probes before the attack and as much after it (a
    shared machine's noise drifts); the attacked window is `probe_s` from 0.5 wait_ms
    on, once the waiters are parked and before their wait ends."""
    redis = RedisServer()
    redis.start()
    proc = SidecarProcess(redis.url, kv_enabled=False, lease_ttl_s=wait_ms // 1000 + 60)
    try:
        proc.wait_ready()
        return asyncio.run(_measure(proc.target, waiters, wait_ms, probe_s))
    finally:
        proc.stop()
        redis.stop()


async def _measure(
    target: str, waiters: int, wait_ms: int, probe_s: float
) -> tuple[float, float, float]:
    async with AsyncCacheClient(target) as client:
        probe = _key("a stored key, looked up normally")
        miss = await client.lookup(probe)
        if miss.lease:
            await client.store(probe, b"answer", lease=miss.lease)
        baseline = await _probe_ms(client, probe, probe_s)
        await client.lookup(HELD)  # take the hold, and never store
        attack = await asyncio.create_subprocess_exec(
            *ATTACKER, target, str(waiters), str(wait_ms), stdout=asyncio.subprocess.PIPE
        )
        # Probe once every waiter is parked (the attacker has started and sent them),
        # well before their wait ends.
        await asyncio.sleep(wait_ms * 0.5 / 1000)
        attacked = await _probe_ms(client, probe, min(probe_s, wait_ms * 0.4 / 1000))
        out, _ = await attack.communicate()
        baseline += await _probe_ms(client, probe, probe_s)
    return percentile(baseline, 0.99), percentile(attacked, 0.99), float(out.strip() or "nan")


async def _attack(target: str, waiters: int, wait_ms: int) -> float:
    async def one(client: AsyncCacheClient) -> float:
        started = time.perf_counter()
        with contextlib.suppress(grpc.aio.AioRpcError):
            await client.lookup(HELD, wait_ms=wait_ms, timeout=wait_ms / 1000 + 30)
        return (time.perf_counter() - started) * 1000

    async with AsyncCacheClient(target) as client:
        return max(await asyncio.gather(*(one(client) for _ in range(waiters))))


if __name__ == "__main__":
    print(asyncio.run(_attack(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))))
