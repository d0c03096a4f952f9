#!/usr/bin/env python3
"""What recording hits for prewarm costs a hot hit (issue 8).

In one process, one ResultCache over the embedded stores holds 256 stored results;
the timed work is `lookup_many` of a batch of 32 of them (all hot-tier HITs, each
query carrying its source request as the data plane passes it). Configurations,
run in alternating slices of 0.2 s (so background load falls on all alike):

    off            no HitRecorder among the cache's observers (baseline)
    no_retain      rate 0.01, the tenant's policy does not retain inputs (the default)
    retain_1pct    rate 0.01 (the default), the tenant retains inputs, embedded store
    retain_all     rate 1.0, every hit encoded and written (worst case)

Reported: CPU microseconds per looked-up key (median over slices) and each configuration's
ratio to `off` from adjacent slices (`off_control`, a second `off`, shows the noise).
After each batch the loop gets a turn (as between RPCs in a server); the recorder's
writer task runs there, and what is still queued is drained before the slice ends,
so the writes' CPU is counted.

    .venv/bin/python bench/hit_recording.py --quick
The last line holds machine-readable key=value pairs.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import time

from sidecar.config import LimitsConfig, TtlConfig
from sidecar.invalidation.embedded_store import EmbeddedControlStore
from sidecar.invalidation.freshness import Freshness
from sidecar.invalidation.rules import RuleSet
from sidecar.keys import InputKind, KeyRequest, Sampling, build_key
from sidecar.prewarm.hits import EmbeddedHitStore, HitRecorder
from sidecar.results.cache import LookupQuery, ResultCache, TtlPolicy
from sidecar.tiers.embedded import EmbeddedWarmTier
from sidecar.tiers.hot import HotTier

BATCH = 32
KEYS = 256


def _recorder(rate: float, retain: bool) -> HitRecorder:
    store = EmbeddedHitStore(max_per_version=10_000, ttl_ms=3_600_000)
    return HitRecorder(store, lambda tenant: retain, sample_rate=rate)


async def _prepare() -> tuple[ResultCache, list[list[LookupQuery]]]:
    cache = ResultCache(
        HotTier(64 * 1024 * 1024, 100_000),
        EmbeddedWarmTier(256 * 1024 * 1024, 100_000),
        ttl=TtlPolicy.from_config(TtlConfig()),
        max_payload_bytes=1024 * 1024,
        max_chunks=LimitsConfig().max_chunks,
        freshness=Freshness(EmbeddedControlStore(), RuleSet()),
    )
    queries = []
    for i in range(KEYS):
        req = KeyRequest(
            tenant="acme",
            model_version="fp1-bench",
            prompt_version="p1",
            input=f"How do I reset my password? variant {i}",
            input_kind=InputKind.TEXT,
            sampling=Sampling(temperature=0.0, max_tokens=256),
        )
        key = build_key(req)
        miss = await cache.lookup(LookupQuery(key))
        await cache.store(key, bytes(1024), lease_token=miss.lease)
        queries.append(LookupQuery(key, source=req))
    batches = [queries[i : i + BATCH] for i in range(0, KEYS, BATCH)]
    return cache, batches


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
    cache: ResultCache,
    recorder: HitRecorder | None,
    batches: list[list[LookupQuery]],
    seconds: float,
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


async def main(rounds: int, seconds: float) -> None:
    base, batches = await _prepare()
    configs: dict[str, HitRecorder | None] = {
        "off": None,
        "off_control": None,
        "no_retain": _recorder(0.01, retain=False),
        "retain_1pct": _recorder(0.01, retain=True),
        "retain_all": _recorder(1.0, retain=True),
    }
    caches = {name: _observed_by(base, recorder) for name, recorder in configs.items()}
    per_key: dict[str, list[float]] = {name: [] for name in configs}
    for r in range(rounds):
        order = list(configs) if r % 2 == 0 else list(reversed(configs))
        for name in order:
            gc.collect()  # no slice pays for the garbage of the one before
            per_key[name].append(await _slice(caches[name], configs[name], batches, seconds))
    pairs = {}
    print(f"# {rounds} rounds x {seconds:g} s slices, batches of {BATCH} hot hits")
    print(f"{'config':<12} {'us/key':>8} {'ratio':>7}")
    for name, times in per_key.items():
        ratio = statistics.median(t / b for t, b in zip(times, per_key["off"], strict=True))
        print(f"{name:<12} {statistics.median(times):>8.2f} {ratio:>7.3f}")
        pairs[f"{name}_us"] = f"{statistics.median(times):.2f}"
        pairs[f"{name}_vs_off"] = f"{ratio:.3f}"
    print(" ".join(f"{k}={v}" for k, v in pairs.items()), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="10 rounds instead of 40")
    parser.add_argument("--seconds", type=float, default=0.2, help="length of one slice")
    args = parser.parse_args()
    asyncio.run(main(10 if args.quick else 40, args.seconds))
