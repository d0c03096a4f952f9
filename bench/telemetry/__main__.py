"""python -m bench.telemetry: four sidecars and an OTLP sink, interleaved hot-hit slices,
the in-process observer cost, the table and the summary line."""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from bench.harness.procs import (
    ServerProc,
    SidecarPorts,
    SidecarSpec,
    interrupt_on,
    start_all,
    stop_all,
)
from bench.harness.report import print_head, print_summary
from bench.harness.stats import median, quartiles
from bench.harness.usage import load_average
from bench.harness.workers import Worker
from bench.harness.workload import TIER_HOT
from bench.lookup.servers import SCRAPE_INTERVAL_S, Scraper, otlp_sink
from bench.telemetry.observer_cost import observer_cost
from tests.support.processes import free_port

OPS = "bench.telemetry.slices"
# The traced sidecars export every span over OTLP/gRPC to the sink, with this sampler.
TELEMETRY_SIDECARS: dict[str, dict[str, str]] = {
    "sidecar-metrics": {},
    "sidecar-traced": {"OTEL_TRACES_SAMPLER": "parentbased_always_on"},
    "sidecar-sampled": {
        "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
        "OTEL_TRACES_SAMPLER_ARG": "0.01",
    },
}
VARIANTS = ("sidecar-hot", *TELEMETRY_SIDECARS)
BASE = "sidecar-traced-base"  # with --baseline
KEYS = {
    "sidecar-traced": "telemetry_cost",
    "sidecar-metrics": "telemetry_cost_metrics",
    "sidecar-sampled": "telemetry_cost_sampled",
    BASE: "telemetry_cost_base",
}


def sidecar(
    name: str, sink_port: int, uvloop: bool, profile_dir: Path | None, baseline: Path | None
) -> ServerProc:
    """sidecar-hot: telemetry off (no /metrics); the others: /metrics on a free port and,
    for the traced ones, spans to the sink (OTEL_* set here on purpose). BASE is
    sidecar-traced run from the `baseline` checkout's code."""
    if name == "sidecar-hot":
        return SidecarSpec(name, uvloop=uvloop, profile_dir=profile_dir).proc()
    env = dict(TELEMETRY_SIDECARS["sidecar-traced" if name == BASE else name])
    if env:
        env |= {
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{sink_port}",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
            "OTEL_METRICS_EXPORTER": "none",
        }
    ports = SidecarPorts.free(metrics=True)
    if name == BASE:
        assert baseline is not None
        env["PYTHONPATH"] = f"{baseline}{os.pathsep}{baseline / 'clients' / 'python'}"
    proc = SidecarSpec(name, ports=ports, uvloop=uvloop, env=env, profile_dir=profile_dir).proc()
    if name == BASE:
        # -P: `python -m` would put the working directory (this checkout) first on the path.
        proc.argv.insert(1, "-P")
    return proc


def sink_spans(sink: ServerProc) -> int:
    """Stop the OTLP sink; the spans it reported receiving (-1 if it did not say)."""
    assert sink.proc is not None
    sink.proc.terminate()
    with contextlib.suppress(subprocess.TimeoutExpired):
        sink.proc.wait(timeout=5)
    m = re.search(r"otlp-sink: (\d+) spans received", sink.output())
    sink.stop()
    return int(m.group(1)) if m else -1


def run(args: argparse.Namespace) -> int:
    """Telemetry on vs off: hot hits interleaved across four sidecars."""
    interrupt_on(signal.SIGINT, signal.SIGTERM)
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        worker = Worker(OPS, args.uvloop)
        stack.callback(worker.close)
        sink_port = free_port()
        sink = otlp_sink(sink_port)
        variants = (*VARIANTS, BASE) if args.baseline else VARIANTS
        profile_dir = Path(args.cprofile).resolve() if args.cprofile else None
        if profile_dir is not None:
            profile_dir.mkdir(parents=True, exist_ok=True)
        servers = {
            name: sidecar(name, sink_port, args.uvloop, profile_dir, args.baseline)
            for name in variants
        }
        start_all(stack, [sink, *servers.values()])
        for srv in servers.values():
            worker.call("setup", srv.port, TIER_HOT, 0)
        scraper = Scraper([servers[n].ports[1] for n in variants[1:]], args.scrape_s)
        stack.callback(scraper.stop)
        scraper.start()
        print(
            f"# python -m bench.telemetry: hot hits, concurrency {args.concurrency},"
            f" {args.rounds} rounds of {len(servers)} interleaved {args.slice_s} s"
            f" slices, {os.cpu_count()} CPUs, load average {load_average()}",
            flush=True,
        )
        targets = [(srv.port, srv.pid) for srv in servers.values()]
        rows = worker.call(
            "interleave",
            targets,
            args.concurrency,
            args.slice_s,
            args.rounds,
            args.warmup_s,
            timeout_s=60 + 2 * args.rounds,
        )
        for srv in servers.values():
            srv.check_alive()
        scraper.stop()
        # The sidecars first, while the sink still takes their last spans: a traced
        # sidecar whose exporter has nowhere to flush sits out the whole SIGTERM timeout.
        stop_all(list(servers.values()))
        spans = sink_spans(sink)
    names = list(servers)
    off = names.index("sidecar-hot")

    def rps(x: dict[str, float]) -> float:
        return x["ops"] / x["elapsed_s"] if x["elapsed_s"] else float("nan")

    def us(x: dict[str, float]) -> float:
        return x["server_cpu_s"] * 1e6 / x["ops"] if x["ops"] else float("nan")

    print()
    print_head(
        f"{'variant':<20} {'RPC/s':>9} {'srv µs/RPC':>10} {'err':>4} {'off/on':>7}"
        f" {'cpu on/off':>10}"
    )
    pairs: dict[str, str] = {}
    failed = False
    for j, name in enumerate(names):
        col = [row[j] for row in rows]
        pooled_rps = sum(x["ops"] for x in col) / sum(x["elapsed_s"] for x in col)
        pooled_us = sum(x["server_cpu_s"] for x in col) * 1e6 / max(1, sum(x["ops"] for x in col))
        errors = int(sum(x["errors"] for x in col))
        failed |= errors > 0
        ratios = [rps(row[off]) / rps(row[j]) for row in rows]
        cost = median(ratios)
        # /proc counts CPU in 10 ms ticks: on a busy box a slice can show none; skip those.
        cpu = median([us(row[j]) / us(row[off]) for row in rows if us(row[off]) > 0])
        print(
            f"{name:<20} {pooled_rps:>9,.0f} {pooled_us:>10.1f} {errors:>4}"
            f" {cost:>7.3f} {cpu:>10.3f}"
        )
        short = name.removeprefix("sidecar-")
        if name in KEYS:
            q1, q3 = quartiles(ratios)
            print(f"  {KEYS[name]}: quartiles of the per-round ratio {q1:.3f}-{q3:.3f}")
            pairs[KEYS[name]] = f"{cost:.3f}"
            pairs[KEYS[name] + "_cpu"] = f"{cpu:.3f}"
            pairs["rps_" + short] = f"{pooled_rps:.0f}"
            pairs["srv_us_" + short] = f"{pooled_us:.1f}"
        else:
            pairs["rps_off"] = f"{pooled_rps:.0f}"
            pairs["srv_us_off"] = f"{pooled_us:.1f}"
    print(
        f"# /metrics scraped {scraper.scrapes} times ({scraper.failures} failed); the OTLP sink"
        f" received {spans} spans"
    )
    cost_in = observer_cost(args.observer_calls)
    print(
        "# in-process, per RPC added by RpcObserver around a trivial handler: tracing off"
        f" {cost_in['off']:.2f} µs, traced (always_on) {cost_in['traced']:.2f} µs, sampled 1%"
        f" {cost_in['sampled']:.2f} µs (the export thread's encoding not included); OTLP"
        f" encoding per span on the export thread: the SDK's encode_spans"
        f" {cost_in['encode_sdk']:.2f}"
        f" µs, SpanEncoder {cost_in['encode']:.2f} µs"
    )
    pairs |= {
        (f"{k}_us" if k.startswith("encode") else f"observer_us_{k}"): f"{v:.2f}"
        for k, v in cost_in.items()
    }
    print(
        "# off/on: median over rounds of RPC/s off / on (adjacent slices); cpu on/off: median"
        f" of server µs/RPC on / off; total {time.monotonic() - started:.0f} s; load average"
        f" now {load_average()}"
    )
    print_summary(pairs)
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; 1 when any call failed, 130 on Ctrl-C."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.telemetry",
        description="Telemetry cost benchmark: hot hits with telemetry off vs on",
    )
    parser.add_argument("--smoke", action="store_true", help="a few seconds: 3 short rounds")
    parser.add_argument("--rounds", type=int, help="interleaved rounds (default 150)")
    parser.add_argument("--concurrency", type=int, default=16, help="in flight (default 16)")
    parser.add_argument("--slice-s", type=float, help="seconds per slice (default 0.25)")
    parser.add_argument(
        "--baseline",
        type=Path,
        help="also run sidecar-traced from this checkout's code (before/after in one run)",
    )
    parser.add_argument("--cprofile", help="run the sidecars under cProfile, DIR/<name>.prof")
    parser.add_argument(
        "--uvloop",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="servers and client on uvloop (default on, as the sidecar)",
    )
    args = parser.parse_args(argv)
    smoke = args.smoke
    args.rounds = args.rounds or (3 if smoke else 150)
    args.slice_s = args.slice_s or (0.1 if smoke else 0.25)
    args.warmup_s = 0.2 if smoke else 1.0
    args.scrape_s = 0.2 if smoke else SCRAPE_INTERVAL_S
    args.observer_calls = 2_000 if smoke else 20_000
    try:
        return run(args)
    except KeyboardInterrupt:
        print("interrupted; child processes stopped", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
