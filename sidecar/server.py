"""Assembles tiers, cache and gRPC services, and runs them until SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from dataclasses import dataclass, field

import grpc
import structlog
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from infercache.v1 import admin_pb2, admin_pb2_grpc, cache_pb2, cache_pb2_grpc, kv_pb2, kv_pb2_grpc

from sidecar.api import admin as admin_api
from sidecar.api import kv_servicer as kv_api
from sidecar.api import servicer as cache_api
from sidecar.api.admin import AdminServicer
from sidecar.api.kv_servicer import KvServicer
from sidecar.api.observe import RpcObserver
from sidecar.api.servicer import CacheServicer
from sidecar.api.streams import StreamSettings
from sidecar.auth import AdminAuth
from sidecar.cache import LeasePolicy, ResultCache, TtlPolicy
from sidecar.config import Config
from sidecar.control.base import ControlStore
from sidecar.control.embedded import EmbeddedControlStore
from sidecar.control.redis import RedisControlStore
from sidecar.errors import TierUnavailable
from sidecar.fingerprint import fingerprint_async
from sidecar.invalidation.freshness import Freshness
from sidecar.invalidation.invalidator import Invalidator
from sidecar.invalidation.leases import LeaseSigner
from sidecar.invalidation.reclaim import Reclaimer
from sidecar.invalidation.rules import RuleSet
from sidecar.keys import KeyLimits
from sidecar.kv.hot_tier import KvHotTier
from sidecar.kv.pool import SlotPool
from sidecar.kv.values import KvSettings
from sidecar.kv.warm import RedisKvWarmStore
from sidecar.metrics import RpcDurationCollector, register_kv_metrics, register_metrics
from sidecar.pod import PodIdentity
from sidecar.policy import PolicyHolder
from sidecar.policy_file import PolicyBounds
from sidecar.policy_watch import PolicyWatcher
from sidecar.prewarm.hits import EmbeddedHitStore, HitRecorder, HitStore
from sidecar.prewarm.hits_redis import RedisHitStore
from sidecar.prewarm.openai import PayloadFormat
from sidecar.prewarm.runner import Prewarmer, PrewarmSettings
from sidecar.prewarm.upstream import HttpModelServer, ModelServer
from sidecar.stats import CacheStats, RpcStats
from sidecar.stream_store import StreamLimits
from sidecar.telemetry import Telemetry, TelemetrySetup, configure_telemetry
from sidecar.tiers.base import WarmTier
from sidecar.tiers.embedded import EmbeddedWarmTier
from sidecar.tiers.hot import HotTier
from sidecar.tiers.redis import RedisWarmTier
from sidecar.usage import TierUsageMonitor

log = structlog.get_logger("infercache.server")

CACHE_SERVICE = cache_pb2.DESCRIPTOR.services_by_name["CacheService"].full_name
KV_SERVICE = kv_pb2.DESCRIPTOR.services_by_name["KvCacheService"].full_name
ADMIN_SERVICE = admin_pb2.DESCRIPTOR.services_by_name["AdminService"].full_name
# gRPC framing and the other fields of a Store need room beyond the payload itself.
_MESSAGE_HEADROOM = 1024 * 1024


@dataclass(slots=True)
class Stores:
    """The warm tier and the control store, sharing one Redis client when Redis is used."""

    warm: WarmTier
    control: ControlStore


def build_stores(config: Config) -> Stores:
    """Redis when a URL is configured, otherwise the embedded in-process stores."""
    if config.redis_url:
        warm = RedisWarmTier(
            config.redis_url,
            key_prefix=config.redis_key_prefix,
            read_timeout_s=config.lookup_timeout_ms / 1000,
            write_timeout_s=config.write_timeout_ms / 1000,
        )
        control = RedisControlStore(
            config.redis_url,
            key_prefix=config.redis_key_prefix,
            timeout_s=config.write_timeout_ms / 1000,
            lookup_timeout_s=config.lookup_timeout_ms / 1000,
            client=warm.client,
        )
        return Stores(warm, control)
    embedded_control = EmbeddedControlStore()
    embedded_warm = EmbeddedWarmTier(
        config.embedded_max_bytes,
        config.embedded_max_entries,
        epoch_source=embedded_control.epoch_now,
    )
    return Stores(embedded_warm, embedded_control)


async def lease_signer(config: Config, control: ControlStore) -> LeaseSigner:
    """The configured secret, else the deployment's shared one, else (store down) a local one."""
    if config.lease_secret:
        return LeaseSigner(config.lease_secret.encode())
    for attempt in range(5):
        try:
            return LeaseSigner(await control.shared_secret(os.urandom(32)))
        except TierUnavailable as exc:
            log.warning("lease_secret_unavailable", attempt=attempt, error=str(exc))
            await asyncio.sleep(0.3)
    log.warning(
        "lease_secret_local",
        detail="store unreachable at start: leases verify only on this sidecar until restart; "
        "set INFERCACHE_LEASE_SECRET to avoid this",
    )
    return LeaseSigner(os.urandom(32))


def policy_watcher(config: Config) -> PolicyWatcher:
    """The watcher of the configured policy file (built-in policy when there is none)."""
    bounds = PolicyBounds(max_ttl_s=config.max_ttl_s, max_entry_bytes=config.max_payload_bytes)
    return PolicyWatcher(PolicyHolder(), config.policy_file, bounds, config.policy_poll_ms)


def build_cache(
    config: Config,
    stores: Stores,
    freshness: Freshness,
    signer: LeaseSigner,
    policy: PolicyHolder | None = None,
) -> ResultCache:
    """The result cache with the configured budgets, TTL, lease and cacheability policies."""
    return ResultCache(
        HotTier(config.hot_max_bytes, config.hot_max_entries),
        stores.warm,
        ttl=TtlPolicy(config.default_ttl_s, config.max_ttl_s, dict(config.tenant_max_ttl_s)),
        max_payload_bytes=config.max_payload_bytes,
        max_chunks=config.max_chunks,
        freshness=freshness,
        signer=signer,
        leases=LeasePolicy(
            ttl_s=config.lease_ttl_s,
            allow_unleased_store=config.allow_unleased_store,
            unleased_window_s=config.unleased_window_s,
            max_wait_ms=config.max_wait_ms,
        ),
        stats=CacheStats(config.metrics_max_model_versions),
        policy=policy,
    )


def build_hit_store(config: Config, stores: Stores) -> HitStore:
    """Hit rankings next to the entries: in the fleet's Redis, or in process memory."""
    if isinstance(stores.warm, RedisWarmTier):
        return RedisHitStore(
            stores.warm.client,
            key_prefix=config.redis_key_prefix,
            max_per_version=config.hit_record_max_per_version,
            ttl_ms=config.hit_record_ttl_s * 1000,
            timeout_s=config.write_timeout_ms / 1000,
        )
    return EmbeddedHitStore(
        max_per_version=config.hit_record_max_per_version, ttl_ms=config.hit_record_ttl_s * 1000
    )


def build_prewarmer(
    config: Config, cache: ResultCache, pod: PodIdentity, limits: KeyLimits, hits: HitStore
) -> Prewarmer:
    """The prewarm runner for this pod, talking to the configured model server."""

    def model_server(concurrency: int) -> ModelServer:
        return HttpModelServer(
            config.model_server_url,
            timeout_s=config.prewarm_timeout_s,
            max_connections=concurrency,
            # openai_json stores the body, text stores part of it: either way a body
            # far above the payload limit cannot be stored.
            max_response_bytes=2 * config.max_payload_bytes + _MESSAGE_HEADROOM,
        )

    settings = PrewarmSettings(
        model=config.model_server_model,
        base_url=config.model_server_url,
        concurrency=config.prewarm_concurrency,
        max_requests=config.prewarm_max_requests,
        payload_format=PayloadFormat(config.prewarm_payload),
    )
    return Prewarmer(cache, pod, limits, settings, model_server, hits)


def build_kv(config: Config, stores: Stores) -> KvHotTier:
    """The KV hot tier; its pool (and torch) comes with the first attachment."""
    device, shm_dir = config.kv_device, config.kv_shm_dir

    def make_pool(num_slots: int, slot_bytes: int) -> SlotPool:
        from sidecar.tiers.kv_pool import create_pool  # imports torch: only when needed

        return create_pool(device, num_slots, slot_bytes, shm_dir)

    warm = None
    if isinstance(stores.warm, RedisWarmTier):
        warm = RedisKvWarmStore(
            stores.warm.client,
            key_prefix=config.redis_key_prefix,
            timeout_s=config.write_timeout_ms / 1000,
        )
    settings = KvSettings(
        pool_bytes=config.kv_pool_bytes,
        slot_bytes=config.kv_slot_bytes,
        promote_timeout_ms=config.kv_promote_timeout_ms,
        warm_ttl_s=config.kv_warm_ttl_s,
        default_lease_ms=config.kv_lease_ttl_ms,
        max_lease_ms=config.kv_max_lease_ttl_ms,
        max_chain_blocks=config.kv_max_chain_blocks,
    )
    return KvHotTier(settings, make_pool, warm)


@dataclass(slots=True)
class RunningServer:
    """Started servers, their background tasks, and what must be closed after them."""

    server: grpc.aio.Server
    admin_server: grpc.aio.Server | None
    health: health.HealthServicer
    cache: ResultCache
    stores: Stores
    freshness: Freshness
    policy: PolicyWatcher
    tasks: list[asyncio.Task[None]]
    ports: list[int]
    admin_ports: list[int]
    rpc_stats: RpcStats = field(default_factory=RpcStats)
    telemetry: TelemetrySetup | None = None
    """Set when start_server configured telemetry itself (then stop shuts it down)."""
    kv: KvHotTier | None = None

    @property
    def metrics_port(self) -> int | None:
        """The bound port of /metrics, when start_server serves it."""
        return self.telemetry.metrics_port if self.telemetry else None

    async def stop(self, grace_s: float) -> None:
        """NOT_SERVING, leave the fleet, drain in-flight RPCs within grace_s, close stores."""
        self.health.enter_graceful_shutdown()
        try:
            await self.stores.control.leave(self.freshness.member_id)
        except TierUnavailable as exc:
            log.warning("leave_failed", error=str(exc))
        stops = [self.server.stop(grace_s)]
        if self.admin_server is not None:
            stops.append(self.admin_server.stop(grace_s))
        await asyncio.gather(*stops)
        # Cancel until done: a cancellation can be lost inside a Redis call (Python
        # 3.11's asyncio.wait_for, which redis-py uses, drops it when the awaited I/O
        # finishes at the same moment), and the loop would then run on forever.
        while pending := [t for t in self.tasks if not t.done()]:
            for t in pending:
                t.cancel()
            await asyncio.wait(pending, timeout=0.2)
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.cache.drain()
        if self.cache.hits is not None:
            await self.cache.hits.close()
        if self.kv is not None:
            await self.kv.close()
        await self.stores.control.close()
        await self.stores.warm.close()
        if self.telemetry is not None:
            # Exporters flush on shutdown (blocking I/O): off the event loop.
            await asyncio.to_thread(self.telemetry.shutdown)


def _grpc_server(max_message: int) -> grpc.aio.Server:
    return grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", max_message),
            ("grpc.max_send_message_length", max(max_message, 64 * 1024 * 1024)),
            ("grpc.so_reuseport", 0),
        ]
    )


def _listen(server: grpc.aio.Server, addresses: tuple[str, ...]) -> list[int]:
    ports = []
    for addr in addresses:
        try:
            ports.append(server.add_insecure_port(addr))
        except RuntimeError as exc:
            raise OSError(f"cannot listen on {addr}: {exc}") from exc
    return ports


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
            metrics_listen=config.metrics_listen,
            tenants_in_clear=config.telemetry_tenants_in_clear,
        )
        telemetry = setup.telemetry
    try:
        return await _start(config, pod, telemetry, setup, started, policy)
    except BaseException:
        if setup is not None:
            setup.shutdown()
        raise


async def _start(
    config: Config,
    pod: PodIdentity,
    telemetry: Telemetry,
    setup: TelemetrySetup | None,
    started: float,
    policy: PolicyWatcher,
) -> RunningServer:
    stores = build_stores(config)
    rules = RuleSet()
    freshness = Freshness(stores.control, rules, bound_s=config.freshness_bound_ms / 1000)
    try:
        await freshness.refresh()
    except TierUnavailable as exc:
        # Serve anyway: lookups degrade to MISS until the store answers.
        log.warning("initial_refresh_failed", error=str(exc))
    cache = build_cache(
        config, stores, freshness, await lease_signer(config, stores.control), policy.holder
    )
    hits = build_hit_store(config, stores)
    if config.hit_sample_rate > 0:
        cache.hits = HitRecorder(hits, cache.retains_inputs, sample_rate=config.hit_sample_rate)

    rpc_stats = RpcStats()
    usage = TierUsageMonitor(cache.hot, stores.warm)
    register_metrics(telemetry.meter, cache.stats, usage.current)
    if setup is not None and setup.registry is not None:
        setup.registry.register(RpcDurationCollector(rpc_stats))

    server = _grpc_server(config.max_payload_bytes + _MESSAGE_HEADROOM)
    limits = KeyLimits(max_input_bytes=config.max_input_bytes)
    servicer = CacheServicer(
        cache,
        limits=limits,
        max_batch=config.max_batch,
        pod=pod,
        observer=RpcObserver(cache_api.SERVICE, telemetry, rpc_stats),
        streams=StreamSettings(
            StreamLimits(
                config.max_payload_bytes, config.max_chunks, config.stream_idle_timeout_ms / 1000
            ),
            buffer_max_bytes=config.stream_buffer_max_bytes,
            replay_max_gap_ms=config.replay_max_gap_ms,
            evict_rejected=config.evict_rejected,
        ),
    )
    cache_pb2_grpc.add_CacheServiceServicer_to_server(servicer, server)
    kv = build_kv(config, stores) if config.kv_enabled else None
    data_services = [CACHE_SERVICE]
    if kv is not None:
        kv_observer = RpcObserver(kv_api.SERVICE, telemetry, rpc_stats)
        kv_pb2_grpc.add_KvCacheServiceServicer_to_server(KvServicer(kv, kv_observer), server)
        register_kv_metrics(telemetry.meter, kv.stats)
        data_services.append(KV_SERVICE)
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (*data_services, health.SERVICE_NAME, reflection.SERVICE_NAME), server
    )
    ports = _listen(server, config.listen)

    admin_server: grpc.aio.Server | None = None
    admin_ports: list[int] = []
    if config.admin_listen:
        auth = AdminAuth(config.admin_tokens)
        if not auth.enabled:
            log.warning("admin_without_tokens", detail="every admin call will be UNAUTHENTICATED")
        # Prewarm carries a file's requests inline: the one large admin message.
        admin_server = _grpc_server(max(_MESSAGE_HEADROOM, config.prewarm_max_message_bytes))
        invalidator = Invalidator(stores.control, freshness, stores.warm, cache.stats)
        prewarmer = build_prewarmer(config, cache, pod, limits, hits)
        admin_servicer = AdminServicer(
            invalidator,
            auth,
            cache.stats,
            prewarmer,
            tiers=usage.current,
            observer=RpcObserver(admin_api.SERVICE, telemetry, rpc_stats),
            started=started,
        )
        admin_pb2_grpc.add_AdminServiceServicer_to_server(admin_servicer, admin_server)
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, admin_server)
        reflection.enable_server_reflection(
            (ADMIN_SERVICE, health.SERVICE_NAME, reflection.SERVICE_NAME), admin_server
        )
        admin_ports = _listen(admin_server, config.admin_listen)
        await admin_server.start()
    await server.start()

    reclaimer = Reclaimer(
        stores.warm,
        cache.hot,
        stores.control,
        rules,
        cache.stats,
        keys_per_s=config.reclaim_keys_per_s,
        rule_retention_s=config.max_ttl_s + config.lease_ttl_s + config.unleased_window_s + 60,
    )
    tasks = [
        asyncio.create_task(freshness.run_refresh_loop()),
        asyncio.create_task(reclaimer.run_forever()),
        asyncio.create_task(usage.run()),
        asyncio.create_task(policy.run_forever()),
    ]
    if stores.control.shared:
        tasks.append(asyncio.create_task(freshness.run_listener()))
    for name in ("", *data_services):
        health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    log.info(
        "serving",
        listen=list(config.listen),
        ports=ports,
        admin_ports=admin_ports,
        metrics_port=setup.metrics_port if setup else None,
        tracing=telemetry.tracing,
        warm_tier=stores.warm.name,
        member_id=freshness.member_id,
        model_version=pod.model_version or None,
    )
    return RunningServer(
        server,
        admin_server,
        health_servicer,
        cache,
        stores,
        freshness,
        policy,
        tasks,
        ports,
        admin_ports,
        rpc_stats,
        setup,
        kv,
    )


async def identify_pod(config: Config) -> PodIdentity:
    """Fingerprint the configured model and adapters (on worker threads)."""
    if not config.model_path and not config.adapters:
        return PodIdentity(allow_foreign_store=config.allow_foreign_model_store)
    cache_file = config.fingerprint_cache_file
    model = ""
    if config.model_path:
        fp = await fingerprint_async(
            config.model_path, mode=config.fingerprint_mode, cache_file=cache_file
        )
        log.info(
            "model_fingerprint",
            fingerprint=fp.value,
            path=config.model_path,
            mode=fp.mode,
            components=fp.components(),
            tensors=fp.tensors,
        )
        model = fp.value
    adapters: dict[str, str] = {}
    for name, path in config.adapters.items():
        afp = await fingerprint_async(
            path, kind="adapter", mode=config.fingerprint_mode, cache_file=cache_file
        )
        log.info("adapter_fingerprint", adapter=name, fingerprint=afp.value, path=path)
        adapters[name] = afp.value
    return PodIdentity(model, adapters, config.allow_foreign_model_store)


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
    log.info("draining", grace_period_s=config.grace_period_s)
    await running.stop(config.grace_period_s)
    log.info("stopped")
    return 0
