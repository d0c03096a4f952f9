"""W3C trace context over real gRPC: an incoming traceparent is the server span's parent."""

from __future__ import annotations

import grpc
from infercache.v1 import cache_pb2 as pb
from infercache.v1 import cache_pb2_grpc
from infercache_client import make_key
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

from sidecar.observability.telemetry import Telemetry
from sidecar.testing import in_process_sidecar

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
PARENT_ID = "b7ad6b7169203331"


async def test_incoming_traceparent_is_honoured() -> None:
    """With a root ratio of 0, only the RPC under a sampled traceparent has a span: in that
    trace, under that parent, with its trace state; an unsampled parent or none: no span."""
    spans = InMemorySpanExporter()
    provider = TracerProvider(sampler=ParentBased(TraceIdRatioBased(0.0)))
    provider.add_span_processor(SimpleSpanProcessor(spans))
    telemetry = Telemetry(provider, tracing=True)
    request = pb.LookupRequest(
        key=make_key(tenant="t", model_version="A", prompt_version="p", text="q")
    )
    try:
        async with in_process_sidecar(telemetry=telemetry) as sc:
            target = f"127.0.0.1:{sc.running.ports[0]}"
            async with grpc.aio.insecure_channel(target) as channel:
                stub = cache_pb2_grpc.CacheServiceStub(channel)
                for flags in ("01", "00"):
                    header = ("traceparent", f"00-{TRACE_ID}-{PARENT_ID}-{flags}")
                    state = ("tracestate", "congo=t61rcWkgMzE")
                    await stub.Lookup(request, metadata=(header, state), timeout=5)
                await stub.Lookup(request, timeout=5)
    finally:
        provider.shutdown()
    (span,) = spans.get_finished_spans()
    assert span.context is not None
    assert span.parent is not None
    assert f"{span.context.trace_id:032x}" == TRACE_ID
    assert f"{span.parent.span_id:016x}" == PARENT_ID
    assert span.parent.is_remote
    assert span.context.trace_flags.sampled
    assert span.context.span_id != span.parent.span_id
    assert list(span.context.trace_state.items()) == [("congo", "t61rcWkgMzE")]
    assert (span.attributes or {})["infercache.outcome"] == "miss"
