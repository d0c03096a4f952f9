"""OTLP trace export at a few µs per span: the SDK encoder's request, written as bytes.

The SDK's `encode_spans` builds a protobuf object per span, attribute and value (24-60 µs a
span here, on the export thread, which holds the GIL the event loop needs). `SpanEncoder`
writes the same ExportTraceServiceRequest in protobuf's wire format instead, with the
encoding of each (key, value) attribute, resource and scope memoised, and parses it once
(in C). A batch holding anything this encoder does not write (events, links, values other
than str, bool, int64 and float) is handed to the SDK's encoder whole, so the request is
the SDK's in every case (tests/unit/test_otlp_encoding.py compares them byte for byte).

Only imported where OTLP export is configured: it needs the `otlp` extra.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest as PB2ExportTraceServiceRequest,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode

from sidecar.observability.span_records import SpanRecord, readable

_MEMO_MAX = 8192
_INT64 = 1 << 63
_HAS_IS_REMOTE = 0x100  # SpanFlags.SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
_IS_REMOTE = 0x200  # SpanFlags.SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK
_PACK_Q = struct.Struct("<Q").pack
_PACK_I = struct.Struct("<I").pack
_PACK_D = struct.Struct("<d").pack
_FLAGS = {
    False: b"\x85\x01" + _PACK_I(_HAS_IS_REMOTE),
    True: b"\x85\x01" + _PACK_I(_HAS_IS_REMOTE | _IS_REMOTE),
}


class _Unsupported(Exception):
    """Something the SDK's encoder must write (or drop and log) itself."""


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_SMALL = [_varint(n) for n in range(1 << 14)]


def _field(tag: bytes, payload: bytes) -> bytes:
    """A length-delimited field: tag, length, payload."""
    n = len(payload)
    return tag + (_SMALL[n] if n < 16384 else _varint(n)) + payload


def _any_value(value: Any) -> bytes:
    """AnyValue, as the SDK's _encode_value writes it for the scalar types (oneof: always set)."""
    kind = value.__class__
    if kind is bool:
        return b"\x10\x01" if value else b"\x10\x00"
    if kind is str:
        return _field(b"\x0a", value.encode())
    if kind is int:
        if not -_INT64 <= value < _INT64:
            raise _Unsupported  # the SDK logs and drops it
        return b"\x18" + _varint(value & 0xFFFFFFFFFFFFFFFF)
    if kind is float:
        return b"\x21" + _PACK_D(value)
    raise _Unsupported


class _Memo:
    """Encoded attributes and group headers; bounded: past _MEMO_MAX, encode without keeping."""

    def __init__(self) -> None:
        self.attrs: dict[tuple[str, type, Any], bytes] = {}
        self.heads: dict[tuple[Resource, InstrumentationScope | None], tuple[bytes, ...]] = {}

    def attribute(self, key: str, value: Any) -> bytes:
        """One `attributes` entry of a span: field 9, a KeyValue."""
        memo_key = (key, value.__class__, value)
        got = self.attrs.get(memo_key)
        if got is None:
            got = _field(
                b"\x4a", _field(b"\x0a", key.encode()) + _field(b"\x12", _any_value(value))
            )
            if len(self.attrs) < _MEMO_MAX:
                self.attrs[memo_key] = got
        return got

    def head(self, span: ReadableSpan, group: tuple[Resource, Any]) -> tuple[bytes, ...]:
        """(resource field, scope field, scope schema field, resource schema field) of the
        span's `group` (resource, scope), from the SDK's own encoding of the span."""
        got = self.heads.get(group)
        if got is None:
            rs = encode_spans([span]).resource_spans[0]
            ss = rs.scope_spans[0]
            got = (
                _field(b"\x0a", rs.resource.SerializeToString()),
                _field(b"\x0a", ss.scope.SerializeToString()),
                _field(b"\x1a", ss.schema_url.encode()) if ss.schema_url else b"",
                _field(b"\x1a", rs.schema_url.encode()) if rs.schema_url else b"",
            )
            self.heads[group] = got
        return got


def _span(span: ReadableSpan, memo: _Memo) -> bytes:
    """One Span message's bytes, fields in number order as the SDK's encoder writes them."""
    ctx = span.context
    if ctx is None or span.events or span.links:
        raise _Unsupported
    parent: SpanContext | None = span.parent
    state, name, start, end = ctx.trace_state, span.name, span.start_time, span.end_time
    kind = span.kind
    out = [
        b"\x0a\x10",
        ctx.trace_id.to_bytes(16, "big"),
        b"\x12\x08",
        ctx.span_id.to_bytes(8, "big"),
        _field(b"\x1a", ",".join(f"{k}={v}" for k, v in state.items()).encode()) if state else b"",
        b"\x22\x08" + parent.span_id.to_bytes(8, "big") if parent else b"",
        _field(b"\x2a", name.encode()) if name else b"",
        _SERVER if kind is SpanKind.SERVER else _KIND[kind.value],
        b"\x39" + _PACK_Q(start) if start else b"",
        b"\x41" + _PACK_Q(end) if end else b"",
    ]
    known, attribute = memo.attrs.get, memo.attribute  # a memo hit costs no call
    out += [
        known((k, v.__class__, v)) or attribute(k, v) for k, v in (span.attributes or {}).items()
    ]
    for tag, count in (
        (b"\x50", span.dropped_attributes),
        (b"\x60", span.dropped_events),
        (b"\x70", span.dropped_links),
    ):
        if count:
            out += (tag, _varint(count))
    out += _tail(span.status, parent)
    return b"".join(out)


def _record(span: SpanRecord, memo: _Memo) -> bytes:
    """`_span` for a SpanRecord: the same bytes as for its ReadableSpan (no events, links or
    dropped counts: a record has none)."""
    name, kind, trace_id, span_id, _, state, parent, attributes, start, end, status, _ = span
    out = [
        b"\x0a\x10",
        trace_id.to_bytes(16, "big"),
        b"\x12\x08",
        span_id.to_bytes(8, "big"),
        _field(b"\x1a", ",".join(f"{k}={v}" for k, v in state.items()).encode()) if state else b"",
        b"\x22\x08" + parent.span_id.to_bytes(8, "big") if parent else b"",
        _field(b"\x2a", name.encode()) if name else b"",
        _SERVER if kind is SpanKind.SERVER else _KIND[kind.value],
        b"\x39" + _PACK_Q(start) if start else b"",
        b"\x41" + _PACK_Q(end) if end else b"",
    ]
    known, attribute = memo.attrs.get, memo.attribute
    out += [known((k, v.__class__, v)) or attribute(k, v) for k, v in attributes.items()]
    out += _tail(status, parent)
    return b"".join(out)


def _tail(status: Status, parent: SpanContext | None) -> tuple[bytes, bytes]:
    """A span's status field and its flags (the last two fields, in the SDK's order)."""
    if status.status_code is StatusCode.UNSET and not status.description:
        encoded = b"\x7a\x00"
    else:
        body = _field(b"\x12", status.description.encode()) if status.description else b""
        if status.status_code.value:
            body += b"\x18" + _varint(status.status_code.value)
        encoded = _field(b"\x7a", body)
    return encoded, _FLAGS[bool(parent and parent.is_remote)]


# SpanKind INTERNAL..CONSUMER (0-4) are OTLP's SPAN_KIND_INTERNAL..CONSUMER (1-5).
_KIND = [b"\x30" + _varint(v + 1) for v in range(5)]
_SERVER = _KIND[SpanKind.SERVER.value]


def _request_bytes(spans: Sequence[ReadableSpan | SpanRecord], memo: _Memo) -> bytes:
    # Grouped by resource, then scope, in order of first appearance, as the SDK does; equal
    # objects share a group, but a Resource hashes by dumping its attributes to JSON, so
    # each distinct object of the batch is hashed once, not once per span.
    groups: dict[Resource, dict[InstrumentationScope | None, list[bytes]]] = {}
    by_identity: dict[tuple[int, int], list[bytes]] = {}
    heads: dict[tuple[Resource, InstrumentationScope | None], tuple[bytes, ...]] = {}
    for span in spans:
        record = span.__class__ is SpanRecord
        if record:
            resource, _, scope = span[11]  # type: ignore[index]
            scope = scope or None
        else:
            resource, scope = span.resource, span.instrumentation_scope or None  # type: ignore[union-attr]
        encoded = by_identity.get((id(resource), id(scope)))
        if encoded is None:
            encoded = groups.setdefault(resource, {}).setdefault(scope, [])
            by_identity[id(resource), id(scope)] = encoded
            if (resource, scope) not in heads:
                sdk_span = span.readable() if record else span  # type: ignore[union-attr]
                heads[resource, scope] = memo.head(sdk_span, (resource, scope))  # type: ignore[arg-type]
        body = _record(span, memo) if record else _span(span, memo)  # type: ignore[arg-type]
        encoded.append(_field(b"\x12", body))
    out = []
    for resource, scopes in groups.items():
        parts = []
        for scope, encoded in scopes.items():
            _, scope_field, scope_schema, _ = heads[resource, scope]
            parts.append(_field(b"\x12", scope_field + b"".join(encoded) + scope_schema))
        resource_field, _, _, resource_schema = heads[resource, next(iter(scopes))]
        out.append(_field(b"\x0a", resource_field + b"".join(parts) + resource_schema))
    return b"".join(out)


class SpanEncoder:
    """`encode_spans`, faster: the same ExportTraceServiceRequest for the same spans (a
    SpanRecord standing for its ReadableSpan)."""

    def __init__(self) -> None:
        self._memo = _Memo()
        self.handed_on = 0
        """Batches given to the SDK's encoder."""

    def data(self, spans: Sequence[ReadableSpan | SpanRecord]) -> bytes:
        """The serialised request."""
        try:
            return _request_bytes(spans, self._memo)
        except (_Unsupported, UnicodeEncodeError):
            self.handed_on += 1
            return bytes(encode_spans(readable(spans)).SerializeToString())

    def __call__(self, spans: Sequence[ReadableSpan | SpanRecord]) -> PB2ExportTraceServiceRequest:
        """The request the SDK's encode_spans(spans) builds."""
        return PB2ExportTraceServiceRequest.FromString(self.data(spans))


class GrpcSpanExporter(OTLPSpanExporter):
    """The SDK's OTLP/gRPC span exporter with `SpanEncoder` as its translation step."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._encode = SpanEncoder()

    def _translate_data(
        self, data: Sequence[ReadableSpan | SpanRecord]
    ) -> PB2ExportTraceServiceRequest:
        return self._encode(data)
