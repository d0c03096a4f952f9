"""structlog set-up: JSON lines in production, a console renderer on a terminal.

Request context (the RPC, the key's digest prefix and model version) rides on
two context variables that the api layer sets per RPC (each gRPC call runs in
its own task, so they never leak between calls); a processor adds them to the
events logged while the RPC runs. Setting a context variable costs ~0.1 us,
binding structlog contextvars ~1 us per field, and most RPCs log nothing: the
fields are built only when something is logged.

A warning or error that carries an `error` field is logged once per distinct
(event, error) per interval: the first time, then at most once per interval with a
`count` of the occurrences it stands for (a Redis outage fails every call, and one
line per call drowned the log).

Callers log digests and dimensions, never prompt text; `drop_prompt_fields`
removes any field whose name says it could hold some (text, prompt, messages,
payload, ...) and any bytes value, whoever logged it.
"""

from __future__ import annotations

import logging
import sys
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, TextIO

import structlog
from structlog.typing import EventDict, Processor, WrappedLogger

from sidecar.observability.throttle import LogThrottle

if TYPE_CHECKING:
    from sidecar.keys import CacheKey

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING}
_LEVELS["error"] = logging.ERROR

REQUEST_RPC: ContextVar[str] = ContextVar("infercache_rpc", default="")
"""The RPC being served by the current task ("" outside RPCs)."""
REQUEST_KEY: ContextVar[CacheKey | None] = ContextVar("infercache_key", default=None)
"""The validated key of the current RPC (the first of a batch), once built."""

DIGEST_PREFIX_HEX = 16
# Field names that could carry prompt or answer text; matched case-insensitively.
PROMPT_FIELDS = frozenset(
    {
        "text",
        "prompt",
        "prompts",
        "messages",
        "message_text",
        "chat",
        "content",
        "input",
        "inputs",
        "payload",
        "completion",
        "answer",
        "output",
        "body",
        "request",
        "response",
        "material",
        "key_material",
        "chunks",
    }
)


def add_request_context(logger: WrappedLogger, method: str, event: EventDict) -> EventDict:
    """Add rpc, model_version and key_digest (prefix) of the RPC being served, if any."""
    rpc = REQUEST_RPC.get()
    if rpc:
        event.setdefault("rpc", rpc)
    key = REQUEST_KEY.get()
    if key is not None:
        event.setdefault("model_version", key.model_version)
        event.setdefault("key_digest", key.digest.hex()[:DIGEST_PREFIX_HEX])
    return event


def drop_prompt_fields(logger: WrappedLogger, method: str, event: EventDict) -> EventDict:
    """Remove fields that could hold prompt or answer text (by name), and bytes values."""
    for name in [
        k
        for k, v in event.items()
        if k.lower() in PROMPT_FIELDS or isinstance(v, bytes | bytearray)
    ]:
        del event[name]
    return event


class ThrottleRepeats:
    """Processor: drop repeats of a failure (same event and `error`) within the interval."""

    def __init__(self, interval_s: float) -> None:
        self._throttle = LogThrottle(interval_s)

    def __call__(self, logger: WrappedLogger, method: str, event: EventDict) -> EventDict:
        """The event (with `count` when it stands for several), or DropEvent."""
        if method not in ("warning", "error") or "error" not in event:
            return event
        count = self._throttle.hit(f"{event.get('event')}\0{event['error']}")
        if count is None:
            raise structlog.DropEvent
        if count > 1:
            event.setdefault("count", count)
        return event


def processors(
    renderer: Processor, *, json: bool = True, repeat_interval_s: float = 0.0
) -> list[Processor]:
    """The processor chain, ending in `renderer` (exposed for tests).

    `repeat_interval_s` > 0 throttles repeated failures (see the module docstring)."""
    chain: list[Processor] = [ThrottleRepeats(repeat_interval_s)] if repeat_interval_s > 0 else []
    chain += [
        structlog.contextvars.merge_contextvars,
        add_request_context,
        drop_prompt_fields,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    if json:
        # The console renderer formats exceptions itself (and warns if this ran first).
        chain.append(structlog.processors.format_exc_info)
    return [*chain, renderer]


def configure_logging(
    level: str,
    fmt: str = "auto",
    stream: TextIO | None = None,
    repeat_interval_s: float = 0.0,
) -> None:
    """Install the processors and renderer; called once by the entry point.

    fmt: "json", "console", or "auto" (console when `stream` is a terminal).
    repeat_interval_s: log a repeated failure at most once per this many seconds (0: all).
    """
    out = stream or sys.stderr
    console = fmt == "console" or (fmt == "auto" and out.isatty())
    renderer: Any = (
        structlog.dev.ConsoleRenderer(colors=out.isatty())
        if console
        else structlog.processors.JSONRenderer()
    )
    structlog.configure(
        processors=processors(renderer, json=not console, repeat_interval_s=repeat_interval_s),
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=structlog.PrintLoggerFactory(file=out),
        cache_logger_on_first_use=True,
    )
    _route_stdlib_logging(renderer, out, _LEVELS[level], json=not console)


def _route_stdlib_logging(renderer: Processor, out: TextIO, level: int, *, json: bool) -> None:
    """Libraries that log through `logging` (OpenTelemetry's exporters, grpc) get the same
    rendering and the same prompt-field filter, so stderr stays one JSON line per event."""
    pre_chain: list[Processor] = [
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.stdlib.ExtraAdder(),
        drop_prompt_fields,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    if json:
        pre_chain.append(structlog.processors.format_exc_info)
    handler = logging.StreamHandler(out)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
            foreign_pre_chain=pre_chain,
        )
    )
    root = logging.getLogger()
    root.handlers = [handler]
    # Libraries are chatty at info; their warnings and errors are what operators need.
    root.setLevel(max(level, logging.WARNING))
