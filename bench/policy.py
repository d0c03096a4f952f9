#!/usr/bin/env python3
"""What the cacheability policy costs a hot hit (issue 7).

In one process, one ResultCache over the embedded stores holds 256 stored results;
the timed work is `lookup_many` of a batch of 32 of them. Configurations, run in
alternating slices of 0.2 s (so background load falls on all alike):

    unchecked      the policy step skipped (ResultCache._screen replaced by a no-op):
                   the lookup path as it was before the policy (baseline)
    builtin        no policy file: the built-in policy is checked for every key
    file_1k        a file with 1,000 tenant overrides and every rule switched on
                   (deterministic_only, tools); the looked-up requests pass
    traits         as file_1k, each query also declaring (harmless) traits
    bypass_all     the tenant is not cacheable: every key answered BYPASS

Reported: CPU microseconds per looked-up key (median over slices) and each
configuration's ratio to `unchecked` from adjacent slices (`unchecked_control`, a
second `unchecked`, shows the noise floor).

    .venv/bin/python bench/policy.py --quick
The last line holds machine-readable key=value pairs.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import time
from types import MappingProxyType

from sidecar.config import LimitsConfig, TtlConfig
from sidecar.invalidation.embedded_store import EmbeddedControlStore
from sidecar.invalidation.freshness import Freshness
from sidecar.invalidation.rules import RuleSet
from sidecar.keys import InputKind, KeyRequest, Sampling, build_key
from sidecar.policy.cacheability import Policy, PolicyHolder, RequestTraits, TenantPolicy
from sidecar.results.cache import LookupQuery, LookupResult, ResultCache, TtlPolicy
from sidecar.tiers.embedded import EmbeddedWarmTier
from sidecar.tiers.hot import HotTier

BATCH = 32
KEYS = 256
STRICT = TenantPolicy(deterministic_only=True, bypass_tools=True, max_entry_bytes=1 << 20)
FILE_1K = Policy(
    STRICT, MappingProxyType({f"tenant-{i}": STRICT for i in range(1000)} | {"acme": STRICT})
)
CLOSED = Policy(TenantPolicy(cacheable=False))
# Declared, but not a reason to bypass under STRICT's rules for these requests.
HARMLESS = RequestTraits(side_effects=False, private_data=False, real_time=False, tools=False)


async def _prepare(holder: PolicyHolder) -> tuple[ResultCache, list[list[LookupQuery]]]:
    cache = ResultCache(
        HotTier(64 * 1024 * 1024, 100_000),
        EmbeddedWarmTier(256 * 1024 * 1024, 100_000),
        ttl=TtlPolicy.from_config(TtlConfig()),
        max_payload_bytes=1024 * 1024,
        max_chunks=LimitsConfig().max_chunks,
        freshness=Freshness(EmbeddedControlStore(), RuleSet()),
        policy=holder,
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


async def _slice(cache: ResultCache, batches: list[list[LookupQuery]], seconds: float) -> float:
    """CPU microseconds per key over one slice (process CPU: less noise on a shared box)."""
    keys = 0
    cpu_started = time.process_time()
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        for batch in batches:
            await cache.lookup_many(batch)
            keys += len(batch)
    return (time.process_time() - cpu_started) * 1e6 / keys


def _unchecked(queries: object) -> list[LookupResult | None] | None:
    return None


async def main(rounds: int, seconds: float) -> None:
    holder = PolicyHolder()
    cache, batches = await _prepare(holder)
    with_traits = [[q._replace(traits=HARMLESS) for q in b] for b in batches]
    screen = cache._screen
    # name -> (policy, batches, skip the policy step)
    configs = {
        "unchecked": (Policy(), batches, True),
        "unchecked_control": (Policy(), batches, True),
        "builtin": (Policy(), batches, False),
        "file_1k": (FILE_1K, batches, False),
        "traits": (FILE_1K, with_traits, False),
        "bypass_all": (CLOSED, batches, False),
    }
    for name, (policy, work, skip) in configs.items():
        holder.current = policy
        cache._screen = _unchecked if skip else screen  # type: ignore[method-assign]
        outcomes = {r.outcome.value for r in await cache.lookup_many(work[0])}
        assert outcomes == ({"bypass"} if name == "bypass_all" else {"hit"}), (name, outcomes)
    per_key: dict[str, list[float]] = {name: [] for name in configs}
    for r in range(rounds):
        order = list(configs) if r % 2 == 0 else list(reversed(configs))
        for name in order:
            policy, work, skip = configs[name]
            holder.current = policy
            cache._screen = _unchecked if skip else screen  # type: ignore[method-assign]
            gc.collect()  # no slice pays for the garbage of the one before
            per_key[name].append(await _slice(cache, work, seconds))
    pairs = {}
    print(f"# {rounds} rounds x {seconds:g} s slices, batches of {BATCH} hot hits")
    print(f"{'config':<18} {'us/key':>8} {'ratio':>7}")
    for name, times in per_key.items():
        ratio = statistics.median(t / b for t, b in zip(times, per_key["unchecked"], strict=True))
        print(f"{name:<18} {statistics.median(times):>8.2f} {ratio:>7.3f}")
        pairs[f"{name}_us"] = f"{statistics.median(times):.2f}"
        pairs[f"{name}_vs_unchecked"] = f"{ratio:.3f}"
    print(" ".join(f"{k}={v}" for k, v in pairs.items()), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="10 rounds instead of 40")
    parser.add_argument("--seconds", type=float, default=0.2, help="length of one slice")
    args = parser.parse_args()
    asyncio.run(main(10 if args.quick else 40, args.seconds))
