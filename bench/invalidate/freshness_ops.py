"""The freshness half's worker ops: commit the unrelated rules and store the hot keys,
then drive hot-hit slices that alternate between the two sidecars (ABBA)."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Sequence
from typing import Any

from bench.harness.usage import cpu_seconds
from bench.harness.workers import Mark, Op
from bench.harness.workload import (
    CALL_TIMEOUT_S,
    CHANNEL_OPTIONS,
    PAYLOAD,
    TIER_HOT,
    lookup_requests,
    store_all,
)
from bench.invalidate.sidecars import unrelated_selectors


async def setup_hot(
    mark: Mark, port: int, admin_port: int, token: str, n_rules: int, n_shapes: int
) -> int:
    """Commit the unrelated rules, then store every hot key; returns the rules committed."""
    import grpc
    from infercache.v1 import admin_pb2 as apb
    from infercache.v1 import admin_pb2_grpc

    metadata = (("authorization", f"Bearer {token}"),)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{admin_port}") as ach:
        await asyncio.wait_for(ach.channel_ready(), 30)
        admin = admin_pb2_grpc.AdminServiceStub(ach)
        for sel in unrelated_selectors(n_rules, n_shapes):
            selector = apb.Selector(
                tenant=sel.get("tenant", ""),
                model_version=sel.get("model_version", ""),
                adapter_version=sel.get("adapter_version", ""),
                prompt_version=sel.get("prompt_version", ""),
            )
            await admin.Invalidate(
                apb.InvalidateRequest(selector=selector, reason="bench: unrelated rule"),
                metadata=metadata,
                timeout=CALL_TIMEOUT_S,
            )
    # Stored after the rules: each entry's epoch is newer, so none of them is dead.
    await store_all(port, TIER_HOT)
    return n_rules


Send = Callable[[Any], Any]


async def open_hot(port: int) -> tuple[Any, Send]:
    """A channel to a sidecar and its Lookup callable (with the per-call deadline)."""
    import grpc
    from infercache.v1 import cache_pb2_grpc

    ch = grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=CHANNEL_OPTIONS)
    await asyncio.wait_for(ch.channel_ready(), 30)
    stub = cache_pb2_grpc.CacheServiceStub(ch)
    return ch, functools.partial(stub.Lookup, timeout=CALL_TIMEOUT_S)


async def hot_slice(
    send: Send, reqs: Sequence[Any], pid: int, concurrency: int, duration_s: float
) -> dict[str, Any]:
    """`concurrency` tasks in a closed loop of hot-hit Lookups for duration_s, then drained.

    Everything is counted, from the first call to the last answer, so a slice's ops, time
    and both processes' CPU (the server's from /proc) belong to it alone.
    """
    from infercache.v1 import cache_pb2 as pb

    hit, size, n = pb.LOOKUP_OUTCOME_HIT, len(PAYLOAD), len(reqs)
    clock = time.perf_counter_ns
    latencies: list[int] = []
    counts = {"ops": 0, "errors": 0}
    first_error: list[str] = []
    stopping = False

    async def driver(i: int) -> None:
        while not stopping:
            req = reqs[i % n]
            i += concurrency
            t0 = clock()
            try:
                resp = await send(req)
                ok = resp.outcome == hit and resp.tier == TIER_HOT and len(resp.payload) == size
                if not ok and not first_error:
                    first_error.append(f"not a hot HIT of {size} B: {resp.outcome=} {resp.tier=}")
            except Exception as exc:
                ok = False
                if not first_error:
                    first_error.append(f"{type(exc).__name__}: {exc}"[:500])
                await asyncio.sleep(0.001)
            if ok:
                latencies.append(clock() - t0)
                counts["ops"] += 1
            else:
                counts["errors"] += 1

    srv0, cli0, t0 = cpu_seconds(pid), time.process_time(), time.perf_counter()
    tasks = [asyncio.create_task(driver(i)) for i in range(concurrency)]
    await asyncio.sleep(duration_s)
    stopping = True
    await asyncio.gather(*tasks)
    return {
        "ops": counts["ops"],
        "errors": counts["errors"],
        "first_error": first_error[0] if first_error else "",
        "elapsed_s": time.perf_counter() - t0,
        "server_cpu_s": cpu_seconds(pid) - srv0,
        "client_cpu_s": time.process_time() - cli0,
        "latencies_ns": latencies,
    }


async def drive_interleaved(
    mark: Mark,
    targets: list[tuple[int, int]],
    concurrency: int,
    warmup_s: float,
    slices: int,
    slice_s: float,
) -> list[dict[str, Any]]:
    """Hot hits at two (port, server pid) targets in turn, switching every slice (ABBA)."""
    reqs = lookup_requests()
    opened = [await open_hot(port) for port, _ in targets]
    out: list[dict[str, Any]] = []
    try:
        for j, (_, send) in enumerate(opened):
            await hot_slice(send, reqs, targets[j][1], concurrency, warmup_s)
        mark("start")
        for k in range(slices):
            pair, pos = divmod(k, 2)
            j = pos if pair % 2 == 0 else 1 - pos  # 0 1 1 0 0 1 1 0 ...
            x = await hot_slice(opened[j][1], reqs, targets[j][1], concurrency, slice_s)
            out.append({"pair": pair, "target": j, **x})
        mark("end")
    finally:
        for ch, _ in opened:
            await ch.close()
    return out


OPS: dict[str, Op] = {"setup_hot": setup_hot, "drive_interleaved": drive_interleaved}
