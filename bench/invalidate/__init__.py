"""Invalidation benchmark: Invalidate latency against the number of entries present, and
what the freshness/invalidation check costs a hot hit.

Latency half (latency.py). For each size (1e3 and 1e5 entries by default) a redis-server
on a free port is filled directly (pipelined SET PX, 1000 per batch) with real entries
(sidecar.keys.build_key + sidecar.entries.encode under sidecar.backends.redis.client.RedisKeys
names), all with one model_version. Then a real sidecar (`python -m sidecar serve
--redis-url ... --admin-listen ... --admin-tokens bench=...`) serves each Redis, and a
client process times the Invalidate RPC with a selector that matches every populated entry
(model_version=...), alternating between the sizes; each repeat commits a new rule.
Reported: p50/p99 latency, the sampled estimated_entries against the true count, the
sidecar CPU and the Redis commands (INFO commandstats) per Invalidate, and the estimate's
own Redis reads (SCAN sample with its GETRANGE heads, DBSIZE) timed directly. The bench
holds the fleet's reclaim lock (as another sidecar of the fleet would) so that background
reclaim does not delete the entries between repeats; `--reclaim` lets it run.

Freshness half (freshness.py). Two sidecars on the same kind of store (embedded by
default, `--store redis` for one redis-server each): the normal one, and
`python -m bench.invalidate.without_freshness` (the same server built with a rule set
whose is_dead always says False, through build_app's `rules` seam). Both first get the
same 50 unrelated invalidation rules spread over all 15 selector shapes (so is_dead does
its full work), then the same 256 stored 1 KiB results. One client process (grpc.aio,
one channel per server, concurrency 16, identical code for both) drives hot-tier HITs in
short slices (0.2 s) that alternate between the servers (ABBA order), so background load
on a shared machine falls on both alike. freshness_cost = median over adjacent slice
pairs of RPC/s without the check / RPC/s with it. Also reported: the server CPU per RPC
(from /proc), and the cost expected from an in-process timing of is_dead. `--control`
puts the normal sidecar in both slots (an A/A run: the noise floor of the ratio).

Every sidecar gets free ports for its data and admin planes; /metrics is switched off.

    .venv/bin/python -m bench.invalidate --quick    # under a minute
    .venv/bin/python -m bench.invalidate            # more repeats and slices
    .venv/bin/python -m bench.invalidate --smoke    # sizes 1e2 and 1e3, seconds

`--py-spy DIR` samples the largest sidecar during the Invalidate series and both hot-hit
sidecars during the slices (raw collapsed stacks in DIR; slows what it samples).
The last line holds machine-readable key=value pairs.
"""
