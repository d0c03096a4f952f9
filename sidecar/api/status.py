"""The one table from domain errors to gRPC status codes."""

from __future__ import annotations

from typing import NoReturn

import grpc
import structlog

from sidecar.errors import (
    DeadlineExceeded,
    FailedPrecondition,
    InfercacheError,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    TierUnavailable,
    Unauthenticated,
    Unavailable,
)

log = structlog.get_logger("infercache.api")

STATUS_OF: tuple[tuple[type[InfercacheError], grpc.StatusCode], ...] = (
    (InvalidArgument, grpc.StatusCode.INVALID_ARGUMENT),
    (FailedPrecondition, grpc.StatusCode.FAILED_PRECONDITION),
    (ResourceExhausted, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (Unauthenticated, grpc.StatusCode.UNAUTHENTICATED),
    (PermissionDenied, grpc.StatusCode.PERMISSION_DENIED),
    (NotFound, grpc.StatusCode.NOT_FOUND),
    (DeadlineExceeded, grpc.StatusCode.DEADLINE_EXCEEDED),
    (Unavailable, grpc.StatusCode.UNAVAILABLE),
    (TierUnavailable, grpc.StatusCode.UNAVAILABLE),
)


def status_for(exc: InfercacheError) -> grpc.StatusCode:
    """The status code a domain error maps to (INTERNAL for anything unlisted)."""
    for kind, code in STATUS_OF:
        if isinstance(exc, kind):
            return code
    return grpc.StatusCode.INTERNAL


async def abort_for(context: grpc.aio.ServicerContext, rpc: str, exc: InfercacheError) -> NoReturn:
    """End the RPC with the status mapped from a domain error."""
    code = status_for(exc)
    if code is grpc.StatusCode.INTERNAL:
        log.error("rpc_failed", rpc=rpc, error=str(exc))
    await context.abort(code, str(exc))
    raise AssertionError("context.abort returned")  # pragma: no cover
