"""python -m bench.cluster [--smoke] [--rounds N] [--seconds S] [--concurrency C]

Two sidecar processes with the hot tier off (every hit is a warm hit), one on a
redis-server and one on a 3 + 3 Redis Cluster, filled with the same keys. Each round
measures, on each backend in turn, warm-hit Lookups per second (C concurrent callers)
and keys per second through LookupBatch (BATCH keys per call); the ratios are
cluster / single of the medians over the rounds, measured in the same run. Then the
failover drill (tests/support/failover.py) on the cluster: two sidecars under load,
the control slot's master and another master killed in turn.

The last line: cluster_warm_vs_single= batch_cluster_vs_single= failover_wrong_hits=
failover_lost_invalidations= failover_miss_window_s= (and the figures behind them).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time

from infercache.v1 import cache_pb2 as pb
from infercache_client import AsyncCacheClient, make_key

from bench.harness.report import print_summary
from bench.harness.usage import load_average
from tests.support.cluster import RedisClusterProcesses
from tests.support.failover import run_failover_drill
from tests.support.processes import RedisServer
from tests.support.sidecars import SidecarProcess

KEYS = 512
BATCH = 32
PAYLOAD = b"x" * 512


def bench_key(i: int) -> pb.CacheKey:
    return make_key(
        tenant="bench", model_version="fp-bench", prompt_version="p1", text=f"q{i}", temperature=0.0
    )


async def fill(target: str) -> None:
    """Store every bench key through the sidecar; every key must then be a warm HIT."""
    async with AsyncCacheClient(target) as c:
        for i in range(KEYS):
            miss = await c.lookup(bench_key(i), timeout=10)
            if miss.outcome == pb.LOOKUP_OUTCOME_MISS:
                await c.store(bench_key(i), PAYLOAD, lease=miss.lease, ttl_seconds=3600)
        found = await c.lookup_batch([bench_key(i) for i in range(KEYS)], timeout=30)
        hits = sum(r.outcome == pb.LOOKUP_OUTCOME_HIT and r.tier == pb.TIER_WARM for r in found)
        if hits != KEYS:
            raise RuntimeError(f"{hits} of {KEYS} keys are warm hits after the fill")


async def rate(target: str, seconds: float, concurrency: int, batch: int) -> tuple[float, int]:
    """(HITs per second, non-HIT answers) with `concurrency` callers for `seconds`;
    batch > 1 sends LookupBatch of that many keys."""
    hits = other = 0
    stop = time.monotonic() + seconds
    async with AsyncCacheClient(target) as c:

        async def caller(n: int) -> None:
            nonlocal hits, other
            i = n * 7919
            while time.monotonic() < stop:
                i += batch
                if batch == 1:
                    answers = [await c.lookup(bench_key(i % KEYS), timeout=5)]
                else:
                    keys = [bench_key((i + j) % KEYS) for j in range(batch)]
                    answers = await c.lookup_batch(keys, timeout=5)
                for r in answers:
                    if r.outcome == pb.LOOKUP_OUTCOME_HIT and r.payload == PAYLOAD:
                        hits += 1
                    else:
                        other += 1

        started = time.monotonic()
        await asyncio.gather(*(caller(n) for n in range(concurrency)))
        return hits / (time.monotonic() - started), other


def throughput(args: argparse.Namespace, single: str, cluster: str) -> dict[str, object]:
    """Warm-hit and batch rates per backend, rounds alternating which goes first."""
    rates: dict[tuple[str, str], list[float]] = {}
    misses = 0
    for r in range(args.rounds):
        order = [("single", single), ("cluster", cluster)]
        for name, target in order if r % 2 == 0 else reversed(order):
            for kind, batch, conc in (("warm", 1, args.concurrency), ("batch", BATCH, 4)):
                per_s, other = asyncio.run(rate(target, args.seconds, conc, batch))
                misses += other
                rates.setdefault((name, kind), []).append(per_s)
                print(f"round {r} {name:7} {kind:5} {per_s:10.0f} hits/s ({other} not hits)")
    med = {k: statistics.median(v) for k, v in rates.items()}
    return {
        "cluster_warm_vs_single": med[("cluster", "warm")] / med[("single", "warm")],
        "batch_cluster_vs_single": med[("cluster", "batch")] / med[("single", "batch")],
        "single_warm_hits_per_s": round(med[("single", "warm")]),
        "cluster_warm_hits_per_s": round(med[("cluster", "warm")]),
        "single_batch_keys_per_s": round(med[("single", "batch")]),
        "cluster_batch_keys_per_s": round(med[("cluster", "batch")]),
        "not_hits": misses,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cluster", description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="one short round (seconds)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=5.0, help="per measurement")
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args(argv)
    if args.smoke:
        args.rounds, args.seconds = 1, 1.0
    load0 = load_average()
    server = RedisServer()
    cluster = RedisClusterProcesses()
    sidecars: list[SidecarProcess] = []
    try:
        server.start()
        cluster.start()
        single_sc, cluster_sc = (
            SidecarProcess(url, hot_max_entries=0, uvloop="true", log_level="error")
            for url in (server.url, cluster.url)
        )
        sidecars += [single_sc, cluster_sc]
        for sc in sidecars:
            sc.wait_ready(timeout_s=90)
            asyncio.run(fill(sc.target))
        pairs = throughput(args, single_sc.target, cluster_sc.target)
        for sc in sidecars:
            sc.stop()
        sidecars.clear()
        drill_pair = [
            SidecarProcess(cluster.url, reclaim_keys_per_s=1, invalidate_wait_replicas=1)
            for _ in range(2)
        ]
        sidecars += drill_pair
        for sc in drill_pair:
            sc.wait_ready(timeout_s=90)
        report = run_failover_drill(cluster, drill_pair)
    finally:
        for sc in sidecars:
            sc.stop()
        cluster.stop()
        server.stop()
    print(
        f"failover: replica promoted within {report.promoted_s:.2f} s of a kill; "
        f"invalidations ok={report.invalidations_ok} failed={report.invalidations_failed}; "
        f"rule checks={report.checked_entries}; "
        f"lookups={sum(x.lookups for x in report.loads)} "
        f"degraded={sum(x.degraded for x in report.loads)} errors={report.errors}"
    )
    print(f"load average before/after: {load0} / {load_average()}")
    print_summary(
        {
            "cluster_warm_vs_single": pairs.pop("cluster_warm_vs_single"),
            "batch_cluster_vs_single": pairs.pop("batch_cluster_vs_single"),
            "failover_wrong_hits": report.wrong_hits,
            "failover_lost_invalidations": report.lost_invalidations,
            "failover_miss_window_s": report.miss_window_s,
            "failover_promoted_s": report.promoted_s,
            "failover_errors": report.errors,
            "failover_not_serving": report.not_serving,
            **pairs,
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
