"""grpc.health.v1 beside many open Watch calls: Check latency, then SIGTERM's exit."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from bench.harness.stats import percentile

CHECK_TIMEOUT_S = 1.0  # a Check that times out counts as this long


async def _watch(stub: health_pb2_grpc.HealthStub, opened: asyncio.Event) -> None:
    call = stub.Watch(health_pb2.HealthCheckRequest())
    try:
        async for _ in call:
            opened.set()
    except grpc.aio.AioRpcError:
        pass


async def _checks(target: str, n: int) -> list[float]:
    """Latency of `n` sequential Checks on their own channel, ms (timeouts count 1 s)."""
    samples = []
    async with grpc.aio.insecure_channel(target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        for _ in range(n):
            started = time.perf_counter()
            try:
                await stub.Check(health_pb2.HealthCheckRequest(), timeout=CHECK_TIMEOUT_S)
                samples.append((time.perf_counter() - started) * 1000)
            except grpc.aio.AioRpcError:
                samples.append(CHECK_TIMEOUT_S * 1000)
    return samples


async def under_watch(
    port: int, proc: subprocess.Popen[bytes], watches: int, checks: int, grace_s: float
) -> tuple[int, float, str, float]:
    """(watches answering, Check p99 ms, SIGTERM exit status, seconds to exit) with
    `watches` Watch calls open on 10 channels; SIGTERM is sent while they still are."""
    target = f"127.0.0.1:{port}"
    channels = [grpc.aio.insecure_channel(target) for _ in range(10)]
    events = [asyncio.Event() for _ in range(watches)]
    tasks = [
        asyncio.create_task(_watch(health_pb2_grpc.HealthStub(channels[i % 10]), e))
        for i, e in enumerate(events)
    ]
    try:
        await asyncio.wait([asyncio.create_task(e.wait()) for e in events], timeout=10)
        opened = sum(e.is_set() for e in events)
        p99 = percentile(await _checks(target, checks), 0.99)
        proc.send_signal(signal.SIGTERM)
        started = time.monotonic()
        try:
            code = str(await asyncio.to_thread(proc.wait, grace_s + 1))
        except subprocess.TimeoutExpired:
            code = "timeout"
        took = time.monotonic() - started
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for c in channels:
            await c.close()
    return opened, p99, code, took
