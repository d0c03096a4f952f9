"""The admin plane's token check before any request message is read.

An admin message can be large (a Prewarm carries its requests inline, up to
INFERCACHE_PREWARM_MAX_MESSAGE_BYTES), and grpc reads and decodes a unary request
before the handler runs. This interceptor sees the call's metadata first: an
unauthenticated call gets a handler that takes its requests as a stream it never
reads, so it ends UNAUTHENTICATED having received at most the transport's flow-control
window, whatever the message's size. The handlers still check the token (they need
the caller's name).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from sidecar.api.auth import AdminAuth
from sidecar.errors import Unauthenticated
from sidecar.observability.stats import RpcStats


class AdminGate(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Refuses calls to `service` without a valid token before their message is read."""

    def __init__(self, auth: AdminAuth, service: str, rpc_stats: RpcStats) -> None:
        self._auth = auth
        self._prefix = f"/{service}/"
        self._stats = rpc_stats

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        """The service's handler when the token is valid (or the call is not to the
        service: health, reflection), a refusing handler otherwise."""
        method: str = details.method
        if not method.startswith(self._prefix):
            return await continuation(details)
        try:
            self._auth.caller(details.invocation_metadata or ())
        except Unauthenticated as exc:
            return self._refusal(method.removeprefix(self._prefix), str(exc))
        return await continuation(details)

    def _refusal(self, rpc: str, message: str) -> grpc.RpcMethodHandler:
        stats = self._stats

        async def refuse(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> None:
            # Taken as stream-to-stream whatever the method's shape: a streamed request
            # is only read on demand, and this never asks for it.
            stats.observe(rpc, "UNAUTHENTICATED", 0.0)
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

        return grpc.stream_stream_rpc_method_handler(refuse)
