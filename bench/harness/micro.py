"""In-process micro-benchmarks of the result cache: one ResultCache over the embedded
stores holding 256 stored 1 KiB results, looked up in batches of 32 (all hot-tier HITs).

Configurations run in alternating slices (ABBA over rounds) so background load on a
shared machine falls on all alike; each is reported as CPU µs per key (median over
slices) and as the median ratio to the baseline's adjacent slice.
"""

from __future__ import annotations

import gc
from collections.abc import Awaitable, Callable, Sequence

from bench.harness.report import print_summary
from bench.harness.stats import median
from sidecar.config import LimitsConfig, TtlConfig
from sidecar.invalidation.embedded_store import EmbeddedControlStore
from sidecar.invalidation.freshness import Freshness
from sidecar.invalidation.rules import RuleSet
from sidecar.keys import InputKind, KeyRequest, Sampling, build_key
from sidecar.policy.cacheability import PolicyHolder
from sidecar.policy.ttl import TtlPolicy
from sidecar.results.cache import ResultCache
from sidecar.results.parts import CacheAdmission, CacheSettings, CacheTiers
from sidecar.results.types import LookupQuery
from sidecar.tiers.embedded import EmbeddedWarmTier
from sidecar.tiers.hot import HotTier

BATCH = 32
KEYS = 256

Batches = list[list[LookupQuery]]


async def stored_cache(policy: PolicyHolder | None = None) -> tuple[ResultCache, Batches]:
    """A ResultCache with KEYS stored results, and their queries (each carrying its source
    request, as the data plane passes it) in batches of BATCH."""
    cache = ResultCache(
        CacheTiers(
            HotTier(64 * 1024 * 1024, 100_000), EmbeddedWarmTier(256 * 1024 * 1024, 100_000)
        ),
        CacheSettings(
            TtlPolicy.from_config(TtlConfig()),
            max_payload_bytes=1024 * 1024,
            max_chunks=LimitsConfig().max_chunks,
        ),
        freshness=Freshness(EmbeddedControlStore(), RuleSet()),
        admission=CacheAdmission(policy or PolicyHolder()),
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
    return cache, [queries[i : i + BATCH] for i in range(0, KEYS, BATCH)]


async def alternate(
    names: Sequence[str], rounds: int, run_slice: Callable[[str], Awaitable[float]]
) -> dict[str, list[float]]:
    """run_slice(name) for every name per round, odd rounds in reverse; its figures by name."""
    per_key: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names if r % 2 == 0 else list(reversed(names)):
            gc.collect()  # no slice pays for the garbage of the one before
            per_key[name].append(await run_slice(name))
    return per_key


def report(per_key: dict[str, list[float]], baseline: str, rounds: int, seconds: float) -> None:
    """The table and the summary line: `<name>_us` and `<name>_vs_<baseline>` per config."""
    pairs = {}
    width = max(12, *(len(n) + 1 for n in per_key))
    print(f"# {rounds} rounds x {seconds:g} s slices, batches of {BATCH} hot hits")
    print(f"{'config':<{width}} {'us/key':>8} {'ratio':>7}")
    for name, times in per_key.items():
        ratio = median(t / b for t, b in zip(times, per_key[baseline], strict=True))
        print(f"{name:<{width}} {median(times):>8.2f} {ratio:>7.3f}")
        pairs[f"{name}_us"] = f"{median(times):.2f}"
        pairs[f"{name}_vs_{baseline}"] = f"{ratio:.3f}"
    print_summary(pairs)
