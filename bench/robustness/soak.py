"""The soak of tests/e2e/test_soak.py as figures: mixed traffic from several processes,
Redis restarted in the middle; wrong hits, statuses, health, RSS growth."""

from __future__ import annotations

from tests.support.soak import SoakFigures, run_soak


def soak(seconds: float, workers: int) -> SoakFigures:
    """Run the soak (its own redis-server and sidecar) and print what it saw."""
    f = run_soak(seconds, workers)
    print(f"\nsoak: {seconds:.0f} s, {workers} load processes, Redis restarted at the middle")
    print(f"  requests {f.requests}, hits {f.hits} (checked), wrong hits {f.wrong_hits}")
    statuses = ", ".join(f"{k} {v}" for k, v in sorted(f.statuses.items())) or "none"
    print(f"  non-OK statuses: {statuses}")
    print(f"  health: {f.health_not_serving} of {f.health_checks} polls not SERVING")
    print(f"  RSS {f.rss_start_mib:.0f} -> {f.rss_end_mib:.0f} MiB ({f.rss_growth_mib:+.1f})")
    return f
