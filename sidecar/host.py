"""The sidecar's process host: builds the App and starts its listeners as peers (the
gRPC planes of server.py and the HTTP gateway), runs its background loops, and stops
them all in order (listeners drain, then the stores close)."""

from __future__ import annotations

import asyncio
import gc
import signal
import time
from dataclasses import dataclass

import structlog

from sidecar.api.key_encode import record_key_bytes
from sidecar.app import App, build_app, identify_pod, policy_watcher
from sidecar.backends.stores import Stores
from sidecar.config import Config
from sidecar.errors import TierUnavailable
from sidecar.gateway.build import Gateway
from sidecar.identity.pod import PodIdentity
from sidecar.invalidation.freshness import Freshness
from sidecar.kv.domains import KvDomains
from sidecar.observability.metrics import RpcDurationCollector
from sidecar.observability.stats import RpcStats
from sidecar.observability.telemetry import Telemetry, TelemetrySetup, configure_telemetry
from sidecar.policy.watch import PolicyWatcher
from sidecar.results.cache import ResultCache
from sidecar.server import GrpcPlanes, start_grpc

log = structlog.get_logger("infercache.server")


@dataclass(slots=True)
class RunningServer:
    """A started sidecar: the App, its gRPC planes, its gateway and background tasks."""

    app: App
    grpc: GrpcPlanes
    gateway: Gateway | None
    """The OpenAI-compatible HTTP gateway (INFERCACHE_GATEWAY_LISTEN), when configured."""
    tasks: list[asyncio.Task[None]]
    telemetry: TelemetrySetup | None = None
    """Set when start_server configured telemetry itself (then stop shuts it down)."""

    @property
    def ports(self) -> list[int]:
        """The data plane's bound ports."""
        return self.grpc.ports

    @property
    def admin_ports(self) -> list[int]:
        """The admin plane's bound ports (none when it is not served)."""
        return self.grpc.admin_ports

    @property
    def health_ports(self) -> list[int]:
        """The health-only listener's bound ports."""
        return self.grpc.health_ports

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
    def kv(self) -> KvDomains | None:
        """The KV hot tier (its trust domains), when enabled."""
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
        """NOT_SERVING, leave the fleet, drain in-flight RPCs and gateway requests within
        grace_s, stop the background loops, close the stores."""
        await self.grpc.health.enter_graceful_shutdown()
        try:
            await self.stores.control.leave(self.freshness.member_id)
        except TierUnavailable as exc:
            log.warning("leave_failed", error=str(exc))
        stops = [self.grpc.stop(grace_s)]
        if self.gateway is not None:
            # In-flight gateway requests finish (and store) before the stores close.
            stops.append(self.gateway.stop())
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


async def start_server(
    config: Config,
    pod: PodIdentity | None = None,
    telemetry: Telemetry | None = None,
    policy: PolicyWatcher | None = None,
) -> RunningServer:
    """Build the App and start its listeners (data plane, admin plane, gateway).

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
    """Start a built App's listeners as peers and its background loops."""
    config = app.config
    if setup is not None and setup.registry is not None:
        setup.registry.register(RpcDurationCollector(app.rpc_stats))
    # Built (its keys file read, its port bound) before any listener starts: a refusal
    # then leaves nothing running. record_key_bytes: the gateway attaches each stored
    # answer's upstream body for prewarm.
    gateway = Gateway(app, record_key_bytes) if config.gateway.listen else None
    planes = await start_grpc(app)
    if gateway is not None:
        await gateway.start()
    tasks = [asyncio.create_task(loop()) for loop in app.background()]
    await planes.serving()
    log.info(
        "serving",
        listen=list(config.server.listen),
        ports=planes.ports,
        admin_ports=planes.admin_ports,
        health_ports=planes.health_ports,
        gateway_port=gateway.port if gateway else None,
        metrics_port=setup.metrics_port if setup else None,
        tracing=app.telemetry.tracing,
        warm_tier=app.stores.warm.name,
        member_id=app.freshness.member_id,
        model_version=app.identity.pod.model_version or None,
    )
    return RunningServer(app, planes, gateway, tasks, setup)


async def serve(config: Config, pod: PodIdentity | None = None) -> int:
    """Run until SIGTERM or SIGINT, then drain for the grace period and return 0.

    SIGHUP reloads the policy file. The policy is loaded before the model is
    fingerprinted, so an invalid file stops the start at once (PolicyError).
    """
    policy = policy_watcher(config)
    await policy.load_initial()
    running = await start_server(config, pod or await identify_pod(config), policy=policy)
    # What the start built (modules, the app, its tables) lives until exit: out of the
    # collector's sight, a full collection no longer walks it (with it in sight, full
    # collections paused a busy sidecar's event loop for 0.1-0.15 s). No collection
    # first: the listeners are open, and a full pass here would pause the first calls;
    # the little cyclic garbage of the start stays, once.
    gc.freeze()
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
