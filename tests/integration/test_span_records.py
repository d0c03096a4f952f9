"""Spans queued as records (observability/span_records.py) reach a real OTLP collector, over
gRPC and over http/protobuf, as the very request the SDK's encoder makes of the spans the
recorder would otherwise have built."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased, Sampler, TraceIdRatioBased
from opentelemetry.trace import SpanKind, Status

from sidecar.observability.span_records import RecordBatchProcessor, SpanRecord
from sidecar.observability.telemetry import Telemetry
from tests.support.span_rpcs import NAME, Collect, CountingIds, rpcs

Request = trace_service_pb2.ExportTraceServiceRequest


class _Received:
    """The export requests a collector was sent, as bytes."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self._lock = threading.Lock()

    def add(self, body: bytes) -> None:
        with self._lock:
            self.bodies.append(body)


@pytest.fixture
def grpc_collector() -> Iterator[tuple[_Received, str]]:
    """An OTLP/gRPC trace endpoint on a free port."""
    received = _Received()

    class Sink(trace_service_pb2_grpc.TraceServiceServicer):
        def Export(self, request: Any, context: Any) -> Any:
            received.add(request.SerializeToString())
            return trace_service_pb2.ExportTraceServiceResponse()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Sink(), server)  # type: ignore[no-untyped-call]
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield received, f"127.0.0.1:{port}"
    server.stop(0)


@pytest.fixture
def http_collector() -> Iterator[tuple[_Received, str]]:
    """An OTLP/http-protobuf trace endpoint (POST /v1/traces) on a free port."""
    received = _Received()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            if self.path == "/v1/traces":
                received.add(body)
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield received, f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _exporter(protocol: str, address: str) -> Any:
    if protocol == "grpc":
        from sidecar.observability.otlp import GrpcSpanExporter

        return GrpcSpanExporter(endpoint=f"http://{address}", insecure=True)
    from sidecar.observability.otlp_http import HttpSpanExporter

    return HttpSpanExporter(endpoint=f"http://{address}/v1/traces")


def _provider(sampler: Sampler, limits: SpanLimits | None) -> TracerProvider:
    return TracerProvider(
        sampler=sampler,
        resource=Resource.create({"service.name": "infercache"}),
        id_generator=CountingIds(11),
        span_limits=limits,
    )


def _record(tp: TracerProvider) -> int:
    """The RPCs of test_span_recorder (every third with one more attribute) through a
    SpanRecorder of `tp`; how many were sampled."""
    recorder = Telemetry(tp, tracing=True).span_recorder()
    assert recorder is not None
    sampled_n = 0
    for n, (_, ctx, attrs, status) in enumerate(rpcs()):
        sampled = recorder.sampled_context(NAME, SpanKind.SERVER, ctx)
        if sampled is not None:
            sampled_n += 1
            more = {"infercache.hits": n} if n % 3 == 0 else {}  # 10 attributes, else 9
            recorder.finish(
                NAME, SpanKind.SERVER, sampled, attrs | more, 1000 + n, 2000 + n, status or Status()
            )
    return sampled_n


SAMPLERS = {
    "parentbased_always_on": ParentBased(ALWAYS_ON),
    "parentbased_traceidratio": ParentBased(TraceIdRatioBased(0.5)),
}


@pytest.mark.parametrize("protocol", ["grpc", "http"])
@pytest.mark.parametrize("sampler", list(SAMPLERS))
@pytest.mark.parametrize("limited", [False, True], ids=["records", "records-and-spans"])
def test_the_collector_receives_the_sdks_request(
    protocol: str,
    sampler: str,
    limited: bool,
    grpc_collector: tuple[_Received, str],
    http_collector: tuple[_Received, str],
) -> None:
    """Same RPCs, same ids: what the collector receives from the record path equals the
    SDK encoder's request for the ReadableSpans the recorder builds without it. With a
    count limit, the spans it would cut are built and queued beside the records (one
    batch of both kinds)."""
    received, address = grpc_collector if protocol == "grpc" else http_collector
    limits = SpanLimits(max_span_attributes=9) if limited else None

    tp = _provider(SAMPLERS[sampler], limits)
    processor = RecordBatchProcessor(_exporter(protocol, address))
    tp.add_span_processor(processor)
    queued: list[Any] = []
    record, on_end = processor.record, processor.on_end

    def recorded(span: Any) -> None:
        queued.append(span)
        record(span)

    def ended(span: Any) -> None:
        queued.append(span)
        on_end(span)

    processor.record, processor.on_end = recorded, ended  # type: ignore[method-assign]
    sent = _record(tp)
    assert tp.force_flush(10_000)
    tp.shutdown()

    reference_tp = _provider(SAMPLERS[sampler], limits)
    built = Collect()
    reference_tp.add_span_processor(built)
    _record(reference_tp)
    expected = [s for s in built.spans if s.context and s.context.trace_flags.sampled]

    assert sent, "nothing sampled: the comparison would prove nothing"
    assert len(expected) == sent
    records = [s for s in queued if isinstance(s, SpanRecord)]
    assert records, "no span went as a record: the record path is untested"
    assert len(records) < len(queued) if limited else len(records) == len(queued)
    (body,) = received.bodies
    assert Request.FromString(body) == encode_spans(expected)
    assert body == encode_spans(expected).SerializeToString()


def test_a_processor_added_later_gets_the_spans(grpc_collector: tuple[_Received, str]) -> None:
    """The recorder looks at the provider's processors again when one is added after it was
    made: a span processor that takes no records still gets every span, built."""
    received, address = grpc_collector
    tp = _provider(ParentBased(ALWAYS_ON), None)
    tp.add_span_processor(RecordBatchProcessor(_exporter("grpc", address)))
    recorder = Telemetry(tp, tracing=True).span_recorder()
    assert recorder is not None
    built = Collect()
    tp.add_span_processor(built)
    sampled = recorder.sampled_context(NAME, SpanKind.SERVER, None)
    assert sampled is not None
    recorder.finish(NAME, SpanKind.SERVER, sampled, {"rpc.method": "Lookup"}, 1, 2)
    assert tp.force_flush(10_000)
    tp.shutdown()
    assert len(built.spans) == 1
    assert Request.FromString(received.bodies[0]) == encode_spans(built.spans)


class _Wakes:
    """Stands for the batch processor's wake-up event: notes set(), wakes nobody."""

    def __init__(self) -> None:
        self.flag = False

    def is_set(self) -> bool:
        return self.flag

    def set(self) -> None:
        self.flag = True


def test_record_queues_as_the_sdks_emit_would() -> None:
    """The processor's own queueing (no os.getpid per span) keeps what emit keeps: the
    newest spans when full, none after shutdown; and it wakes the worker at a batch."""
    from bench.telemetry.observer_cost import _null

    def run(use_record: bool) -> tuple[list[Any], bool]:
        processor = RecordBatchProcessor(
            _null(), max_queue_size=4, max_export_batch_size=3, schedule_delay_millis=60_000
        )
        batch = processor._batch_processor
        # The worker waits on the real event for 60 s: it takes nothing while we look.
        real, wakes = batch._worker_awaken, _Wakes()
        batch._worker_awaken = wakes  # type: ignore[assignment]
        spans = [SpanRecord((f"s{i}",)) for i in range(6)]
        for n, span in enumerate(spans):
            processor.record(span) if use_record else batch.emit(span)  # type: ignore[arg-type]
            assert wakes.flag == (n >= 2)  # at a batch of 3
        queued = list(batch._queue)
        batch._queue.clear()
        batch._worker_awaken = real
        processor.shutdown()  # type: ignore[no-untyped-call]
        processor.record(spans[0]) if use_record else batch.emit(spans[0])  # type: ignore[arg-type]
        assert not batch._queue
        return queued, processor._fast

    fast, used = run(True)
    assert used, "the processor's own queueing is not in use: nothing is compared"
    assert fast == run(False)[0]
    assert [s[0] for s in fast] == ["s5", "s4", "s3", "s2"]
