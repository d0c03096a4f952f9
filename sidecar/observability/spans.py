"""Finished spans built in one step: what the SDK's Tracer and Span do for an RPC, minus their
per-span machinery.

The api layer knows everything about an RPC's span once the RPC has ended (name, start and
end, attributes, status), so it never needs a live `Span`: `SpanRecorder.finish` takes the
same sampling decision and ids as `Tracer.start_span`, builds the `ReadableSpan` that
`Span.end` would have handed on, and gives it to the tracer's span processors. Skipped,
because a span built after the fact has no use for them: the span's lock, the
`BoundedAttributes` cleaning of values the sidecar itself produced (str, int and bool; it
still runs when a sampler adds attributes or OTEL_SPAN_ATTRIBUTE_* limits are set), and the
processors' `on_start` (the batch and simple processors do nothing there), and the SDK's
opt-in self-metrics of spans started and ended (OTEL_PYTHON_SDK_INTERNAL_METRICS_ENABLED) and
experimental tracer configurator. For a root span under the SDK's own samplers the decision is
read from the trace id directly (what those samplers compute, without their context look-ups).
What reaches the processors is the same span, field for field, built from the same ids
(tests/unit/test_span_recorder.py); where every processor takes records
(span_records.py), not even the ReadableSpan is built on the event loop.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any

from opentelemetry import trace as trace_api
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, Tracer
from opentelemetry.sdk.trace.sampling import (
    Decision,
    ParentBased,
    Sampler,
    StaticSampler,
    TraceIdRatioBased,
)
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, TraceFlags, TraceState
from opentelemetry.util.types import AttributeValue

from sidecar.observability.span_records import Origin, SpanRecord, record_sinks

_new_record = tuple.__new__

Attributes = dict[str, AttributeValue]
Sampled = tuple[int, int, int, TraceState | None, SpanContext | None, Mapping[str, Any]]
"""What `sampled_context` decided: trace id, span id, trace flags, trace state, parent and
the sampler's attributes (opaque to callers: handed back to `finish`)."""

_UNSET = Status()
_NO_ATTRIBUTES: Mapping[str, Any] = {}
_SAMPLED = int(TraceFlags.SAMPLED)
_DEFAULT = int(TraceFlags.DEFAULT)
# W3C level 2's random-trace-id flag (API >= 1.39); 0 where the API predates it.
_RANDOM = int(getattr(TraceFlags, "RANDOM_TRACE_ID", 0))


class SpanRecorder:
    """Turns a finished RPC into a finished span of one SDK tracer's pipeline."""

    def __init__(self, tracer: Tracer, scope: InstrumentationScope) -> None:
        self._sampler = tracer.sampler
        self._ids = tracer.id_generator
        self._resource = tracer.resource
        self._processor = tracer.span_processor
        self._info = tracer.instrumentation_info
        self._scope = scope
        # The tracer's limits are private; a provider built without explicit limits (every
        # one in the sidecar) reads the same OTEL_* variables as SpanLimits() does here.
        limits = getattr(tracer, "_span_limits", None)
        self._limits: SpanLimits = limits if isinstance(limits, SpanLimits) else SpanLimits()
        # Up to this many attributes, with no value-length limit, cleaning changes nothing.
        count_limit = self._limits.max_span_attributes
        self._plain_max = sys.maxsize if count_limit is None else count_limit
        if self._limits.max_span_attribute_length is not None:
            self._plain_max = -1
        self._root_decision = _root_rule(self._sampler)
        random_ids = getattr(self._ids, "is_trace_id_random", None)
        self._random_roots = _RANDOM if random_ids is not None and random_ids() else 0
        self._origin: Origin = (self._resource, self._info, scope)
        self._processors = _processors(self._processor)
        self._sinks = record_sinks(self._processor)

    def sampled_context(self, name: str, kind: SpanKind, context: Context | None) -> Sampled | None:
        """The span's ids, flags, trace state, parent and the sampler's attributes; None if
        not recorded.

        As `Tracer.start_span`: the parent is the span in `context` (the current context when
        None), its trace id continues, and the tracer's sampler decides.
        """
        parent: SpanContext | None = trace_api.get_current_span(context).get_span_context()
        if parent is None or not parent.is_valid:
            parent = None
            trace_id = self._ids.generate_trace_id()
            random_flag = self._random_roots
            if self._root_decision is not None:
                # What the sampler answers for a root span, without its context look-ups.
                decision = self._root_decision(trace_id)
                span_id = self._ids.generate_span_id()  # drawn for a dropped span too, as the SDK
                if decision is Decision.DROP:
                    return None
                flags = _SAMPLED if decision is Decision.RECORD_AND_SAMPLE else _DEFAULT
                return (trace_id, span_id, flags | random_flag, None, None, _NO_ATTRIBUTES)
        else:
            trace_id = parent.trace_id
            random_flag = int(parent.trace_flags) & _RANDOM
        result = self._sampler.should_sample(context, trace_id, name, kind, None, ())
        span_id = self._ids.generate_span_id()
        if result.decision is Decision.DROP:
            return None
        flags = _SAMPLED if result.decision is Decision.RECORD_AND_SAMPLE else _DEFAULT
        return (
            trace_id,
            span_id,
            flags | random_flag,
            result.trace_state,
            parent,
            result.attributes,
        )

    def finish(
        self,
        name: str,
        kind: SpanKind,
        sampled: Sampled,
        attributes: Attributes,
        start_ns: int,
        end_ns: int,
        status: Status = _UNSET,
    ) -> None:
        """Hand the finished span to the processors (as `Span.end` does): as a SpanRecord
        to record sinks, else as the ReadableSpan `Span.end` would build."""
        trace_id, span_id, flags, state, parent, extra = sampled
        plain = not extra and len(attributes) <= self._plain_max
        if _processors(self._processor) is not self._processors:
            # A processor was added to the provider since: look at them again.
            self._processors = _processors(self._processor)
            self._sinks = record_sinks(self._processor)
        if self._sinks is not None and plain and flags & _SAMPLED:
            fields = (name, kind, trace_id, span_id, flags, state, parent, attributes)
            rec = _new_record(SpanRecord, (*fields, start_ns, end_ns, status, self._origin))
            for sink in self._sinks:
                sink(rec)
            return
        attrs: Mapping[str, Any] = attributes
        if not plain:
            # Limits or sampler attributes in play: the SDK's own cleaning, in its order.
            bounded = BoundedAttributes(
                self._limits.max_span_attributes,
                extra,
                immutable=False,
                max_value_len=self._limits.max_span_attribute_length,
            )
            for key, value in attributes.items():
                bounded[key] = value
            attrs = bounded
        own = SpanContext(
            trace_id, span_id, is_remote=False, trace_flags=TraceFlags(flags), trace_state=state
        )
        span = ReadableSpan(
            name=name,
            context=own,
            parent=parent,
            resource=self._resource,
            attributes=attrs,
            kind=kind,
            status=status,
            start_time=start_ns,
            end_time=end_ns,
            instrumentation_info=self._info,
            instrumentation_scope=self._scope,
        )
        self._processor.on_end(span)


def _processors(processor: Any) -> Any:
    """The provider's tuple of processors (replaced, not changed, when one is added)."""
    return getattr(processor, "_span_processors", None)


def _root_rule(sampler: Sampler) -> Callable[[int], Decision] | None:
    """The decision `sampler` takes for a root span, as a function of the trace id alone;
    None for a sampler that is not one of the SDK's own (whose answer for a root span
    depends on nothing else: no attributes, no trace state)."""
    root: Any = sampler
    if type(sampler).should_sample is ParentBased.should_sample:
        # ParentBased hands a root span to its root sampler (the attribute is private: a
        # renamed one only costs this shortcut).
        root = getattr(sampler, "_root", None)
    if root is None:
        return None
    if type(root).should_sample is StaticSampler.should_sample:
        decision = root.should_sample(None, 0, "").decision
        return lambda _trace_id: decision
    if type(root).should_sample is TraceIdRatioBased.should_sample:
        bound, limit = root.bound, TraceIdRatioBased.TRACE_ID_LIMIT
        sample, drop = Decision.RECORD_AND_SAMPLE, Decision.DROP
        return lambda trace_id: sample if trace_id & limit < bound else drop
    return None
