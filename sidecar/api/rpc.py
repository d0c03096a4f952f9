"""The public methods of a servicer, each built once from its handler.

    class KvServicer(kv_pb2_grpc.KvCacheServiceServicer):
        @rpc()
        async def Release(self, request, context): ...   # only raises on errors

`@rpc(describe=...)` turns a handler into the RPC of the same name: every call
runs through the servicer's `observer` (`RpcObserver.run`: duration, span, log
context, and the one mapping from domain errors to statuses). `describe` is a
method of the servicer, `(self, request, response | None) -> Attributes`, for the
span's attributes. The method is bound once per servicer instance, at first
access (grpc reads it once when the servicer is added to a server), so a call
costs what a hand-written delegating method did: one `observer.run`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from types import MethodType
from typing import Any, Generic, Protocol, TypeVar, overload

import grpc

from sidecar.api.observe import Attributes, RpcObserver

Req = TypeVar("Req")
Resp = TypeVar("Resp")
S = TypeVar("S", bound="Observed")

Handler = Callable[[S, Req, grpc.aio.ServicerContext], Awaitable[Resp]]
Method = Callable[[Req, grpc.aio.ServicerContext], Awaitable[Resp]]
DescribeMethod = Callable[[S, Any, Any], Attributes]


class Observed(Protocol):
    """A servicer whose RPCs all run through one observer."""

    @property
    def observer(self) -> RpcObserver:
        """The observer of the servicer's service."""
        ...


class Rpc(Generic[S, Req, Resp]):
    """A descriptor: the public RPC method built from `handler` (see the module doc)."""

    def __init__(self, handler: Handler[S, Req, Resp], describe: DescribeMethod[S] | None) -> None:
        self._handler = handler
        self._describe = describe
        self.name = handler.__name__
        self.__doc__ = handler.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> Rpc[S, Req, Resp]: ...
    @overload
    def __get__(self, obj: S, owner: type | None = None) -> Method[Req, Resp]: ...
    def __get__(self, obj: S | None, owner: type | None = None) -> Any:
        if obj is None:
            return self
        method = self.bind(obj)
        # A non-data descriptor: the instance's own attribute wins from now on.
        obj.__dict__[self.name] = method
        return method

    def bind(self, servicer: S) -> Method[Req, Resp]:
        """The RPC method of one servicer instance."""
        run = servicer.observer.run
        name = self.name
        handler = MethodType(self._handler, servicer)
        describe = None if self._describe is None else MethodType(self._describe, servicer)

        async def method(request: Req, context: grpc.aio.ServicerContext) -> Resp:
            return await run(name, request, context, handler, describe)

        method.__name__ = method.__qualname__ = name
        method.__doc__ = self.__doc__
        return method


@overload
def rpc() -> Callable[[Handler[S, Req, Resp]], Rpc[S, Req, Resp]]: ...
@overload
def rpc(describe: DescribeMethod[S]) -> Callable[[Handler[S, Req, Resp]], Rpc[S, Req, Resp]]: ...
def rpc(
    describe: DescribeMethod[S] | None = None,
) -> Callable[[Handler[S, Req, Resp]], Rpc[S, Req, Resp]]:
    """Decorate a handler as the public RPC method of its name (see the module doc)."""

    def wrap(handler: Handler[S, Req, Resp]) -> Rpc[S, Req, Resp]:
        return Rpc(handler, describe)

    return wrap
