#!/usr/bin/env python3
"""Invalidation benchmark (issue 3): Invalidate latency against the number of entries
present, and what the freshness/invalidation check costs a hot hit.

Part 1, Invalidate latency. For each size (1e3 and 1e5 entries by default) a redis-server
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

Part 2, freshness cost. Two sidecars on the same kind of store (embedded by default,
`--store redis` for one redis-server each): the normal one, and
bench/sidecar_without_freshness.py (the same server with Freshness.confirmed and
RuleSet.is_dead patched to constants). Both first get the same 50 unrelated invalidation
rules spread over all 15 selector shapes (so is_dead does its full work), then the same
256 stored 1 KiB results. One client process (grpc.aio, one channel per server,
concurrency 16, identical code for both) drives hot-tier HITs in short slices (0.2 s)
that alternate between the servers (ABBA order), so background load on a shared machine
falls on both alike. freshness_cost = median over adjacent slice pairs of RPC/s without the
check / RPC/s with it. Also reported: the server CPU per RPC (from /proc), and the cost
expected from an in-process timing of is_dead and confirmed(). `--control` puts the
normal sidecar in both slots (an A/A run: the noise floor of the ratio).

    .venv/bin/python bench/invalidate.py --quick    # under a minute
    .venv/bin/python bench/invalidate.py            # more repeats and slices

`--py-spy DIR` samples the largest sidecar during the Invalidate series and both hot-hit
sidecars during the slices (raw collapsed stacks in DIR; slows what it samples).
The last line holds machine-readable key=value pairs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import functools
import itertools
import json
import math
import os
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from common import (
    CALL_TIMEOUT_S,
    CHANNEL_OPTIONS,
    ServerProc,
    cpu_seconds,
    die_with_parent,
    free_port,
    interrupt_on,
    load_average,
    redis_server,
    sidecar_env,
    start_all,
    worker_runner,
)

LAUNCHER = Path(__file__).resolve().with_name("sidecar_without_freshness.py")
PAYLOAD = bytes(range(256)) * 4  # the ~1 KiB result of the hot-hit scenario
N_KEYS = 256
CONCURRENCY = 16
KEY_PREFIX = "ic:v1:"
POPULATE_BATCH = 1000
ENTRY_TTL_S = 3600
ADMIN_NAME = "bench"
DIMENSIONS = ("tenant", "model_version", "adapter_version", "prompt_version")
# Dimensions of the hot-hit keys; the unrelated rules never match them.
HOT_TENANT = "bench"
HOT_MODEL = "fp1-bench0000000000000000"
HOT_PROMPT = "support-v3"
TIER_HOT = 1  # infercache.v1.Tier; the main process never imports grpc


# --------------------------------------------------------------------------- processes


def sidecar_server(
    name: str, token: str, uvloop: bool, *flags: str, without_check: bool = False
) -> ServerProc:
    """A real sidecar (or the launcher without the check) with data and admin planes."""
    port, admin = free_port(), free_port()
    head = [sys.executable, str(LAUNCHER)] if without_check else [sys.executable, "-m"]
    argv = head + ([] if without_check else ["sidecar", "serve"])
    argv += ["--listen", f"127.0.0.1:{port}", "--admin-listen", f"127.0.0.1:{admin}"]
    argv += ["--admin-tokens", f"{ADMIN_NAME}={token}", "--log-level", "warning"]
    argv += ["--grace-period-s", "1", "--uvloop", "true" if uvloop else "false", *flags]
    # Only the flags above configure it; stray INFERCACHE_* variables must not.
    return ServerProc(name, argv, (port, admin), env=sidecar_env())


class PySpy:
    """py-spy (from the venv) sampling one process until stop(); raw collapsed stacks."""

    def __init__(self, pid: int, out: Path) -> None:
        binary = Path(sys.executable).with_name("py-spy")
        argv = [str(binary), "record", "-p", str(pid), "-r", "500", "--native"]
        argv += ["--format", "raw", "-o", str(out)]
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=die_with_parent
        )
        time.sleep(0.5)  # let it attach

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# --------------------------------------------------------------------------- shared helpers


def label(n: int) -> str:
    """1000 -> "1e3"; other sizes as plain numbers."""
    exp = round(math.log10(n)) if n > 0 else 0
    return f"1e{exp}" if 10**exp == n else str(n)


def rule_shapes() -> list[tuple[bool, bool, bool, bool]]:
    """The 15 selector shapes (constrained dimensions), fewest dimensions first."""
    shapes = [
        (a, b, c, d)
        for a, b, c, d in itertools.product((False, True), repeat=4)
        if a or b or c or d
    ]
    return sorted(shapes, key=lambda s: (sum(s), [not x for x in s]))


def unrelated_selectors(n: int, n_shapes: int) -> list[dict[str, str]]:
    """n selectors cycling over the first n_shapes shapes; none matches a bench key."""
    shapes = rule_shapes()[:n_shapes]
    return [
        {
            d: f"unrelated-{i}"
            for d, on in zip(DIMENSIONS, shapes[i % len(shapes)], strict=True)
            if on
        }
        for i in range(n)
    ]


def pct(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (p99 of 20 samples is their maximum)."""
    s = sorted(values)
    if not s:
        return float("nan")
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


# --------------------------------------------------------------------------- populate (main)


def populate(port: int, n: int, model_version: str, entry_bytes: int) -> float:
    """Write n real entries straight into Redis; returns the seconds it took."""
    import redis

    from sidecar import entries
    from sidecar.backends.redis.client import RedisKeys
    from sidecar.keys import InputKind, KeyRequest, build_key

    keys = RedisKeys(KEY_PREFIX)
    payload = (PAYLOAD * (entry_bytes // len(PAYLOAD) + 1))[:entry_bytes]
    now_ms = time.time_ns() // 1_000_000
    started = time.perf_counter()
    client = redis.Redis(host="127.0.0.1", port=port)
    try:
        for first in range(0, n, POPULATE_BATCH):
            pipe = client.pipeline(transaction=False)
            for i in range(first, min(n, first + POPULATE_BATCH)):
                key = build_key(
                    KeyRequest(
                        tenant=f"tenant-{i % 8}",
                        model_version=model_version,
                        prompt_version="inv-bench-v1",
                        input=f"populated entry {i}: summarise the ticket and propose a step",
                        input_kind=InputKind.TEXT,
                    )
                )
                entry = entries.Entry(key.material, payload, now_ms, ENTRY_TTL_S)
                pipe.set(keys.entry(key.digest), entries.encode(entry), px=ENTRY_TTL_S * 1000)
            pipe.execute()
    finally:
        client.close()
    return time.perf_counter() - started


def hold_reclaim_lock(port: int) -> None:
    """Take the fleet's reclaim lock as a foreign owner: no sidecar will run a reclaim pass."""
    import redis

    from sidecar.backends.redis.client import RedisKeys

    client = redis.Redis(host="127.0.0.1", port=port)
    try:
        client.set(RedisKeys(KEY_PREFIX).meta("lock:reclaim"), "bench-invalidate", px=3_600_000)
    finally:
        client.close()


def redis_work(port: int) -> dict[str, tuple[int, int]]:
    """Per command: (calls, µs spent executing them) so far, from INFO commandstats."""
    import redis

    client = redis.Redis(host="127.0.0.1", port=port)
    try:
        stats: dict[str, dict[str, Any]] = client.info("commandstats")
    finally:
        client.close()
    return {
        k.removeprefix("cmdstat_"): (int(v["calls"]), int(v["usec"]))
        for k, v in stats.items()
        if k != "cmdstat_info"
    }


def work_delta(
    before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]], per: int
) -> dict[str, tuple[float, float]]:
    """Per command: (calls, µs) between two snapshots, divided by `per`."""
    out = {}
    for cmd, (calls, usec) in after.items():
        c0, u0 = before.get(cmd, (0, 0))
        if calls > c0:
            out[cmd] = ((calls - c0) / per, (usec - u0) / per)
    return out


def count_entries(port: int) -> int:
    """Entry keys present (a full SCAN; every populated entry matches the bench selector)."""
    import redis

    from sidecar.backends.redis.client import RedisKeys

    client = redis.Redis(host="127.0.0.1", port=port)
    try:
        pattern = RedisKeys(KEY_PREFIX).entry_pattern
        return sum(1 for _ in client.scan_iter(match=pattern, count=10_000))
    finally:
        client.close()


# --------------------------------------------------------------------------- client worker

Mark = Callable[[str], None]


async def _invalidate_series(
    mark: Mark,
    targets: list[tuple[int, str]],
    token: str,
    warmup: int,
    repeats: int,
    pause_s: float,
) -> list[dict[str, list[int]]]:
    """Time Invalidate(model_version=...) on each (admin port, model) in turn."""
    import grpc
    from infercache.v1 import admin_pb2 as apb
    from infercache.v1 import admin_pb2_grpc

    metadata = (("authorization", f"Bearer {token}"),)
    channels = [grpc.aio.insecure_channel(f"127.0.0.1:{port}") for port, _ in targets]
    out: list[dict[str, list[int]]] = [{"latencies_ns": [], "estimates": []} for _ in targets]
    try:
        stubs = []
        for ch in channels:
            await asyncio.wait_for(ch.channel_ready(), 30)
            stubs.append(admin_pb2_grpc.AdminServiceStub(ch))
        for r in range(warmup + repeats):
            if r == warmup:
                mark("start")
            order = list(range(len(targets)))
            if r % 2:
                order.reverse()  # alternate which size goes first
            for j in order:
                # Let the previous invalidation's pub/sub refresh settle first.
                await asyncio.sleep(pause_s)
                req = apb.InvalidateRequest(
                    selector=apb.Selector(model_version=targets[j][1]),
                    reason=f"bench/invalidate.py repeat {r}",
                )
                t0 = time.perf_counter_ns()
                resp = await stubs[j].Invalidate(req, metadata=metadata, timeout=CALL_TIMEOUT_S)
                elapsed = time.perf_counter_ns() - t0
                if r >= warmup:
                    out[j]["latencies_ns"].append(elapsed)
                    out[j]["estimates"].append(int(resp.record.estimated_entries))
        mark("end")
    finally:
        for ch in channels:
            await ch.close()
    return out


async def _estimate_reads(mark: Mark, ports: list[int], repeats: int) -> list[dict[str, float]]:
    """Time the reads Invalidator._estimate makes, straight against each Redis."""
    from sidecar import entries
    from sidecar.backends.redis.warm import RedisWarmTier
    from sidecar.invalidation.invalidator import _SAMPLE
    from sidecar.keys import dims_from_material

    out = []
    for port in ports:
        tier = RedisWarmTier(
            f"redis://127.0.0.1:{port}/0",
            key_prefix=KEY_PREFIX,
            read_timeout_s=5.0,
            write_timeout_s=5.0,
        )
        scan, size, match = [], [], []
        sample = 0
        try:
            for _ in range(repeats):
                t0 = time.perf_counter()
                _, page = await tier.scan_page(0, _SAMPLE)
                t1 = time.perf_counter()
                await tier.approx_entries()
                t2 = time.perf_counter()
                for _, head in page:  # what _estimate does with the sample
                    peeked = entries.peek(head)
                    if peeked:
                        dims_from_material(peeked[1])
                t3 = time.perf_counter()
                scan.append(t1 - t0)
                size.append(t2 - t1)
                match.append(t3 - t2)
                sample = len(page)
        finally:
            await tier.close()
        out.append(
            {
                "scan_ms": statistics.median(scan) * 1e3,
                "dbsize_ms": statistics.median(size) * 1e3,
                "match_ms": statistics.median(match) * 1e3,
                "sample": sample,
            }
        )
    return out


def hot_keys() -> list[Any]:
    """The N_KEYS CacheKeys of the hot-hit scenario (~200-character prompts)."""
    from infercache_client import make_key

    filler = "Summarise the attached support ticket and propose the next step. " * 3
    return [
        make_key(
            tenant=HOT_TENANT,
            model_version=HOT_MODEL,
            prompt_version=HOT_PROMPT,
            text=f"ticket {i}: {filler}",
            temperature=0.0,
            max_tokens=256,
        )
        for i in range(N_KEYS)
    ]


async def _setup_hot(
    mark: Mark, port: int, admin_port: int, token: str, n_rules: int, n_shapes: int
) -> int:
    """Commit the unrelated rules, then store every hot key; returns the rules committed."""
    import grpc
    from infercache.v1 import admin_pb2 as apb
    from infercache.v1 import admin_pb2_grpc, cache_pb2_grpc
    from infercache.v1 import cache_pb2 as pb

    metadata = (("authorization", f"Bearer {token}"),)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{admin_port}") as ach:
        await asyncio.wait_for(ach.channel_ready(), 30)
        admin = admin_pb2_grpc.AdminServiceStub(ach)
        for sel in unrelated_selectors(n_rules, n_shapes):
            selector = apb.Selector(
                tenant=sel.get("tenant", ""),
                model_version=sel.get("model_version", ""),
                adapter_version=sel.get("adapter_version", ""),
                prompt_version=sel.get("prompt_version", ""),
            )
            await admin.Invalidate(
                apb.InvalidateRequest(selector=selector, reason="bench: unrelated rule"),
                metadata=metadata,
                timeout=CALL_TIMEOUT_S,
            )
    # Stored after the rules: each entry's epoch is newer, so none of them is dead.
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=CHANNEL_OPTIONS) as ch:
        await asyncio.wait_for(ch.channel_ready(), 30)
        stub = cache_pb2_grpc.CacheServiceStub(ch)
        for key in hot_keys():
            miss = await stub.Lookup(pb.LookupRequest(key=key), timeout=CALL_TIMEOUT_S)
            if miss.outcome != pb.LOOKUP_OUTCOME_HIT:
                store = pb.StoreRequest(
                    key=key, payload=PAYLOAD, ttl_seconds=3600, lease=miss.lease
                )
                resp = await stub.Store(store, timeout=CALL_TIMEOUT_S)
                if resp.outcome != pb.STORE_OUTCOME_STORED:
                    raise RuntimeError(f"store on port {port} answered {resp}")
            found = await stub.Lookup(pb.LookupRequest(key=key), timeout=CALL_TIMEOUT_S)
            if found.outcome != pb.LOOKUP_OUTCOME_HIT or found.tier != pb.TIER_HOT:
                raise RuntimeError(f"lookup after store on port {port} answered {found}")
    return n_rules


Send = Callable[[Any], Any]


async def _open_hot(port: int) -> tuple[Any, Send]:
    """A channel to a sidecar and its Lookup callable (with the per-call deadline)."""
    import grpc
    from infercache.v1 import cache_pb2_grpc

    ch = grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=CHANNEL_OPTIONS)
    await asyncio.wait_for(ch.channel_ready(), 30)
    stub = cache_pb2_grpc.CacheServiceStub(ch)
    return ch, functools.partial(stub.Lookup, timeout=CALL_TIMEOUT_S)


async def _hot_slice(
    send: Send, reqs: Sequence[Any], pid: int, concurrency: int, duration_s: float
) -> dict[str, Any]:
    """`concurrency` tasks in a closed loop of hot-hit Lookups for duration_s, then drained.

    Everything is counted, from the first call to the last answer, so a slice's ops, time
    and both processes' CPU (the server's from /proc) belong to it alone.
    """
    from infercache.v1 import cache_pb2 as pb

    hit, size, n = pb.LOOKUP_OUTCOME_HIT, len(PAYLOAD), len(reqs)
    clock = time.perf_counter_ns
    latencies: list[int] = []
    counts = {"ops": 0, "errors": 0}
    first_error: list[str] = []
    stopping = False

    async def driver(i: int) -> None:
        while not stopping:
            req = reqs[i % n]
            i += concurrency
            t0 = clock()
            try:
                resp = await send(req)
                ok = resp.outcome == hit and resp.tier == TIER_HOT and len(resp.payload) == size
                if not ok and not first_error:
                    first_error.append(f"not a hot HIT of {size} B: {resp.outcome=} {resp.tier=}")
            except Exception as exc:
                ok = False
                if not first_error:
                    first_error.append(f"{type(exc).__name__}: {exc}"[:500])
                await asyncio.sleep(0.001)
            if ok:
                latencies.append(clock() - t0)
                counts["ops"] += 1
            else:
                counts["errors"] += 1

    srv0, cli0, t0 = cpu_seconds(pid), time.process_time(), time.perf_counter()
    tasks = [asyncio.create_task(driver(i)) for i in range(concurrency)]
    await asyncio.sleep(duration_s)
    stopping = True
    await asyncio.gather(*tasks)
    return {
        "ops": counts["ops"],
        "errors": counts["errors"],
        "first_error": first_error[0] if first_error else "",
        "elapsed_s": time.perf_counter() - t0,
        "server_cpu_s": cpu_seconds(pid) - srv0,
        "client_cpu_s": time.process_time() - cli0,
        "latencies_ns": latencies,
    }


def _hot_requests() -> list[Any]:
    from infercache.v1 import cache_pb2 as pb

    return [pb.LookupRequest(key=k) for k in hot_keys()]


async def _drive_interleaved(
    mark: Mark,
    targets: list[tuple[int, int]],
    concurrency: int,
    warmup_s: float,
    slices: int,
    slice_s: float,
) -> list[dict[str, Any]]:
    """Hot hits at two (port, server pid) targets in turn, switching every slice (ABBA)."""
    reqs = _hot_requests()
    opened = [await _open_hot(port) for port, _ in targets]
    out: list[dict[str, Any]] = []
    try:
        for j, (_, send) in enumerate(opened):
            await _hot_slice(send, reqs, targets[j][1], concurrency, warmup_s)
        mark("start")
        for k in range(slices):
            pair, pos = divmod(k, 2)
            j = pos if pair % 2 == 0 else 1 - pos  # 0 1 1 0 0 1 1 0 ...
            x = await _hot_slice(opened[j][1], reqs, targets[j][1], concurrency, slice_s)
            out.append({"pair": pair, "target": j, **x})
        mark("end")
    finally:
        for ch, _ in opened:
            await ch.close()
    return out


_OPS: dict[str, Callable[..., Any]] = {
    "invalidate": _invalidate_series,
    "estimate_reads": _estimate_reads,
    "setup_hot": _setup_hot,
    "drive_interleaved": _drive_interleaved,
}


def _worker_main(conn: Connection, uvloop: bool) -> None:
    """The client process: runs the ops the bench sends until it sends None."""

    def mark(what: str) -> None:
        conn.send(("mark", what))

    with worker_runner(uvloop) as runner:
        while True:
            try:
                msg = conn.recv()
            except EOFError:
                return
            if msg is None:
                return
            op, args = msg
            try:
                conn.send(("ok", runner.run(_OPS[op](mark, *args))))
            except Exception as exc:
                conn.send(("error", f"{op}: {type(exc).__name__}: {exc}"))


class Worker:
    """One spawned client process (the bench process itself never imports grpc)."""

    def __init__(self, uvloop: bool) -> None:
        import multiprocessing as mp

        ctx = mp.get_context("spawn")  # no fork: grpc must start fresh in the client
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker_main, args=(child, uvloop), daemon=True)
        self.proc.start()
        child.close()

    def call(
        self, op: str, *args: Any, on_mark: Mark | None = None, timeout_s: float = 600.0
    ) -> Any:
        """Run an op in the client; on_mark sees its "start"/"end" marks as they happen."""
        self.start(op, *args)
        return self.wait(op, on_mark=on_mark, timeout_s=timeout_s)

    def start(self, op: str, *args: Any) -> None:
        """Send an op without waiting (several workers can then run at once)."""
        self.conn.send((op, args))

    def wait(self, op: str, *, on_mark: Mark | None = None, timeout_s: float = 600.0) -> Any:
        """The answer to the op started last."""
        while True:
            if not self.conn.poll(timeout_s):
                raise RuntimeError(f"the client process did not answer {op} in {timeout_s} s")
            kind, value = self.conn.recv()
            if kind == "mark":
                if on_mark is not None:
                    on_mark(value)
                continue
            if kind == "error":
                raise RuntimeError(f"client process: {value}")
            return value

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.conn.send(None)
        self.proc.join(3)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()


# --------------------------------------------------------------------------- part 1


@dataclass
class InvalidateResult:
    """Invalidate figures for one size."""

    size: int
    true_before: int
    true_after: int
    populate_s: float
    latencies_ms: list[float]
    estimates: list[int]
    reads: dict[str, float]
    sidecar_cpu_ms: float  # per timed Invalidate, from /proc
    redis_by_cmd: dict[str, tuple[float, float]]  # per timed Invalidate: (calls, µs)

    @property
    def redis_calls(self) -> float:
        return sum(c for c, _ in self.redis_by_cmd.values())

    @property
    def redis_us(self) -> float:
        return sum(u for _, u in self.redis_by_cmd.values())

    @property
    def p50(self) -> float:
        return pct(self.latencies_ms, 0.50)

    @property
    def p99(self) -> float:
        return pct(self.latencies_ms, 0.99)

    @property
    def estimate(self) -> int:
        return round(statistics.median(self.estimates))


def bench_invalidate(
    args: argparse.Namespace, worker: Worker, token: str, tmp: str
) -> list[InvalidateResult]:
    sizes = sorted(int(float(s)) for s in args.sizes.split(","))
    with contextlib.ExitStack() as stack:
        redises = [redis_server(free_port(), tempfile.mkdtemp(dir=tmp)) for _ in sizes]
        start_all(stack, redises)
        populated: list[float] = []
        for n, rs in zip(sizes, redises, strict=True):
            populated.append(populate(rs.port, n, f"fp1-inv-{label(n)}", args.entry_bytes))
            if not args.reclaim:
                hold_reclaim_lock(rs.port)
            print(f"# populated {n:,} entries in {populated[-1]:.1f} s", file=sys.stderr)
        true_before = [count_entries(rs.port) for rs in redises]
        sidecars = [
            sidecar_server(
                f"sidecar-{label(n)}",
                token,
                args.uvloop,
                "--redis-url",
                f"redis://127.0.0.1:{rs.port}/0",
            )
            for n, rs in zip(sizes, redises, strict=True)
        ]
        start_all(stack, sidecars)
        targets = [
            (sc.ports[1], f"fp1-inv-{label(n)}") for n, sc in zip(sizes, sidecars, strict=True)
        ]
        spy: list[PySpy] = []
        cpu: dict[str, list[float]] = {}
        work: dict[str, list[dict[str, tuple[int, int]]]] = {}

        def on_mark(what: str) -> None:
            if spy and what == "end":
                spy.pop().stop()
            # Both sidecars and Redises are measured across the whole interleaved series:
            # each only works for its own Invalidates (plus a refresh every bound/3).
            cpu[what] = [cpu_seconds(sc.pid) for sc in sidecars]
            work[what] = [redis_work(rs.port) for rs in redises]
            if args.py_spy and what == "start":
                spy.append(PySpy(sidecars[-1].pid, Path(args.py_spy) / "invalidate-largest.txt"))

        series = worker.call(
            "invalidate", targets, token, args.inv_warmup, args.repeats, 0.05, on_mark=on_mark
        )
        for sc in sidecars:
            sc.check_alive()
        reads = worker.call("estimate_reads", [rs.port for rs in redises], 20)
        true_after = [count_entries(rs.port) for rs in redises]
    return [
        InvalidateResult(
            size=n,
            true_before=true_before[i],
            true_after=true_after[i],
            populate_s=populated[i],
            latencies_ms=[x / 1e6 for x in series[i]["latencies_ns"]],
            estimates=series[i]["estimates"],
            reads=reads[i],
            sidecar_cpu_ms=(cpu["end"][i] - cpu["start"][i]) * 1e3 / args.repeats,
            redis_by_cmd=work_delta(work["start"][i], work["end"][i], args.repeats),
        )
        for i, n in enumerate(sizes)
    ]


def print_invalidate(results: list[InvalidateResult], goal: float) -> str:
    """The tables; returns the ratio key's name."""
    head = (
        f"{'entries':>8} {'true':>9} {'estimate':>9} {'est min-max':>15} {'err':>6}"
        f" {'n':>4} {'p50 ms':>7} {'p99 ms':>7} {'mean ms':>7} {'min ms':>7}"
    )
    print(head)
    print("-" * len(head))
    for r in results:
        err = (r.estimate - r.true_before) / r.true_before * 100 if r.true_before else 0.0
        spread = f"{min(r.estimates):,}-{max(r.estimates):,}"
        print(
            f"{label(r.size):>8} {r.true_before:>9,} {r.estimate:>9,} {spread:>15} {err:>5.1f}%"
            f" {len(r.latencies_ms):>4} {r.p50:>7.2f} {r.p99:>7.2f}"
            f" {statistics.fmean(r.latencies_ms):>7.2f} {min(r.latencies_ms):>7.2f}"
        )
    print()
    head = (
        f"{'entries':>8} {'sidecar cpu ms':>14} {'redis cmds':>10} {'redis µs':>9}"
        f" {'est: scan+heads ms':>18} {'dbsize ms':>9} {'sample':>6}"
    )
    print("# work per timed Invalidate, and the estimate's reads timed on their own")
    print(head)
    print("-" * len(head))
    for r in results:
        print(
            f"{label(r.size):>8} {r.sidecar_cpu_ms:>14.2f} {r.redis_calls:>10.1f}"
            f" {r.redis_us:>9.0f} {r.reads['scan_ms']:>18.2f} {r.reads['dbsize_ms']:>9.2f}"
            f" {r.reads['sample']:>6.0f}"
        )
    for r in results:
        top = sorted(r.redis_by_cmd.items(), key=lambda kv: -kv[1][1])[:6]
        text = ", ".join(f"{cmd} {c:.1f}x {u:.0f} µs" for cmd, (c, u) in top)
        print(f"# {label(r.size)} Redis per Invalidate: {text}")
    lo, hi = results[0], results[-1]
    key = f"invalidate_{label(hi.size)}_vs_{label(lo.size)}"
    ratio = hi.p50 / lo.p50
    verdict = "met" if ratio <= goal else "MISSED"
    print(
        f"# {key} = {ratio:.3f} (p50 ratio; goal <= {goal}: {verdict});"
        f" sidecar CPU ratio {hi.sidecar_cpu_ms / lo.sidecar_cpu_ms:.3f},"
        f" Redis µs ratio {hi.redis_us / lo.redis_us:.3f}"
    )
    for r in results:
        if r.true_after != r.true_before:
            print(
                f"# {label(r.size)}: {r.true_before - r.true_after:,} entries reclaimed meanwhile"
            )
    return key


# --------------------------------------------------------------------------- part 2


@dataclass
class SliceResult:
    """One slice of hot-hit Lookups against one variant."""

    variant: str
    pair: int
    ops: int
    errors: int
    first_error: str
    elapsed_s: float
    server_cpu_s: float
    client_cpu_s: float
    latencies_ns: list[int]


VARIANTS = ("with check", "without check")


def check_cost(n_rules: int, n_shapes: int) -> dict[str, float]:
    """In-process µs per call of the two checks a hot hit makes, with the bench's rules."""
    from sidecar.invalidation.embedded_store import EmbeddedControlStore
    from sidecar.invalidation.freshness import Freshness
    from sidecar.invalidation.rules import Rule, RuleSet, Selector

    def timed(fn: Callable[[], object]) -> float:
        number = 20_000
        return min(timeit.repeat(fn, number=number, repeat=5)) / number * 1e6

    dims = (HOT_TENANT, HOT_MODEL, "", HOT_PROMPT)
    out: dict[str, float] = {}
    for name, n in (("is_dead_us", n_rules), ("is_dead_us_no_rules", 0)):
        rules = RuleSet()
        for i, sel in enumerate(unrelated_selectors(n, n_shapes)):
            selector = Selector(
                tenant=sel.get("tenant"),
                model_version=sel.get("model_version"),
                adapter_version=sel.get("adapter_version"),
                prompt_version=sel.get("prompt_version"),
            )
            rules.add(Rule(i + 1, selector, 0))
        out[name] = timed(functools.partial(rules.is_dead, dims, rules.epoch))
    freshness = Freshness(EmbeddedControlStore(), RuleSet())
    out["confirmed_us"] = timed(freshness.confirmed)
    out["noop_call_us"] = timed(lambda: None)
    return out


def _slice(variant: str, pair: int, x: dict[str, Any]) -> SliceResult:
    return SliceResult(
        variant=variant,
        pair=pair,
        ops=x["ops"],
        errors=x["errors"],
        first_error=x["first_error"],
        elapsed_s=x["elapsed_s"],
        server_cpu_s=x["server_cpu_s"],
        client_cpu_s=x["client_cpu_s"],
        latencies_ns=x["latencies_ns"],
    )


def bench_freshness(
    args: argparse.Namespace, worker: Worker, token: str, tmp: str
) -> list[SliceResult]:
    """Alternating slices of hot hits with and without the check."""
    with contextlib.ExitStack() as stack:
        flags: list[list[str]] = [[], []]
        if args.store == "redis":
            redises = [redis_server(free_port(), tempfile.mkdtemp(dir=tmp)) for _ in VARIANTS]
            start_all(stack, redises)
            flags = [["--redis-url", f"redis://127.0.0.1:{r.port}/0"] for r in redises]
        servers = [
            sidecar_server(
                v, token, args.uvloop, *f, without_check=v == VARIANTS[1] and not args.control
            )
            for v, f in zip(VARIANTS, flags, strict=True)
        ]
        start_all(stack, servers)
        for s in servers:
            worker.call("setup_hot", s.ports[0], s.ports[1], token, args.rules, args.rule_shapes)
        spies: list[PySpy] = []

        def on_mark(what: str) -> None:
            if args.py_spy and what == "start":
                for srv in servers:
                    name = srv.name.replace(" ", "-")
                    spies.append(PySpy(srv.pid, Path(args.py_spy) / f"hot-{name}.txt"))
            elif what == "end":
                for spy in spies:
                    spy.stop()

        slices = args.slices + args.slices % 2  # whole pairs
        raw = worker.call(
            "drive_interleaved",
            [(srv.port, srv.pid) for srv in servers],
            CONCURRENCY,
            args.warmup,
            slices,
            args.slice_s,
            on_mark=on_mark,
        )
        alternating = [_slice(VARIANTS[x["target"]], x["pair"], x) for x in raw]

        for srv in servers:
            srv.check_alive()
    return alternating


@dataclass
class Pooled:
    """One variant over a set of slices."""

    ops: int
    elapsed_s: float
    server_cpu_s: float
    client_cpu_s: float
    errors: int
    p50_us: float
    p99_us: float

    @classmethod
    def of(cls, slices: Sequence[SliceResult]) -> Pooled:
        lat = sorted(x for s in slices for x in s.latencies_ns)
        return cls(
            ops=sum(s.ops for s in slices),
            elapsed_s=sum(s.elapsed_s for s in slices),
            server_cpu_s=sum(s.server_cpu_s for s in slices),
            client_cpu_s=sum(s.client_cpu_s for s in slices),
            errors=sum(s.errors for s in slices),
            p50_us=pct(lat, 0.50) / 1000,
            p99_us=pct(lat, 0.99) / 1000,
        )

    @property
    def rps(self) -> float:
        return self.ops / self.elapsed_s if self.elapsed_s else float("nan")

    @property
    def server_us(self) -> float:
        return self.server_cpu_s * 1e6 / self.ops if self.ops else float("nan")


@dataclass
class Summary:
    """Both variants; costs are medians of the per-pair ratios (adjacent slices)."""

    on: Pooled
    off: Pooled
    cost: float  # RPC/s without / RPC/s with
    cost_q: tuple[float, float]  # quartiles of the pair ratios
    cpu_cost: float  # server µs/RPC with / without
    pairs: int
    expected: float = math.nan  # from the in-process timing of the checks


def summarise(results: list[SliceResult]) -> Summary:
    by_pair: dict[int, dict[str, SliceResult]] = {}
    for r in results:
        by_pair.setdefault(r.pair, {})[r.variant] = r
    costs, cpu = [], []
    for both in by_pair.values():
        on, off = Pooled.of([both[VARIANTS[0]]]), Pooled.of([both[VARIANTS[1]]])
        if on.ops and off.ops and on.server_cpu_s > 0 and off.server_cpu_s > 0:
            costs.append(off.rps / on.rps)
            cpu.append(on.server_us / off.server_us)
    q = statistics.quantiles(costs, n=4) if len(costs) > 1 else [math.nan] * 3
    return Summary(
        on=Pooled.of([r for r in results if r.variant == VARIANTS[0]]),
        off=Pooled.of([r for r in results if r.variant == VARIANTS[1]]),
        cost=statistics.median(costs) if costs else math.nan,
        cost_q=(q[0], q[2]),
        cpu_cost=statistics.median(cpu) if cpu else math.nan,
        pairs=len(costs),
    )


def print_freshness(
    results: list[SliceResult], costs: dict[str, float], goal: float, blocks: int = 6
) -> Summary:
    head = (
        f"{'pairs':>9} {'variant':<14} {'RPC/s':>8} {'p50 µs':>7} {'p99 µs':>7}"
        f" {'srv cpu':>7} {'srv µs/RPC':>10} {'cli cpu':>7} {'err':>4} {'without/with':>12}"
    )
    print(head)
    print("-" * len(head))
    npairs = max(r.pair for r in results) + 1
    edges = [round(b * npairs / blocks) for b in range(blocks + 1)]
    groups = [(f"{lo}-{hi - 1}", lo, hi) for lo, hi in itertools.pairwise(edges) if hi > lo]
    for name, lo, hi in [*groups, ("all", 0, npairs)]:
        if name == "all":
            print("-" * len(head))
        chosen = [r for r in results if lo <= r.pair < hi]
        on = Pooled.of([r for r in chosen if r.variant == VARIANTS[0]])
        off = Pooled.of([r for r in chosen if r.variant == VARIANTS[1]])
        for v, p in zip(VARIANTS, (on, off), strict=True):
            ratio = f"{off.rps / on.rps:.3f}" if v == VARIANTS[1] and on.rps else ""
            print(
                f"{name:>9} {v:<14} {p.rps:>8,.0f} {p.p50_us:>7.0f} {p.p99_us:>7.0f}"
                f" {p.server_cpu_s / p.elapsed_s * 100:>6.0f}% {p.server_us:>10.1f}"
                f" {p.client_cpu_s / p.elapsed_s * 100:>6.0f}% {p.errors:>4} {ratio:>12}"
            )
    for r in results:
        if r.first_error:
            print(f"# first failure ({r.variant}, pair {r.pair}): {r.first_error}")
            break
    s = summarise(results)
    verdict = "met" if s.cost <= goal else "MISSED"
    print(
        f"# freshness_cost = {s.cost:.3f} (median over {s.pairs} adjacent slice pairs of RPC/s"
        f" without / with; quartiles {s.cost_q[0]:.3f}-{s.cost_q[1]:.3f}; pooled"
        f" {s.off.rps / s.on.rps:.3f}; goal <= {goal}: {verdict})"
    )
    print(
        f"# server CPU per RPC with / without = {s.cpu_cost:.3f} (median over pairs; pooled"
        f" {s.on.server_us:.1f} vs {s.off.server_us:.1f} µs)"
    )
    check_us = costs["is_dead_us"] + costs["confirmed_us"] - 2 * costs["noop_call_us"]
    s.expected = (s.off.server_us + check_us) / s.off.server_us
    print(
        f"# expected from the in-process timing below: {s.expected:.3f}"
        f" ({check_us:.1f} µs more per hot hit on {s.off.server_us:.1f} µs of server CPU)"
    )
    print(
        f"# in-process: is_dead {costs['is_dead_us']:.2f} µs with the bench's rules"
        f" ({costs['is_dead_us_no_rules']:.2f} µs with none), confirmed()"
        f" {costs['confirmed_us']:.2f} µs, an empty call {costs['noop_call_us']:.2f} µs;"
        f" a hot hit makes one of each"
    )
    return s


# --------------------------------------------------------------------------- main


def run(args: argparse.Namespace) -> int:
    started = time.monotonic()
    interrupt_on(signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    if args.py_spy:
        Path(args.py_spy).mkdir(parents=True, exist_ok=True)
    token = "bench-" + secrets.token_hex(16)
    parts = set(args.only.split(",")) if args.only else {"invalidate", "freshness"}
    if parts - {"invalidate", "freshness"}:
        raise SystemExit(f"--only: unknown parts {sorted(parts - {'invalidate', 'freshness'})}")
    print(
        f"# bench/invalidate.py: sizes {args.sizes}, {args.repeats} Invalidate repeats"
        f" (+{args.inv_warmup} warm-up) each, reclaim {'on' if args.reclaim else 'held off'};"
        f" hot hits: store {args.store}, {args.rules} unrelated rules over {args.rule_shapes}"
        f" shapes, concurrency {CONCURRENCY}, {args.slices} slices of {args.slice_s} s"
        f" alternating variants; uvloop={'on' if args.uvloop else 'off'},"
        f" {os.cpu_count()} CPUs, load average {load_average()}",
        flush=True,
    )
    inv: list[InvalidateResult] = []
    fresh: list[SliceResult] = []
    costs: dict[str, float] = {}
    with contextlib.ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="ic-bench-inv-"))
        worker = Worker(args.uvloop)
        stack.callback(worker.close)
        if "invalidate" in parts:
            inv = bench_invalidate(args, worker, token, tmp)
        if "freshness" in parts:
            costs = check_cost(args.rules, args.rule_shapes)
            fresh = bench_freshness(args, worker, token, tmp)
            if args.dump:
                Path(args.dump).write_text(json.dumps([dataclasses.asdict(r) for r in fresh]))

    pairs: dict[str, str] = {}
    if inv:
        print()
        print(
            "## Invalidate latency (Redis warm tier; selector model_version=X matches every entry)"
        )
        ratio_key = print_invalidate(inv, 1.5)
        pairs[ratio_key] = f"{inv[-1].p50 / inv[0].p50:.3f}"
        for r in inv:
            pairs[f"invalidate_p50_ms_{label(r.size)}"] = f"{r.p50:.2f}"
            pairs[f"invalidate_p99_ms_{label(r.size)}"] = f"{r.p99:.2f}"
        for r in inv:
            pairs[f"invalidate_cpu_ms_{label(r.size)}"] = f"{r.sidecar_cpu_ms:.2f}"
            pairs[f"invalidate_redis_us_{label(r.size)}"] = f"{r.redis_us:.0f}"
        for r in inv:
            pairs[f"estimated_{label(r.size)}"] = str(r.estimate)
            pairs[f"true_{label(r.size)}"] = str(r.true_before)
    if fresh:
        print()
        what = "A/A CONTROL: both slots run the normal sidecar" if args.control else "on vs off"
        print(f"## Lookup hot hits, freshness check {what} (store: {args.store})")
        s = print_freshness(fresh, costs, 1.1)
        pairs |= {
            "freshness_cost": f"{s.cost:.3f}",
            "freshness_cpu_cost": f"{s.cpu_cost:.3f}",
            "freshness_cost_expected": f"{s.expected:.3f}",
            "rps_with_check": f"{s.on.rps:.0f}",
            "rps_without_check": f"{s.off.rps:.0f}",
            "hit_p50_us_with_check": f"{s.on.p50_us:.0f}",
            "hit_p50_us_without_check": f"{s.off.p50_us:.0f}",
            "srv_us_per_rpc_with_check": f"{s.on.server_us:.1f}",
            "srv_us_per_rpc_without_check": f"{s.off.server_us:.1f}",
            "is_dead_us": f"{costs['is_dead_us']:.2f}",
            "store": args.store + ("_control" if args.control else ""),
            "rules": str(args.rules),
            "rule_shapes": str(args.rule_shapes),
        }
    print(f"# total {time.monotonic() - started:.0f} s, load average now {load_average()}")
    print(" ".join(f"{k}={v}" for k, v in pairs.items()), flush=True)
    failed = any(r.errors > 0.01 * max(r.ops, 1) for r in fresh)
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer repeats and slices (< 60 s)")
    parser.add_argument(
        "--sizes", default="1e3,1e5", help="entries per Redis, comma-separated (default 1e3,1e5)"
    )
    parser.add_argument("--repeats", type=int, help="timed Invalidates per size (default 100)")
    parser.add_argument("--inv-warmup", type=int, default=3, help="untimed Invalidates per size")
    parser.add_argument(
        "--entry-bytes", type=int, default=len(PAYLOAD), help="payload of each populated entry"
    )
    parser.add_argument(
        "--reclaim",
        action="store_true",
        help="let the background reclaim delete the invalidated entries during the series",
    )
    parser.add_argument(
        "--store", choices=("embedded", "redis"), default="embedded", help="hot-hit sidecars' store"
    )
    parser.add_argument("--rules", type=int, default=50, help="unrelated rules before hot hits")
    parser.add_argument(
        "--rule-shapes",
        type=int,
        default=15,
        choices=range(1, 16),
        metavar="1..15",
        help="selector shapes the rules are spread over (default 15: all of them)",
    )
    parser.add_argument(
        "--slices", type=int, help="measured hot-hit slices, alternating variants (default 300)"
    )
    parser.add_argument(
        "--slice-s", type=float, default=0.2, help="seconds per slice (default 0.2)"
    )
    parser.add_argument("--warmup", type=float, help="unmeasured seconds per variant first")
    parser.add_argument(
        "--control",
        action="store_true",
        help="A/A run: the normal sidecar in both slots (shows the noise floor of the ratio)",
    )
    parser.add_argument("--dump", metavar="FILE", help="write the hot-hit slices as JSON")
    parser.add_argument(
        "--uvloop",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="servers and client on uvloop (default on, as the sidecar)",
    )
    parser.add_argument("--py-spy", metavar="DIR", help="sample the sidecars with py-spy")
    parser.add_argument(
        "--only", help="comma-separated parts to run: invalidate, freshness (default both)"
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="progress on stderr")
    args = parser.parse_args(argv)
    if args.repeats is None:
        args.repeats = 30 if args.quick else 100
    if args.slices is None:
        args.slices = 100 if args.quick else 300
    if args.warmup is None:
        args.warmup = 0.5 if args.quick else 1.0
    try:
        return run(args)
    except KeyboardInterrupt:
        print("interrupted; child processes stopped", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
