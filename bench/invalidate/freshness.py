"""What the freshness/invalidation check costs a hot hit: with vs without, in slices."""

from __future__ import annotations

import argparse
import contextlib
import functools
import itertools
import math
import tempfile
import timeit
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.harness.procs import redis_server, start_all
from bench.harness.profiling import PySpy
from bench.harness.report import print_head
from bench.harness.stats import median, percentile, quartiles
from bench.harness.workers import Worker
from bench.harness.workload import MODEL, PROMPT, TENANT
from bench.invalidate.sidecars import sidecar_server, unrelated_selectors

CONCURRENCY = 16


@dataclass
class SliceResult:
    """One slice of hot-hit Lookups against one variant."""

    variant: str
    pair: int
    ops: int
    errors: int
    first_error: str
    elapsed_s: float
    server_cpu_s: float
    client_cpu_s: float
    latencies_ns: list[int]


VARIANTS = ("with check", "without check")


def check_cost(n_rules: int, n_shapes: int) -> dict[str, float]:
    """In-process µs per call of the two checks a hot hit makes, with the bench's rules."""
    from sidecar.invalidation.embedded_store import EmbeddedControlStore
    from sidecar.invalidation.freshness import Freshness
    from sidecar.invalidation.rules import Rule, RuleSet, Selector

    def timed(fn: Callable[[], object]) -> float:
        number = 20_000
        return min(timeit.repeat(fn, number=number, repeat=5)) / number * 1e6

    dims = (TENANT, MODEL, "", PROMPT)
    out: dict[str, float] = {}
    for name, n in (("is_dead_us", n_rules), ("is_dead_us_no_rules", 0)):
        rules = RuleSet()
        for i, sel in enumerate(unrelated_selectors(n, n_shapes)):
            selector = Selector(
                tenant=sel.get("tenant"),
                model_version=sel.get("model_version"),
                adapter_version=sel.get("adapter_version"),
                prompt_version=sel.get("prompt_version"),
            )
            rules.add(Rule(i + 1, selector, 0))
        out[name] = timed(functools.partial(rules.is_dead, dims, rules.epoch))
    freshness = Freshness(EmbeddedControlStore(), RuleSet())
    out["confirmed_us"] = timed(freshness.confirmed)
    out["noop_call_us"] = timed(lambda: None)
    return out


def _slice(variant: str, pair: int, x: dict[str, Any]) -> SliceResult:
    """A worker's slice figures as a SliceResult."""
    return SliceResult(
        variant=variant,
        pair=pair,
        ops=x["ops"],
        errors=x["errors"],
        first_error=x["first_error"],
        elapsed_s=x["elapsed_s"],
        server_cpu_s=x["server_cpu_s"],
        client_cpu_s=x["client_cpu_s"],
        latencies_ns=x["latencies_ns"],
    )


def bench_freshness(
    args: argparse.Namespace, worker: Worker, token: str, tmp: str
) -> list[SliceResult]:
    """Alternating slices of hot hits with and without the check."""
    with contextlib.ExitStack() as stack:
        flags: list[list[str]] = [[], []]
        if args.store == "redis":
            redises = [redis_server(tempfile.mkdtemp(dir=tmp)) for _ in VARIANTS]
            start_all(stack, redises)
            flags = [["--redis-url", f"redis://127.0.0.1:{r.port}/0"] for r in redises]
        servers = [
            sidecar_server(
                v, token, args.uvloop, *f, without_check=v == VARIANTS[1] and not args.control
            )
            for v, f in zip(VARIANTS, flags, strict=True)
        ]
        start_all(stack, servers)
        for s in servers:
            worker.call("setup_hot", s.ports[0], s.ports[1], token, args.rules, args.rule_shapes)
        spies: list[PySpy] = []

        def on_mark(what: str) -> None:
            if args.py_spy and what == "start":
                for srv in servers:
                    name = srv.name.replace(" ", "-")
                    out = Path(args.py_spy) / f"hot-{name}.txt"
                    spies.append(PySpy(srv.pid, out, rate=500, native=True))
            elif what == "end":
                for spy in spies:
                    spy.stop()

        slices = args.slices + args.slices % 2  # whole pairs
        raw = worker.call(
            "drive_interleaved",
            [(srv.port, srv.pid) for srv in servers],
            CONCURRENCY,
            args.warmup,
            slices,
            args.slice_s,
            on_mark=on_mark,
        )
        alternating = [_slice(VARIANTS[x["target"]], x["pair"], x) for x in raw]

        for srv in servers:
            srv.check_alive()
    return alternating


@dataclass
class Pooled:
    """One variant over a set of slices."""

    ops: int
    elapsed_s: float
    server_cpu_s: float
    client_cpu_s: float
    errors: int
    p50_us: float
    p99_us: float

    @classmethod
    def of(cls, slices: Sequence[SliceResult]) -> Pooled:
        """The slices' totals; latency percentiles over all their calls."""
        lat = [x / 1000 for s in slices for x in s.latencies_ns]
        return cls(
            ops=sum(s.ops for s in slices),
            elapsed_s=sum(s.elapsed_s for s in slices),
            server_cpu_s=sum(s.server_cpu_s for s in slices),
            client_cpu_s=sum(s.client_cpu_s for s in slices),
            errors=sum(s.errors for s in slices),
            p50_us=percentile(lat, 0.50),
            p99_us=percentile(lat, 0.99),
        )

    @property
    def rps(self) -> float:
        """RPC/s over the slices' time."""
        return self.ops / self.elapsed_s if self.elapsed_s else float("nan")

    @property
    def server_us(self) -> float:
        """Server CPU µs per RPC."""
        return self.server_cpu_s * 1e6 / self.ops if self.ops else float("nan")


@dataclass
class Summary:
    """Both variants; costs are medians of the per-pair ratios (adjacent slices)."""

    on: Pooled
    off: Pooled
    cost: float  # RPC/s without / RPC/s with
    cost_q: tuple[float, float]  # quartiles of the pair ratios
    cpu_cost: float  # server µs/RPC with / without
    pairs: int
    expected: float = math.nan  # from the in-process timing of the checks


def summarise(results: list[SliceResult]) -> Summary:
    """Pool each variant; cost figures from the pairs of adjacent slices."""
    by_pair: dict[int, dict[str, SliceResult]] = {}
    for r in results:
        by_pair.setdefault(r.pair, {})[r.variant] = r
    costs, cpu = [], []
    for both in by_pair.values():
        on, off = Pooled.of([both[VARIANTS[0]]]), Pooled.of([both[VARIANTS[1]]])
        if on.ops and off.ops and on.server_cpu_s > 0 and off.server_cpu_s > 0:
            costs.append(off.rps / on.rps)
            cpu.append(on.server_us / off.server_us)
    return Summary(
        on=Pooled.of([r for r in results if r.variant == VARIANTS[0]]),
        off=Pooled.of([r for r in results if r.variant == VARIANTS[1]]),
        cost=median(costs),
        cost_q=quartiles(costs),
        cpu_cost=median(cpu),
        pairs=len(costs),
    )


def print_freshness(
    results: list[SliceResult], costs: dict[str, float], goal: float, blocks: int = 6
) -> Summary:
    """The table (pairs in `blocks` groups, then all) and the cost lines; the Summary."""
    head = (
        f"{'pairs':>9} {'variant':<14} {'RPC/s':>8} {'p50 µs':>7} {'p99 µs':>7}"
        f" {'srv cpu':>7} {'srv µs/RPC':>10} {'cli cpu':>7} {'err':>4} {'without/with':>12}"
    )
    print_head(head)
    npairs = max(r.pair for r in results) + 1
    edges = [round(b * npairs / blocks) for b in range(blocks + 1)]
    groups = [(f"{lo}-{hi - 1}", lo, hi) for lo, hi in itertools.pairwise(edges) if hi > lo]
    for name, lo, hi in [*groups, ("all", 0, npairs)]:
        if name == "all":
            print("-" * len(head))
        chosen = [r for r in results if lo <= r.pair < hi]
        on = Pooled.of([r for r in chosen if r.variant == VARIANTS[0]])
        off = Pooled.of([r for r in chosen if r.variant == VARIANTS[1]])
        for v, p in zip(VARIANTS, (on, off), strict=True):
            ratio = f"{off.rps / on.rps:.3f}" if v == VARIANTS[1] and on.rps else ""
            print(
                f"{name:>9} {v:<14} {p.rps:>8,.0f} {p.p50_us:>7.0f} {p.p99_us:>7.0f}"
                f" {p.server_cpu_s / p.elapsed_s * 100:>6.0f}% {p.server_us:>10.1f}"
                f" {p.client_cpu_s / p.elapsed_s * 100:>6.0f}% {p.errors:>4} {ratio:>12}"
            )
    for r in results:
        if r.first_error:
            print(f"# first failure ({r.variant}, pair {r.pair}): {r.first_error}")
            break
    s = summarise(results)
    verdict = "met" if s.cost <= goal else "MISSED"
    print(
        f"# freshness_cost = {s.cost:.3f} (median over {s.pairs} adjacent slice pairs of RPC/s"
        f" without / with; quartiles {s.cost_q[0]:.3f}-{s.cost_q[1]:.3f}; pooled"
        f" {s.off.rps / s.on.rps:.3f}; goal <= {goal}: {verdict})"
    )
    print(
        f"# server CPU per RPC with / without = {s.cpu_cost:.3f} (median over pairs; pooled"
        f" {s.on.server_us:.1f} vs {s.off.server_us:.1f} µs)"
    )
    # The variant without the check still calls confirmed() (one clock read) and a
    # trivial is_dead in place of the real one: the difference is is_dead's own work.
    check_us = costs["is_dead_us"] - costs["noop_call_us"]
    s.expected = (s.off.server_us + check_us) / s.off.server_us
    print(
        f"# expected from the in-process timing below: {s.expected:.3f}"
        f" ({check_us:.1f} µs more per hot hit on {s.off.server_us:.1f} µs of server CPU)"
    )
    print(
        f"# in-process: is_dead {costs['is_dead_us']:.2f} µs with the bench's rules"
        f" ({costs['is_dead_us_no_rules']:.2f} µs with none), confirmed()"
        f" {costs['confirmed_us']:.2f} µs (in both variants), an empty call"
        f" {costs['noop_call_us']:.2f} µs; a hot hit makes one of each"
    )
    return s
