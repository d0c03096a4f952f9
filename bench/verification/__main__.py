"""Shadow verification at a 1% base sampling rate (docs/benchmarks.md, verification).

    python -m bench.verification [--smoke]

Drift: a model server whose answers change under the same weights after warm-up; how
many wrong hits were served until the scope was quarantined, and how long it took.
Noise: >= 10^5 hits of a model server with 2% natural divergence and no drift; how
many false quarantines. Both drive the real ledger and shadow runner (sidecar/
verification, sidecar/shadow) against an in-process model server (10 ms an answer).
Cost: shadow calls per hit, and a hit's p50 through the real gateway with verification
at 1% against one without (two pods, interleaved hits). Ends with one key=value line.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses

from bench.verification.latency import hit_p50s
from bench.verification.simulate import run
from sidecar.verification.settings import VerifySettings

NOISE = 0.02
LATENCY_S = 0.010


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="tiny rounds (CI)")
    args = parser.parse_args()
    smoke = args.smoke
    base = VerifySettings(rate=0.01, baseline_rate=0.01)
    misses = 5_000 if smoke else 30_000
    # Drift at a pod's 1000 hits/s, with the default limits (50 shadow calls/s, 8 at once).
    drift = asyncio.run(
        run(
            settings=base,
            noise=NOISE,
            latency_s=LATENCY_S,
            hit_rate=1000,
            misses=misses,
            hits=3_000 if smoke else 8_000,
            drift_at=1_000 if smoke else 5_000,
            prompts=500,
            seed=1,
        )
    )
    print(
        f"drift: {drift.wrong_hits} wrong hits served, quarantined after "
        f"{drift.detect_s:.3f} s ({drift.baseline_checks} baseline checks, "
        f"{drift.hit_checks} hit checks)"
    )
    # Noise at 10k hits/s so that 10^5 hits take seconds; the rate limit is raised so
    # that the 1% (100 calls/s) is not cut by INFERCACHE_VERIFY_MAX_PER_S's 50.
    noisy_settings = dataclasses.replace(base, max_per_s=1000.0, max_concurrency=32)
    hits = 5_000 if smoke else 100_000
    noise = asyncio.run(
        run(
            settings=noisy_settings,
            noise=NOISE,
            latency_s=LATENCY_S,
            hit_rate=10_000,
            misses=misses,
            hits=hits,
            drift_at=None,
            prompts=2_000,
            seed=2,
        )
    )
    per_hit = (noise.shadow_calls - noise.baseline_checks) / max(1, noise.hits)
    print(
        f"noise: {noise.quarantines} false quarantines over {noise.hits} hits "
        f"({noise.hit_checks} hit checks); {per_hit:.4f} shadow calls per hit"
    )
    with_s, without_s, shadow = hit_p50s(prompts=50 if smoke else 200, rounds=2 if smoke else 10)
    print(
        f"gateway hit p50: {with_s * 1000:.3f} ms with verification, {without_s * 1000:.3f} ms "
        f"without ({shadow} shadow calls)"
    )
    print(
        f"drift_wrong_hits_served={drift.wrong_hits} drift_detect_s={drift.detect_s:.3f} "
        f"noise_false_quarantines={noise.quarantines} noise_hits={noise.hits} "
        f"shadow_upstream_calls_per_hit={per_hit:.4f} "
        f"hit_p50_with_vs_without={with_s / without_s:.3f}"
    )


if __name__ == "__main__":
    main()
