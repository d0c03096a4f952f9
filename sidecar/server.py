"""Serves a built App over gRPC: listeners, health, reflection, graceful stop, signals."""

from __future__ import annotations

import asyncio
import signal
import time
from dataclasses import dataclass, field

import grpc
import structlog
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2_grpc
from infercache.v1 import admin_pb2, admin_pb2_grpc, cache_pb2, cache_pb2_grpc, kv_pb2, kv_pb2_grpc

from sidecar.api import admin_servicer as admin_api
from sidecar.api import cache_servicer as cache_api
from sidecar.api import kv_servicer as kv_api
from sidecar.api.admin_gate import AdminGate
from sidecar.api.admin_servicer import AdminServicer
from sidecar.api.auth import AdminAuth
from sidecar.api.cache_servicer import CacheServicer, server_info_pb
from sidecar.api.decode import add_decoded
from sidecar.api.key_encode import record_key_bytes
from sidecar.api.kv_servicer import KvServicer
from sidecar.api.listeners import admin_credentials, listen
from sidecar.api.observe import RpcObserver
from sidecar.api.streams import StreamSettings
from sidecar.app import MESSAGE_HEADROOM, App, build_app, identify_pod, policy_watcher
from sidecar.backends.stores import Stores
from sidecar.config import Config
from sidecar.errors import TierUnavailable
from sidecar.gateway.build import Gateway
from sidecar.identity.pod import PodIdentity
from sidecar.invalidation.freshness import Freshness
from sidecar.keys import KeyLimits
from sidecar.kv.hot_tier import KvHotTier
from sidecar.observability.metrics import RpcDurationCollector
from sidecar.observability.stats import RpcStats
from sidecar.observability.telemetry import Telemetry, TelemetrySetup, configure_telemetry
from sidecar.policy.watch import PolicyWatcher
from sidecar.results.cache import ResultCache

log = structlog.get_logger("infercache.server")

CACHE_SERVICE = cache_pb2.DESCRIPTOR.services_by_name["CacheService"].full_name
KV_SERVICE = kv_pb2.DESCRIPTOR.services_by_name["KvCacheService"].full_name
ADMIN_SERVICE = admin_pb2.DESCRIPTOR.services_by_name["AdminService"].full_name


@dataclass(slots=True)
class RunningServer:
    """Started servers, their background tasks, and the App they serve."""

    app: App
    server: grpc.aio.Server
    admin_server: grpc.aio.Server | None
    health: health.aio.HealthServicer
    tasks: list[asyncio.Task[None]]
    ports: list[int]
    admin_ports: list[int]
    telemetry: TelemetrySetup | None = None
    """Set when start_server configured telemetry itself (then stop shuts it down)."""
    health_server: grpc.aio.Server | None = None
    """The health-only listener (INFERCACHE_HEALTH_LISTEN), when configured."""
    health_ports: list[int] = field(default_factory=list)
    gateway: Gateway | None = None
    """The OpenAI-compatible HTTP gateway (INFERCACHE_GATEWAY_LISTEN), when configured."""

    @property
    def gateway_port(self) -> int | None:
        """The gateway's bound port, when it is served."""
        return self.gateway.port if self.gateway else None

    @property
    def cache(self) -> ResultCache:
        """The result cache being served."""
        return self.app.cache

    @property
    def stores(self) -> Stores:
        """The warm tier and control store."""
        return self.app.stores

    @property
    def freshness(self) -> Freshness:
        """This sidecar's view of the fleet's rules."""
        return self.app.freshness

    @property
    def policy(self) -> PolicyWatcher:
        """The cacheability policy watcher."""
        return self.app.policy

    @property
    def kv(self) -> KvHotTier | None:
        """The KV hot tier, when enabled."""
        return self.app.kv

    @property
    def rpc_stats(self) -> RpcStats:
        """Per-RPC durations by status code."""
        return self.app.rpc_stats

    @property
    def metrics_port(self) -> int | None:
        """The bound port of /metrics, when start_server serves it."""
        return self.telemetry.metrics_port if self.telemetry else None

    async def stop(self, grace_s: float) -> None:
        """NOT_SERVING, leave the fleet, drain in-flight RPCs within grace_s, close stores."""
        await self.health.enter_graceful_shutdown()
        try:
            await self.stores.control.leave(self.freshness.member_id)
        except TierUnavailable as exc:
            log.warning("leave_failed", error=str(exc))
        stops = [self.server.stop(grace_s)]
        if self.gateway is not None:
            # In-flight gateway requests finish (and store) before the stores close.
            stops.append(self.gateway.stop())
        for extra in (self.admin_server, self.health_server):
            if extra is not None:
                stops.append(extra.stop(grace_s))
        await asyncio.gather(*stops)
        # Cancel until done: a cancellation can be lost inside a Redis call (Python
        # 3.11's asyncio.wait_for, which redis-py uses, drops it when the awaited I/O
        # finishes at the same moment), and the loop would then run on forever.
        while pending := [t for t in self.tasks if not t.done()]:
            for t in pending:
                t.cancel()
            await asyncio.wait(pending, timeout=0.2)
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.app.close()
        if self.telemetry is not None:
            # Exporters flush on shutdown (blocking I/O): off the event loop.
            await asyncio.to_thread(self.telemetry.shutdown)


HEALTH_MAX_MESSAGE = 64 * 1024
ADMIN_MAX_STREAMS = 64
"""Concurrent admin calls per connection (HTTP/2 MAX_CONCURRENT_STREAMS)."""


_TOKEN_ID_BYTES = 5  # a uint32 as a varint, at most


def data_plane_max_message(config: Config) -> int:
    """The data plane's receive limit, from the limits its messages carry: a Store holds
    a key (text up to INFERCACHE_MAX_INPUT_BYTES, or up to KeyLimits.max_token_ids token
    ids) and a payload (up to INFERCACHE_MAX_PAYLOAD_BYTES), so each documented limit is
    reached, and refused naming its field, before the transport refuses the message."""
    limits = config.limits
    key_input = max(limits.max_input_bytes, KeyLimits().max_token_ids * _TOKEN_ID_BYTES)
    return key_input + limits.max_payload_bytes + MESSAGE_HEADROOM


def admin_plane_max_message(config: Config) -> int:
    """The admin plane's receive limit: a Prewarm carries its requests inline."""
    return max(MESSAGE_HEADROOM, config.prewarm.max_message_bytes)


def _grpc_server(
    max_message: int,
    interceptors: tuple[grpc.aio.ServerInterceptor, ...] = (),
    max_streams: int | None = None,
) -> grpc.aio.Server:
    options: list[tuple[str, int]] = [
        ("grpc.max_receive_message_length", max_message),
        ("grpc.max_send_message_length", max(max_message, 64 * 1024 * 1024)),
        ("grpc.so_reuseport", 0),
    ]
    if max_streams is not None:
        options.append(("grpc.max_concurrent_streams", max_streams))
    return grpc.aio.server(options=options, interceptors=interceptors)


def _add_health_and_reflection(
    server: grpc.aio.Server, health_servicer: health.aio.HealthServicer, services: list[str]
) -> None:
    add_decoded(
        health_pb2_grpc.add_HealthServicer_to_server, health_servicer, server, observed=False
    )
    names = (*services, health.SERVICE_NAME, reflection.SERVICE_NAME)
    add_decoded(
        reflection_pb2_grpc.add_ServerReflectionServicer_to_server,
        reflection.aio.ReflectionServicer(names),
        server,
        observed=False,
    )


async def start_server(
    config: Config,
    pod: PodIdentity | None = None,
    telemetry: Telemetry | None = None,
    policy: PolicyWatcher | None = None,
) -> RunningServer:
    """Build and start the data plane (and the admin plane, if configured).

    Without `telemetry`, providers and exporters are configured here from the config
    (OTEL_* variables, /metrics on INFERCACHE_METRICS_LISTEN) and shut down by stop();
    with it (tests), the caller's providers are used and the caller owns them.
    `policy`: an already loaded watcher; without one the configured file is loaded
    here first (PolicyError when invalid, before anything is started).
    """
    started = time.monotonic()
    if policy is None:
        policy = policy_watcher(config)
        await policy.load_initial()
    pod = pod or PodIdentity()
    setup: TelemetrySetup | None = None
    if telemetry is None:
        setup = configure_telemetry(
            config.otel_env,
            metrics_listen=config.telemetry.metrics_listen,
            tenants_in_clear=config.telemetry.tenants_in_clear,
        )
        telemetry = setup.telemetry
    try:
        app = await build_app(config, pod, telemetry, policy, started=started)
        return await serve_app(app, setup)
    except BaseException:
        if setup is not None:
            setup.shutdown()
        raise


async def serve_app(app: App, setup: TelemetrySetup | None = None) -> RunningServer:
    """Put a built App behind its gRPC listeners and start its background loops."""
    config, telemetry, cache = app.config, app.telemetry, app.cache
    if setup is not None and setup.registry is not None:
        setup.registry.register(RpcDurationCollector(app.rpc_stats))

    server = _grpc_server(data_plane_max_message(config))
    servicer = CacheServicer(
        cache,
        max_batch=config.limits.max_batch,
        keys=app.keys,
        observer=RpcObserver(cache_api.SERVICE, telemetry, app.rpc_stats),
        streams=StreamSettings.from_config(config),
        recorder=app.recorder,
    )
    add_decoded(cache_pb2_grpc.add_CacheServiceServicer_to_server, servicer, server)
    data_services = [CACHE_SERVICE]
    if app.kv is not None:
        kv_observer = RpcObserver(kv_api.SERVICE, telemetry, app.rpc_stats)
        add_decoded(
            kv_pb2_grpc.add_KvCacheServiceServicer_to_server,
            KvServicer(app.kv, kv_observer),
            server,
        )
        data_services.append(KV_SERVICE)
    # The asyncio servicer: Watch calls are coroutines, not threads that a few open
    # Watches exhaust (every Check then timed out and SIGTERM no longer stopped).
    health_servicer = health.aio.HealthServicer()
    _add_health_and_reflection(server, health_servicer, data_services)
    ports = listen(server, config.server.listen, "INFERCACHE_LISTEN")

    # Built (its keys file read, its port bound) before any listener starts: a refusal
    # then leaves nothing running. record_key_bytes: the gateway attaches each stored
    # answer's upstream body for prewarm.
    gateway = Gateway(app, record_key_bytes) if config.gateway.listen else None
    admin_server: grpc.aio.Server | None = None
    admin_ports: list[int] = []
    if config.admin.listen:
        auth = AdminAuth(config.admin.tokens)
        if not auth.enabled:
            log.warning("admin_without_tokens", detail="every admin call will be UNAUTHENTICATED")
        # Prewarm carries a file's requests inline: the one large admin message, so
        # the token is checked before any message is read (AdminGate).
        gate = AdminGate(auth, ADMIN_SERVICE, app.rpc_stats)
        admin_server = _grpc_server(admin_plane_max_message(config), (gate,), ADMIN_MAX_STREAMS)
        admin_servicer = AdminServicer(
            app.invalidator,
            auth,
            cache.stats,
            app.prewarmer,
            tiers=app.usage.current,
            observer=RpcObserver(admin_api.SERVICE, telemetry, app.rpc_stats),
            started=app.started,
            server_info=lambda: server_info_pb(app.identity.pod, app.stores.warm.name),
        )
        add_decoded(admin_pb2_grpc.add_AdminServiceServicer_to_server, admin_servicer, admin_server)
        _add_health_and_reflection(admin_server, health_servicer, [ADMIN_SERVICE])
        tls = admin_credentials(config.admin)
        admin_ports = listen(admin_server, config.admin.listen, "INFERCACHE_ADMIN_LISTEN", tls)
        await admin_server.start()
    health_server: grpc.aio.Server | None = None
    health_ports: list[int] = []
    if config.server.health_listen:
        # Health only, for probes that must reach the pod IP (kubelet's gRPC probes are
        # plaintext): the data plane can then stay on loopback. Same servicer, same status.
        health_server = _grpc_server(HEALTH_MAX_MESSAGE)
        add_decoded(
            health_pb2_grpc.add_HealthServicer_to_server,
            health_servicer,
            health_server,
            observed=False,
        )
        health_ports = listen(
            health_server, config.server.health_listen, "INFERCACHE_HEALTH_LISTEN"
        )
        await health_server.start()
    await server.start()
    if gateway is not None:
        await gateway.start()

    tasks = [asyncio.create_task(loop()) for loop in app.background()]
    for name in ("", *data_services):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    log.info(
        "serving",
        listen=list(config.server.listen),
        ports=ports,
        admin_ports=admin_ports,
        health_ports=health_ports,
        gateway_port=gateway.port if gateway else None,
        metrics_port=setup.metrics_port if setup else None,
        tracing=telemetry.tracing,
        warm_tier=app.stores.warm.name,
        member_id=app.freshness.member_id,
        model_version=app.identity.pod.model_version or None,
    )
    return RunningServer(
        app,
        server,
        admin_server,
        health_servicer,
        tasks,
        ports,
        admin_ports,
        setup,
        health_server,
        health_ports,
        gateway,
    )


async def serve(config: Config, pod: PodIdentity | None = None) -> int:
    """Run until SIGTERM or SIGINT, then drain for the grace period and return 0.

    SIGHUP reloads the policy file. The policy is loaded before the model is
    fingerprinted, so an invalid file stops the start at once (PolicyError).
    """
    policy = policy_watcher(config)
    await policy.load_initial()
    running = await start_server(config, pod or await identify_pod(config), policy=policy)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGHUP, policy.request_reload)
    await stop.wait()
    log.info("draining", grace_period_s=config.server.grace_period_s)
    await running.stop(config.server.grace_period_s)
    log.info("stopped")
    return 0
