"""The stores a sidecar keeps its entries and control state in, decided once: Redis
when a URL is configured (one client shared by the warm tier, the control store,
hit records and KV warm blocks), otherwise the embedded in-process stores."""

from __future__ import annotations

from dataclasses import dataclass

import structlog

from sidecar.backends.embedded_holding import EmbeddedHolding
from sidecar.backends.redis.backend import RedisBackend, connect
from sidecar.backends.redis.connect import RedisOptions, probe
from sidecar.backends.redis.control import RedisControlStore
from sidecar.backends.redis.deadline import CAP_FACTOR
from sidecar.backends.redis.verify_audit import RedisEventLog
from sidecar.backends.redis.warm import RedisWarmTier
from sidecar.config import Config
from sidecar.invalidation.embedded_store import EmbeddedControlStore
from sidecar.invalidation.store import ControlStore
from sidecar.macs import LOCAL, FleetKeys
from sidecar.tiers.base import HoldingStore, WarmTier
from sidecar.tiers.embedded import EmbeddedWarmTier
from sidecar.verification.audit import EventWriter

log = structlog.get_logger("infercache.app")

# The start's PING may pay a TLS handshake and an AUTH on a loaded machine: it is
# given far longer than a lookup, so a slow start is not taken for a refusal.
PROBE_TIMEOUT_S = 5.0


@dataclass(slots=True)
class Stores:
    """The warm tier and the control store, sharing one Redis client when Redis is used."""

    warm: WarmTier
    control: ControlStore
    redis: RedisBackend | None = None
    """The shared Redis (one server or a cluster) when the stores are on Redis: decided
    once, here."""
    options: RedisOptions | None = None
    """How that client reaches Redis (URL, credentials, TLS), for clients made later."""
    holding: HoldingStore | None = None
    """The warm tier and the control store's holder keys changed together (one Redis,
    or the embedded pair); None on a Redis Cluster (see tiers/base.py HoldingStore)."""

    async def close(self) -> None:
        """Close the stores, then the shared client."""
        await self.control.close()
        await self.warm.close()
        if self.redis is not None:
            await self.redis.aclose()


def build_stores(config: Config, fleet: FleetKeys = LOCAL) -> Stores:
    """Redis when a URL is configured, otherwise the embedded in-process stores.
    `fleet`: the keys that sign and verify what the control store holds (rules, audit)."""
    if config.redis.url:
        options = RedisOptions.from_config(config.redis)
        read_s, write_s = (
            config.redis.lookup_timeout_ms / 1000,
            config.redis.write_timeout_ms / 1000,
        )
        # One client for every store, made here from the options (credentials, TLS);
        # the stores do not own it, Stores.close closes it. Its own timeouts are only a
        # net under the stores' guards, as long as the longest of them (the control
        # store's patient deadline, see backends/redis/deadline.py).
        net_s = write_s * CAP_FACTOR
        client = connect(options, connect_timeout_s=net_s, socket_timeout_s=net_s)
        warm = RedisWarmTier(
            options.url,
            key_prefix=config.redis.key_prefix,
            read_timeout_s=read_s,
            write_timeout_s=write_s,
            client=client,
        )
        control = RedisControlStore(
            options.url,
            key_prefix=config.redis.key_prefix,
            timeout_s=config.redis.write_timeout_ms / 1000,
            lookup_timeout_s=config.redis.lookup_timeout_ms / 1000,
            client=warm.client,
            fleet=fleet,
        )
        return Stores(warm, control, warm.client, options, warm.holding)
    embedded_control = EmbeddedControlStore()
    embedded_warm = EmbeddedWarmTier(
        config.tiers.embedded_max_bytes,
        config.tiers.embedded_max_entries,
        epoch_source=embedded_control.epoch_now,
    )
    holding = EmbeddedHolding(embedded_warm, embedded_control)
    return Stores(embedded_warm, embedded_control, holding=holding)


async def probe_stores(stores: Stores, config: Config) -> None:
    """At start, PING Redis once on a client of its own: ConfigError (naming the setting)
    when Redis refuses us for good (credentials, ACL, TLS); a warning when it is only
    down or slow, and the sidecar serves degraded as it always does."""
    if stores.options is None:
        return
    client = connect(
        stores.options, connect_timeout_s=PROBE_TIMEOUT_S, socket_timeout_s=PROBE_TIMEOUT_S
    )
    try:
        problem = await probe(client.redis, stores.options, PROBE_TIMEOUT_S)
    finally:
        await client.aclose()
    if problem is not None:
        log.warning("redis_unreachable_at_start", error=problem)


def build_audit(
    config: Config, stores: Stores, fleet: FleetKeys, member_id: str
) -> EventWriter | None:
    """The durable log of verification events, as `member_id`: the fleet's Redis, signed
    with its secret; None for the embedded store (events stay in the ledger's memory)."""
    if stores.redis is None:
        return None
    log = RedisEventLog(
        stores.redis,
        key_prefix=config.redis.key_prefix,
        timeout_s=config.redis.write_timeout_ms / 1000,
        keys=fleet,
    )
    return EventWriter(log, member_id)
