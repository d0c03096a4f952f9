"""The load generator both gateways get: a closed loop of HTTP/1.1 keep-alive requests
over raw asyncio sockets.

Why raw sockets and not httpx: on a 2-core machine the client shares the CPU with the
server it measures, and httpx spends ~150-250 µs of CPU per request where this client
spends ~20 µs; a slow client would cap both servers' RPS at its own and hide the ratio.
It speaks only what the benchmark needs: one POST at a time per connection, a
Content-Length or chunked response body, and it reads the response headers that say
what the server did (`verdict`).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Target:
    """Where requests go: host, port, path and the request headers (besides Host,
    Content-Type and Content-Length)."""

    port: int
    path: str
    headers: tuple[tuple[str, str], ...] = ()
    host: str = "127.0.0.1"

    def request(self, body: bytes) -> bytes:
        """The whole request's bytes."""
        lines = [
            f"POST {self.path} HTTP/1.1",
            f"Host: {self.host}:{self.port}",
            "Content-Type: application/json",
            f"Content-Length: {len(body)}",
            *(f"{k}: {v}" for k, v in self.headers),
        ]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


@dataclass(frozen=True, slots=True)
class Response:
    """One answer: status, lower-cased headers, body (chunked bodies de-chunked)."""

    status: int
    headers: dict[str, str]
    body: bytes


async def read_response(reader: asyncio.StreamReader) -> Response:
    """One HTTP/1.1 response from `reader` (Content-Length, chunked, or until close)."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    if "content-length" in headers:
        body = await reader.readexactly(int(headers["content-length"]))
    elif headers.get("transfer-encoding", "").lower() == "chunked":
        parts = []
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                await reader.readuntil(b"\r\n")  # no trailers are sent here
                break
            parts.append(await reader.readexactly(size))
            await reader.readexactly(2)
        body = b"".join(parts)
    else:
        body = await reader.read()
    return Response(status, headers, body)


def verdict(headers: dict[str, str]) -> str:
    """What the server says it did: infercache's `x-infercache-cache` (hit, miss, bypass,
    refresh); LiteLLM sets `x-litellm-cache-key` on a cache hit only."""
    if "x-infercache-cache" in headers:
        return headers["x-infercache-cache"]
    return "hit" if "x-litellm-cache-key" in headers else "miss"


@dataclass(slots=True)
class LoadResult:
    """What a closed loop saw: per-request latencies (s), wall time, statuses and the
    servers' own cache verdicts."""

    latencies: list[float] = field(default_factory=list)
    elapsed_s: float = 0.0
    statuses: Counter[int] = field(default_factory=Counter)
    verdicts: Counter[str] = field(default_factory=Counter)

    @property
    def rps(self) -> float:
        """Requests per second over the loop's wall time."""
        return len(self.latencies) / self.elapsed_s if self.elapsed_s else 0.0


def cycling(target: Target, bodies: Sequence[bytes]) -> Callable[[int], bytes]:
    """Request i is bodies[i % len(bodies)] (encoded once: the hit loops' requests)."""
    wires = [target.request(b) for b in bodies]
    return lambda i: wires[i % len(wires)]


def distinct(target: Target, body: Callable[[int], bytes]) -> Callable[[int], bytes]:
    """Request i is body(i) (the miss loops' requests, each one new)."""
    return lambda i: target.request(body(i))


async def closed_loop(
    target: Target, request_for: Callable[[int], bytes], concurrency: int, seconds: float
) -> LoadResult:
    """POSTs for `seconds` over `concurrency` keep-alive connections, each sending its
    next request when the previous answer is read; request i is request_for(i)."""
    result = LoadResult()
    issued = 0
    deadline = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal issued
        reader, writer = await asyncio.open_connection(target.host, target.port)
        try:
            while time.perf_counter() < deadline:
                i = issued
                issued += 1
                wire = request_for(i)
                started = time.perf_counter()
                writer.write(wire)
                resp = await read_response(reader)
                result.latencies.append(time.perf_counter() - started)
                result.statuses[resp.status] += 1
                result.verdicts[verdict(resp.headers)] += 1
                if resp.headers.get("connection", "").lower() == "close":
                    writer.close()
                    reader, writer = await asyncio.open_connection(target.host, target.port)
        finally:
            writer.close()

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    result.elapsed_s = time.perf_counter() - started
    return result


async def one(target: Target, body: bytes) -> Response:
    """A single request on its own connection."""
    reader, writer = await asyncio.open_connection(target.host, target.port)
    try:
        writer.write(target.request(body))
        return await read_response(reader)
    finally:
        writer.close()
