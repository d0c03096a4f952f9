"""The composition root's KV part: the hot tiers of the trust domains, their warm
tier and the KV event publisher they report to."""

from __future__ import annotations

import structlog

from sidecar.backends.redis.kv_warm import RedisKvWarmStore
from sidecar.backends.stores import Stores
from sidecar.config import Config
from sidecar.events.setup import KvEvents
from sidecar.identity.cell import IdentityCell
from sidecar.kv.domains import KvDomains, build_domains
from sidecar.kv.generations import SharedGenerations
from sidecar.kv.hot_tier import KvHotTier
from sidecar.kv.movement import KvStats
from sidecar.kv.pool import SlotPool
from sidecar.kv.pool_files import remove_stale
from sidecar.kv.preload import TorchPreload
from sidecar.macs import FleetKeys

log = structlog.get_logger("infercache.app")


def build_kv(
    config: Config,
    stores: Stores,
    identity: IdentityCell,
    fleet: FleetKeys,
    events: KvEvents | None = None,
) -> KvDomains:
    """The KV hot tier, one per trust domain (kv/domains.py); torch starts loading now
    (see kv/preload.py), a domain's pool comes with its first attachment. It accepts
    attachments of the pod's own model only (the fingerprint in force now), when the pod
    knows its fingerprint; `events` hears of its blocks (KV event publisher)."""
    device = config.kv.device
    torch = TorchPreload()
    stats = KvStats()

    warm = None
    if stores.redis is not None:
        warm = RedisKvWarmStore(
            stores.redis,
            key_prefix=config.redis.key_prefix,
            timeout_s=config.redis.write_timeout_ms / 1000,
            keys=fleet,
        )

    def sweep(directory: str) -> None:
        # A killed predecessor's pool (1 GiB by default) would otherwise stay in the volume.
        for path, size in remove_stale(directory):
            log.warning("kv_stale_pool_file_removed", path=path, bytes=size)

    def make_tier(directory: str) -> KvHotTier:
        sweep(directory)

        def make_pool(num_slots: int, slot_bytes: int) -> SlotPool:
            return torch.create_pool(device, num_slots, slot_bytes, directory)

        return KvHotTier(
            config.kv.to_settings(),
            make_pool,
            warm,
            generations=lambda num_slots: SharedGenerations(num_slots, directory),
            pod_fingerprint=lambda: identity.pod.model_version,
            allow_foreign=identity.pod.allow_foreign_store,
            doubt=identity.refuse_doubt,
            stats=stats,
            keys=fleet,
            events=events.recorder if events is not None else None,
        )

    if config.kv.trust_domains:  # a previous run without domains kept its pool here
        sweep(config.kv.shm_dir)
    return build_domains(config.kv.trust_domains, config.kv.shm_dir, make_tier, stats)
