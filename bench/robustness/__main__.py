"""python -m bench.robustness: one sidecar, each scenario in turn, one summary line."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from collections.abc import Sequence

from bench.harness.procs import interrupt_on
from bench.harness.report import print_head, print_summary
from bench.harness.usage import load_average
from bench.robustness import __doc__ as DOC
from bench.robustness.flood import MESSAGE_MIB, flood
from bench.robustness.health import under_watch
from bench.robustness.soak import soak
from bench.robustness.target import GRACE_S, TOKEN, rss_mib, sidecar
from bench.robustness.waiters import waiter_attack
from tests.support.malformed import barrage


def main(argv: Sequence[str] | None = None) -> int:
    """Run every scenario (smaller rounds with --smoke) and print the summary line."""
    parser = argparse.ArgumentParser(prog="python -m bench.robustness", description=DOC)
    parser.add_argument("--smoke", action="store_true", help="tiny rounds (CI)")
    args = parser.parse_args(argv)
    interrupt_on(signal.SIGINT, signal.SIGTERM)
    watches, checks = (200, 50) if args.smoke else (1000, 500)
    rounds, per_round = (1, 4) if args.smoke else (3, 10)
    print(f"load average: {load_average()}")
    with contextlib.ExitStack() as stack:
        proc = sidecar()
        stack.callback(proc.stop)
        proc.start()
        data, admin = proc.ports[0], proc.ports[1]

        codes = barrage(data, admin, TOKEN)
        print_head(f"{'malformed requests: status':<40} {'count':>8}")
        for name, n in sorted(codes.items()):
            print(f"{name:<40} {n:>8}")

        peak, retained = asyncio.run(flood(admin, proc.pid, rounds, per_round))
        print(f"\nunauthenticated {MESSAGE_MIB} MiB Prewarm: {rounds} x {per_round}")
        now = rss_mib(proc.pid)
        print(f"  RSS peak +{peak:.0f} MiB, retained +{retained:.0f} MiB (now {now:.0f} MiB)")

        assert proc.proc is not None
        opened, p99, code, took = asyncio.run(
            under_watch(data, proc.proc, watches, checks, GRACE_S)
        )
        print(
            f"\n{watches} Watch calls ({opened} answered): Check p99 {p99:.1f} ms ({checks} checks)"
        )
        print(f"SIGTERM with them open: exit {code} after {took:.1f} s (grace {GRACE_S} s)")
    # robust-load's scenarios: each starts its own redis-server and sidecar.
    waiters, wait_ms, probe_s = (200, 2000, 0.5) if args.smoke else (1000, 6000, 2.0)
    base_p99, attacked_p99, slowest = waiter_attack(waiters, wait_ms, probe_s)
    print(f"\nwaiters: baseline p99 {base_p99:.2f} ms, under attack {attacked_p99:.2f} ms")
    print(f"  ({waiters} waiters x {wait_ms} ms; slowest waiter {slowest:.0f} ms)")
    seconds, workers = (8.0, 2) if args.smoke else (60.0, 3)
    figures = soak(seconds, workers)
    print_summary(
        {
            "unknown_statuses": codes.get("UNKNOWN", 0),
            "health_check_p99_ms_under_watch": p99,
            "sigterm_exit": code,
            "unauth_flood_rss_retained_mib": retained,
            "waiter_attack_probe_p99_vs_baseline": attacked_p99 / base_p99,
            "soak_wrong_hits": figures.wrong_hits,
            "soak_rss_growth_mib": figures.rss_growth_mib,
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
