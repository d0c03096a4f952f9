"""What the cacheability policy costs a hot hit, in process.

One ResultCache over the embedded stores holds 256 stored results; the timed work is
`lookup_many` of a batch of 32 of them. Configurations, run in alternating slices of
0.2 s (so background load falls on all alike):

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

    .venv/bin/python -m bench.policy --quick
    .venv/bin/python -m bench.policy --smoke    # a few seconds

The last line holds machine-readable key=value pairs.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Sequence
from types import MappingProxyType

from bench.harness.micro import Batches, alternate, report, stored_cache
from sidecar.policy.cacheability import Policy, PolicyHolder, RequestTraits, TenantPolicy
from sidecar.results.cache import ResultCache
from sidecar.results.types import LookupResult

STRICT = TenantPolicy(deterministic_only=True, bypass_tools=True, max_entry_bytes=1 << 20)
FILE_1K = Policy(
    STRICT, MappingProxyType({f"tenant-{i}": STRICT for i in range(1000)} | {"acme": STRICT})
)
CLOSED = Policy(TenantPolicy(cacheable=False))
# Declared, but not a reason to bypass under STRICT's rules for these requests.
HARMLESS = RequestTraits(side_effects=False, private_data=False, real_time=False, tools=False)


async def _slice(cache: ResultCache, batches: Batches, seconds: float) -> float:
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


async def run(rounds: int, seconds: float) -> None:
    """Every configuration in alternating slices; prints the table and the summary line."""
    holder = PolicyHolder()
    cache, batches = await stored_cache(holder)
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

    def use(name: str) -> Batches:
        policy, work, skip = configs[name]
        holder.current = policy
        cache._screen = _unchecked if skip else screen  # type: ignore[method-assign]
        return work

    for name in configs:
        outcomes = {r.outcome.value for r in await cache.lookup_many(use(name)[0])}
        assert outcomes == ({"bypass"} if name == "bypass_all" else {"hit"}), (name, outcomes)

    async def one(name: str) -> float:
        return await _slice(cache, use(name), seconds)

    report(await alternate(list(configs), rounds, one), "unchecked", rounds, seconds)


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
