"""Undecodable and invalid-UTF-8 requests to every method: the statuses they get.

Used by the malformed-request tests and bench.robustness. Each method is called through
a generic channel call with identity serializers, so the bytes reach the server exactly
as written: `b"\\xff\\xff\\xff"` (no valid protobuf), and for each string field of the
request (and of its message fields, one level down) a message holding only that field
set to invalid UTF-8.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from types import ModuleType

import grpc
from google.protobuf.descriptor import Descriptor, FieldDescriptor, MethodDescriptor
from grpc_health.v1 import health_pb2
from grpc_reflection.v1alpha import reflection_pb2
from infercache.v1 import admin_pb2, cache_pb2, kv_pb2

GARBAGE = b"\xff\xff\xff"
BAD_UTF8 = b"\xff\xfe bad"
DATA_SERVICES = (cache_pb2, kv_pb2, health_pb2, reflection_pb2)
ADMIN_SERVICES = (admin_pb2, health_pb2, reflection_pb2)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _len_field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2): string, bytes or message."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _string_fields(message: Descriptor) -> Iterator[tuple[str, int]]:
    for f in message.fields:
        if f.type == FieldDescriptor.TYPE_STRING:
            yield f.name, f.number


def bad_messages(message: Descriptor) -> Iterator[tuple[str, bytes]]:
    """(label, bytes) of each malformed request of this type."""
    yield "garbage", GARBAGE
    for name, number in _string_fields(message):
        yield name, _len_field(number, BAD_UTF8)
    for f in message.fields:
        inner = f.message_type
        if f.type == FieldDescriptor.TYPE_MESSAGE and inner and not inner.GetOptions().map_entry:
            for name, number in _string_fields(inner):
                yield f"{f.name}.{name}", _len_field(f.number, _len_field(number, BAD_UTF8))


def methods(modules: tuple[ModuleType, ...]) -> Iterator[MethodDescriptor]:
    """Every method of every service the generated modules declare."""
    for module in modules:
        for service in module.DESCRIPTOR.services_by_name.values():
            yield from service.methods


def call(
    channel: grpc.Channel,
    method: MethodDescriptor,
    raw: bytes,
    metadata: list[tuple[str, str]],
) -> tuple[grpc.StatusCode, str]:
    """Send `raw` as the method's (only) request message; the status and its details."""
    path = f"/{method.containing_service.full_name}/{method.name}"
    try:
        if method.client_streaming:
            streaming = channel.stream_stream if method.server_streaming else channel.stream_unary
            result = streaming(path)(iter([raw]), timeout=10, metadata=metadata)
        else:
            unary = channel.unary_stream if method.server_streaming else channel.unary_unary
            result = unary(path)(raw, timeout=10, metadata=metadata)
        if method.server_streaming:
            for _ in result:
                pass
    except grpc.RpcError as exc:
        return exc.code(), exc.details() or ""
    return grpc.StatusCode.OK, ""


def barrage(data_port: int, admin_port: int, token: str) -> Counter[str]:
    """Send every malformed request to every method; count the answers by status name."""
    codes: Counter[str] = Counter()
    for port, modules, metadata in (
        (data_port, DATA_SERVICES, []),
        (admin_port, ADMIN_SERVICES, [("authorization", f"Bearer {token}")]),
    ):
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            for method in methods(modules):
                for _, raw in bad_messages(method.input_type):
                    codes[call(channel, method, raw, metadata)[0].name] += 1
    return codes
