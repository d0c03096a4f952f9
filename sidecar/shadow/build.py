"""The verification state and the shadow runner of one sidecar, from its Config."""

from __future__ import annotations

from collections.abc import Callable

from sidecar.config import Config
from sidecar.prewarm.upstream import HttpModelServer
from sidecar.shadow.runner import ShadowRunner, log_event
from sidecar.verification.ledger import Ledger
from sidecar.verification.settings import VerifySettings

HEADROOM = 1024 * 1024
"""A fresh answer may be this much larger than the largest storable payload (framing)."""


def build_shadow(
    config: Config, epoch: Callable[[], int], clock_ms: Callable[[], int]
) -> ShadowRunner:
    """The ledger (`epoch`: the rule set's, stamped on quarantines) and the runner that
    sends shadow calls to the configured model server on connections of its own."""
    settings = VerifySettings.from_config(config.verify)
    ledger = Ledger(settings, clock_ms, epoch, on_event=log_event)
    server = HttpModelServer(
        config.prewarm.model_server_url,
        timeout_s=config.gateway.upstream_timeout_s,
        max_connections=settings.max_concurrency,
        max_response_bytes=2 * config.limits.max_payload_bytes + HEADROOM,
        api_key=config.gateway.upstream_api_key,
    )
    return ShadowRunner(ledger, server)
