"""The lookup and telemetry benchmarks' own servers: the bare grpc.aio echo baseline, an
OTLP/gRPC trace sink, and a /metrics scraper thread.

The echo and the sink run as children: `python -m bench.lookup.servers echo --port N`
and `... otlp-sink --port N`.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.harness.procs import ServerProc, die_with_parent, python
from bench.harness.workload import PAYLOAD

MODULE = "bench.lookup.servers"
# The same server options start_server() gives the sidecar (default 4 MiB payload limit
# plus its 1 MiB framing headroom), so the echo baseline runs on equal footing.
_MAX_MESSAGE = 4 * 1024 * 1024 + 1024 * 1024
SERVER_OPTIONS: list[tuple[str, int]] = [
    ("grpc.max_receive_message_length", _MAX_MESSAGE),
    ("grpc.max_send_message_length", max(_MAX_MESSAGE, 64 * 1024 * 1024)),
    ("grpc.so_reuseport", 0),
]
SCRAPE_INTERVAL_S = 5.0


def echo_server(port: int, uvloop: bool, profile_dir: Path | None) -> ServerProc:
    """The echo baseline as a child process (not started)."""
    argv = [*python(profile_dir, "echo"), "-m", MODULE, "echo", "--port", str(port)]
    argv.append("--uvloop" if uvloop else "--no-uvloop")
    return ServerProc("echo", argv, (port,))


def otlp_sink(port: int) -> ServerProc:
    """The OTLP trace sink as a child process (not started)."""
    argv = [sys.executable, "-m", MODULE, "otlp-sink", "--port", str(port)]
    return ServerProc("otlp-sink", argv, (port,))


def serve_echo(port: int, uvloop: bool) -> None:
    """A CacheService that deserialises the sidecar's requests and answers canned 1 KiB HITs."""
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


def serve_otlp_sink(port: int) -> None:
    """An OTLP/gRPC trace endpoint that accepts and drops every export; on SIGTERM it
    prints `otlp-sink: N spans received`."""
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
    """Fetches /metrics of the given ports every interval_s (default SCRAPE_INTERVAL_S: as
    Prometheus would, more often), from a thread."""

    def __init__(self, ports: Sequence[int], interval_s: float = SCRAPE_INTERVAL_S) -> None:
        self.ports = list(ports)
        self.interval_s = interval_s
        self.scrapes = 0
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        """Start scraping (nothing to do without ports)."""
        if self.ports:
            self._thread.start()

    def _run(self) -> None:
        import urllib.request

        while not self._stop.wait(self.interval_s):
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
        """Stop and join the thread."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)


def main(argv: Sequence[str] | None = None) -> int:
    """`echo --port N [--no-uvloop]` or `otlp-sink --port N`: serve until SIGTERM."""
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}")
    parser.add_argument("server", choices=("echo", "otlp-sink"))
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--uvloop", action=argparse.BooleanOptionalAction, default=True)
    args = parser.parse_args(argv)
    die_with_parent()
    if args.server == "echo":
        serve_echo(args.port, args.uvloop)
    else:
        serve_otlp_sink(args.port)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
