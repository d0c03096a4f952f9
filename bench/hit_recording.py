"""What recording hits for prewarm costs a hot hit, in process.

One ResultCache over the embedded stores holds 256 stored results; the timed work is
`lookup_many` of a batch of 32 of them (all hot-tier HITs, each query carrying its
source request as the data plane passes it). Configurations, run in alternating
slices of 0.2 s (so background load falls on all alike):

    off            no HitRecorder among the cache's observers (baseline)
    no_retain      rate 0.01, the tenant's policy does not retain inputs (the default)
    retain_1pct    rate 0.01 (the default), the tenant retains inputs, embedded store
    retain_all     rate 1.0, every hit encoded and written (worst case)

Reported: CPU microseconds per looked-up key (median over slices) and each configuration's
ratio to `off` from adjacent slices (`off_control`, a second `off`, shows the noise).
After each batch the loop gets a turn (as between RPCs in a server); the recorder's
writer task runs there, and what is still queued is drained before the slice ends,
so the writes' CPU is counted.

    .venv/bin/python -m bench.hit_recording --quick
    .venv/bin/python -m bench.hit_recording --smoke    # a few seconds

The last line holds machine-readable key=value pairs.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Sequence

from bench.harness.micro import Batches, alternate, report, stored_cache
from sidecar.prewarm.hits import EmbeddedHitStore, HitRecorder
from sidecar.results.cache import ResultCache


def _recorder(rate: float, retain: bool) -> HitRecorder:
    store = EmbeddedHitStore(max_per_version=10_000, ttl_ms=3_600_000)
    return HitRecorder(store, lambda tenant: retain, sample_rate=rate)


def _observed_by(base: ResultCache, recorder: HitRecorder | None) -> ResultCache:
    """A cache over `base`'s tiers, rules and counters whose lookups `recorder` observes."""
    return ResultCache(
        base.hot,
        base.warm,
        ttl=base.ttl,
        max_payload_bytes=base.max_payload_bytes,
        max_chunks=base.max_chunks,
        freshness=base.freshness,
        stats=base.stats,
        observers=() if recorder is None else (recorder,),
    )


async def _slice(
    cache: ResultCache, recorder: HitRecorder | None, batches: Batches, seconds: float
) -> float:
    """CPU microseconds per key over one slice (including draining recorder writes).

    Process CPU time, not wall time: on a shared machine other processes' load then
    shows up less in the figures (the whole benchmark is one thread's work)."""
    keys = 0
    cpu_started = time.process_time()
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        for batch in batches:
            await cache.lookup_many(batch)
            keys += len(batch)
            # Give the loop a turn, as a server does between RPCs: the writer runs there.
            await asyncio.sleep(0)
    if recorder is not None:
        await recorder.drain()
    return (time.process_time() - cpu_started) * 1e6 / keys


async def run(rounds: int, seconds: float) -> None:
    """Every configuration in alternating slices; prints the table and the summary line."""
    base, batches = await stored_cache()
    configs: dict[str, HitRecorder | None] = {
        "off": None,
        "off_control": None,
        "no_retain": _recorder(0.01, retain=False),
        "retain_1pct": _recorder(0.01, retain=True),
        "retain_all": _recorder(1.0, retain=True),
    }

    caches = {name: _observed_by(base, recorder) for name, recorder in configs.items()}

    async def one(name: str) -> float:
        return await _slice(caches[name], configs[name], batches, seconds)

    report(await alternate(list(configs), rounds, one), "off", rounds, seconds)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: --quick (10 rounds), --smoke (2 rounds of 0.05 s), --seconds."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="10 rounds instead of 40")
    parser.add_argument("--smoke", action="store_true", help="2 rounds of 0.05 s slices")
    parser.add_argument("--seconds", type=float, default=0.2, help="length of one slice")
    args = parser.parse_args(argv)
    if args.smoke:
        asyncio.run(run(2, 0.05))
    else:
        asyncio.run(run(10 if args.quick else 40, args.seconds))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
