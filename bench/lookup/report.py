"""The lookup benchmark's figures: one Result per cell and round, the table, the summary."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bench.harness.report import print_head
from bench.harness.stats import median, percentile
from bench.harness.usage import Usage
from bench.lookup.scenarios import BASE_RATIOS, BATCH, RATIOS, Scenario


@dataclass(frozen=True, slots=True)
class Result:
    """One cell's aggregated figures."""

    ops: int
    ops_per_s: float
    p50_us: float
    p99_us: float
    server_cpu: float  # cores (1.0 = one core busy)
    server_system: float  # the kernel's share of server_cpu
    server_syscalls: int  # read/write-type syscalls (/proc/PID/io syscr + syscw)
    client_cpu: float
    errors: int
    degraded: int
    first_error: str

    @classmethod
    def merge(cls, parts: list[dict[str, Any]], server: Usage) -> Result:
        """The workers' parts of one cell, with the server's usage over its window."""
        lat = [x / 1000 for p in parts for x in p["latencies_ns"]]
        elapsed = max(p["elapsed_s"] for p in parts)
        return cls(
            ops=sum(p["ops"] for p in parts),
            ops_per_s=sum(p["ops"] / p["elapsed_s"] for p in parts),
            p50_us=percentile(lat, 0.50),
            p99_us=percentile(lat, 0.99),
            server_cpu=(server.user_s + server.system_s) / elapsed,
            server_system=server.system_s / max(server.user_s + server.system_s, 1e-9),
            server_syscalls=server.syscalls,
            client_cpu=sum(p["cpu_s"] for p in parts) / elapsed,
            errors=sum(p["errors"] for p in parts),
            degraded=sum(p["degraded"] for p in parts),
            first_error=next((p["first_error"] for p in parts if p["first_error"]), ""),
        )

    @property
    def server_us_per_op(self) -> float:
        """Server CPU µs per RPC."""
        return self.server_cpu * 1e6 / self.ops_per_s if self.ops_per_s else float("nan")

    @property
    def server_syscalls_per_op(self) -> float:
        """Server read/write syscalls per RPC."""
        return self.server_syscalls / self.ops if self.ops else float("nan")


class Results:
    """Every round's Result per (scenario, concurrency); a cell's figures are its best round.

    Neighbours on a shared machine only ever slow a cell down, so the fastest round is
    the closest to the uncontended figure; the per-round ratios are printed as well.
    """

    def __init__(self) -> None:
        self.rounds: dict[tuple[str, int], list[Result]] = {}

    def add(self, name: str, c: int, r: Result) -> None:
        """Record one round of a cell."""
        self.rounds.setdefault((name, c), []).append(r)

    def cell(self, name: str, c: int) -> Result | None:
        """The round with the most RPC/s (its latencies and CPU figures come with it)."""
        return max(self.rounds.get((name, c), []), key=lambda r: r.ops_per_s, default=None)

    def per_round(self, a: str, b: str, c: int, *, cpu: bool = False) -> list[float]:
        """a/b of each round: both cells ran back to back, so drift cancels out.

        RPC/s of a over RPC/s of b, or with cpu=True b's server µs/RPC over a's.
        """
        pairs = zip(self.rounds.get((a, c), []), self.rounds.get((b, c), []), strict=False)
        return [_ratio(ra, rb, cpu) for ra, rb in pairs]

    def ratio(self, a: str, b: str, c: int, *, cpu: bool = False) -> float:
        """Best round of a against best round of b (RPC/s, or b's µs/RPC over a's)."""
        ra, rb = self.cell(a, c), self.cell(b, c)
        if ra is None or rb is None:
            return float("nan")
        return _ratio(ra, rb, cpu)


def _ratio(ra: Result, rb: Result, cpu: bool) -> float:
    if cpu:
        x, y = rb.server_us_per_op, ra.server_us_per_op
    else:
        x, y = ra.ops_per_s, rb.ops_per_s
    return x / y if y else float("nan")


def _fmt_rate(x: float) -> str:
    return f"{x:,.0f}" if x == x else "-"


def print_table(
    results: Results, concurrencies: Sequence[int], scenarios: Sequence[Scenario]
) -> None:
    """One row per scenario and concurrency, with its ratio to the baseline."""
    print_head(
        f"{'scenario':<18} {'conc':>4} {'RPC/s':>9} {'keys/s':>9} {'p50 µs':>9} {'p99 µs':>9}"
        f" {'srv cpu':>7} {'srv µs/RPC':>10} {'kernel':>6} {'sysc/RPC':>8} {'cli cpu':>7}"
        f" {'vs base':>8} {'degr':>5} {'err':>4}"
    )
    for sc in scenarios:
        rows = [(c, results.cell(sc.name, c)) for c in concurrencies]
        if all(r is None for _, r in rows):
            continue
        for c, r in rows:
            if r is None:
                continue
            keys = r.ops_per_s * (BATCH if sc.kind == "batch" else 1)
            ratio = results.ratio(sc.name, sc.baseline, c) if sc.baseline else float("nan")
            print(
                f"{sc.name:<18} {c:>4} {_fmt_rate(r.ops_per_s):>9} {_fmt_rate(keys):>9}"
                f" {r.p50_us:>9.0f} {r.p99_us:>9.0f} {r.server_cpu * 100:>6.0f}%"
                f" {r.server_us_per_op:>10.1f} {r.server_system * 100:>5.0f}%"
                f" {r.server_syscalls_per_op:>8.1f} {r.client_cpu * 100:>6.0f}%"
                f" {f'{ratio:.2f}' if ratio == ratio else '-':>8}"
                f" {sum(x.degraded for x in results.rounds[(sc.name, c)]):>5}"
                f" {sum(x.errors for x in results.rounds[(sc.name, c)]):>4}"
            )
        print()


def summary(results: Results, c: int) -> dict[str, str]:
    """The summary line's pairs: ratios at concurrency c (best rounds; `*_median`: the
    median of the per-round ratios), then the absolute rates; with a baseline checkout
    run beside it, its `*_base_vs_*` ratios too."""

    def rps(name: str) -> float:
        r = results.cell(name, c)
        return r.ops_per_s if r else float("nan")

    pairs = {"ratio_concurrency": str(c)}
    for key, a, b in RATIOS:
        pairs[key] = f"{results.ratio(a, b, c):.3f}"
    ratios = [r for r in (*RATIOS, *BASE_RATIOS) if (r[1], c) in results.rounds]
    for key, a, b in ratios:
        each = results.per_round(a, b, c)
        pairs[f"{key}_median"] = f"{median(each):.3f}" if each else "nan"
    for key, a, b in RATIOS[:3]:
        pairs[key.replace("_vs_", "_cpu_vs_")] = f"{results.ratio(a, b, c, cpu=True):.3f}"
    pairs |= {
        "echo_rps": f"{rps('echo'):.0f}",
        "hot_rps": f"{rps('hot'):.0f}",
        "warm_rps": f"{rps('warm'):.0f}",
        "batch_keys_per_s": f"{rps('batch32-hot') * BATCH:.0f}",
        "redis_get_ops": f"{rps('redis-get'):.0f}",
    }
    return pairs
