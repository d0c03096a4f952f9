"""python -m bench.lookup.profile: the lookup paths without the transport, in one process,
for profiling: a sidecar App built from its Config (Redis in a child redis-server), its
Lookup and LookupBatch handlers' work called directly (protobuf in, cache, protobuf out).

Reports CPU µs per call of each path (median of rounds), the Redis commands each call
costs (INFO commandstats) and, with --cprofile, the top functions by own time per call.
Paths: `warm` (16 concurrent single lookups, hot tier off), `batch32-warm` (4 concurrent
batches of 32, hot tier off), `hot` (16 concurrent single lookups, hot hits) and
`batch32-hot` (batches of 32, hot hits).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import functools
import io
import pstats
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import uvloop

from bench.harness.procs import fleet_secret_file, redis_server
from bench.harness.report import print_summary
from bench.harness.stats import median
from bench.harness.workload import PAYLOAD, lookup_requests
from bench.lookup.__main__ import redis_commands
from bench.lookup.scenarios import BATCH
from sidecar.api.cache_codec import lookup_batch_to_pb, lookup_result_to_pb, query_from_pb
from sidecar.app import App, build_app, policy_watcher
from sidecar.config import load_config
from sidecar.identity.pod import PodIdentity
from sidecar.observability.telemetry import Telemetry
from sidecar.results.types import LookupQuery, Outcome

Call = Callable[[], Awaitable[int]]
"""One profiled call; returns how many keys it looked up."""


async def _app(redis_url: str, hot: bool) -> App:
    env = {
        "INFERCACHE_REDIS_URL": redis_url,
        "INFERCACHE_FLEET_SECRET_FILE": fleet_secret_file(),
        "INFERCACHE_HOT_MAX_ENTRIES": "100000" if hot else "0",
        # A loaded 2-core machine misses the 50 ms default now and then: a degraded
        # MISS would profile another path.
        "INFERCACHE_LOOKUP_TIMEOUT_MS": "2000",
    }
    config = load_config(env)
    policy = policy_watcher(config)
    await policy.load_initial()
    return await build_app(config, PodIdentity(), Telemetry(), policy)


async def _store_all(app: App, requests: list[Any]) -> None:
    for req in requests:
        query = query_from_pb(req, app.keys)
        miss = await app.cache.lookup(query)
        await app.cache.store(query.key, PAYLOAD, 3600, lease_token=miss.lease)


def _decoder(app: App) -> Callable[[Any], LookupQuery]:
    """How the handlers decode a LookupRequest (a checkout before the QueryMemo: plainly)."""
    try:
        from sidecar.api.query_memo import QueryMemo
    except ImportError:
        return functools.partial(query_from_pb, keys=app.keys)
    return QueryMemo(app.keys).query


def _paths(app: App, requests: list[Any], *, batch: bool, concurrency: int) -> Call:
    """One call of the path: `concurrency` Lookups (or LookupBatches) at once."""
    decode, cache = _decoder(app), app.cache
    state = {"next": 0}

    async def one(reqs: Sequence[Any]) -> None:
        if batch:
            queries = [decode(r) for r in reqs]
            results = await cache.lookup_many(queries)
            lookup_batch_to_pb(results).SerializeToString()
            misses = [r for r in results if r.outcome is not Outcome.HIT]
            assert not misses, f"{len(misses)} of {len(results)} not hits: {misses[0][:2]}"
        else:
            result = await cache.lookup(decode(reqs[0]))
            lookup_result_to_pb(result).SerializeToString()
            assert result.outcome is Outcome.HIT, f"not a hit: {result[:2]}"

    n = BATCH if batch else 1

    async def call() -> int:
        groups = []
        for _ in range(concurrency):
            i = state["next"]
            state["next"] = (i + n) % len(requests)
            groups.append(requests[i : i + n] if i + n <= len(requests) else requests[:n])
        await asyncio.gather(*(one(g) for g in groups))
        return concurrency * n

    return call


async def _measure(
    call: Call, seconds: float, profile: cProfile.Profile | None
) -> tuple[float, int]:
    """CPU µs per call of `call` over `seconds`, and the number of calls."""
    calls = 0
    if profile is not None:
        profile.enable()
    cpu0, end = time.process_time(), time.monotonic() + seconds
    while time.monotonic() < end:
        await call()
        calls += 1
    cpu = time.process_time() - cpu0
    if profile is not None:
        profile.disable()
    return cpu * 1e6 / calls, calls


async def run(args: argparse.Namespace) -> int:
    """Build the apps, store the keys, measure each path in alternating rounds."""
    requests = lookup_requests()
    with contextlib.ExitStack() as stack:
        redis_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="ic-prof-redis-"))
        redis = redis_server(redis_dir, "redis")
        stack.callback(redis.stop)
        redis.start()
        url = f"redis://127.0.0.1:{redis.port}/0"
        warm, hot = await _app(url, hot=False), await _app(url, hot=True)
        # The refresh loop confirms the rules (hot hits are served only while confirmed).
        loops = [asyncio.create_task(a.freshness.run_refresh_loop()) for a in (warm, hot)]
        await _store_all(warm, requests)
        paths = {
            "warm": (_paths(warm, requests, batch=False, concurrency=16), 16),
            "batch32-warm": (_paths(warm, requests, batch=True, concurrency=4), 4),
            "hot": (_paths(hot, requests, batch=False, concurrency=16), 16),
            "batch32-hot": (_paths(hot, requests, batch=True, concurrency=4), 4),
        }
        for call, _ in paths.values():
            await call()  # warm-up: the hot tier filled, connections open
        per_call: dict[str, list[float]] = {name: [] for name in paths}
        redis_per_rpc: dict[str, dict[str, float]] = {}
        # --cpu-timer: the profile counts this thread's CPU time, not the wall time in which
        # other processes on a shared box (redis-server among them) took the core.
        timer = (time.thread_time,) if args.cpu_timer else ()
        profiles = {name: cProfile.Profile(*timer) for name in paths} if args.cprofile else {}
        for rnd in range(args.rounds):
            for name in paths if rnd % 2 == 0 else list(reversed(paths)):
                call, rpcs = paths[name]
                before = redis_commands(redis.port)
                us, calls = await _measure(call, args.seconds, profiles.get(name))
                after = redis_commands(redis.port)
                per_call[name].append(us / rpcs)
                redis_per_rpc[name] = {
                    cmd: (n - before.get(cmd, 0)) / (calls * rpcs)
                    for cmd, n in after.items()
                    if n - before.get(cmd, 0) > 0
                }
        for task in loops:
            task.cancel()
        for app in (warm, hot):
            await app.close()
    print(f"# python -m bench.lookup.profile: {args.rounds} rounds x {args.seconds:g} s per path")
    print(f"{'path':<14} {'CPU µs/RPC':>10}  Redis commands per RPC (last round)")
    pairs = {}
    for name, times in per_call.items():
        cmds = " ".join(f"{c}={v:.2f}" for c, v in sorted(redis_per_rpc[name].items()) if v >= 0.01)
        print(f"{name:<14} {median(times):>10.1f}  {cmds}")
        pairs[f"{name.replace('-', '_')}_cpu_us"] = f"{median(times):.1f}"
    for name, prof in profiles.items():
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(args.top)
        print(f"\n## {name}: top {args.top} by own time (cProfile; its overhead included)")
        print("\n".join(line for line in out.getvalue().splitlines() if line.strip())[:6000])
    print_summary(pairs)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the command line and run."""
    parser = argparse.ArgumentParser(prog="python -m bench.lookup.profile", description=__doc__)
    parser.add_argument("--seconds", type=float, default=2.0, help="per path and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cprofile", action="store_true", help="top functions per path")
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument(
        "--cpu-timer",
        action="store_true",
        help="profile CPU time (default: wall time, time spent descheduled included)",
    )
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    # uvloop, as the sidecar runs by default.
    return uvloop.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
