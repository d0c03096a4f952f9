"""Unexpected exceptions in a handler: an INTERNAL status with a short error id, and one
log line per distinct error per interval (with its traceback and a count), never one
traceback per request."""

from __future__ import annotations

import hashlib
import traceback

import structlog

from sidecar.observability.throttle import LogThrottle

log = structlog.get_logger("infercache.api")

LOG_INTERVAL_S = 60.0


def error_id(exc: BaseException) -> str:
    """8 hex digits naming the error: its type and the line it was raised at (so the same
    bug gets the same id in every answer and in the log)."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else ""
    return hashlib.sha256(f"{type(exc).__qualname__}@{where}".encode()).hexdigest()[:8]


class InternalErrors:
    """Turns an unexpected exception into the INTERNAL status's message, logging it (throttled)."""

    def __init__(self, interval_s: float = LOG_INTERVAL_S) -> None:
        self._throttle = LogThrottle(interval_s)

    def report(self, rpc: str, exc: Exception) -> str:
        """Log `exc` unless its id was logged within the interval; the status message."""
        eid = error_id(exc)
        count = self._throttle.hit(eid)
        if count is not None:
            log.error(
                "rpc_internal_error",
                rpc=rpc,
                error_id=eid,
                error=f"{type(exc).__name__}: {exc}",
                count=count,
                interval_s=LOG_INTERVAL_S,
                exc_info=exc,
            )
        return f"internal error (id {eid})"
