"""The Invalidate-latency half's worker ops: time Invalidate RPCs, and the estimate's own
Redis reads."""

from __future__ import annotations

import asyncio
import statistics
import time

from bench.harness.workers import Mark, Op
from bench.harness.workload import CALL_TIMEOUT_S
from bench.invalidate.sidecars import KEY_PREFIX


async def invalidate_series(
    mark: Mark,
    targets: list[tuple[int, str]],
    token: str,
    warmup: int,
    repeats: int,
    pause_s: float,
) -> list[dict[str, list[int]]]:
    """Time Invalidate(model_version=...) on each (admin port, model) in turn."""
    import grpc
    from infercache.v1 import admin_pb2 as apb
    from infercache.v1 import admin_pb2_grpc

    metadata = (("authorization", f"Bearer {token}"),)
    channels = [grpc.aio.insecure_channel(f"127.0.0.1:{port}") for port, _ in targets]
    out: list[dict[str, list[int]]] = [{"latencies_ns": [], "estimates": []} for _ in targets]
    try:
        stubs = []
        for ch in channels:
            await asyncio.wait_for(ch.channel_ready(), 30)
            stubs.append(admin_pb2_grpc.AdminServiceStub(ch))
        for r in range(warmup + repeats):
            if r == warmup:
                mark("start")
            order = list(range(len(targets)))
            if r % 2:
                order.reverse()  # alternate which size goes first
            for j in order:
                # Let the previous invalidation's pub/sub refresh settle first.
                await asyncio.sleep(pause_s)
                req = apb.InvalidateRequest(
                    selector=apb.Selector(model_version=targets[j][1]),
                    reason=f"bench.invalidate repeat {r}",
                )
                t0 = time.perf_counter_ns()
                resp = await stubs[j].Invalidate(req, metadata=metadata, timeout=CALL_TIMEOUT_S)
                elapsed = time.perf_counter_ns() - t0
                if r >= warmup:
                    out[j]["latencies_ns"].append(elapsed)
                    out[j]["estimates"].append(int(resp.record.estimated_entries))
        mark("end")
    finally:
        for ch in channels:
            await ch.close()
    return out


async def estimate_reads(mark: Mark, ports: list[int], repeats: int) -> list[dict[str, float]]:
    """Time the reads Invalidator._estimate makes, straight against each Redis."""
    from sidecar import entries
    from sidecar.backends.redis.warm import RedisWarmTier
    from sidecar.invalidation.invalidator import _SAMPLE
    from sidecar.keys import dims_from_material

    out = []
    for port in ports:
        tier = RedisWarmTier(
            f"redis://127.0.0.1:{port}/0",
            key_prefix=KEY_PREFIX,
            read_timeout_s=5.0,
            write_timeout_s=5.0,
        )
        scan, size, match = [], [], []
        sample = 0
        try:
            for _ in range(repeats):
                t0 = time.perf_counter()
                _, page = await tier.scan_page(0, _SAMPLE)
                t1 = time.perf_counter()
                await tier.approx_entries()
                t2 = time.perf_counter()
                for _, head in page:  # what _estimate does with the sample
                    peeked = entries.peek(head)
                    if peeked:
                        dims_from_material(peeked[1])
                t3 = time.perf_counter()
                scan.append(t1 - t0)
                size.append(t2 - t1)
                match.append(t3 - t2)
                sample = len(page)
        finally:
            await tier.close()
        out.append(
            {
                "scan_ms": statistics.median(scan) * 1e3,
                "dbsize_ms": statistics.median(size) * 1e3,
                "match_ms": statistics.median(match) * 1e3,
                "sample": sample,
            }
        )
    return out


OPS: dict[str, Op] = {"invalidate": invalidate_series, "estimate_reads": estimate_reads}
