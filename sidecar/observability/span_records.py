"""Spans kept as plain fields from the RPC to the export thread.

`SpanRecorder` (spans.py) hands an RPC's finished span to the SDK's span processors as a
`ReadableSpan`: a `SpanContext` and a `ReadableSpan` built per RPC on the event loop (about
2 µs of the traced RPC's ~6 µs here), then the processor chain. When every processor of the
tracer is a `RecordBatchProcessor` (what configure_telemetry installs for OTLP export), the
recorder queues a `SpanRecord` instead: the same fields, no SDK object, straight into the
batch processor's queue. The OTLP encoder (otlp.py) writes a record's bytes from its fields
on the export thread; anything else that needs the SDK's span (the SDK's own encoder, a
console exporter) gets `record.readable()`, the very ReadableSpan the recorder would have
built (tests/unit/test_span_records.py compares both paths' OTLP requests).
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from operator import itemgetter
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.util.instrumentation import InstrumentationInfo, InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, TraceFlags, TraceState

Origin = tuple[Resource, InstrumentationInfo, InstrumentationScope]
"""What every span of one tracer shares: its resource, instrumentation info and scope."""


class SpanRecord(tuple):  # type: ignore[type-arg]
    """A finished, sampled span's fields as the recorder knows them (attributes unbounded:
    records are only made where the SDK's cleaning would change nothing).

    A tuple, made with `tuple.__new__(SpanRecord, fields)` (no Python-level __init__ on
    the event loop), the fields in this order:
    (name, kind, trace_id, span_id, flags, trace_state, parent, attributes, start_time,
    end_time, status, origin)."""

    __slots__ = ()

    name: str = property(itemgetter(0))  # type: ignore[assignment]
    kind: SpanKind = property(itemgetter(1))  # type: ignore[assignment]
    trace_id: int = property(itemgetter(2))  # type: ignore[assignment]
    span_id: int = property(itemgetter(3))  # type: ignore[assignment]
    flags: int = property(itemgetter(4))  # type: ignore[assignment]
    trace_state: TraceState | None = property(itemgetter(5))  # type: ignore[assignment]
    parent: SpanContext | None = property(itemgetter(6))  # type: ignore[assignment]
    attributes: Mapping[str, Any] = property(itemgetter(7))  # type: ignore[assignment]
    start_time: int = property(itemgetter(8))  # type: ignore[assignment]
    end_time: int = property(itemgetter(9))  # type: ignore[assignment]
    status: Status = property(itemgetter(10))  # type: ignore[assignment]
    origin: Origin = property(itemgetter(11))  # type: ignore[assignment]

    def readable(self) -> ReadableSpan:
        """The ReadableSpan SpanRecorder.finish builds for the same span."""
        name, kind, trace_id, span_id, flags, state, parent, attrs, start, end, status, origin = (
            self
        )
        resource, info, scope = origin
        return ReadableSpan(
            name=name,
            context=SpanContext(
                trace_id,
                span_id,
                is_remote=False,
                trace_flags=TraceFlags(flags),
                trace_state=state,
            ),
            parent=parent,
            resource=resource,
            attributes=attrs,
            kind=kind,
            status=status,
            start_time=start,
            end_time=end,
            instrumentation_info=info,
            instrumentation_scope=scope,
        )


def readable(spans: Sequence[ReadableSpan | SpanRecord]) -> list[ReadableSpan]:
    """The batch as the SDK's exporters and encoders take it."""
    return [s.readable() if isinstance(s, SpanRecord) else s for s in spans]


class RecordBatchProcessor(BatchSpanProcessor):
    """The SDK's batch processor (same queue, thread, limits, OTEL_BSP_* settings, flush and
    shutdown) that also takes `SpanRecord`s; its exporter must accept them in a batch
    (otlp.py's exporters do)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        batch = getattr(self, "_batch_processor", None)
        # The SDK's BatchProcessor.emit checks os.getpid() on every span (a system call,
        # a third of a traced RPC's span work in a profile here) to notice a fork, which
        # its at-fork hook handles already where os.register_at_fork exists (Linux).
        # `record` does what emit does without that check, on the processor's own members,
        # where all of them are there; elsewhere it calls emit.
        self._fast = (
            hasattr(os, "register_at_fork")
            and batch is not None
            and all(hasattr(batch, a) for a in _EMIT_MEMBERS)
            and isinstance(batch._queue, deque)
        )

    def record(self, span: SpanRecord) -> None:
        """Queue a sampled span (no `on_end`: the record is sampled by construction)."""
        batch = self._batch_processor
        if not self._fast or batch._shutdown:
            batch.emit(span)  # type: ignore[arg-type]
            return
        queue = batch._queue
        if len(queue) == batch._max_queue_size:
            batch.emit(span)  # type: ignore[arg-type]  # its warning and drop count
            return
        queue.appendleft(span)
        if len(queue) >= batch._max_export_batch_size and not batch._worker_awaken.is_set():
            batch._worker_awaken.set()


_EMIT_MEMBERS = (
    "_shutdown",
    "_queue",
    "_max_queue_size",
    "_max_export_batch_size",
    "_worker_awaken",
)


def record_sinks(processor: SpanProcessor) -> tuple[Callable[[SpanRecord], None], ...] | None:
    """Where a tracer's spans go as records: the `record` of each of its processors when
    every one is a RecordBatchProcessor; None when any is not (then spans are built)."""
    # The SDK's provider holds its processors in a multi-processor (a private attribute:
    # without it, spans are only built, as before).
    processors = getattr(processor, "_span_processors", None)
    if not processors or not all(isinstance(p, RecordBatchProcessor) for p in processors):
        return None
    if not all(hasattr(p, "_batch_processor") for p in processors):
        return None
    return tuple(p.record for p in processors)
