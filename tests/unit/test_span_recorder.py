"""SpanRecorder builds, for the same RPCs, the spans the SDK's Tracer and Span would build:
every ReadableSpan field, and the OTLP request the SDK's encoder makes of them."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.sampling import (
    ALWAYS_OFF,
    ALWAYS_ON,
    Decision,
    ParentBased,
    Sampler,
    SamplingResult,
    StaticSampler,
    TraceIdRatioBased,
)
from opentelemetry.trace import SpanKind, Status

from sidecar.observability.telemetry import INSTRUMENTATION_SCOPE, Telemetry
from tests.support.span_rpcs import ATTRS, CONTEXTS, NAME, Collect, CountingIds, rpcs


class Tagging(Sampler):
    """A sampler of no SDK kind: adds an attribute and a trace state, records every other span."""

    def __init__(self) -> None:
        self._n = 0

    def should_sample(self, parent_context: Any, trace_id: int, *args: Any, **kw: Any) -> Any:
        from opentelemetry.trace import TraceState

        self._n += 1
        decision = Decision.RECORD_AND_SAMPLE if self._n % 2 else Decision.RECORD_ONLY
        state = TraceState([("vendor", f"n{self._n}")])
        return SamplingResult(decision, {"sampler.tag": "yes", "rpc.method": "x"}, state)

    def get_description(self) -> str:
        return "Tagging"


def _provider(sampler: Sampler, limits: SpanLimits | None) -> tuple[TracerProvider, Collect]:
    spans = Collect()
    tp = TracerProvider(
        sampler=sampler,
        resource=Resource.create({"service.name": "infercache"}),
        id_generator=CountingIds(7),
        span_limits=limits,
    )
    tp.add_span_processor(spans)
    return tp, spans


def _through_sdk(sampler: Sampler, limits: SpanLimits | None) -> Sequence[ReadableSpan]:
    tp, spans = _provider(sampler, limits)
    tracer = tp.get_tracer(INSTRUMENTATION_SCOPE, _version())
    for n, (_, ctx, attrs, status) in enumerate(rpcs()):
        span = tracer.start_span(NAME, context=ctx, kind=SpanKind.SERVER, start_time=1000 + n)
        if span.is_recording():
            span.set_attributes(attrs)
            if status is not None:
                span.set_status(status)
        span.end(end_time=2000 + n)
    return spans.get_finished_spans()


def _through_recorder(sampler: Sampler, limits: SpanLimits | None) -> Sequence[ReadableSpan]:
    tp, spans = _provider(sampler, limits)
    recorder = Telemetry(tp, tracing=True).span_recorder()
    assert recorder is not None
    for n, (_, ctx, attrs, status) in enumerate(rpcs()):
        sampled = recorder.sampled_context(NAME, SpanKind.SERVER, ctx)
        if sampled is not None:
            recorder.finish(
                NAME, SpanKind.SERVER, sampled, attrs, 1000 + n, 2000 + n, status or Status()
            )
    return spans.get_finished_spans()


def _version() -> str:
    from sidecar import __version__

    return __version__


def _fields(span: ReadableSpan) -> dict[str, Any]:
    ctx, parent = span.context, span.parent
    assert ctx is not None
    return {
        "name": span.name,
        "context": (ctx.trace_id, ctx.span_id, ctx.is_remote, int(ctx.trace_flags)),
        "trace_state": list(ctx.trace_state.items()),
        "parent": parent
        and (parent.trace_id, parent.span_id, parent.is_remote, int(parent.trace_flags)),
        "attributes": list((span.attributes or {}).items()),
        "dropped": (span.dropped_attributes, span.dropped_events, span.dropped_links),
        "events": span.events,
        "links": span.links,
        "kind": span.kind,
        "status": (span.status.status_code, span.status.description),
        "times": (span.start_time, span.end_time),
        "resource": span.resource,
        "scope": span.instrumentation_scope,
        "info": span._instrumentation_info,  # the property warns: deprecated
    }


SAMPLERS = {
    "always_on": ALWAYS_ON,
    "always_off": ALWAYS_OFF,
    "parentbased_always_on": ParentBased(ALWAYS_ON),
    "parentbased_always_off": ParentBased(ALWAYS_OFF),
    "traceidratio": TraceIdRatioBased(0.5),
    "parentbased_traceidratio": ParentBased(TraceIdRatioBased(0.5)),
    "record_only": StaticSampler(Decision.RECORD_ONLY),
    "custom": Tagging(),
}


@pytest.mark.parametrize("sampler", list(SAMPLERS))
@pytest.mark.parametrize("limited", [False, True], ids=["no-limits", "limits"])
def test_recorded_spans_equal_the_sdks_field_by_field(sampler: str, limited: bool) -> None:
    """Same RPCs (root, remote sampled/unsampled parents, errors) through the SDK's Tracer and
    through SpanRecorder: the same spans reach the processors, equal in every field and in
    the OTLP request they encode to (record-only spans included: the processor keeps all)."""
    limits = SpanLimits(max_span_attributes=5, max_span_attribute_length=6) if limited else None
    if sampler == "custom":
        expected, got = _through_sdk(Tagging(), limits), _through_recorder(Tagging(), limits)
    else:
        expected = _through_sdk(SAMPLERS[sampler], limits)
        got = _through_recorder(SAMPLERS[sampler], limits)
    assert [_fields(s) for s in got] == [_fields(s) for s in expected]
    if sampler == "always_off":
        assert not expected
    else:
        assert expected, "nothing recorded: the comparison would prove nothing"
    assert encode_spans(got).SerializeToString() == encode_spans(expected).SerializeToString()


def test_a_remote_parent_is_continued() -> None:
    """An incoming traceparent's trace id and span id become the span's trace and parent."""
    tp, spans = _provider(ParentBased(ALWAYS_ON), None)
    recorder = Telemetry(tp, tracing=True).span_recorder()
    assert recorder is not None
    sampled = recorder.sampled_context(NAME, SpanKind.SERVER, CONTEXTS["remote-sampled"])
    assert sampled is not None
    now = time.time_ns()
    recorder.finish(NAME, SpanKind.SERVER, sampled, dict(ATTRS), now, now + 1)
    (span,) = spans.get_finished_spans()
    assert span.context is not None
    assert span.parent is not None
    assert span.context.trace_id == 0x0AF7651916CD43DD8448EB211C80319C
    assert span.parent.span_id == 0xB7AD6B7169203331
    assert span.parent.is_remote
    assert list(span.context.trace_state.items()) == [("congo", "t61rcWkgMzE")]


def test_tracing_needs_the_sdk_provider() -> None:
    """A provider the recorder cannot feed is refused, not silently traced to nowhere."""
    from opentelemetry.trace import NoOpTracerProvider, ProxyTracerProvider

    assert Telemetry(NoOpTracerProvider(), tracing=True).span_recorder() is None
    with pytest.raises(TypeError):
        Telemetry(ProxyTracerProvider(), tracing=True).span_recorder()
