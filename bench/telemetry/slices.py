"""The telemetry benchmark's worker ops: store the bench keys, then interleave slices of
hot-hit Lookups across the sidecars."""

from __future__ import annotations

import asyncio
import functools
import time
from typing import Any

from bench.harness.usage import cpu_seconds
from bench.harness.workers import Mark, Op
from bench.harness.workload import CALL_TIMEOUT_S, CHANNEL_OPTIONS, PAYLOAD, lookup_requests
from bench.lookup.driver import setup_sidecar


async def interleave(
    mark: Mark,
    targets: list[tuple[int, int]],
    concurrency: int,
    slice_s: float,
    rounds: int,
    warmup_s: float,
) -> list[list[dict[str, float]]]:
    """Hot-hit Lookups against each (port, server pid) in turn, `slice_s` each, for `rounds`
    rounds (odd rounds in reverse order) after a `warmup_s` slice each; per round and
    target: ops, errors, seconds, server CPU seconds.

    Adjacent slices see the same machine, so the ratio of two targets within a round is
    steady even where neighbours make absolute rates swing (a shared 2-core box).
    """
    import grpc
    from infercache.v1 import cache_pb2 as pb
    from infercache.v1 import cache_pb2_grpc

    reqs = lookup_requests()
    hit, n = pb.LOOKUP_OUTCOME_HIT, len(reqs)
    channels = [
        grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=CHANNEL_OPTIONS)
        for port, _ in targets
    ]
    sends = []
    for ch in channels:
        await ch.channel_ready()
        sends.append(
            functools.partial(cache_pb2_grpc.CacheServiceStub(ch).Lookup, timeout=CALL_TIMEOUT_S)
        )

    async def one_slice(send: Any, pid: int, seconds: float) -> dict[str, float]:
        ops = errors = 0
        stopping = False

        async def driver(i: int) -> None:
            nonlocal ops, errors
            while not stopping:
                resp = await send(reqs[i % n])
                i += concurrency
                if resp.outcome == hit and len(resp.payload) == len(PAYLOAD):
                    ops += 1
                else:
                    errors += 1

        cpu0, t0 = cpu_seconds(pid), time.perf_counter()
        tasks = [asyncio.create_task(driver(i)) for i in range(concurrency)]
        await asyncio.sleep(seconds)
        stopping = True
        await asyncio.gather(*tasks)
        return {
            "ops": ops,
            "errors": errors,
            "elapsed_s": time.perf_counter() - t0,
            "server_cpu_s": cpu_seconds(pid) - cpu0,
        }

    try:
        for send, (_, pid) in zip(sends, targets, strict=True):
            await one_slice(send, pid, warmup_s)
        out = []
        for r in range(rounds):
            order = list(range(len(targets)))
            if r % 2:
                order.reverse()
            row: list[dict[str, float]] = [{} for _ in targets]
            for j in order:
                row[j] = await one_slice(sends[j], targets[j][1], slice_s)
            out.append(row)
        return out
    finally:
        for ch in channels:
            await ch.close()


OPS: dict[str, Op] = {"setup": setup_sidecar, "interleave": interleave}
