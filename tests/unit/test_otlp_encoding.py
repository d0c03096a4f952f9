"""SpanEncoder writes the OTLP request the SDK's encode_spans builds, byte for byte."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from sidecar.observability.otlp import SpanEncoder

REMOTE = TraceContextTextMapPropagator().extract(
    {
        "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "tracestate": "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7",
    }
)
VALUES: list[Any] = ["", "grpc", "zürich ✓ 東京", "x" * 300, True, False, 0, 7, -1, 2**63 - 1]
VALUES += [-(2**63), 0.0, -2.5, 1e300]


def _spans(
    resources: int = 1, scopes: int = 1, extra: dict[str, Any] | None = None
) -> list[ReadableSpan]:
    memory = InMemorySpanExporter()
    tracers = []
    for r in range(resources):
        tp = TracerProvider(
            resource=Resource({"service.name": f"svc{r}", "n": r}, f"https://s/{r}")
        )
        tp.add_span_processor(SimpleSpanProcessor(memory))
        tracers += [
            tp.get_tracer(f"scope{s}", "1.0", f"https://scope/{s}" if s else None)
            for s in range(scopes)
        ]
    for i in range(40):
        tracer = tracers[i % len(tracers)]
        kind = list(SpanKind)[i % len(SpanKind)]
        span = tracer.start_span(
            "" if i == 5 else f"op/{i % 3}",
            context=REMOTE if i % 4 == 1 else None,
            kind=kind,
            start_time=1_700_000_000_000_000_000 + i,
        )
        attrs = {f"k{j}": VALUES[(i + j) % len(VALUES)] for j in range(6)}
        span.set_attributes(attrs | (extra or {}) | {"digest": f"{i * 7919:016x}"})
        if i % 5 == 2:
            span.set_status(Status(StatusCode.ERROR, "INVALID_ARGUMENT: tenant" if i % 2 else None))
        elif i % 5 == 3:
            span.set_status(Status(StatusCode.OK))
        span.end(end_time=1_700_000_000_000_500_000 + i)
    return list(memory.get_finished_spans())


def _same(spans: list[ReadableSpan], encoder: SpanEncoder | None = None) -> int:
    """Assert the encoder's request is the SDK's; how many batches it handed to the SDK's."""
    encoder = encoder or SpanEncoder()
    before = encoder.handed_on
    expected = encode_spans(spans)
    got = encoder(spans)
    assert got == expected
    assert got.SerializeToString() == expected.SerializeToString()
    return encoder.handed_on - before


@pytest.mark.parametrize(("resources", "scopes"), [(1, 1), (2, 1), (1, 3), (3, 2)])
def test_requests_equal_the_sdks(resources: int, scopes: int) -> None:
    """Scalar attributes of every kind, remote and local parents, trace states, statuses,
    kinds, an empty name, several resources and scopes: the SDK's request, byte for byte."""
    assert _same(_spans(resources, scopes)) == 0


def test_memoised_encodings_stay_right_across_batches() -> None:
    """One encoder over many batches (its memo warm, then full) still writes the SDK's bytes."""
    encoder = SpanEncoder()
    for n in range(3):
        assert _same(_spans(2, 2, {"batch": n}), encoder) == 0
    for n in range(300):  # past the memo's bound
        assert _same(_spans(1, 1, {"filler": f"v{n}" * 3, "n": n})[:2], encoder) == 0
    assert _same(_spans(2, 2), encoder) == 0


@pytest.mark.parametrize(
    "extra",
    [{"seq": ("a", "b")}, {"big": 2**64}, {"raw": b"\x00\xff"}, {"ints": (1, 2)}],
    ids=["str-array", "int-out-of-range", "bytes", "int-array"],
)
def test_what_it_does_not_write_goes_to_the_sdk_encoder(extra: dict[str, Any]) -> None:
    """Values it does not write itself: the whole batch is the SDK encoder's, so equal."""
    assert _same(_spans(extra=extra)) == 1


def test_events_and_links_go_to_the_sdk_encoder() -> None:
    """A span with an event or a link: the SDK encoder's request."""
    memory = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(memory))
    tracer = tp.get_tracer("t")
    first = tracer.start_span("a")
    first.add_event("e", {"x": 1})
    first.end()
    ctx = first.get_span_context()
    tracer.start_span("b", links=[Link(ctx, {"y": "z"})]).end()
    spans = list(memory.get_finished_spans())
    assert _same(spans) == 1
    assert _same(_spans() + spans) == 1
