#!/usr/bin/env python3
"""Lookup benchmark (issue 2): the sidecar's hit paths against a bare grpc.aio echo server.

Everything runs in one process tree started (and stopped, also on Ctrl-C or errors)
by this script:

- servers, each its own process, so client and server never share an event loop or GIL:
  a bare grpc.aio echo server (the sidecar's CacheService with its request and response
  types, answering canned 1 KiB HITs; same server options and uvloop as the sidecar),
  the real sidecar with its hot tier (`python -m sidecar serve`), a sidecar whose
  every hit goes to Redis (`--redis-url`, `--hot-max-entries 0`) and a redis-server on
  a free port;
- client processes (one by default, `--client-procs`), each running N concurrent asyncio
  tasks over one gRPC channel (AsyncCacheClient's channel options; requests built once
  up front) or one redis.asyncio pool, with the same driver loop for every scenario,
  checking every answer (a HIT from the expected tier with the 1 KiB payload).

Scenarios: echo, hot, warm (Lookup); echo-batch32, batch32-hot, batch32-warm
(LookupBatch of 32 keys); redis-get (redis.asyncio GET of the warm sidecar's own
~1.3 KiB entries). Cells (scenario x concurrency) run back to back within a round, so a
sidecar cell and its baseline see the same machine; `--rounds` passes are made (odd
ones in reverse order) and each cell shows its best round: neighbours on a shared
machine only ever slow a cell down. The per-round ratios are printed too.

Columns: RPC/s (keys/s for batches), p50/p99 latency, the server process's CPU (share
of one core, microseconds per RPC, kernel share, read/write syscalls per RPC, from
/proc), the client's CPU, the ratio to the baseline, degraded MISSes (not counted
as RPCs) and failed calls. The last line holds `key=value` pairs; the ratios there are
sidecar RPC/s / baseline RPC/s at concurrency 16 (`ratio_concurrency=16`), and the
*_cpu_vs_* ones baseline server µs/RPC / sidecar server µs/RPC (steadier on a busy box).

    .venv/bin/python bench/lookup.py --quick     # one short round, about 40 s
    .venv/bin/python bench/lookup.py             # 3 rounds of 3 s cells, about 4 min

`--telemetry` runs issue 5's comparison instead: hot hits interleaved in 0.25 s slices
across four sidecars (telemetry off; /metrics on and scraped; plus every span exported
over OTLP to a sink process; spans sampled at 1%) and, in process, what RpcObserver
adds per RPC; the last line holds telemetry_cost= (RPC/s off / on, everything on),
telemetry_cost_metrics= and telemetry_cost_sampled= (medians of the per-round ratios).

    .venv/bin/python bench/lookup.py --telemetry   # 150 rounds, about 3.5 min

`--py-spy DIR` samples each server with py-spy (if installed in the venv: `pip install
py-spy`) during each cell into DIR/<scenario>-c<N>-r<round>.txt (collapsed stacks);
`--cprofile DIR` runs the servers under cProfile (DIR/<server>.prof, written at exit).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import itertools
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from common import (
    CALL_TIMEOUT_S,
    CHANNEL_OPTIONS,
    ServerProc,
    Usage,
    cpu_seconds,
    die_with_parent,
    free_port,
    interrupt_on,
    load_average,
    redis_server,
    sidecar_env,
    worker_runner,
)

PAYLOAD = bytes(range(256)) * 4  # the ~1 KiB cached result every scenario returns
N_KEYS = 256
BATCH = 32
RATIO_CONCURRENCY = 16
# The same server options start_server() gives the sidecar (default 4 MiB payload limit
# plus its 1 MiB framing headroom), so the echo baseline runs on equal footing.
_MAX_MESSAGE = 4 * 1024 * 1024 + 1024 * 1024
SERVER_OPTIONS: list[tuple[str, int]] = [
    ("grpc.max_receive_message_length", _MAX_MESSAGE),
    ("grpc.max_send_message_length", max(_MAX_MESSAGE, 64 * 1024 * 1024)),
    ("grpc.so_reuseport", 0),
]
DEGRADED = "degraded"


# --------------------------------------------------------------------------- processes


def _python(profile_dir: Path | None, name: str) -> list[str]:
    if profile_dir is None:
        return [sys.executable]
    return [sys.executable, "-m", "cProfile", "-o", str(profile_dir / f"{name}.prof")]


def echo_server(port: int, uvloop: bool, profile_dir: Path | None) -> ServerProc:
    argv = [*_python(profile_dir, "echo"), str(Path(__file__).resolve()), "_echo"]
    argv += ["--port", str(port)]
    argv.append("--uvloop" if uvloop else "--no-uvloop")
    return ServerProc("echo", argv, (port,))


def sidecar_server(
    name: str,
    port: int,
    uvloop: bool,
    profile_dir: Path | None,
    *extra: str,
    env_extra: dict[str, str] | None = None,
) -> ServerProc:
    argv = [*_python(profile_dir, name), "-m", "sidecar", "serve"]
    argv += ["--listen", f"127.0.0.1:{port}", "--log-level", "warning", "--grace-period-s", "1"]
    argv += ["--uvloop", "true" if uvloop else "false", *extra]
    # Only the flags above configure it; stray INFERCACHE_* and OTEL_* variables must not.
    # The admin plane and /metrics are off (set as variables, which sidecars without
    # those settings ignore) so that several sidecars can run side by side; a telemetry
    # scenario turns /metrics on with a flag.
    env = {k: v for k, v in sidecar_env().items() if not k.startswith("OTEL_")}
    env["INFERCACHE_ADMIN_LISTEN"] = ""
    env["INFERCACHE_METRICS_LISTEN"] = ""
    env |= env_extra or {}
    return ServerProc(name, argv, (port,), env=env)


# The telemetry scenarios' sidecars: /metrics on (scraped every SCRAPE_INTERVAL_S, as
# Prometheus would, more often) and, for the traced ones, every span exported over
# OTLP/gRPC to a sink process with the given OTEL_TRACES_SAMPLER.
SCRAPE_INTERVAL_S = 5.0
TELEMETRY_SIDECARS: dict[str, dict[str, str]] = {
    "sidecar-metrics": {},
    "sidecar-traced": {"OTEL_TRACES_SAMPLER": "parentbased_always_on"},
    "sidecar-sampled": {
        "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
        "OTEL_TRACES_SAMPLER_ARG": "0.01",
    },
}


def telemetry_sidecar(
    name: str, port: int, metrics_port: int, sink_port: int, uvloop: bool, profile_dir: Path | None
) -> ServerProc:
    env = dict(TELEMETRY_SIDECARS[name])
    if env:
        env |= {
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{sink_port}",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
            "OTEL_METRICS_EXPORTER": "none",
        }
    flags = ("--metrics-listen", f"127.0.0.1:{metrics_port}")
    proc = sidecar_server(name, port, uvloop, profile_dir, *flags, env_extra=env)
    proc.ports = (port, metrics_port)
    return proc


def otlp_sink(port: int) -> ServerProc:
    argv = [sys.executable, str(Path(__file__).resolve()), "_otlp_sink", "--port", str(port)]
    return ServerProc("otlp-sink", argv, (port,))


def _serve_otlp_sink(port: int) -> None:
    """An OTLP/gRPC trace endpoint that accepts and drops every export (counts spans)."""
    from concurrent import futures

    import grpc
    from opentelemetry.proto.collector.trace.v1 import (
        trace_service_pb2,
        trace_service_pb2_grpc,
    )

    class Sink(trace_service_pb2_grpc.TraceServiceServicer):
        spans = 0

        def Export(self, request: Any, context: Any) -> Any:
            for rs in request.resource_spans:
                for ss in rs.scope_spans:
                    Sink.spans += len(ss.spans)
            return trace_service_pb2.ExportTraceServiceResponse()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Sink(), server)  # type: ignore[no-untyped-call]
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    print(f"otlp-sink: {Sink.spans} spans received", flush=True)
    server.stop(0)


class Scraper:
    """Fetches /metrics of the telemetry sidecars every SCRAPE_INTERVAL_S (a thread)."""

    def __init__(self, ports: Sequence[int]) -> None:
        self.ports = list(ports)
        self.scrapes = 0
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        if self.ports:
            self._thread.start()

    def _run(self) -> None:
        import urllib.request

        while not self._stop.wait(SCRAPE_INTERVAL_S):
            for port in self.ports:
                try:
                    with urllib.request.urlopen(
                        f"http://127.0.0.1:{port}/metrics", timeout=5
                    ) as resp:
                        resp.read()
                    self.scrapes += 1
                except OSError:
                    self.failures += 1

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)


# --------------------------------------------------------------------------- echo server


def _serve_echo(port: int, uvloop: bool) -> None:
    import asyncio

    import grpc
    from infercache.v1 import cache_pb2 as pb
    from infercache.v1 import cache_pb2_grpc

    canned = pb.LookupResponse(
        outcome=pb.LOOKUP_OUTCOME_HIT,
        payload=PAYLOAD,
        tier=pb.TIER_HOT,
        age_ms=1234,
        key_digest=bytes(range(32)),
        cost=pb.ComputeCost(latency_ms=850, prompt_tokens=120, completion_tokens=256),
    )
    batches: dict[int, Any] = {}

    class Echo(cache_pb2_grpc.CacheServiceServicer):  # type: ignore[misc]
        """Deserialises the same requests the sidecar gets, answers a canned HIT."""

        async def Lookup(self, request: Any, context: Any) -> Any:
            return canned

        async def LookupBatch(self, request: Any, context: Any) -> Any:
            n = len(request.requests)
            resp = batches.get(n)
            if resp is None:
                resp = batches[n] = pb.LookupBatchResponse(responses=[canned] * n)
            return resp

    async def main() -> None:
        server = grpc.aio.server(options=SERVER_OPTIONS)
        cache_pb2_grpc.add_CacheServiceServicer_to_server(Echo(), server)
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        await server.stop(0)

    if uvloop:
        import uvloop as uv

        uv.run(main())
    else:
        asyncio.run(main())


# --------------------------------------------------------------------------- client workers


@dataclass(frozen=True)
class Cell:
    """One measurement: what to call, how many in flight, for how long."""

    kind: str  # "lookup", "batch" or "redis_get"
    port: int
    concurrency: int
    warmup_s: float
    duration_s: float
    expect_tier: int = 0  # 0: any tier (the echo answers TIER_HOT)
    redis_keys: tuple[bytes, ...] = ()


def bench_keys() -> list[Any]:
    """The N_KEYS CacheKeys every gRPC scenario uses (~200-character prompts)."""
    from infercache_client import make_key

    filler = "Summarise the attached support ticket and propose the next step. " * 3
    return [
        make_key(
            tenant="bench",
            model_version="fp1-bench0000000000000000",
            prompt_version="support-v3",
            text=f"ticket {i}: {filler}",
            temperature=0.0,
            max_tokens=256,
        )
        for i in range(N_KEYS)
    ]


async def _setup_sidecar(port: int, expect_tier: int, redis_port: int) -> list[bytes]:
    """Store every bench key with the 1 KiB payload and check a Lookup hits it.

    With redis_port, return the Redis keys the sidecar stored the entries under (found
    by their digest, whatever the sidecar's key naming), for the redis-get scenario.
    """
    import grpc
    from infercache.v1 import cache_pb2 as pb
    from infercache.v1 import cache_pb2_grpc

    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=CHANNEL_OPTIONS) as ch:
        await ch.channel_ready()
        stub = cache_pb2_grpc.CacheServiceStub(ch)
        digests = []
        for key in bench_keys():
            # A Store brings back the lease its Lookup MISS handed out (empty on sidecars
            # without leases); a HIT here means a previous setup already stored it.
            miss = await stub.Lookup(pb.LookupRequest(key=key))
            if miss.outcome == pb.LOOKUP_OUTCOME_HIT:
                digests.append(miss.key_digest)
                continue
            store = pb.StoreRequest(key=key, payload=PAYLOAD, ttl_seconds=3600, lease=miss.lease)
            resp = await stub.Store(store)
            if resp.outcome != pb.STORE_OUTCOME_STORED:
                raise RuntimeError(f"store on port {port} answered {resp}")
            digests.append(resp.key_digest)
            found = await stub.Lookup(pb.LookupRequest(key=key))
            if found.outcome != pb.LOOKUP_OUTCOME_HIT or found.tier != expect_tier:
                raise RuntimeError(f"lookup after store on port {port} answered {found}")
    if not redis_port:
        return []
    import redis.asyncio as aioredis

    r = aioredis.Redis(host="127.0.0.1", port=redis_port)
    try:
        names = [k async for k in r.scan_iter(count=1000)]
    finally:
        await r.aclose()
    by_digest = {d.hex().encode(): [k for k in names if d.hex().encode() in k] for d in digests}
    missing = [h for h, ks in by_digest.items() if len(ks) != 1]
    if missing:
        raise RuntimeError(f"no single Redis key holds the entry of digest {missing[0]!r}")
    return [ks[0] for ks in by_digest.values()]


async def _run_cell(cell: Cell, conn: Connection) -> dict[str, Any]:
    """Drive `cell.concurrency` tasks in a closed loop; measure the window after warm-up."""
    import asyncio
    import functools

    closers: list[Callable[[], Awaitable[Any]]] = []
    send: Callable[[Any], Awaitable[Any]]
    # check(answer) -> "" (a good hit), DEGRADED (a MISS because a tier failed or ran
    # past its deadline: the sidecar's designed fallback) or what was wrong.
    check: Callable[[Any], str]
    if cell.kind == "redis_get":
        import redis.asyncio as aioredis

        r = aioredis.Redis(host="127.0.0.1", port=cell.port, max_connections=cell.concurrency)
        closers.append(r.aclose)
        reqs: Sequence[Any] = cell.redis_keys
        send = r.get

        def check(v: Any) -> str:
            return "" if v is not None and len(v) >= len(PAYLOAD) else f"GET answered {v!r:.60}"
    else:
        import grpc
        from infercache.v1 import cache_pb2 as pb
        from infercache.v1 import cache_pb2_grpc

        ch = grpc.aio.insecure_channel(f"127.0.0.1:{cell.port}", options=CHANNEL_OPTIONS)
        closers.append(ch.close)
        await ch.channel_ready()
        stub = cache_pb2_grpc.CacheServiceStub(ch)
        hit, miss = pb.LOOKUP_OUTCOME_HIT, pb.LOOKUP_OUTCOME_MISS
        tier, size = cell.expect_tier, len(PAYLOAD)

        def verdict(resp: Any) -> str:
            if (
                resp.outcome == hit
                and (not tier or resp.tier == tier)
                and len(resp.payload) == size
            ):
                return ""
            if resp.outcome == miss and resp.degraded:
                return DEGRADED
            return (
                f"outcome={resp.outcome} tier={resp.tier} degraded={resp.degraded}"
                f" payload={len(resp.payload)} B (expected a HIT of {size} B from tier {tier})"
            )

        lookups = [pb.LookupRequest(key=k) for k in bench_keys()]
        if cell.kind == "lookup":
            reqs, send, check = (
                lookups,
                functools.partial(stub.Lookup, timeout=CALL_TIMEOUT_S),
                verdict,
            )
        else:
            reqs = [
                pb.LookupBatchRequest(requests=lookups[i : i + BATCH])
                for i in range(0, N_KEYS, BATCH)
            ]
            send = functools.partial(stub.LookupBatch, timeout=CALL_TIMEOUT_S)

            def check(resp: Any) -> str:
                rs = resp.responses
                if len(rs) != BATCH:
                    return f"{len(rs)} responses to a batch of {BATCH}"
                worst = ""
                for x in rs:
                    v = verdict(x)
                    if v and v != DEGRADED:
                        return v
                    worst = worst or v
                return worst

    latencies: list[int] = []
    counts = {"ops": 0, "errors": 0, DEGRADED: 0}
    first_error: list[str] = []
    measuring = False
    stopping = False
    n = len(reqs)
    clock = time.perf_counter_ns

    async def driver(i: int) -> None:
        while not stopping:
            req = reqs[i % n]
            i += cell.concurrency
            t0 = clock()
            try:
                wrong = check(await send(req))
            except Exception as exc:
                wrong = f"{type(exc).__name__}: {exc}"[:500]
                await asyncio.sleep(0.001)
            if measuring:
                if not wrong:
                    latencies.append(clock() - t0)
                    counts["ops"] += 1
                elif wrong == DEGRADED:
                    counts[DEGRADED] += 1
                else:
                    counts["errors"] += 1
                    if not first_error:
                        first_error.append(wrong)

    try:
        tasks = [asyncio.create_task(driver(i)) for i in range(cell.concurrency)]
        await asyncio.sleep(cell.warmup_s)
        measuring = True
        conn.send("start")
        t0, cpu0 = time.perf_counter(), time.process_time()
        await asyncio.sleep(cell.duration_s)
        measuring = False
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        conn.send("end")
        stopping = True
        await asyncio.gather(*tasks)
    finally:
        for close in closers:
            await close()
    return {
        "ops": counts["ops"],
        "errors": counts["errors"],
        "degraded": counts[DEGRADED],
        "first_error": first_error[0] if first_error else "",
        "elapsed_s": elapsed,
        "cpu_s": cpu,
        "latencies_ns": latencies,
    }


async def _interleave(
    targets: list[tuple[int, int]], concurrency: int, slice_s: float, rounds: int
) -> list[list[dict[str, float]]]:
    """Hot-hit Lookups against each (port, server pid) in turn, `slice_s` each, for `rounds`
    rounds (odd rounds in reverse order); per round and target: ops, seconds, server CPU.

    Adjacent slices see the same machine, so the ratio of two targets within a round is
    steady even where neighbours make absolute rates swing (a shared 2-core box).
    """
    import asyncio
    import functools

    import grpc
    from infercache.v1 import cache_pb2 as pb
    from infercache.v1 import cache_pb2_grpc

    reqs = [pb.LookupRequest(key=k) for k in bench_keys()]
    hit, n = pb.LOOKUP_OUTCOME_HIT, len(reqs)
    channels = [
        grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=CHANNEL_OPTIONS)
        for port, _ in targets
    ]
    sends = []
    for ch in channels:
        await ch.channel_ready()
        sends.append(
            functools.partial(cache_pb2_grpc.CacheServiceStub(ch).Lookup, timeout=CALL_TIMEOUT_S)
        )

    async def one_slice(send: Any, pid: int, seconds: float) -> dict[str, float]:
        ops = errors = 0
        stopping = False

        async def driver(i: int) -> None:
            nonlocal ops, errors
            while not stopping:
                resp = await send(reqs[i % n])
                i += concurrency
                if resp.outcome == hit and len(resp.payload) == len(PAYLOAD):
                    ops += 1
                else:
                    errors += 1

        cpu0, t0 = cpu_seconds(pid), time.perf_counter()
        tasks = [asyncio.create_task(driver(i)) for i in range(concurrency)]
        await asyncio.sleep(seconds)
        stopping = True
        await asyncio.gather(*tasks)
        return {
            "ops": ops,
            "errors": errors,
            "elapsed_s": time.perf_counter() - t0,
            "server_cpu_s": cpu_seconds(pid) - cpu0,
        }

    try:
        for send, (_, pid) in zip(sends, targets, strict=True):
            await one_slice(send, pid, 1.0)  # warm-up
        out = []
        for r in range(rounds):
            order = list(range(len(targets)))
            if r % 2:
                order.reverse()
            row: list[dict[str, float]] = [{} for _ in targets]
            for j in order:
                row[j] = await one_slice(sends[j], targets[j][1], slice_s)
            out.append(row)
        return out
    finally:
        for ch in channels:
            await ch.close()


def _worker_main(conn: Connection, uvloop: bool) -> None:
    """A client process: runs the cells the bench sends until it sends None."""
    with worker_runner(uvloop) as runner:
        while True:
            try:
                msg = conn.recv()
            except EOFError:
                return
            if msg is None:
                return
            op, arg = msg
            try:
                if op == "setup":
                    conn.send(("ok", runner.run(_setup_sidecar(*arg))))
                elif op == "interleave":
                    conn.send(("ok", runner.run(_interleave(*arg))))
                else:
                    conn.send(("ok", runner.run(_run_cell(arg, conn))))
            except Exception as exc:
                conn.send(("error", f"{type(exc).__name__}: {exc}"))


def _start_pyspy(pid: int, duration_s: float, out: Path) -> subprocess.Popen[bytes]:
    """Sample a server into collapsed-stack text while the cell runs.

    --nonblocking: py-spy never pauses the server (pausing makes warm reads miss their
    deadline); the price is Python frames only, so time inside grpc/uvloop/redis C code
    shows up under the Python frame that called it (Runner.run for the event loop).
    """
    binary = Path(sys.executable).with_name("py-spy")
    argv = [str(binary), "record", "-p", str(pid), "-d", str(max(1, int(duration_s)))]
    argv += ["-r", "250", "--nonblocking", "--format", "raw", "-o", str(out)]
    return subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=die_with_parent
    )


class Clients:
    """The pool of client processes; each cell's concurrency is split across them."""

    def __init__(self, nprocs: int, uvloop: bool) -> None:
        import multiprocessing as mp

        ctx = mp.get_context("spawn")  # no fork: grpc must start fresh in each client
        self.conns: list[Connection] = []
        self.procs: list[Any] = []
        for _ in range(nprocs):
            parent, child = ctx.Pipe()
            p = ctx.Process(target=_worker_main, args=(child, uvloop), daemon=True)
            p.start()
            child.close()
            self.conns.append(parent)
            self.procs.append(p)

    @staticmethod
    def _reply(conn: Connection, timeout_s: float = 120.0) -> Any:
        if not conn.poll(timeout_s):
            raise RuntimeError("a client process did not answer")
        msg = conn.recv()
        if isinstance(msg, tuple) and msg[0] == "error":
            raise RuntimeError(f"client process: {msg[1]}")
        return msg[1] if isinstance(msg, tuple) else msg

    def interleave(
        self, targets: list[tuple[int, int]], concurrency: int, slice_s: float, rounds: int
    ) -> list[list[dict[str, float]]]:
        self.conns[0].send(("interleave", (targets, concurrency, slice_s, rounds)))
        out: list[list[dict[str, float]]] = self._reply(self.conns[0], 60 + 2 * rounds)
        return out

    def setup(self, port: int, expect_tier: int, redis_port: int = 0) -> list[bytes]:
        self.conns[0].send(("setup", (port, expect_tier, redis_port)))
        keys: list[bytes] = self._reply(self.conns[0])
        return keys

    def run(self, cell: Cell, server_pid: int, pyspy_out: Path | None = None) -> Result:
        k = len(self.conns)
        shares = [cell.concurrency // k + (1 if i < cell.concurrency % k else 0) for i in range(k)]
        active = [(c, s) for c, s in zip(self.conns, shares, strict=True) if s > 0]
        for conn, share in active:
            conn.send(("cell", dataclasses.replace(cell, concurrency=share)))
        for conn, _ in active:
            if self._reply(conn) != "start":
                raise RuntimeError("client protocol error")
        srv0 = Usage.of(server_pid)
        spy = None
        if pyspy_out is not None:
            spy = _start_pyspy(server_pid, cell.duration_s * 0.9, pyspy_out)
        for conn, _ in active:
            if self._reply(conn) != "end":
                raise RuntimeError("client protocol error")
        srv = Usage.of(server_pid) - srv0
        if spy is not None:
            spy.wait()
        parts = [self._reply(conn) for conn, _ in active]
        return Result.merge(cell, parts, srv)

    def close(self) -> None:
        for conn in self.conns:
            with contextlib.suppress(OSError):
                conn.send(None)
        for p in self.procs:
            p.join(3)
            if p.is_alive():
                p.kill()
                p.join()


# --------------------------------------------------------------------------- results


@dataclass
class Result:
    """One cell's aggregated figures."""

    ops: int
    ops_per_s: float
    p50_us: float
    p99_us: float
    server_cpu: float  # cores (1.0 = one core busy)
    server_system: float  # the kernel's share of server_cpu
    server_syscalls: int  # read/write-type syscalls (/proc/PID/io syscr + syscw)
    client_cpu: float
    errors: int
    degraded: int
    first_error: str

    @classmethod
    def merge(cls, cell: Cell, parts: list[dict[str, Any]], server: Usage) -> Result:
        lat = sorted(x for p in parts for x in p["latencies_ns"])
        elapsed = max(p["elapsed_s"] for p in parts)

        def pct(q: float) -> float:
            return lat[min(len(lat) - 1, int(q * len(lat)))] / 1000 if lat else float("nan")

        return cls(
            ops=sum(p["ops"] for p in parts),
            ops_per_s=sum(p["ops"] / p["elapsed_s"] for p in parts),
            p50_us=pct(0.50),
            p99_us=pct(0.99),
            server_cpu=(server.user_s + server.system_s) / elapsed,
            server_system=server.system_s / max(server.user_s + server.system_s, 1e-9),
            server_syscalls=server.syscalls,
            client_cpu=sum(p["cpu_s"] for p in parts) / elapsed,
            errors=sum(p["errors"] for p in parts),
            degraded=sum(p["degraded"] for p in parts),
            first_error=next((p["first_error"] for p in parts if p["first_error"]), ""),
        )

    @property
    def server_us_per_op(self) -> float:
        return self.server_cpu * 1e6 / self.ops_per_s if self.ops_per_s else float("nan")

    @property
    def server_syscalls_per_op(self) -> float:
        return self.server_syscalls / self.ops if self.ops else float("nan")


@dataclass(frozen=True)
class Scenario:
    name: str
    server: str
    kind: str
    expect_tier: int
    baseline: str | None  # the scenario whose RPC/s this one is divided by


# TIER_HOT = 1, TIER_WARM = 2 (infercache.v1.Tier); the main process never imports grpc.
SCENARIOS = (
    Scenario("echo", "echo", "lookup", 0, None),
    Scenario("hot", "sidecar-hot", "lookup", 1, "echo"),
    Scenario("warm", "sidecar-warm", "lookup", 2, "echo"),
    Scenario("echo-batch32", "echo", "batch", 0, None),
    Scenario("batch32-hot", "sidecar-hot", "batch", 1, "echo-batch32"),
    Scenario("batch32-warm", "sidecar-warm", "batch", 2, "echo-batch32"),
    Scenario("redis-get", "redis", "redis_get", 0, None),
)


def _fmt_rate(x: float) -> str:
    return f"{x:,.0f}" if x == x else "-"


class Results:
    """Every round's Result per (scenario, concurrency); a cell's figures are its best round.

    Neighbours on a shared machine only ever slow a cell down, so the fastest round is
    the closest to the uncontended figure; the per-round ratios are printed as well.
    """

    def __init__(self) -> None:
        self.rounds: dict[tuple[str, int], list[Result]] = {}

    def add(self, name: str, c: int, r: Result) -> None:
        self.rounds.setdefault((name, c), []).append(r)

    def cell(self, name: str, c: int) -> Result | None:
        """The round with the most RPC/s (its latencies and CPU figures come with it)."""
        return max(self.rounds.get((name, c), []), key=lambda r: r.ops_per_s, default=None)

    def per_round(self, a: str, b: str, c: int, *, cpu: bool = False) -> list[float]:
        """a/b of each round: both cells ran back to back, so drift cancels out.

        RPC/s of a over RPC/s of b, or with cpu=True b's server µs/RPC over a's.
        """
        out = []
        for ra, rb in zip(self.rounds.get((a, c), []), self.rounds.get((b, c), []), strict=False):
            if cpu:
                x, y = rb.server_us_per_op, ra.server_us_per_op
            else:
                x, y = ra.ops_per_s, rb.ops_per_s
            out.append(x / y if y else float("nan"))
        return out

    def ratio(self, a: str, b: str, c: int, *, cpu: bool = False) -> float:
        """Best round of a against best round of b (RPC/s, or b's µs/RPC over a's)."""
        ra, rb = self.cell(a, c), self.cell(b, c)
        if ra is None or rb is None:
            return float("nan")
        if cpu:
            x, y = rb.server_us_per_op, ra.server_us_per_op
        else:
            x, y = ra.ops_per_s, rb.ops_per_s
        return x / y if y else float("nan")


def print_table(results: Results, concurrencies: Sequence[int]) -> None:
    head = (
        f"{'scenario':<13} {'conc':>4} {'RPC/s':>9} {'keys/s':>9} {'p50 µs':>9} {'p99 µs':>9}"
        f" {'srv cpu':>7} {'srv µs/RPC':>10} {'kernel':>6} {'sysc/RPC':>8} {'cli cpu':>7}"
        f" {'vs base':>8} {'degr':>5} {'err':>4}"
    )
    print(head)
    print("-" * len(head))
    for sc in SCENARIOS:
        rows = [(c, results.cell(sc.name, c)) for c in concurrencies]
        if all(r is None for _, r in rows):
            continue
        for c, r in rows:
            if r is None:
                continue
            keys = r.ops_per_s * (BATCH if sc.kind == "batch" else 1)
            ratio = results.ratio(sc.name, sc.baseline, c) if sc.baseline else float("nan")
            print(
                f"{sc.name:<13} {c:>4} {_fmt_rate(r.ops_per_s):>9} {_fmt_rate(keys):>9}"
                f" {r.p50_us:>9.0f} {r.p99_us:>9.0f} {r.server_cpu * 100:>6.0f}%"
                f" {r.server_us_per_op:>10.1f} {r.server_system * 100:>5.0f}%"
                f" {r.server_syscalls_per_op:>8.1f} {r.client_cpu * 100:>6.0f}%"
                f" {f'{ratio:.2f}' if ratio == ratio else '-':>8}"
                f" {sum(x.degraded for x in results.rounds[(sc.name, c)]):>5}"
                f" {sum(x.errors for x in results.rounds[(sc.name, c)]):>4}"
            )
        print()


# (key in the summary line, scenario, its baseline); the goals of issue 2 are the first three.
RATIOS = (
    ("hot_vs_echo", "hot", "echo"),
    ("warm_vs_echo", "warm", "echo"),
    ("batch_vs_echo", "batch32-hot", "echo-batch32"),
    ("warm_vs_redis_get", "warm", "redis-get"),
    ("batch_warm_vs_echo", "batch32-warm", "echo-batch32"),
)


def summary_line(results: Results, c: int) -> str:
    def rps(name: str) -> float:
        r = results.cell(name, c)
        return r.ops_per_s if r else float("nan")

    pairs = {"ratio_concurrency": str(c)}
    for key, a, b in RATIOS:
        pairs[key] = f"{results.ratio(a, b, c):.3f}"
    for key, a, b in RATIOS[:3]:
        pairs[key.replace("_vs_", "_cpu_vs_")] = f"{results.ratio(a, b, c, cpu=True):.3f}"
    pairs |= {
        "echo_rps": f"{rps('echo'):.0f}",
        "hot_rps": f"{rps('hot'):.0f}",
        "warm_rps": f"{rps('warm'):.0f}",
        "batch_keys_per_s": f"{rps('batch32-hot') * BATCH:.0f}",
        "redis_get_ops": f"{rps('redis-get'):.0f}",
    }
    return " ".join(f"{k}={v}" for k, v in pairs.items())


# --------------------------------------------------------------------------- in-process


def inprocess_observer_cost(n: int = 20_000) -> dict[str, float]:
    """µs per RPC that sidecar.api.observe.RpcObserver adds around a trivial handler, in this
    process: tracing off (durations only), traced (parentbased_always_on, batch processor,
    spans dropped by a null exporter: the export thread's encoding is not in it), sampled
    (parentbased_traceidratio 0.01); "bare" is the handler called directly."""
    import asyncio

    from infercache.v1 import cache_pb2 as pb
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    from sidecar.api.observe import CacheDescriber, RpcObserver, TenantLabel
    from sidecar.keys import build_key
    from sidecar.observability.stats import RpcStats
    from sidecar.observability.telemetry import Telemetry

    class Null(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    key_pb = bench_keys()[0]
    from sidecar.api.cache_codec import key_request_from_pb

    built = build_key(key_request_from_pb(key_pb))
    request = pb.LookupRequest(key=key_pb)
    response = pb.LookupResponse(
        outcome=pb.LOOKUP_OUTCOME_HIT, tier=pb.TIER_HOT, key_digest=built.digest, payload=PAYLOAD
    )

    class Context:
        def invocation_metadata(self) -> tuple[()]:
            return ()

        def code(self) -> None:
            return None

    async def handler(req: Any, ctx: Any) -> Any:
        return response

    def observer(sampler: Any) -> RpcObserver:
        if sampler is None:
            return RpcObserver("infercache.v1.CacheService", Telemetry(), RpcStats())
        tp = TracerProvider(sampler=sampler)
        tp.add_span_processor(BatchSpanProcessor(Null(), max_queue_size=n + 1))
        return RpcObserver("infercache.v1.CacheService", Telemetry(tp, tracing=True), RpcStats())

    describe = CacheDescriber(lambda k: built, TenantLabel(False)).lookup
    ctx = Context()

    async def time_it(obs: RpcObserver | None) -> float:
        loop_n = range(n)
        t0 = time.perf_counter()
        if obs is None:
            for _ in loop_n:
                await handler(request, ctx)
        else:
            for _ in loop_n:
                await obs.run("Lookup", request, ctx, handler, describe)
        return (time.perf_counter() - t0) / n * 1e6

    async def main() -> dict[str, float]:
        variants = {
            "bare": None,
            "off": observer(None),
            "traced": observer(ParentBased(TraceIdRatioBased(1.0))),
            "sampled": observer(ParentBased(TraceIdRatioBased(0.01))),
        }
        best: dict[str, float] = {}
        for _ in range(3):  # best of 3: neighbours only ever slow a pass down
            for name, obs in variants.items():
                us = await time_it(obs)
                best[name] = min(best.get(name, us), us)
        bare = best.pop("bare")
        return {name: us - bare for name, us in best.items()}

    return asyncio.run(main())


# --------------------------------------------------------------------------- telemetry


TELEMETRY_VARIANTS = ("sidecar-hot", *TELEMETRY_SIDECARS)
TELEMETRY_KEYS = {
    "sidecar-traced": "telemetry_cost",
    "sidecar-metrics": "telemetry_cost_metrics",
    "sidecar-sampled": "telemetry_cost_sampled",
}


def _median(xs: Sequence[float]) -> float:
    s = sorted(x for x in xs if x == x)
    if not s:
        return float("nan")
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


def run_telemetry(args: argparse.Namespace) -> int:
    """Telemetry on vs off: hot hits interleaved across four sidecars (see --telemetry)."""
    interrupt_on(signal.SIGINT, signal.SIGTERM)
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        clients = Clients(1, args.uvloop)
        stack.callback(clients.close)
        servers: dict[str, ServerProc] = {}
        sink_port = free_port()
        sink = otlp_sink(sink_port)
        procs = [sink]
        for name in TELEMETRY_VARIANTS:
            if name == "sidecar-hot":
                servers[name] = sidecar_server(name, free_port(), args.uvloop, None)
            else:
                servers[name] = telemetry_sidecar(
                    name, free_port(), free_port(), sink_port, args.uvloop, None
                )
            procs.append(servers[name])
        for p in procs:
            stack.callback(p.stop)
            p.start()
        for srv in servers.values():
            clients.setup(srv.port, 1)
        scraper = Scraper([servers[n].ports[1] for n in TELEMETRY_SIDECARS])
        stack.callback(scraper.stop)
        scraper.start()
        print(
            f"# bench/lookup.py --telemetry: hot hits, concurrency {args.telemetry_concurrency},"
            f" {args.telemetry_rounds} rounds of {len(servers)} interleaved {args.slice_s} s"
            f" slices, {os.cpu_count()} CPUs, load average {load_average()}",
            flush=True,
        )
        targets = [(srv.port, srv.pid) for srv in servers.values()]
        rows = clients.interleave(
            targets, args.telemetry_concurrency, args.slice_s, args.telemetry_rounds
        )
        for srv in servers.values():
            srv.check_alive()
        scraper.stop()
        spans = sink_spans(sink)
    names = list(servers)
    off = names.index("sidecar-hot")

    def rps(x: dict[str, float]) -> float:
        return x["ops"] / x["elapsed_s"] if x["elapsed_s"] else float("nan")

    def us(x: dict[str, float]) -> float:
        return x["server_cpu_s"] * 1e6 / x["ops"] if x["ops"] else float("nan")

    print()
    head = f"{'variant':<16} {'RPC/s':>9} {'srv µs/RPC':>10} {'err':>4} {'off/on':>7}"
    head += f" {'cpu on/off':>10}"
    print(head)
    print("-" * len(head))
    pairs: dict[str, str] = {}
    failed = False
    for j, name in enumerate(names):
        col = [row[j] for row in rows]
        pooled_rps = sum(x["ops"] for x in col) / sum(x["elapsed_s"] for x in col)
        pooled_us = sum(x["server_cpu_s"] for x in col) * 1e6 / max(1, sum(x["ops"] for x in col))
        errors = int(sum(x["errors"] for x in col))
        failed |= errors > 0
        cost = _median([rps(row[off]) / rps(row[j]) for row in rows])
        cpu = _median([us(row[j]) / us(row[off]) for row in rows])
        print(
            f"{name:<16} {pooled_rps:>9,.0f} {pooled_us:>10.1f} {errors:>4}"
            f" {cost:>7.3f} {cpu:>10.3f}"
        )
        if name in TELEMETRY_KEYS:
            q1, q3 = _quartiles([rps(row[off]) / rps(row[j]) for row in rows])
            print(f"  {TELEMETRY_KEYS[name]}: quartiles of the per-round ratio {q1:.3f}-{q3:.3f}")
            pairs[TELEMETRY_KEYS[name]] = f"{cost:.3f}"
            pairs[TELEMETRY_KEYS[name] + "_cpu"] = f"{cpu:.3f}"
            pairs["rps_" + name.removeprefix("sidecar-")] = f"{pooled_rps:.0f}"
            pairs["srv_us_" + name.removeprefix("sidecar-")] = f"{pooled_us:.1f}"
        else:
            pairs["rps_off"] = f"{pooled_rps:.0f}"
            pairs["srv_us_off"] = f"{pooled_us:.1f}"
    print(
        f"# /metrics scraped {scraper.scrapes} times ({scraper.failures} failed); the OTLP sink"
        f" received {spans} spans"
    )
    cost_in = inprocess_observer_cost()
    print(
        "# in-process, per RPC added by RpcObserver around a trivial handler: tracing off"
        f" {cost_in['off']:.2f} µs, traced (always_on) {cost_in['traced']:.2f} µs, sampled 1%"
        f" {cost_in['sampled']:.2f} µs (the export thread's encoding not included)"
    )
    pairs |= {f"observer_us_{k}": f"{v:.2f}" for k, v in cost_in.items()}
    print(
        "# off/on: median over rounds of RPC/s off / on (adjacent slices); cpu on/off: median"
        f" of server µs/RPC on / off; total {time.monotonic() - started:.0f} s; load average"
        f" now {load_average()}"
    )
    print(" ".join(f"{k}={v}" for k, v in pairs.items()), flush=True)
    return 1 if failed else 0


def _quartiles(xs: Sequence[float]) -> tuple[float, float]:
    s = sorted(x for x in xs if x == x)
    if not s:
        return float("nan"), float("nan")
    return s[len(s) // 4], s[(3 * len(s)) // 4]


def sink_spans(sink: ServerProc) -> int:
    """Stop the OTLP sink; the spans it reported receiving (-1 if it did not say)."""
    import re

    assert sink.proc is not None
    sink.proc.terminate()
    with contextlib.suppress(subprocess.TimeoutExpired):
        sink.proc.wait(timeout=5)
    m = re.search(r"otlp-sink: (\d+) spans received", sink.output())
    sink.stop()
    return int(m.group(1)) if m else -1


# --------------------------------------------------------------------------- main


def run(args: argparse.Namespace) -> int:
    concurrencies = [int(x) for x in args.concurrency.split(",")]
    wanted = set(args.scenarios.split(",")) if args.scenarios else {s.name for s in SCENARIOS}
    unknown = wanted - {s.name for s in SCENARIOS}
    if unknown:
        raise SystemExit(f"unknown scenarios: {sorted(unknown)}")
    scenarios = [s for s in SCENARIOS if s.name in wanted]
    needed = {s.server for s in scenarios}
    if "sidecar-warm" in needed:
        needed.add("redis")
    profile_dir = Path(args.cprofile).resolve() if args.cprofile else None
    pyspy_dir = Path(args.py_spy).resolve() if args.py_spy else None
    for d in (profile_dir, pyspy_dir):
        if d is not None:
            d.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    # Ctrl-C and SIGTERM unwind through the ExitStack below, which stops every child.
    interrupt_on(signal.SIGINT, signal.SIGTERM)

    with contextlib.ExitStack() as stack:
        redis_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="ic-bench-redis-"))
        servers: dict[str, ServerProc] = {}
        clients = Clients(args.client_procs, args.uvloop)
        stack.callback(clients.close)

        def add(name: str, proc: ServerProc) -> None:
            stack.callback(proc.stop)
            proc.start()
            servers[name] = proc

        if "redis" in needed:
            add("redis", redis_server(free_port(), redis_dir, "redis"))
        if "echo" in needed:
            add("echo", echo_server(free_port(), args.uvloop, profile_dir))
        if "sidecar-hot" in needed:
            add("sidecar-hot", sidecar_server("sidecar-hot", free_port(), args.uvloop, profile_dir))
        if "sidecar-warm" in needed:
            url = f"redis://127.0.0.1:{servers['redis'].port}/0"
            warm_flags = ("--redis-url", url, "--hot-max-entries", "0")
            add(
                "sidecar-warm",
                sidecar_server("sidecar-warm", free_port(), args.uvloop, profile_dir, *warm_flags),
            )

        redis_keys: list[bytes] = []
        if "sidecar-hot" in servers:
            clients.setup(servers["sidecar-hot"].port, 1)
        if "sidecar-warm" in servers:
            redis_keys = clients.setup(servers["sidecar-warm"].port, 2, servers["redis"].port)
        if "redis-get" in wanted and not redis_keys:
            raise SystemExit("redis-get reads the warm sidecar's entries: include scenario 'warm'")

        print(
            f"# bench/lookup.py: payload {len(PAYLOAD)} B, {N_KEYS} keys, batch {BATCH},"
            f" warm-up {args.warmup}s + {args.duration}s per cell, {args.rounds} round(s),"
            f" {args.client_procs} client"
            f" process(es), uvloop={'on' if args.uvloop else 'off'}, {os.cpu_count()} CPUs,"
            f" load average {load_average()}",
            flush=True,
        )
        results = Results()
        # Scenarios run back to back within each concurrency and round, so drift and
        # neighbours' load hit a sidecar cell and its baseline alike.
        for rnd, c, i in itertools.product(
            range(args.rounds), concurrencies, range(len(scenarios))
        ):
            # Odd rounds run the scenarios in reverse, so no cell always follows the same one.
            sc = scenarios[-1 - i if rnd % 2 else i]
            srv = servers[sc.server]
            cell = Cell(
                sc.kind,
                srv.port,
                c,
                args.warmup,
                args.duration,
                sc.expect_tier,
                tuple(redis_keys) if sc.kind == "redis_get" else (),
            )
            spy = None
            if pyspy_dir is not None and sc.server != "redis":
                spy = pyspy_dir / f"{sc.name}-c{c}-r{rnd}.txt"
            r = clients.run(cell, srv.pid, spy)
            results.add(sc.name, c, r)
            if args.verbose:
                print(
                    f"  r{rnd} {sc.name} c={c}: {r.ops_per_s:,.0f}/s", file=sys.stderr, flush=True
                )
        for srv in servers.values():
            srv.check_alive()

    print()
    print_table(results, concurrencies)
    failed = False
    for (name, c), rs in results.rounds.items():
        errors, ops = sum(r.errors for r in rs), sum(r.ops for r in rs)
        degraded = sum(r.degraded for r in rs)
        total = errors + ops + degraded
        if degraded:
            print(
                f"# {name} c={c}: {degraded} of {total} calls answered MISS degraded=true"
                " (warm read past INFERCACHE_LOOKUP_TIMEOUT_MS); not counted in RPC/s"
            )
        if errors:
            first = next(r.first_error for r in rs if r.first_error)
            print(f"# {name} c={c}: {errors} of {total} calls failed; first: {first}")
        failed |= errors > 0.01 * total or not ops
    ratio_c = RATIO_CONCURRENCY if RATIO_CONCURRENCY in concurrencies else concurrencies[0]
    if args.rounds > 1:
        for key, a, b in RATIOS:
            each = " ".join(f"{x:.2f}" for x in results.per_round(a, b, ratio_c))
            if each:
                print(f"# {key} per round at concurrency {ratio_c}: {each}")
    print(
        f"# ratios: sidecar RPC/s / baseline RPC/s at concurrency {ratio_c}, best of"
        f" {args.rounds} round(s) each; *_cpu_vs_*: baseline server µs/RPC /"
        f" sidecar server µs/RPC; total {time.monotonic() - started:.0f} s; load average"
        f" now {load_average()}"
    )
    print(summary_line(results, ratio_c), flush=True)
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["_otlp_sink"]:  # internal: the OTLP trace sink process
        die_with_parent()
        _serve_otlp_sink(int(argv[argv.index("--port") + 1]))
        return 0
    if argv[:1] == ["_echo"]:  # internal: the echo server process
        echo = argparse.ArgumentParser(prog="lookup.py _echo")
        echo.add_argument("--port", type=int, required=True)
        echo.add_argument("--uvloop", action=argparse.BooleanOptionalAction, default=True)
        echo_args = echo.parse_args(argv[1:])
        die_with_parent()
        _serve_echo(echo_args.port, echo_args.uvloop)
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="short cells (whole run < 60 s)")
    parser.add_argument("--duration", type=float, help="measured seconds per cell (default 3)")
    parser.add_argument("--warmup", type=float, help="unmeasured seconds per cell (default 0.7)")
    parser.add_argument("--rounds", type=int, help="passes over all cells (default 3)")
    parser.add_argument(
        "--concurrency", default="1,16,64", help="comma-separated (default 1,16,64)"
    )
    parser.add_argument("--client-procs", type=int, default=1, help="client processes (default 1)")
    parser.add_argument(
        "--uvloop",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="run servers and clients on uvloop (default on, as the sidecar)",
    )
    parser.add_argument(
        "--scenarios", help="comma-separated subset of: " + ", ".join(s.name for s in SCENARIOS)
    )
    parser.add_argument("--cprofile", metavar="DIR", help="run the servers under cProfile")
    parser.add_argument(
        "--py-spy",
        metavar="DIR",
        help="sample each server with py-spy (in the venv) during each cell: DIR/<cell>.txt",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="progress on stderr")
    parser.add_argument(
        "--telemetry",
        action="store_true",
        help="instead: telemetry on vs off (four sidecars, interleaved slices); telemetry_cost=",
    )
    parser.add_argument(
        "--telemetry-rounds", type=int, default=150, help="--telemetry rounds (default 150)"
    )
    parser.add_argument(
        "--telemetry-concurrency", type=int, default=16, help="--telemetry concurrency (16)"
    )
    parser.add_argument(
        "--slice-s", type=float, default=0.25, help="--telemetry seconds per slice (0.25)"
    )
    args = parser.parse_args(argv)
    if args.duration is None:
        args.duration = 1.2 if args.quick else 3.0
    if args.warmup is None:
        args.warmup = 0.4 if args.quick else 0.7
    if args.rounds is None:
        args.rounds = 1 if args.quick else 3
    try:
        if args.telemetry:
            return run_telemetry(args)
        return run(args)
    except KeyboardInterrupt:
        print("interrupted; child processes stopped", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
