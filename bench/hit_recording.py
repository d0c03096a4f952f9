"""What recording hits for prewarm costs a hot hit, in process.

One ResultCache over the embedded stores holds 256 stored results; the timed work is
`lookup_many` of a batch of 32 of them (all hot-tier HITs, each query carrying its
source request as the data plane passes it). Configurations, run in alternating
slices of 0.2 s (so background load falls on all alike):

    off            no HitRecorder among the cache's observers (baseline)
    no_retain      the tenant's policy does not retain inputs (the default): a policy
                   check per hit, nothing counted
    counted        the tenant retains inputs: every hit counted in the Space-Saving
                   sketch, merged into the embedded ranking at the end of each slice
                   (the merge's CPU is in the figure)
    counted_redis  as counted, merged into a real redis-server's ranking (the Redis
                   script's work is in that process, not counted; the client's is)

Before the sketch (1% sampling) the same bench measured the configurations
retain_1pct and retain_all (every hit written to the store): docs/benchmarks.md.

Reported: CPU microseconds per looked-up key (median over slices) and each configuration's
ratio to `off` from adjacent slices (`off_control`, a second `off`, shows the noise).
After each batch the loop gets a turn (as between RPCs in a server); the slice ends
with a merge of what was counted, so the merge's CPU is counted.

    .venv/bin/python -m bench.hit_recording --quick
    .venv/bin/python -m bench.hit_recording --smoke    # a few seconds

The last line holds machine-readable key=value pairs.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections.abc import Sequence

from bench.harness.micro import Batches, alternate, report, stored_cache
from bench.harness.procs import redis_server
from sidecar.backends.redis.backend import connect
from sidecar.backends.redis.hits import RedisHitStore
from sidecar.prewarm.embedded_hits import EmbeddedHitStore
from sidecar.prewarm.hits import HitRecorder, HitStore
from sidecar.results.cache import ResultCache
from sidecar.results.parts import CacheWatchers

SKETCH_SIZE = 10_000  # INFERCACHE_HIT_SKETCH_SIZE's default


def _recorder(retain: bool, store: HitStore | None = None) -> HitRecorder:
    if store is None:
        store = EmbeddedHitStore(max_per_version=10_000, ttl_ms=3_600_000)
    return HitRecorder(store, lambda tenant: retain, sketch_size=SKETCH_SIZE)


def _observed_by(base: ResultCache, recorder: HitRecorder | None) -> ResultCache:
    """A cache over `base`'s tiers, rules and counters whose lookups `recorder` observes."""
    return ResultCache(
        base.tiers,
        base.settings,
        freshness=base.freshness,
        watchers=CacheWatchers(base.stats, () if recorder is None else (recorder,)),
    )


async def _slice(
    cache: ResultCache, recorder: HitRecorder | None, batches: Batches, seconds: float
) -> float:
    """CPU microseconds per key over one slice (including the merge at its end).

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
        assert await recorder.merge()
    return (time.process_time() - cpu_started) * 1e6 / keys


async def run(rounds: int, seconds: float) -> None:
    """Every configuration in alternating slices; prints the table and the summary line."""
    base, batches = await stored_cache()
    with tempfile.TemporaryDirectory() as data:
        redis = redis_server(data, "redis")
        redis.start()
        client = connect(f"redis://127.0.0.1:{redis.port}", connect_timeout_s=5, socket_timeout_s=5)
        redis_store = RedisHitStore(
            client, key_prefix="bench:", max_per_version=10_000, ttl_ms=3_600_000, timeout_s=5
        )
        configs: dict[str, HitRecorder | None] = {
            "off": None,
            "off_control": None,
            "no_retain": _recorder(retain=False),
            "counted": _recorder(retain=True),
            "counted_redis": _recorder(retain=True, store=redis_store),
        }
        try:
            await _compare(base, batches, configs, rounds, seconds)
        finally:
            await client.aclose()
            redis.stop()


async def _compare(
    base: ResultCache,
    batches: Batches,
    configs: dict[str, HitRecorder | None],
    rounds: int,
    seconds: float,
) -> None:

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
