"""python -m bench.flight [--smoke]: see bench/flight/__init__.py."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import secrets
import signal
import sys
import tempfile
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from bench.flight import __doc__ as DOC
from bench.flight.load import (
    AGAIN,
    INVALIDATE_EVERY_S,
    PAUSE_EVERY_S,
    PAUSE_S,
    Figures,
    Servers,
    Workers,
    figures,
    run_phase,
    warm_up,
)
from bench.gateway.load import Target
from bench.gateway.servers import KEYS, upstream
from bench.harness.procs import (
    ServerProc,
    SidecarPorts,
    SidecarSpec,
    interrupt_on,
    redis_server,
    start_all,
)
from bench.harness.report import print_head, print_summary
from bench.harness.usage import load_average
from tests.support.processes import free_port

COMPUTE_MS = 200
WAIT_MS = 5000
TOKEN = secrets.token_urlsafe(24)
WORKERS = Workers(flights=3, flight_size=3, distinct=2, again=5)


def gateway(workdir: Path, upstream_port: int, redis_port: int) -> tuple[ServerProc, int]:
    """`python -m sidecar serve --gateway-listen` (this checkout's code) on the bench's
    redis-server, waiting up to WAIT_MS for a flight's holder, the default 50 ms lookup
    deadline, its admin plane on (ports[1], TOKEN); the ServerProc and its gateway port."""
    from tests.support.checkpoints import llama_tensors, write_model

    model = write_model(workdir / "model", llama_tensors(layers=1, seed=1))
    keys = workdir / "gateway-keys"
    keys.write_text("".join(f"{t}={k}\n" for t, k in KEYS.items()))
    port = free_port()
    flags = {
        "redis-url": f"redis://127.0.0.1:{redis_port}/0",
        "model-path": str(model),
        "model-server-url": f"http://127.0.0.1:{upstream_port}",
        "gateway-listen": f"127.0.0.1:{port}",
        "gateway-keys-file": str(keys),
        "gateway-wait-ms": str(WAIT_MS),
        "lookup-timeout-ms": "50",
        "admin-tokens": f"bench={TOKEN}",
        # Shadow verification off: its baseline (1% of misses computed a second time)
        # would count as upstream calls of the flights it measures.
        "verify-rate": "0",
        "verify-baseline-rate": "0",
    }
    argv = [f"--{k}={v}" for k, v in flags.items()]
    proc = SidecarSpec("gateway", SidecarPorts.free(admin=True), argv).proc()
    proc.ports = (*proc.ports, port)
    return proc, port


def upstream_prompts(port: int) -> list[str]:
    """Every prompt the model server was sent (its GET /stats)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats", timeout=10) as resp:
        prompts: list[str] = json.load(resp)["prompts"]
    return prompts


def show(name: str, f: Figures) -> None:
    """One phase's row."""
    waits = f"{f.max_wait_beyond_compute_ms:>10.0f} {f.p99_wait_beyond_compute_ms:>9.0f}"
    holds = f"{f.orphaned_holds:>8} {f.longest_unattended_hold_ms:>10.0f}"
    invalidations = f"{f.invalidations}/{f.invalidations + f.invalidations_failed}"
    print(
        f"{name:<8} {f.requests:>8} {f.failed:>6} {f.pauses:>6} {invalidations:>7} {waits}"
        f" {holds} {f.upstream_calls_per_flight:>10.2f}",
        flush=True,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the calm phase, then the paused one, and print the summary line."""
    parser = argparse.ArgumentParser(prog="python -m bench.flight", description=DOC)
    parser.add_argument("--smoke", action="store_true", help="short phases (CI)")
    parser.add_argument("--seconds", type=float, default=30.0, help="the paused phase's length")
    args = parser.parse_args(argv)
    interrupt_on(signal.SIGINT, signal.SIGTERM)
    paused_s = 7.0 if args.smoke else args.seconds
    calm_s = 3.0 if args.smoke else paused_s / 3
    w = WORKERS
    print(f"load average: {load_average()}")
    print(
        f"compute {COMPUTE_MS} ms per upstream call; workers: {w.flights} sending flights of"
        f" {w.flight_size} identical requests, {w.distinct} distinct requests, {w.again} asking"
        f" fresh prompts and, after each Invalidate of their prompt version (every"
        f" {INVALIDATE_EVERY_S} s), those again;"
        f" Redis paused {PAUSE_S * 1000:.0f} ms every {PAUSE_EVERY_S:.0f} s in the paused"
        f" phase ({calm_s:.0f} s calm, {paused_s:.0f} s paused)\n"
    )
    with contextlib.ExitStack() as stack, tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "redis").mkdir()
        redis = redis_server(str(work / "redis"), "redis")
        model = upstream(COMPUTE_MS)
        start_all(stack, [redis, model])
        gw, gw_port = gateway(work, model.port, redis.port)
        start_all(stack, [gw])
        auth = (("Authorization", f"Bearer {KEYS['acme']}"),)
        target = Target(gw_port, "/v1/chat/completions", auth)
        again = Target(gw_port, target.path, (*auth, ("x-infercache-prompt-version", AGAIN)))
        servers = Servers(target, again, gw.ports[1], TOKEN, redis.port, redis.pid)
        asyncio.run(warm_up(servers))
        results: dict[str, Figures] = {}
        for name, pause, seconds in (("calm", False, calm_s), ("paused", True, paused_s)):
            phase = asyncio.run(run_phase(servers, WORKERS, seconds, pause))
            gw.check_alive()
            results[name] = figures(phase, COMPUTE_MS / 1000, upstream_prompts(model.port))
    print_head(
        f"{'phase':<8} {'requests':>8} {'failed':>6} {'pauses':>6} {'invalid.':>7}"
        f" {'max wait':>10} {'p99 wait':>9} {'orphaned':>8} {'unattended':>10} {'calls/fl.':>10}"
    )
    for name, f in results.items():
        show(name, f)
    print(
        "\nwait: beyond the request's own computation (latency - compute), ms; orphaned: holds"
        " nobody computed for > 1 s; unattended: the longest such, ms; invalid.: Invalidate"
        " calls that succeeded / made"
    )
    calm, paused = results["calm"], results["paused"]
    print_summary(
        {
            "calm_max_wait_beyond_compute_ms": round(calm.max_wait_beyond_compute_ms),
            "calm_upstream_calls_per_flight": calm.upstream_calls_per_flight,
            "longest_unattended_hold_ms": round(paused.longest_unattended_hold_ms),
            "failed_requests": paused.failed + calm.failed,
            "max_wait_beyond_compute_ms": round(paused.max_wait_beyond_compute_ms),
            "orphaned_holds": paused.orphaned_holds,
            "upstream_calls_per_flight": paused.upstream_calls_per_flight,
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
