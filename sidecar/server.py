"""The gRPC planes of a built App: data plane, admin plane and health listener, with
health, reflection and a graceful stop. The host (sidecar/host.py) starts them as a peer
of the HTTP gateway."""

from __future__ import annotations

import asyncio
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
from sidecar.api.kv_servicer import KvServicer
from sidecar.api.listeners import admin_credentials, listen
from sidecar.api.observe import RpcObserver
from sidecar.api.streams import StreamSettings
from sidecar.app import MESSAGE_HEADROOM, App
from sidecar.config import Config
from sidecar.keys import KeyLimits

log = structlog.get_logger("infercache.server")

CACHE_SERVICE = cache_pb2.DESCRIPTOR.services_by_name["CacheService"].full_name
KV_SERVICE = kv_pb2.DESCRIPTOR.services_by_name["KvCacheService"].full_name
ADMIN_SERVICE = admin_pb2.DESCRIPTOR.services_by_name["AdminService"].full_name


@dataclass(slots=True)
class GrpcPlanes:
    """The started gRPC servers of one App and their bound ports."""

    server: grpc.aio.Server
    admin_server: grpc.aio.Server | None
    health: health.aio.HealthServicer
    services: list[str]
    """The data plane's services, reported SERVING by `serving`."""
    ports: list[int]
    admin_ports: list[int]
    health_server: grpc.aio.Server | None = None
    """The health-only listener (INFERCACHE_HEALTH_LISTEN), when configured."""
    health_ports: list[int] = field(default_factory=list)

    async def serving(self) -> None:
        """Report SERVING for the server and each data-plane service."""
        for name in ("", *self.services):
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)

    async def stop(self, grace_s: float) -> None:
        """Stop every listener, draining in-flight RPCs within grace_s."""
        servers = (self.server, self.admin_server, self.health_server)
        await asyncio.gather(*(s.stop(grace_s) for s in servers if s is not None))


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


async def start_grpc(app: App) -> GrpcPlanes:
    """Put a built App behind its gRPC listeners and start them (NOT_SERVING until
    `serving`)."""
    config, telemetry, cache = app.config, app.telemetry, app.cache
    server = _grpc_server(data_plane_max_message(config))
    servicer = CacheServicer(
        cache,
        max_batch=config.limits.max_batch,
        keys=app.keys,
        observer=RpcObserver(cache_api.SERVICE, telemetry, app.rpc_stats),
        streams=StreamSettings.from_config(config),
        recorder=app.recorder,
        verifier=app.data_verifier,
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
            verification=app.shadow.ledger,
            verification_log=None if app.audit is None else app.audit.log,
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
    return GrpcPlanes(
        server,
        admin_server,
        health_servicer,
        data_services,
        ports,
        admin_ports,
        health_server,
        health_ports,
    )
