"""The verification state and the shadow runner of one sidecar, from its Config."""

from __future__ import annotations

from collections.abc import Callable

# httpx's transport (httpcore over anyio) imports anyio's asyncio backend at its first
# request. Loaded here, at start-up: on a data plane with no other upstream traffic the
# first shadow call would otherwise block the event loop for the import (~25 ms
# measured) while callers' Lookups wait.
import anyio._backends._asyncio  # noqa: F401

from sidecar.config import Config
from sidecar.prewarm.upstream import HttpModelServer
from sidecar.shadow.runner import ShadowRunner, log_event
from sidecar.verification.audit import EventWriter
from sidecar.verification.ledger import Event, Ledger
from sidecar.verification.settings import VerifySettings

HEADROOM = 1024 * 1024
"""A fresh answer may be this much larger than the largest storable payload (framing)."""


def build_shadow(
    config: Config,
    epoch: Callable[[], int],
    clock_ms: Callable[[], int],
    audit: EventWriter | None = None,
) -> ShadowRunner:
    """The ledger (`epoch`: the rule set's, stamped on quarantines; its events logged and
    written to `audit`) and the runner that sends shadow calls to the configured model
    server on connections of its own."""
    settings = VerifySettings.from_config(config.verify)

    def on_event(event: Event) -> None:
        log_event(event)
        if audit is not None:
            audit.add(event)

    ledger = Ledger(settings, clock_ms, epoch, on_event=on_event)
    server = HttpModelServer(
        config.prewarm.model_server_url,
        timeout_s=config.gateway.upstream_timeout_s,
        max_connections=settings.max_concurrency,
        max_response_bytes=2 * config.limits.max_payload_bytes + HEADROOM,
        api_key=config.gateway.upstream_api_key,
    )
    return ShadowRunner(ledger, server)
