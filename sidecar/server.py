"""Assembles tiers, cache and gRPC services, and runs them until SIGTERM."""

from __future__ import annotations

import asyncio
import signal
from dataclasses import dataclass

import grpc
import structlog
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from infercache.v1 import cache_pb2, cache_pb2_grpc

from sidecar.api.servicer import CacheServicer, PodIdentity
from sidecar.cache import ResultCache, TtlPolicy
from sidecar.config import Config
from sidecar.keys import KeyLimits
from sidecar.tiers.base import WarmTier
from sidecar.tiers.embedded import EmbeddedWarmTier
from sidecar.tiers.hot import HotTier
from sidecar.tiers.redis import RedisWarmTier

log = structlog.get_logger("infercache.server")

CACHE_SERVICE = cache_pb2.DESCRIPTOR.services_by_name["CacheService"].full_name
# gRPC framing and the other fields of a Store need room beyond the payload itself.
_MESSAGE_HEADROOM = 1024 * 1024


def build_warm_tier(config: Config) -> WarmTier:
    """Redis when a URL is configured, otherwise the embedded in-process tier."""
    if config.redis_url:
        return RedisWarmTier(
            config.redis_url,
            key_prefix=config.redis_key_prefix,
            read_timeout_s=config.lookup_timeout_ms / 1000,
            write_timeout_s=config.write_timeout_ms / 1000,
        )
    return EmbeddedWarmTier(config.embedded_max_bytes, config.embedded_max_entries)


def build_cache(config: Config, warm: WarmTier) -> ResultCache:
    """The result cache with the configured budgets and TTL policy."""
    return ResultCache(
        HotTier(config.hot_max_bytes, config.hot_max_entries),
        warm,
        ttl=TtlPolicy(config.default_ttl_s, config.max_ttl_s, dict(config.tenant_max_ttl_s)),
        max_payload_bytes=config.max_payload_bytes,
    )


@dataclass(slots=True)
class RunningServer:
    """A started server and what must be closed after it stops."""

    server: grpc.aio.Server
    health: health.HealthServicer
    cache: ResultCache
    ports: list[int]

    async def stop(self, grace_s: float) -> None:
        """Report NOT_SERVING, let in-flight RPCs finish within grace_s, then close tiers."""
        self.health.enter_graceful_shutdown()
        await self.server.stop(grace_s)
        await self.cache.drain()
        await self.cache.warm.close()


async def start_server(config: Config, pod: PodIdentity | None = None) -> RunningServer:
    """Build and start the gRPC server on every configured address."""
    pod = pod or PodIdentity()
    max_message = config.max_payload_bytes + _MESSAGE_HEADROOM
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", max_message),
            ("grpc.max_send_message_length", max(max_message, 64 * 1024 * 1024)),
            ("grpc.so_reuseport", 0),
        ]
    )
    warm = build_warm_tier(config)
    cache = build_cache(config, warm)
    limits = KeyLimits(max_input_bytes=config.max_input_bytes)
    servicer = CacheServicer(cache, limits=limits, max_batch=config.max_batch, pod=pod)
    cache_pb2_grpc.add_CacheServiceServicer_to_server(servicer, server)
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (CACHE_SERVICE, health.SERVICE_NAME, reflection.SERVICE_NAME), server
    )
    ports = []
    for addr in config.listen:
        try:
            port = server.add_insecure_port(addr)
        except RuntimeError as exc:
            raise OSError(f"cannot listen on {addr}: {exc}") from exc
        ports.append(port)
    await server.start()
    for name in ("", CACHE_SERVICE):
        health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    log.info(
        "serving",
        listen=list(config.listen),
        ports=ports,
        warm_tier=warm.name,
        model_version=pod.model_version or None,
    )
    return RunningServer(server, health_servicer, cache, ports)


async def serve(config: Config, pod: PodIdentity | None = None) -> int:
    """Run until SIGTERM or SIGINT, then drain for the grace period and return 0."""
    running = await start_server(config, pod)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("draining", grace_period_s=config.grace_period_s)
    await running.stop(config.grace_period_s)
    log.info("stopped")
    return 0
