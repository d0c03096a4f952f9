"""What a gateway run measures and how it is reported (bench/gateway/__main__.py): the
plan, each side's figures, the tables, the correctness table and the summary's pairs."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.gateway import floors, servers
from bench.gateway.load import LoadResult, Target
from bench.gateway.probes import SseCheck
from bench.harness.report import print_head
from bench.harness.stats import median, percentile

GOALS = {"hit_p50_vs_litellm": 0.3, "hit_rps_vs_litellm": 3.0, "miss_overhead_ms": 1.0}


@dataclass(frozen=True, slots=True)
class Plan:
    """How long and how wide the run is."""

    rounds: int
    seconds: float
    hit_concurrency: tuple[int, ...]
    miss_concurrency: tuple[int, ...]
    delay_ms: int
    infercache: Path = servers.INFERCACHE
    model_server: Path = servers.MODEL_SERVER
    baseline: Path | None = None
    """Another `infercache` whose gateway runs beside this one (before/after in one run)."""
    litellm: bool = True


@dataclass(slots=True)
class Side:
    """One gateway under test: its targets for two callers (two tenants where it has
    them) and its figures by (kind, concurrency)."""

    name: str
    pid: int
    """The server process whose CPU (with its children's) each loop is charged."""
    first: Target
    second: Target
    loops: dict[tuple[str, int], list[LoadResult]] = field(default_factory=dict)
    cpu_ms: dict[tuple[str, int], list[float]] = field(default_factory=dict)
    idle_cpu_per_s: float = 0.0
    """CPU the server spends per second with no request (its background loops), taken
    off each loop's CPU so that a slow loop's few requests are not charged for it."""
    flags: list[str] = field(default_factory=list)
    probes: dict[str, str] = field(default_factory=dict)
    sse: SseCheck | None = None
    floor: bool = False
    """The canned server: its answers carry no verdict and never reach the upstream."""

    def add(self, kind: str, concurrency: int, result: LoadResult, cpu_s: float) -> None:
        self.loops.setdefault((kind, concurrency), []).append(result)
        busy_s = max(0.0, cpu_s - self.idle_cpu_per_s * result.elapsed_s)
        per_request = busy_s * 1000 / max(1, len(result.latencies))
        self.cpu_ms.setdefault((kind, concurrency), []).append(per_request)

    def cpu(self, kind: str, concurrency: int) -> float:
        """Median over rounds of the server's CPU ms per request."""
        return median(self.cpu_ms.get((kind, concurrency), []))

    def p(self, kind: str, concurrency: int, q: float) -> float:
        """Median over rounds of the loops' q-quantile latency, in ms."""
        runs = self.loops.get((kind, concurrency), [])
        return median(percentile(r.latencies, q) * 1000 for r in runs)

    def rps(self, kind: str, concurrency: int) -> float:
        return median(r.rps for r in self.loops.get((kind, concurrency), []))


def _ratio(a: float, b: float) -> float:
    return a / b if b and not math.isnan(b) else math.nan


def report(
    gw: Side | None,
    ll: Side | None,
    direct: Side,
    bare: Side,
    canned: Side,
    plan: Plan,
    base: Side | None = None,
) -> dict[str, Any]:
    """Print the tables; the summary's pairs (`base`'s floor figures with a _base suffix)."""
    shown = [s for s in (gw, base, ll) if s is not None]
    print_head(
        f"{'kind':<5} {'conc':>4} {'server':<11} {'p50 ms':>8} {'p99 ms':>8} {'rps':>8} "
        f"{'cpu ms/req':>10}"
    )
    rows = [("hit", c, s) for c in plan.hit_concurrency for s in [canned, *shown]]
    rows += [("miss", c, s) for c in plan.miss_concurrency for s in [direct, bare, *shown]]
    for kind, c, s in rows:
        print(
            f"{kind:<5} {c:>4} {s.name:<11} {s.p(kind, c, 0.5):>8.2f} {s.p(kind, c, 0.99):>8.2f} "
            f"{s.rps(kind, c):>8.0f} {s.cpu(kind, c):>10.3f}"
        )
    for s in shown:
        for flag in s.flags:
            print(f"# FLAGGED {s.name} {flag}")
    pairs: dict[str, Any] = {}

    def worst(values: list[float], pick: Any) -> float:
        finite = [v for v in values if not math.isnan(v)]
        return pick(finite) if finite and len(finite) == len(values) else math.nan

    def p50s(s: Side | None) -> list[float]:
        return [s.p("hit", c, 0.5) if s else math.nan for c in plan.hit_concurrency]

    def rpss(s: Side | None) -> list[float]:
        return [s.rps("hit", c) if s else math.nan for c in plan.hit_concurrency]

    def overhead(s: Side | None, c: int) -> float:
        return s.p("miss", c, 0.5) - direct.p("miss", c, 0.5) if s else math.nan

    pairs["hit_p50_vs_litellm"] = worst(
        [_ratio(a, b) for a, b in zip(p50s(gw), p50s(ll), strict=True)], max
    )
    pairs["hit_rps_vs_litellm"] = worst(
        [_ratio(a, b) for a, b in zip(rpss(gw), rpss(ll), strict=True)], min
    )
    misses = {c: (gw.loops.get(("miss", c), []) if gw else []) for c in plan.miss_concurrency}
    bares = {c: bare.loops.get(("miss", c), []) for c in plan.miss_concurrency}
    pairs |= floors.summary(rpss(gw), rpss(canned), misses, bares)
    if base is not None:
        base_misses = {c: base.loops.get(("miss", c), []) for c in plan.miss_concurrency}
        base_floors = floors.summary(rpss(base), rpss(canned), base_misses, bares)
        pairs |= {f"{k}_base": v for k, v in base_floors.items()}
        pairs["gateway_hit_cpu_ms_base"] = base.cpu("hit", plan.hit_concurrency[-1])
        pairs["gateway_miss_cpu_ms_base"] = base.cpu("miss", plan.miss_concurrency[0])
    m1 = plan.miss_concurrency[0]
    for maybe, prefix in ((gw, ""), (ll, "litellm_"), (bare, "bare_proxy_")):
        pairs[prefix + "miss_overhead_ms"] = overhead(maybe, m1)
        for c in plan.miss_concurrency[1:]:
            pairs[f"{prefix}miss_overhead_c{c}_ms"] = overhead(maybe, c)
    for maybe, prefix in ((gw, ""), (ll, "litellm_")):
        sse = maybe.sse if maybe else None
        pairs[prefix + "sse_replay_exact"] = (
            "untested" if sse is None else ("yes" if sse.exact else "no")
        )
        probes = maybe.probes if maybe else {}
        merged = sum(v == "MERGED" for v in probes.values())
        tenant = probes.get("two_tenants_same_body")
        pairs[prefix + "cross_tenant_hits"] = "nan" if tenant is None else int(tenant == "MERGED")
        pairs[prefix + "merged_probes"] = merged if probes else "nan"
    c1, cmax = plan.hit_concurrency[0], plan.hit_concurrency[-1]
    for maybe, prefix in ((gw, "gateway"), (ll, "litellm")):
        pairs[f"{prefix}_hit_p50_ms"] = maybe.p("hit", c1, 0.5) if maybe else math.nan
        pairs[f"{prefix}_hit_rps_c{cmax}"] = maybe.rps("hit", cmax) if maybe else math.nan
        # CPU per request of the server process alone: what load on the machine does
        # not inflate (the miss figure leaves the upstream's own CPU out).
        pairs[f"{prefix}_hit_cpu_ms"] = maybe.cpu("hit", cmax) if maybe else math.nan
        pairs[f"{prefix}_miss_cpu_ms"] = maybe.cpu("miss", m1) if maybe else math.nan
    met = (
        pairs["hit_p50_vs_litellm"] <= GOALS["hit_p50_vs_litellm"]
        and pairs["hit_rps_vs_litellm"] >= GOALS["hit_rps_vs_litellm"]
        and pairs["miss_overhead_ms"] <= GOALS["miss_overhead_ms"]
    )
    pairs["goals_met"] = "yes" if met else "no"
    pairs["flagged"] = sum(len(s.flags) for s in shown)
    return pairs


def print_correctness(sides: list[Side]) -> None:
    """The probe table and the SSE check, one column per gateway."""
    if not sides:
        return
    names = list(sides[0].probes)
    print_head(f"{'probe (B after A)':<24} " + " ".join(f"{s.name:>11}" for s in sides))
    for n in names:
        print(f"{n:<24} " + " ".join(f"{s.probes.get(n, '-'):>11}" for s in sides))
    for s in sides:
        if s.sse is not None:
            print(
                f"# sse {s.name}: original {s.sse.original_events} events, replay "
                f"{s.sse.replay_events} ({s.sse.replay_verdict}), exact={s.sse.exact}"
            )
    print("# litellm: every caller holds the master key (virtual keys need Postgres)")
