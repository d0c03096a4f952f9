"""The RPCs both span paths are driven with, and the collectors and ids they share
(tests/unit/test_span_recorder.py, tests/integration/test_span_records.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.trace import Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

NAME = "infercache.v1.CacheService/Lookup"
ATTRS: dict[str, Any] = {
    "rpc.system": "grpc",
    "rpc.method": "Lookup",
    "rpc.grpc.status_code": 0,
    "infercache.model_version": "m-v1",
    "infercache.tenant": "0123456789abcdef",
    "infercache.key_digest": "0011223344556677",
    "infercache.degraded": False,
}


class CountingIds(IdGenerator):
    """Ids from a seeded sequence, so both paths can be handed the same ones."""

    def __init__(self, seed: int) -> None:
        self._n = seed

    def _next(self, bits: int) -> int:
        self._n = (self._n * 6364136223846793005 + 1442695040888963407) % (1 << 128)
        return (self._n >> (128 - bits)) or 1

    def generate_span_id(self) -> int:
        return self._next(64)

    def generate_trace_id(self) -> int:
        return self._next(128)


def _headers(flags: str, state: str | None = None) -> Context:
    carrier = {"traceparent": f"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-{flags}"}
    if state:
        carrier["tracestate"] = state
    return TraceContextTextMapPropagator().extract(carrier)


CONTEXTS = {
    "root": None,
    "remote-sampled": _headers("01", "congo=t61rcWkgMzE"),
    "remote-unsampled": _headers("00"),
    "remote-random": _headers("03"),
}


class Collect(SpanProcessor):
    """Keeps every span a processor is handed, sampled or only recorded."""

    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []

    def on_end(self, span: ReadableSpan) -> None:
        self.spans.append(span)

    def get_finished_spans(self) -> list[ReadableSpan]:
        return self.spans


def rpcs() -> Iterator[tuple[str, Context | None, dict[str, Any], Status | None]]:
    for i in range(12):
        label = list(CONTEXTS)[i % len(CONTEXTS)]
        attrs = dict(ATTRS) | {"infercache.payload_bytes": i * 1000, "infercache.ratio": i / 3}
        status = Status(StatusCode.ERROR, "INVALID_ARGUMENT: tenant") if i % 3 == 2 else None
        yield label, CONTEXTS[label], attrs, status
