"""python -m bench.invalidate: both halves (or --only one), the tables and the summary."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import secrets
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from bench.harness.procs import interrupt_on
from bench.harness.report import print_summary
from bench.harness.usage import load_average
from bench.harness.workers import Worker
from bench.harness.workload import PAYLOAD
from bench.invalidate.freshness import (
    CONCURRENCY,
    SliceResult,
    bench_freshness,
    check_cost,
    print_freshness,
)
from bench.invalidate.latency import InvalidateResult, bench_invalidate, print_invalidate
from bench.invalidate.sidecars import label

OPS = "bench.invalidate.ops"


def run(args: argparse.Namespace) -> int:
    """Run the parts asked for, print their tables and the summary line."""
    started = time.monotonic()
    interrupt_on(signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    if args.py_spy:
        Path(args.py_spy).mkdir(parents=True, exist_ok=True)
    token = "bench-" + secrets.token_hex(16)
    parts = set(args.only.split(",")) if args.only else {"invalidate", "freshness"}
    if parts - {"invalidate", "freshness"}:
        raise SystemExit(f"--only: unknown parts {sorted(parts - {'invalidate', 'freshness'})}")
    print(
        f"# python -m bench.invalidate: sizes {args.sizes}, {args.repeats} Invalidate repeats"
        f" (+{args.inv_warmup} warm-up) each, reclaim {'on' if args.reclaim else 'held off'};"
        f" hot hits: store {args.store}, {args.rules} unrelated rules over {args.rule_shapes}"
        f" shapes, concurrency {CONCURRENCY}, {args.slices} slices of {args.slice_s} s"
        f" alternating variants; uvloop={'on' if args.uvloop else 'off'},"
        f" {os.cpu_count()} CPUs, load average {load_average()}",
        flush=True,
    )
    inv: list[InvalidateResult] = []
    fresh: list[SliceResult] = []
    costs: dict[str, float] = {}
    with contextlib.ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="ic-bench-inv-"))
        worker = Worker(OPS, args.uvloop)
        stack.callback(worker.close)
        if "invalidate" in parts:
            inv = bench_invalidate(args, worker, token, tmp)
        if "freshness" in parts:
            costs = check_cost(args.rules, args.rule_shapes)
            fresh = bench_freshness(args, worker, token, tmp)
            if args.dump:
                Path(args.dump).write_text(json.dumps([dataclasses.asdict(r) for r in fresh]))

    pairs: dict[str, str] = {}
    if inv:
        print()
        print(
            "## Invalidate latency (Redis warm tier; selector model_version=X matches every entry)"
        )
        ratio_key = print_invalidate(inv, 1.5)
        pairs[ratio_key] = f"{inv[-1].p50 / inv[0].p50:.3f}"
        for r in inv:
            pairs[f"invalidate_p50_ms_{label(r.size)}"] = f"{r.p50:.2f}"
            pairs[f"invalidate_p99_ms_{label(r.size)}"] = f"{r.p99:.2f}"
        for r in inv:
            pairs[f"invalidate_cpu_ms_{label(r.size)}"] = f"{r.sidecar_cpu_ms:.2f}"
            pairs[f"invalidate_redis_us_{label(r.size)}"] = f"{r.redis_us:.0f}"
        for r in inv:
            pairs[f"estimated_{label(r.size)}"] = str(r.estimate)
            pairs[f"true_{label(r.size)}"] = str(r.true_before)
    if fresh:
        print()
        what = "A/A CONTROL: both slots run the normal sidecar" if args.control else "on vs off"
        print(f"## Lookup hot hits, freshness check {what} (store: {args.store})")
        s = print_freshness(fresh, costs, 1.1)
        pairs |= {
            "freshness_cost": f"{s.cost:.3f}",
            "freshness_cpu_cost": f"{s.cpu_cost:.3f}",
            "freshness_cost_expected": f"{s.expected:.3f}",
            "rps_with_check": f"{s.on.rps:.0f}",
            "rps_without_check": f"{s.off.rps:.0f}",
            "hit_p50_us_with_check": f"{s.on.p50_us:.0f}",
            "hit_p50_us_without_check": f"{s.off.p50_us:.0f}",
            "srv_us_per_rpc_with_check": f"{s.on.server_us:.1f}",
            "srv_us_per_rpc_without_check": f"{s.off.server_us:.1f}",
            "is_dead_us": f"{costs['is_dead_us']:.2f}",
            "store": args.store + ("_control" if args.control else ""),
            "rules": str(args.rules),
            "rule_shapes": str(args.rule_shapes),
        }
    print(f"# total {time.monotonic() - started:.0f} s, load average now {load_average()}")
    print_summary(pairs)
    failed = any(r.errors > 0.01 * max(r.ops, 1) for r in fresh)
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; 1 when over 1% of a variant's calls failed, 130 on Ctrl-C."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.invalidate",
        description="Invalidation benchmark: Invalidate latency and the freshness check's cost",
    )
    parser.add_argument("--quick", action="store_true", help="fewer repeats and slices (< 60 s)")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="a few seconds: sizes 1e2,1e3, 3 repeats, 10 slices of 0.1 s",
    )
    parser.add_argument("--sizes", help="entries per Redis, comma-separated (default 1e3,1e5)")
    parser.add_argument("--repeats", type=int, help="timed Invalidates per size (default 100)")
    parser.add_argument("--inv-warmup", type=int, help="untimed Invalidates per size (3)")
    parser.add_argument(
        "--entry-bytes", type=int, default=len(PAYLOAD), help="payload of each populated entry"
    )
    parser.add_argument(
        "--reclaim",
        action="store_true",
        help="let the background reclaim delete the invalidated entries during the series",
    )
    parser.add_argument(
        "--store", choices=("embedded", "redis"), default="embedded", help="hot-hit sidecars' store"
    )
    parser.add_argument("--rules", type=int, default=50, help="unrelated rules before hot hits")
    parser.add_argument(
        "--rule-shapes",
        type=int,
        default=15,
        choices=range(1, 16),
        metavar="1..15",
        help="selector shapes the rules are spread over (default 15: all of them)",
    )
    parser.add_argument(
        "--slices", type=int, help="measured hot-hit slices, alternating variants (default 300)"
    )
    parser.add_argument("--slice-s", type=float, help="seconds per slice (default 0.2)")
    parser.add_argument("--warmup", type=float, help="unmeasured seconds per variant first")
    parser.add_argument(
        "--control",
        action="store_true",
        help="A/A run: the normal sidecar in both slots (shows the noise floor of the ratio)",
    )
    parser.add_argument("--dump", metavar="FILE", help="write the hot-hit slices as JSON")
    parser.add_argument(
        "--uvloop",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="servers and client on uvloop (default on, as the sidecar)",
    )
    parser.add_argument("--py-spy", metavar="DIR", help="sample the sidecars with py-spy")
    parser.add_argument(
        "--only", help="comma-separated parts to run: invalidate, freshness (default both)"
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="progress on stderr")
    args = parser.parse_args(argv)
    # (smoke, quick, full) defaults of what was not given
    for name, values in {
        "sizes": ("1e2,1e3", "1e3,1e5", "1e3,1e5"),
        "repeats": (3, 30, 100),
        "inv_warmup": (1, 3, 3),
        "slices": (10, 100, 300),
        "slice_s": (0.1, 0.2, 0.2),
        "warmup": (0.2, 0.5, 1.0),
    }.items():
        if getattr(args, name) is None:
            setattr(args, name, values[0 if args.smoke else 1 if args.quick else 2])
    try:
        return run(args)
    except KeyboardInterrupt:
        print("interrupted; child processes stopped", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
