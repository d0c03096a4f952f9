"""Requests decoded at the edge: bytes that are no valid message become INVALID_ARGUMENT.

grpcio answers UNKNOWN (and logs a traceback) when a request deserializer raises. Every
service is therefore registered through `add_decoded`: the generated `add_*_to_server`
is handed a stand-in server that wraps each request deserializer so a failure returns
an `Undecodable` value instead of raising. The observed servicers (api/rpc.py) meet it
in `RpcObserver.run` and in the StoreStream message loop, one class check per request;
grpc's own servicers (health, reflection) get their handlers wrapped here.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import grpc

from sidecar.errors import InvalidArgument


@dataclass(frozen=True, slots=True)
class Undecodable:
    """A request whose bytes did not decode as its message type."""

    type_name: str
    reason: str

    def error(self) -> InvalidArgument:
        """The domain error the RPC ends with."""
        return InvalidArgument("request", f"is not a valid {self.type_name} ({self.reason})")


def decoding(deserializer: Callable[[bytes], Any], type_name: str) -> Callable[[bytes], Any]:
    """`deserializer`, returning Undecodable instead of raising (DecodeError, invalid UTF-8)."""

    def decode(raw: bytes) -> Any:
        try:
            return deserializer(raw)
        except Exception as exc:  # any failure to decode is the caller's bytes' fault
            return Undecodable(type_name, str(exc) or type(exc).__name__)

    return decode


async def _refuse(context: grpc.aio.ServicerContext, request: Undecodable) -> None:
    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(request.error()))


def _checked(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> Any:
    async def checked() -> AsyncIterator[Any]:
        async for request in requests:
            if request.__class__ is Undecodable:
                await _refuse(context, request)
            yield request

    return checked()


def _guard(behaviour: Callable[..., Any], streaming_request: bool) -> Callable[..., Any]:
    """A handler of grpc's own servicers that answers INVALID_ARGUMENT to Undecodable
    (of the same kind as `behaviour`: grpc picks how to run it by that)."""

    async def checked(request: Any, context: Any) -> Any:
        if streaming_request:
            return _checked(request, context)
        if request.__class__ is Undecodable:
            await _refuse(context, request)
        return request

    if inspect.isasyncgenfunction(behaviour):

        async def guarded_stream(request: Any, context: Any) -> AsyncIterator[Any]:
            async for response in behaviour(await checked(request, context), context):
                yield response

        return guarded_stream

    async def guarded(request: Any, context: Any) -> Any:
        return await behaviour(await checked(request, context), context)

    return guarded


def _wrap(handler: grpc.RpcMethodHandler, method: str, guard: bool) -> grpc.RpcMethodHandler:
    deserializer = handler.request_deserializer
    if deserializer is None:
        return handler
    # The generated code passes the message class's FromString: name the type.
    message = getattr(getattr(deserializer, "__self__", None), "__name__", f"{method} request")
    changes: dict[str, Any] = {"request_deserializer": decoding(deserializer, message)}
    if guard:
        kind = (
            ("stream" if handler.request_streaming else "unary")
            + "_"
            + ("stream" if handler.response_streaming else "unary")
        )
        changes[kind] = _guard(getattr(handler, kind), handler.request_streaming)
    return handler._replace(**changes)


class _Registrar:
    """What a generated add_*_to_server calls, registering wrapped handlers on `server`."""

    def __init__(self, server: grpc.aio.Server, guard: bool) -> None:
        self._server = server
        self._guard = guard
        self.registered = False

    def add_generic_rpc_handlers(self, handlers: object) -> None:
        """Ignored: the same handlers come to add_registered_method_handlers."""

    def add_registered_method_handlers(
        self, service: str, handlers: dict[str, grpc.RpcMethodHandler]
    ) -> None:
        """Register each handler with its request deserializer wrapped (see the module doc)."""
        wrapped = {m: _wrap(h, f"{service}/{m}", self._guard) for m, h in handlers.items()}
        self._server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(service, wrapped),)
        )
        self._server.add_registered_method_handlers(service, wrapped)
        self.registered = True


def add_decoded(
    add: Callable[[Any, Any], None],
    servicer: object,
    server: grpc.aio.Server,
    *,
    observed: bool = True,
) -> None:
    """Register `servicer` as the generated `add` would, decoding its requests here.

    `observed`: the servicer's RPCs run through RpcObserver.run (api/rpc.py), which
    answers Undecodable; otherwise (grpc's health and reflection servicers) each
    handler is wrapped to answer it.
    """
    registrar = _Registrar(server, guard=not observed)
    add(servicer, registrar)
    if not registrar.registered:
        raise RuntimeError(f"{add.__qualname__} did not call add_registered_method_handlers")
