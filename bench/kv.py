"""KV hot tier benchmark: LookupPrefix latency, demotion and promotion vs raw redis-py.

    python -m bench.kv [--quick]
    python -m bench.kv --smoke    # a few seconds

One process tree: a throwaway redis-server child, and in this process the
sidecar's KV hot tier (KvHotTier over the real shared-memory pool and the Redis
KV warm store), driven the way KvServicer drives it.

- LookupPrefix, server side: parse the request bytes, look up and pin the chain,
  encode the response (what the servicer does per RPC, without the transport),
  for chains of 16, 256 and 1,024 hot blocks; p50 and p99 over many rounds.
- Demotion: attach a new fingerprint and wait until every block of the previous
  version is in Redis, vs raw redis-py pipelined SET of values of the same size
  (same batch size, same client settings) in the same run.
- Promotion: roll back and look up the whole chain (every block comes from
  Redis), vs raw redis-py MGET of the same values.
- kv_bytes_over_grpc: bytes of every `bytes` field in the LookupPrefix responses
  (slot ids are integers; KV bytes would have to travel in a bytes field).

The last line is key=value: lookup_{16,256,1024}_p50_us, _p99_us,
demote_vs_redis, promote_vs_redis (throughput ratios; >= 0.7 is the goal) and
kv_bytes_over_grpc.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import statistics
import tempfile
import time
from collections.abc import Sequence
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from infercache.v1 import kv_pb2 as pb

from bench.harness.procs import interrupt_on, redis_server, start_all
from bench.harness.report import print_summary
from bench.harness.stats import percentile
from bench.harness.usage import load_average
from sidecar.api.kv_codec import prefix_to_pb
from sidecar.backends.redis.backend import connect
from sidecar.backends.redis.kv_warm import RedisKvWarmStore
from sidecar.config import KvConfig
from sidecar.kv.hot_tier import KvHotTier
from sidecar.kv.layout import BlockKey, make_layout
from sidecar.kv.movement import BATCH_BLOCKS
from sidecar.kv.torch_pool import SharedMemorySlotPool
from sidecar.kv.warm import encode_block

CHAINS = (16, 256, 1024)


def kv_bytes(msg: Message) -> int:
    """Total length of every bytes field in a message, recursively."""
    total = 0
    for field, value in msg.ListFields():
        if field.type == FieldDescriptor.TYPE_BYTES:
            total += sum(map(len, value)) if field.is_repeated else len(value)
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            items = value if field.is_repeated else [value]
            total += sum(kv_bytes(m) for m in items)
    return total


async def bench_lookup(rounds: int) -> tuple[dict[str, float], int]:
    """Server-side LookupPrefix latency on a pool of small blocks (size does not matter)."""
    layout = make_layout(
        num_layers=1, num_kv_heads=1, head_dim=64, tokens_per_block=4, dtype="float16"
    )
    n = max(CHAINS)
    shm = tempfile.mkdtemp(prefix="ic-kv-bench-", dir="/dev/shm")
    tier = KvHotTier(
        KvConfig(pool_bytes=n * layout.block_bytes).to_settings(),
        lambda slots, size: SharedMemorySlotPool(slots, size, shm),
    )
    a, _ = await tier.attach("fp-bench", "", layout)
    hashes = [os.urandom(32) for _ in range(n)]
    slots, lease = await tier.allocate(a.attachment_id, n)
    await tier.commit(
        a.attachment_id, lease.lease_id, "acme", "", list(zip(slots, hashes, strict=True))
    )
    await tier.release(a.attachment_id, lease.lease_id)
    out: dict[str, float] = {}
    leaked = 0
    for chain in CHAINS:
        raw = pb.LookupPrefixRequest(
            attachment_id=a.attachment_id, tenant="acme", block_hashes=hashes[:chain]
        ).SerializeToString()
        times: list[float] = []
        for i in range(rounds + 20):
            t0 = time.perf_counter_ns()
            req = pb.LookupPrefixRequest.FromString(raw)
            result = await tier.lookup_prefix(
                req.attachment_id, req.tenant, req.cache_salt, req.block_hashes
            )
            resp = prefix_to_pb(result)
            resp.SerializeToString()
            t1 = time.perf_counter_ns()
            assert resp.matched_blocks == chain
            leaked += kv_bytes(resp)
            assert result.lease is not None
            await tier.release(a.attachment_id, result.lease.lease_id)
            if i >= 20:  # warm-up rounds are not counted
                times.append((t1 - t0) / 1000)
        out[f"lookup_{chain}_p50_us"] = statistics.median(times)
        out[f"lookup_{chain}_p99_us"] = percentile(times, 0.99)
    await tier.close()
    os.rmdir(shm)
    return out, leaked


async def raw_set(client: Any, values: list[tuple[bytes, bytes]], ttl_ms: int) -> float:
    """Seconds for pipelined SET PX of the values in BATCH_BLOCKS batches (the baseline)."""
    t0 = time.perf_counter()
    for start in range(0, len(values), BATCH_BLOCKS):
        pipe = client.pipeline(transaction=False)
        for k, v in values[start : start + BATCH_BLOCKS]:
            pipe.set(k, v, px=ttl_ms)
        await pipe.execute()
    return time.perf_counter() - t0


async def raw_get(client: Any, keys: list[bytes]) -> float:
    """Seconds for MGET of the keys in BATCH_BLOCKS batches (the baseline)."""
    t0 = time.perf_counter()
    for start in range(0, len(keys), BATCH_BLOCKS):
        values = await client.mget(keys[start : start + BATCH_BLOCKS])
        assert all(v is not None for v in values)
    return time.perf_counter() - t0


async def bench_movement(
    redis_url: str, blocks: int, layers: int, repeats: int
) -> dict[str, float]:
    """Demotion and promotion of `blocks` blocks vs raw SET / MGET of the same sizes."""
    layout = make_layout(
        num_layers=layers, num_kv_heads=8, head_dim=128, tokens_per_block=16, dtype="bfloat16"
    )
    size = layout.block_bytes
    backend = connect(redis_url, connect_timeout_s=1, socket_timeout_s=30)
    client = backend.redis
    shm = tempfile.mkdtemp(prefix="ic-kv-bench-", dir="/dev/shm")
    demote_s: list[float] = []
    promote_s: list[float] = []
    set_s: list[float] = []
    get_s: list[float] = []
    payloads = [os.urandom(size) for _ in range(8)]
    for r in range(repeats):
        await client.flushall()
        tier = KvHotTier(
            KvConfig(pool_bytes=blocks * size, promote_timeout_ms=600_000).to_settings(),
            lambda slots, sz: SharedMemorySlotPool(slots, sz, shm),
            RedisKvWarmStore(backend, key_prefix="bench:", timeout_s=30),
        )
        v1, _ = await tier.attach(f"fp-v1-{r}", "", layout)
        hashes = [os.urandom(32) for _ in range(blocks)]
        slots, lease = await tier.allocate(v1.attachment_id, blocks)
        for i, slot in enumerate(slots):
            tier.pool.write(slot, payloads[i % len(payloads)])
        await tier.commit(
            v1.attachment_id, lease.lease_id, "acme", "", list(zip(slots, hashes, strict=True))
        )
        await tier.release(v1.attachment_id, lease.lease_id)

        t0 = time.perf_counter()
        await tier.attach(f"fp-v2-{r}", "", layout)
        await tier.settled()
        demote_s.append(time.perf_counter() - t0)
        assert tier.stats.demoted_blocks == blocks, tier.stats

        back, _ = await tier.attach(f"fp-v1-{r}", "", layout)
        await tier.settled()
        t0 = time.perf_counter()
        res = await tier.lookup_prefix(back.attachment_id, "acme", "", hashes)
        promote_s.append(time.perf_counter() - t0)
        assert len(res.slots) == blocks, res
        assert res.promoted == blocks, res
        await tier.close()

        # Raw redis-py: the same number of values of the same size, same batches.
        # Same-size values: what the tier stores per block (header + key + checksum + KV).
        stored = len(encode_block(BlockKey(b"k" * 64), payloads[0]))
        raw = [(b"raw:%d:%d" % (r, i), os.urandom(stored)) for i in range(blocks)]
        set_s.append(await raw_set(client, raw, 3_600_000))
        get_s.append(await raw_get(client, [k for k, _ in raw]))
    await client.flushall()
    await client.aclose()
    os.rmdir(shm)
    mib = blocks * size / 2**20
    demote, promote = statistics.median(demote_s), statistics.median(promote_s)
    raw_set_s, raw_get_s = statistics.median(set_s), statistics.median(get_s)
    print(f"movement: {blocks} blocks x {size / 1024:.0f} KiB ({mib:.0f} MiB), median of {repeats}")
    print(f"  demote   {mib / demote:8.1f} MiB/s   raw SET {mib / raw_set_s:8.1f} MiB/s")
    print(f"  promote  {mib / promote:8.1f} MiB/s   raw MGET {mib / raw_get_s:8.1f} MiB/s")
    return {
        "block_kib": size / 1024,
        "demote_mib_s": mib / demote,
        "raw_set_mib_s": mib / raw_set_s,
        "promote_mib_s": mib / promote,
        "raw_get_mib_s": mib / raw_get_s,
        "demote_vs_redis": raw_set_s / demote,
        "promote_vs_redis": raw_get_s / promote,
    }


async def run(args: argparse.Namespace, redis_url: str) -> int:
    """Both measurements; prints them and the summary line."""
    lookup, leaked = await bench_lookup(args.rounds)
    print(f"LookupPrefix server side (parse + lookup + pin + encode), {args.rounds} rounds:")
    for chain in CHAINS:
        p50, p99 = lookup[f"lookup_{chain}_p50_us"], lookup[f"lookup_{chain}_p99_us"]
        print(f"  {chain:5d} blocks  p50 {p50:8.1f} us  p99 {p99:8.1f} us")
    moved = await bench_movement(redis_url, args.blocks, args.layers, args.repeats)
    fields = {**lookup, **moved, "kv_bytes_over_grpc": leaked}
    print(f"load average: {load_average()}")
    print_summary(fields)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Start a redis-server, run the benchmark (--quick, --smoke: fewer rounds and blocks)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds and blocks")
    parser.add_argument("--rounds", type=int, default=500, help="lookups per chain length")
    parser.add_argument("--blocks", type=int, default=256, help="blocks demoted and promoted")
    parser.add_argument("--layers", type=int, default=4, help="layers per block (size)")
    parser.add_argument("--repeats", type=int, default=3, help="demote/promote repeats")
    parser.add_argument("--smoke", action="store_true", help="a few seconds: tiny rounds")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.blocks, args.repeats = 100, 64, 1
    if args.smoke:
        args.rounds, args.blocks, args.layers, args.repeats = 20, 8, 1, 1
    interrupt_on(signal.SIGTERM)
    with contextlib.ExitStack() as stack, tempfile.TemporaryDirectory() as data:
        redis = redis_server(data, "redis")
        start_all(stack, [redis])
        return asyncio.run(run(args, f"redis://127.0.0.1:{redis.port}/0"))


if __name__ == "__main__":
    raise SystemExit(main())
