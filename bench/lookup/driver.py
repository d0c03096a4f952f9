"""The lookup benchmark's worker ops: store the bench keys in a sidecar, and drive one
cell (N concurrent asyncio tasks in a closed loop over one gRPC channel or one
redis.asyncio pool), checking every answer."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from bench.harness.workers import Mark, Op
from bench.harness.workload import (
    CALL_TIMEOUT_S,
    CHANNEL_OPTIONS,
    N_KEYS,
    PAYLOAD,
    lookup_requests,
    store_all,
)
from bench.lookup.scenarios import BATCH, DEGRADED, Cell


async def setup_sidecar(mark: Mark, port: int, expect_tier: int, redis_port: int) -> list[bytes]:
    """Store every bench key with the 1 KiB payload and check a Lookup hits it.

    With redis_port, return the Redis keys the sidecar stored the entries under (found
    by their digest, whatever the sidecar's key naming), for the redis-get scenario.
    """
    digests = await store_all(port, expect_tier)
    if not redis_port:
        return []
    import redis.asyncio as aioredis

    r = aioredis.Redis(host="127.0.0.1", port=redis_port)
    try:
        names = [k async for k in r.scan_iter(count=1000)]
    finally:
        await r.aclose()
    by_digest = {d.hex().encode(): [k for k in names if d.hex().encode() in k] for d in digests}
    missing = [h for h, ks in by_digest.items() if len(ks) != 1]
    if missing:
        raise RuntimeError(f"no single Redis key holds the entry of digest {missing[0]!r}")
    return [ks[0] for ks in by_digest.values()]


async def run_cell(mark: Mark, cell: Cell) -> dict[str, Any]:
    """Drive `cell.concurrency` tasks in a closed loop; measure the window after warm-up
    (marked "start" and "end", so the bench reads the server's CPU over exactly it)."""
    closers: list[Callable[[], Awaitable[Any]]] = []
    send: Callable[[Any], Awaitable[Any]]
    # check(answer) -> "" (a good hit), DEGRADED (a MISS because a tier failed or ran
    # past its deadline: the sidecar's designed fallback) or what was wrong.
    check: Callable[[Any], str]
    if cell.kind == "redis_get":
        import redis.asyncio as aioredis

        r = aioredis.Redis(host="127.0.0.1", port=cell.port, max_connections=cell.concurrency)
        closers.append(r.aclose)
        reqs: Sequence[Any] = cell.redis_keys
        send = r.get

        def check(v: Any) -> str:
            return "" if v is not None and len(v) >= len(PAYLOAD) else f"GET answered {v!r:.60}"
    else:
        import grpc
        from infercache.v1 import cache_pb2 as pb
        from infercache.v1 import cache_pb2_grpc

        ch = grpc.aio.insecure_channel(f"127.0.0.1:{cell.port}", options=CHANNEL_OPTIONS)
        closers.append(ch.close)
        await ch.channel_ready()
        stub = cache_pb2_grpc.CacheServiceStub(ch)
        hit, miss = pb.LOOKUP_OUTCOME_HIT, pb.LOOKUP_OUTCOME_MISS
        tier, size = cell.expect_tier, len(PAYLOAD)

        def verdict(resp: Any) -> str:
            if (
                resp.outcome == hit
                and (not tier or resp.tier == tier)
                and len(resp.payload) == size
            ):
                return ""
            if resp.outcome == miss and resp.degraded:
                return DEGRADED
            return (
                f"outcome={resp.outcome} tier={resp.tier} degraded={resp.degraded}"
                f" payload={len(resp.payload)} B (expected a HIT of {size} B from tier {tier})"
            )

        lookups = lookup_requests()
        if cell.kind == "lookup":
            reqs, send, check = (
                lookups,
                functools.partial(stub.Lookup, timeout=CALL_TIMEOUT_S),
                verdict,
            )
        else:
            reqs = [
                pb.LookupBatchRequest(requests=lookups[i : i + BATCH])
                for i in range(0, N_KEYS, BATCH)
            ]
            send = functools.partial(stub.LookupBatch, timeout=CALL_TIMEOUT_S)

            def check(resp: Any) -> str:
                rs = resp.responses
                if len(rs) != BATCH:
                    return f"{len(rs)} responses to a batch of {BATCH}"
                worst = ""
                for x in rs:
                    v = verdict(x)
                    if v and v != DEGRADED:
                        return v
                    worst = worst or v
                return worst

    latencies: list[int] = []
    counts = {"ops": 0, "errors": 0, DEGRADED: 0}
    first_error: list[str] = []
    measuring = False
    stopping = False
    n = len(reqs)
    clock = time.perf_counter_ns

    async def driver(i: int) -> None:
        while not stopping:
            req = reqs[i % n]
            i += cell.concurrency
            t0 = clock()
            try:
                wrong = check(await send(req))
            except Exception as exc:
                wrong = f"{type(exc).__name__}: {exc}"[:500]
                await asyncio.sleep(0.001)
            if measuring:
                if not wrong:
                    latencies.append(clock() - t0)
                    counts["ops"] += 1
                elif wrong == DEGRADED:
                    counts[DEGRADED] += 1
                else:
                    counts["errors"] += 1
                    if not first_error:
                        first_error.append(wrong)

    try:
        tasks = [asyncio.create_task(driver(i)) for i in range(cell.concurrency)]
        await asyncio.sleep(cell.warmup_s)
        measuring = True
        mark("start")
        t0, cpu0 = time.perf_counter(), time.process_time()
        await asyncio.sleep(cell.duration_s)
        measuring = False
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        mark("end")
        stopping = True
        await asyncio.gather(*tasks)
    finally:
        for close in closers:
            await close()
    return {
        "ops": counts["ops"],
        "errors": counts["errors"],
        "degraded": counts[DEGRADED],
        "first_error": first_error[0] if first_error else "",
        "elapsed_s": elapsed,
        "cpu_s": cpu,
        "latencies_ns": latencies,
    }


OPS: dict[str, Op] = {"setup": setup_sidecar, "cell": run_cell}
