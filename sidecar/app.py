"""The composition root: builds every part of a sidecar from its Config, once.

Nothing here serves anything: `sidecar.server` puts the built parts behind gRPC.
The backend (Redis or the embedded stores) is decided once, in
backends/stores.py's build_stores.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog

from sidecar.api.cache_codec import key_request_from_record
from sidecar.app_kv import build_kv
from sidecar.backends.redis.hits import RedisHitStore
from sidecar.backends.stores import Stores, build_audit, build_stores, probe_stores
from sidecar.config import Config
from sidecar.errors import TierUnavailable
from sidecar.events.setup import KvEvents, open_kv_events
from sidecar.fleet import fleet_keys, lease_signer, readopt_secret
from sidecar.identity.cell import IdentityCell
from sidecar.identity.measure import identify_pod as measure_pod
from sidecar.identity.measure import identity_watcher
from sidecar.identity.pod import PodIdentity
from sidecar.identity.resolver import KeyResolver
from sidecar.identity.watch import IdentityWatcher
from sidecar.invalidation.freshness import Freshness
from sidecar.invalidation.invalidator import Durability, Invalidator
from sidecar.invalidation.reclaim import Reclaimer
from sidecar.invalidation.rules import RuleSet
from sidecar.keys import KeyLimits
from sidecar.kv.domains import KvDomains
from sidecar.macs import FleetKeys
from sidecar.observability.metrics import (
    register_event_metrics,
    register_kv_metrics,
    register_metrics,
    register_verification_metrics,
)
from sidecar.observability.stats import CacheStats, RpcStats
from sidecar.observability.telemetry import Telemetry
from sidecar.observability.usage import TierUsageMonitor
from sidecar.policy.cacheability import PolicyHolder
from sidecar.policy.file import PolicyBounds
from sidecar.policy.ttl import TtlPolicy
from sidecar.policy.watch import PolicyWatcher
from sidecar.prewarm.embedded_hits import EmbeddedHitStore
from sidecar.prewarm.hits import HitRecorder, HitStore
from sidecar.prewarm.runner import Prewarmer, PrewarmSettings
from sidecar.prewarm.upstream import HttpModelServer, ModelServer
from sidecar.results.cache import ResultCache, wall_clock_ms
from sidecar.results.lease_tokens import LeaseSigner
from sidecar.results.parts import CacheAdmission, CacheSettings, CacheTiers, CacheWatchers
from sidecar.results.types import LookupObserver
from sidecar.shadow.build import build_shadow
from sidecar.shadow.data_plane import DataPlaneVerifier
from sidecar.shadow.runner import ShadowRunner
from sidecar.tiers.hot import HotTier
from sidecar.verification.audit import EventWriter
from sidecar.verification.ledger import check_rows, metric_rows
from sidecar.wire.openai.cache_salt import TenantSalts

log = structlog.get_logger("infercache.app")

# gRPC framing and the other fields of a Store need room beyond the payload itself.
MESSAGE_HEADROOM = 1024 * 1024


def policy_watcher(config: Config) -> PolicyWatcher:
    """The watcher of the configured policy file (built-in policy when there is none)."""
    bounds = PolicyBounds.from_config(config)
    return PolicyWatcher(PolicyHolder(), config.policy.file, bounds, config.policy.poll_ms)


def build_cache(
    config: Config,
    stores: Stores,
    freshness: Freshness,
    signer: LeaseSigner,
    admission: CacheAdmission,
    observers: Sequence[LookupObserver],
) -> ResultCache:
    """The result cache with the configured tiers, budgets, TTL and lease settings;
    `observers` see every lookup call after its counters (e.g. the prewarm HitRecorder)."""
    return ResultCache(
        CacheTiers(
            HotTier(config.tiers.hot_max_bytes, config.tiers.hot_max_entries),
            stores.warm,
            holding=stores.holding,
        ),
        CacheSettings(
            TtlPolicy.from_config(config.ttl),
            max_payload_bytes=config.limits.max_payload_bytes,
            max_chunks=config.limits.max_chunks,
            leases=config.lease,
        ),
        freshness=freshness,
        signer=signer,
        watchers=CacheWatchers(
            CacheStats(config.telemetry.metrics_max_model_versions), tuple(observers)
        ),
        admission=admission,
        clock_ms=wall_clock_ms,
    )


def build_hit_store(config: Config, stores: Stores, fleet: FleetKeys) -> HitStore:
    """Hit rankings next to the entries: in the fleet's Redis, or in process memory."""
    if stores.redis is not None:
        return RedisHitStore(
            stores.redis,
            key_prefix=config.redis.key_prefix,
            max_per_version=config.hits.record_max_per_version,
            ttl_ms=config.hits.record_ttl_s * 1000,
            timeout_s=config.redis.write_timeout_ms / 1000,
            keys=fleet,
        )
    return EmbeddedHitStore(
        max_per_version=config.hits.record_max_per_version, ttl_ms=config.hits.record_ttl_s * 1000
    )


def build_prewarmer(
    config: Config,
    cache: ResultCache,
    keys: KeyResolver,
    hits: HitStore,
    recorder: HitRecorder | None = None,
    salts: TenantSalts | None = None,
) -> Prewarmer:
    """The prewarm runner for this pod, talking to the configured model server."""

    def model_server(concurrency: int) -> ModelServer:
        return HttpModelServer(
            config.prewarm.model_server_url,
            timeout_s=config.prewarm.timeout_s,
            max_connections=concurrency,
            # openai_json stores the body, text stores part of it: either way a body
            # far above the payload limit cannot be stored.
            max_response_bytes=2 * config.limits.max_payload_bytes + MESSAGE_HEADROOM,
            api_key=config.gateway.upstream_api_key,
        )

    settings = PrewarmSettings.from_config(config.prewarm)
    return Prewarmer(
        cache, keys, settings, model_server, hits, key_request_from_record, recorder, salts
    )


@dataclass(slots=True)
class App:
    """Every built part of one sidecar, before any of it is served."""

    config: Config
    identity: IdentityCell
    """The pod's identity now (`identity.pod`), re-measured by `watcher`."""
    watcher: IdentityWatcher
    telemetry: Telemetry
    policy: PolicyWatcher
    stores: Stores
    rules: RuleSet
    freshness: Freshness
    cache: ResultCache
    hits: HitStore
    recorder: HitRecorder | None
    """Counts the cache's hits into `hits` for prewarm (None when INFERCACHE_HIT_SKETCH_SIZE=0)."""
    usage: TierUsageMonitor
    limits: KeyLimits
    keys: KeyResolver
    """The pod's key resolver: every entry point builds its keys with it."""
    kv: KvDomains | None
    invalidator: Invalidator
    prewarmer: Prewarmer
    reclaimer: Reclaimer
    started: float
    salts: TenantSalts
    """Each tenant's cache_salt in what the gateway and prewarm send the model server."""
    shadow: ShadowRunner
    """Shadow verification: its ledger (`shadow.ledger`, also the cache's quarantine
    screen) and its calls to the model server."""
    data_verifier: DataPlaneVerifier | None = None
    """Samples gRPC hits into shadow checks (None unless INFERCACHE_VERIFY_DATA_PLANE)."""
    audit: EventWriter | None = None
    kv_events: KvEvents | None = None
    """Publishes the KV tiers' blocks (None unless INFERCACHE_KV_EVENTS_ENDPOINT)."""
    """Writes verification events to the fleet's durable log (None: embedded store)."""
    rpc_stats: RpcStats = field(default_factory=RpcStats)

    def background(self) -> list[Callable[[], Coroutine[Any, Any, None]]]:
        """The loops that run for the sidecar's lifetime (the server starts them)."""
        loops: list[Callable[[], Coroutine[Any, Any, None]]] = [
            self.freshness.run_refresh_loop,
            self.reclaimer.run_forever,
            self.usage.run,
            self.policy.run_forever,
        ]
        if self.watcher.enabled:
            loops.append(self.watcher.run_forever)
        if self.stores.control.shared:
            loops.append(self.freshness.run_listener)
        if self.recorder is not None:
            interval_s = self.config.hits.merge_interval_ms / 1000
            loops.append(functools.partial(self.recorder.run_merge_loop, interval_s))
        return loops

    async def close(self) -> None:
        """Flush and close what the parts own (after serving has stopped)."""
        await self.shadow.close()
        if self.audit is not None:
            await self.audit.close()  # the last events in before the store closes
        await self.cache.drain()
        if self.recorder is not None:
            await self.recorder.close()  # the last counts go in: the next version reads them
        if self.kv is not None:
            await self.kv.close()
        if self.kv_events is not None:
            await self.kv_events.close()
        await self.stores.close()


async def build_app(
    config: Config,
    pod: PodIdentity,
    telemetry: Telemetry,
    policy: PolicyWatcher,
    *,
    rules: RuleSet | None = None,
    started: float | None = None,
) -> App:
    """Build every part from config. `rules`: a rule set to use (benches inject one)."""
    started = time.monotonic() if started is None else started
    fleet = fleet_keys(config)  # before connecting: a bad secret file fails at once
    stores = build_stores(config, fleet)
    await probe_stores(stores, config)  # ConfigError when Redis refuses us for good
    identity = IdentityCell(pod)
    rules = RuleSet() if rules is None else rules
    # Rules must outlive every entry they can kill: its TTL plus the lease windows.
    retention_s = config.ttl.max_ttl_s + config.lease.ttl_s + config.lease.unleased_window_s + 60
    freshness = Freshness(
        stores.control,
        rules,
        bound_s=config.invalidation.freshness_bound_ms / 1000,
        retention_ms=retention_s * 1000,
        keys=fleet,
        min_epoch=config.fleet.min_epoch,
    )
    try:
        await freshness.refresh()
    except TierUnavailable as exc:
        # Serve anyway: lookups degrade to MISS until the store answers.
        log.warning("initial_refresh_failed", error=str(exc))
    hits = build_hit_store(config, stores, fleet)
    recorder = None
    if config.hits.sketch_size > 0:
        recorder = HitRecorder(
            hits, policy.holder.retains_inputs, sketch_size=config.hits.sketch_size
        )
    signer = await lease_signer(config, stores.control, fleet)
    if not config.lease.secret and not config.fleet.secret_file and stores.control.shared:
        freshness.on_data_set_lost.append(functools.partial(readopt_secret, signer, stores.control))
    cache = build_cache(
        config,
        stores,
        freshness,
        signer,
        CacheAdmission(policy.holder, identity),
        observers=() if recorder is None else (recorder,),
    )
    audit = build_audit(config, stores, fleet, freshness.member_id)
    shadow = build_shadow(config, lambda: rules.epoch, cache.clock_ms, audit)
    cache.verification = shadow.ledger
    register_verification_metrics(
        telemetry.meter,
        lambda: metric_rows(shadow.ledger, cache.stats.version),
        lambda: check_rows(shadow.ledger, cache.stats.version),
    )
    usage = TierUsageMonitor(cache.hot, stores.warm)
    register_metrics(telemetry.meter, cache.stats, usage.current)
    register_event_metrics(telemetry.meter, "identity", identity.stats)
    register_event_metrics(telemetry.meter, "rules", freshness.trust)
    limits = KeyLimits(max_input_bytes=config.limits.max_input_bytes)
    keys = KeyResolver(identity, limits)
    kv_events = await open_kv_events(config.kv) if config.kv.enabled else None
    kv = build_kv(config, stores, identity, fleet, kv_events) if config.kv.enabled else None
    if kv is not None:
        register_kv_metrics(telemetry.meter, kv.stats)
    if kv_events is not None:
        register_event_metrics(telemetry.meter, "kv_event_publisher", kv_events.publisher.stats)
    reclaimer = Reclaimer(
        stores.warm,
        cache.hot,
        stores.control,
        rules,
        cache.stats,
        keys_per_s=config.invalidation.reclaim_keys_per_s,
        rule_retention_s=retention_s,
    )
    # Derived from the fleet secret: every sidecar of a fleet salts a tenant alike, so
    # the engine and the warm tier reuse a tenant's prefix blocks fleet-wide.
    salts = TenantSalts(fleet.derived("tenant-salt"))
    return App(
        config=config,
        identity=identity,
        watcher=identity_watcher(config.identity, identity),
        telemetry=telemetry,
        policy=policy,
        stores=stores,
        rules=rules,
        freshness=freshness,
        cache=cache,
        hits=hits,
        recorder=recorder,
        usage=usage,
        limits=limits,
        keys=keys,
        kv=kv,
        invalidator=Invalidator(
            stores.control,
            freshness,
            stores.warm,
            cache.stats,
            identity,
            Durability(
                config.invalidation.invalidate_wait_replicas,
                config.invalidation.invalidate_wait_aof,
                config.invalidation.invalidate_wait_timeout_ms,
            ),
        ),
        prewarmer=build_prewarmer(config, cache, keys, hits, recorder, salts),
        reclaimer=reclaimer,
        started=started,
        salts=salts,
        shadow=shadow,
        audit=audit,
        kv_events=kv_events,
        data_verifier=(
            DataPlaneVerifier(shadow, hits, cache.tenant_policy)
            if config.verify.data_plane
            else None
        ),
    )


async def identify_pod(config: Config) -> PodIdentity:
    """Fingerprint the configured model and adapters (on worker threads)."""
    return await measure_pod(config.identity)
