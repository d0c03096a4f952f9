"""A bounded soak: mixed traffic from several processes at saturation against one
`sidecar serve` on a real redis-server that is killed and restarted in the middle.

Every value encodes its key (b"value of <text>"), so each HIT is checked; every gRPC
status other than OK is counted by name, health is polled throughout, and the
sidecar's RSS is sampled after a warm-up and at the end. Used by tests/e2e/test_soak.py
(assertions) and bench.robustness (figures).

    python -m tests.support.soak worker TARGET SECONDS SEED   # one load process (JSON out)
"""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from infercache.v1 import admin_pb2 as admin_pb
from infercache.v1 import admin_pb2_grpc
from infercache.v1 import cache_pb2 as pb
from infercache_client import AsyncCacheClient

from tests.support.keys import TENANT, key
from tests.support.processes import REPO, RedisServer
from tests.support.sidecars import SidecarProcess, bearer, health_status

KEYS = 400
"""Distinct keys all workers share (so they contend for the same leases)."""
CONCURRENCY = 12
"""Calls each worker process keeps in flight."""
HIT = pb.LOOKUP_OUTCOME_HIT
WORKER = [sys.executable, "-m", "tests.support.soak", "worker"]


def value_of(text: str) -> bytes:
    """The only value a key with this text may ever be answered with."""
    return f"value of {text}".encode()


@dataclass
class SoakFigures:
    """What one soak saw."""

    seconds: float
    requests: int = 0
    hits: int = 0
    wrong_hits: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    """Non-OK gRPC statuses by name (data plane and Invalidate)."""
    health_checks: int = 0
    health_not_serving: int = 0
    rss_start_mib: float = 0.0
    rss_end_mib: float = 0.0

    @property
    def rss_growth_mib(self) -> float:
        """RSS at the end minus RSS after the warm-up."""
        return self.rss_end_mib - self.rss_start_mib


def rss_mib(pid: int) -> float:
    """VmRSS of a process in MiB (0 if unreadable)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


# -- one worker process -----------------------------------------------------------------


class _Worker:
    def __init__(self, client: AsyncCacheClient, rng: random.Random) -> None:
        self.client = client
        self.rng = rng
        self.out: Counter[str] = Counter()

    def _check(self, text: str, payload: bytes) -> None:
        self.out["hits"] += 1
        if payload != value_of(text):
            self.out["wrong_hits"] += 1

    async def one(self) -> None:
        rng, client = self.rng, self.client
        text = f"soak {rng.randrange(KEYS)}"
        k = key(text)
        op = rng.random()
        if op < 0.45:
            resp = await client.lookup(k, wait_ms=rng.choice((0, 0, 300)), timeout=10)
            if resp.outcome == HIT:
                self._check(text, resp.payload)
            elif resp.lease:
                await client.store(k, value_of(text), lease=resp.lease, timeout=10)
        elif op < 0.7:
            texts = [f"soak {rng.randrange(KEYS)}" for _ in range(8)]
            batch = await client.lookup_batch([key(t) for t in texts], timeout=10)
            for t, r in zip(texts, batch, strict=True):
                if r.outcome == HIT:
                    self._check(t, r.payload)
        else:
            stream = client.lookup_stream(k, timeout=10)
            header = await stream.header()
            if header.lookup.outcome == HIT:
                self._check(text, b"".join([c.data async for c in stream]))
            elif header.lookup.lease:
                value = value_of(text)
                async with client.store_stream(k, header.lookup.lease, timeout=10) as w:
                    await w.send(value[:8])
                    await w.send(value[8:])

    async def loop(self, end: float) -> None:
        while time.monotonic() < end:
            self.out["requests"] += 1
            try:
                await self.one()
            except grpc.aio.AioRpcError as exc:
                self.out[f"status:{exc.code().name}"] += 1


async def _work(target: str, seconds: float, seed: int) -> Counter[str]:
    end = time.monotonic() + seconds
    async with AsyncCacheClient(target) as client:
        workers = [_Worker(client, random.Random(seed * 1000 + i)) for i in range(CONCURRENCY)]
        await asyncio.gather(*(w.loop(end) for w in workers))
    total: Counter[str] = Counter()
    for w in workers:
        total.update(w.out)
    return total


# -- the orchestration --------------------------------------------------------------------


def _invalidate_and_check(proc: SidecarProcess, figures: SoakFigures, end: float) -> None:
    """Thread: health every 0.2 s, an Invalidate of every key every 3 s."""
    next_invalidate = time.monotonic() + 3
    with grpc.insecure_channel(proc.admin_target) as channel:
        admin = admin_pb2_grpc.AdminServiceStub(channel)
        while time.monotonic() < end:
            figures.health_checks += 1
            if health_status(proc.target, timeout_s=2.0) != 1:
                figures.health_not_serving += 1
            if time.monotonic() >= next_invalidate:
                next_invalidate += 3
                figures.requests += 1
                try:
                    admin.Invalidate(
                        admin_pb.InvalidateRequest(
                            selector=admin_pb.Selector(tenant=TENANT), reason="soak"
                        ),
                        metadata=bearer(),
                        timeout=10,
                    )
                except grpc.RpcError as exc:
                    figures.statuses[exc.code().name] += 1
            time.sleep(0.2)


def run_soak(seconds: float, workers: int = 3, warmup_s: float = 3.0) -> SoakFigures:
    """Soak one sidecar for `seconds` with `workers` load processes; Redis is killed at
    the middle and started again 2 s later (same port, empty: no persistence)."""
    figures = SoakFigures(seconds)
    redis = RedisServer()
    redis.start()
    # The KV tier is off: this traffic does not use it, and torch would only add memory.
    proc = SidecarProcess(redis.url, kv_enabled=False)
    loads: list[subprocess.Popen[bytes]] = []
    try:
        proc.wait_ready()
        loads = [
            subprocess.Popen(
                [*WORKER, proc.target, str(seconds), str(seed)],
                cwd=REPO,
                stdout=subprocess.PIPE,
            )
            for seed in range(workers)
        ]
        started = time.monotonic()
        end = started + seconds
        checker = threading.Thread(target=_invalidate_and_check, args=(proc, figures, end))
        checker.start()
        time.sleep(warmup_s)
        figures.rss_start_mib = rss_mib(proc.proc.pid)
        time.sleep(max(0.0, started + seconds / 2 - time.monotonic()))
        redis.kill()
        time.sleep(2)
        redis.start()
        checker.join()
        for p in loads:
            out, _ = p.communicate(timeout=60)
            counts = Counter(json.loads(out))
            figures.requests += counts.pop("requests", 0)
            figures.hits += counts.pop("hits", 0)
            figures.wrong_hits += counts.pop("wrong_hits", 0)
            for name, n in counts.items():
                figures.statuses[name.removeprefix("status:")] += n
        figures.rss_end_mib = rss_mib(proc.proc.pid)
    finally:
        for p in loads:
            if p.poll() is None:
                p.kill()
                p.wait()
        proc.stop()
        redis.stop()
    return figures


if __name__ == "__main__":
    if len(sys.argv) != 5 or sys.argv[1] != "worker":
        sys.exit(__doc__)
    counts = asyncio.run(_work(sys.argv[2], float(sys.argv[3]), int(sys.argv[4])))
    print(json.dumps(dict(counts)))
