"""Invalidate latency against the number of entries present (the O(1) question)."""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.harness.procs import redis_server, start_all
from bench.harness.profiling import PySpy
from bench.harness.report import print_head
from bench.harness.stats import percentile
from bench.harness.usage import cpu_seconds
from bench.harness.workers import Worker
from bench.harness.workload import PAYLOAD
from bench.invalidate.sidecars import KEY_PREFIX, label, sidecar_server

POPULATE_BATCH = 1000
ENTRY_TTL_S = 3600


def populate(port: int, n: int, model_version: str, entry_bytes: int) -> float:
    """Write n real entries straight into Redis; returns the seconds it took."""
    import redis

    from sidecar import entries
    from sidecar.backends.redis.client import RedisKeys
    from sidecar.keys import InputKind, KeyRequest, build_key

    keys = RedisKeys(KEY_PREFIX)
    payload = (PAYLOAD * (entry_bytes // len(PAYLOAD) + 1))[:entry_bytes]
    now_ms = time.time_ns() // 1_000_000
    started = time.perf_counter()
    client = redis.Redis(host="127.0.0.1", port=port)
    try:
        for first in range(0, n, POPULATE_BATCH):
            pipe = client.pipeline(transaction=False)
            for i in range(first, min(n, first + POPULATE_BATCH)):
                key = build_key(
                    KeyRequest(
                        tenant=f"tenant-{i % 8}",
                        model_version=model_version,
                        prompt_version="inv-bench-v1",
                        input=f"populated entry {i}: summarise the ticket and propose a step",
                        input_kind=InputKind.TEXT,
                    )
                )
                entry = entries.Entry(key.material, payload, now_ms, ENTRY_TTL_S)
                pipe.set(keys.entry(key.digest), entries.encode(entry), px=ENTRY_TTL_S * 1000)
            pipe.execute()
    finally:
        client.close()
    return time.perf_counter() - started


def hold_reclaim_lock(port: int) -> None:
    """Take the fleet's reclaim lock as a foreign owner: no sidecar will run a reclaim pass."""
    import redis

    from sidecar.backends.redis.client import RedisKeys

    client = redis.Redis(host="127.0.0.1", port=port)
    try:
        client.set(RedisKeys(KEY_PREFIX).meta("lock:reclaim"), "bench-invalidate", px=3_600_000)
    finally:
        client.close()


def redis_work(port: int) -> dict[str, tuple[int, int]]:
    """Per command: (calls, µs spent executing them) so far, from INFO commandstats."""
    import redis

    client = redis.Redis(host="127.0.0.1", port=port)
    try:
        stats: dict[str, dict[str, Any]] = client.info("commandstats")
    finally:
        client.close()
    return {
        k.removeprefix("cmdstat_"): (int(v["calls"]), int(v["usec"]))
        for k, v in stats.items()
        if k != "cmdstat_info"
    }


def work_delta(
    before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]], per: int
) -> dict[str, tuple[float, float]]:
    """Per command: (calls, µs) between two snapshots, divided by `per`."""
    out = {}
    for cmd, (calls, usec) in after.items():
        c0, u0 = before.get(cmd, (0, 0))
        if calls > c0:
            out[cmd] = ((calls - c0) / per, (usec - u0) / per)
    return out


def count_entries(port: int) -> int:
    """Entry keys present (a full SCAN; every populated entry matches the bench selector)."""
    import redis

    from sidecar.backends.redis.client import RedisKeys

    client = redis.Redis(host="127.0.0.1", port=port)
    try:
        pattern = RedisKeys(KEY_PREFIX).entry_pattern
        return sum(1 for _ in client.scan_iter(match=pattern, count=10_000))
    finally:
        client.close()


@dataclass
class InvalidateResult:
    """Invalidate figures for one size."""

    size: int
    true_before: int
    true_after: int
    populate_s: float
    latencies_ms: list[float]
    estimates: list[int]
    reads: dict[str, float]
    sidecar_cpu_ms: float  # per timed Invalidate, from /proc
    redis_by_cmd: dict[str, tuple[float, float]]  # per timed Invalidate: (calls, µs)

    @property
    def redis_calls(self) -> float:
        """Redis commands per timed Invalidate."""
        return sum(c for c, _ in self.redis_by_cmd.values())

    @property
    def redis_us(self) -> float:
        """Redis-side µs per timed Invalidate."""
        return sum(u for _, u in self.redis_by_cmd.values())

    @property
    def p50(self) -> float:
        """Median latency, ms."""
        return percentile(self.latencies_ms, 0.50)

    @property
    def p99(self) -> float:
        """99th percentile latency (nearest rank), ms."""
        return percentile(self.latencies_ms, 0.99)

    @property
    def estimate(self) -> int:
        """Median estimated_entries of the timed Invalidates."""
        return round(statistics.median(self.estimates))


def bench_invalidate(
    args: argparse.Namespace, worker: Worker, token: str, tmp: str
) -> list[InvalidateResult]:
    """Populate one Redis per size, serve each with a sidecar, time the Invalidate series."""
    sizes = sorted(int(float(s)) for s in args.sizes.split(","))
    with contextlib.ExitStack() as stack:
        redises = [redis_server(tempfile.mkdtemp(dir=tmp)) for _ in sizes]
        start_all(stack, redises)
        populated: list[float] = []
        for n, rs in zip(sizes, redises, strict=True):
            populated.append(populate(rs.port, n, f"fp1-inv-{label(n)}", args.entry_bytes))
            if not args.reclaim:
                hold_reclaim_lock(rs.port)
            print(f"# populated {n:,} entries in {populated[-1]:.1f} s", file=sys.stderr)
        true_before = [count_entries(rs.port) for rs in redises]
        sidecars = [
            sidecar_server(
                f"sidecar-{label(n)}",
                token,
                args.uvloop,
                "--redis-url",
                f"redis://127.0.0.1:{rs.port}/0",
            )
            for n, rs in zip(sizes, redises, strict=True)
        ]
        start_all(stack, sidecars)
        targets = [
            (sc.ports[1], f"fp1-inv-{label(n)}") for n, sc in zip(sizes, sidecars, strict=True)
        ]
        spy: list[PySpy] = []
        cpu: dict[str, list[float]] = {}
        work: dict[str, list[dict[str, tuple[int, int]]]] = {}

        def on_mark(what: str) -> None:
            if spy and what == "end":
                spy.pop().stop()
            # Both sidecars and Redises are measured across the whole interleaved series:
            # each only works for its own Invalidates (plus a refresh every bound/3).
            cpu[what] = [cpu_seconds(sc.pid) for sc in sidecars]
            work[what] = [redis_work(rs.port) for rs in redises]
            if args.py_spy and what == "start":
                out = Path(args.py_spy) / "invalidate-largest.txt"
                spy.append(PySpy(sidecars[-1].pid, out, rate=500, native=True))

        series = worker.call(
            "invalidate", targets, token, args.inv_warmup, args.repeats, 0.05, on_mark=on_mark
        )
        for sc in sidecars:
            sc.check_alive()
        reads = worker.call("estimate_reads", [rs.port for rs in redises], 20)
        true_after = [count_entries(rs.port) for rs in redises]
    return [
        InvalidateResult(
            size=n,
            true_before=true_before[i],
            true_after=true_after[i],
            populate_s=populated[i],
            latencies_ms=[x / 1e6 for x in series[i]["latencies_ns"]],
            estimates=series[i]["estimates"],
            reads=reads[i],
            sidecar_cpu_ms=(cpu["end"][i] - cpu["start"][i]) * 1e3 / args.repeats,
            redis_by_cmd=work_delta(work["start"][i], work["end"][i], args.repeats),
        )
        for i, n in enumerate(sizes)
    ]


def print_invalidate(results: list[InvalidateResult], goal: float) -> str:
    """The tables; returns the ratio key's name."""
    print_head(
        f"{'entries':>8} {'true':>9} {'estimate':>9} {'est min-max':>15} {'err':>6}"
        f" {'n':>4} {'p50 ms':>7} {'p99 ms':>7} {'mean ms':>7} {'min ms':>7}"
    )
    for r in results:
        err = (r.estimate - r.true_before) / r.true_before * 100 if r.true_before else 0.0
        spread = f"{min(r.estimates):,}-{max(r.estimates):,}"
        print(
            f"{label(r.size):>8} {r.true_before:>9,} {r.estimate:>9,} {spread:>15} {err:>5.1f}%"
            f" {len(r.latencies_ms):>4} {r.p50:>7.2f} {r.p99:>7.2f}"
            f" {statistics.fmean(r.latencies_ms):>7.2f} {min(r.latencies_ms):>7.2f}"
        )
    print()
    print("# work per timed Invalidate, and the estimate's reads timed on their own")
    print_head(
        f"{'entries':>8} {'sidecar cpu ms':>14} {'redis cmds':>10} {'redis µs':>9}"
        f" {'est: scan+heads ms':>18} {'dbsize ms':>9} {'sample':>6}"
    )
    for r in results:
        print(
            f"{label(r.size):>8} {r.sidecar_cpu_ms:>14.2f} {r.redis_calls:>10.1f}"
            f" {r.redis_us:>9.0f} {r.reads['scan_ms']:>18.2f} {r.reads['dbsize_ms']:>9.2f}"
            f" {r.reads['sample']:>6.0f}"
        )
    for r in results:
        top = sorted(r.redis_by_cmd.items(), key=lambda kv: -kv[1][1])[:6]
        text = ", ".join(f"{cmd} {c:.1f}x {u:.0f} µs" for cmd, (c, u) in top)
        print(f"# {label(r.size)} Redis per Invalidate: {text}")
    lo, hi = results[0], results[-1]
    key = f"invalidate_{label(hi.size)}_vs_{label(lo.size)}"
    ratio = hi.p50 / lo.p50
    verdict = "met" if ratio <= goal else "MISSED"
    print(
        f"# {key} = {ratio:.3f} (p50 ratio; goal <= {goal}: {verdict});"
        f" sidecar CPU ratio {hi.sidecar_cpu_ms / lo.sidecar_cpu_ms:.3f},"
        f" Redis µs ratio {hi.redis_us / lo.redis_us:.3f}"
    )
    for r in results:
        if r.true_after != r.true_before:
            print(
                f"# {label(r.size)}: {r.true_before - r.true_after:,} entries reclaimed meanwhile"
            )
    return key
