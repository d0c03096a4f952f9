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
from bench.robustness.target import GRACE_S, TOKEN, rss_mib, sidecar
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
    print_summary(
        {
            "unknown_statuses": codes.get("UNKNOWN", 0),
            "health_check_p99_ms_under_watch": p99,
            "sigterm_exit": code,
            "unauth_flood_rss_retained_mib": retained,
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
