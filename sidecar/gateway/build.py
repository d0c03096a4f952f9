"""The gateway built from a built App: its parts, its listener and its lifetime.

The composition root (sidecar/app.py) sits below the HTTP layer, so the gateway is
assembled here from the App's parts (the same ResultCache, KeyResolver and hit
recorder the gRPC data plane uses) and started and stopped by sidecar/server.py.
"""

from __future__ import annotations

import asyncio
import contextlib

from sidecar.app import App
from sidecar.config.load import ConfigError
from sidecar.gateway.asgi import BodyLimits, GatewayApp
from sidecar.gateway.auth import ApiKeys
from sidecar.gateway.flow import Flow, FlowSettings
from sidecar.gateway.records import KeyEncoder, Recording
from sidecar.gateway.service import GatewayServer
from sidecar.gateway.stats import GatewayStats
from sidecar.gateway.upstream import Upstream
from sidecar.gateway.verify import GatewayVerifier
from sidecar.observability.metrics import register_gateway_metrics


class Gateway:
    """The running gateway: listener, upstream pool and the keys file's reload loop."""

    def __init__(self, app: App, encode_key: KeyEncoder | None = None) -> None:
        config = app.config
        gw = config.gateway
        try:
            self.api_keys = ApiKeys.load(gw.keys_file, gw.tenant_header)
        except (OSError, ValueError) as exc:
            # Exit 2 naming the setting, as for any other bad configuration.
            raise ConfigError(f"INFERCACHE_GATEWAY_KEYS_FILE: {exc}") from exc
        self.upstream = Upstream(
            config.prewarm.model_server_url,
            timeout_s=gw.upstream_timeout_s,
            max_connections=gw.upstream_max_connections,
            api_key=gw.upstream_api_key,
        )
        self.stats = GatewayStats()
        register_gateway_metrics(
            app.telemetry.meter,
            lambda: dict(self.stats.outcomes),
            lambda: self.stats.unknown_fields,
        )
        recording = None
        if app.recorder is not None and encode_key is not None:
            recording = Recording(app.recorder, encode_key)
        settings = FlowSettings(
            default_prompt_version=gw.default_prompt_version,
            wait_ms=gw.wait_ms,
            replay_pace=gw.replay_pace,
            replay_max_gap_ms=config.stream.replay_max_gap_ms,
            replay_max_duration_ms=config.stream.replay_max_duration_ms,
            max_payload_bytes=config.limits.max_payload_bytes,
        )
        self.flow = Flow(
            app.cache,
            app.keys,
            self.api_keys,
            self.upstream,
            settings,
            self.stats,
            recording,
            app.salts,
        )
        # Shadow calls yield to the requests of clients (docs/verification.md).
        busy = config.verify.busy_calls
        app.shadow.busy = lambda: self.upstream.in_flight >= busy
        self.flow.verifier = GatewayVerifier(app.shadow, app.cache.tenant_policy)
        self.server = GatewayServer(
            GatewayApp(
                self.flow,
                BodyLimits(gw.max_body_bytes, gw.body_timeout_s, gw.max_header_bytes),
            ),
            gw.listen,
            config.server.grace_period_s,
        )
        self._poll_s = gw.keys_poll_ms / 1000
        self._reload: asyncio.Task[None] | None = None

    @property
    def port(self) -> int:
        """The bound port."""
        return self.server.port

    async def start(self) -> None:
        """Accept requests; watch the keys file."""
        await self.server.start()
        self._reload = asyncio.create_task(self.api_keys.run_reload(self._poll_s))

    async def stop(self) -> None:
        """Drain in-flight requests (their stores included), then close the pool."""
        if self._reload is not None:
            self._reload.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reload
        await self.server.stop()
        await self.upstream.close()
